"""An EOS running-config's `router bgp` → BgpConfig, with the line each value came from.

Read (at the `router bgp ASN` level, and `network` under `address-family ipv4`):
`router-id`, `maximum-paths N [ecmp M]`, `[no] bgp bestpath as-path multipath-relax`,
`neighbor X remote-as N`, `neighbor NAME peer group` (or EOS's older `peer-group`) with
`neighbor X peer group NAME`, `neighbor X|NAME bfd`, `neighbor X|NAME timers K H`,
`neighbor X description D`, `neighbor X shutdown`, `network P`, `redistribute connected` (the
subnets of the config's routed interfaces). A neighbor's remote-as and BFD come from its own
line, else from its peer group's. Everything else under `router bgp` (other address families,
VRFs, route-maps, other neighbor options) is noted as ignored; docs/plugin-eos.md lists it.

EOS's defaults, where a statement is absent: maximum-paths 1 (Arista's "maximum-paths" TOI:
"default m=1"; https://www.arista.com/en/support/toi/author/271-saurav), multipath-relax on
(Arista's "BGP multipath relax" TOI: "EOS by default selects the prefix for ECMP if the two paths
have the same AS-PATH length regardless of the ASN values", the knob turning that off; a
running-config, which omits defaults, shows `no bgp bestpath as-path multipath-relax` where it is
off), BFD off per neighbor, keepalive 60 s and hold 180 s (EOS's `timers bgp 60 180`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from rocelab.errors import Problems
from rocelab.routing.bgp import MAX_ASN, Bfd, BgpConfig, Neighbor

DEFAULT_MAXIMUM_PATHS = 1
DEFAULT_MULTIPATH_RELAX = True
KEEPALIVE_S, HOLDTIME_S = 60, 180

# A neighbor peered by interface is left out of the model: FRR cannot run such a config as read.
INTERFACE_PEERING_IGNORED = "EOS's interface peering is not read: give each neighbor's address"


@dataclass
class _Peer:
    """What a `neighbor` line says of a neighbor or a peer group, each value with its line."""

    asn: tuple[int, str] | None = None
    bfd: str | None = None  # the line that turns BFD on
    group: tuple[str, str] | None = None  # (peer group, its line)
    timers: tuple[int, int] | None = None
    description: str = ""
    shutdown: bool = False
    first: str = ""  # the first line naming it
    defined: bool = False  # a peer group's `neighbor NAME peer group`


@dataclass
class _Block:
    """`router bgp`'s lines: (line number, indent, text), and its own line."""

    number: int
    asn: str
    lines: list[tuple[int, int, str]] = field(default_factory=list)


def _blocks(text: str) -> tuple[list[_Block], list[ipaddress.IPv4Interface]]:
    """The `router bgp` blocks of a running-config, and every routed interface's IPv4 address."""
    blocks: list[_Block] = []
    addresses: list[ipaddress.IPv4Interface] = []
    current: _Block | None = None
    in_interface = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("!"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            current, in_interface = None, stripped.startswith("interface ")
            match = re.fullmatch(r"router bgp (\S+)", stripped)
            if match:
                current = _Block(number, match.group(1))
                blocks.append(current)
            continue
        if current is not None:
            current.lines.append((number, indent, stripped))
        elif in_interface:
            match = re.fullmatch(r"ip address (\S+/\d+)", stripped)
            if match:
                try:
                    addresses.append(ipaddress.IPv4Interface(match.group(1)))
                except ValueError:
                    pass  # the QoS reader's business; `redistribute connected` skips it
    return blocks, addresses


def has_router_bgp(text: str) -> bool:
    return bool(_blocks(text)[0])


def read_eos_bgp(text: str, source: str, hostname: str) -> BgpConfig:
    """The BGP configuration of a running-config holding `router bgp` (has_router_bgp), or an
    InputError naming every bad line."""
    problems = Problems(source)
    notes: list[str] = []
    blocks, addresses = _blocks(text)
    block = blocks[0]
    head = f"line {block.number}"
    for extra in blocks[1:]:
        problems.add(f"line {extra.number}", f"`router bgp {extra.asn}`: a second `router bgp`",
                     "EOS runs one BGP instance: keep one `router bgp` block")
    asn = _asn(block.asn, head, f"router bgp {block.asn}", problems)
    where: dict[tuple[str, ...], str] = {("asn",): f"{source}: {head}: `router bgp {block.asn}`"}
    router_id = None
    relax, relax_at = DEFAULT_MULTIPATH_RELAX, (f"{source}: `router bgp {block.asn}` ({head}) has no "
                                                "`no bgp bestpath as-path multipath-relax` (EOS's default: on)")
    paths, paths_at = DEFAULT_MAXIMUM_PATHS, (f"{source}: `router bgp {block.asn}` ({head}) has no "
                                              f"`maximum-paths` (EOS's default: {DEFAULT_MAXIMUM_PATHS})")
    networks: list[str] = []
    peers: dict[str, _Peer] = {}
    section = ""  # the sub-block a deeper line belongs to ("address-family ipv4", "vrf X", …)
    top = min((indent for _, indent, _ in block.lines), default=3)

    for number, indent, stmt in block.lines:
        at = f"line {number}"
        said = f"{source}: {at}: `{stmt}`"
        if indent == top:
            section = stmt if stmt.startswith(("address-family", "vrf ")) else ""
            if section:
                if not section.startswith("address-family ipv4"):
                    notes.append(f"{said}: ignored (rocelab reads the default VRF's IPv4 unicast)")
                continue
        elif section.startswith("address-family ipv4") and not section.startswith("address-family ipv4 multicast"):
            match = re.fullmatch(r"network (\S+)", stmt)
            if match:
                _network(match.group(1), at, stmt, networks, problems)
            elif not re.fullmatch(r"(no )?neighbor \S+ activate", stmt):
                notes.append(f"{said}: ignored")
            continue
        else:
            continue  # inside an ignored section, noted once at its head
        words = stmt.split()
        if stmt == "bgp bestpath as-path multipath-relax":
            relax, relax_at = True, said
        elif stmt == "no bgp bestpath as-path multipath-relax":
            relax, relax_at = False, said
        elif words[0] == "router-id" and len(words) == 2:
            try:
                router_id = str(ipaddress.IPv4Address(words[1]))
            except ValueError:
                problems.add(at, f"`{stmt}`: {words[1]!r} is not an IPv4 address", "e.g. router-id 10.1.0.1")
        elif words[0] == "maximum-paths":
            match = re.fullmatch(r"maximum-paths (\d+)( ecmp (\d+))?", stmt)
            if match and int(match.group(1)) >= 1:
                paths, paths_at = int(match.group(1)), said  # N paths installed; ecmp M ≥ N sizes the group
            else:
                problems.add(at, f"`{stmt}` is not `maximum-paths N [ecmp M]`", "e.g. maximum-paths 64 ecmp 64")
        elif words[0] == "network" and len(words) == 2:
            _network(words[1], at, stmt, networks, problems)
        elif stmt == "redistribute connected":
            networks += [str(a.network) for a in addresses if str(a.network) not in networks]
        elif words[:2] == ["neighbor", "interface"]:
            notes.append(f"{said}: ignored ({INTERFACE_PEERING_IGNORED})")
        elif words[0] == "neighbor" and len(words) >= 3:
            _neighbor(words[1], words[2:], at, stmt, source, peers, problems, notes)
        else:
            notes.append(f"{said}: ignored")

    neighbors = []
    for name, peer in peers.items():
        if _is_ip(name) is None:
            if not peer.defined:
                problems.add(peer.first, f"`neighbor {name}`: {name!r} is neither an IP address nor a peer group",
                             f"define the group with `neighbor {name} peer group`")
            continue
        group = peers.get(peer.group[0]) if peer.group else None
        if peer.group and (group is None or not group.defined):
            problems.add(peer.group[1], f"peer group {peer.group[0]!r} is not defined",
                         f"`neighbor {peer.group[0]} peer group`")
            continue
        remote = peer.asn or (group.asn if group else None)
        if remote is None:
            problems.add(peer.first, f"neighbor {name} has no remote-as",
                         f"`neighbor {name} remote-as ASN`, or on its peer group")
            continue
        bfd = peer.bfd or (group.bfd if group else None)
        timers = peer.timers or (group.timers if group else None) or (KEEPALIVE_S, HOLDTIME_S)
        ip = _is_ip(name)
        if ip.version == 6:
            notes.append(f"{source}: {peer.first}: neighbor {name}: ignored (IPv6: rocelab's fabric is IPv4)")
            continue
        address = str(ip)
        where[("neighbor", address)] = f"{source}: {peer.first}"
        where[("neighbor", address, "asn")] = f"{source}: {remote[1]}"
        where[("neighbor", address, "bfd")] = (f"{source}: {bfd}" if bfd else
                                               f"{source}: {peer.first}: no `neighbor {name} bfd`"
                                               + (f" nor `neighbor {peer.group[0]} bfd`" if peer.group else ""))
        neighbors.append(Neighbor(address, remote[0], peer.description, timers[0], timers[1],
                                  Bfd() if bfd else None, shutdown=peer.shutdown))
    problems.raise_if_any()
    where.update({("multipath",): relax_at, ("maximum-paths",): paths_at,
                  ("neighbors",): f"{source}: `router bgp {block.asn}` ({head})"})
    return BgpConfig(source, asn, hostname, router_id, tuple(networks), tuple(neighbors),
                     multipath_relax=relax, maximum_paths=paths, notes=tuple(notes), constants_source=source,
                     where=where)


def _neighbor(name: str, rest: list[str], at: str, stmt: str, source: str, peers: dict[str, _Peer],
              problems: Problems, notes: list[str]) -> None:
    peer = peers.setdefault(name, _Peer(first=at))
    if rest in (["peer", "group"], ["peer-group"]):
        peer.defined = True
    elif rest[:2] == ["peer", "group"] and len(rest) == 3 or rest[0] == "peer-group" and len(rest) == 2:
        peer.group = (rest[-1], at)
    elif rest[0] == "remote-as" and len(rest) == 2:
        asn = _asn(rest[1], at, stmt, problems)
        peer.asn = (asn, f"{at}: `{stmt}`")
    elif rest == ["bfd"]:
        peer.bfd = f"{at}: `{stmt}`"
    elif rest[0] == "timers" and len(rest) == 3 and all(w.isdigit() for w in rest[1:]):
        peer.timers = (int(rest[1]), int(rest[2]))
    elif rest[0] == "description":
        peer.description = " ".join(rest[1:])
    elif rest == ["shutdown"]:
        peer.shutdown = True
    else:
        notes.append(f"{source}: {at}: `{stmt}`: ignored")


def _asn(text: str, at: str, stmt: str, problems: Problems) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_ASN:
        problems.add(at, f"`{stmt}`: {text!r} is not an AS number", f"a whole number from 1 to {MAX_ASN}, e.g. 65001")
        return 0
    return int(text)


def _network(text: str, at: str, stmt: str, networks: list[str], problems: Problems) -> None:
    try:
        networks.append(str(ipaddress.IPv4Network(text)))
    except ValueError:
        problems.add(at, f"`{stmt}`: {text!r} is not an IPv4 prefix", "e.g. network 198.19.1.0/24")


def _is_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
