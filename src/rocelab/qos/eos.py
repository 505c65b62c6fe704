"""Arista EOS running-config ⇄ QosProfile: the QoS statements of an EOS switch.

`parse_eos` reads the statements that decide a packet's class, queue, PFC, ECN and MTU
(docs/plugin-eos.md lists them) and ignores every other one, so a whole `show
running-config` loads as saved:

    qos map dscp D... to traffic-class T [drop-precedence N]
    qos map cos C... to traffic-class T
    qos map traffic-class T... to tx-queue Q  |  ... to dscp D (with `qos rewrite dscp`)
    class-map [type qos] match-any|match-all NAME      match dscp D... | match ip access-group A
    policy-map [type quality-of-service] NAME          class NAME → set traffic-class T |
                                                       set dscp D | set drop-precedence N
    priority-flow-control all off | pause watchdog default ... | pause watchdog action ...
    interface defaults → mtu N;  l2 mtu N
    qos profile NAME                     per-port statements, applied by service-profile
    interface EthernetN | EthernetN/M | EthernetN/M/K | Port-ChannelN
       mtu N  |  l2 mtu N  |  speed [forced] 100g...  |  [no] switchport  |  channel-group N ...
       service-profile NAME  |  service-policy [type qos] input NAME
       qos trust dscp|cos  |  no qos trust  |  qos cos N
       priority-flow-control on | priority P no-drop|drop | pause watchdog ...
       shape rate R [kbps|mbps|gbps|percent]
       tx-queue N  |  uc-tx-queue N  (mc-tx-queue N: read and left alone)
          priority strict  |  no priority  |  bandwidth percent W  |  shape rate R
          random-detect ecn minimum-threshold X UNIT maximum-threshold Y UNIT
                            [max-mark-probability P] [weight W]
          random-detect drop minimum-threshold X UNIT maximum-threshold Y UNIT [...]

A malformed statement of these kinds is an error naming file and line; all are collected,
then raised once as InputError. A statement rocelab cannot evaluate (an ACL match, an
undefined service-profile, a QoS statement it does not know) is a warning naming file, line
and statement, in `EosConfig.warnings` and the profile's notes; where it may change the
class of a DSCP on a port, that DSCP is listed in `EosConfig.uncertain` for the fabric
description to refuse if the DSCP is one the hosts send.

How EOS maps onto the profile (PortQos per interface, keyed by SONiC port name):

- Port names: EOS `Ethernet1` is rocelab's `eth1`, which the profile (like every QosProfile)
  keys by its SONiC name `Ethernet0` (`rocelab.qos.ports`). A file that names its ports
  `EthernetN/M` or `EthernetN/M/K` (modules, breakouts) numbers its Ethernet interfaces in
  their natural order instead: the first is eth1. Port-Channels are not lab ports: their
  statements apply to their members (`channel-group N`), under the members' own.
- Statements under an interface override those of its service-profile. A service-profile
  naming no qos profile applies nothing (as EOS, which accepts the name) and is warned about.
- Class: a port trusting DSCP (EOS's default on the routed ports of lab fabrics) maps a
  packet's DSCP through `qos map dscp`; one trusting CoS maps a tagged frame's PCP through
  `qos map cos` (`dot1p_to_tc`) and an untagged packet's default CoS (`qos cos`, 0); an
  untrusted port (`no qos trust`) gives every packet its default CoS's class. An input
  service-policy decides first: the first class whose `match dscp` holds the DSCP (or
  class-default) and sets a traffic-class gives it; else the maps do. Defaults where no map
  says: DSCP 0-7 → TC 1, 8-15 → TC 0, then DSCP / 8; CoS 0 → TC 1, 1 → 0, then CoS → TC CoS
  (as Arista's manuals table them; recalled).
- TC → queue: `qos map traffic-class ... to tx-queue`, else the identity. A PFC priority P
  pauses TC P's queue; TC P is PG P (EOS configures no PGs).
- PFC: the `no-drop` priorities of a port with `priority-flow-control on` (and without
  `priority-flow-control all off`) are its pfc_enable.
- Queues: `priority strict` → STRICT; `no priority` or `bandwidth percent W` → DWRR with
  weight W (1 without `bandwidth percent`). EOS platforms differ in a queue's default mode,
  so a queue is strict only when it says so. `random-detect ecn` → a WRED profile that marks
  ECN on every colour (ecn_all) from Kmin to Kmax, max-mark-probability (default 100 %) at
  Kmax; `random-detect drop` adds early drops of green packets (wred_green_enable).
  `shape rate` → shape_bps. `bandwidth guaranteed` is a minimum rate the model has no room
  for: read and left alone.
- Threshold units: bytes, kbytes (1,024 B), mbytes (1,048,576 B), segments (the platform's
  buffer cell: `segment_bytes` given, else EOS_SEGMENT_BYTES_BY_PLATFORM by the `! device:`
  line; otherwise an error asking for it), milliseconds and microseconds (latency: bytes the
  port drains in that time at its speed, the interface's `speed` or the port's link rate
  the fabric description gives; a note says which).
- PFC watchdog: on for a PFC port when a timeout applies to it (its `port timer timeout` or
  the switch's `default timeout`) and it does not say `no priority-flow-control pause
  watchdog`; detection time = timeout, restoration time = recovery-time (0: none set, no
  automatic recovery). Actions: drop → drop, no-drop → forward; none → EOS's default,
  errdisable, which shuts the port and so is recorded as drop. (Recalled, not confirmed.)
- MTU: a routed port's `mtu` (IP MTU), else `interface defaults` `mtu`, else EOS's 1500; a
  switched port's `l2 mtu` (its own, else the global one) less the 14-byte Ethernet header.

What EOS cannot express, and `render_eos` leaves out: buffer pools, buffer profiles and PG
assignments (EOS has no config_db buffer model: a fabric description gives an EOS device's
PFC threshold and headroom as platform figures, see `rocelab.fabric.spec`); TC → PG maps;
MAP_PFC_PRIORITY_TO_QUEUE; pfcwd_sw_enable (EOS guards every PFC priority); WRED that only
drops (wred_green_enable) or marks some colours; the WRR/DWRR distinction (both render as
weighted round robin); map names. `parse_eos(render_eos(p)) == p` for every profile that
`parse_eos` returns from maps, trust, PFC and ECN alone (no policy-maps, shapers or drops).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Literal, Mapping, Sequence

from rocelab.errors import Problems, read_text
from rocelab.ethernet import ETH  # the Ethernet header an L2 MTU counts
from rocelab.qos.dscp import DSCP_EXPECTED, dscp_value
from rocelab.qos.model import (
    DSCP_VALUES,
    PRIORITIES,
    PfcWatchdog,
    PortQos,
    QosProfile,
    QueueQos,
    Scheduler,
    WredProfile,
)
from rocelab.qos.ports import lab_to_sonic, sonic_to_lab
from rocelab.units import format_rate

# Bytes per buffer segment (cell) of EOS thresholds, by the model in the `! device:` line
# `show running-config` begins with. Only figures Arista has published; a platform not
# listed needs `segment_bytes` in the fabric description.
EOS_SEGMENT_BYTES_BY_PLATFORM = {
    # Arista 7160 Series architecture white paper: the 24 MB packet buffer is "96K pages of
    # 256 byte cells".
    "DCS-7160": 256,
}
EOS_DEFAULT_MTU_BYTES = 1500
EOS_DEFAULT_DSCP_TO_TC = tuple(1 if d < 8 else 0 if d < 16 else d // 8 for d in range(DSCP_VALUES))
EOS_DEFAULT_COS_TO_TC = (1, 0, 2, 3, 4, 5, 6, 7)
UNTRUSTED_TC = EOS_DEFAULT_COS_TO_TC[0]  # untagged traffic on a port not trusting DSCP
DEFAULT_MARK_PROBABILITY_PCT = 100
_IDENTITY = tuple(range(PRIORITIES))  # EOS has TCs 0–7; PortQos leaves 8–15 at SONiC's default
_UNITS = {"bytes": 1, "kbytes": 1024, "mbytes": 1024 * 1024}
_LATENCY_UNITS = {"milliseconds": Decimal("0.001"), "microseconds": Decimal("0.000001")}
_SHAPE_UNITS = {"bps": 1, "kbps": 1000, "mbps": 1000**2, "gbps": 1000**3}
_THRESHOLD_MAX = 256_000_000  # EOS's largest ECN threshold value
_ACTIONS = {"drop": "drop", "no-drop": "forward"}
_EOS_PORT = re.compile(r"^Ethernet([1-9]\d*)$")
_EOS_ETHERNET = re.compile(r"^Ethernet(\d+(?:/\d+){0,2})$")
_PORT_CHANNEL = re.compile(r"^Port-Channel([1-9]\d*)$")
_DEVICE_LINE = re.compile(r"^! device: \S+ \(([^,)]+)", re.MULTILINE)
_SPEED = re.compile(r"^(\d+(?:\.\d+)?)(g|m)?(?:full|half)?(?:-\d+)?$")
_QUEUE_KEYWORDS = ("tx-queue", "uc-tx-queue")
_QOS_WORDS = ("qos", "service-policy", "random-detect", "shape", "bandwidth", "priority")
_PFC_FORMS = ("priority-flow-control on", "priority-flow-control priority P no-drop|drop",
              "priority-flow-control pause watchdog [port action drop|no-drop | port timer "
              "timeout S polling-interval S recovery-time S]")
_TC = (PRIORITIES - 1, "a traffic class")
_DSCP = "a DSCP value"
_TO_TC = ("traffic-class", *_TC)
_THRESHOLD_UNITS = "bytes, kbytes, mbytes, segments, milliseconds or microseconds"


def eos_to_lab(name: str) -> str:
    """EOS `Ethernet1` → rocelab `eth1`."""
    m = _EOS_PORT.match(name)
    if not m:
        raise ValueError(f"{name!r} is not an EOS port name like Ethernet1, Ethernet2, …")
    return f"eth{m.group(1)}"


def lab_to_eos(name: str) -> str:
    """rocelab `eth1` → EOS `Ethernet1`."""
    lab_to_sonic(name)  # raises ValueError for anything but eth1, eth2, …
    return f"Ethernet{name[3:]}"


def _natural(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in _EOS_ETHERNET.match(name).group(1).split("/"))


def eos_lab_names(names: Sequence[str]) -> dict[str, str]:
    """EOS Ethernet interface names → rocelab's: `EthernetN` is ethN; in a file with modular
    or breakout names (`Ethernet3/1`, `Ethernet1/2/1`), the Nth in natural order is ethN."""
    if all(_EOS_PORT.match(n) for n in names):
        return {n: eos_to_lab(n) for n in names}
    return {n: f"eth{i}" for i, n in enumerate(sorted(set(names), key=_natural), 1)}


@dataclass(frozen=True)
class EosConfig:
    """What a running-config says, with the line each value came from.

    `lines` keys: ("dscp", d), ("cos", c), ("tc-queue", tc), ("default-mtu",); per SONiC port
    name: ("interface", port), ("mtu", port), ("trust", port), ("pfc", port) (on/off),
    ("pfc", port, priority) (no-drop), ("watchdog", port), ("scheduler", port, queue),
    ("ecn", port, queue), ("policy", port), ("class", port, dscp) (the policy-map statement
    that gives the DSCP its class).
    """

    profile: QosProfile
    mtu_bytes: Mapping[str, int]  # SONiC port name → MTU of interfaces that set one
    default_port: PortQos  # what an Ethernet interface the file does not list gets
    lines: Mapping[tuple[object, ...], int]
    default_mtu_bytes: int = EOS_DEFAULT_MTU_BYTES
    eos_names: Mapping[str, str] = field(default_factory=dict)  # SONiC port name → EOS name
    warnings: tuple[str, ...] = ()
    # SONiC port name → DSCP → why its class there is not what the profile says for sure
    uncertain: Mapping[str, Mapping[int, str]] = field(default_factory=dict)

    def line(self, *key: object) -> int | None:
        return self.lines.get(key)


# --- the running-config as a tree of statements


@dataclass
class _Statement:
    line: int
    words: tuple[str, ...]
    children: list[_Statement] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(self.words)


def _statements(text: str) -> list[_Statement]:
    """Top-level statements; deeper-indented lines are children of the line above."""
    roots: list[_Statement] = []
    stack: list[tuple[int, _Statement]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.expandtabs()
        stripped = line.strip()
        if not stripped or stripped.startswith("!") or stripped == "end":
            continue  # "!" separates blocks, "!!" is a comment
        indent = len(line) - len(line.lstrip(" "))
        statement = _Statement(number, tuple(stripped.split()))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(statement)
        stack.append((indent, statement))
    return roots


# --- settings of one interface or qos profile; None: the block does not say


@dataclass(frozen=True)
class _Threshold:
    """A threshold as written; bytes once the port (its speed, its platform) is known."""

    value: int
    unit: str

    def __str__(self) -> str:
        if self.unit in _UNITS:
            return f"{self.value * _UNITS[self.unit]:,} B"
        return f"{self.value:,} {self.unit}"


@dataclass(frozen=True)
class _Wred:
    kmin: _Threshold
    kmax: _Threshold
    probability: int
    statement: str = field(default="", compare=False)  # as written, for problems found later


@dataclass
class _Queue:
    strict: bool | None = None
    weight: int | None = None
    ecn: _Wred | None = None
    drop: _Wred | None = None
    shape_bps: int | None = None
    scheduler_line: int | None = None
    ecn_line: int | None = None
    drop_line: int | None = None

    def merged_over(self, base: _Queue) -> _Queue:
        pick = replace(base)
        if self.strict is not None or self.weight is not None:
            pick.strict, pick.weight = self.strict, self.weight
            pick.scheduler_line = self.scheduler_line
        if self.ecn is not None:
            pick.ecn, pick.ecn_line = self.ecn, self.ecn_line
        if self.drop is not None:
            pick.drop, pick.drop_line = self.drop, self.drop_line
        if self.shape_bps is not None:
            pick.shape_bps = self.shape_bps
        return pick

    def scheduler(self) -> Scheduler | None:
        if self.strict:
            weight = self.weight or 1
            return Scheduler("eos_strict" if weight == 1 else f"eos_strict_{weight}", "STRICT",
                             weight)
        if self.strict is False or self.weight is not None:
            weight = self.weight or 1
            return Scheduler(f"eos_dwrr_{weight}", "DWRR", weight)
        return None


# Scalar settings: an interface's value wins over its port-channel's, which wins over a
# qos profile's.
_SCALARS = ("pfc_on", "trust", "cos", "watchdog", "action", "timeout_ms", "recovery_ms",
            "policy", "mtu", "l2_mtu", "speed_bps", "routed", "shape_bps")


@dataclass
class _Settings:
    pfc_on: bool | None = None
    no_drop: dict[int, bool] = field(default_factory=dict)
    trust: Literal["dscp", "cos", "none"] | None = None
    cos: int | None = None
    watchdog: bool | None = None
    action: str | None = None
    timeout_ms: int | None = None
    recovery_ms: int | None = None
    policy: str | None = None
    mtu: int | None = None
    l2_mtu: int | None = None
    speed_bps: int | None = None
    routed: bool | None = None
    shape_bps: int | None = None
    queues: dict[int, _Queue] = field(default_factory=dict)
    lines: dict[tuple[object, ...], int] = field(default_factory=dict)

    def merged_over(self, base: _Settings) -> _Settings:
        """These settings where they say something, `base` elsewhere."""
        out = _Settings(no_drop={**base.no_drop, **self.no_drop},
                        lines={**base.lines, **self.lines})
        for name in _SCALARS:
            mine = getattr(self, name)
            setattr(out, name, getattr(base, name) if mine is None else mine)
        for q in sorted(set(base.queues) | set(self.queues)):
            out.queues[q] = self.queues.get(q, _Queue()).merged_over(base.queues.get(q, _Queue()))
        return out


@dataclass
class _ClassMap:
    dscps: set[int] = field(default_factory=set)
    match_all: bool = False
    unevaluable: list[_Statement] = field(default_factory=list)


@dataclass
class _PolicyClass:
    name: str
    line: int
    tc: int | None = None
    dscp: int | None = None
    tc_line: int | None = None


@dataclass
class _Global:
    dscp_to_tc: list[int] = field(default_factory=lambda: list(EOS_DEFAULT_DSCP_TO_TC))
    cos_to_tc: list[int] = field(default_factory=lambda: list(EOS_DEFAULT_COS_TO_TC))
    tc_to_queue: list[int] = field(default_factory=lambda: list(_IDENTITY))
    tc_to_dscp: dict[int, int] = field(default_factory=dict)
    rewrite_dscp: int | None = None  # line of `qos rewrite dscp`
    pfc_all_off: bool = False
    timeout_ms: int | None = None
    recovery_ms: int | None = None
    action: str | None = None
    watchdog_line: int | None = None
    default_mtu: int | None = None
    l2_mtu: int | None = None
    class_maps: dict[str, _ClassMap] = field(default_factory=dict)
    policies: dict[str, list[_PolicyClass]] = field(default_factory=dict)
    lines: dict[tuple[object, ...], int] = field(default_factory=dict)


@dataclass
class _Interface:
    name: str
    line: int
    settings: _Settings
    service_profile: tuple[str, int] | None = None  # name, line
    channel_group: int | None = None


def _values(words: Sequence[str]) -> list[str]:
    """`26 27`, `26,27`, `24-31` → the single values, as written."""
    out = []
    for word in words:
        for part in word.split(","):
            lo, _, hi = part.partition("-")
            if hi and lo.isdigit() and hi.isdigit() and int(lo) <= int(hi):
                out += [str(n) for n in range(int(lo), int(hi) + 1)]
            elif part:
                out.append(part)
    return out


class _Parser:
    def __init__(self, source: str, segment_bytes: int | None,
                 port_speeds_bps: Mapping[str, int]):
        self.source = source
        self.problems = Problems(source)
        self.segment_bytes = segment_bytes
        self.port_speeds_bps = port_speeds_bps
        self.glob = _Global()
        self.profiles: dict[str, _Settings] = {}
        self.interfaces: list[_Interface] = []
        self.channels: dict[int, _Interface] = {}
        self.warnings: dict[str, None] = {}  # ordered, each said once
        self.notes: dict[str, None] = {}

    def problem(self, statement: _Statement, message: str, hint: str = "") -> None:
        self.problems.add(f"line {statement.line}", f"`{statement.text}`: {message}", hint)

    def warn(self, statement: _Statement, message: str) -> None:
        self.warnings[f"{self.source} line {statement.line}: `{statement.text}`: {message}"] = None

    # --- values

    def integer(self, statement: _Statement, text: str, lo: int, hi: int, what: str) -> int | None:
        if text.isdigit() and lo <= int(text) <= hi:
            return int(text)
        if what == _DSCP:  # EOS takes DSCP names (af31, cs6, ef) wherever it takes a number
            value = dscp_value(text)
            if value is not None:
                return value
        expected = DSCP_EXPECTED if what == _DSCP else f"a whole number from {lo} to {hi}"
        self.problem(statement, f"{text!r} is not {what} (expected {expected})")
        return None

    def seconds_ms(self, statement: _Statement, text: str) -> int | None:
        """EOS gives watchdog times in seconds; the model keeps whole milliseconds."""
        try:
            ms = Decimal(text) * 1000
        except InvalidOperation:
            ms = None
        if ms is None or ms < 0 or ms != ms.to_integral_value():
            self.problem(statement, f"{text!r} is not a time in seconds (expected e.g. 0.2, "
                                    "with at most 3 decimals)")
            return None
        return int(ms)

    def threshold(self, statement: _Statement, value: str, unit: str) -> _Threshold | None:
        if unit not in _UNITS and unit not in _LATENCY_UNITS and unit != "segments":
            self.problem(statement, f"{unit!r} is not a threshold unit (expected "
                                    f"{_THRESHOLD_UNITS})")
            return None
        number = self.integer(statement, value, 1, _THRESHOLD_MAX, "a threshold")
        return None if number is None else _Threshold(number, unit)

    def action(self, statement: _Statement, word: str) -> str | None:
        if word in _ACTIONS:
            return _ACTIONS[word]
        self.problem(statement, f"{word!r} is not a PFC watchdog action (expected drop or "
                                "no-drop)")
        return None

    def speed(self, statement: _Statement, words: list[str]) -> int | None:
        words = [w for w in words if w not in ("forced", "auto")]
        m = _SPEED.match(words[-1]) if words else None
        if not m:
            self.warn(statement, "no fixed speed rocelab can read: the port's link rate applies")
            return None
        scale = {"g": 10**9, "m": 10**6, None: 10**6}[m.group(2)]  # bare numbers are Mb/s
        return int(Decimal(m.group(1)) * scale)

    def shape(self, statement: _Statement, words: list[str]) -> int | None:
        """`shape rate R [unit]`: bits per second (kbps unless told, as EOS takes it)."""
        unit = words[1] if len(words) > 1 else "kbps"
        if len(words) > 2 or not words or not words[0].isdigit() or (
                unit not in _SHAPE_UNITS and unit != "percent"):
            self.problem(statement, "expected `shape rate R [bps|kbps|mbps|gbps|percent]`")
            return None
        if unit == "percent":
            self.warn(statement, "a rate in percent of the port's speed is not held: no shaper "
                                 "recorded")
            return None
        return int(words[0]) * _SHAPE_UNITS[unit]

    # --- statements

    def run(self, roots: list[_Statement]) -> None:
        for s in roots:
            match s.words:
                case ("qos", "map", "dscp", *rest):
                    self.dscp_map(s, rest)
                case ("qos", "map", "cos", *rest):
                    self.map_statement(s, rest, "qos map cos C... to traffic-class T",
                                       (PRIORITIES - 1, "a CoS value"), _TO_TC,
                                       self.glob.cos_to_tc, "cos")
                case ("qos", "map", "traffic-class", *rest) if "tx-queue" in rest:
                    self.map_statement(s, rest, "qos map traffic-class T... to tx-queue Q", _TC,
                                       ("tx-queue", PRIORITIES - 1, "a tx-queue"),
                                       self.glob.tc_to_queue, "tc-queue")
                case ("qos", "map", "traffic-class", *rest) if "dscp" in rest:
                    self.map_statement(s, rest, "qos map traffic-class T... to dscp D", _TC,
                                       ("dscp", DSCP_VALUES - 1, _DSCP),
                                       self.glob.tc_to_dscp, "tc-dscp")
                case ("qos", "map", "traffic-class", *_) | ("qos", "map", "exp", *_):
                    pass  # egress CoS / MPLS EXP marking: no class, queue, PFC or ECN here
                case ("qos", "rewrite", "dscp"):
                    self.glob.rewrite_dscp = s.line
                case ("qos", "random-detect", "ecn", "allow", "non-ect", *_):
                    pass  # non-ECT packets pass the ECN thresholds unmarked instead of dropped
                case ("qos", "profile", name):
                    self.profiles[name] = self.block(s, None)
                case ("interface", "defaults"):
                    self.interface_defaults(s)
                case ("interface", name) if _EOS_ETHERNET.match(name):
                    interface = _Interface(name, s.line, _Settings())
                    interface.settings = self.block(s, interface)
                    self.interfaces.append(interface)
                case ("interface", name) if _PORT_CHANNEL.match(name):
                    interface = _Interface(name, s.line, _Settings())
                    interface.settings = self.block(s, interface)
                    self.channels[int(_PORT_CHANNEL.match(name).group(1))] = interface
                case ("l2", "mtu", value):
                    self.glob.l2_mtu = self.integer(s, value, 68, 65535, "an MTU in bytes")
                case ("class-map", *rest):
                    self.class_map(s, rest)
                case ("policy-map", *rest):
                    self.policy_map(s, rest)
                case ("priority-flow-control", *rest):
                    self.global_pfc(s, rest)
                case ("qos", *_):
                    self.warn(s, "a QoS statement rocelab does not read")

    def interface_defaults(self, head: _Statement) -> None:
        for s in head.children:
            if s.words[:1] == ("mtu",) and len(s.words) == 2:
                self.glob.default_mtu = self.integer(s, s.words[1], 68, 65535, "an MTU in bytes")
                self.glob.lines[("default-mtu",)] = s.line

    def dscp_map(self, s: _Statement, rest: list[str]) -> None:
        form = "qos map dscp D... to traffic-class T [drop-precedence N]"
        if rest[-2:-1] == ["drop-precedence"]:
            self.integer(s, rest[-1], 0, 2, "a drop precedence")  # a WRED colour: not held
            rest = rest[:-2]
        self.map_statement(s, rest, form, (DSCP_VALUES - 1, _DSCP), _TO_TC,
                           self.glob.dscp_to_tc, "dscp")

    def map_statement(self, s: _Statement, rest: list[str], form: str, source: tuple[int, str],
                      target: tuple[str, int, str], table: list[int] | dict[int, int],
                      key: str) -> None:
        """`qos map ... V... to KEYWORD T`: table[V] = T for each V, and where each was said."""
        keyword, hi, what = target
        if len(rest) < 3 or rest[-3:-1] != ["to", keyword]:
            self.problem(s, f"expected `{form}`")
            return
        value = self.integer(s, rest[-1], 0, hi, what)
        for word in _values(rest[:-3]):
            index = self.integer(s, word, 0, *source)
            if index is not None and value is not None:
                table[index] = value
                self.glob.lines[(key, index)] = s.line

    def class_map(self, head: _Statement, rest: list[str]) -> None:
        if rest[:2] == ["type", "qos"]:
            rest = rest[2:]
        elif rest[:1] == ["type"]:
            return  # pbr, pdp, ...: they do not classify for QoS
        if len(rest) != 2 or rest[0] not in ("match-any", "match-all"):
            self.problem(head, "expected `class-map type qos match-any|match-all NAME`")
            return
        cmap = _ClassMap(match_all=rest[0] == "match-all")
        for s in head.children:
            match s.words:
                case ("match", "dscp", *values) | ("match", "ip", "dscp", *values) if values:
                    for word in _values(values):
                        dscp = self.integer(s, word, 0, DSCP_VALUES - 1, _DSCP)
                        if dscp is not None:
                            cmap.dscps.add(dscp)
                case ("match", *_):
                    cmap.unevaluable.append(s)
        if cmap.match_all and len(head.children) > 1:
            cmap.unevaluable = [head]  # several conditions at once: not a DSCP list
        self.glob.class_maps[rest[1]] = cmap

    def policy_map(self, head: _Statement, rest: list[str]) -> None:
        if rest[:2] in (["type", "quality-of-service"], ["type", "qos"]):
            rest = rest[2:]
        elif rest[:1] == ["type"]:
            return  # pbr, copp, ...: not a packet's QoS class
        if len(rest) != 1:
            self.problem(head, "expected `policy-map type quality-of-service NAME`")
            return
        classes = []
        for c in head.children:
            if c.words[:1] != ("class",) or len(c.words) != 2:
                self.warn(c, "not a `class NAME` of a policy-map: ignored")
                continue
            entry = _PolicyClass(c.words[1], c.line)
            for s in c.children:
                match s.words:
                    case ("set", "traffic-class", value):
                        entry.tc = self.integer(s, value, 0, PRIORITIES - 1, "a traffic class")
                        entry.tc_line = s.line
                    case ("set", "dscp", value):
                        entry.dscp = self.integer(s, value, 0, DSCP_VALUES - 1, _DSCP)
                    case ("set", "drop-precedence", value):
                        self.integer(s, value, 0, 2, "a drop precedence")  # a colour: not held
                    case ("set", "cos", value):
                        self.integer(s, value, 0, PRIORITIES - 1, "a CoS value")  # egress tag
                    case _:
                        self.warn(s, "a policy-map action rocelab does not read")
            classes.append(entry)
        self.glob.policies[rest[0]] = classes

    def global_pfc(self, s: _Statement, rest: list[str]) -> None:
        g = self.glob
        match rest:
            case ["all", "off"]:
                g.pfc_all_off = True
            case ["pause", "watchdog", "default", "timeout", value]:
                g.timeout_ms, g.watchdog_line = self.seconds_ms(s, value), s.line
            case ["pause", "watchdog", "default", "recovery-time", value]:
                g.recovery_ms = self.seconds_ms(s, value)
            case ["pause", "watchdog", "default", "polling-interval", value]:
                self.seconds_ms(s, value)  # how often EOS looks: nothing to emulate
            case ["pause", "watchdog", "action", word]:
                g.action = self.action(s, word)
            case ["pause", "watchdog", "override", "action", "drop"]:
                pass  # applies to platforms' hardware recovery; nothing to emulate
            case _:
                self.problem(s, "is not a priority-flow-control statement rocelab reads",
                             "expected `priority-flow-control all off` or `priority-flow-control"
                             " pause watchdog default timeout|recovery-time|polling-interval S`"
                             " or `... pause watchdog action drop|no-drop`")

    def block(self, head: _Statement, interface: _Interface | None) -> _Settings:
        """An interface's or a qos profile's statements."""
        out = _Settings()
        for s in head.children:
            match s.words:
                case ("mtu", value) if interface:
                    out.mtu = self.integer(s, value, 68, 65535, "an MTU in bytes")
                    out.lines[("mtu",)] = s.line
                case ("l2", "mtu", value) if interface:
                    out.l2_mtu = self.integer(s, value, 68, 65535, "an MTU in bytes")
                    out.lines[("mtu",)] = s.line
                case ("speed", *words) if interface:
                    out.speed_bps = self.speed(s, words)
                case ("no", "switchport") if interface:
                    out.routed = True
                case ("switchport",) if interface:
                    out.routed = False
                case ("channel-group", number, *_) if interface:
                    interface.channel_group = self.integer(s, number, 1, 999_999,
                                                           "a port-channel number")
                case ("service-profile", name) if interface:
                    interface.service_profile = (name, s.line)
                case ("service-policy", *rest):
                    self.service_policy(s, rest, out)
                case ("qos", "trust", mode):
                    if mode in ("dscp", "cos"):
                        out.trust = mode
                        out.lines[("trust",)] = s.line
                    else:
                        self.problem(s, f"{mode!r} is not a trust mode (expected dscp or cos)")
                case ("no", "qos", "trust"):
                    out.trust = "none"
                    out.lines[("trust",)] = s.line
                case ("qos", "cos", value):
                    out.cos = self.integer(s, value, 0, PRIORITIES - 1, "a CoS value")
                    out.lines[("cos",)] = s.line
                case ("qos", "dscp", value):
                    self.integer(s, value, 0, DSCP_VALUES - 1, _DSCP)
                case ("shape", "rate", *words):
                    out.shape_bps = self.shape(s, words)
                case ("no", "priority-flow-control"):
                    out.pfc_on = False
                    out.lines[("pfc",)] = s.line
                case ("no", "priority-flow-control", "pause", "watchdog"):
                    out.watchdog = False
                    out.lines[("watchdog",)] = s.line
                case ("priority-flow-control", *rest):
                    self.port_pfc(s, rest, out)
                case (keyword, number) if keyword in _QUEUE_KEYWORDS:
                    queue = self.integer(s, number, 0, PRIORITIES - 1, "a tx-queue")
                    if queue is not None:
                        out.queues[queue] = self.queue(s)
                case ("mc-tx-queue", number):
                    self.integer(s, number, 0, PRIORITIES - 1, "a tx-queue")  # multicast only
                case (word, *_) if word in _QOS_WORDS:
                    self.warn(s, "a QoS statement rocelab does not read")
        return out

    def service_policy(self, s: _Statement, rest: list[str], out: _Settings) -> None:
        if rest[:2] in (["type", "qos"], ["type", "quality-of-service"]):
            rest = rest[2:]
        elif rest[:1] == ["type"]:
            self.warn(s, "a service-policy type rocelab does not read: the class, queue and "
                         "PFC checks do not see it")
            return
        if len(rest) != 2 or rest[0] not in ("input", "output"):
            self.problem(s, "expected `service-policy type qos input NAME`")
            return
        if rest[0] == "output":
            self.warn(s, "an output policy: classes are chosen on input, rocelab does not read it")
            return
        out.policy = rest[1]
        out.lines[("policy",)] = s.line

    def port_pfc(self, s: _Statement, rest: list[str], out: _Settings) -> None:
        match rest:
            case ["on"] | ["mode", "on"]:
                out.pfc_on = True
                out.lines[("pfc",)] = s.line
            case ["priority", number, ("no-drop" | "drop") as mode]:
                priority = self.integer(s, number, 0, PRIORITIES - 1, "a PFC priority")
                if priority is not None:
                    out.no_drop[priority] = mode == "no-drop"
                    out.lines[("pfc", priority)] = s.line
            case ["pause", "watchdog"]:
                out.watchdog = True
                out.lines[("watchdog",)] = s.line
            case ["pause", "watchdog", "port", "action", word]:
                out.action = self.action(s, word)
            case ["pause", "watchdog", "port", "timer", *options]:
                self.port_timer(s, options, out)
            case _:
                self.problem(s, "is not a priority-flow-control statement rocelab reads",
                             "expected one of: " + "; ".join(f"`{f}`" for f in _PFC_FORMS))

    def port_timer(self, s: _Statement, options: list[str], out: _Settings) -> None:
        if options[-1:] == ["forced"]:
            options = options[:-1]
        pairs = dict(zip(options[::2], options[1::2]))
        if len(options) % 2 or set(pairs) - {"timeout", "polling-interval", "recovery-time"} \
                or "timeout" not in pairs:
            self.problem(s, "expected `priority-flow-control pause watchdog port timer timeout S "
                            "polling-interval S|auto recovery-time S [forced]`")
            return
        out.timeout_ms = self.seconds_ms(s, pairs["timeout"])
        out.lines[("watchdog",)] = s.line
        if pairs.get("polling-interval", "auto") != "auto":
            self.seconds_ms(s, pairs["polling-interval"])
        if "recovery-time" in pairs:
            out.recovery_ms = self.seconds_ms(s, pairs["recovery-time"])

    def queue(self, head: _Statement) -> _Queue:
        q = _Queue()
        for s in head.children:
            match s.words:
                case ("priority", "strict"):
                    q.strict, q.scheduler_line = True, s.line
                case ("no", "priority"):
                    q.strict, q.scheduler_line = False, s.line
                case ("bandwidth", "percent", value):
                    q.weight = self.integer(s, value, 1, 100, "a bandwidth percentage")
                    q.scheduler_line = q.scheduler_line or s.line
                case ("bandwidth", "guaranteed", *_):
                    pass  # a minimum rate: the weights and strict priority decide the order
                case ("shape", "rate", *words):
                    q.shape_bps = self.shape(s, words)
                case ("random-detect", "ecn", "minimum-threshold", *rest):
                    q.ecn, q.ecn_line = self.wred(s, rest, "ecn"), s.line
                case ("random-detect", "drop", "minimum-threshold", *rest):
                    q.drop, q.drop_line = self.wred(s, rest, "drop"), s.line
                case ("random-detect", "drop", "drop-precedence", value, *_):
                    # Thresholds of yellow/red packets: the model holds green ones only.
                    self.integer(s, value, 0, 2, "a drop precedence")
                case ("random-detect", "ecn", "count") | ("random-detect", "ecn", "allow", *_):
                    pass  # counters; non-ECT handling
                case (word, *_) if word in _QOS_WORDS:
                    self.warn(s, "a tx-queue statement rocelab does not read")
        return q

    def wred(self, s: _Statement, rest: list[str], kind: str) -> _Wred | None:
        form = (f"expected `random-detect {kind} minimum-threshold X UNIT maximum-threshold Y UNIT "
                "[max-mark-probability P] [weight W]`")
        if len(rest) < 5 or rest[2] != "maximum-threshold" or len(rest) % 2 == 0:
            self.problem(s, form)
            return None
        kmin = self.threshold(s, rest[0], rest[1])
        if kmin is None:
            return None  # one problem per statement: Kmax is usually written like Kmin
        kmax = self.threshold(s, rest[3], rest[4])
        options = dict(zip(rest[5::2], rest[6::2]))
        probabilities = {"max-mark-probability", "drop-probability", "max-drop-probability"}
        if set(options) - probabilities - {"weight"}:
            self.problem(s, form)
            return None
        probability = DEFAULT_MARK_PROBABILITY_PCT
        for key in probabilities & set(options):
            probability = self.integer(s, options[key], 1, 100, "a probability in percent")
        if "weight" in options:
            self.integer(s, options["weight"], 0, 15, "a queue-averaging weight")
        if kmax is None or probability is None:
            return None
        if kmax.unit == kmin.unit and kmax.value < kmin.value:
            self.problem(s, f"maximum-threshold ({kmax}) is below minimum-threshold ({kmin})")
            return None
        return _Wred(kmin, kmax, probability, f"`{s.text}`")

    # --- the resolved profile

    def platform_segment(self, platform: str | None) -> int | None:
        if self.segment_bytes:
            return self.segment_bytes
        for prefix, size in EOS_SEGMENT_BYTES_BY_PLATFORM.items():
            if platform and platform.startswith(prefix):
                return size
        return None

    def to_bytes(self, t: _Threshold, line: int, speed: tuple[int, str] | None,
                 platform: str | None, where: str) -> int | None:
        """A threshold in bytes on this port; `where` names statement and port for problems."""
        if t.unit in _UNITS:
            return t.value * _UNITS[t.unit]
        if t.unit == "segments":
            size = self.platform_segment(platform)
            if size is None:
                known = (f"platform {platform} is not in rocelab's table" if platform
                         else "no `! device:` line names the platform")
                self.problems.add(f"line {line}", f"{where}: thresholds in segments need the "
                                  f"platform's segment size ({known})",
                                  "give `segment_bytes:` for this device in fabric.yml")
            return None if size is None else t.value * size
        if speed is None:  # a port off the fabric (no link rate) that sets no `speed`
            self.warnings[f"{self.source} line {line}: {where}: a latency threshold needs the "
                          "port's speed, and the interface has no `speed` and the fabric no link "
                          "for it: no ECN recorded"] = None
            return None
        rate, said = speed
        size = int(Decimal(t.value) * _LATENCY_UNITS[t.unit] * rate / 8)
        self.notes[f"{self.source} line {line}: {where}: {t.value} {t.unit} at "
                   f"{format_rate(rate)}b/s ({said}) = {size:,} B"] = None
        return size

    def wred_profile(self, queue: _Queue, speed: tuple[int, str] | None, platform: str | None,
                     where: str) -> WredProfile | None:
        marks = queue.ecn or queue.drop
        if marks is None:
            return None
        line = queue.ecn_line if queue.ecn else queue.drop_line
        place, where = where, f"{marks.statement}: {where}"
        kmin = self.to_bytes(marks.kmin, line, speed, platform, where)
        if kmin is None:
            return None  # one problem per statement: Kmax is usually written like Kmin
        kmax = self.to_bytes(marks.kmax, line, speed, platform, where)
        if kmax is None:
            return None
        if kmax < kmin:
            self.problems.add(f"line {line}", f"{where}: maximum-threshold ({kmax:,} B) is below "
                              f"minimum-threshold ({kmin:,} B)")
            return None
        if queue.ecn and queue.drop and queue.drop != queue.ecn:
            self.notes[f"{self.source} line {queue.drop_line}: {queue.drop.statement}: {place}: "
                       "drop thresholds differ "
                       "from the ECN ones; the profile holds the ECN ones"] = None
        tag = "ecn" if queue.ecn else "drop"
        return WredProfile(name=f"eos_{tag}_{kmin}_{kmax}_{marks.probability}",
                           wred_green_enable=queue.drop is not None,
                           ecn="ecn_all" if queue.ecn else "ecn_none",
                           green_min_threshold_bytes=kmin, green_max_threshold_bytes=kmax,
                           green_drop_probability_pct=marks.probability)

    def classes(self, settings: _Settings, lines: dict[tuple[object, ...], int]
                ) -> tuple[tuple[int, ...], tuple[int, ...] | None, dict[int, str]]:
        """(dscp_to_tc, dot1p_to_tc, uncertain DSCPs) of an untagged IP packet on a port."""
        g = self.glob
        trust = settings.trust or "dscp"
        if trust == "dscp":
            base = list(g.dscp_to_tc)
        else:
            base = [g.cos_to_tc[settings.cos or 0]] * DSCP_VALUES
        uncertain: dict[int, str] = {}
        tcs = base
        if settings.policy is not None:
            tcs = self.policy_classes(settings, base, lines, uncertain)
        if g.rewrite_dscp is not None:
            for d, tc in enumerate(tcs):
                if g.tc_to_dscp.get(tc, d) != d:
                    uncertain.setdefault(d, (
                        f"{self.source} line {g.lines[('tc-dscp', tc)]}: `qos rewrite dscp` sends "
                        f"DSCP {d} (TC {tc}) on as DSCP {g.tc_to_dscp[tc]}: the next hop "
                        "classifies that"))
        return tuple(tcs), (tuple(g.cos_to_tc) if trust == "cos" else None), uncertain

    def policy_classes(self, settings: _Settings, base: list[int],
                       lines: dict[tuple[object, ...], int], uncertain: dict[int, str]
                       ) -> list[int]:
        name, line = settings.policy, settings.lines[("policy",)]
        policy = self.glob.policies.get(name)
        if policy is None:
            self.warnings[f"{self.source} line {line}: `service-policy type qos input {name}`: "
                          "names no policy-map type quality-of-service: applies nothing"] = None
            return base
        certain: list[set[int]] = []
        possible: list[set[int]] = []
        for entry in policy:
            cmap = self.glob.class_maps.get(entry.name)
            if entry.name == "class-default":
                certain.append(set(range(DSCP_VALUES)))
                possible.append(set())
            elif cmap is None:
                self.warnings[f"{self.source} line {entry.line}: `class {entry.name}`: names no "
                              "class-map type qos: matches nothing"] = None
                certain.append(set())
                possible.append(set())
            elif cmap.unevaluable:
                for s in cmap.unevaluable:
                    self.warn(s, f"rocelab cannot tell which packets this matches (policy-map "
                                 f"{name}): DSCPs whose class it may change are refused if the "
                                 "hosts send them")
                sure = set() if cmap.match_all else set(cmap.dscps)
                certain.append(sure)
                possible.append((set(cmap.dscps) if cmap.match_all and cmap.dscps
                                 else set(range(DSCP_VALUES))) - sure)
            else:
                certain.append(set(cmap.dscps))
                possible.append(set())

        def evaluate(widen: int | None) -> tuple[list[int], dict[int, _PolicyClass]]:
            tcs, by, left = list(base), {}, set(range(DSCP_VALUES))
            for i, entry in enumerate(policy):
                hit = (certain[i] | (possible[i] if i == widen else set())) & left
                left -= hit
                for d in hit:
                    by[d] = entry
                    if entry.tc is not None:
                        tcs[d] = entry.tc
            return tcs, by

        tcs, by = evaluate(None)
        for i, entry in enumerate(policy):
            if possible[i]:
                wide, _ = evaluate(i)
                for d in range(DSCP_VALUES):
                    if wide[d] != tcs[d]:
                        uncertain.setdefault(d, (
                            f"{self.source} line {entry.line}: `class {entry.name}` of policy-map "
                            f"{name} may give DSCP {d} TC {wide[d]} instead of TC {tcs[d]}: its "
                            "class-map matches on what rocelab cannot evaluate"))
        for d, entry in by.items():
            if entry.tc is not None:
                lines[("class", d)] = entry.tc_line
            if entry.dscp is not None and entry.dscp != d:
                uncertain.setdefault(d, (
                    f"{self.source} line {entry.line}: `class {entry.name}` of policy-map {name} "
                    f"rewrites DSCP {d} to {entry.dscp}: the next hop classifies that"))
        return tcs

    def port(self, port: str, settings: _Settings, speed: tuple[int, str] | None,
             platform: str | None, label: str) -> tuple[PortQos, dict[int, str]]:
        g = self.glob
        pfc_enable = frozenset()
        if settings.pfc_on and not g.pfc_all_off:
            pfc_enable = frozenset(p for p, no_drop in settings.no_drop.items() if no_drop)
        queues = {}
        for q, queue in sorted(settings.queues.items()):
            scheduler = queue.scheduler()
            wred = self.wred_profile(queue, speed, platform, f"{label} tx-queue {q}")
            if scheduler or wred or queue.shape_bps:
                queues[q] = QueueQos(scheduler=scheduler, wred=wred, shape_bps=queue.shape_bps)
        watchdog = None
        timeout_ms = g.timeout_ms if settings.timeout_ms is None else settings.timeout_ms
        if pfc_enable and settings.watchdog is not False and timeout_ms:
            recovery_ms = settings.recovery_ms if settings.recovery_ms is not None \
                else g.recovery_ms
            watchdog = PfcWatchdog(action=settings.action or g.action or "drop",
                                   detection_time_ms=timeout_ms,
                                   restoration_time_ms=recovery_ms or 0)
        dscp_to_tc, dot1p_to_tc, uncertain = self.classes(settings, settings.lines)
        return PortQos(port=port,
                       dscp_to_tc=dscp_to_tc,
                       tc_to_queue=tuple(g.tc_to_queue),
                       tc_to_pg=_IDENTITY,
                       pfc_priority_to_queue=tuple(g.tc_to_queue),
                       pfc_enable=pfc_enable,
                       queues=queues,
                       pfc_wd=watchdog,
                       dot1p_to_tc=dot1p_to_tc,
                       shape_bps=settings.shape_bps), uncertain

    def with_profile(self, interface: _Interface) -> _Settings:
        settings = interface.settings
        if interface.service_profile:
            name, line = interface.service_profile
            if name in self.profiles:
                settings = settings.merged_over(self.profiles[name])
            else:
                self.warnings[f"{self.source} line {line}: `service-profile {name}`: names no qos "
                              "profile (EOS accepts it and applies nothing until one exists; "
                              "defined: "
                              f"{', '.join(sorted(self.profiles)) or 'none'})"] = None
        return settings

    def mtu(self, settings: _Settings) -> int | None:
        if settings.routed is False:
            l2 = settings.l2_mtu or self.glob.l2_mtu
            return None if l2 is None else l2 - ETH.size
        return settings.mtu

    def config(self, source: str, platform: str | None) -> EosConfig:
        lines: dict[tuple[object, ...], int] = dict(self.glob.lines)
        ports, mtus, names, uncertain = {}, {}, {}, {}
        lab_names = eos_lab_names([i.name for i in self.interfaces])
        for interface in self.interfaces:
            lab = lab_names[interface.name]
            port = lab_to_sonic(lab)
            settings = self.with_profile(interface)
            channel = self.channels.get(interface.channel_group)
            if channel is not None:
                settings = settings.merged_over(self.with_profile(channel))
            speed = None
            if settings.speed_bps:
                speed = (settings.speed_bps, "the interface's `speed`")
            elif lab in self.port_speeds_bps:
                speed = (self.port_speeds_bps[lab], "the fabric's link rate; no `speed` here")
            ports[port], doubt = self.port(port, settings, speed, platform, interface.name)
            if doubt:
                uncertain[port] = doubt
            names[port] = interface.name
            if (mtu := self.mtu(settings)) is not None:
                mtus[port] = mtu
            lines[("interface", port)] = interface.line
            for key, line in settings.lines.items():
                lines[(key[0], port, *key[1:])] = line
            if ("watchdog", port) not in lines and self.glob.watchdog_line:
                lines[("watchdog", port)] = self.glob.watchdog_line
            for q, queue in settings.queues.items():
                for kind, line in (("scheduler", queue.scheduler_line),
                                   ("ecn", queue.ecn_line or queue.drop_line)):
                    if line is not None:
                        lines[(kind, port, q)] = line
        unmapped = [str(tc) for tc in range(PRIORITIES) if tc not in self.glob.tc_to_dscp]
        if self.glob.rewrite_dscp is not None and unmapped:
            self.warnings[f"{self.source} line {self.glob.rewrite_dscp}: `qos rewrite dscp`: "
                          f"packets of TC {', '.join(unmapped)} leave with the DSCP EOS's default "
                          "TC → DSCP map gives, which rocelab does not know: it assumes they "
                          "keep theirs"] = None
        self.problems.raise_if_any()
        warnings = tuple(self.warnings)
        default_port, _ = self.port("", _Settings(), None, platform, "")
        return EosConfig(profile=QosProfile(source=source, pools={}, ports=ports,
                                            notes=warnings + tuple(self.notes)),
                         mtu_bytes=mtus, default_port=default_port, lines=lines,
                         default_mtu_bytes=self.glob.default_mtu or EOS_DEFAULT_MTU_BYTES,
                         eos_names=names, warnings=warnings, uncertain=uncertain)


def parse_eos_config(text: str, source: str, *, segment_bytes: int | None = None,
                     port_speeds_bps: Mapping[str, int] | None = None) -> EosConfig:
    """The QoS statements of a running-config and where each came from. `segment_bytes`:
    the platform's buffer segment, if not in EOS_SEGMENT_BYTES_BY_PLATFORM; `port_speeds_bps`:
    rocelab port (eth1) → link rate, for latency thresholds of interfaces without `speed`.
    Raises InputError naming `source` and the line of every malformed statement."""
    parser = _Parser(source, segment_bytes, port_speeds_bps or {})
    parser.run(_statements(text))
    device = _DEVICE_LINE.search(text)
    return parser.config(source, device.group(1) if device else None)


def parse_eos(text: str, source: str, *, segment_bytes: int | None = None,
              port_speeds_bps: Mapping[str, int] | None = None) -> QosProfile:
    """The QoS profile a running-config describes (module docstring). Raises InputError."""
    return parse_eos_config(text, source, segment_bytes=segment_bytes,
                            port_speeds_bps=port_speeds_bps).profile


def load_eos(path: str | os.PathLike[str], *, segment_bytes: int | None = None,
             port_speeds_bps: Mapping[str, int] | None = None) -> EosConfig:
    """Read a running-config file. Raises InputError naming the file."""
    source = os.fspath(path)
    return parse_eos_config(read_text(source), source, segment_bytes=segment_bytes,
                            port_speeds_bps=port_speeds_bps)


# --- rendering


def _seconds(ms: int) -> str:
    return format((Decimal(ms) / 1000).normalize(), "f")


def _one(values: list[tuple[int, ...]], what: str, default: tuple[int, ...]) -> tuple[int, ...]:
    distinct = list(dict.fromkeys(values))
    if len(distinct) > 1:
        raise ValueError(f"EOS has one {what} per switch; the profile's ports differ")
    return distinct[0] if distinct else default


def _watchdog_lines(wd: PfcWatchdog, prefix: str) -> list[str]:
    if wd.action not in ("drop", "forward"):
        raise ValueError(f"EOS's PFC watchdog has no {wd.action!r} action (drop or no-drop)")
    action = "drop" if wd.action == "drop" else "no-drop"
    if prefix:  # one port's own watchdog
        return [f"{prefix}priority-flow-control pause watchdog port action {action}",
                f"{prefix}priority-flow-control pause watchdog port timer timeout "
                f"{_seconds(wd.detection_time_ms)} polling-interval auto recovery-time "
                f"{_seconds(wd.restoration_time_ms)}"]
    lines = [f"priority-flow-control pause watchdog default timeout "
             f"{_seconds(wd.detection_time_ms)}"]
    if wd.restoration_time_ms:
        lines.append(f"priority-flow-control pause watchdog default recovery-time "
                     f"{_seconds(wd.restoration_time_ms)}")
    lines.append(f"priority-flow-control pause watchdog action {action}")
    return lines


def _queue_lines(q: int, queue: QueueQos, keyword: str) -> list[str]:
    body = []
    scheduler = queue.scheduler
    if scheduler is not None:
        body.append("priority strict" if scheduler.type == "STRICT" else "no priority")
        if scheduler.type != "STRICT" or scheduler.weight != 1:
            body.append(f"bandwidth percent {scheduler.weight}")
    wred = queue.wred
    if wred is not None and wred.ecn == "ecn_all":
        body.append(f"random-detect ecn minimum-threshold {wred.green_min_threshold_bytes} bytes "
                    f"maximum-threshold {wred.green_max_threshold_bytes} bytes "
                    f"max-mark-probability {wred.green_drop_probability_pct}")
    return ["   !", f"   {keyword} {q}", *(f"      {line}" for line in body)] if body else []


def render_eos(profile: QosProfile, *, mtu_bytes: Mapping[str, int] | None = None,
               queue_keyword: Literal["tx-queue", "uc-tx-queue"] = "tx-queue",
               interface_lines: Mapping[str, Sequence[str]] | None = None) -> str:
    """The EOS statements for `profile` (what EOS can express: module docstring), one
    interface block per port; `mtu_bytes` (SONiC port name → MTU) adds `mtu` lines, and
    `interface_lines` (SONiC port name → statements) other statements to a port's block, so
    a whole startup-config keeps one block per interface.

    Raises ValueError where EOS cannot say what the profile says: ports with different DSCP
    (other than untrusted) or TC → queue maps, or a PFC watchdog action of alert.
    """
    mtu_bytes, interface_lines = mtu_bytes or {}, interface_lines or {}
    names = sorted(set(profile.ports) | set(mtu_bytes) | set(interface_lines), key=lambda p: int(p[8:]))
    ports = [profile.ports.get(name, PortQos(port=name)) for name in names]
    untrusted = (UNTRUSTED_TC,) * DSCP_VALUES
    dscp_to_tc = _one([p.dscp_to_tc for p in ports if p.dscp_to_tc != untrusted],
                      "DSCP map", EOS_DEFAULT_DSCP_TO_TC)
    tc_to_queue = _one([p.tc_to_queue[:PRIORITIES] for p in ports], "traffic-class to tx-queue map",
                       _IDENTITY)
    watchdogs = Counter(p.pfc_wd for p in ports if p.pfc_enable and p.pfc_wd)
    default_wd = watchdogs.most_common(1)[0][0] if watchdogs else None

    out = [f"! QoS statements rendered by rocelab from {profile.source}"]
    for tc in range(PRIORITIES):
        changed = [str(d) for d in range(DSCP_VALUES)
                   if dscp_to_tc[d] == tc and dscp_to_tc[d] != EOS_DEFAULT_DSCP_TO_TC[d]]
        if changed:
            out.append(f"qos map dscp {' '.join(changed)} to traffic-class {tc}")
    out += [f"qos map traffic-class {tc} to tx-queue {q}"
            for tc, q in enumerate(tc_to_queue) if q != tc]
    if default_wd:
        out += ["!", *_watchdog_lines(default_wd, "")]
    for name, port in zip(names, ports):
        out += ["!", f"interface {lab_to_eos(sonic_to_lab(name))}"]
        out += [f"   {line}" for line in interface_lines.get(name, ())]
        if name in mtu_bytes:
            out.append(f"   mtu {mtu_bytes[name]}")
        if port.dscp_to_tc != dscp_to_tc:
            out.append("   qos trust cos" if port.dot1p_to_tc is not None else "   no qos trust")
        if port.pfc_enable:
            out.append("   priority-flow-control on")
            out += [f"   priority-flow-control priority {p} no-drop"
                    for p in sorted(port.pfc_enable)]
            if port.pfc_wd is None and default_wd:
                out.append("   no priority-flow-control pause watchdog")
            elif port.pfc_wd != default_wd:
                out += _watchdog_lines(port.pfc_wd, "   ")
        for q, queue in sorted(port.queues.items()):
            out += _queue_lines(q, queue, queue_keyword)
    return "\n".join(out + ["!", ""])
