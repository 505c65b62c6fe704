"""Topology files → the resolved Fabric model.

A topology is a containerlab topology (`name`, `topology.nodes`, `topology.links` with
`endpoints: ["leaf1:eth1", "spine1:eth1"]`) plus a few rocelab keys: per node `role`
(host | leaf | spine); per link, or in `topology.defaults`, `rate`, `cable` (metres) or
`delay`, and `mtu`. The clab engine strips the rocelab keys when it writes a
`.clab.yml`.

Steps, each a checkpoint (STYLE.md 1): `load_yaml` → `validate` (→ RawTopology, every
problem collected, then one InputError) → `resolve` (→ Fabric: ports, addresses, MACs,
ECMP routes). Nothing here touches the kernel.

Addressing (deterministic: the same file always gives the same addresses), from
198.18.0.0/15, RFC 2544's benchmarking range:
- switch–switch link k (k = 0, 1, … in file order, counting only such links) gets
  198.18.0.0/31 + 2k: the first endpoint written takes the even address, the second the odd;
- host port k (k = 1, 2, … in file order, counting only host links) gets 198.19.k.0/24:
  the switch side is 198.19.k.1, the host 198.19.k.2;
- MACs are locally administered: 02:52:4c:<node index, 2 bytes>:<port number>.
Routes: every switch has, for every subnet, all equal-cost next hops along shortest switch
paths (ECMP); hosts route 198.18.0.0/15 via their ToR and nothing else.
"""

from __future__ import annotations

import ipaddress
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rocelab.errors import Problems
from rocelab.model.kinds import builtin_node_kinds
from rocelab.units import cable_delay_s, parse_delay, parse_rate
from rocelab.yamlfile import YamlDoc, load_yaml, yaml_path
from rocelab.yamlfile import at as _at

ROLES = ("host", "leaf", "spine")
SWITCH_ROLES = frozenset({"leaf", "spine"})
NODE_KINDS = builtin_node_kinds()
FABRIC_POOL = ipaddress.IPv4Network("198.18.0.0/15")
P2P_POOL = ipaddress.IPv4Network("198.18.0.0/16")
HOST_POOL = ipaddress.IPv4Network("198.19.0.0/16")
MAX_HOST_PORTS = 255

DEFAULT_RATE = "100G"
DEFAULT_CABLE_M = 5.0
DEFAULT_MTU = 9100

# Names become namespace, container and file names: keep them to a safe alphabet.
SAFE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")
SAFE_NAME_HINT = "lower-case letters, digits, '-' and '_', starting with a letter, at most 31 characters"
IFACE = re.compile(r"^eth([1-9][0-9]{0,2})$")
LINK_KEYS = frozenset({"rate", "cable", "delay", "mtu"})
NODE_KEYS = frozenset({"role", "kind", "image"})
# containerlab node keys that mean nothing to the netns engine but are accepted as written.
CLAB_NODE_KEYS = frozenset({"labels", "env", "binds", "exec", "startup-config", "mgmt-ipv4",
                            "cmd", "group", "type", "cpu", "memory", "ports", "sysctls"})
CLAB_LINK_KEYS = frozenset({"vars", "ipv4", "ipv6"})


# ---------------------------------------------------------------- raw, validated input

@dataclass(frozen=True)
class LinkOptions:
    rate_bps: int
    delay_s: float
    cable_m: float | None
    mtu: int


@dataclass(frozen=True)
class RawNode:
    name: str
    role: str
    kind: str
    image: str | None


@dataclass(frozen=True)
class RawLink:
    a: tuple[str, str]  # (node, interface)
    b: tuple[str, str]
    options: LinkOptions


@dataclass(frozen=True)
class RawTopology:
    source: str
    name: str
    nodes: tuple[RawNode, ...]
    links: tuple[RawLink, ...]


# ---------------------------------------------------------------- resolved model

@dataclass(frozen=True)
class Port:
    node: str
    name: str
    mac: str
    address: ipaddress.IPv4Interface
    peer_node: str
    peer_port: str
    link: int  # index into Fabric.links


@dataclass(frozen=True)
class Link:
    index: int
    a: Port
    b: Port
    rate_bps: int
    delay_s: float
    cable_m: float | None
    mtu: int

    @property
    def kind(self) -> str:
        # resolve() numbers host links from HOST_POOL and switch–switch links from P2P_POOL.
        return "host" if self.a.address.ip in HOST_POOL else "fabric"


@dataclass(frozen=True)
class NextHop:
    port: str
    gateway: ipaddress.IPv4Address
    mac: str


@dataclass(frozen=True)
class Route:
    dst: ipaddress.IPv4Network
    nexthops: tuple[NextHop, ...]


@dataclass(frozen=True)
class Node:
    name: str
    role: str
    kind: str
    image: str | None
    index: int
    ports: tuple[Port, ...]
    routes: tuple[Route, ...]

    @property
    def is_switch(self) -> bool:
        return self.role in SWITCH_ROLES

    @property
    def network_os(self) -> bool:
        """A network OS container (SONiC-VS, cEOS), not a node rocelab's agents run in."""
        return NODE_KINDS.get(self.kind).network_os


@dataclass(frozen=True)
class Fabric:
    name: str
    source: str
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def port(self, node: str, port: str) -> Port:
        for p in self.node(node).ports:
            if p.name == port:
                return p
        raise KeyError(f"{node}:{port}")

    def peer(self, port: Port) -> Port:
        return self.port(port.peer_node, port.peer_port)

    @property
    def hosts(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.role == "host")

    @property
    def switches(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.is_switch)

    def host_address(self, host: str) -> ipaddress.IPv4Address:
        return self.node(host).ports[0].address.ip

    def tor(self, host: str) -> Port:
        """The switch port a host is cabled to."""
        return self.peer(self.node(host).ports[0])


# ---------------------------------------------------------------- load / validate

def load_topology(path: Path) -> Fabric:
    return resolve(validate(load_yaml(path)))


def _link_options(raw: Any, where: tuple, problems: Problems, base: LinkOptions | None,
                  doc: YamlDoc) -> LinkOptions:
    """Read rate / cable / delay / mtu from a mapping, on top of `base` (the defaults)."""
    opts = base or LinkOptions(parse_rate(DEFAULT_RATE), cable_delay_s(DEFAULT_CABLE_M),
                               DEFAULT_CABLE_M, DEFAULT_MTU)
    rate_bps, delay_s, cable_m, mtu = opts.rate_bps, opts.delay_s, opts.cable_m, opts.mtu

    def at(key: str) -> str:
        return _at(doc, *where, key)

    if "rate" in raw:
        try:
            rate_bps = parse_rate(raw["rate"])
        except ValueError as exc:
            problems.add(at("rate"), str(exc), "write the line rate as 25G, 100G, 400G, …")
    if "cable" in raw and "delay" in raw:
        problems.add(yaml_path(*where), "gives both `cable` and `delay`",
                     "give the cable length in metres or the one-way delay, not both")
    if "cable" in raw:
        value = raw["cable"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            problems.add(at("cable"), f"{value!r} is not a cable length",
                         "give the length in metres as a number, e.g. 5")
        else:
            cable_m, delay_s = float(value), cable_delay_s(float(value))
    if "delay" in raw:
        try:
            delay_s, cable_m = parse_delay(raw["delay"]), None
        except ValueError as exc:
            problems.add(at("delay"), str(exc))
    if "mtu" in raw:
        value = raw["mtu"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1280 <= value <= 65535:
            problems.add(at("mtu"), f"{value!r} is not an MTU", "a whole number of bytes from 1280 to 65535")
        else:
            mtu = value
    return LinkOptions(rate_bps, delay_s, cable_m, mtu)


def _unknown_keys(raw: dict, allowed: frozenset, where: tuple, problems: Problems) -> None:
    for key in raw:
        if key not in allowed:
            problems.add(yaml_path(*where, str(key)), f"unknown key {key!r}",
                         f"expected one of: {', '.join(sorted(allowed))}")


def validate(doc: YamlDoc) -> RawTopology:
    problems = Problems(doc.name)
    data = doc.data

    def at(*path: str | int) -> str:
        return _at(doc, *path)

    if not isinstance(data, dict):
        problems.add("", "is not a topology: expected a mapping with `name` and `topology`")
        problems.raise_if_any()

    name = data.get("name")
    if not isinstance(name, str) or not SAFE_NAME.match(name):
        problems.add("name", f"{name!r} is not a safe lab name", SAFE_NAME_HINT)
    topo = data.get("topology")
    if not isinstance(topo, dict):
        problems.add("topology", "is missing: expected a mapping with `nodes` and `links`")
        problems.raise_if_any()
    _unknown_keys(data, frozenset({"name", "prefix", "mgmt", "topology"}), (), problems)
    _unknown_keys(topo, frozenset({"nodes", "links", "defaults", "kinds"}), ("topology",), problems)

    defaults = topo.get("defaults") or {}
    if not isinstance(defaults, dict):
        problems.add("topology.defaults", "is not a mapping")
        defaults = {}
    _unknown_keys(defaults, LINK_KEYS | {"kind", "image"} | CLAB_NODE_KEYS, ("topology", "defaults"), problems)
    link_defaults = _link_options(defaults, ("topology", "defaults"), problems, None, doc)
    default_kind = defaults.get("kind", "linux")

    nodes: list[RawNode] = []
    raw_nodes = topo.get("nodes")
    if not isinstance(raw_nodes, dict) or not raw_nodes:
        problems.add("topology.nodes", "is missing or empty: expected a mapping of node names to nodes")
        raw_nodes = {}
    for node_name, raw in raw_nodes.items():
        where = ("topology", "nodes", str(node_name))
        if not isinstance(node_name, str) or not SAFE_NAME.match(node_name):
            problems.add(yaml_path(*where), f"node name {node_name!r} is not a safe identifier", SAFE_NAME_HINT)
            continue
        if not isinstance(raw, dict):
            problems.add(yaml_path(*where), "has no `role`", f"give each node a role: {', '.join(ROLES)}")
            continue
        _unknown_keys(raw, NODE_KEYS | CLAB_NODE_KEYS, where, problems)
        role = raw.get("role")
        if role is None:
            problems.add(at(*where), "has no `role`", f"give each node a role: {', '.join(ROLES)}")
        elif role not in ROLES:
            problems.add(at(*where, "role"), f"{role!r} is not a role", f"expected one of: {', '.join(ROLES)}")
        kind = raw.get("kind", default_kind)
        if kind not in NODE_KINDS.names():
            problems.add(yaml_path(*where, "kind"), f"{kind!r} is not a node kind rocelab runs",
                         f"expected one of: {', '.join(NODE_KINDS.names())}")
        elif NODE_KINDS.get(kind).network_os and role == "host":
            problems.add(yaml_path(*where, "kind"), f"{kind!r} is a switch's network OS, and {node_name} is a host",
                         "a host is kind linux: rocelab's NIC runs in it")
        nodes.append(RawNode(node_name, str(role), str(kind), raw.get("image", defaults.get("image"))))
    _check_duplicate_nodes(doc, problems)

    known = {n.name: n for n in nodes}
    links: list[RawLink] = []
    used: dict[tuple[str, str], str] = {}
    raw_links = topo.get("links")
    if not isinstance(raw_links, list) or not raw_links:
        problems.add("topology.links", "is missing or empty: expected a list of links with `endpoints`")
        raw_links = []
    for i, raw in enumerate(raw_links):
        where = ("topology", "links", i)
        if not isinstance(raw, dict) or "endpoints" not in raw:
            problems.add(yaml_path(*where), "has no `endpoints`", 'write endpoints: ["leaf1:eth1", "spine1:eth1"]')
            continue
        _unknown_keys(raw, frozenset({"endpoints"}) | LINK_KEYS | CLAB_LINK_KEYS, where, problems)
        eps = raw["endpoints"]
        if not isinstance(eps, list) or len(eps) != 2:
            problems.add(yaml_path(*where, "endpoints"), f"{eps!r} is not a pair of endpoints",
                         'write endpoints: ["leaf1:eth1", "spine1:eth1"]')
            continue
        ends: list[tuple[str, str]] = []
        for j, ep in enumerate(eps):
            here = at(*where, "endpoints", j)
            node_name, _, iface = str(ep).partition(":")
            if not iface:
                problems.add(here, f"{ep!r} is not NODE:INTERFACE", 'write e.g. "leaf1:eth1"')
            elif node_name not in known:
                problems.add(here, f"{ep!r} names an unknown node {node_name!r}",
                             f"nodes are: {', '.join(sorted(known)) or 'none'}")
            elif not IFACE.match(iface):
                problems.add(here, f"{ep!r}: interface {iface!r} is not ethN", "interfaces are eth1, eth2, … (at most eth999)")
            elif (node_name, iface) in used:
                problems.add(here, f"interface {node_name}:{iface} is used twice", f"it is already used by {used[(node_name, iface)]}")
            else:
                used[(node_name, iface)] = yaml_path(*where)
                ends.append((node_name, iface))
        if len(ends) == 2:
            if ends[0][0] == ends[1][0]:
                problems.add(yaml_path(*where, "endpoints"), f"links node {ends[0][0]} to itself")
            elif known[ends[0][0]].role == "host" and known[ends[1][0]].role == "host":
                problems.add(yaml_path(*where, "endpoints"), "links two hosts", "a host connects to a switch (its ToR)")
            else:
                links.append(RawLink(ends[0], ends[1], _link_options(raw, where, problems, link_defaults, doc)))
    problems.raise_if_any()

    raw_topo = RawTopology(doc.name, name, tuple(nodes), tuple(links))
    _check_shape(raw_topo, problems)
    problems.raise_if_any()
    return raw_topo


def refuse_nos_nodes(fabric: Fabric, engine: str) -> None:
    """For an engine without containers: an InputError naming every NOS node, else nothing."""
    problems = Problems(fabric.source)
    for node in fabric.nodes:
        if node.network_os:
            problems.add(f"topology.nodes.{node.name}.kind",
                         f"{node.kind!r} is a network OS container, which the {engine} engine cannot run",
                         "bring the lab up with --engine clab")
    problems.raise_if_any()


def _check_duplicate_nodes(doc: YamlDoc, problems: Problems) -> None:
    """YAML mappings silently keep the last of duplicate keys; look at the composed nodes."""
    topo = next((v for k, v in getattr(doc.root, "value", []) if k.value == "topology"), None)
    nodes = next((v for k, v in getattr(topo, "value", []) if k.value == "nodes"), None)
    if not isinstance(nodes, yaml.MappingNode):
        return
    seen: set[str] = set()
    for key, _ in nodes.value:
        if key.value in seen:
            problems.add(f"topology.nodes.{key.value} (line {key.start_mark.line + 1})",
                         f"duplicate node name {key.value!r}", "each node name must be unique")
        seen.add(key.value)


def _check_shape(topo: RawTopology, problems: Problems) -> None:
    host_links: dict[str, int] = {}
    for link in topo.links:
        for node, _ in (link.a, link.b):
            host_links[node] = host_links.get(node, 0) + 1
    hosts = [n for n in topo.nodes if n.role == "host"]
    for host in hosts:
        count = host_links.get(host.name, 0)
        if count == 0:
            problems.add(f"topology.nodes.{host.name}", "is a host with no link", "cable it to a leaf")
        elif count > 1:
            problems.add(f"topology.nodes.{host.name}", f"is a host with {count} links",
                         "rocelab hosts have one NIC port for now; give each NIC its own host node")
    if len(hosts) > MAX_HOST_PORTS:
        problems.add("topology.nodes", f"has {len(hosts)} hosts", f"at most {MAX_HOST_PORTS} host ports fit the addressing plan")


# ---------------------------------------------------------------- resolve

def _mac(node_index: int, port_number: int) -> str:
    return "02:52:4c:%02x:%02x:%02x" % (node_index >> 8, node_index & 0xFF, port_number)


def resolve(topo: RawTopology) -> Fabric:
    roles = {n.name: n.role for n in topo.nodes}
    index = {n.name: i + 1 for i, n in enumerate(topo.nodes)}
    ports: dict[str, list[Port]] = {n.name: [] for n in topo.nodes}
    links: list[Link] = []
    fabric_count = host_count = 0
    for i, raw in enumerate(topo.links):
        if "host" in (roles[raw.a[0]], roles[raw.b[0]]):
            host_count += 1
            subnet = ipaddress.IPv4Network((int(HOST_POOL.network_address) + host_count * 256, 24))
            # The switch side is the gateway (.1), the host .2, whichever order the file gives.
            host_first = roles[raw.a[0]] == "host"
            addr_a = ipaddress.IPv4Interface((subnet.network_address + (2 if host_first else 1), 24))
            addr_b = ipaddress.IPv4Interface((subnet.network_address + (1 if host_first else 2), 24))
        else:
            base = P2P_POOL.network_address + 2 * fabric_count
            fabric_count += 1
            addr_a = ipaddress.IPv4Interface((base, 31))
            addr_b = ipaddress.IPv4Interface((base + 1, 31))
        (na, pa), (nb, pb) = raw.a, raw.b
        port_a = Port(na, pa, _mac(index[na], int(pa[3:])), addr_a, nb, pb, i)
        port_b = Port(nb, pb, _mac(index[nb], int(pb[3:])), addr_b, na, pa, i)
        ports[na].append(port_a)
        ports[nb].append(port_b)
        o = raw.options
        links.append(Link(i, port_a, port_b, o.rate_bps, o.delay_s, o.cable_m, o.mtu))

    routes = _routes(topo, ports)
    _check_reachability(topo, ports, routes)
    nodes = tuple(
        Node(n.name, n.role, n.kind, n.image, index[n.name],
             tuple(sorted(ports[n.name], key=lambda p: int(p.name[3:]))), routes[n.name])
        for n in topo.nodes
    )
    return Fabric(topo.name, topo.source, nodes, tuple(links))


def _routes(topo: RawTopology, ports: dict[str, list[Port]]) -> dict[str, tuple[Route, ...]]:
    roles = {n.name: n.role for n in topo.nodes}
    switches = [n.name for n in topo.nodes if n.role in SWITCH_ROLES]
    by_name = {(p.node, p.name): p for plist in ports.values() for p in plist}
    # Switch adjacency: (neighbour, local port, neighbour's port) per fabric link.
    adjacent: dict[str, list[tuple[str, Port, Port]]] = {s: [] for s in switches}
    # Where each subnet attaches: the switches that own an address in it.
    attached: dict[ipaddress.IPv4Network, set[str]] = {}
    for node, plist in ports.items():
        for p in plist:
            peer = by_name[(p.peer_node, p.peer_port)]
            if roles[node] in SWITCH_ROLES:
                attached.setdefault(p.address.network, set()).add(node)
                if roles[p.peer_node] in SWITCH_ROLES:
                    adjacent[node].append((p.peer_node, p, peer))

    distance = {s: _bfs(s, adjacent) for s in switches}
    routes: dict[str, tuple[Route, ...]] = {}
    for node in topo.nodes:
        if node.role == "host":
            port = ports[node.name][0]
            tor = by_name[(port.peer_node, port.peer_port)]
            routes[node.name] = (Route(FABRIC_POOL, (NextHop(port.name, tor.address.ip, tor.mac),)),)
            continue
        table = []
        for subnet in sorted(attached):
            owners = attached[subnet]
            if node.name in owners:
                continue  # connected: the kernel installs it with the address
            here = min((distance[node.name].get(o, 1 << 30) for o in owners), default=1 << 30)
            nexthops = tuple(
                NextHop(local.name, remote.address.ip, remote.mac)
                for neighbour, local, remote in adjacent[node.name]
                if min((distance[neighbour].get(o, 1 << 30) for o in owners), default=1 << 30) == here - 1
            )
            if nexthops:
                table.append(Route(subnet, nexthops))
        routes[node.name] = tuple(table)
    return routes


def _check_reachability(topo: RawTopology, ports: dict[str, list[Port]],
                        routes: dict[str, tuple[Route, ...]]) -> None:
    problems = Problems(topo.source)
    host_nets = {h: ports[h][0].address.network for h, plist in ports.items()
                 if plist and h in {n.name for n in topo.nodes if n.role == "host"}}
    for node in topo.nodes:
        if node.role == "host":
            continue
        known = {p.address.network for p in ports[node.name]} | {r.dst for r in routes[node.name]}
        for host, net in host_nets.items():
            if net not in known:
                problems.add(f"topology.nodes.{node.name}", f"has no path to host {host}",
                             "every switch must be cabled into one fabric")
    problems.raise_if_any()


def _bfs(start: str, adjacent: dict[str, list[tuple[str, Port, Port]]]) -> dict[str, int]:
    dist = {start: 0}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        for neighbour, _, _ in adjacent[here]:
            if neighbour not in dist:
                dist[neighbour] = dist[here] + 1
                queue.append(neighbour)
    return dist
