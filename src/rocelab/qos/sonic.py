"""SONiC config_db.json QoS tables ⇄ QosProfile.

The loader reads the QoS tables exactly as SONiC names them (REFERENCE.md, "PFC headroom
and the SONiC buffer model") and ignores every other table, so a whole config_db.json
saved on a switch loads as it is. It runs in steps: named objects (pools, buffer
profiles, WRED profiles, schedulers, maps) → per-port entries resolved against them →
one PortQos per port. Every malformed value or dangling reference becomes a Problem that
names table, key, field, the value and the form expected; all of them are raised once.

`render_config_db` is the inverse, written the way current SONiC writes config_db: one
key per port, plain-name references, PG and queue ranges like "Ethernet0|3-4".

What SONiC accepts is the reference (its YANG models, sonic-buildimage's rendered samples):
- port names are any `Ethernet<N>` (one number per port, split ports, Ethernet513); a file's
  PORT table gives their order (index, then first lane) and so which rocelab interface each
  is, eth1 onwards; without one, the four-lane convention of rocelab.qos.ports holds when
  every name is a multiple of four, else the names' numeric order;
- VOQ chassis keys `<host>|<asic>|<port>|<queue>` in QUEUE and BUFFER_QUEUE: the device's
  own host and ASIC (DEVICE_METADATA) are read, the other line cards' system ports noted;
- pools of type `both`, a profile's threshold mode differing from its pool's (SAI lets the
  profile's own mode decide), traffic classes 0–15;
- the dynamic buffer model: a pool with no size (or a `percentage`) and BUFFER_PG profile
  "NULL" are sized by buffermgrd at run time: loaded, noted, and left out of the checks
  that need their bytes;
- a file that is one part of a config_db (sonic-cfggen renders qos and buffers apart): a
  reference into a table the file does not hold at all is noted, not an error.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, TypeVar, get_args

from rocelab.errors import InputError, Problem, Problems, read_text
from rocelab.qos.derived import PortFacts, SwitchFacts
from rocelab.qos.model import (
    BufferPool,
    BufferProfile,
    EcnMode,
    PfcWatchdog,
    PortQos,
    QosMapNames,
    QosProfile,
    QueueQos,
    Scheduler,
    WredProfile,
)
from rocelab.qos.model import DYNAMIC_TH_MAX, DYNAMIC_TH_MIN, PRIORITIES, TRAFFIC_CLASSES
from rocelab.qos.ports import LAB_PORT, LANES_PER_PORT, lab_to_sonic, port_number

T = TypeVar("T")

# The unconfigured port: where PORT_QOS_MAP names no map, the port keeps these maps.
_UNCONFIGURED = PortQos(port="")


# --- value kinds: what a field holds, how it is parsed, and how to say what was expected


@dataclass(frozen=True)
class _Int:
    what: str
    example: str
    lo: int = 0
    hi: int | None = None

    @property
    def expected(self) -> str:
        if self.hi is None:
            return f'a non-negative integer string like "{self.example}"'
        return f'an integer string from "{self.lo}" to "{self.hi}" like "{self.example}"'

    def parse(self, value: object) -> int:
        # Canonical decimal only, so "8" and "08" cannot both key one map.
        if not isinstance(value, str) or not re.fullmatch(r"-?(0|[1-9]\d*)", value):
            raise ValueError
        number = int(value)
        if number < self.lo or (self.hi is not None and number > self.hi):
            raise ValueError
        return number


@dataclass(frozen=True)
class _Choice:
    what: str
    choices: tuple[str, ...]

    @property
    def expected(self) -> str:
        return "one of " + ", ".join(f'"{c}"' for c in self.choices)

    def parse(self, value: object) -> str:
        if value not in self.choices:
            raise ValueError
        return str(value)


@dataclass(frozen=True)
class _Bool:
    what: str = "a boolean"
    expected: str = '"true" or "false"'

    def parse(self, value: object) -> bool:
        if value not in ("true", "false"):
            raise ValueError
        return value == "true"


@dataclass(frozen=True)
class _Priorities:
    what: str = "a priority list"
    expected: str = 'priorities 0-7 separated by commas like "3,4", or "" for none'

    def parse(self, value: object) -> frozenset[int]:
        if not isinstance(value, str) or not re.fullmatch(r"([0-7](,[0-7])*)?", value):
            raise ValueError
        return frozenset(int(p) for p in value.split(",") if p)


_Kind = _Int | _Choice | _Bool | _Priorities

# Ranges are those of SONiC's YANG models (sonic-buffer-profile, sonic-pfcwd, …).
_BYTES = _Int("a byte count", "38816")
_POOL_BYTES = _Int("a byte count", "12582912")
_DYNAMIC_TH = _Int("a dynamic_th exponent", "-5", lo=DYNAMIC_TH_MIN, hi=DYNAMIC_TH_MAX)
_PERCENT = _Int("a percentage", "20", hi=100)
_WEIGHT = _Int("a scheduler weight", "60", lo=1, hi=100)
_DETECTION_MS = _Int("a detection time in ms", "200", lo=100, hi=5000)
_RESTORATION_MS = _Int("a restoration time in ms", "200", lo=100, hi=60000)
_POLL_MS = _Int("a poll interval in ms", "200", lo=100, hi=1000)
_DSCP = _Int("a DSCP value", "26", hi=63)
_TC = _Int("a traffic class", "3", hi=TRAFFIC_CLASSES - 1)
_QUEUE = _Int("a queue index", "3", hi=7)
_PG = _Int("a priority group", "3", hi=7)
_PRIORITY = _Int("a PFC priority", "3", hi=7)
_POOL_TYPE = _Choice("a pool type", ("ingress", "egress", "both"))
_POOL_MODE = _Choice("a pool mode", ("static", "dynamic"))
_SCHEDULER_TYPE = _Choice("a scheduler type", ("STRICT", "DWRR", "WRR"))
_ECN_MODE = _Choice("an ECN mode", get_args(EcnMode))
_PFC_WD_ACTION = _Choice("a PFC watchdog action", ("drop", "forward", "alert"))
_BOOL = _Bool()
_PRIORITIES = _Priorities()


@dataclass(frozen=True)
class _MapSpec:
    field: str  # PORT_QOS_MAP field
    table: str
    attr: str  # PortQos attribute holding the resolved map
    key: _Int
    value: _Int


_MAPS = (
    _MapSpec("dscp_to_tc_map", "DSCP_TO_TC_MAP", "dscp_to_tc", _DSCP, _TC),
    _MapSpec("tc_to_queue_map", "TC_TO_QUEUE_MAP", "tc_to_queue", _TC, _QUEUE),
    _MapSpec("tc_to_pg_map", "TC_TO_PRIORITY_GROUP_MAP", "tc_to_pg", _TC, _PG),
    _MapSpec("pfc_to_queue_map", "MAP_PFC_PRIORITY_TO_QUEUE", "pfc_priority_to_queue",
             _PRIORITY, _QUEUE),
)

# Fields SONiC defines that the emulation does not act on: accepted so real files load,
# listed so that a misspelt field is still an error.
_NOT_EMULATED = {
    "BUFFER_POOL": ("percentage",),
    "BUFFER_PROFILE": ("headroom_type", "packet_discard_action"),
    "WRED_PROFILE": ("wred_yellow_enable", "wred_red_enable", "yellow_min_threshold",
                     "yellow_max_threshold", "yellow_drop_probability", "red_min_threshold",
                     "red_max_threshold", "red_drop_probability"),
    "SCHEDULER": ("priority", "meter_type", "cir", "cbs", "pir", "pbs"),
    "PORT_QOS_MAP": ("pfc_to_pg_map", "tc_to_dscp_map", "dot1p_to_tc_map", "tc_to_dot1p_map",
                     "scheduler"),
    "PFC_WD": ("pfc_stat_history",),
}

_OLD_STYLE_REF = re.compile(r"\[([A-Za-z_]+)\|(.+)\]")
_PORT_NAME = re.compile(r"Ethernet(\d+)")
# Tables that carry QoS: a file with none of them is not a QoS configuration.
QOS_TABLES = ("BUFFER_POOL", "BUFFER_PROFILE", "BUFFER_PG", "BUFFER_QUEUE", "PORT_QOS_MAP", "QUEUE",
              "DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP", "TC_TO_PRIORITY_GROUP_MAP", "MAP_PFC_PRIORITY_TO_QUEUE",
              "WRED_PROFILE", "SCHEDULER", "PFC_WD")
NULL = "NULL"  # the dynamic buffer model: "buffermgrd computes this at run time"
_SIMPLE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_INDEX_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_MISSING = object()


def _quote(part: str) -> str:
    return part if _SIMPLE_KEY.fullmatch(part) else json.dumps(part)


def _json_kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "null" if value is None else "a number"


def _target_name(reference: str) -> str:
    """The entry name in a reference, old style "[TABLE|name]" or new style "name"."""
    old_style = _OLD_STYLE_REF.fullmatch(reference)
    return old_style.group(2) if old_style else reference


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f'did you mean "{close[0]}"?' if close else ""


@dataclass
class _Entry:
    """One entry of a table, with typed getters that report problems at its path."""

    table: str
    key: str
    fields: Mapping[str, Any]
    problems: Problems
    tables: frozenset[str] = frozenset()  # the tables the document holds
    notes: set[str] = field(default_factory=set)

    def path(self, field_name: str | None = None) -> str:
        parts = (self.table, self.key) if field_name is None else (
            self.table, self.key, field_name)
        return ".".join(_quote(p) for p in parts)

    def problem(self, field_name: str | None, message: str, hint: str = "") -> None:
        self.problems.add(self.path(field_name), message, hint)

    def check_fields(self, known: tuple[str, ...]) -> None:
        accepted = known + _NOT_EMULATED.get(self.table, ())
        for name in self.fields:
            if name not in accepted:
                self.problem(name, f"unknown field (expected one of: {', '.join(known)})",
                             _did_you_mean(name, accepted))

    def get(self, name: str, kind: _Kind, default: object = _MISSING, hint: str = "") -> Any:
        """The parsed field; `default` when absent; None (after a problem) when bad."""
        if name not in self.fields:
            if default is _MISSING:
                self.problem(name, f"missing (expected {kind.expected})", hint)
                return None
            return default
        value = self.fields[name]
        try:
            return kind.parse(value)
        except ValueError:
            text = repr(value) if isinstance(value, str) else json.dumps(value)
            self.problem(name, f"{text} is not {kind.what} (expected {kind.expected})",
                         "" if isinstance(value, str) else
                         'config_db holds every value as a string, like "1024"')
            return None

    def ref(self, name: str, table: str, targets: Mapping[str, T], missing_hint: str = ""
            ) -> T | None:
        """Resolve a reference, old style "[TABLE|name]" or new style "name"."""
        if name not in self.fields:
            self.problem(name, f'missing (expected the name of a {table} entry)')
            return None
        value = self.fields[name]
        expected = f'expected "[{table}|name]" or a plain name'
        if not isinstance(value, str) or not value:
            self.problem(name, f"{json.dumps(value)} is not a reference ({expected})")
            return None
        old_style = _OLD_STYLE_REF.fullmatch(value)
        if old_style and old_style.group(1) != table:
            self.problem(name, f"{value!r} refers to table {old_style.group(1)} ({expected})")
            return None
        target = _target_name(value)
        if target not in targets and table not in self.tables:
            self.notes.add(f"references into {table}, which this file does not hold (another part of the "
                           f"config_db, as sonic-cfggen renders qos and buffers apart): left unchecked")
            return None
        if target not in targets:
            defined = ", ".join(targets) or f"none, the file defines no {table}"
            self.problem(name, f"{value!r} names no {table} entry (expected one of: {defined})",
                         missing_hint or _did_you_mean(target, targets))
            return None
        return targets[target]


@dataclass
class _PortMaps:
    """One PORT_QOS_MAP entry: map name and resolved map per PortQos attribute."""

    maps: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    pfc_enable: frozenset[int] = frozenset()
    pfcwd_sw_enable: frozenset[int] | None = None


class _Reader:
    def __init__(self, doc: Mapping[str, Any], problems: Problems, voq_host: str | None = None):
        self.doc = doc
        self.problems = problems
        self.tables = frozenset(doc)
        self.notes: set[str] = set()
        # (table, port, index) → path of the key that set it, to report a second setting
        self.claimed: dict[tuple[str, str, int | None], str] = {}
        self.dynamic: dict[str, set[int]] = {}  # port → PGs whose profile buffermgrd computes
        metadata = doc.get("DEVICE_METADATA", {}).get("localhost", {}) if isinstance(
            doc.get("DEVICE_METADATA"), dict) else {}
        self.hostname = metadata.get("hostname") if isinstance(metadata, dict) else None
        self.asic = metadata.get("asic_name") if isinstance(metadata, dict) else None
        if voq_host is not None:  # the user names this device's own line card
            self.hostname, _, self.asic = voq_host.partition("|")

    def entries(self, table: str) -> Iterator[_Entry]:
        entries = self.doc.get(table, {})
        if not isinstance(entries, dict):
            self.problems.add(table, f"is {_json_kind(entries)} (expected an object of named "
                                     "entries)")
            return
        for key, fields in entries.items():
            entry = _Entry(table, key, fields, self.problems, self.tables, self.notes)
            if isinstance(fields, dict):
                yield entry
            else:
                entry.problem(None, f"is {_json_kind(fields)} (expected an object of fields)")

    # --- named objects

    def pools(self) -> dict[str, BufferPool]:
        pools = {}
        for e in self.entries("BUFFER_POOL"):
            e.check_fields(("type", "mode", "size", "xoff"))
            if "size" not in e.fields or e.fields.get("size") == NULL:
                self.notes.add("pools without a size (SONiC's dynamic buffer model sizes them at run time): "
                               "checks that need a pool's bytes are not applicable to them")
            pools[e.key] = BufferPool(
                name=e.key,
                type=e.get("type", _POOL_TYPE),
                mode=e.get("mode", _POOL_MODE, default="dynamic"),
                size_bytes=None if e.fields.get("size", NULL) == NULL else e.get("size", _POOL_BYTES),
                xoff_bytes=e.get("xoff", _BYTES, default=0),
            )
        return pools

    def buffer_profiles(self, pools: Mapping[str, BufferPool]) -> dict[str, BufferProfile]:
        profiles = {}
        for e in self.entries("BUFFER_PROFILE"):
            e.check_fields(("pool", "size", "dynamic_th", "static_th", "xon", "xoff",
                            "xon_offset"))
            pool = e.ref("pool", "BUFFER_POOL", pools)
            profiles[e.key] = BufferProfile(
                name=e.key,
                pool=pool.name if pool else "",
                size_bytes=e.get("size", _BYTES),
                dynamic_th=e.get("dynamic_th", _DYNAMIC_TH, default=None),
                static_th_bytes=e.get("static_th", _BYTES, default=None),
                xon_bytes=e.get("xon", _BYTES, default=None),
                xoff_bytes=e.get("xoff", _BYTES, default=None),
                xon_offset_bytes=e.get("xon_offset", _BYTES, default=None),
            )
            self._check_threshold(e, pool)
        return profiles

    @staticmethod
    def _check_threshold(e: _Entry, pool: BufferPool | None) -> None:
        given = [f for f in ("dynamic_th", "static_th") if f in e.fields]
        if len(given) != 1:
            e.problem(None, f"sets {' and '.join(given) or 'neither dynamic_th nor static_th'} "
                            "(expected exactly one: dynamic_th for a dynamic pool, static_th "
                            "for a static pool)")
        # A threshold mode other than the pool's is SAI's per-profile mode: the profile's decides.

    def wred_profiles(self) -> dict[str, WredProfile]:
        profiles = {}
        for e in self.entries("WRED_PROFILE"):
            e.check_fields(("wred_green_enable", "ecn", "green_min_threshold",
                            "green_max_threshold", "green_drop_probability"))
            kmin = e.get("green_min_threshold", _BYTES)
            kmax = e.get("green_max_threshold", _BYTES)
            if kmin is not None and kmax is not None and kmax < kmin:
                e.problem("green_max_threshold",
                          f"{e.fields['green_max_threshold']!r} is below green_min_threshold "
                          f"{e.fields['green_min_threshold']!r} (expected a byte count no "
                          "smaller than green_min_threshold)")
            # Defaults are those of SONiC's sonic-wred-profile YANG model.
            profiles[e.key] = WredProfile(
                name=e.key,
                wred_green_enable=e.get("wred_green_enable", _BOOL, default=False),
                ecn=e.get("ecn", _ECN_MODE, default="ecn_none"),
                green_min_threshold_bytes=kmin,
                green_max_threshold_bytes=kmax,
                green_drop_probability_pct=e.get("green_drop_probability", _PERCENT,
                                                 default=100),
            )
        return profiles

    def schedulers(self) -> dict[str, Scheduler]:
        schedulers = {}
        for e in self.entries("SCHEDULER"):
            e.check_fields(("type", "weight"))
            # Defaults are those of SONiC's sonic-scheduler YANG model.
            schedulers[e.key] = Scheduler(name=e.key,
                                          type=e.get("type", _SCHEDULER_TYPE, default="WRR"),
                                          weight=e.get("weight", _WEIGHT, default=1))
        return schedulers

    def qos_maps(self, spec: _MapSpec) -> dict[str, tuple[int, ...]]:
        maps = {}
        for e in self.entries(spec.table):
            values = list(getattr(_UNCONFIGURED, spec.attr))
            for key in e.fields:
                try:
                    index = spec.key.parse(key)
                except ValueError:
                    e.problem(None, f"{key!r} is not {spec.key.what} (expected "
                                    f"{spec.key.expected})")
                    continue
                value = e.get(key, spec.value)
                if value is not None:
                    values[index] = value
            maps[e.key] = tuple(values)
        return maps

    # --- per-port keys: "Ethernet0", "Ethernet0,Ethernet4" (older SONiC), "Ethernet0|3-4"

    def port_list(self, e: _Entry, text: str) -> list[str]:
        ports = []
        for name in text.split(","):
            if _PORT_NAME.fullmatch(name):
                ports.append(name)
            else:
                e.problem(None, f"{name!r} is not a SONiC port name (expected Ethernet<N>, like Ethernet0)",
                          self._lab_name_hint(name))
        return ports

    def own_port(self, e: _Entry, ports_text: str) -> str | None:
        """The port part of a key; for a VOQ key "<host>|<asic>|<port>", only this device's
        own (DEVICE_METADATA's hostname and asic_name), None for another line card's."""
        parts = ports_text.split("|")
        if len(parts) == 1:
            return ports_text
        if len(parts) != 3:
            e.problem(None, f'{e.key!r} is not a "<port>|<index>" or "<host>|<asic>|<port>|<index>" key')
            return None
        host, asic, port = parts
        if (host, asic) == self._own_voq(e.table):
            return port
        self.notes.add(f"{e.table}: VOQ system ports of other line cards, left to those devices")
        return None

    def _own_voq(self, table: str) -> tuple[str, str]:
        if self.hostname and self.asic:
            return self.hostname, self.asic
        host, asic, *_ = next(iter(self.doc.get(table, {})), "").split("|") + ["", ""]
        self.notes.add(f"{table}: VOQ keys but no DEVICE_METADATA hostname and asic_name; {host}|{asic} "
                       "(the first key's) read as this device's own")
        return host, asic

    @staticmethod
    def _lab_name_hint(name: str) -> str:
        try:
            return f"config_db names rocelab's {name} {lab_to_sonic(name)}"
        except ValueError:
            return ""

    def indexed(self, table: str, noun: str) -> Iterator[tuple[_Entry, list[str], range]]:
        for e in self.entries(table):
            ports_text, bar, index_text = e.key.rpartition("|")
            if not bar:
                e.problem(None, f'{e.key!r} is not a "<port>|<index>" key (expected e.g. '
                                '"Ethernet0|3" or "Ethernet0|3-4")')
                continue
            own = self.own_port(e, ports_text)
            if own is None:
                continue
            ports = self.port_list(e, own)
            indexes = self._index_range(e, index_text, noun)
            if indexes is not None:
                yield e, ports, indexes

    @staticmethod
    def _index_range(e: _Entry, text: str, noun: str) -> range | None:
        m = _INDEX_RANGE.fullmatch(text)
        if m:
            lo = int(m.group(1))
            hi = int(m.group(2) or lo)
            if lo <= hi <= 7:
                return range(lo, hi + 1)
        e.problem(None, f"{text!r} is not a {noun} index or range (expected an index from 0 "
                        'to 7 or a range like "3-4")')
        return None

    def claim(self, e: _Entry, port: str, index: int | None = None) -> bool:
        """True the first time a table sets this port (and index); later settings are errors."""
        first = self.claimed.setdefault((e.table, port, index), e.path())
        if first != e.path():
            what = port if index is None else f"index {index} of {port}"
            e.problem(None, f"sets {what} a second time (expected once; it is also set by "
                            f"{first})")
            return False
        return True

    # --- per-port tables

    def port_qos_maps(self, maps: Mapping[str, Mapping[str, tuple[int, ...]]]
                      ) -> tuple[_PortMaps, dict[str, _PortMaps]]:
        """The "global" entry (a switch-wide dscp_to_tc_map) and one entry per port."""
        global_maps, per_port = _PortMaps(), {}
        map_fields = tuple(spec.field for spec in _MAPS)
        for e in self.entries("PORT_QOS_MAP"):
            if e.key == "global":
                e.check_fields(map_fields)
                global_maps = _PortMaps(maps=self._referenced_maps(e, maps))
                continue
            e.check_fields(map_fields + ("pfc_enable", "pfcwd_sw_enable"))
            settings = _PortMaps(
                maps=self._referenced_maps(e, maps),
                pfc_enable=e.get("pfc_enable", _PRIORITIES, default=frozenset()),
                pfcwd_sw_enable=e.get("pfcwd_sw_enable", _PRIORITIES, default=None))
            for port in self.port_list(e, e.key):
                if self.claim(e, port):
                    per_port[port] = settings
        return global_maps, per_port

    @staticmethod
    def _referenced_maps(e: _Entry, maps: Mapping[str, Mapping[str, tuple[int, ...]]]
                         ) -> dict[str, tuple[str, tuple[int, ...]]]:
        referenced = {}
        for spec in _MAPS:
            if spec.field in e.fields:
                values = e.ref(spec.field, spec.table, maps[spec.table])
                if values is not None:
                    referenced[spec.attr] = (_target_name(e.fields[spec.field]), values)
        return referenced

    def buffer_assignments(self, table: str, noun: str, pool_type: str,
                           profiles: Mapping[str, BufferProfile],
                           pools: Mapping[str, BufferPool]) -> dict[str, dict[int, BufferProfile]]:
        """BUFFER_PG (ingress pool profiles per PG) or BUFFER_QUEUE (egress, per queue)."""
        assigned: dict[str, dict[int, BufferProfile]] = {}
        for e, ports, indexes in self.indexed(table, noun):
            e.check_fields(("profile",))
            if e.fields.get("profile") == NULL:
                # Dynamic buffer model: buffermgrd computes the lossless PG's profile from the
                # port's speed, cable length and MTU at run time.
                self.notes.add(f"{table} entries with profile NULL (buffermgrd computes them at run time): "
                               "lossless, their sizes not checkable from the file")
                for port in ports:
                    for index in indexes:
                        if self.claim(e, port, index):
                            self.dynamic.setdefault(port, set()).add(index)
                continue
            profile = e.ref("profile", "BUFFER_PROFILE", profiles)
            pool = pools.get(profile.pool) if profile else None
            if pool is not None and pool.type not in (None, "both", pool_type):
                e.problem("profile", f"{e.fields['profile']!r} draws from {pool.type} pool "
                                     f"{pool.name!r} (expected a profile of an {pool_type} "
                                     "pool)")
            for port in ports:
                for index in indexes:
                    if self.claim(e, port, index) and profile is not None:
                        assigned.setdefault(port, {})[index] = profile
        return assigned

    def queue_settings(self, schedulers: Mapping[str, Scheduler],
                       wred: Mapping[str, WredProfile]
                       ) -> dict[str, dict[int, tuple[Scheduler | None, WredProfile | None]]]:
        settings: dict[str, dict[int, tuple[Scheduler | None, WredProfile | None]]] = {}
        for e, ports, indexes in self.indexed("QUEUE", "queue"):
            e.check_fields(("scheduler", "wred_profile"))
            scheduler = e.ref("scheduler", "SCHEDULER", schedulers) \
                if "scheduler" in e.fields else None
            profile = e.ref("wred_profile", "WRED_PROFILE", wred) \
                if "wred_profile" in e.fields else None
            for port in ports:
                for index in indexes:
                    if self.claim(e, port, index):
                        settings.setdefault(port, {})[index] = (scheduler, profile)
        return settings

    def pfc_watchdogs(self) -> dict[str, PfcWatchdog]:
        watchdogs = {}
        for e in self.entries("PFC_WD"):
            if e.key == "GLOBAL":
                # The poll interval only sets how often SONiC looks; nothing to emulate.
                e.check_fields(("POLL_INTERVAL", "BIG_RED_SWITCH"))
                e.get("POLL_INTERVAL", _POLL_MS, default=None)
                continue
            e.check_fields(("action", "detection_time", "restoration_time"))
            watchdog = PfcWatchdog(action=e.get("action", _PFC_WD_ACTION),
                                   detection_time_ms=e.get("detection_time", _DETECTION_MS),
                                   restoration_time_ms=e.get("restoration_time",
                                                             _RESTORATION_MS))
            for port in self.port_list(e, e.key):
                if self.claim(e, port):
                    watchdogs[port] = watchdog
        return watchdogs


def _lanes(fields: object) -> int:
    lanes = fields.get("lanes", "") if isinstance(fields, dict) else ""
    first = str(lanes).split(",")[0]
    return int(first) if first.isdigit() else 1 << 30


def _index(fields: object) -> int:
    index = fields.get("index", "") if isinstance(fields, dict) else ""
    return int(index) if str(index).isdigit() else 1 << 30


def lab_ports(doc: Mapping[str, Any], named: Iterable[str]) -> dict[str, str]:
    """rocelab interface → SONiC port name: the PORT table's order (index, first lane,
    number) where the file has one; else the four-lane convention where every name fits it
    (none is written: rocelab.qos.ports computes it); else the names' numeric order. A PORT
    table whose every alias is a rocelab interface is rocelab's own rendering of a port map
    (render_config_db): the aliases are the interfaces."""
    table = doc.get("PORT")
    aliases = {n: f.get("alias") for n, f in table.items() if isinstance(f, dict)} \
        if isinstance(table, dict) else {}
    if aliases and all(isinstance(a, str) and LAB_PORT.fullmatch(a) for a in aliases.values()) \
            and len(set(aliases.values())) == len(aliases):
        mapping = {alias: name for name, alias in aliases.items()}
    elif isinstance(table, dict) and table:
        order = sorted((n for n in table if _PORT_NAME.fullmatch(n)),
                       key=lambda n: (_index(table[n]), _lanes(table[n]), port_number(n)))
        mapping = {f"eth{i}": name for i, name in enumerate(order, start=1)}
    else:
        mapping = {f"eth{i}": name for i, name in enumerate(sorted(set(named), key=port_number), start=1)}
    if all(lab_to_sonic(lab) == name for lab, name in mapping.items()) or (
            "PORT" not in doc and all(port_number(n) % LANES_PER_PORT == 0 for n in mapping.values())):
        return {}  # the four-lane convention: rocelab.qos.ports computes it
    return mapping


def voq_hosts(doc: Mapping[str, Any]) -> list[str]:
    """The "<host>|<asic>" line cards a file's VOQ keys (QUEUE, BUFFER_QUEUE) name, in order."""
    found: dict[str, None] = {}
    for table in ("QUEUE", "BUFFER_QUEUE"):
        entries = doc.get(table)
        for key in entries if isinstance(entries, dict) else ():
            parts = key.split("|")
            if len(parts) == 4:
                found.setdefault(f"{parts[0]}|{parts[1]}")
    return list(found)


def profile_from_config_db(doc: dict[str, Any], source: str, voq_host: str | None = None) -> QosProfile:
    """The QoS profile a config_db document describes; `voq_host` ("<host>|<asic>") picks the
    line card whose VOQ keys are this device's own. Raises InputError naming `source`."""
    problems = Problems(source)
    if not isinstance(doc, dict):
        problems.add("", f"the document is {_json_kind(doc)} (expected a config_db object of "
                         'tables like {"BUFFER_POOL": {…}})')
        problems.raise_if_any()
    if not any(table in doc for table in QOS_TABLES):
        problems.add("", f"holds no QoS table (expected at least one of {', '.join(QOS_TABLES)}); "
                         f"tables present: {', '.join(sorted(doc)) or 'none'}")
        problems.raise_if_any()
    reader = _Reader(doc, problems, voq_host)

    pools = reader.pools()
    buffer_profiles = reader.buffer_profiles(pools)
    wred = reader.wred_profiles()
    schedulers = reader.schedulers()
    maps = {spec.table: reader.qos_maps(spec) for spec in _MAPS}

    global_maps, port_maps = reader.port_qos_maps(maps)
    pgs = reader.buffer_assignments("BUFFER_PG", "priority group", "ingress", buffer_profiles,
                                    pools)
    queue_buffers = reader.buffer_assignments("BUFFER_QUEUE", "queue", "egress",
                                              buffer_profiles, pools)
    queue_settings = reader.queue_settings(schedulers, wred)
    watchdogs = reader.pfc_watchdogs()
    problems.raise_if_any()

    names = set(port_maps) | set(pgs) | set(queue_buffers) | set(queue_settings) | set(watchdogs) | \
        set(reader.dynamic)
    ports = {}
    for port in sorted(names, key=port_number):
        settings = port_maps.get(port, _PortMaps())
        resolved, map_names = {}, {}
        for spec in _MAPS:
            chosen = settings.maps.get(spec.attr) or global_maps.maps.get(spec.attr)
            if chosen:
                map_names[spec.field], resolved[spec.attr] = chosen
        buffers = queue_buffers.get(port, {})
        scheduling = queue_settings.get(port, {})
        queues = {}
        for q in sorted(set(buffers) | set(scheduling)):
            scheduler, wred = scheduling.get(q, (None, None))
            queues[q] = QueueQos(scheduler=scheduler, wred=wred, buffer=buffers.get(q))
        ports[port] = PortQos(port=port, **resolved,
                              pfc_enable=settings.pfc_enable,
                              pfcwd_sw_enable=settings.pfcwd_sw_enable,
                              pgs=dict(sorted(pgs.get(port, {}).items())),
                              queues=queues,
                              pfc_wd=watchdogs.get(port),
                              map_names=QosMapNames(**map_names),
                              dynamic_pgs=frozenset(reader.dynamic.get(port, ())))
    return QosProfile(source=source, pools=pools, ports=ports, lab_ports=lab_ports(doc, ports),
                      notes=tuple(sorted(reader.notes)))


def _table(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    table = doc.get(name)
    return table if isinstance(table, dict) else {}


def _setting(doc: Mapping[str, Any], field_name: str, kind: _Choice, default: str, problems: Problems) -> str:
    metadata = _table(doc, "DEVICE_METADATA").get("localhost")
    value = metadata.get(field_name, default) if isinstance(metadata, dict) else default
    if value not in kind.choices:
        problems.add(f"DEVICE_METADATA.localhost.{field_name}", f"{value!r} is not {kind.what} "
                                                                 f"(expected {kind.expected})")
        return default
    return value


_MTU = _Int("an MTU", "9100", lo=68, hi=65535)
_SPEED = _Int("a speed in Mb/s", "100000", lo=1)
_CABLE_LENGTH = re.compile(r"[0-9]+m")


def switch_facts(doc: Mapping[str, Any], source: str) -> SwitchFacts:
    """What buffermgrd and pfcwd read besides the QoS tables: PORT (speed, mtu, admin_status,
    role), CABLE_LENGTH, DEVICE_METADATA (buffer_model, default_pfcwd_status), DEVICE_NEIGHBOR,
    which PORT_QOS_MAP entries set pfc_enable, and the BUFFER_PROFILE entries. Raises
    InputError naming the table, key and field of a malformed value."""
    problems = Problems(source)
    ports: dict[str, dict[str, Any]] = {}
    for name, fields in _table(doc, "PORT").items():
        if not _PORT_NAME.fullmatch(name) or not isinstance(fields, dict):
            continue
        entry = _Entry("PORT", name, fields, problems)
        speed = entry.get("speed", _SPEED, default=None)  # canonical digits: str() gives it back
        ports[name] = {"speed": None if speed is None else str(speed),
                       "mtu_bytes": entry.get("mtu", _MTU, default=None),
                       "admin_up": fields.get("admin_status") == "up",
                       "internal": fields.get("role") == "Int"}
    for group, lengths in _table(doc, "CABLE_LENGTH").items():
        for name, length in lengths.items() if isinstance(lengths, dict) else ():
            where = f"CABLE_LENGTH.{_quote(group)}.{_quote(name)}"
            if not isinstance(length, str) or not _CABLE_LENGTH.fullmatch(length):
                problems.add(where, f"{length!r} is not a cable length (expected metres like \"40m\")")
                continue
            ports.setdefault(name, {}).update(cable=length, cable_where=where)
    neighbours = doc.get("DEVICE_NEIGHBOR")
    pfc_enable = {port for key, fields in _table(doc, "PORT_QOS_MAP").items()
                  if isinstance(fields, dict) and "pfc_enable" in fields for port in key.split(",")}
    buffer_model = _setting(doc, "buffer_model", _Choice("a buffer model", ("traditional", "dynamic")),
                            "traditional", problems)
    pfcwd = _setting(doc, "default_pfcwd_status", _Choice("a PFC watchdog status", ("enable", "disable")),
                     "disable", problems)
    problems.raise_if_any()
    reader = _Reader(doc, Problems(source))  # the loader has reported its problems already
    return SwitchFacts(ports={name: PortFacts(**facts) for name, facts in ports.items()},
                       port_entries=len(_table(doc, "PORT")), buffer_model=buffer_model,
                       default_pfcwd_status=pfcwd,
                       neighbours=frozenset(neighbours) if isinstance(neighbours, dict) else None,
                       pfc_enable_ports=frozenset(pfc_enable),
                       buffer_profiles=reader.buffer_profiles(reader.pools()))


def load_config_db(path: str | os.PathLike[str]) -> QosProfile:
    """Load a config_db.json (whole, or only its QoS tables). Raises InputError."""
    source = os.fspath(path)
    return profile_from_config_db(read_config_db(source), source)


def read_config_db(path: str | os.PathLike[str]) -> Any:
    """A config_db.json's JSON document. Raises InputError naming line and column."""
    source = os.fspath(path)
    text = read_text(source)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError([Problem(source, f"line {e.lineno} column {e.colno}",
                                  f"invalid JSON: {e.msg}")]) from e
    return doc


# --- rendering


def _index_key(port: str, lo: int, hi: int) -> str:
    return f"{port}|{lo}" if lo == hi else f"{port}|{lo}-{hi}"


def _runs(items: Mapping[int, T]) -> list[tuple[int, int, T]]:
    """Consecutive indexes holding equal values, as (first, last, value)."""
    runs: list[tuple[int, int, T]] = []
    for index in sorted(items):
        if runs and index == runs[-1][1] + 1 and items[index] == runs[-1][2]:
            runs[-1] = (runs[-1][0], index, items[index])
        else:
            runs.append((index, index, items[index]))
    return runs


_Doc = dict[str, dict[str, dict[str, str]]]


def _put(doc: _Doc, table: str, name: str, fields: dict[str, str]) -> str:
    """Add a named entry once; the name, for the entry that references it."""
    if doc[table].setdefault(name, fields) != fields:
        raise ValueError(f"two different {table} entries are both named {name!r}")
    return name


def _pool_fields(pool: BufferPool) -> dict[str, str]:
    fields = {"type": pool.type, "mode": pool.mode, "size": str(pool.size_bytes)}
    if pool.xoff_bytes:
        fields["xoff"] = str(pool.xoff_bytes)
    return fields


def _buffer_profile_fields(profile: BufferProfile) -> dict[str, str]:
    fields = {"pool": profile.pool, "size": str(profile.size_bytes)}
    for name, value in (("dynamic_th", profile.dynamic_th),
                        ("static_th", profile.static_th_bytes),
                        ("xon", profile.xon_bytes),
                        ("xoff", profile.xoff_bytes),
                        ("xon_offset", profile.xon_offset_bytes)):
        if value is not None:
            fields[name] = str(value)
    return fields


def _wred_fields(profile: WredProfile) -> dict[str, str]:
    return {"wred_green_enable": "true" if profile.wred_green_enable else "false",
            "ecn": profile.ecn,
            "green_min_threshold": str(profile.green_min_threshold_bytes),
            "green_max_threshold": str(profile.green_max_threshold_bytes),
            "green_drop_probability": str(profile.green_drop_probability_pct)}


def _scheduler_fields(scheduler: Scheduler) -> dict[str, str]:
    # A strict queue has no weight; SONiC writes none unless one was set.
    if scheduler.type == "STRICT" and scheduler.weight == 1:
        return {"type": scheduler.type}
    return {"type": scheduler.type, "weight": str(scheduler.weight)}


def _priority_list(priorities: frozenset[int]) -> str:
    return ",".join(str(p) for p in sorted(priorities))


def _render_maps(doc: _Doc, profile: QosProfile) -> dict[str, dict[str, str]]:
    """Write the map tables; per port, the map names its PORT_QOS_MAP entry references.

    Maps keep the names they were loaded with; a hand-built port's maps get ROCELAB_<n>.
    A map equal to the unconfigured default and never named is not written at all.
    """
    references: dict[str, dict[str, str]] = {port: {} for port in profile.ports}
    unnamed: list[tuple[_MapSpec, str, dict[str, str]]] = []
    for spec in _MAPS:
        for port, qos in profile.ports.items():
            values = getattr(qos, spec.attr)
            default = getattr(_UNCONFIGURED, spec.attr)
            # TCs 8–15 only where they differ from SONiC's unmapped default: most files have eight.
            entries = {str(i): str(v) for i, v in enumerate(values)
                       if spec.key is not _TC or i < PRIORITIES or v != default[i]}
            name = getattr(qos.map_names, spec.field)
            if name is not None:
                references[port][spec.field] = _put(doc, spec.table, name, entries)
            elif values != getattr(_UNCONFIGURED, spec.attr):
                unnamed.append((spec, port, entries))
    # Named maps first, so a generated name never takes one the user chose.
    for spec, port, entries in unnamed:
        table = doc[spec.table]
        name = next((n for n, e in table.items() if e == entries), None)
        if name is None:
            name = next(f"ROCELAB_{n}" for n in range(1, len(table) + 2)
                        if f"ROCELAB_{n}" not in table)
            table[name] = entries
        references[port][spec.field] = name
    return references


def render_config_db(profile: QosProfile) -> _Doc:
    """The config_db QoS tables that load back to `profile` (other tables are not written).

    Raises ValueError if two different objects of `profile` share a name, which no loaded
    profile has.
    """
    doc: _Doc = {table: {} for table in (
        "PORT", "BUFFER_POOL", "BUFFER_PROFILE", "DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP",
        "TC_TO_PRIORITY_GROUP_MAP", "MAP_PFC_PRIORITY_TO_QUEUE", "PORT_QOS_MAP", "BUFFER_PG",
        "BUFFER_QUEUE", "WRED_PROFILE", "SCHEDULER", "QUEUE", "PFC_WD")}
    for name, pool in profile.pools.items():
        doc["BUFFER_POOL"][name] = _pool_fields(pool)
    # A port map other than the four-lane convention, as PORT aliases lab_ports() reads back.
    doc["PORT"] = {port: {"alias": lab} for lab, port in profile.lab_ports.items()}
    map_references = _render_maps(doc, profile)
    for port, qos in profile.ports.items():
        qos_map = map_references[port]
        if qos.pfc_enable:
            qos_map["pfc_enable"] = _priority_list(qos.pfc_enable)
        if qos.pfcwd_sw_enable is not None:
            qos_map["pfcwd_sw_enable"] = _priority_list(qos.pfcwd_sw_enable)
        if qos_map:
            doc["PORT_QOS_MAP"][port] = qos_map
        buffers = {q: queue.buffer for q, queue in qos.queues.items() if queue.buffer}
        for table, assigned in (("BUFFER_PG", qos.pgs), ("BUFFER_QUEUE", buffers)):
            for lo, hi, buffer in _runs(assigned):
                name = _put(doc, "BUFFER_PROFILE", buffer.name, _buffer_profile_fields(buffer))
                doc[table][_index_key(port, lo, hi)] = {"profile": name}
        scheduling = {q: (queue.scheduler, queue.wred) for q, queue in qos.queues.items()
                      if queue.scheduler or queue.wred}
        for lo, hi, (scheduler, wred) in _runs(scheduling):
            fields = {}
            if scheduler:
                fields["scheduler"] = _put(doc, "SCHEDULER", scheduler.name,
                                           _scheduler_fields(scheduler))
            if wred:
                fields["wred_profile"] = _put(doc, "WRED_PROFILE", wred.name, _wred_fields(wred))
            doc["QUEUE"][_index_key(port, lo, hi)] = fields
        if qos.pfc_wd:
            doc["PFC_WD"][port] = {"action": qos.pfc_wd.action,
                                   "detection_time": str(qos.pfc_wd.detection_time_ms),
                                   "restoration_time": str(qos.pfc_wd.restoration_time_ms)}
    return {table: entries for table, entries in doc.items() if entries}


def dump_config_db(profile: QosProfile) -> str:
    """`render_config_db` as JSON text, indented like the config_db.json SONiC saves."""
    return json.dumps(render_config_db(profile), indent=4) + "\n"
