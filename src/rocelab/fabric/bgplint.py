"""Static checks of a fabric description's BGP: pure functions of a FabricSpec, no root, no lab.

They read each switch's BGP (Device.bgp): a SONiC config_db's as sonic-bgpcfgd renders it
(rocelab.routing.bgp), an EOS `router bgp` (rocelab.routing.eos), a Cumulus device's NVUE
`router bgp` (rocelab.routing.nvue), and hold it against the design a leaf-spine AI fabric needs (RFC 7938's eBGP Clos, as SONiC, EOS
and Cumulus deployments run it), so that every leaf spreads its traffic over every spine:

- bgp-multipath: `bgp bestpath as-path multipath-relax` on every leaf and spine. With a private
  AS number per spine (or per leaf, seen from a spine), a route's paths through different
  spines differ in AS path, and bgpd installs only one of them without it.
- bgp-maximum-paths: maximum-paths at least the fabric's spine count (one next hop per spine).
- bgp-bfd: BFD on every session toward a cabled switch: a silent failure (frames lost, link
  up) is otherwise noticed only when the hold timer expires.
- bgp-asn: the AS numbers make an eBGP fabric: a session on every cabled link to a switch
  (by the far end's address, or on the port itself for an unnumbered session), each
  neighbor's asn the far end's own (`remote-as external`: any AS but this switch's), no iBGP
  on a fabric link, and every leaf its
  own AS number (bgpd drops a route whose AS path holds its own AS, so leaves sharing one
  would not reach each other without allowas-in, which rocelab does not render).

A switch whose file gives no BGP is not applicable, with the reason.
"""

from __future__ import annotations

from typing import Callable

from rocelab.fabric.finding import Check, Finding, cabled
from rocelab.fabric.spec import Device, FabricSpec
from rocelab.model.topology import Port
from rocelab.routing.bgp import Neighbor


def _spines(spec: FabricSpec) -> list[str]:
    return [n.name for n in spec.fabric.switches if n.role == "spine"]


def _neighbor_field(device: Device, neighbor: Neighbor, name: str) -> str:
    return device.bgp.at(("neighbor", neighbor.address, name), f'{device.file}: BGP_NEIGHBOR."{neighbor.address}".{name}')


def _neighbor_at(device: Device, neighbor: Neighbor) -> str:
    """Where the device's file declares the session."""
    return device.bgp.at(("neighbor", neighbor.address), f'{device.file}: BGP_NEIGHBOR."{neighbor.address}"')


def _asn_field(device: Device) -> str:
    return device.bgp.at(("asn",), f"{device.file}: DEVICE_METADATA.localhost.bgp_asn")


def _remote_as(device: Device, asn: object) -> str:
    """A neighbor's AS in the words of the device's file."""
    return f"asn {asn}" if device.format == "sonic" else f"remote-as {asn}"


def _as_key(device: Device) -> str:
    """What the device's file calls the switch's own AS."""
    return "bgp_asn" if device.format == "sonic" else "AS"


def _session(spec: FabricSpec, device: Device, port: Port) -> Neighbor | None:
    """The session over a cabled port: to the far end's address, or on the port (unnumbered)."""
    far = str(spec.fabric.peer(port).address.ip)
    for n in device.bgp.neighbors:
        if n.address == (device.port_name(port.name) if n.unnumbered else far):
            return n
    return None


def _link(spec: FabricSpec, device: Device, neighbor: Neighbor) -> Port | None:
    """This switch's cabled port a session runs over, toward a switch; None: no such port."""
    for port in cabled(spec, device):
        if spec.fabric.node(spec.fabric.peer(port).node).is_switch and _session(spec, device, port) is neighbor:
            return port
    return None


def check_multipath(spec: FabricSpec, device: Device) -> list[Finding]:
    bgp = device.bgp
    if bgp.multipath_relax:
        return []
    spines = _spines(spec)
    return [Finding(
        "bgp-multipath", device.name, None, None,
        "bgpd keeps one path where the paths through different spines differ in AS path",
        # NVUE's words for it, on a Cumulus switch
        "`aspath-ignore` off" if device.format == "cumulus" else "no `bgp bestpath as-path multipath-relax`",
        ("`vrf default router bgp path-selection multipath aspath-ignore on` (FRR's `bgp bestpath as-path "
         "multipath-relax`; " if device.format == "cumulus" else "`bgp bestpath as-path multipath-relax` (")
        + f"ECMP over {len(spines)} spines: {', '.join(spines)})",
        bgp.at(("multipath",), f"{bgp.constants_source}: constants.bgp.multipath_relax.enabled"))]


def check_maximum_paths(spec: FabricSpec, device: Device) -> list[Finding]:
    bgp = device.bgp
    spines = _spines(spec)
    if bgp.maximum_paths is not None and bgp.maximum_paths >= len(spines):
        return []
    configured = (f"maximum-paths {bgp.maximum_paths}" if bgp.maximum_paths is not None
                  else "no maximum-paths (constants.bgp.maximum_paths not enabled: bgpd's built-in default)")
    field = "ipv4" if bgp.maximum_paths is not None else "enabled"
    return [Finding(
        "bgp-maximum-paths", device.name, None, None,
        "fewer next hops per route than there are spines: traffic leaves on a subset of the uplinks",
        configured, f"maximum-paths ≥ {len(spines)} (the spines: {', '.join(spines)})",
        bgp.at(("maximum-paths",), f"{bgp.constants_source}: constants.bgp.maximum_paths.{field}"))]


def _fabric_neighbors(spec: FabricSpec, device: Device) -> list[tuple[Port, Neighbor]]:
    """(the port, neighbor) of every session toward a switch cabled to this one."""
    out = []
    for port in cabled(spec, device):
        session = _session(spec, device, port)
        if spec.fabric.node(spec.fabric.peer(port).node).is_switch and session is not None:
            out.append((port, session))
    return out


def _bfd_on(device: Device, neighbor: Neighbor) -> str:
    """BFD on a session, in the words of the device's file."""
    return {"sonic": "bfd true", "eos": f"`neighbor {neighbor.address} bfd` (or on its peer group)",
            "cumulus": "`bfd enable on` on the neighbor or its peer group"}[device.format]


def check_bfd(spec: FabricSpec, device: Device) -> list[Finding]:
    return [Finding(
        "bgp-bfd", device.name, device.label(port.name), None,
        f"the session to {spec.fabric.peer(port).node} has no BFD: a silent failure (frames lost, link up) "
        f"goes unnoticed until its {n.holdtime_s} s hold timer expires",
        "bfd off", _bfd_on(device, n), _neighbor_field(device, n, "bfd"))
        for port, n in _fabric_neighbors(spec, device) if n.bfd is None]


def check_asn(spec: FabricSpec, device: Device) -> list[Finding]:
    bgp, fabric = device.bgp, spec.fabric
    findings = []
    sonic = device.format == "sonic"
    for port in cabled(spec, device):
        peer = fabric.peer(port)
        if fabric.node(peer.node).is_switch and _session(spec, device, port) is None:
            findings.append(Finding(
                "bgp-asn", device.name, device.label(port.name), None,
                f"no BGP session to {peer.node} over this link: no route is learnt across it",
                "no BGP_NEIGHBOR entry" if sonic else "no neighbor",
                (f'BGP_NEIGHBOR."{peer.address.ip}" (the far end\'s address)' if sonic else
                 f"a neighbor {peer.address.ip} (the far end's address) or {device.port_name(port.name)} (unnumbered)"),
                bgp.at(("neighbors",), f"{device.file}: BGP_NEIGHBOR")))
    for n in bgp.neighbors:
        port = _link(spec, device, n)
        if port is None:
            findings.append(Finding(
                "bgp-asn", device.name, None, None,
                (f"neighbor {n.address} is no port of {device.name} cabled to a switch" if n.unnumbered else
                 f"neighbor {n.address} is the address of no switch cabled to {device.name}"),
                f"neighbor {n.address}", "the far end's address on a link of this switch, or the port (unnumbered)",
                _neighbor_field(device, n, "asn").removesuffix(".asn")))
            continue
        far_node = fabric.peer(port).node
        label = device.label(port.name)
        if n.asn == bgp.asn or n.asn == "internal":
            findings.append(Finding(
                "bgp-asn", device.name, label, None,
                f"the session to {far_node} is iBGP (both ends in AS {bgp.asn}): an eBGP fabric "
                "needs a different AS on each side of a link",
                _remote_as(device, n.asn), f"an AS other than {bgp.asn}",
                _neighbor_field(device, n, "asn")))
            continue
        far = spec.devices.get(far_node)
        if far is None or far.bgp is None:
            continue
        far_session = _session(spec, far, fabric.peer(port))
        if far_session is not None and far_session.unnumbered != n.unnumbered:
            how = {True: "unnumbered (on the port's IPv6 link-local address)", False: "numbered (on an IPv4 address)"}
            findings.append(Finding(
                "bgp-asn", device.name, label, None,
                f"the session to {far_node} is {how[n.unnumbered]} here and {how[far_session.unnumbered]} on "
                f"{far_node}: the two ends never meet",
                f"neighbor {n.address}", f"the same kind of session as {far_node}'s neighbor {far_session.address}",
                f"{_neighbor_at(device, n)}; {_neighbor_at(far, far_session)}"))
            continue
        if n.asn == "external" and far.bgp.asn == bgp.asn:
            findings.append(Finding(
                "bgp-asn", device.name, label, None,
                f"the session to {far_node} is `remote-as external`, but {far_node} is in this switch's AS "
                f"{bgp.asn}: the session never comes up",
                "remote-as external", f"{far_node} in an AS other than {bgp.asn}",
                f"{_neighbor_field(device, n, 'asn')}; {_asn_field(far)}"))
        elif n.asn != "external" and far.bgp.asn != n.asn:
            findings.append(Finding(
                "bgp-asn", device.name, label, None,
                f"the session to {far_node} expects AS {n.asn}, but {far_node} is AS {far.bgp.asn}: "
                "the session never comes up",
                _remote_as(device, n.asn), f"asn {far.bgp.asn} ({far_node}'s {_as_key(far)})",
                f"{_neighbor_field(device, n, 'asn')}; {_asn_field(far)}"))
    if fabric.node(device.name).role == "leaf":
        for other in spec.devices.values():
            if (other.name != device.name and other.bgp is not None and other.bgp.asn == bgp.asn
                    and fabric.node(other.name).role == "leaf"):
                findings.append(Finding(
                    "bgp-asn", device.name, None, None,
                    f"{other.name} is a leaf in the same AS {bgp.asn}: each drops the other's routes "
                    "(its own AS in the path), and rocelab renders no allowas-in",
                    f"{_as_key(device)} {bgp.asn}", f"an AS number of its own (not {other.name}'s)",
                    f"{_asn_field(device)}; {_asn_field(other)}"))
    return findings


def _no_bgp(spec: FabricSpec, device: Device) -> str | None:
    return device.bgp_absent if device.bgp is None else None


def _on_bgp(run: Callable[[FabricSpec, Device], list[Finding]]) -> Callable[[FabricSpec, Device], list[Finding]]:
    """A check that finds nothing on a switch without BGP (lint() runs every check everywhere)."""
    return lambda spec, device: run(spec, device) if device.bgp is not None else []


BGP_CHECKS = (
    Check("bgp-multipath", "multipath-relax, so a route keeps its paths through every spine", _on_bgp(check_multipath),
          _no_bgp),
    Check("bgp-maximum-paths", "maximum-paths at least the spine count", _on_bgp(check_maximum_paths), _no_bgp),
    Check("bgp-bfd", "BFD on every session toward a switch", _on_bgp(check_bfd), _no_bgp),
    Check("bgp-asn", "an eBGP fabric: a session per link, each neighbor's asn the far end's, a leaf per AS",
          _on_bgp(check_asn), _no_bgp),
)
