"""The usual AI-fabric eBGP design, as config_db tables, for switches whose profile gives no BGP.

As RFC 7938 lays out a Clos fabric and SONiC, EOS and Cumulus deployments follow it: a private
AS number per leaf, one for the spine tier (so a leaf's routes reach another leaf over every
spine with the same AS path, and a spine never takes a path through another spine), eBGP on
every /31 fabric link, BFD on every session, short timers (FRR's datacenter profile: 3 s
keepalive, 9 s hold), Loopback0 as router ID and advertised, the hosts' subnets advertised by
their leaf. multipath-relax and maximum-paths come from SONiC's constants
(rocelab.routing.bgp.SONIC_CONSTANTS), as they do on a SONiC switch.

A lab.yml's `bgp:` (rocelab.routing.bgp.Design) may number each spine in its own AS instead, as
some fabrics do: then a leaf's two paths to another leaf differ in their AS path, and only
multipath-relax lets BGP use both.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Mapping

from rocelab.errors import InputError, Problem
from rocelab.fabric.spec import Device
from rocelab.model.lab import Lab
from rocelab.model.topology import HOST_POOL, Fabric, Node
from rocelab.paths import display
from rocelab.qos.ports import lab_to_sonic
from rocelab.qos.sonic import read_config_db
from rocelab.routing.bgp import BgpConfig, Design, has_bgp, read_bgp
from rocelab.routing.eos import INTERFACE_PEERING_IGNORED

SPINE_ASN = 65000  # the spine tier's
FIRST_SPINE_ASN = 64512  # spine_asn: per-spine, the first of RFC 6996's private range, below the leaves'
FIRST_LEAF_ASN = 65001
LAST_PRIVATE_2BYTE_ASN = 65534
FIRST_PRIVATE_4BYTE_ASN = 4200000000  # RFC 6996
# 198.19.0.0/24 is the one /24 of the host pool that resolve() never gives a host port: switch k
# (in file order) has Loopback0 198.19.0.k/32, here and on the NOS switches (rocelab.engines.nos).
LOOPBACKS = ipaddress.IPv4Network((HOST_POOL.network_address, 24))
MAX_SWITCHES = LOOPBACKS.num_addresses - 2
KEEPALIVE_S, HOLDTIME_S = 3, 9


def description(per_spine: bool) -> str:
    """What the generated design is, in the words `status` and the run's routing line use."""
    spines = "one per spine" if per_spine else "one for the spines"
    return f"generated: a private ASN per leaf, {spines}, eBGP on the /31s, multipath-relax, maximum-paths, BFD"


def leaf_asn(ordinal: int) -> int:
    asn = FIRST_LEAF_ASN + ordinal
    return asn if asn <= LAST_PRIVATE_2BYTE_ASN else FIRST_PRIVATE_4BYTE_ASN + ordinal


def asns(fabric: Fabric, per_spine: bool = False) -> dict[str, int]:
    leaves = [n.name for n in fabric.switches if n.role == "leaf"]
    spines = [n.name for n in fabric.switches if n.role == "spine"]
    return {n.name: (FIRST_SPINE_ASN + spines.index(n.name) if per_spine else SPINE_ASN) if n.role == "spine"
            else leaf_asn(leaves.index(n.name)) for n in fabric.switches}


def switch_number(fabric: Fabric, name: str) -> int:
    """k for the k-th switch in file order (1, 2, …)."""
    return 1 + [n.name for n in fabric.switches].index(name)


def loopback(fabric: Fabric, name: str) -> ipaddress.IPv4Interface:
    """Loopback0 of a switch: the BGP router ID. A fabric of more than MAX_SWITCHES has none
    for the switches beyond them (the engine refuses it before)."""
    return ipaddress.IPv4Interface((LOOPBACKS.network_address + switch_number(fabric, name), 32))


def generated(fabric: Fabric, node: Node, per_spine: bool = False) -> dict:
    """The switch's DEVICE_METADATA, LOOPBACK_INTERFACE, INTERFACE and BGP_NEIGHBOR tables."""
    asn = asns(fabric, per_spine)
    lo = loopback(fabric, node.name)
    interfaces: dict[str, dict] = {}
    neighbors: dict[str, dict] = {}
    for port in node.ports:
        sonic = lab_to_sonic(port.name)
        interfaces[sonic] = {}
        interfaces[f"{sonic}|{port.address}"] = {}
        peer = fabric.peer(port)
        if peer.node in asn:
            neighbors[str(peer.address.ip)] = {
                "asn": str(asn[peer.node]), "name": peer.node, "local_addr": str(port.address.ip),
                "keepalive": str(KEEPALIVE_S), "holdtime": str(HOLDTIME_S), "bfd": "true", "admin_status": "up"}
    return {"DEVICE_METADATA": {"localhost": {"hostname": node.name, "bgp_asn": str(asn[node.name]),
                                              "bgp_router_id": str(lo.ip)}},
            "LOOPBACK_INTERFACE": {"Loopback0": {}, f"Loopback0|{lo}": {}},
            "INTERFACE": interfaces, "BGP_NEIGHBOR": neighbors}


def frr_refusal(device: Device, node: Node) -> str | None:
    """Why FRR cannot run the device's own BGP (which it has); None: it can."""
    ports = _lab_ports(device, node)
    astray = [n.address for n in device.bgp.neighbors if n.unnumbered and n.address not in ports]
    if astray:
        return (f"{device.file}: {device.name}'s unnumbered sessions on {', '.join(astray)}: no port of the switch "
                f"in the topology, so FRR has no interface to peer on")
    if any(INTERFACE_PEERING_IGNORED in note for note in device.bgp.notes):
        return (f"{device.file}: {device.name}'s EOS interface peering is not read, so its sessions would be "
                f"missing on FRR")
    return None


def _lab_ports(device: Device, node: Node) -> dict[str, str]:
    """The file's name of each of the switch's ports (Cumulus `swp3`) → the lab's (`eth3`)."""
    return {device.port_name(port.name): port.name for port in node.ports}


def on_lab_ports(device: Device, node: Node) -> BgpConfig:
    """The device's BGP with its unnumbered sessions on the lab's interfaces, where FRR runs."""
    ports = _lab_ports(device, node)
    return replace(device.bgp, neighbors=tuple(replace(n, address=ports[n.address]) if n.unnumbered else n
                                               for n in device.bgp.neighbors))


def meet(fabric: Fabric, node: Node, config: BgpConfig, own: Mapping[str, BgpConfig]) -> BgpConfig:
    """A generated switch's sessions toward switches that run their own BGP: the far end's AS, and
    on the port (unnumbered) where the far end peers unnumbered there (Cumulus's design)."""
    port_to = {str(fabric.peer(port).address.ip): port for port in node.ports}
    neighbors = []
    for n in config.neighbors:
        port = port_to.get(n.address)
        far = fabric.peer(port) if port is not None else None
        theirs = own.get(far.node) if far is not None else None
        if theirs is not None:
            n = replace(n, asn=theirs.asn)
            if any(m.unnumbered and m.address == far.name for m in theirs.neighbors):
                n = replace(n, address=port.name, unnumbered=True)
        neighbors.append(n)
    return replace(config, neighbors=tuple(neighbors))


def lab_bgp(lab: Lab, case: Design | None = None) -> dict[str, tuple[BgpConfig, str]]:
    """Every switch's BGP configuration and where it comes from: the lab's own (Lab.node_bgp: a
    fabric description's), or the switch's profile where it gives BGP with sessions (a lab.yml
    `profiles:` entry in SONiC, EOS or Cumulus form, or a config_db setting bgp_asn), else the
    generated design; then the lab.yml's `bgp:` over it, and a case's over the lab's. An
    InputError for a profile's bad BGP fields, before anything is built."""
    if len(lab.fabric.switches) > MAX_SWITCHES:
        raise InputError([Problem(lab.source, "routing", f"has {len(lab.fabric.switches)} switches; "
                                  f"the generated Loopback0s in {LOOPBACKS} fit {MAX_SWITCHES}", "routing: static")])
    design = (case or Design()).over(lab.bgp)
    out = {}
    designed: set[str] = set()
    for node in lab.fabric.switches:
        if node.name in lab.node_bgp:
            config = lab.node_bgp[node.name]
            out[node.name] = (config, f"from {config.source}")
            continue
        device = lab.node_nos.get(node.name)
        if device is not None and device.bgp is not None and (device.bgp.neighbors or device.bgp.peer_ranges):
            refusal = frr_refusal(device, node)
            if refusal is not None:
                raise InputError([Problem(lab.source, f"profiles.{node.name}", refusal,
                                          "sessions on the switch's ports, or routing: static")])
            out[node.name] = (on_lab_ports(device, node), f"from {device.file}")
            continue
        path = None if node.name in lab.node_qos else lab.node_profiles.get(node.name) or lab.profile
        doc = read_config_db(path) if path else {}
        # An AS number with no session (a QoS dump, whose BGP_NEIGHBOR lives elsewhere) would
        # leave the switch speaking to no one: such a switch gets the design too, and is told so.
        if has_bgp(doc) and (doc.get("BGP_NEIGHBOR") or doc.get("BGP_PEER_RANGE")):
            out[node.name] = (read_bgp(doc, display(path), node.name), f"from {display(path)}")
        else:
            why = f" ({display(path)} sets bgp_asn but no BGP_NEIGHBOR)" if has_bgp(doc) else ""
            per_spine = design.spine_asn == "per-spine"
            out[node.name] = (read_bgp(generated(lab.fabric, node, per_spine), f"{lab.source} (generated)", node.name),
                              description(per_spine) + why)
            designed.add(node.name)
    own = {name: config for name, (config, _) in out.items() if name not in designed}
    for name in designed:
        node = lab.fabric.node(name)
        toward = sorted({lab.fabric.peer(port).node for port in node.ports} & set(own))
        if toward:
            config, how = out[name]
            out[name] = (meet(lab.fabric, node, config, own), f"{how}; toward {', '.join(toward)}: their AS, "
                                                              "their kind of session")
    if design.multipath_relax is not None or design.maximum_paths is not None:
        said = Design(multipath_relax=design.multipath_relax, maximum_paths=design.maximum_paths).text()
        out = {name: (replace(config, multipath_relax=config.multipath_relax if design.multipath_relax is None
                              else design.multipath_relax,
                              maximum_paths=design.maximum_paths or config.maximum_paths),
                      f"{how}; then {said} (lab.yml bgp:)") for name, (config, how) in out.items()}
    return out
