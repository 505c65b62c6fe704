"""What a SONiC switch derives at run time from its config_db, which a saved config_db or a
template rendering therefore does not hold.

- buffermgrd, traditional buffer model (sonic-swss cfgmgr/buffermgr.cpp): for every port
  with a PORT entry, a CABLE_LENGTH entry other than "0m" and a PORT_QOS_MAP pfc_enable, it
  looks the port's PORT.speed and cable length up in the platform's pg_profile_lookup.ini and
  writes BUFFER_PROFILE `pg_lossless_<speed>_<cable>_profile` (pool ingress_lossless_pool;
  size, xon, xoff and, where the row has one, xon_offset from the row; the row's threshold as
  `<pool mode>_th`; a profile of that name already in config_db is reused) and BUFFER_PG
  `<port>|<pfc_enable priorities as ranges>` ("3-4") pointing to it: the PG numbers are the
  pfc_enable priorities themselves, not TC_TO_PRIORITY_GROUP_MAP's.
- `pfcwd start_default` (sonic-utilities pfcwd/main.py), run by `config load_minigraph` when
  DEVICE_METADATA.localhost.default_pfcwd_status is "enable": a PFC_WD entry, replacing any
  the file has, on every DEVICE_NEIGHBOR port and every admin-up internal (role Int) port that
  has a PORT_QOS_MAP pfc_enable; action drop, detection and restoration 200 ms each, times
  ⌈PORT entries / 32⌉.

Both are plain functions of the loaded profile and the few other tables they read
(SwitchFacts); the fabric description reads the files and calls them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Mapping

from rocelab.errors import InputError, Problem, Problems
from rocelab.qos.model import DYNAMIC_TH_MAX, DYNAMIC_TH_MIN, BufferPool, BufferProfile, PfcWatchdog, QosProfile

LOSSLESS_POOL = "ingress_lossless_pool"  # the pool buffermgrd's profiles draw from
PFCWD_DETECTION_MS = 200
PFCWD_RESTORATION_MS = 200
PFCWD_ACTION = "drop"
PFCWD_PORTS_PER_STEP = 32  # start_default scales its times by ⌈ports / 32⌉
_CABLE = re.compile(r"[0-9]+m")
_UNSIGNED = re.compile(r"0|[1-9][0-9]*")
_SIGNED = re.compile(r"-?(0|[1-9][0-9]*)")


@dataclass(frozen=True)
class PortFacts:
    """What config_db's PORT and CABLE_LENGTH tables say of one port."""

    speed: str | None = None  # PORT.speed as written, in Mb/s ("100000"); the lookup key
    mtu_bytes: int | None = None
    admin_up: bool = False
    internal: bool = False  # PORT.role "Int": a backplane port of a multi-ASIC device
    cable: str | None = None  # CABLE_LENGTH value ("40m"); None: no entry
    cable_where: str = ""  # "CABLE_LENGTH.AZURE.Ethernet0"


@dataclass(frozen=True)
class SwitchFacts:
    """The config_db tables besides the QoS ones that buffermgrd and pfcwd read."""

    ports: Mapping[str, PortFacts] = field(default_factory=dict)  # PORT and CABLE_LENGTH ports
    port_entries: int = 0  # PORT entries: pfcwd start_default scales with them
    buffer_model: str = "traditional"
    default_pfcwd_status: str = "disable"  # SONiC YANG's default
    neighbours: frozenset[str] | None = None  # DEVICE_NEIGHBOR ports; None: no such table
    pfc_enable_ports: frozenset[str] = frozenset()  # ports whose PORT_QOS_MAP sets pfc_enable
    buffer_profiles: Mapping[str, BufferProfile] = field(default_factory=dict)

    def cable_m(self, port: str) -> int | None:
        cable = self.ports.get(port, PortFacts()).cable
        return int(cable[:-1]) if cable else None


@dataclass(frozen=True)
class LookupRow:
    """One row of pg_profile_lookup.ini: speed, cable, size, xon, xoff, threshold[, xon_offset]."""

    speed: str
    cable: str
    size_bytes: int
    xon_bytes: int
    xoff_bytes: int
    threshold: int
    xon_offset_bytes: int | None
    line: int


_COLUMNS = (("speed", "a speed in Mb/s like 100000", _UNSIGNED),
            ("cable", 'a cable length like "40m"', _CABLE),
            ("size", "a byte count", _UNSIGNED),
            ("xon", "a byte count", _UNSIGNED),
            ("xoff", "a byte count", _UNSIGNED),
            ("threshold", "an integer (dynamic_th, or static_th bytes)", _SIGNED),
            ("xon_offset", "a byte count", _UNSIGNED))


def parse_pg_profile_lookup(text: str, source: str) -> dict[tuple[str, str], LookupRow]:
    """The rows of a pg_profile_lookup.ini by (speed, cable). As buffermgrd reads it: `#`
    starts a comment line, a later row for the same speed and cable replaces an earlier one.
    Raises InputError naming line and column of every malformed field."""
    problems = Problems(source)
    rows: dict[tuple[str, str], LookupRow] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [(m.group(), m.start() + 1) for m in re.finditer(r"\S+", line)]
        if len(fields) not in (6, 7):
            problems.add(f"line {number}", f"has {len(fields)} columns (expected 6 or 7: speed, "
                                           "cable, size, xon, xoff, threshold [, xon_offset])")
            continue
        values: list[str] = []
        for (value, column), (name, expected, pattern) in zip(fields, _COLUMNS):
            if pattern.fullmatch(value):
                values.append(value)
            else:
                problems.add(f"line {number} column {column}", f"{name} {value!r} is not {expected}")
        if len(values) == len(fields):
            speed, cable, *numbers = values
            size, xon, xoff, threshold, *offset = (int(v) for v in numbers)
            rows[(speed, cable)] = LookupRow(speed, cable, size, xon, xoff, threshold,
                                             offset[0] if offset else None, number)
    problems.raise_if_any()
    return rows


def lossless_profile_name(speed: str, cable: str) -> str:
    return f"pg_lossless_{speed}_{cable}_profile"


@dataclass(frozen=True)
class DerivedPgs:
    profile: QosProfile
    # BUFFER_PROFILE name → where its figures come from ("pg_profile_lookup.ini line 12")
    origins: Mapping[str, str]


def derive_lossless_pgs(profile: QosProfile, facts: SwitchFacts,
                        lookup: Mapping[tuple[str, str], LookupRow], lookup_source: str,
                        config_source: str) -> DerivedPgs:
    """The profile with the lossless PGs buffermgrd creates (module docstring). Raises
    InputError naming the lookup file when a port's speed and cable have no row or a row's
    threshold does not fit the pool's mode, and the config file when the lossless pool or a
    lossless port's speed is missing."""
    pool = profile.pools.get(LOSSLESS_POOL)
    if pool is None:
        raise InputError([Problem(config_source, "BUFFER_POOL", f"has no {LOSSLESS_POOL}",
                                  "buffermgrd puts the lossless PGs it derives from "
                                  "pg_profile_lookup.ini in that pool")])
    problems, config_problems = Problems(lookup_source), Problems(config_source)
    notes = set(profile.notes)
    origins: dict[str, str] = {}
    ports = dict(profile.ports)
    for name, qos in profile.ports.items():
        port = facts.ports.get(name)
        if not qos.pfc_enable:
            continue
        if port is None or port.cable is None:
            notes.add("ports with pfc_enable but no CABLE_LENGTH entry: buffermgrd gives them no "
                      "lossless PG")
            continue
        if port.cable == "0m":
            notes.add('ports with CABLE_LENGTH "0m": buffermgrd gives them no lossless PG')
            continue
        if port.speed is None:
            config_problems.add(f"PORT.{name}.speed", "missing (buffermgrd looks the port's speed and cable "
                                                      f"up in {lookup_source})", "e.g. \"100000\" for 100G")
            continue
        row = lookup.get((port.speed, port.cable))
        if row is None:
            speeds = sorted({s for s, _ in lookup}, key=int)
            cables = sorted({c for s, c in lookup if s == port.speed}, key=lambda c: int(c[:-1]))
            problems.add("", f"has no row for speed {port.speed} and cable {port.cable}, "
                             f"which {name} has ({config_source}: PORT.{name}.speed, {port.cable_where})",
                         f"cables for speed {port.speed}: {', '.join(cables)}" if cables else
                         f"speeds: {', '.join(speeds) or 'none'}")
            continue
        key = lossless_profile_name(row.speed, row.cable)
        if pool.mode == "dynamic" and not DYNAMIC_TH_MIN <= row.threshold <= DYNAMIC_TH_MAX \
                and key not in facts.buffer_profiles:
            problems.add(f"line {row.line}", f"threshold {row.threshold} is not a dynamic_th (expected "
                                             f"{DYNAMIC_TH_MIN} to {DYNAMIC_TH_MAX}: {LOSSLESS_POOL} is dynamic)")
            continue
        buffer = facts.buffer_profiles.get(key) or _profile(key, row, pool)
        origins.setdefault(key, f"{lookup_source}: line {row.line} (speed {row.speed}, cable {row.cable})"
                           if key not in facts.buffer_profiles else
                           f"{config_source}: BUFFER_PROFILE.{key}, which buffermgrd reuses")
        pgs = {**qos.pgs, **{pg: buffer for pg in qos.pfc_enable}}
        ports[name] = replace(qos, pgs=dict(sorted(pgs.items())))
        notes.add(f"lossless BUFFER_PG entries (<port>|<pfc_enable priorities>) derived as buffermgrd "
                  f"does, from {lookup_source}")
    if problems.items or config_problems.items:
        raise InputError(config_problems.items + problems.items)
    return DerivedPgs(replace(profile, ports=ports, notes=tuple(sorted(notes))), origins)


def _profile(name: str, row: LookupRow, pool: BufferPool) -> BufferProfile:
    threshold = ({"dynamic_th": row.threshold} if pool.mode == "dynamic"
                 else {"static_th_bytes": row.threshold})
    return BufferProfile(name, LOSSLESS_POOL, row.size_bytes, xon_bytes=row.xon_bytes,
                         xoff_bytes=row.xoff_bytes, xon_offset_bytes=row.xon_offset_bytes,
                         **threshold)


def default_pfcwd_ports(facts: SwitchFacts, neighbours: frozenset[str]) -> frozenset[str]:
    """The ports `pfcwd start_default` writes a PFC_WD entry for."""
    internal = {name for name, port in facts.ports.items() if port.internal and port.admin_up}
    return frozenset((neighbours | internal) & facts.pfc_enable_ports)


def default_pfcwd(port_entries: int) -> PfcWatchdog:
    """The watchdog start_default writes: its times grow with the port count."""
    multiply = max(1, (port_entries - 1) // PFCWD_PORTS_PER_STEP + 1)
    return PfcWatchdog(PFCWD_ACTION, PFCWD_DETECTION_MS * multiply, PFCWD_RESTORATION_MS * multiply)


def derive_default_pfcwd(profile: QosProfile, facts: SwitchFacts,
                         neighbours: frozenset[str]) -> QosProfile:
    """The profile with the PFC_WD entries start_default writes (module docstring): on the
    ports it guards, the port's own pfcwd_sw_enable (or pfc_enable) decides the priorities."""
    watchdog = default_pfcwd(facts.port_entries)
    ports = dict(profile.ports)
    for name in default_pfcwd_ports(facts, neighbours):
        if name in ports:
            ports[name] = replace(ports[name], pfc_wd=watchdog)
    return replace(profile, ports=ports)
