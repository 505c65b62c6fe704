"""A Cumulus Linux (NVUE) configuration's BGP → BgpConfig, with the key or line of each value.

Both NVUE forms rocelab reads for QoS (`nv config show` YAML, `nv config show -o commands`)
become the same statements (rocelab.qos.cumulus); read from them:

- `router bgp autonomous-system N` (or the default VRF's own), `router bgp router-id A`
  (or the VRF's);
- under `vrf default router bgp`: `neighbor K` with `remote-as external|internal|N`,
  `type unnumbered|numbered`, `peer-group G`, `bfd enable on` (`bfd state enabled` from
  Cumulus Linux 5.15), `timers keepalive|hold N`, `description`, `shutdown on`;
  `peer-group G` with `remote-as` and `bfd`; `path-selection multipath aspath-ignore on`;
  `address-family ipv4-unicast multipaths ebgp N`; `address-family ipv4-unicast network P`.

A neighbor keyed by an interface (`swp51`) is unnumbered (Cumulus's usual design): its session
runs on that port's IPv6 link-local address, and `remote-as external` takes whatever AS the far
end has, other than this switch's. Other VRFs, address families and options are noted as ignored.

Cumulus's defaults where a key is absent: multipath on with 64 paths for eBGP ("Cumulus Linux
enables the BGP multipath option by default and sets the maximum number of paths to 64", Cumulus
Linux user guide, Optional BGP Configuration, ECMP); `aspath-ignore` off (the user guide's
Troubleshooting BGP page: `nv show vrf default router bgp path-selection` reads `multipath
aspath-ignore off`, vtysh `asPathMultiPathRelaxEnabled: false`; FRR's bgp_vty.c has no default
for it in any profile); BFD off; keepalive 3 s and hold 9 s (FRR's `datacenter` profile, which
Cumulus Linux runs: bgp_vty.c BGP_KEEPALIVE, BGP_HOLDTIME; the same page's 3000/9000 ms).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from rocelab.errors import Problems
from rocelab.qos.cumulus import command_statements, detect_form, yaml_statements
from rocelab.routing.bgp import MAX_ASN, Bfd, BgpConfig, Neighbor

DEFAULT_EBGP_MULTIPATHS = 64
KEEPALIVE_S, HOLDTIME_S = 3, 9
_ON = {"on": True, "enabled": True, "off": False, "disabled": False}


@dataclass
class _Peer:
    asn: tuple[int | str, str] | None = None
    bfd: tuple[bool, str] | None = None
    group: tuple[str, str] | None = None
    kind: str | None = None  # `type`
    keepalive_s: int | None = None
    holdtime_s: int | None = None
    description: str = ""
    shutdown: bool = False
    first: str = ""


def _statements(text: str, source: str) -> list:
    form = detect_form(text)
    if form == "nv config show":
        return yaml_statements(text, source)
    if form == "nv config show -o commands":
        return command_statements(text)
    return []  # rendered QoS files: no BGP in them


def _bgp_words(words: tuple[str, ...]) -> tuple[str, ...] | None:
    """The words after `router bgp` of the switch or of the default VRF; None: not BGP's."""
    if words[:2] == ("router", "bgp"):
        return words[2:]
    if words[:4] == ("vrf", "default", "router", "bgp"):
        return words[4:]
    return None


def has_nvue_bgp(text: str, source: str) -> bool:
    return any(_bgp_words(st.words) for st in _statements(text, source) if not st.unset)


def read_nvue_bgp(text: str, source: str, hostname: str) -> BgpConfig:
    """The BGP of an NVUE file with `router bgp` statements (has_nvue_bgp), or an InputError
    naming every bad key."""
    problems = Problems(source)
    notes: list[str] = []
    asn: tuple[int, str] | None = None
    router_id = None
    relax, relax_at = False, None
    paths, paths_at = DEFAULT_EBGP_MULTIPATHS, None
    networks: list[str] = []
    loopback: ipaddress.IPv4Interface | None = None
    peers: dict[str, _Peer] = {}
    groups: dict[str, _Peer] = {}
    first = ""
    for st in _statements(text, source):
        said = f"{source}: {st.where}: `{st.text}`"
        if st.unset:
            if _bgp_words(st.words) is not None:
                notes.append(f"{said}: ignored (rocelab reads the configuration as set)")
            continue
        if st.words[:4] == ("interface", "lo", "ip", "address") and len(st.words) == 5:
            # The loopback bgpd's `network` advertises (and Cumulus's router-id where none is set).
            try:
                address = ipaddress.ip_interface(st.words[4])
            except ValueError:
                continue  # the QoS reader reads interfaces; a bad address is not BGP's to report
            if address.version == 4 and loopback is None:
                loopback = address
            continue
        if st.words[:1] == ("vrf",) and st.words[2:4] == ("router", "bgp") and st.words[1] != "default":
            notes.append(f"{said}: ignored (rocelab reads the default VRF)")
            continue
        rest = _bgp_words(st.words)
        if rest is None or not rest:
            continue
        first = first or st.where
        key, args = rest[0], list(rest[1:])
        if key == "autonomous-system" and len(args) == 1:
            if args[0].isdigit() and 1 <= int(args[0]) <= MAX_ASN:
                asn = (int(args[0]), said)
            else:
                problems.add(st.where, f"`{st.text}`: {args[0]!r} is not an AS number",
                             f"a whole number from 1 to {MAX_ASN} (rocelab does not assign auto BGP's leaf/spine ASNs)")
        elif key == "router-id" and len(args) == 1:
            try:
                router_id = str(ipaddress.IPv4Address(args[0]))
            except ValueError:
                problems.add(st.where, f"`{st.text}`: {args[0]!r} is not an IPv4 address", "e.g. 10.10.10.1")
        elif key in ("enable", "state"):
            pass  # `router bgp enable on`: the instance exists; its ASN is what is checked
        elif rest[:3] == ("path-selection", "multipath", "aspath-ignore") and len(rest) == 4:
            on = _ON.get(rest[3])
            if on is None:
                problems.add(st.where, f"`{st.text}`: {rest[3]!r} is not on or off", "on or off")
            else:
                relax, relax_at = on, said
        elif rest[:3] == ("address-family", "ipv4-unicast", "multipaths") and len(rest) == 5:
            if rest[3] == "ebgp":
                if rest[4].isdigit() and int(rest[4]) >= 1:
                    paths, paths_at = int(rest[4]), said
                else:
                    problems.add(st.where, f"`{st.text}`: {rest[4]!r} is not a number of paths", "e.g. 64")
            else:
                notes.append(f"{said}: ignored (the fabric's sessions are eBGP)")
        elif rest[:2] == ("address-family", "ipv4-unicast") and rest[2:3] in (("enable",), ("state",)):
            pass  # on by default in the default VRF; its neighbors are what is checked
        elif rest[:3] == ("address-family", "ipv4-unicast", "network") and len(rest) >= 4:
            try:
                networks.append(str(ipaddress.IPv4Network(rest[3])))
            except ValueError:
                problems.add(st.where, f"`{st.text}`: {rest[3]!r} is not an IPv4 prefix", "e.g. 10.10.10.1/32")
        elif key in ("neighbor", "peer-group") and args:
            table = peers if key == "neighbor" else groups
            peer = table.setdefault(args[0], _Peer(first=st.where))
            _peer_statement(peer, args[1:], st.where, st.text, said, problems, notes)
        else:
            notes.append(f"{said}: ignored")

    if asn is None:
        problems.add(first, "BGP is configured but `router bgp autonomous-system` is not set",
                     "nv set router bgp autonomous-system 65101")
        problems.raise_if_any()
    where: dict[tuple[str, ...], str] = {
        ("asn",): asn[1],
        ("multipath",): relax_at or f"{source}: no `vrf default router bgp path-selection multipath aspath-ignore` "
                                    "(Cumulus's default: off)",
        ("maximum-paths",): paths_at or f"{source}: no `vrf default router bgp address-family ipv4-unicast "
                                        f"multipaths ebgp` (Cumulus's default: {DEFAULT_EBGP_MULTIPATHS})",
        ("neighbors",): f"{source}: vrf default router bgp neighbor"}
    neighbors = []
    for name, peer in peers.items():
        group = groups.get(peer.group[0]) if peer.group else None
        if peer.group and group is None:
            problems.add(peer.group[1], f"peer group {peer.group[0]!r} is not configured",
                         f"vrf default router bgp peer-group {peer.group[0]} remote-as external")
            continue
        remote = peer.asn or (group.asn if group else None)
        if remote is None:
            problems.add(peer.first, f"neighbor {name} has no remote-as", "remote-as external, internal or an AS number, "
                         "on the neighbor or its peer group")
            continue
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            ip = None
        if ip is not None and ip.version == 6:
            notes.append(f"{source}: {peer.first}: neighbor {name}: ignored (IPv6: rocelab's fabric is IPv4)")
            continue
        if ip is None and peer.kind == "numbered":
            problems.add(peer.first, f"neighbor {name} is `type numbered` but is not an IP address",
                         "a numbered neighbor is keyed by its address; an interface neighbor is unnumbered")
            continue
        bfd = peer.bfd or (group.bfd if group else None)
        address = str(ip) if ip else name
        where[("neighbor", address)] = f"{source}: {peer.first}"
        where[("neighbor", address, "asn")] = remote[1]
        where[("neighbor", address, "bfd")] = (bfd[1] if bfd else f"{source}: {peer.first}: neighbor {name} has no "
                                               "`bfd enable on`" + (f", nor its peer group {peer.group[0]}" if peer.group else ""))
        neighbors.append(Neighbor(
            address, remote[0], peer.description,
            peer.keepalive_s or (group.keepalive_s if group else None) or KEEPALIVE_S,
            peer.holdtime_s or (group.holdtime_s if group else None) or HOLDTIME_S,
            Bfd() if bfd and bfd[0] else None, shutdown=peer.shutdown, unnumbered=ip is None))
    problems.raise_if_any()
    return BgpConfig(source, asn[0], hostname, router_id or (str(loopback.ip) if loopback else None), tuple(networks),
                     tuple(neighbors), multipath_relax=relax, maximum_paths=paths,
                     loopback=str(loopback) if loopback else None, notes=tuple(notes), constants_source=source,
                     where=where)


def _peer_statement(peer: _Peer, rest: list[str], at: str, text: str, said: str, problems: Problems,
                    notes: list[str]) -> None:
    """One `neighbor K …` or `peer-group G …` statement's words after the key."""
    if rest[:1] == ["remote-as"] and len(rest) == 2:
        value = rest[1]
        if value in ("external", "internal"):
            peer.asn = (value, said)
        elif value.isdigit() and 1 <= int(value) <= MAX_ASN:
            peer.asn = (int(value), said)
        else:
            problems.add(at, f"`{text}`: {value!r} is not a remote AS", "external, internal or an AS number")
    elif rest[:1] == ["bfd"] and len(rest) == 3 and rest[1] in ("enable", "state"):
        on = _ON.get(rest[2])
        if on is None:
            problems.add(at, f"`{text}`: {rest[2]!r} is not on or off", "bfd enable on")
        else:
            peer.bfd = (on, said)
    elif rest[:1] == ["bfd"]:
        pass  # detect-multiplier, intervals: BFD's timers, not whether it runs
    elif rest[:1] == ["type"] and len(rest) == 2 and rest[1] in ("unnumbered", "numbered"):
        peer.kind = rest[1]
    elif rest[:1] == ["peer-group"] and len(rest) == 2:
        peer.group = (rest[1], at)
    elif rest[:2] in (["timers", "keepalive"], ["timers", "hold"]) and len(rest) == 3 and rest[2].isdigit():
        if rest[1] == "keepalive":
            peer.keepalive_s = int(rest[2])
        else:
            peer.holdtime_s = int(rest[2])
    elif rest[:1] == ["description"]:
        peer.description = " ".join(rest[1:])
    elif rest[:1] == ["shutdown"] and len(rest) == 2:
        peer.shutdown = bool(_ON.get(rest[1]))
    elif rest:
        notes.append(f"{said}: ignored")
