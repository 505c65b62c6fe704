"""Reading an EOS running-config: its lines as a tree of statements, and the QoS statements
among them (rocelab.qos.eos lists them) into settings as written: the switch's maps and
defaults, each qos profile's and interface's settings, class-maps and policy-maps. Nothing
here knows a port's speed or the platform; rocelab.qos.eos.resolve turns the settings into a
QosProfile."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Literal, Sequence

from rocelab.errors import Problems
from rocelab.qos.dscp import DSCP_EXPECTED, dscp_value
from rocelab.qos.eos.names import _EOS_ETHERNET, _PORT_CHANNEL
from rocelab.qos.model import DSCP_VALUES, PRIORITIES, Scheduler

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
            "policy", "mtu", "l2_mtu", "speed_bps", "routed", "shape_bps", "admin_up")


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
    admin_up: bool | None = None  # `shutdown` / `no shutdown`
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


class _Reader:
    """The statements of a running-config read into the switch's and each interface's and
    qos profile's settings, as written: malformed ones are problems, unread ones warnings."""

    def __init__(self, source: str):
        self.source = source
        self.problems = Problems(source)
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
                case ("shutdown",) if interface:
                    out.admin_up = False
                case ("no", "shutdown") if interface:
                    out.admin_up = True
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
