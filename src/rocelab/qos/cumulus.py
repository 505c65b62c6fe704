"""NVIDIA Cumulus Linux (NVUE) QoS ⇄ QosProfile: the QoS of a Spectrum switch as an operator
has it at hand, in any of three forms (`detect_form` tells them apart):

- `nv config show` (YAML): a `- header:` entry and a `- set:` tree, interface keys as
  ranges and lists (`swp1-18`, `eth0,swp19-22`);
- `nv config show -o commands`: flat `nv set …` lines (and `nv unset qos roce`);
- the files Cumulus Linux 5.x renders: a directory holding
  `/etc/cumulus/datapath/qos/qos_features.conf` and `/etc/mlx/datapath/qos/qos_infra.conf`
  (`key = value` lines), or one of those files.

The two NVUE forms become one list of statements (words after `nv set`, each with where it
was said) and are read alike; the rendered files are read key by key into the same settings.
docs/plugin-cumulus.md lists every statement: read, derived, warned or ignored.

`nv set qos roce` expands to what NVIDIA's Cumulus Linux 5.14 RoCE page documents (ROCE_DOCS,
"Default RoCE Configuration" and the `nv show qos roce` output there): trust pcp,dscp; DSCP
groups of eight → switch priority (24–31 → 3, 48–55 → 6); switch priority 3 → traffic class
3 DWRR 50 %, 6 → 6 strict, every other → 0 DWRR 50 %; ECN on traffic classes 0 and 3 from
150,000 to 1,500,000 bytes at probability 100; in lossless mode PFC on switch priority 3 (tx
and rx) with a 100 m cable length. Explicit `nv set qos …` statements override it field by
field, as NVUE applies them over the profile; a `switch-priority` list of a PFC profile
replaces the RoCE one (NVIDIA's own example moves RoCE from 3 to 2 that way).

How Cumulus maps onto the profile (PortQos per swp port, keyed by SONiC port name):

- Ports: `swpN` is rocelab's `ethN`; a file with breakout names (`swp1s0`) numbers its swp
  ports in their natural order instead. Other interfaces (eth0, lo, bonds) are not lab ports.
- The profile's TC is Cumulus's switch priority, its queue Cumulus's traffic class (egress
  queue): DSCP → switch priority (`qos mapping`) is dscp_to_tc, switch priority → traffic
  class (`egress-queue-mapping`) is tc_to_queue; a PFC switch priority P pauses P's traffic
  class, and P's ingress priority group is PG P (every other switch priority: PG 0).
- Trust: l3 and both classify IP packets by DSCP; l2 classifies a tagged frame by its PCP
  (dot1p_to_tc) and an untagged packet by `port-default-sp`; port gives every packet that.
- ECN (`congestion-control`): a WRED profile marking every colour (ecn_all) from min to max
  threshold at `probability`; `red enable` adds early drops (wred_green_enable).
- Egress scheduler: strict → STRICT, dwrr with bw-percent W → DWRR weight W (the rendered
  `bw_percent = 0` is strict); a DWRR class with no bandwidth has no scheduler.
- PFC watchdog: on the ports `interface … qos pfc-watchdog` names; detection is the polling
  interval (100 ms) × robustness (3), restoration one polling interval, action drop.
- MTU: `interface … link mtu`, else Cumulus Linux 5.x's 9216 for swp ports.

What Cumulus leaves to the ASIC, and this reader so leaves to the fabric description: the
PFC headroom and shared thresholds Cumulus derives from the cable length and port speed,
and the pool sizes (memory percentages of the Spectrum ASIC's buffer). A fabric description
gives a Cumulus device's platform `buffer:` figures as for EOS; `port-buffer`,
`xoff-threshold` and `xon-threshold` where the file sets them are read (CumulusConfig.pfc_sizes).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

import yaml

from rocelab.errors import InputError, Problem, Problems, read_text
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
from rocelab.qos.ports import lab_to_sonic

CUMULUS_RELEASE = "5.14"
ROCE_DOCS = ("https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-514/"
             "Layer-1-and-Switch-Ports/Quality-of-Service/RDMA-over-Converged-Ethernet-RoCE/")
QOS_DOCS = ("https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-514/"
            "Layer-1-and-Switch-Ports/Quality-of-Service/")
GLOBAL = "default-global"  # NVUE's profile for every port no other profile names

Form = Literal["nv config show", "nv config show -o commands", "qos_features.conf"]
Trust = Literal["l2", "l3", "both", "port"]

# --- Cumulus Linux 5.14's defaults (QOS_DOCS) where no statement says otherwise
DEFAULT_TRUST: Trust = "l2"  # qos_features.conf's packet_priority_source_set [802.1p]: recalled
DEFAULT_SCHEDULER = {tc: ("dwrr", 12 if tc % 2 == 0 else 13) for tc in range(PRIORITIES)}
DEFAULT_ECN_TCS = (0,)
DEFAULT_ECN_MIN_BYTES, DEFAULT_ECN_MAX_BYTES = 150_000, 1_500_000
DEFAULT_ECN_PROBABILITY = 100  # the docs' `nv show` examples; the ECN section does not say
DEFAULT_CABLE_M = 10
DEFAULT_MTU_BYTES = 9216  # NVUE's default `link mtu` of a swp port on 5.x: recalled
PFC_WD_POLL_MS, PFC_WD_ROBUSTNESS = 100, 3

# --- `nv set qos roce` on Cumulus Linux 5.14 (ROCE_DOCS)
ROCE_MODES = ("lossless", "lossy", "lossless-single-ipool", "lossy-multi-tc")
ROCE_TRUST: Trust = "both"  # "trust-mode pcp,dscp"
ROCE_SP_TO_TC = {3: 3, 6: 6}  # every other switch priority → traffic class 0
ROCE_SCHEDULER = {0: ("dwrr", 50), 3: ("dwrr", 50), 6: ("strict", 0)}
ROCE_ECN_TCS = (0, 3)  # `nv show qos roce`: enabled-tc 0,3 (the table names traffic class 3)
ROCE_ECN_MIN_BYTES, ROCE_ECN_MAX_BYTES, ROCE_ECN_PROBABILITY = 150_000, 1_500_000, 100
ROCE_PFC_PRIORITY = 3
ROCE_CABLE_M = 100
ROCE_LOSSLESS_POOL = "roce-lossless"

_SWP = re.compile(r"^swp([1-9]\d*)(?:s(\d+))?$")
_SWP_RANGE = re.compile(r"^swp([1-9]\d*)(?:s(\d+))?-(?:swp)?(\d+)(?:s(\d+))?$")
_NUMBER_RANGE = re.compile(r"^(\d+)-(\d+)$")
_THRESHOLD_MAX = 100_000_000  # more bytes than any Spectrum ASIC buffers
_FORMS = ("`nv config show` output (YAML with `- header:` and `- set:`)",
          "`nv config show -o commands` output (`nv set …` lines)",
          "qos_features.conf / qos_infra.conf (`key = value` lines), or a directory holding them")
_FEATURES, _INFRA = "qos_features.conf", "qos_infra.conf"


# ---------------------------------------------------------------- settings, as NVUE holds them


@dataclass
class _Said:
    """A value and where it was said (or which default gave it)."""

    value: Any
    where: str


@dataclass
class _Mapping:
    trust: _Said | None = None
    dscp: dict[int, _Said] = field(default_factory=dict)
    pcp: dict[int, _Said] = field(default_factory=dict)
    port_default_sp: _Said | None = None


@dataclass
class _Ecn:
    ecn: _Said | None = None
    red: _Said | None = None
    min_bytes: _Said | None = None
    max_bytes: _Said | None = None
    probability: _Said | None = None


@dataclass
class _Pfc:
    priorities: _Said | None = None  # frozenset of switch priorities
    tx: _Said | None = None
    rx: _Said | None = None
    cable_m: _Said | None = None
    port_buffer: _Said | None = None
    xoff: _Said | None = None
    xon: _Said | None = None


@dataclass
class _Settings:
    roce: _Said | None = None  # the mode; None: `qos roce` is not set
    mapping: dict[str, _Mapping] = field(default_factory=dict)
    sp_to_tc: dict[int, _Said] = field(default_factory=dict)
    scheduler: dict[str, dict[int, dict[str, _Said]]] = field(default_factory=dict)
    pfc: dict[str, _Pfc] = field(default_factory=dict)
    ecn: dict[str, dict[int, _Ecn]] = field(default_factory=dict)
    pools: dict[str, dict[str, _Said]] = field(default_factory=dict)
    watchdog_poll_ms: _Said | None = None
    watchdog_robustness: _Said | None = None
    # swp port → feature (mapping, egress-scheduler, pfc, congestion-control) → profile name
    profiles: dict[str, dict[str, _Said]] = field(default_factory=dict)
    watchdog: dict[str, _Said] = field(default_factory=dict)  # swp port → on/off
    mtu: dict[str, _Said] = field(default_factory=dict)
    ports: dict[str, None] = field(default_factory=dict)  # every swp port named, in order


# ---------------------------------------------------------------- the result


@dataclass(frozen=True)
class PfcSizes:
    """A PFC profile's buffer figures where the file gives them (bytes; None: derived by the
    switch): `port_buffer` reserved for the PG, XOFF after `xoff` of it, XON `xon` below that."""

    port_buffer_bytes: int | None
    xoff_bytes: int | None
    xon_bytes: int | None
    where: str


@dataclass(frozen=True)
class CumulusConfig:
    """What a Cumulus config says, with where each value came from.

    `where` keys, per SONiC port name ("" for a port the file does not list): ("dscp", port,
    d) the switch priority of DSCP d, ("pcp", port, p), ("trust", port), ("sp-tc", port, sp),
    ("pfc", port), ("pfc-buffer", port), ("cable", port), ("ecn", port, tc), ("scheduler",
    port, tc), ("watchdog", port), ("mtu", port).
    """

    profile: QosProfile
    form: Form
    mtu_bytes: Mapping[str, int]  # SONiC port name → MTU the file sets
    default_port: PortQos  # what a swp port the file does not list gets
    where: Mapping[tuple[object, ...], str]
    cumulus_names: Mapping[str, str] = field(default_factory=dict)  # SONiC name → swpN
    # SONiC name → PFC cable length of a port with PFC ("": of a port the file does not list)
    cable_m: Mapping[str, int] = field(default_factory=dict)
    pfc_sizes: Mapping[str, PfcSizes] = field(default_factory=dict)  # SONiC name → given sizes
    roce_mode: str | None = None
    warnings: tuple[str, ...] = ()

    def at(self, *key: object) -> str | None:
        """Where a value of a port came from; a port the file does not list: the default's."""
        if key in self.where:
            return self.where[key]
        return self.where.get((key[0], "", *key[2:])) if len(key) > 1 else None


# ---------------------------------------------------------------- names and lists


def _swp_key(name: str) -> tuple[int, int]:
    m = _SWP.match(name)
    return int(m.group(1)), int(m.group(2) or -1)


def cumulus_lab_names(names: Iterable[str]) -> dict[str, str]:
    """swp port names → rocelab's: `swpN` is ethN; with breakouts (`swp1s0`), the Nth swp port
    in natural order is ethN."""
    names = sorted(set(names), key=_swp_key)
    if all(_SWP.match(n).group(2) is None for n in names):
        return {n: f"eth{n[3:]}" for n in names}
    return {n: f"eth{i}" for i, n in enumerate(names, 1)}


def lab_to_cumulus(name: str) -> str:
    """rocelab `eth1` → Cumulus `swp1`."""
    lab_to_sonic(name)  # raises ValueError for anything but eth1, eth2, …
    return f"swp{name[3:]}"


def interface_list(text: str) -> tuple[list[str], list[str]]:
    """An NVUE interface key (`swp1-4,swp6`, `eth0,swp19-22`, `swp1s0-3`; the rendered files'
    `swp1-swp4` and `[swp1,swp3]`) → (swp ports, other interfaces). ValueError if malformed."""
    swps, others = [], []
    for item in text.strip().strip("[]").split(","):
        item = item.strip()
        if not item:
            continue
        if m := _SWP_RANGE.match(item):
            port, sub, end_a, end_b = m.groups()
            if sub is not None:  # swp1s0-3 or swp1s0-swp1s3: sub-ports of one port
                last = int(end_b if end_b is not None else end_a)
                if end_b is not None and int(end_a) != int(port):
                    raise ValueError(f"{item!r} spans breakouts of two ports")
                swps += [f"swp{port}s{s}" for s in _span(int(sub), last, item)]
            else:
                if end_b is not None:
                    raise ValueError(f"{item!r} mixes a port and a breakout")
                swps += [f"swp{n}" for n in _span(int(port), int(end_a), item)]
        elif _SWP.match(item):
            swps.append(item)
        elif item == "allports" or item.startswith("swp"):
            raise ValueError(f"{item!r} is not a swp port or range")
        else:
            others.append(item)
    return swps, others


def _span(first: int, last: int, item: str) -> range:
    if last < first:
        raise ValueError(f"{item!r} runs backwards")
    return range(first, last + 1)


def number_list(text: str, hi: int) -> list[int]:
    """`4,5,7`, `0-3,5-7`, `[0, 1, 2]` → numbers from 0 to hi. ValueError if malformed."""
    out = []
    for item in str(text).strip().strip("[]").split(","):
        item = item.strip()
        if not item:
            continue
        m = _NUMBER_RANGE.match(item)
        first, last = (int(m.group(1)), int(m.group(2))) if m else (None, None)
        if m is None:
            if not item.isdigit():
                raise ValueError(f"{item!r} is not a number")
            first = last = int(item)
        if first > last or last > hi:
            raise ValueError(f"{item!r} is not within 0–{hi}")
        out += range(first, last + 1)
    return out


def dscp_list(text: str) -> list[int]:
    """DSCP values by number, range or name (`24-31,46`, `af31,cs6`). ValueError if malformed."""
    out = []
    for item in str(text).strip().strip("[]").split(","):
        item = item.strip()
        if not item:
            continue
        value = dscp_value(item)
        if value is not None:
            out.append(value)
        elif _NUMBER_RANGE.match(item):
            out += number_list(item, DSCP_VALUES - 1)
        else:
            raise ValueError(f"{item!r} is not a DSCP value")
    return out


# ---------------------------------------------------------------- the forms


@dataclass(frozen=True)
class _Statement:
    words: tuple[str, ...]  # after `nv set`
    where: str  # "line 4" or "set.qos.roce.mode (line 9)"
    text: str  # as the user wrote it, for messages
    unset: bool = False


def detect_form(text: str) -> Form | None:
    """Which of the three forms a file's text is; None: none of them."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("#")]
    if not lines:
        return None
    if all(re.match(r"^nv\s+(set|unset|config)\b", line) for line in lines):
        return "nv config show -o commands"
    if re.match(r"^-\s+(header|set):", lines[0]):
        return "nv config show"
    if all("=" in line for line in lines):
        return "qos_features.conf"
    return None


def yaml_statements(text: str, source: str) -> list[_Statement]:
    """`nv config show` YAML → statements: every leaf of the `set:` tree, its path as words."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InputError([Problem(source, f"line {mark.line + 1}" if mark else "",
                                  f"is not valid YAML: {getattr(e, 'problem', None) or e}")]) from None
    if not isinstance(root, yaml.SequenceNode):
        raise InputError([Problem(source, "", "is not `nv config show` output",
                                  "expected a list with `- header:` and `- set:` entries")])
    out: list[_Statement] = []

    def walk(node: yaml.Node, path: list[str]) -> None:
        if isinstance(node, yaml.MappingNode) and node.value:
            for key, value in node.value:
                walk(value, [*path, str(key.value)])
            return
        words = list(path)
        line = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode) and not node.tag.endswith(":null"):
            # YAML 1.1 reads NVUE's `on`/`off` as booleans: keep NVUE's word
            words.append(("on" if node.value.lower() in ("on", "true", "yes") else "off")
                         if node.tag.endswith(":bool") else node.value)
        out.append(_Statement(tuple(words), f"set.{'.'.join(path)} (line {line})",
                              " ".join(words)))

    for entry in root.value:
        if not isinstance(entry, yaml.MappingNode):
            continue
        for key, value in entry.value:
            if key.value == "set":
                walk(value, [])
    return out


def command_statements(text: str) -> list[_Statement]:
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if len(words) >= 2 and words[0] == "nv" and words[1] in ("set", "unset"):
            out.append(_Statement(tuple(words[2:]), f"line {number}", " ".join(words),
                                  words[1] == "unset"))
    return out


# ---------------------------------------------------------------- reading statements


class _Reader:
    def __init__(self, source: str):
        self.source = source
        self.problems = Problems(source)
        self.warnings: dict[str, None] = {}
        self.s = _Settings()

    # --- helpers

    def bad(self, where: str, text: str, message: str, hint: str = "") -> None:
        # self.source, not the Problems' file: a rendered pair of files shares one reader
        self.problems.items.append(Problem(self.source, where, f"`{text}`: {message}", hint))

    def warn(self, where: str, text: str, why: str) -> None:
        self.warnings[f"{self.source}: {where}: `{text}`: {why}"] = None

    def said(self, st: _Statement, value: Any) -> _Said:
        return _Said(value, f"{self.source}: {st.where}: `{st.text}`")

    def number(self, st: _Statement, word: str, lo: int, hi: int, what: str) -> int | None:
        if word.isdigit() and lo <= int(word) <= hi:
            return int(word)
        self.bad(st.where, st.text, f"{word!r} is not {what} (expected a whole number from {lo} to {hi})")
        return None

    def flag(self, st: _Statement, word: str) -> bool | None:
        value = {"enable": True, "enabled": True, "on": True, "true": True,
                 "disable": False, "disabled": False, "off": False, "false": False}.get(word.lower())
        if value is None:
            self.bad(st.where, st.text, f"{word!r} is not a state (expected enable or disable)")
        return value

    def numbers(self, st: _Statement, word: str, hi: int, what: str) -> list[int]:
        try:
            return number_list(word, hi)
        except ValueError as e:
            self.bad(st.where, st.text, f"{e} (expected {what}: numbers from 0 to {hi}, ranges "
                                        "like 0-3, separated by commas)")
            return []

    # --- statements

    def run(self, statements: list[_Statement]) -> None:
        for st in statements:
            if st.unset:
                self.unset(st)
            elif st.words[:1] == ("qos",):
                self.qos(st, list(st.words[1:]))
            elif st.words[:1] == ("interface",) and len(st.words) >= 2:
                self.interface(st, st.words[1], list(st.words[2:]))
            # everything else (router, system, vrf…) decides nothing about QoS

    def unset(self, st: _Statement) -> None:
        if st.words == ("qos", "roce"):
            self.s.roce = None
        elif st.words[:3] == ("qos", "roce", "mode") and self.s.roce is not None:
            # ROCE_DOCS: unsetting lossless-single-ipool or lossy-multi-tc goes back to lossless
            self.s.roce = self.said(st, "lossless")
        elif st.words[:1] == ("qos",) or "qos" in st.words:
            self.warn(st.where, st.text, "rocelab reads the configuration as set; this unset is "
                                         "not applied (give the configuration after it)")

    def qos(self, st: _Statement, rest: list[str]) -> None:
        kind = rest[0] if rest else ""
        handler = {"roce": self.roce, "mapping": self.mapping,
                   "egress-queue-mapping": self.queue_mapping, "egress-scheduler": self.scheduler,
                   "pfc": self.pfc, "congestion-control": self.congestion,
                   "traffic-pool": self.pool, "pfc-watchdog": self.watchdog_timers}.get(kind)
        if handler is not None:
            handler(st, rest[1:])
        elif kind in ("link-pause", "remark", "egress-shaper", "advance-buffer-config"):
            self.warn(st.where, st.text, f"`qos {kind}` is not emulated: switchd runs without it")
        else:
            self.warn(st.where, st.text, "a QoS statement rocelab does not know: ignored")

    def roce(self, st: _Statement, rest: list[str]) -> None:
        mode = self.s.roce.value if self.s.roce else "lossless"
        if rest in ([], ["enable", "on"], ["state", "enabled"]):
            pass  # on, keeping a mode set before (ROCE_DOCS: `nv set qos roce` keeps lossy)
        elif rest in (["enable", "off"], ["state", "disabled"]):
            self.s.roce = None
            return
        elif len(rest) == 2 and rest[0] == "mode":
            if rest[1] not in ROCE_MODES:
                self.bad(st.where, st.text, f"{rest[1]!r} is not a RoCE mode",
                         f"expected one of {', '.join(ROCE_MODES)}")
                return
            mode = rest[1]
        else:
            self.bad(st.where, st.text, "expected `qos roce [mode MODE]`",
                     f"modes: {', '.join(ROCE_MODES)}")
            return
        if mode in ("lossless-single-ipool", "lossy-multi-tc"):
            self.warn(st.where, st.text, {
                "lossless-single-ipool": "one ingress pool for lossy and lossless traffic is not "
                                         "emulated: read as lossless (its maps, PFC and ECN)",
                "lossy-multi-tc": "the packet-trimming profile is not emulated: rocelab applies "
                                  "no RoCE default, only the statements the file gives"}[mode])
        self.s.roce = self.said(st, mode)

    def mapping(self, st: _Statement, rest: list[str]) -> None:
        if len(rest) < 3:
            self.bad(st.where, st.text, "expected `qos mapping PROFILE trust|dscp|pcp|port-default-sp …`")
            return
        profile = self.s.mapping.setdefault(rest[0], _Mapping())
        key, args = rest[1], rest[2:]
        if key == "trust" and len(args) == 1:
            if args[0] not in ("l2", "l3", "both", "port"):
                self.bad(st.where, st.text, f"{args[0]!r} is not a trust (expected l2, l3, both or port)")
            else:
                profile.trust = self.said(st, args[0])
        elif key in ("dscp", "pcp") and len(args) == 3 and args[1] == "switch-priority":
            if key == "dscp":
                try:
                    values = dscp_list(args[0])
                except ValueError as e:
                    self.bad(st.where, st.text, f"{e} (expected DSCP values: {DSCP_EXPECTED}; "
                                                "ranges like 24-31)")
                    values = []
            else:
                values = self.numbers(st, args[0], PRIORITIES - 1, "PCP values")
            sp = self.number(st, args[2], 0, PRIORITIES - 1, "a switch priority")
            for v in values:
                if sp is not None:
                    getattr(profile, key)[v] = self.said(st, sp)
        elif key == "port-default-sp" and len(args) == 1:
            sp = self.number(st, args[0], 0, PRIORITIES - 1, "a switch priority")
            if sp is not None:
                profile.port_default_sp = self.said(st, sp)
        else:
            self.bad(st.where, st.text, "expected `qos mapping PROFILE trust l2|l3|both|port`, "
                     "`… dscp D switch-priority N`, `… pcp P switch-priority N` or `… port-default-sp N`")

    def queue_mapping(self, st: _Statement, rest: list[str]) -> None:
        if len(rest) != 5 or rest[1] != "switch-priority" or rest[3] != "traffic-class":
            self.bad(st.where, st.text, "expected `qos egress-queue-mapping default-global "
                                        "switch-priority N traffic-class T`")
            return
        if rest[0] != GLOBAL:
            self.bad(st.where, st.text, f"{rest[0]!r}: NVUE has only the {GLOBAL} egress-queue-mapping")
            return
        tc = self.number(st, rest[4], 0, PRIORITIES - 1, "a traffic class")
        for sp in self.numbers(st, rest[2], PRIORITIES - 1, "switch priorities"):
            if tc is not None:
                self.s.sp_to_tc[sp] = self.said(st, tc)

    def scheduler(self, st: _Statement, rest: list[str]) -> None:
        if len(rest) != 5 or rest[1] != "traffic-class" or rest[3] not in ("mode", "bw-percent"):
            self.bad(st.where, st.text, "expected `qos egress-scheduler PROFILE traffic-class T "
                                        "mode dwrr|strict` or `… bw-percent W`")
            return
        tcs = self.numbers(st, rest[2], PRIORITIES - 1, "traffic classes")
        if rest[3] == "mode":
            if rest[4] not in ("dwrr", "strict"):
                self.bad(st.where, st.text, f"{rest[4]!r} is not a scheduler mode (expected dwrr or strict)")
                return
            value = rest[4]
        else:
            value = self.number(st, rest[4], 1, 100, "a bandwidth percentage")
            if value is None:
                return
        for tc in tcs:
            self.s.scheduler.setdefault(rest[0], {}).setdefault(tc, {})[rest[3]] = self.said(st, value)

    def pfc(self, st: _Statement, rest: list[str]) -> None:
        if len(rest) != 3:
            self.bad(st.where, st.text, "expected `qos pfc PROFILE switch-priority N…|tx|rx|"
                                        "cable-length|port-buffer|xoff-threshold|xon-threshold VALUE`")
            return
        profile = self.s.pfc.setdefault(rest[0], _Pfc())
        key, value = rest[1], rest[2]
        if key == "switch-priority":
            sps = self.numbers(st, value, PRIORITIES - 1, "switch priorities")
            if sps:
                # A profile's switch-priority statements add up (RoCE's default fills in only
                # where none is given).
                old = profile.priorities.value if profile.priorities else frozenset()
                profile.priorities = self.said(st, old | frozenset(sps))
        elif key in ("tx", "rx"):
            on = self.flag(st, value)
            if on is not None:
                setattr(profile, key, self.said(st, on))
        elif key == "cable-length":
            metres = self.number(st, value, 1, 100_000, "a cable length in metres")
            if metres is not None:
                profile.cable_m = self.said(st, metres)
        elif key in ("port-buffer", "xoff-threshold", "xon-threshold"):
            size = self.number(st, value.removesuffix("B"), 0, _THRESHOLD_MAX, "a size in bytes")
            if size is not None:
                attr = {"port-buffer": "port_buffer", "xoff-threshold": "xoff", "xon-threshold": "xon"}[key]
                setattr(profile, attr, self.said(st, size))
        else:
            self.bad(st.where, st.text, f"{key!r} is not a PFC setting", "expected switch-priority, "
                     "tx, rx, cable-length, port-buffer, xoff-threshold or xon-threshold")

    def congestion(self, st: _Statement, rest: list[str]) -> None:
        if len(rest) != 5 or rest[1] != "traffic-class":
            self.bad(st.where, st.text, "expected `qos congestion-control PROFILE traffic-class T "
                                        "ecn|red enable|disable`, or `… min-threshold|max-threshold|"
                                        "probability N`")
            return
        tcs = self.numbers(st, rest[2], PRIORITIES - 1, "traffic classes")
        key, word = rest[3], rest[4]
        value: Any
        if key in ("ecn", "red"):
            value = self.flag(st, word)
        elif key in ("min-threshold", "max-threshold"):
            value = self.number(st, word.removesuffix("B"), 1, _THRESHOLD_MAX, "a threshold in bytes")
        elif key == "probability":
            value = self.number(st, word, 0, 100, "a probability in percent")
        else:
            self.bad(st.where, st.text, f"{key!r} is not an ECN setting",
                     "expected ecn, red, min-threshold, max-threshold or probability")
            return
        if value is None:
            return
        attr = {"min-threshold": "min_bytes", "max-threshold": "max_bytes"}.get(key, key)
        for tc in tcs:
            setattr(self.s.ecn.setdefault(rest[0], {}).setdefault(tc, _Ecn()), attr, self.said(st, value))

    def pool(self, st: _Statement, rest: list[str]) -> None:
        if len(rest) != 3 or rest[1] not in ("memory-percent", "switch-priority"):
            self.bad(st.where, st.text, "expected `qos traffic-pool POOL memory-percent N` or "
                                        "`… switch-priority N…`")
            return
        if rest[1] == "memory-percent":
            value: Any = self.number(st, rest[2], 0, 100, "a percentage")
        else:
            value = frozenset(self.numbers(st, rest[2], PRIORITIES - 1, "switch priorities"))
        if value is not None:
            self.s.pools.setdefault(rest[0], {})[rest[1]] = self.said(st, value)

    def watchdog_timers(self, st: _Statement, rest: list[str]) -> None:
        if len(rest) == 2 and rest[0] == "polling-interval":
            ms = self.number(st, rest[1], 1, 60_000, "a polling interval in milliseconds")
            if ms is not None:
                self.s.watchdog_poll_ms = self.said(st, ms)
        elif len(rest) == 2 and rest[0] == "robustness":
            n = self.number(st, rest[1], 1, 1000, "a number of polling intervals")
            if n is not None:
                self.s.watchdog_robustness = self.said(st, n)
        else:
            self.bad(st.where, st.text, "expected `qos pfc-watchdog polling-interval MS` or "
                                        "`… robustness N`")

    def interface(self, st: _Statement, key: str, rest: list[str]) -> None:
        try:
            swps, others = interface_list(key)
        except ValueError as e:
            self.bad(st.where, st.text, f"{e} (expected interfaces like swp1, swp1-4,swp6 or "
                                        "swp1s0-3)")
            return
        for port in swps:
            self.s.ports.setdefault(port)
        qos = rest[:1] == ["qos"]
        if others and qos:
            self.warn(st.where, st.text, f"QoS on {', '.join(others)}: not a swp port, not emulated")
        if qos and len(rest) == 4 and rest[2] == "profile" and rest[1] in (
                "mapping", "egress-scheduler", "pfc", "congestion-control"):
            for port in swps:
                self.s.profiles.setdefault(port, {})[rest[1]] = self.said(st, rest[3])
        elif qos and rest[1:2] == ["pfc-watchdog"] and len(rest) in (2, 4):
            on = True if len(rest) == 2 else (self.flag(st, rest[3]) if rest[2] == "state" else None)
            if len(rest) == 4 and rest[2] != "state":
                self.bad(st.where, st.text, "expected `interface IFACE qos pfc-watchdog [state enabled|disabled]`")
            elif on is not None:
                for port in swps:
                    self.s.watchdog[port] = self.said(st, on)
        elif qos and len(rest) == 4 and rest[2] == "profile" and rest[1] in ("link-pause", "remark",
                                                                              "egress-shaper"):
            self.warn(st.where, st.text, f"`qos {rest[1]}` is not emulated: switchd runs without it")
        elif qos:
            self.warn(st.where, st.text, "an interface QoS statement rocelab does not know: ignored")
        elif rest[:2] == ["link", "mtu"] and len(rest) == 3:
            mtu = self.number(st, rest[2], 552, 9216, "an MTU in bytes")
            if mtu is not None:
                for port in swps:
                    self.s.mtu[port] = self.said(st, mtu)
        # anything else about an interface (type, ip address, link state…) is not QoS


# ---------------------------------------------------------------- the rendered files


class _Rendered:
    """qos_features.conf and qos_infra.conf `key = value` lines into the same settings."""

    def __init__(self, reader: _Reader):
        self.r = reader
        self.groups: dict[str, list[str]] = {}  # feature → its port_group_list
        self.lines: list[tuple[str, int, str, str]] = []
        self.ecn_groups: dict[str, tuple[list[int], _Ecn]] = {}

    def add(self, file: str, text: str) -> None:
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if "=" not in line:
                self.r.problems.items.append(Problem(file, f"line {number}", f"`{line}`: expected "
                                                     "`key = value`"))
                continue
            key, value = (part.strip() for part in line.split("=", 1))
            self.lines.append((file, number, key, value))

    def run(self) -> None:
        for file, number, key, value in self.lines:  # group lists first: keys name their groups
            if key.endswith(".port_group_list") and key.count(".") == 1:
                self.groups[key.split(".")[0]] = [g.strip() for g in value.strip("[]").split(",") if g.strip()]
        for file, number, key, value in self.lines:
            st = _Statement((key, value), f"line {number}", f"{key} = {value}")
            saved = self.r.source
            self.r.source = file  # every message names the file the key is in
            try:
                self.key(st, key.split("."), value)
            finally:
                self.r.source = saved

    def key(self, st: _Statement, k: list[str], value: str) -> None:
        r, s = self.r, self.r.s
        if k == ["traffic", "packet_priority_source_set"]:
            self.trust(st, s.mapping.setdefault(GLOBAL, _Mapping()), value)
        elif k == ["traffic", "port_default_priority"]:
            self.default_sp(st, s.mapping.setdefault(GLOBAL, _Mapping()), value)
        elif len(k) == 4 and k[0] == "traffic" and k[2] == "priority_source":
            self.source_map(st, s.mapping.setdefault(GLOBAL, _Mapping()), k[1], k[3], value)
        elif len(k) >= 3 and k[0] == "source" and k[1] in self.groups.get("source", []):
            self.source_group(st, k[1], k[2:], value)
        elif len(k) == 3 and k[0] == "cos_egr_queue" and k[2] == "uc":
            sp = self.cos(st, k[1])
            tc = r.number(st, value, 0, PRIORITIES - 1, "an egress queue")
            if sp is not None and tc is not None:
                s.sp_to_tc[sp] = r.said(st, tc)
        elif len(k) == 3 and k[0] == "default_egress_sched" and k[2] == "bw_percent":
            self.bw(st, GLOBAL, k[1], value)
        elif len(k) >= 3 and k[0] == "egress_sched" and k[1] in self.groups.get("egress_sched", []):
            if k[2] == "port_set":
                self.port_set(st, value, "egress-scheduler", k[1])
            elif len(k) == 4 and k[3] == "bw_percent":
                self.bw(st, k[1], k[2], value)
            else:
                r.warn(st.where, st.text, "an egress scheduling key rocelab does not know: ignored")
        elif len(k) == 3 and k[0] == "pfc" and k[1] in self.groups.get("pfc", []):
            self.pfc(st, k[1], k[2], value)
        elif len(k) == 2 and k[0] == "default_ecn_red_conf":
            self.ecn(st, GLOBAL, k[1], value)
        elif len(k) == 2 and k[0] in self.groups.get("ecn_red", []):
            self.ecn(st, k[0], k[1], value)  # QOS_DOCS writes a group's keys without `ecn_red.`
        elif len(k) == 3 and k[0] == "ecn_red" and k[1] in self.groups.get("ecn_red", []):
            self.ecn(st, k[1], k[2], value)
        elif len(k) == 3 and k[0] == "pfc_watchdog" and k[2] == "port_set":
            for port in self.ports(st, value):
                s.watchdog[port] = r.said(st, True)
        elif k[0] in ("link_pause", "shaping", "remark"):
            r.warn(st.where, st.text, f"`{k[0]}` is not emulated: switchd runs without it")
        elif k[-1] == "port_group_list" and len(k) == 2:
            pass  # read above
        elif k[0] in ("ingress_service_pool", "egress_service_pool", "priority_group", "flow_control",
                      "port", "egress_buffer", "ingress_buffer") or k[0].startswith("alpha") or \
                k[:2] == ["traffic", "priority_group_list"]:
            pass  # buffer layout: the platform figures of the fabric description rule
        elif k[0] == "traffic" and any("remark" in part for part in k):
            r.warn(st.where, st.text, "egress remarking is not emulated: packets keep their DSCP and PCP")
        else:
            r.warn(st.where, st.text, "a key rocelab does not know: ignored")

    def cos(self, st: _Statement, word: str) -> int | None:
        if re.fullmatch(r"cos_[0-7]", word):
            return int(word[4:])
        self.r.bad(st.where, st.text, f"{word!r} is not a switch priority (expected cos_0 … cos_7)")
        return None

    def trust(self, st: _Statement, mapping: _Mapping, value: str) -> None:
        sources = {v.strip() for v in value.strip("[]").split(",") if v.strip()}
        trust = {frozenset({"802.1p"}): "l2", frozenset({"dscp"}): "l3", frozenset({"port"}): "port",
                 frozenset({"802.1p", "dscp"}): "both"}.get(frozenset(sources))
        if trust is None:
            self.r.bad(st.where, st.text, f"{value!r} is not a priority source",
                       "expected [802.1p], [dscp], [802.1p,dscp] or [port]")
        else:
            mapping.trust = self.r.said(st, trust)

    def default_sp(self, st: _Statement, mapping: _Mapping, value: str) -> None:
        sp = self.r.number(st, value, 0, PRIORITIES - 1, "a switch priority")
        if sp is not None:
            mapping.port_default_sp = self.r.said(st, sp)

    def source_map(self, st: _Statement, mapping: _Mapping, cos: str, kind: str, value: str) -> None:
        sp = self.cos(st, cos)
        if kind not in ("dscp", "8021p"):
            self.r.bad(st.where, st.text, f"{kind!r} is not a priority source (expected dscp or 8021p)")
            return
        try:
            values = dscp_list(value) if kind == "dscp" else number_list(value, PRIORITIES - 1)
        except ValueError as e:
            self.r.bad(st.where, st.text, f"{e} (expected a list like [24,25,26] or [0-7])")
            return
        table = mapping.dscp if kind == "dscp" else mapping.pcp
        for v in values:
            if sp is not None:
                table[v] = self.r.said(st, sp)

    def source_group(self, st: _Statement, group: str, k: list[str], value: str) -> None:
        mapping = self.r.s.mapping.setdefault(group, _Mapping())
        if k == ["packet_priority_source_set"]:
            self.trust(st, mapping, value)
        elif k == ["port_default_priority"]:
            self.default_sp(st, mapping, value)
        elif k == ["port_set"]:
            self.port_set(st, value, "mapping", group)
        elif len(k) == 3 and k[1] == "priority_source":
            self.source_map(st, mapping, k[0], k[2], value)
        else:
            self.r.warn(st.where, st.text, "a classification key rocelab does not know: ignored")

    def ports(self, st: _Statement, value: str) -> list[str]:
        if value.strip() == "allports":
            return []
        try:
            swps, _ = interface_list(value)
        except ValueError as e:
            self.r.bad(st.where, st.text, f"{e} (expected ports like swp1-swp4,swp6 or allports)")
            return []
        for port in swps:
            self.r.s.ports.setdefault(port)
        return swps

    def port_set(self, st: _Statement, value: str, feature: str, group: str) -> None:
        for port in self.ports(st, value):
            self.r.s.profiles.setdefault(port, {})[feature] = self.r.said(st, group)

    def bw(self, st: _Statement, group: str, queue: str, value: str) -> None:
        if not re.fullmatch(r"egr_queue_[0-7]", queue):
            self.r.bad(st.where, st.text, f"{queue!r} is not an egress queue (expected egr_queue_0 … 7)")
            return
        bw = self.r.number(st, value, 0, 100, "a bandwidth percentage (0: strict)")
        if bw is not None:
            entry = self.r.s.scheduler.setdefault(group, {}).setdefault(int(queue[10:]), {})
            entry["mode"] = self.r.said(st, "strict" if bw == 0 else "dwrr")
            if bw:
                entry["bw-percent"] = self.r.said(st, bw)

    def pfc(self, st: _Statement, group: str, key: str, value: str) -> None:
        r, profile = self.r, self.r.s.pfc.setdefault(group, _Pfc())
        if key == "port_set":
            if value.strip() != "allports" or group != GLOBAL:
                self.port_set(st, value, "pfc", group)
        elif key == "cos_list":
            profile.priorities = r.said(st, frozenset(r.numbers(st, value, PRIORITIES - 1, "switch priorities")))
        elif key in ("tx_enable", "rx_enable"):
            on = r.flag(st, value)
            if on is not None:
                setattr(profile, key[:2], r.said(st, on))
        elif key in ("port_buffer_bytes", "xoff_size", "xon_delta", "cable_length"):
            lo, hi, what = (1, 100_000, "a cable length in metres") if key == "cable_length" \
                else (0, _THRESHOLD_MAX, "a size in bytes")
            n = r.number(st, value, lo, hi, what)
            attr = {"port_buffer_bytes": "port_buffer", "xoff_size": "xoff", "xon_delta": "xon",
                    "cable_length": "cable_m"}[key]
            if n is not None:
                setattr(profile, attr, r.said(st, n))
        else:
            r.warn(st.where, st.text, "a PFC key rocelab does not know: ignored")

    def ecn(self, st: _Statement, group: str, key: str, value: str) -> None:
        r = self.r
        queues, settings = self.ecn_groups.setdefault(group, ([], _Ecn()))
        if key == "port_set":
            self.port_set(st, value, "congestion-control", group)
            return
        if key == "egress_queue_list":
            queues[:] = r.numbers(st, value, PRIORITIES - 1, "egress queues")
            return
        parsed: Any
        if key in ("ecn_enable", "red_enable"):
            parsed = r.flag(st, value)
        elif key in ("min_threshold_bytes", "max_threshold_bytes"):
            parsed = r.number(st, value, 1, _THRESHOLD_MAX, "a threshold in bytes")
        elif key == "probability":
            parsed = r.number(st, value, 0, 100, "a probability in percent")
        else:
            r.warn(st.where, st.text, "an ECN key rocelab does not know: ignored")
            return
        if parsed is not None:
            attr = {"ecn_enable": "ecn", "red_enable": "red", "min_threshold_bytes": "min_bytes",
                    "max_threshold_bytes": "max_bytes", "probability": "probability"}[key]
            setattr(settings, attr, r.said(st, parsed))

    def finish(self) -> None:
        """A rendered ECN group's settings hold for every queue of its list, in any line order."""
        for group, (queues, settings) in self.ecn_groups.items():
            self.r.s.ecn[group] = {tc: replace(settings) for tc in queues}


# ---------------------------------------------------------------- defaults and RoCE


def _default(what: str) -> str:
    return f"Cumulus Linux {CUMULUS_RELEASE}'s default: {what}"


def _apply_roce(s: _Settings) -> None:
    """`qos roce` beneath the explicit statements: fill what they leave unsaid (module docstring)."""
    if s.roce is None or s.roce.value == "lossy-multi-tc":
        return
    mode = s.roce.value

    def why(what: str) -> str:
        return f"{s.roce.where} (Cumulus Linux {CUMULUS_RELEASE}'s RoCE {mode} default: {what})"

    m = s.mapping.setdefault(GLOBAL, _Mapping())
    if m.trust is None:
        m.trust = _Said(ROCE_TRUST, why("trust pcp,dscp"))
    for sp in range(PRIORITIES):
        if sp not in s.sp_to_tc:
            s.sp_to_tc[sp] = _Said(ROCE_SP_TO_TC.get(sp, 0), why(
                f"switch priority {sp} → traffic class {ROCE_SP_TO_TC.get(sp, 0)}"))
    sched = s.scheduler.setdefault(GLOBAL, {})
    for tc in range(PRIORITIES):
        entry = sched.setdefault(tc, {})
        mode_, bw = ROCE_SCHEDULER.get(tc, ("dwrr", None))
        text = "strict" if mode_ == "strict" else (f"DWRR {bw}%" if bw else "no bandwidth")
        entry.setdefault("mode", _Said(mode_, why(f"traffic class {tc} {text}")))
        if bw:
            entry.setdefault("bw-percent", _Said(bw, why(f"traffic class {tc} DWRR {bw}%")))
    ecn = s.ecn.setdefault(GLOBAL, {})
    for tc in ROCE_ECN_TCS:
        e = ecn.setdefault(tc, _Ecn())
        text = (f"ECN on traffic class {tc} from {ROCE_ECN_MIN_BYTES:,} to {ROCE_ECN_MAX_BYTES:,} "
                f"bytes at probability {ROCE_ECN_PROBABILITY}")
        for attr, value in (("ecn", True), ("red", False), ("min_bytes", ROCE_ECN_MIN_BYTES),
                            ("max_bytes", ROCE_ECN_MAX_BYTES), ("probability", ROCE_ECN_PROBABILITY)):
            if getattr(e, attr) is None:
                setattr(e, attr, _Said(value, why(text)))
    if mode.startswith("lossless"):
        p = s.pfc.setdefault(GLOBAL, _Pfc())
        text = f"PFC tx and rx on switch priority {ROCE_PFC_PRIORITY}, cable length {ROCE_CABLE_M} m"
        if p.priorities is None:
            p.priorities = _Said(frozenset({ROCE_PFC_PRIORITY}), why(text))
        for attr, value in (("tx", True), ("rx", True), ("cable_m", ROCE_CABLE_M)):
            if getattr(p, attr) is None:
                setattr(p, attr, _Said(value, why(text)))


# ---------------------------------------------------------------- settings → profile


def _ports_profile(s: _Settings, port: str, feature: str) -> tuple[str, str | None]:
    said = s.profiles.get(port, {}).get(feature)
    return (said.value, said.where) if said else (GLOBAL, None)


class _Resolver:
    def __init__(self, s: _Settings, source: str, reader: _Reader):
        self.s, self.source, self.r = s, source, reader
        self.where: dict[tuple[object, ...], str] = {}

    def mapping(self, port: str, key: str) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        name, chosen = _ports_profile(self.s, port, "mapping")
        m = self.s.mapping.get(name)
        if m is None:
            if name != GLOBAL:
                self.r.warnings[f"{chosen}: names no `qos mapping {name}`: the port gets Cumulus's "
                                "defaults"] = None
            m = _Mapping()
        trust = m.trust.value if m.trust else DEFAULT_TRUST
        trust_where = m.trust.where if m.trust else \
            f"{self.source}: no `qos mapping {name} trust` ({_default('trust: l2, 802.1p')})"
        self.where[("trust", key)] = trust_where
        default_sp = m.port_default_sp.value if m.port_default_sp else 0
        default_where = m.port_default_sp.where if m.port_default_sp else \
            f"{self.source}: no `qos mapping {name} port-default-sp` ({_default('port-default-sp 0')})"
        sp_of_dscp = []
        for d in range(DSCP_VALUES):
            if trust in ("l3", "both"):
                said = m.dscp.get(d)
                sp_of_dscp.append(said.value if said else d // 8)
                self.where[("dscp", key, d)] = said.where if said else (
                    f"{self.source}: no `qos mapping {name} dscp {d}` "
                    f"({_default(f'DSCP {d // 8 * 8}–{d // 8 * 8 + 7} → switch priority {d // 8}')})")
            else:
                sp_of_dscp.append(default_sp)
                self.where[("dscp", key, d)] = f"{trust_where} (an untagged packet gets port-default-sp: {default_where})"
        dot1p = None
        if trust == "l2":
            dot1p = tuple(m.pcp[p].value if p in m.pcp else p for p in range(PRIORITIES))
            for p in range(PRIORITIES):
                self.where[("pcp", key, p)] = m.pcp[p].where if p in m.pcp else trust_where
        return tuple(sp_of_dscp), dot1p

    def sp_to_tc(self, key: str) -> tuple[int, ...]:
        out = []
        for sp in range(PRIORITIES):
            said = self.s.sp_to_tc.get(sp)
            out.append(said.value if said else sp)
            self.where[("sp-tc", key, sp)] = said.where if said else (
                f"{self.source}: no `qos egress-queue-mapping default-global switch-priority {sp}` "
                f"({_default(f'switch priority {sp} → traffic class {sp}')})")
        return tuple(out)

    def queues(self, port: str, key: str) -> dict[int, QueueQos]:
        sname, _ = _ports_profile(self.s, port, "egress-scheduler")
        ename, _ = _ports_profile(self.s, port, "congestion-control")
        sched, ecn = self.s.scheduler.get(sname, {}), self.s.ecn.get(ename, {})
        queues = {}
        for tc in range(PRIORITIES):
            scheduler = self.scheduler(sname, sched, tc, key)
            wred = self.wred(ename, ecn, tc, key)
            if scheduler or wred:
                queues[tc] = QueueQos(scheduler=scheduler, wred=wred)
        return queues

    def scheduler(self, name: str, sched: dict, tc: int, key: str) -> Scheduler | None:
        entry = sched.get(tc)
        if entry is None and name == GLOBAL and not self.s.scheduler.get(GLOBAL):
            mode, bw = DEFAULT_SCHEDULER[tc]
            self.where[("scheduler", key, tc)] = (f"{self.source}: no `qos egress-scheduler "
                                                  f"default-global` ({_default(f'DWRR {bw}%')})")
            return Scheduler(f"cumulus_dwrr_{bw}", "DWRR", bw)
        if not entry:
            self.where[("scheduler", key, tc)] = (f"{self.source}: `qos egress-scheduler {name}` "
                                                  f"gives traffic class {tc} no mode")
            return None
        mode = entry.get("mode")
        bw = entry.get("bw-percent")
        self.where[("scheduler", key, tc)] = "; ".join(x.where for x in (mode, bw) if x)
        if mode is not None and mode.value == "strict":
            return Scheduler("cumulus_strict", "STRICT")
        if bw is None:
            return None  # DWRR with no bandwidth: no egress scheduling (QOS_DOCS)
        return Scheduler(f"cumulus_dwrr_{bw.value}", "DWRR", bw.value)

    def wred(self, name: str, ecn: dict, tc: int, key: str) -> WredProfile | None:
        e = ecn.get(tc)
        if e is None and name == GLOBAL and GLOBAL not in self.s.ecn and tc in DEFAULT_ECN_TCS:
            e = _Ecn(*(_Said(v, f"{self.source}: no `qos congestion-control default-global` "
                                f"({_default('ECN on traffic class 0')})")
                       for v in (True, False, DEFAULT_ECN_MIN_BYTES, DEFAULT_ECN_MAX_BYTES,
                                 DEFAULT_ECN_PROBABILITY)))
        if e is None:
            self.where[("ecn", key, tc)] = (f"{self.source}: `qos congestion-control {name}` has no "
                                            f"traffic-class {tc}")
            return None
        ecn_on = e.ecn.value if e.ecn else True
        red_on = e.red.value if e.red else False
        self.where[("ecn", key, tc)] = "; ".join(dict.fromkeys(
            x.where for x in (e.min_bytes, e.max_bytes, e.ecn, e.red, e.probability) if x))
        if not (ecn_on or red_on):
            return None
        kmin = e.min_bytes.value if e.min_bytes else DEFAULT_ECN_MIN_BYTES
        kmax = e.max_bytes.value if e.max_bytes else DEFAULT_ECN_MAX_BYTES
        if kmax < kmin:
            said = (e.max_bytes or e.min_bytes).where
            self.r.problems.add(said.removeprefix(f"{self.source}: "),
                                f"max-threshold {kmax:,} B is below min-threshold {kmin:,} B of "
                                f"traffic class {tc} (NVUE refuses it)",
                                "max-threshold must be at least min-threshold")
        prob = e.probability.value if e.probability else DEFAULT_ECN_PROBABILITY
        return WredProfile(f"cumulus_{name}_tc{tc}", red_on, "ecn_all" if ecn_on else "ecn_none",
                           kmin, kmax, prob)

    def pfc(self, port: str, key: str) -> _Pfc | None:
        name, chosen = _ports_profile(self.s, port, "pfc")
        p = self.s.pfc.get(name)
        if p is None and name != GLOBAL:
            self.r.warnings[f"{chosen}: names no `qos pfc {name}`: no PFC on the port"] = None
        if p is None or p.priorities is None:
            self.where[("pfc", key)] = (f"{self.source}: no `qos pfc {name} switch-priority` "
                                        "(no PFC: Cumulus's default)")
            return None
        self.where[("pfc", key)] = p.priorities.where
        cable = p.cable_m
        self.where[("cable", key)] = cable.where if cable else \
            f"{self.source}: no `qos pfc {name} cable-length` ({_default(f'{DEFAULT_CABLE_M} m')})"
        sizes = [x.where for x in (p.port_buffer, p.xoff, p.xon) if x]
        if sizes:
            self.where[("pfc-buffer", key)] = "; ".join(sizes)
        return p

    def watchdog(self, port: str, key: str, pfc_enable: frozenset[int]) -> PfcWatchdog | None:
        said = self.s.watchdog.get(port)
        if said is None or not said.value or not pfc_enable:
            self.where[("watchdog", key)] = said.where if said else (
                f"{self.source}: no `interface {port or 'swpN'} qos pfc-watchdog`")
            return None
        poll = self.s.watchdog_poll_ms.value if self.s.watchdog_poll_ms else PFC_WD_POLL_MS
        robust = self.s.watchdog_robustness.value if self.s.watchdog_robustness else PFC_WD_ROBUSTNESS
        self.where[("watchdog", key)] = said.where
        return PfcWatchdog("drop", poll * robust, poll)

    def port(self, port: str, key: str) -> tuple[PortQos, _Pfc | None]:
        sp_of_dscp, dot1p = self.mapping(port, key)
        sp_to_tc = self.sp_to_tc(key)
        p = self.pfc(port, key)
        pfc_enable = frozenset()
        if p is not None and (p.tx.value if p.tx else True):
            pfc_enable = p.priorities.value
            if p.rx is not None and not p.rx.value:
                self.r.warnings[f"{p.rx.where}: PFC rx disabled is not emulated: switchd honours "
                                "the pauses it receives"] = None
        elif p is not None:
            self.where[("pfc", key)] = p.tx.where
        return PortQos(port=key,
                       dscp_to_tc=sp_of_dscp,
                       tc_to_queue=sp_to_tc,
                       tc_to_pg=tuple(sp if sp in pfc_enable else 0 for sp in range(PRIORITIES)),
                       pfc_priority_to_queue=sp_to_tc,
                       pfc_enable=pfc_enable,
                       queues=self.queues(port, key),
                       pfc_wd=self.watchdog(port, key, pfc_enable),
                       dot1p_to_tc=dot1p), p


def _config(s: _Settings, source: str, form: Form, reader: _Reader) -> CumulusConfig:
    _apply_roce(s)
    resolver = _Resolver(s, source, reader)
    lab = cumulus_lab_names(s.ports)
    ports, names, mtus, cables, sizes = {}, {}, {}, {}, {}
    for swp in sorted(s.ports, key=_swp_key):
        key = lab_to_sonic(lab[swp])
        ports[key], pfc = resolver.port(swp, key)
        names[key] = swp
        if swp in s.mtu:
            mtus[key] = s.mtu[swp].value
            resolver.where[("mtu", key)] = s.mtu[swp].where
        else:
            resolver.where[("mtu", key)] = (f"{source}: no `interface {swp} link mtu` "
                                            f"({_default(f'MTU {DEFAULT_MTU_BYTES}')})")
        if pfc is not None and ports[key].pfc_enable:
            cables[key] = pfc.cable_m.value if pfc.cable_m else DEFAULT_CABLE_M
            if pfc.port_buffer or pfc.xoff or pfc.xon:
                sizes[key] = PfcSizes(*(x.value if x else None for x in (pfc.port_buffer, pfc.xoff, pfc.xon)),
                                      resolver.where[("pfc-buffer", key)])
    default, default_pfc = resolver.port("", "")
    if default_pfc is not None and default.pfc_enable:  # what a port the file does not list gets
        cables[""] = default_pfc.cable_m.value if default_pfc.cable_m else DEFAULT_CABLE_M
    resolver.where[("mtu", "")] = f"{source}: the port sets no `link mtu` ({_default(f'MTU {DEFAULT_MTU_BYTES}')})"
    reader.problems.raise_if_any()
    if s.roce is not None and s.roce.value.startswith("lossless"):
        lossless = s.pools.get(ROCE_LOSSLESS_POOL, {}).get("memory-percent")
        share = (f"{lossless.value}% of the ASIC's buffer, {lossless.where}" if lossless
                 else "a share Cumulus picks; the RoCE page does not give it")
        reader.warnings[f"{source}: the {ROCE_LOSSLESS_POOL} pool ({share}), the lossless PGs' "
                        "headroom and their XOFF thresholds are what Cumulus derives on the ASIC: "
                        "the fabric description's `buffer:` figures stand for them"] = None
    warnings = tuple(reader.warnings)
    profile = QosProfile(source=source, pools={}, ports=ports, notes=warnings)
    return CumulusConfig(profile, form, mtus, replace(default, port=""), dict(resolver.where), names,
                         cables, sizes, s.roce.value if s.roce else None, warnings)


# ---------------------------------------------------------------- entry points


def parse_cumulus(text: str, source: str, form: Form | None = None,
                  infra: tuple[str, str] | None = None) -> CumulusConfig:
    """A Cumulus config's text in any of the three forms (detected unless `form` is given);
    `infra` (text, source) is qos_infra.conf beside a qos_features.conf. Raises InputError
    naming `source` and the line or YAML path of every malformed statement."""
    form = form or detect_form(text)
    if form is None:
        raise InputError([Problem(source, "", "is not a Cumulus Linux QoS config",
                                  "expected one of: " + "; ".join(_FORMS))])
    reader = _Reader(source)
    if form == "nv config show":
        reader.run(yaml_statements(text, source))
    elif form == "nv config show -o commands":
        reader.run(command_statements(text))
    else:
        rendered = _Rendered(reader)
        rendered.add(source, text)
        if infra is not None:
            rendered.add(infra[1], infra[0])
        rendered.run()
        rendered.finish()
    return _config(reader.s, source, form, reader)


def load_cumulus(path: str | os.PathLike[str]) -> CumulusConfig:
    """Read a Cumulus config: a file of any form, or a directory holding qos_features.conf
    (and qos_infra.conf). Raises InputError naming the file."""
    path = Path(path)
    source = os.fspath(path)
    if path.is_dir():
        features, infra = path / _FEATURES, path / _INFRA
        if not features.is_file():
            raise InputError([Problem(source, "", f"holds no {_FEATURES}",
                                      f"a directory of rendered files holds {_FEATURES} (and {_INFRA})")])
        return parse_cumulus(read_text(str(features)), str(features), "qos_features.conf",
                             (read_text(str(infra)), str(infra)) if infra.is_file() else None)
    return parse_cumulus(read_text(source), source)
