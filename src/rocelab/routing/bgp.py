"""config_db's BGP tables → a typed BgpConfig, as sonic-bgpcfgd reads them.

SONiC's bgpcfgd renders FRR's bgpd configuration from DEVICE_METADATA (bgp_asn,
bgp_router_id, default_bgp_status), LOOPBACK_INTERFACE, INTERFACE / VLAN_INTERFACE,
BGP_NEIGHBOR (the `general` templates) and BGP_PEER_RANGE (the `dynamic` templates), with
multipath-relax and maximum-paths from the image's constants.yml. This reader takes the same
tables and says, per field, what it renders, what it warns about and what it ignores
(docs/routing.md holds the table). Bad values are InputErrors naming the file and the field.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

from rocelab.errors import Problems

# sonic-buildimage files/image_config/constants/constants.yml: bgp.multipath_relax.enabled,
# bgp.maximum_paths.ipv4 (bgpd.main.conf.j2 falls back to 64 where the constant is absent).
SONIC_CONSTANTS = {"multipath_relax": True, "maximum_paths": 514}
SHIPPED_CONSTANTS = "SONiC's shipped constants.yml"
# The `general` template writes `timers` only where a session's differ from BGP's defaults.
DEFAULT_KEEPALIVE_S, DEFAULT_HOLDTIME_S = 60, 180
CONNECT_RETRY_S = 10  # the `general` template's `timers connect 10`
MAX_ASN = 2**32 - 1
# FRR's BFD timers where a session sets none: detection after 3 missed 300 ms intervals.
FRR_BFD_MULTIPLIER, FRR_BFD_INTERVAL_MS = 3, 300

NEIGHBOR_FIELDS = frozenset({"asn", "name", "local_addr", "holdtime", "keepalive", "admin_status", "bfd",
                             "bfd_detect_multiplier", "bfd_min_rx", "bfd_min_tx", "rrclient", "nhopself"})
# Fields SONiC keeps on a neighbor that change nothing in bgpd's configuration.
NEIGHBOR_SILENT = frozenset({"nhopself_v6", "peer_type"})
PEER_RANGE_FIELDS = frozenset({"name", "ip_range", "peer_asn", "src_address", "bfd"})
METADATA_READ = frozenset({"bgp_asn", "bgp_router_id", "default_bgp_status", "hostname"})


@dataclass(frozen=True)
class Bfd:
    multiplier: int | None = None  # None: FRR's own (FRR_BFD_MULTIPLIER × FRR_BFD_INTERVAL_MS)
    min_rx_ms: int | None = None
    min_tx_ms: int | None = None


@dataclass(frozen=True)
class Neighbor:
    address: str  # the peer's IP; for an unnumbered session, the local interface (Cumulus `swp51`)
    asn: int | Literal["external", "internal"]  # FRR's and NVUE's `remote-as external|internal` too
    name: str
    keepalive_s: int = DEFAULT_KEEPALIVE_S
    holdtime_s: int = DEFAULT_HOLDTIME_S
    bfd: Bfd | None = None
    shutdown: bool = False
    rrclient: bool = False
    nhopself: bool = False
    unnumbered: bool = False  # a session on an interface (IPv6 link-local), keyed by interface name


@dataclass(frozen=True)
class PeerRange:
    name: str
    ranges: tuple[str, ...]
    asn: int
    src_address: str | None
    bfd: Bfd | None = None


@dataclass(frozen=True)
class BgpConfig:
    source: str
    asn: int
    hostname: str
    router_id: str | None
    # what `network` advertises: Loopback0, VLANs (as written: an interface address), server-facing subnets
    networks: tuple[str, ...]
    neighbors: tuple[Neighbor, ...]
    peer_ranges: tuple[PeerRange, ...] = ()
    multipath_relax: bool = True
    maximum_paths: int | None = SONIC_CONSTANTS["maximum_paths"]  # None: not rendered (bgpd's own default)
    loopback: str | None = None  # Loopback0's IPv4 interface, which the engine puts on `lo`
    notes: tuple[str, ...] = field(default=(), compare=False)  # what was warned or ignored, for the user
    # Where multipath-relax and maximum-paths come from: the image's constants.yml, or SONiC's shipped one.
    constants_source: str = field(default=SHIPPED_CONSTANTS, compare=False)
    # Where each checked value was said, for a file that is not a config_db (EOS, Cumulus): keys
    # ("asn",), ("multipath",), ("maximum-paths",), ("neighbors",), ("neighbor", address, "asn"|"bfd").
    where: Mapping[tuple[str, ...], str] = field(default_factory=dict, compare=False)

    def at(self, key: tuple[str, ...], config_db: str) -> str:
        """Where a value was said; `config_db`: the table and field of a config_db's."""
        return self.where.get(key, config_db)


SPINE_ASN_MODES = ("shared", "per-spine")
DESIGN_KEYS = ("spine_asn", "multipath_relax", "maximum_paths")
DESIGN_HINT = ("e.g. bgp: {spine_asn: per-spine, multipath_relax: false}; spine_asn: shared or per-spine, "
               "multipath_relax: true or false, maximum_paths: a whole number ≥ 1")


@dataclass(frozen=True)
class Design:
    """What a lab.yml (or one of its cases) sets of the fabric's BGP over what each switch's own
    configuration says (None: leave it). `spine_asn` shapes the generated design (rocelab.routing.design):
    the spine tier in one AS, or each spine in its own, as some fabrics number them;
    multipath_relax and maximum_paths override every switch's."""

    spine_asn: str | None = None
    multipath_relax: bool | None = None
    maximum_paths: int | None = None

    def over(self, other: Design) -> Design:
        """This design's settings where it has them, `other`'s elsewhere."""
        return Design(**{key: getattr(other, key) if getattr(self, key) is None else getattr(self, key)
                         for key in DESIGN_KEYS})

    def text(self) -> str:
        """What it sets, as a run's notes say it: "spine_asn per-spine, multipath_relax false"."""
        return ", ".join(f"{key} {str(value).lower()}" for key in DESIGN_KEYS
                         if (value := getattr(self, key)) is not None)


def read_design(value: Any, at: Callable[..., str], problems: Problems) -> Design:
    """A lab.yml `bgp:` mapping; `at(*keys)` is where a key of it stands, for the problems."""
    if not isinstance(value, Mapping):
        problems.add(at(), f"{value!r} is not a mapping of BGP design settings", DESIGN_HINT)
        return Design()
    for key in value:
        if key not in DESIGN_KEYS:
            problems.add(at(str(key)), f"unknown key {key!r}", f"expected one of: {', '.join(DESIGN_KEYS)}")
    spine_asn, relax, paths = value.get("spine_asn"), value.get("multipath_relax"), value.get("maximum_paths")
    if spine_asn is not None and spine_asn not in SPINE_ASN_MODES:
        problems.add(at("spine_asn"), f"{spine_asn!r} is not a spine numbering",
                     "shared (the spine tier in one AS) or per-spine (an AS for each spine)")
        spine_asn = None
    if relax is not None and not isinstance(relax, bool):
        problems.add(at("multipath_relax"), f"{relax!r} is not true or false",
                     "true: `bgp bestpath as-path multipath-relax`; false: without it")
        relax = None
    if paths is not None and (isinstance(paths, bool) or not isinstance(paths, int) or paths < 1):
        problems.add(at("maximum_paths"), f"{paths!r} is not a number of paths", "a whole number ≥ 1")
        paths = None
    return Design(spine_asn, relax, paths)


def has_bgp(doc: Mapping) -> bool:
    """Whether a config_db gives this switch BGP: DEVICE_METADATA.localhost.bgp_asn, as
    bgpd.main.conf.j2 asks (the strings "none" and "null" mean no BGP)."""
    asn = _localhost(doc).get("bgp_asn")
    return isinstance(asn, (str, int)) and str(asn).lower() not in ("", "none", "null")


def _localhost(doc: Mapping) -> Mapping:
    metadata = doc.get("DEVICE_METADATA") if isinstance(doc, Mapping) else None
    localhost = metadata.get("localhost") if isinstance(metadata, Mapping) else None
    return localhost if isinstance(localhost, Mapping) else {}


def _prefixes(table: Any) -> list[tuple[str, str, ipaddress.IPv4Interface | ipaddress.IPv6Interface | None]]:
    """(key, interface name, address) for every "Name|a.b.c.d/len" key of an interface table;
    the address is None where it does not parse."""
    out = []
    for key in table if isinstance(table, Mapping) else ():
        name, sep, prefix = str(key).partition("|")
        if not sep:
            continue  # the interface's own entry (vrf_name, …), not an address
        try:
            out.append((str(key), name, ipaddress.ip_interface(prefix)))
        except ValueError:
            out.append((str(key), name, None))
    return out


def _asn(value: Any, where: str, problems: Problems) -> int:
    text = str(value)
    if not text.isdigit() or not 1 <= int(text) <= MAX_ASN:
        problems.add(where, f"{value!r} is not an AS number", f"a whole number from 1 to {MAX_ASN}, e.g. 65001")
        return 0
    return int(text)


def _seconds(fields: Mapping, key: str, default: int, where: str, problems: Problems) -> int:
    if key not in fields:
        return default
    text = str(fields[key])
    if not text.isdigit():
        problems.add(f"{where}.{key}", f"{fields[key]!r} is not a number of seconds", "e.g. 3")
        return default
    return int(text)


def _bfd(fields: Mapping, where: str, problems: Problems) -> Bfd | None:
    if str(fields.get("bfd", "false")).lower() != "true":
        return None
    timers = ("bfd_detect_multiplier", "bfd_min_rx", "bfd_min_tx")
    # As the template: the three timers together, or FRR's defaults.
    if not all(t in fields for t in timers):
        return Bfd()
    values = []
    for key in timers:
        text = str(fields[key])
        if not text.isdigit() or int(text) < 1:
            problems.add(f"{where}.{key}", f"{fields[key]!r} is not a positive whole number",
                         "the detect multiplier, or milliseconds for bfd_min_rx/bfd_min_tx")
            return Bfd()
        values.append(int(text))
    return Bfd(*values)


def _neighbor_key(key: str) -> str:
    """BGP_NEIGHBOR keys are "a.b.c.d" or "vrf|a.b.c.d" (the default VRF only, here)."""
    return key.rpartition("|")[2]


def read_constants(doc: Any, source: str) -> dict:
    """An image's constants.yml (`/etc/sonic/constants.yml` on the switch) → the two constants
    bgpd.main.conf.j2 reads, as read_bgp takes them: multipath-relax where
    constants.bgp.multipath_relax.enabled is true, maximum-paths constants.bgp.maximum_paths.ipv4
    (64 when absent) where constants.bgp.maximum_paths.enabled is true, else None (not rendered).
    An InputError naming the file and field for a value of the wrong kind."""
    problems = Problems(source)
    top = doc.get("constants") if isinstance(doc, Mapping) else None
    bgp = top.get("bgp", {}) if isinstance(top, Mapping) else None
    if not isinstance(bgp, Mapping):
        problems.add("constants.bgp", "is not a mapping", "SONiC's constants.yml: constants: {bgp: {...}}")
        problems.raise_if_any()

    def section(name: str) -> Mapping:
        value = bgp.get(name, {})
        if not isinstance(value, Mapping):
            problems.add(f"constants.bgp.{name}", "is not a mapping", "e.g. {enabled: true}")
            return {}
        return value

    def enabled(name: str, fields: Mapping) -> bool:
        value = fields.get("enabled", False)
        if not isinstance(value, bool):
            problems.add(f"constants.bgp.{name}.enabled", f"{value!r} is not true or false", "true or false")
            return False
        return value

    relax, paths = section("multipath_relax"), section("maximum_paths")
    maximum = None
    if enabled("maximum_paths", paths):
        maximum = paths.get("ipv4", 64)
        if isinstance(maximum, bool) or not isinstance(maximum, int) or maximum < 1:
            problems.add("constants.bgp.maximum_paths.ipv4", f"{maximum!r} is not a number of paths", "e.g. 64")
            maximum = None
    problems.raise_if_any()
    return {"multipath_relax": enabled("multipath_relax", relax), "maximum_paths": maximum}


def read_bgp(doc: Mapping, source: str, hostname: str = "", constants: Mapping = SONIC_CONSTANTS,
             constants_source: str = SHIPPED_CONSTANTS) -> BgpConfig:
    """The BGP configuration a config_db gives, or an InputError naming every bad field.
    `hostname` is used where DEVICE_METADATA gives none; `constants` are constants.yml's
    (read_constants), from `constants_source`."""
    problems = Problems(source)
    notes: list[str] = []
    localhost = _localhost(doc)
    if not has_bgp(doc):
        problems.add("DEVICE_METADATA.localhost.bgp_asn", "is missing", "the switch's AS number, e.g. \"65001\"")
        problems.raise_if_any()
    asn = _asn(localhost["bgp_asn"], "DEVICE_METADATA.localhost.bgp_asn", problems)
    for key in sorted(set(localhost) - METADATA_READ):
        if key.startswith("bgp") or key in ("type", "sub_role", "switch_type"):
            notes.append(f"DEVICE_METADATA.localhost.{key}: ignored (rocelab renders the `general` templates "
                         "of a single-ASIC switch)")
    all_down = str(localhost.get("default_bgp_status", "up")).lower() == "down"

    loopback = None
    for key, name, address in _prefixes(doc.get("LOOPBACK_INTERFACE")):
        where = f'LOOPBACK_INTERFACE."{key}"'
        if address is None:
            problems.add(where, "is not NAME|address/length", 'e.g. "Loopback0|10.1.0.1/32"')
        elif address.version == 6:
            notes.append(f"{where}: ignored (IPv6: rocelab's fabric is IPv4)")
        elif name == "Loopback0":
            loopback = address
        else:
            notes.append(f"{where}: ignored (only Loopback0 is advertised and names the router)")
    router_id = localhost.get("bgp_router_id")
    if router_id is not None:
        try:
            router_id = str(ipaddress.IPv4Address(str(router_id)))
        except ValueError:
            problems.add("DEVICE_METADATA.localhost.bgp_router_id", f"{router_id!r} is not an IPv4 address",
                         "e.g. 10.1.0.1")
            router_id = None
    router_id = router_id or (str(loopback.ip) if loopback else None)

    local: set[str] = set()
    subnets: dict[ipaddress.IPv4Network, tuple[str, str]] = {}  # → (table, the address as written)
    # A VLAN bound to a VNET (its bare key's vnet_name) is routed in that VNET: bgpd.main.conf.j2
    # advertises none of its subnets.
    vlans = doc.get("VLAN_INTERFACE")
    vnet = {key: fields["vnet_name"] for key, fields in (vlans.items() if isinstance(vlans, Mapping) else ())
            if "|" not in key and isinstance(fields, Mapping) and fields.get("vnet_name")}
    for table in ("INTERFACE", "VLAN_INTERFACE"):
        for key, name, address in _prefixes(doc.get(table)):
            where = f'{table}."{key}"'
            if address is None:
                problems.add(where, "is not NAME|address/length", 'e.g. "Ethernet0|10.0.0.0/31"')
            elif address.version == 6:
                notes.append(f"{where}: ignored (IPv6: rocelab's fabric is IPv4)")
            else:
                local.add(str(address.ip))
                if table == "VLAN_INTERFACE" and name in vnet:
                    notes.append(f"{where}: not advertised ({name} is in VNET {vnet[name]}, as SONiC leaves it)")
                else:
                    subnets[address.network] = (table, str(address))

    neighbors = []
    raw_neighbors = doc.get("BGP_NEIGHBOR") or {}
    if not isinstance(raw_neighbors, Mapping):
        problems.add("BGP_NEIGHBOR", "is not a table", 'a mapping of neighbor address to fields, e.g. {"10.0.0.1": {"asn": "65100"}}')
        raw_neighbors = {}
    for key, fields in raw_neighbors.items():
        where = f'BGP_NEIGHBOR."{key}"'
        vrf, _, _ = str(key).rpartition("|")
        if vrf and vrf != "default":
            notes.append(f"{where}: ignored (VRF {vrf}: rocelab renders the default VRF)")
            continue
        address = _neighbor_key(str(key))
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            problems.add(where, f"{address!r} is not an IP address", "BGP_NEIGHBOR is keyed by the peer's address")
            continue
        if ip.version == 6:
            notes.append(f"{where}: ignored (IPv6: rocelab's fabric is IPv4)")
            continue
        if not isinstance(fields, Mapping) or "asn" not in fields:
            problems.add(where, "has no asn", "the peer's AS number, e.g. \"asn\": \"65100\"")
            continue
        for name in sorted(set(fields) - NEIGHBOR_FIELDS - NEIGHBOR_SILENT):
            notes.append(f"{where}.{name}: ignored (not a field of the `general` templates)")
        local_addr = fields.get("local_addr")
        if local_addr is not None and str(local_addr) not in local:
            # bgpcfgd holds such a neighbor back until the address is configured.
            notes.append(f"{where}.local_addr: {local_addr} is on no INTERFACE of this switch "
                         "(bgpcfgd would wait for it; rocelab renders the neighbor anyway)")
        status = fields.get("admin_status")
        neighbors.append(Neighbor(
            str(ip), _asn(fields["asn"], f"{where}.asn", problems), str(fields.get("name", "")),
            _seconds(fields, "keepalive", DEFAULT_KEEPALIVE_S, where, problems),
            _seconds(fields, "holdtime", DEFAULT_HOLDTIME_S, where, problems),
            _bfd(fields, where, problems),
            shutdown=(status == "down") if status is not None else all_down,
            rrclient=str(fields.get("rrclient", "0")) not in ("0", ""),
            nhopself=str(fields.get("nhopself", "0")) not in ("0", "")))

    peer_ranges = []
    for key, fields in (doc.get("BGP_PEER_RANGE") or {}).items():
        where = f'BGP_PEER_RANGE."{key}"'
        fields = fields if isinstance(fields, Mapping) else {}
        raw_range = fields.get("ip_range", [])
        ranges = [r.strip() for r in (raw_range.split(",") if isinstance(raw_range, str) else raw_range)]
        bad = [r for r in ranges if not _is_network(r)]
        if not ranges or bad:
            problems.add(f"{where}.ip_range", f"{raw_range!r} is not a list of prefixes", 'e.g. ["10.255.0.0/25"]')
            continue
        if "peer_asn" not in fields:
            notes.append(f"{where}: ignored (no peer_asn, and rocelab has no deployment_id_asn_map to take one from)")
            continue
        for name in sorted(set(fields) - PEER_RANGE_FIELDS):
            notes.append(f"{where}.{name}: ignored (not a field of the `dynamic` templates)")
        src = fields.get("src_address")
        if src is None:
            notes.append(f"{where}: no src_address and no Loopback1: rendered without update-source")
        peer_ranges.append(PeerRange(str(fields.get("name", key)), tuple(ranges),
                                     _asn(fields["peer_asn"], f"{where}.peer_asn", problems),
                                     str(ipaddress.ip_interface(src).ip) if src else None,
                                     _bfd(fields, where, problems)))

    device_global = doc.get("BGP_DEVICE_GLOBAL")
    if isinstance(device_global, Mapping) and device_global.get("CONFED"):
        notes.append("BGP_DEVICE_GLOBAL.CONFED: ignored (rocelab renders no BGP confederation)")
    problems.raise_if_any()
    # Loopback0 and the VLAN subnets, as bgpd.main.conf.j2; and, rocelab's hosts being on
    # routed ports rather than a VLAN, every INTERFACE subnet with no BGP neighbor in it.
    peers = {ipaddress.IPv4Address(n.address) for n in neighbors}
    networks = [str(loopback.network)] if loopback else []
    # A VLAN's as SONiC writes it, the interface's address (`network 10.10.10.1/24`: bgpd masks
    # it, and its running configuration shows the subnet).
    networks += [written if table == "VLAN_INTERFACE" else str(net)
                 for net, (table, written) in sorted(subnets.items())
                 if table == "VLAN_INTERFACE" or not any(p in net for p in peers)]
    return BgpConfig(source, asn, str(localhost.get("hostname") or hostname), router_id, tuple(networks),
                     tuple(neighbors), tuple(peer_ranges), bool(constants.get("multipath_relax", True)),
                     constants.get("maximum_paths", 64), str(loopback) if loopback else None, tuple(notes),
                     constants_source)


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text)
    except ValueError:
        return False
    return True
