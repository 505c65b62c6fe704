"""Startup configurations of SONiC-VS and cEOS-lab switches, from the lab's topology and QoS profile.

A topology may make a switch a network OS container (`kind: sonic-vs` or `kind: arista_ceos`,
containerlab engine only). Its configuration comes from the facts that configure rocelab's own
switches, so the NOS node joins the fabric rocelab planned:

- ports: rocelab's `ethN` is SONiC's `Ethernet{4·(N−1)}` (rocelab.qos.ports) and EOS's `EthernetN`;
  speed from the link rate, MTU from the link, the port's MAC from the topology (rocelab's
  switches and NICs address their neighbour by that MAC);
- addresses: the topology's, and Loopback0 `198.19.0.k/32` for switch k (k = 1, 2, … over the
  switches in file order), the BGP router ID; host subnets start at 198.19.1.0/24, so that /24
  is free;
- forwarding: the static ECMP routes rocelab computed for the switch, and a static neighbour per
  port (no ARP on the wire: rocelab's emulated ASIC does not answer it);
- eBGP: switch k has the private ASN 65100 + k; each link between two NOS switches is one
  session, its peer the other end's address. Forwarding does not depend on the sessions (static
  routes, distance 1, win over eBGP's 20): rocelab's switches do not speak BGP, and a NOS switch
  forwards the same beside them. The sessions are there to configure and inspect;
- QoS: the lab's profile (a switch's `node_profiles` entry first) for the switch's ports — for
  SONiC the config_db tables as written (`render_config_db`), for EOS what EOS can say
  (`render_eos`; no buffer model, see rocelab.qos.eos).

Neither data plane acts on the QoS: SONiC-VS forwards through the Linux kernel, cEOS-lab in a
software agent. Both accept the configuration and show it; neither pauses, marks ECN or limits
a buffer. The files are for configuration practice.

Each kind is a NosKind in one registry (`builtin_nos_kinds`): the image it defaults to, the file
it is configured from, and how containerlab hands it that file.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rocelab.errors import InputError, Problem
from rocelab.model.lab import Lab
from rocelab.paths import display
from rocelab.qos import QosProfile, load_config_db, render_config_db
from rocelab.qos.eos import render_eos
from rocelab.qos.ports import lab_to_sonic
from rocelab.registry import Registry
from rocelab.model.topology import Fabric, Link, Node, Port
from rocelab.routing.design import LOOPBACKS, MAX_SWITCHES, loopback, switch_number

ASN_BASE = 65100  # private 2-byte ASNs (64512–65534): switch k gets 65100 + k
SONIC_ROUTER_TYPES = {"leaf": "LeafRouter", "spine": "SpineRouter"}

# docker-sonic-vs runs HWSKU Force10-S6000 unless told otherwise: 32 ports, and its
# lanemap.ini backs ethN with the lanes of the N-th port of this table (Ethernet0 ↔ eth1 ↔
# 25-28). The lanes come from a SONiC-VS PORT table dump, not from the image itself.
SONIC_HWSKU = "Force10-S6000"
SONIC_PLATFORM = "x86_64-kvm_x86_64-r0"
SONIC_VS_FIRST_LANES = (25, 29, 33, 37, 45, 41, 1, 5, 13, 9, 17, 21, 53, 49, 57, 61,
                        69, 65, 73, 77, 109, 105, 113, 117, 125, 121, 81, 85, 93, 89, 101, 97)
# docker-sonic-vs's start.sh copies a config_db.json found here over /etc/sonic/config_db.json
# (merged over its init_cfg.json) before it loads the config DB.
SONIC_CONFIG_DB_MOUNT = "/var/sonic/config_db.json"


@dataclass(frozen=True)
class BgpNeighbor:
    port: str  # rocelab port name of the session's link
    local_address: ipaddress.IPv4Address
    peer_address: ipaddress.IPv4Address
    peer_asn: int
    peer_name: str


@dataclass(frozen=True)
class NosKind:
    name: str  # the topology's kind, and containerlab's
    default_image: str  # a locally loaded image: neither is on a public registry
    config_suffix: str
    render: Callable[[Lab, Node], str]
    clab_fields: Callable[[Path], dict]  # the node's containerlab keys that hand it the file


@dataclass(frozen=True)
class StartupConfig:
    node: str
    kind: NosKind
    filename: str
    text: str


# ---------------------------------------------------------------- what every NOS kind needs


def switch_asn(fabric: Fabric, name: str) -> int:
    return ASN_BASE + switch_number(fabric, name)


def bgp_neighbors(fabric: Fabric, node: Node) -> tuple[BgpNeighbor, ...]:
    """One eBGP session per link to another NOS switch, in port order."""
    return tuple(
        BgpNeighbor(p.name, p.address.ip, fabric.peer(p).address.ip, switch_asn(fabric, p.peer_node), p.peer_node)
        for p in node.ports if fabric.node(p.peer_node).network_os
    )


def node_profile(lab: Lab, node: Node) -> QosProfile | None:
    """The QoS profile of a switch, for its own ports only (None: the lab sets none)."""
    path = lab.node_profiles.get(node.name) or lab.profile
    if node.name in lab.node_qos:
        profile = lab.node_qos[node.name]  # lab.yml `profiles:`, read with its source named
    elif path is None:
        return None
    else:
        profile = dataclasses.replace(load_config_db(path), source=display(Path(path)))
    ports = {lab_to_sonic(p.name) for p in node.ports}
    return dataclasses.replace(profile, ports={name: qos for name, qos in profile.ports.items() if name in ports})


def _link(fabric: Fabric, port: Port) -> Link:
    return fabric.links[port.link]


def _check_switch_count(fabric: Fabric) -> None:
    if len(fabric.switches) > MAX_SWITCHES:
        raise InputError([Problem(fabric.source, "topology.nodes",
                                  f"has {len(fabric.switches)} switches; NOS loopbacks in {LOOPBACKS} fit "
                                  f"{MAX_SWITCHES}", "use kind linux for the switches beyond them")])


# ---------------------------------------------------------------- SONiC-VS


def sonic_config_db(lab: Lab, node: Node) -> dict:
    """The whole config_db.json of a SONiC-VS switch. Raises InputError if it has a port the
    Force10-S6000 HWSKU lacks."""
    fabric = lab.fabric
    _check_switch_count(fabric)
    too_high = [p.name for p in node.ports if int(p.name[3:]) > len(SONIC_VS_FIRST_LANES)]
    if too_high:
        raise InputError([Problem(fabric.source, f"topology.nodes.{node.name}",
                                  f"is sonic-vs with port(s) {', '.join(too_high)}; SONiC-VS's {SONIC_HWSKU} "
                                  f"has {len(SONIC_VS_FIRST_LANES)} (eth1 … eth{len(SONIC_VS_FIRST_LANES)})",
                                  "cable it to eth1 … eth32, or make it kind linux")])
    lo = loopback(fabric, node.name)
    doc: dict[str, dict] = {
        "DEVICE_METADATA": {"localhost": {
            "hostname": node.name, "hwsku": SONIC_HWSKU, "platform": SONIC_PLATFORM,
            "type": SONIC_ROUTER_TYPES[node.role], "bgp_asn": str(switch_asn(fabric, node.name)),
        }},
        "PORT": {}, "INTERFACE": {}, "LOOPBACK_INTERFACE": {"Loopback0": {}, f"Loopback0|{lo}": {}},
        "NEIGH": {}, "STATIC_ROUTE": {}, "BGP_NEIGHBOR": {},
    }
    for p in node.ports:
        number, link, peer = int(p.name[3:]), _link(fabric, p), fabric.peer(p)
        name = lab_to_sonic(p.name)
        first_lane = SONIC_VS_FIRST_LANES[number - 1]
        doc["PORT"][name] = {
            "lanes": ",".join(str(lane) for lane in range(first_lane, first_lane + 4)),
            "alias": f"fortyGigE0/{name[8:]}", "index": str(number - 1),
            "speed": str(link.rate_bps // 1_000_000), "mtu": str(link.mtu),
            "admin_status": "up", "description": f"{peer.node}:{peer.name}",
        }
        doc["INTERFACE"][name] = {"mac_addr": p.mac}
        doc["INTERFACE"][f"{name}|{p.address}"] = {}
        doc["NEIGH"][f"{name}|{peer.address.ip}"] = {"neigh": peer.mac, "family": "IPv4"}
    for route in node.routes:
        doc["STATIC_ROUTE"][str(route.dst)] = {
            "nexthop": ",".join(str(h.gateway) for h in route.nexthops),
            "ifname": ",".join(lab_to_sonic(h.port) for h in route.nexthops),
        }
    for n in bgp_neighbors(fabric, node):
        doc["BGP_NEIGHBOR"][str(n.peer_address)] = {
            "asn": str(n.peer_asn), "name": n.peer_name, "local_addr": str(n.local_address),
            "admin_status": "up", "holdtime": "180", "keepalive": "60",
        }
    profile = node_profile(lab, node)
    if profile is not None:
        doc |= render_config_db(profile)
    return {table: entries for table, entries in doc.items() if entries}


def _render_sonic(lab: Lab, node: Node) -> str:
    return json.dumps(sonic_config_db(lab, node), indent=4) + "\n"


# ---------------------------------------------------------------- cEOS


def _eos_mac(mac: str) -> str:
    """02:52:4c:00:01:01 → 0252.4c00.0101, as EOS writes a MAC."""
    digits = mac.replace(":", "")
    return ".".join(digits[i:i + 4] for i in range(0, 12, 4))


def eos_startup_config(lab: Lab, node: Node) -> str:
    """The startup-config of a cEOS switch. Raises InputError if the profile says what EOS
    cannot (rocelab.qos.eos.render_eos)."""
    fabric = lab.fabric
    _check_switch_count(fabric)
    profile = node_profile(lab, node)
    lines: dict[str, list[str]] = {}
    mtu_bytes: dict[str, int] = {}
    for p in node.ports:
        peer = fabric.peer(p)
        name = lab_to_sonic(p.name)
        lines[name] = [f"description {peer.node}:{peer.name}", "no switchport",
                       f"mac-address {_eos_mac(p.mac)}", f"ip address {p.address}"]
        mtu_bytes[name] = _link(fabric, p).mtu
    try:
        interfaces = render_eos(profile or QosProfile("no QoS profile", {}, {}), mtu_bytes=mtu_bytes,
                                interface_lines=lines)
    except ValueError as exc:
        hint = f"make {node.name} kind sonic-vs, or give the lab a profile EOS can express"
        raise InputError([Problem(profile.source, "", f"cannot configure arista_ceos switch {node.name}: {exc}",
                                  hint)]) from None
    lo = loopback(fabric, node.name)
    out = [f"! startup-config of {node.name} (arista_ceos) in lab {lab.name}, rendered by rocelab from "
           f"{fabric.source}",
           "! cEOS-lab's data plane does not act on the QoS statements below: no PFC, no ECN marking.",
           f"hostname {node.name}", "!", "service routing protocols model multi-agent", "!",
           interfaces.rstrip("\n"),  # ends with "!"
           "interface Loopback0", f"   ip address {lo}", "!", "ip routing", "!"]
    out += [f"arp {fabric.peer(p).address.ip} {_eos_mac(fabric.peer(p).mac)} arpa" for p in node.ports]
    out += ["!"] + [f"ip route {route.dst} {h.gateway}" for route in node.routes for h in route.nexthops]
    out += ["!", f"router bgp {switch_asn(fabric, node.name)}", f"   router-id {lo.ip}"]
    for n in bgp_neighbors(fabric, node):
        out += [f"   neighbor {n.peer_address} remote-as {n.peer_asn}",
                f"   neighbor {n.peer_address} description {n.peer_name}"]
    out += ["   redistribute connected", "!", "end", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- registry


def builtin_nos_kinds() -> Registry[NosKind]:
    kinds: Registry[NosKind] = Registry("network OS kind")
    kinds.register("sonic-vs", NosKind(
        "sonic-vs", "docker-sonic-vs:latest", ".config_db.json", _render_sonic,
        # containerlab's sonic-vs kind ignores startup-config; the image reads this mount.
        lambda path: {"binds": [f"{path}:{SONIC_CONFIG_DB_MOUNT}:ro"]}))
    kinds.register("arista_ceos", NosKind(
        "arista_ceos", "ceos:latest", ".cfg", eos_startup_config,
        lambda path: {"startup-config": str(path)}))
    return kinds


def startup_configs(lab: Lab) -> tuple[StartupConfig, ...]:
    """One per NOS switch, in file order. Raises InputError where one cannot be rendered."""
    kinds = builtin_nos_kinds()
    configs = []
    for node in lab.fabric.nodes:
        if node.network_os:
            kind = kinds.get(node.kind)
            configs.append(StartupConfig(node.name, kind, f"{node.name}{kind.config_suffix}", kind.render(lab, node)))
    return tuple(configs)
