"""Arista EOS running-config ⇄ QosProfile: the QoS statements of an EOS switch.

`parse_eos` reads these statements (REFERENCE.md, "EOS QoS configuration statements") and
ignores every other one, so a whole `show running-config` loads as saved:

    qos map dscp D... to traffic-class T
    qos map traffic-class T... to tx-queue Q
    priority-flow-control all off
    priority-flow-control pause watchdog default timeout S | default recovery-time S
    priority-flow-control pause watchdog default polling-interval S
    priority-flow-control pause watchdog action drop|no-drop
    qos profile NAME                     per-port statements, applied by service-profile
    interface EthernetN                  other interfaces are ignored
       mtu N
       service-profile NAME
       qos trust dscp|cos  |  no qos trust
       priority-flow-control on  |  no priority-flow-control
       priority-flow-control priority P no-drop|drop
       [no] priority-flow-control pause watchdog
       priority-flow-control pause watchdog port action drop|no-drop
       priority-flow-control pause watchdog port timer timeout S polling-interval S|auto
                                                       recovery-time S [forced]
       tx-queue N  |  uc-tx-queue N
          priority strict  |  no priority
          bandwidth percent W
          random-detect ecn minimum-threshold X UNIT maximum-threshold Y UNIT
                            [max-mark-probability P] [weight W]

A malformed statement of these kinds is an error naming file and line; all are collected,
then raised once as InputError.

How EOS maps onto the profile (PortQos per interface, keyed by SONiC port name):

- Port names: EOS `Ethernet1` is rocelab's `eth1`, which the profile (like every QosProfile)
  keys by its SONiC name `Ethernet0` (`rocelab.qos.ports`). EOS numbers front-panel ports
  from 1 with no lanes; SONiC counts four lanes per port from 0. `Ethernet1/1` breakouts and
  non-Ethernet interfaces are not lab ports and are ignored.
- Statements under an interface override the same statements of its service-profile.
- DSCP → TC: one map per switch, EOS's default where `qos map dscp` does not say
  (DSCP 0-7 → TC 1, 8-15 → TC 0, then DSCP / 8: as Arista's manuals table it; recalled).
  EOS trusts DSCP on routed ports, which lab fabrics are. A port with `qos trust cos` or
  `no qos trust` classifies untagged routed traffic by CoS 0 instead: every DSCP → TC 1.
- TC → queue: `qos map traffic-class ... to tx-queue`, else the identity. A PFC priority P
  pauses TC P's queue; TC P is PG P (EOS configures no PGs).
- PFC: the `no-drop` priorities of a port with `priority-flow-control on` (and without
  `priority-flow-control all off`) are its pfc_enable.
- Queues: `priority strict` → STRICT; `no priority` or `bandwidth percent W` → DWRR with
  weight W (1 without `bandwidth percent`). EOS platforms differ in a queue's default mode,
  so a queue is strict only when it says so. `random-detect ecn` → a WRED profile that marks
  ECN on every colour (ecn_all) from Kmin to Kmax, max-mark-probability (default 100 %) at
  Kmax, and drops nothing early (wred_green_enable false).
- Threshold units: bytes, kbytes (1,024 B), mbytes (1,048,576 B), segments (`segment_bytes`
  each: 208 B by default, the buffer cell of Broadcom Trident/Tomahawk ASICs; an
  assumption, not confirmed from Arista's documentation: give the platform's). Latency
  thresholds (milliseconds) have no byte value and are an error.
- PFC watchdog: on for a PFC port when a timeout applies to it (its `port timer timeout` or
  the switch's `default timeout`) and it does not say `no priority-flow-control pause
  watchdog`; detection time = timeout, restoration time = recovery-time (0: none set, no
  automatic recovery). Actions: drop → drop, no-drop → forward; none → EOS's default,
  errdisable, which shuts the port and so is recorded as drop. (Recalled, not confirmed.)
- MTU: `mtu` is the IP MTU; an interface without one has EOS's routed-port default, 1500.

What EOS cannot express, and `render_eos` leaves out: buffer pools, buffer profiles and PG
assignments (EOS has no config_db buffer model: a fabric description gives an EOS device's
PFC threshold and headroom as platform figures, see `rocelab.fabric.spec`); TC → PG maps;
MAP_PFC_PRIORITY_TO_QUEUE; pfcwd_sw_enable (EOS guards every PFC priority); WRED that only
drops (wred_green_enable) or marks some colours; the WRR/DWRR distinction (both render as
weighted round robin); map names. `parse_eos(render_eos(p)) == p` for every profile that
`parse_eos` returns.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Literal, Mapping, Sequence

from rocelab.errors import InputError, Problem, Problems
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

EOS_SEGMENT_BYTES = 208
EOS_DEFAULT_MTU_BYTES = 1500
EOS_DEFAULT_DSCP_TO_TC = tuple(1 if d < 8 else 0 if d < 16 else d // 8 for d in range(DSCP_VALUES))
UNTRUSTED_TC = 1  # EOS's default TC for CoS 0: untagged traffic on a port not trusting DSCP
DEFAULT_MARK_PROBABILITY_PCT = 100
_IDENTITY = tuple(range(PRIORITIES))  # EOS has TCs 0–7; PortQos leaves 8–15 at SONiC's default
_UNITS = {"bytes": 1, "kbytes": 1024, "mbytes": 1024 * 1024}
_THRESHOLD_MAX = 256_000_000  # EOS's largest ECN threshold value
_ACTIONS = {"drop": "drop", "no-drop": "forward"}
_EOS_PORT = re.compile(r"^Ethernet([1-9]\d*)$")
_QUEUE_KEYWORDS = ("tx-queue", "uc-tx-queue")
_PFC_FORMS = ("priority-flow-control on", "priority-flow-control priority P no-drop|drop",
              "priority-flow-control pause watchdog [port action drop|no-drop | port timer "
              "timeout S polling-interval S recovery-time S]")


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


@dataclass(frozen=True)
class EosConfig:
    """What a running-config says, with the line each value came from.

    `lines` keys: ("dscp", d), ("tc-queue", tc); per SONiC port name: ("interface", port),
    ("mtu", port), ("trust", port), ("pfc", port) (on/off), ("pfc", port, priority)
    (no-drop), ("watchdog", port), ("scheduler", port, queue), ("ecn", port, queue).
    """

    profile: QosProfile
    mtu_bytes: Mapping[str, int]  # SONiC port name → `mtu` of interfaces that set one
    default_port: PortQos  # what an Ethernet interface the file does not list gets
    lines: Mapping[tuple[object, ...], int]

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


@dataclass
class _Queue:
    strict: bool | None = None
    weight: int | None = None
    ecn: tuple[int, int, int] | None = None  # Kmin bytes, Kmax bytes, max-mark-probability
    scheduler_line: int | None = None
    ecn_line: int | None = None

    def merged_over(self, base: _Queue) -> _Queue:
        pick = _Queue(base.strict, base.weight, base.ecn, base.scheduler_line, base.ecn_line)
        if self.strict is not None or self.weight is not None:
            pick.strict, pick.weight = self.strict, self.weight
            pick.scheduler_line = self.scheduler_line
        if self.ecn is not None:
            pick.ecn, pick.ecn_line = self.ecn, self.ecn_line
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

    def wred(self) -> WredProfile | None:
        if self.ecn is None:
            return None
        kmin, kmax, probability = self.ecn
        return WredProfile(name=f"eos_ecn_{kmin}_{kmax}_{probability}", wred_green_enable=False,
                           ecn="ecn_all", green_min_threshold_bytes=kmin,
                           green_max_threshold_bytes=kmax,
                           green_drop_probability_pct=probability)


@dataclass
class _Settings:
    pfc_on: bool | None = None
    no_drop: dict[int, bool] = field(default_factory=dict)
    trust: Literal["dscp", "cos", "none"] | None = None
    watchdog: bool | None = None
    action: str | None = None
    timeout_ms: int | None = None
    recovery_ms: int | None = None
    queues: dict[int, _Queue] = field(default_factory=dict)
    lines: dict[tuple[object, ...], int] = field(default_factory=dict)

    def merged_over(self, base: _Settings) -> _Settings:
        """These settings where they say something, `base` (a qos profile) elsewhere."""
        out = _Settings(no_drop={**base.no_drop, **self.no_drop},
                        lines={**base.lines, **self.lines})
        for name in ("pfc_on", "trust", "watchdog", "action", "timeout_ms", "recovery_ms"):
            mine = getattr(self, name)
            setattr(out, name, getattr(base, name) if mine is None else mine)
        for q in sorted(set(base.queues) | set(self.queues)):
            out.queues[q] = self.queues.get(q, _Queue()).merged_over(base.queues.get(q, _Queue()))
        return out


@dataclass
class _Global:
    dscp_to_tc: list[int] = field(default_factory=lambda: list(EOS_DEFAULT_DSCP_TO_TC))
    tc_to_queue: list[int] = field(default_factory=lambda: list(_IDENTITY))
    pfc_all_off: bool = False
    timeout_ms: int | None = None
    recovery_ms: int | None = None
    action: str | None = None
    watchdog_line: int | None = None
    lines: dict[tuple[object, ...], int] = field(default_factory=dict)


@dataclass
class _Interface:
    name: str
    line: int
    settings: _Settings
    mtu: int | None = None
    service_profile: tuple[str, int] | None = None  # name, line


class _Parser:
    def __init__(self, source: str, segment_bytes: int):
        self.problems = Problems(source)
        self.segment_bytes = segment_bytes
        self.glob = _Global()
        self.profiles: dict[str, _Settings] = {}
        self.interfaces: list[_Interface] = []

    def problem(self, statement: _Statement, message: str, hint: str = "") -> None:
        self.problems.add(f"line {statement.line}", f"`{statement.text}`: {message}", hint)

    # --- values

    def integer(self, statement: _Statement, text: str, lo: int, hi: int, what: str) -> int | None:
        if text.isdigit() and lo <= int(text) <= hi:
            return int(text)
        self.problem(statement, f"{text!r} is not {what} (expected a whole number from {lo} "
                                f"to {hi})")
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

    def threshold(self, statement: _Statement, value: str, unit: str) -> int | None:
        if unit == "segments":
            scale = self.segment_bytes
        elif unit in _UNITS:
            scale = _UNITS[unit]
        else:
            hint = ("latency-based ECN has no byte threshold to compare with PFC's"
                    if unit == "milliseconds" else "")
            self.problem(statement, f"{unit!r} is not a threshold unit rocelab reads (expected "
                                    "bytes, kbytes, mbytes or segments)", hint)
            return None
        number = self.integer(statement, value, 1, _THRESHOLD_MAX, "a threshold")
        return None if number is None else number * scale

    def action(self, statement: _Statement, word: str) -> str | None:
        if word in _ACTIONS:
            return _ACTIONS[word]
        self.problem(statement, f"{word!r} is not a PFC watchdog action (expected drop or "
                                "no-drop)")
        return None

    # --- statements

    def run(self, roots: list[_Statement]) -> None:
        for s in roots:
            match s.words:
                case ("qos", "map", "dscp", *rest):
                    self.dscp_map(s, rest)
                case ("qos", "map", "traffic-class", *rest) if "tx-queue" in rest:
                    self.queue_map(s, rest)
                case ("qos", "profile", name):
                    self.profiles[name] = self.block(s, interface=None)
                case ("interface", name) if _EOS_PORT.match(name):
                    interface = _Interface(name, s.line, _Settings())
                    interface.settings = self.block(s, interface)
                    self.interfaces.append(interface)
                case ("priority-flow-control", *rest):
                    self.global_pfc(s, rest)

    def dscp_map(self, s: _Statement, rest: list[str]) -> None:
        if len(rest) < 3 or rest[-3:-1] != ["to", "traffic-class"]:
            self.problem(s, "expected `qos map dscp D... to traffic-class T`")
            return
        tc = self.integer(s, rest[-1], 0, PRIORITIES - 1, "a traffic class")
        for word in rest[:-3]:
            dscp = self.integer(s, word, 0, DSCP_VALUES - 1, "a DSCP value")
            if dscp is not None and tc is not None:
                self.glob.dscp_to_tc[dscp] = tc
                self.glob.lines[("dscp", dscp)] = s.line

    def queue_map(self, s: _Statement, rest: list[str]) -> None:
        if len(rest) < 3 or rest[-3:-1] != ["to", "tx-queue"]:
            self.problem(s, "expected `qos map traffic-class T... to tx-queue Q`")
            return
        queue = self.integer(s, rest[-1], 0, PRIORITIES - 1, "a tx-queue")
        for word in rest[:-3]:
            tc = self.integer(s, word, 0, PRIORITIES - 1, "a traffic class")
            if tc is not None and queue is not None:
                self.glob.tc_to_queue[tc] = queue
                self.glob.lines[("tc-queue", tc)] = s.line

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
                    interface.mtu = self.integer(s, value, 68, 65535, "an MTU in bytes")
                    out.lines[("mtu",)] = s.line
                case ("service-profile", name) if interface:
                    interface.service_profile = (name, s.line)
                case ("qos", "trust", mode):
                    if mode in ("dscp", "cos"):
                        out.trust = mode
                        out.lines[("trust",)] = s.line
                    else:
                        self.problem(s, f"{mode!r} is not a trust mode (expected dscp or cos)")
                case ("no", "qos", "trust"):
                    out.trust = "none"
                    out.lines[("trust",)] = s.line
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
        return out

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
                case ("random-detect", "ecn", "minimum-threshold", *rest):
                    q.ecn, q.ecn_line = self.ecn(s, rest), s.line
        return q

    def ecn(self, s: _Statement, rest: list[str]) -> tuple[int, int, int] | None:
        form = ("expected `random-detect ecn minimum-threshold X UNIT maximum-threshold Y UNIT "
                "[max-mark-probability P] [weight W]`")
        if len(rest) < 5 or rest[2] != "maximum-threshold" or len(rest) % 2 == 0:
            self.problem(s, form)
            return None
        kmin = self.threshold(s, rest[0], rest[1])
        if kmin is None:
            return None  # one problem per statement: Kmax is usually written like Kmin
        kmax = self.threshold(s, rest[3], rest[4])
        options = dict(zip(rest[5::2], rest[6::2]))
        if set(options) - {"max-mark-probability", "weight"}:
            self.problem(s, form)
            return None
        probability = DEFAULT_MARK_PROBABILITY_PCT
        if "max-mark-probability" in options:
            probability = self.integer(s, options["max-mark-probability"], 1, 100,
                                       "a mark probability in percent")
        if "weight" in options:
            self.integer(s, options["weight"], 0, 15, "a queue-averaging weight")
        if kmax is not None and kmax < kmin:
            self.problem(s, f"maximum-threshold ({kmax:,} B) is below minimum-threshold "
                            f"({kmin:,} B)")
            return None
        if kmax is None or probability is None:
            return None
        return kmin, kmax, probability

    # --- the resolved profile

    def port(self, port: str, settings: _Settings) -> PortQos:
        g = self.glob
        trusted = settings.trust in (None, "dscp")
        pfc_enable = frozenset()
        if settings.pfc_on and not g.pfc_all_off:
            pfc_enable = frozenset(p for p, no_drop in settings.no_drop.items() if no_drop)
        queues = {}
        for q, queue in sorted(settings.queues.items()):
            scheduler, wred = queue.scheduler(), queue.wred()
            if scheduler or wred:
                queues[q] = QueueQos(scheduler=scheduler, wred=wred)
        watchdog = None
        timeout_ms = g.timeout_ms if settings.timeout_ms is None else settings.timeout_ms
        if pfc_enable and settings.watchdog is not False and timeout_ms:
            recovery_ms = settings.recovery_ms if settings.recovery_ms is not None \
                else g.recovery_ms
            watchdog = PfcWatchdog(action=settings.action or g.action or "drop",
                                   detection_time_ms=timeout_ms,
                                   restoration_time_ms=recovery_ms or 0)
        return PortQos(port=port,
                       dscp_to_tc=tuple(g.dscp_to_tc) if trusted else (UNTRUSTED_TC,) * DSCP_VALUES,
                       tc_to_queue=tuple(g.tc_to_queue),
                       tc_to_pg=_IDENTITY,
                       pfc_priority_to_queue=tuple(g.tc_to_queue),
                       pfc_enable=pfc_enable,
                       queues=queues,
                       pfc_wd=watchdog)

    def config(self, source: str) -> EosConfig:
        lines: dict[tuple[object, ...], int] = dict(self.glob.lines)
        ports, mtus = {}, {}
        for interface in self.interfaces:
            port = lab_to_sonic(eos_to_lab(interface.name))
            settings = interface.settings
            if interface.service_profile:
                name, line = interface.service_profile
                if name in self.profiles:
                    settings = settings.merged_over(self.profiles[name])
                else:
                    self.problems.add(f"line {line}", f"`service-profile {name}` names no qos "
                                      "profile (expected one of: "
                                      f"{', '.join(sorted(self.profiles)) or 'none defined'})")
            ports[port] = self.port(port, settings)
            if interface.mtu is not None:
                mtus[port] = interface.mtu
            lines[("interface", port)] = interface.line
            for key, line in settings.lines.items():
                lines[(key[0], port, *key[1:])] = line
            if ("watchdog", port) not in lines and self.glob.watchdog_line:
                lines[("watchdog", port)] = self.glob.watchdog_line
            for q, queue in settings.queues.items():
                for kind, line in (("scheduler", queue.scheduler_line), ("ecn", queue.ecn_line)):
                    if line is not None:
                        lines[(kind, port, q)] = line
        self.problems.raise_if_any()
        return EosConfig(profile=QosProfile(source=source, pools={}, ports=ports),
                         mtu_bytes=mtus, default_port=self.port("", _Settings()), lines=lines)


def parse_eos_config(text: str, source: str, *, segment_bytes: int = EOS_SEGMENT_BYTES
                     ) -> EosConfig:
    """The QoS statements of a running-config and where each came from. Raises InputError
    naming `source` and the line of every malformed statement."""
    parser = _Parser(source, segment_bytes)
    parser.run(_statements(text))
    return parser.config(source)


def parse_eos(text: str, source: str, *, segment_bytes: int = EOS_SEGMENT_BYTES) -> QosProfile:
    """The QoS profile a running-config describes (module docstring). Raises InputError."""
    return parse_eos_config(text, source, segment_bytes=segment_bytes).profile


def load_eos(path: str | os.PathLike[str], *, segment_bytes: int = EOS_SEGMENT_BYTES
             ) -> EosConfig:
    """Read a running-config file. Raises InputError naming the file."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError([Problem(source, "", f"cannot read the file: {e.strerror}")]) from e
    except UnicodeDecodeError as e:
        raise InputError([Problem(source, "", f"is not UTF-8 text: {e.reason} at byte "
                                              f"{e.start}")]) from e
    return parse_eos_config(text, source, segment_bytes=segment_bytes)


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
            out.append("   qos trust cos")
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
