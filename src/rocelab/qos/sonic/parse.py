"""Reading a config_db.json: the JSON document, and its entries' fields as typed values.

A field's kind (`_Int`, `_Choice`, `_Bool`, `_Priorities`) says how its string parses and
what was expected; an `_Entry` of a table reads its fields through them and resolves its
references, reporting every problem at TABLE.key.field. The QoS map tables and the fields
SONiC defines that the emulation does not act on are declared here too.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, TypeVar, get_args

from rocelab.errors import InputError, Problem, Problems, read_text
from rocelab.qos.model import DYNAMIC_TH_MAX, DYNAMIC_TH_MIN, TRAFFIC_CLASSES, EcnMode, PortQos

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
# Tables that carry QoS: a file with none of them is not a QoS configuration.
QOS_TABLES = ("BUFFER_POOL", "BUFFER_PROFILE", "BUFFER_PG", "BUFFER_QUEUE", "PORT_QOS_MAP", "QUEUE",
              "DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP", "TC_TO_PRIORITY_GROUP_MAP", "MAP_PFC_PRIORITY_TO_QUEUE",
              "WRED_PROFILE", "SCHEDULER", "PFC_WD")
NULL = "NULL"  # the dynamic buffer model: "buffermgrd computes this at run time"
_SIMPLE_KEY = re.compile(r"[A-Za-z0-9_-]+")
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
