"""What the static checks share: a Finding, a Check, and the fabric's paths as they see them
(the hops of every host-to-host path, a port's link and peer). rocelab.fabric.lint (the switch
checks) and rocelab.fabric.hostlint (the hosts' NICs) both build on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rocelab.fabric.spec import Device, FabricSpec
from rocelab.model.topology import Link, Port
from rocelab.units import PROPAGATION_M_PER_S


@dataclass(frozen=True)
class Finding:
    """One thing wrong on one device: what, where, configured vs required, and the source."""

    check: str
    device: str
    port: str | None  # "Ethernet8 (eth3)": the device's name for it, then rocelab's
    priority: int | None
    what: str
    configured: str
    required: str
    source: str

    def __str__(self) -> str:
        where = self.device
        if self.port:
            where += f" {self.port}"
        if self.priority is not None:
            where += f" priority {self.priority}"
        return (f"{where}: {self.what}: configured {self.configured}; required "
                f"{self.required}\n    from {self.source}")


@dataclass(frozen=True)
class Check:
    name: str
    summary: str
    run: Callable[[FabricSpec, Device], list[Finding]]
    # Why there is nothing to check on a device (reported as not applicable, never as passed);
    # None where there is.
    not_applicable: Callable[[FabricSpec, Device], str | None] = lambda spec, device: None


@dataclass(frozen=True)
class Hop:
    """A switch on a host-to-host path: where the packet enters and where it leaves."""

    node: str
    ingress: Port
    egress: Port


def bytes_text(n: float) -> str:
    return f"{n:,.0f} B"


def priorities_text(values: frozenset[int]) -> str:
    return "{" + ", ".join(map(str, sorted(values))) + "}" if values else "none"


def cabled(spec: FabricSpec, device: Device) -> list[Port]:
    return list(spec.fabric.node(device.name).ports)


def link_of(spec: FabricSpec, port: Port) -> Link:
    return spec.fabric.links[port.link]


def peer_label(spec: FabricSpec, port: Port) -> str:
    peer = spec.fabric.peer(port)
    if peer.node in spec.devices:
        return f"{peer.node}:{spec.devices[peer.node].port_name(peer.name)}"
    return f"{peer.node}:{peer.name}"


def hops(spec: FabricSpec) -> set[Hop]:
    """Every (switch, ingress, egress) on every ECMP path between every pair of hosts."""
    fabric = spec.fabric
    hops: set[Hop] = set()
    for src in fabric.hosts:
        for dst in fabric.hosts:
            if src is dst:
                continue
            subnet = dst.ports[0].address.network
            todo, seen = [fabric.peer(src.ports[0])], set()
            while todo:
                ingress = todo.pop()
                node = fabric.node(ingress.node)
                if not node.is_switch:
                    continue
                egress = [p for p in node.ports if p.address.network == subnet]
                if not egress:
                    route = next((r for r in node.routes if r.dst == subnet), None)
                    hops_out = route.nexthops if route else ()
                    egress = [fabric.port(node.name, h.port) for h in hops_out]
                for out in egress:
                    hop = Hop(node.name, ingress, out)
                    if hop not in seen:
                        seen.add(hop)
                        todo.append(fabric.peer(out))
            hops |= seen
    return hops


def port_number(port: Port) -> int:
    return int(port.name[3:])


def device_hops(spec: FabricSpec, device: Device) -> list[Hop]:
    return sorted((h for h in hops(spec) if h.node == device.name),
                  key=lambda h: (port_number(h.ingress), port_number(h.egress)))


def cable_m(link: Link) -> float:
    return link.cable_m if link.cable_m is not None else link.delay_s * PROPAGATION_M_PER_S
