"""A lab's scenario: cases run one after another on the running lab, observations read
from the counters, and checks that turn them into a verdict.

In `labs/<lab>/lab.yml`:

    scenario:
      - case: pfc                        # a column of the side-by-side table
        title: PFC on (roce-lossless)
        profile: roce-lossless           # every switch reloads this QoS profile first
        traffic: incast-4to1             # a pattern file under traffic/ …
        with: {size: 2MB, iterations: 2} # … with these keys of a pattern file changed
                                         # (or, instead of traffic: a real training job,
                                         # train: {target_accuracy: 0.95}: rocelab.train)
        cc: dcqcn                        # the NICs' congestion control for this case
        dcqcn: connectx                  # … and DCQCN's parameter set (paper, connectx)
        load_balancing: {mode: packet}   # every switch's ECMP load balancing (rocelab.switch.balance)
        receive_order: place             # the NICs' receivers: gbn or place (rocelab.roce.qp)
        bgp: {multipath_relax: false}    # the fabric's BGP design over the lab's (routing: bgp;
                                         # rocelab.routing.bgp.Design): bgpd restarts on it
        impair:                          # link impairments out of switch ports
          - {port: leaf1:eth3, delay: 20us, jitter: 0us, loss: 0.5%, rate: 25%}
        storm: {host: h4, priority: 3}   # a stuck NIC that keeps sending PFC XOFF
        background:                      # a second job run alongside, not measured, stopped
          traffic: elephant              # when the case's job ends (traffic into a stormed host)
          with: {hosts: [h1, h4]}
        probes: [leaf1:eth1]             # scapy probes attached while the traffic runs
        steps:                           # a node's own commands, typed at a time of the job
          - {at: 2ms, on: leaf1, do: "config interface shutdown Ethernet8"}
          - {at: 3ms, impair: {port: leaf1:eth4, loss: 100%}}  # … or a link's fault from then on
      - case: no-pfc
        profile: lossy
        traffic: incast-4to1
    checks:
      - pfc: drops == 0
      - no-pfc: job_time_s > pfc: job_time_s
      - no-pfc: retransmitted_packets >= 1.5 * pfc: retransmitted_packets

A check is `CASE: OBSERVATION OP NUMBER` or `CASE: OBSERVATION OP [FACTOR *] CASE: OBSERVATION`
with OP one of == != < <= > >=. Observations are listed in OBSERVATIONS; probes add
`probe.NODE:IFACE.{pfc_xoff_frames,pfc_xon_frames,ce_packets,cnps,rewinds,psn_gaps}`, and
every switch port gives `port_tx_bytes.NODE:PORT` and `port_tx_util.NODE:PORT` (PORT_OBSERVATIONS).
Every case starts from cleared counters, so watermarks and totals are the case's own.
A step's `at` is production-equivalent time from the job's start (the instant every host starts
sending, its QPs connected), placed on the dilated time line as every case time is (typed at
at × TDF of wall time after it); it runs
through the node's own command, as a learner types it in `invoke shell NODE`. A step's
`impair` takes a case's impair keys: loss 100% is a silently dead transmitter (every frame the
port sends is lost in the kernel, FRR's BGP and BFD packets too, the link still up: only BFD or
the hold timer notice; rocelab.kernel.deadlink); a lesser loss, delay, jitter and rate are the
emulated ASIC's, on data frames only. The fault lasts until the next case starts, which starts
from the lab as built (rocelab.runtime.scenario: dead links revived, shut ports started, bgpd
restarted where the case's BGP design differs from the running one) and waits for BGP to converge.
A case's job that moves no byte for its stall_timeout is `stalled` (1): a failed case, unless
a check names that case's `stalled`, for a lab where stalling is the lesson.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import operator
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence


from rocelab import paths
from rocelab.errors import InputError, Problem, Problems
from rocelab.roce.cc import builtin_cc_registry
from rocelab.roce.config import RECEIVE_ORDERS
from rocelab.switch.balance import balance_config
from rocelab.roce.dcqcn import DCQCN_SETS
from rocelab.routing.bgp import Design, read_design
from rocelab.traffic.patterns import builtin_patterns
from rocelab.traffic.runner import VERBS
from rocelab.traffic.spec import JobSpec, resolve_spec
from rocelab.train.core import (TRAINING_OBSERVATIONS, TrainSpec, load_train_spec)
from rocelab.units import parse_bytes, parse_delay
from rocelab.yamlfile import YamlDoc
from rocelab.yamlfile import at as _at

# A switch's own commands (rocelab.nodecli.sonic.COMMANDS) and a host's that change or show its
# NIC (rocelab.nodecli.host.COMMANDS, less perftest), which a case's `steps:` may run.
SWITCH_COMMANDS = ("show", "config", "ecnconfig", "pfcwd", "sonic-clear")
HOST_COMMANDS = ("mlnx_qos", "cma_roce_tos", "sysfs", "show_gids")
CASE_KEYS = ("case", "title", "profile", "traffic", "with", "train", "cc", "dcqcn", "load_balancing", "receive_order",
             "bgp", "impair", "storm", "background", "probes", "steps")
WITH_KEYS = ("hosts", "size", "iterations", "compute_gap", "qps", "message_size", "verb", "options", "stall_timeout")
# Drops of traffic that the fabric was asked to carry (not frames a router ignores anyway).
FABRIC_DROP_REASONS = ("tail_drop", "headroom_exceeded", "wred_drop", "pfcwd_drop", "impairment_loss", "no_route",
                       "ttl_expired")
OBSERVATIONS = {
    "job_time_s": "mean iteration time, production-equivalent seconds",
    "job_wall_s": "first start to last end, production-equivalent seconds",
    "busbw_gbps": "bus bandwidth, production-equivalent Gb/s (nccl-tests)",
    "busbw_vs_line_rate": "busbw / line rate",
    "fct_max_s": "slowest flow completion time, production-equivalent seconds",
    "flow_jain": "Jain's fairness index over the flows' rates (message ÷ completion time) in each iteration, "
                 "averaged: 1 = equal shares",
    "drops": "packets the switches dropped: " + ", ".join(FABRIC_DROP_REASONS),
    **{f"drops.{r}": f"packets dropped as {r}" for r in FABRIC_DROP_REASONS},
    "pfc_tx_frames": "PFC frames the switches sent",
    "pfc_tx_frames_to_hosts": "PFC frames the switches sent to hosts",
    "pfc_tx_frames_to_switches": "PFC frames the switches sent upstream to other switches",
    "pfc_rx_frames": "PFC frames the switches received",
    "ecn_marked_packets": "packets the switches CE-marked",
    "max_queue_depth_bytes": "deepest egress queue (watermark)",
    "max_headroom_bytes": "most headroom any PG used (watermark)",
    "pfcwd_storms": "PFC storms the watchdog detected",
    "pfcwd_restored": "stormed queues the watchdog restored (after a storm ends, the case waits for it)",
    "held_past_headroom": "lossless packets a switch held past its headroom instead of dropping: sent only because "
                          "its XOFF left late, the emulation running late (rocelab.switch.pipeline; the fidelity "
                          "line says so)",
    "stalled": "1 if the case's job moved no byte for its stall_timeout, else 0",
    "dead_link_frames": "frames a silently dead link (impair loss 100%) lost on the wire, FRR's packets included; "
                        "the switches sent and counted them",
    "frr_packets_lost": "FRR's BGP and BFD packets a partly lossy link (impair loss below 100%) lost, on labs "
                        "that route on FRR (the data frames' share is switchd's: drops)",
    "host_pause_frames": "PFC frames the NICs received",
    "host_paused_s": "time the NICs spent paused, production-equivalent seconds",
    "cnps_sent": "CNPs the NICs sent", "cnps_received": "CNPs the NICs received",
    "retransmitted_packets": "packets the NICs sent again (go-back-N)",
    "retransmitted_bytes": "bytes the NICs sent again",
    "timeouts": "retransmission timeouts",
    "retransmitted_bytes_per_drop": "go-back-N amplification: retransmitted bytes per dropped packet",
    "uplink_imbalance": "each leaf's busiest uplink (leaf → spine port) over its leaf's mean uplink, in tx bytes, "
                        "weighted by the leaves' uplink bytes: 1 = even, N = all on one of N uplinks",
    "uplink_max_util": "the busiest uplink's tx bytes over what its line rate carries in job_wall_s",
    "ooo_received": "request packets the NICs received ahead of the PSN they expected (reordered or after a loss)",
    "reorder_distance_max": "the farthest ahead of the expected PSN a request packet arrived, in PSNs, over the NICs",
    "reorder_distance_p99": "the p99 of how far ahead of the expected PSN packets arrived (the worst NIC's)",
    "naks_sent": "NAKs the NICs sent, every cause",
    "naks_sent_out_of_order": "sequence-error NAKs for a packet ahead of the expected PSN (receive_order gbn)",
    "naks_sent_place_gap": "sequence-error NAKs for a hole taken for a loss (receive_order place)",
    "flowlet_reassignments": "flowlets the switches moved to another ECMP member (load_balancing flowlet)",
    "flowset_collisions": "frames that found their flowset entry active for another flow (load_balancing flowlet)",
    **TRAINING_OBSERVATIONS,
}
# Per switch port, named `NAME.NODE:PORT`, e.g. port_tx_util.leaf1:eth5.
PORT_OBSERVATIONS = {
    "port_tx_bytes": "bytes the switch port sent",
    "port_tx_util": "the port's tx bytes over what its line rate carries in job_wall_s",
    "port_queued_after_steps": "bytes the switch took into the port's egress queues after the case's last step "
                               "took effect (every switch had seen the links it shut go down); N/A in a case with "
                               "no step",
}
# Per switch and prefix, named `fib_next_hops.NODE:PREFIX`, e.g. fib_next_hops.leaf2:198.19.1.0/24.
FIB_OBSERVATIONS = {
    "fib_next_hops": "next hops of the prefix in the switch's forwarding table as programmed, at the case's end "
                     "(0: no route)",
}
PROBE_FIELDS = ("pfc_xoff_frames", "pfc_xon_frames", "ce_packets", "cnps", "rewinds", "psn_gaps")
OPS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
_NAME = r"[a-z][a-z0-9_-]*"
_OBS = r"[a-z_][a-z0-9_.:/-]*"
_CHECK = re.compile(rf"^\s*({_NAME})\s*:\s*({_OBS})\s*(==|!=|<=|>=|<|>)\s*(.+?)\s*$")
_RHS_CASE = re.compile(rf"^(?:(\d+(?:\.\d+)?)\s*\*\s*)?({_NAME})\s*:\s*({_OBS})$")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:e-?\d+)?$")


@dataclass(frozen=True)
class Impairment:
    node: str
    port: str
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss_pct: float = 0.0
    rate_pct: float = 100.0  # the port sends at this share of its link's rate (a degraded link)

    @property
    def silent(self) -> bool:
        """A dead transmitter: every frame lost, FRR's BGP and BFD packets too, the link still up
        (rocelab.kernel.deadlink). A lesser loss is the emulated ASIC's on data frames, and takes
        the same share of FRR's packets in the kernel (rocelab.kernel.frrloss)."""
        return self.loss_pct >= 100


@dataclass(frozen=True)
class Storm:
    host: str
    priority: int = 3


@dataclass(frozen=True)
class CaseStep:
    """A command a user would type on a node, or a fault on a switch port's link (`impair`), `at_s`
    production-equivalent seconds after the case's job starts (at_s × TDF of wall time on the lab)."""

    at_s: float
    node: str
    argv: tuple[str, ...] = ()
    impair: Impairment | None = None

    @property
    def text(self) -> str:
        """What the step does, as the run's report and its console line say it."""
        if self.impair is None:
            return shlex.join(self.argv)
        imp = self.impair
        parts = [f"loss {imp.loss_pct:g}%" + (" (silent: the link stays up)" if imp.silent else "")] \
            if imp.loss_pct else []
        parts += [f"{key} {value * 1e6:g} us" for key, value in (("delay", imp.delay_s), ("jitter", imp.jitter_s)) if value]
        parts += [f"rate {imp.rate_pct:g}%"] if imp.rate_pct != 100 else []
        return f"impair {imp.node}:{imp.port} " + (", ".join(parts) or "cleared")


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    traffic: JobSpec | None  # None: the case trains instead
    profile: Path | None = None
    cc: str | None = None
    impair: tuple[Impairment, ...] = ()
    storm: Storm | None = None
    probes: tuple[tuple[str, str], ...] = ()
    background: JobSpec | None = None
    training: TrainSpec | None = None  # a PyTorch DDP job instead of a traffic pattern
    dcqcn: str | None = None  # DCQCN's parameter set (roce.dcqcn.DCQCN_SETS); None: the lab's
    steps: tuple[CaseStep, ...] = ()
    load_balancing: Mapping | None = None  # every switch's, for this case; None: the lab's
    receive_order: str | None = None  # every NIC's receiver, for this case; None: the lab's
    bgp: Design | None = None  # the fabric's BGP design for this case, over the lab's `bgp:`; None: the lab's


@dataclass(frozen=True)
class Check:
    text: str
    case: str
    observation: str
    op: str
    value: float | None = None  # a number on the right, or …
    other_case: str | None = None  # … another case's observation, times `factor`
    other_observation: str | None = None
    factor: float = 1.0


@dataclass(frozen=True)
class Scenario:
    cases: tuple[Case, ...]
    checks: tuple[Check, ...]


def _profile(ref: str, lab_dir: Path) -> Path | None:
    for candidate in (lab_dir / f"{ref}.json", lab_dir / ref, paths.profiles_dir() / f"{ref}.json"):
        if candidate.is_file():
            return candidate
    return None


def _port_observation(name: str) -> tuple[str, str] | None:
    """(node, port) of `port_tx_bytes.NODE:PORT` or `port_tx_util.NODE:PORT`, else None."""
    kind, _, where = name.partition(".")
    node, _, port = where.partition(":")
    return (node, port) if kind in PORT_OBSERVATIONS and node and port else None


def _fib_observation(name: str) -> tuple[str, str] | None:
    """(node, prefix) of `fib_next_hops.NODE:PREFIX`, else None."""
    kind, _, where = name.partition(".")
    node, _, prefix = where.partition(":")
    return (node, prefix) if kind in FIB_OBSERVATIONS and node and prefix else None


def _known_observation(name: str) -> bool:
    if name in OBSERVATIONS or _port_observation(name) is not None or _fib_observation(name) is not None:
        return True
    parts = name.split(".")
    return len(parts) == 3 and parts[0] == "probe" and ":" in parts[1] and parts[2] in PROBE_FIELDS


def _traffic(raw: object, overrides: object, where: str, doc: YamlDoc, problems: Problems) -> JobSpec | None:
    try:
        spec = resolve_spec(str(raw), builtin_patterns())
    except InputError as exc:
        problem = exc.problems[0]
        problems.add(where, f"{problem.file}: {problem.message}", problem.hint)
        return None
    if overrides is None:
        return spec
    if not isinstance(overrides, dict):
        problems.add(where, f"`with` {overrides!r} is not a mapping", f"keys: {', '.join(WITH_KEYS)}")
        return None
    changes: dict = {}
    for key, value in overrides.items():
        try:
            if key == "hosts":
                changes["hosts"] = tuple(value)
            elif key in ("size", "message_size"):
                changes["size_bytes" if key == "size" else "message_bytes"] = parse_bytes(value)
            elif key in ("compute_gap", "stall_timeout"):
                changes[f"{key}_s"] = parse_delay(value)
            elif key in ("iterations", "qps"):
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f"{value!r} is not a whole number ≥ 1")
                changes[key] = value
            elif key == "verb":
                if value not in VERBS:
                    raise ValueError(f"{value!r} is not a verb; expected one of: {', '.join(VERBS)}")
                changes[key] = value
            elif key == "options":
                changes[key] = value
            else:
                raise ValueError(f"unknown key {key!r}; expected one of: {', '.join(WITH_KEYS)}")
        except (ValueError, TypeError) as exc:
            problems.add(f"{where}.with.{key}", str(exc))
    return dataclasses.replace(spec, **changes)


def _training(doc: YamlDoc, i: int, hosts: set[str], problems: Problems) -> TrainSpec | None:
    def at(*keys: str) -> str:
        return _at(doc, "scenario", i, "train", *keys)

    training = load_train_spec(doc.data["scenario"][i]["train"], at, problems)
    if training is not None and set(training.hosts) - hosts:
        problems.add(at("hosts"), f"{sorted(set(training.hosts) - hosts)} are not hosts of this lab",
                     f"hosts: {', '.join(sorted(hosts))}")
        return None
    return training


def load_scenario(doc: YamlDoc, lab_dir: Path, hosts: set[str], switch_ports: set[tuple[str, str]],
                  all_ports: set[tuple[str, str]]) -> Scenario | None:
    """The `scenario:` and `checks:` of a lab.yml, every problem collected and raised once."""
    data = doc.data
    problems = Problems(doc.name)
    if "scenario" not in data:
        if "checks" in data:
            problems.add(_at(doc, "checks"), "has no scenario to check", "add `scenario:` with at least one case")
        problems.raise_if_any()
        return None
    raw_cases = data["scenario"]
    if not isinstance(raw_cases, list) or not raw_cases:
        problems.add(_at(doc, "scenario"), "is not a list of cases", "each case: {case: NAME, traffic: PATTERN}")
        problems.raise_if_any()
    cases: list[Case] = []
    for i, raw in enumerate(raw_cases):
        where = _at(doc, "scenario", i)
        if not isinstance(raw, dict):
            problems.add(where, "is not a case", "a mapping with at least `case` and `traffic`")
            continue
        for key in raw:
            if key not in CASE_KEYS:
                problems.add(_at(doc, "scenario", i, str(key)), f"unknown key {key!r}",
                             f"expected one of: {', '.join(CASE_KEYS)}")
        name = raw.get("case")
        if not isinstance(name, str) or not re.fullmatch(_NAME, name):
            problems.add(where, f"case name {name!r} is not an identifier", "e.g. case: pfc")
            continue
        if name in {c.name for c in cases}:
            problems.add(where, f"case {name!r} appears twice")
        spec = _traffic(raw.get("traffic"), raw.get("with"), where, doc, problems) if "traffic" in raw else None
        training = _training(doc, i, hosts, problems) if "train" in raw else None
        if ("traffic" in raw) == ("train" in raw):
            problems.add(where, "has both `traffic` and `train`" if "train" in raw else "has no `traffic`",
                         "name a pattern file under traffic/, e.g. incast-4to1, or train: {} for a training job")
        profile = None
        if "profile" in raw:
            profile = _profile(str(raw["profile"]), lab_dir)
            if profile is None:
                problems.add(_at(doc, "scenario", i, "profile"), f"{raw['profile']!r} is not a QoS profile",
                             "a JSON file in the lab's folder or under profiles/")
        cc = raw.get("cc")
        if cc is not None and cc not in builtin_cc_registry().names():
            problems.add(_at(doc, "scenario", i, "cc"), f"{cc!r} is not a congestion control",
                         f"expected one of: {', '.join(builtin_cc_registry().names())}")
        dcqcn = raw.get("dcqcn")
        if dcqcn is not None and dcqcn not in DCQCN_SETS:
            problems.add(_at(doc, "scenario", i, "dcqcn"), f"{dcqcn!r} is not a DCQCN parameter set",
                         f"expected one of: {', '.join(DCQCN_SETS)}")
        load_balancing = raw.get("load_balancing")
        if load_balancing is not None:
            try:
                balance_config(load_balancing)
            except ValueError as exc:
                problems.add(_at(doc, "scenario", i, "load_balancing"), str(exc), "e.g. load_balancing: {mode: packet}")
        receive_order = raw.get("receive_order")
        if receive_order is not None and receive_order not in RECEIVE_ORDERS:
            problems.add(_at(doc, "scenario", i, "receive_order"), f"{receive_order!r} is not a receive order",
                         f"expected one of: {', '.join(RECEIVE_ORDERS)}")
        bgp = read_design(raw["bgp"], lambda *keys: _at(doc, "scenario", i, "bgp", *keys), problems) \
            if "bgp" in raw else None
        impair = [imp for j, item in enumerate(raw.get("impair") or [])
                  if (imp := _impairment(item, _at(doc, "scenario", i, "impair", j), switch_ports, problems))]
        storm = None
        if "storm" in raw:
            item = raw["storm"]
            if not isinstance(item, dict) or item.get("host") not in hosts or item.get("priority", 3) not in range(8):
                problems.add(_at(doc, "scenario", i, "storm"), f"{item!r} is not a PFC storm",
                             "write storm: {host: h4, priority: 3}")
            else:
                storm = Storm(item["host"], item.get("priority", 3))
        background = None
        if "background" in raw:
            item = raw["background"]
            here = _at(doc, "scenario", i, "background")
            if not isinstance(item, dict) or "traffic" not in item or set(item) - {"traffic", "with"}:
                problems.add(here, f"{item!r} is not a background job",
                             "write background: {traffic: elephant, with: {hosts: [h1, h4]}}")
            else:
                background = _traffic(item["traffic"], item.get("with"), here, doc, problems)
        probes = []
        for j, item in enumerate(raw.get("probes") or []):
            node, _, port = str(item).partition(":")
            if (node, port) not in all_ports:
                problems.add(_at(doc, "scenario", i, "probes", j), f"{item!r} is not NODE:IFACE of this lab")
            else:
                probes.append((node, port))
        steps = []
        switches = {node for node, _ in switch_ports}
        raw_steps = raw.get("steps") or []
        if not isinstance(raw_steps, list):
            problems.add(_at(doc, "scenario", i, "steps"), "is not a list of steps",
                         '[{at: 2ms, on: SWITCH, do: "config interface shutdown Ethernet8"}]')
            raw_steps = []
        for j, item in enumerate(raw_steps):
            here = _at(doc, "scenario", i, "steps", j)
            if isinstance(item, dict) and True in item and "on" not in item:
                item = {("on" if key is True else key): value for key, value in item.items()}  # YAML 1.1 reads `on:` as true
            if isinstance(item, dict) and set(item) == {"at", "impair"}:
                imp = _impairment(item["impair"], _at(doc, "scenario", i, "steps", j, "impair"), switch_ports, problems)
                try:
                    if imp:
                        steps.append(CaseStep(parse_delay(item["at"]), imp.node, impair=imp))
                except ValueError as exc:
                    problems.add(_at(doc, "scenario", i, "steps", j, "at"), str(exc),
                                 "a production-equivalent time after the job starts, like 500us or 2ms")
                continue
            known = SWITCH_COMMANDS if isinstance(item, dict) and item.get("on") in switches else HOST_COMMANDS
            if not isinstance(item, dict) or set(item) != {"at", "on", "do"} \
                    or item["on"] not in switches | set(hosts) or str(item["do"]).split(" ", 1)[0] not in known:
                problems.add(here, f"{item!r} is not a step on a switch or host, nor a link's fault",
                             f'write {{at: 2ms, on: SWITCH, do: "config interface shutdown Ethernet8"}} '
                             f"or {{at: 2ms, impair: {{port: leaf1:eth3, loss: 100%}}}}; "
                             f"switches: {', '.join(sorted(switches))}, commands: {', '.join(SWITCH_COMMANDS)}; "
                             f"hosts: {', '.join(sorted(hosts))}, commands: {', '.join(HOST_COMMANDS)}")
                continue
            try:
                steps.append(CaseStep(parse_delay(item["at"]), item["on"], tuple(shlex.split(str(item["do"])))))
            except ValueError as exc:
                problems.add(_at(doc, "scenario", i, "steps", j, "at"), str(exc),
                             "a production-equivalent time after the job starts, like 500us or 2ms")
        if spec is not None or training is not None:
            cases.append(Case(name, str(raw.get("title", name)), spec, profile, cc, tuple(impair), storm, tuple(probes),
                              background, training, dcqcn, tuple(sorted(steps, key=lambda c: c.at_s)),
                              load_balancing, receive_order, bgp))
    checks = []
    names = {c.name for c in cases}
    for i, raw in enumerate(data.get("checks") or []):
        where = _at(doc, "checks", i)
        text = f"{next(iter(raw))}: {raw[next(iter(raw))]}" if isinstance(raw, dict) and len(raw) == 1 else str(raw)
        check = parse_check(text)
        if check is None:
            problems.add(where, f"{text!r} is not a check", "write e.g. `pfc: drops == 0` or "
                                                            "`no-pfc: job_time_s > pfc: job_time_s`")
            continue
        for case, obs in ((check.case, check.observation), (check.other_case, check.other_observation)):
            if case is not None and case not in names:
                problems.add(where, f"{text!r} names no case {case!r}", f"cases: {', '.join(sorted(names))}")
            if obs is not None and not _known_observation(obs):
                problems.add(where, f"{text!r}: {obs!r} is not an observation",
                             f"observations: {', '.join(OBSERVATIONS)}, probe.NODE:IFACE.{{{','.join(PROBE_FIELDS)}}}, "
                             f"{{{','.join(PORT_OBSERVATIONS)}}}.NODE:PORT, "
                             f"{{{','.join(FIB_OBSERVATIONS)}}}.NODE:PREFIX")
            elif obs is not None and (port := _port_observation(obs)) is not None and port not in switch_ports:
                problems.add(where, f"{text!r}: {obs!r} names no switch port of this lab",
                             "write e.g. port_tx_util.leaf1:eth3")
            elif obs is not None and (route := _fib_observation(obs)) is not None and (
                    route[0] not in {node for node, _ in switch_ports} or not _is_prefix(route[1])):
                problems.add(where, f"{text!r}: {obs!r} names no switch and IPv4 prefix of this lab",
                             "write e.g. fib_next_hops.leaf2:198.19.1.0/24")
        checks.append(check)
    problems.raise_if_any()
    return Scenario(tuple(cases), tuple(checks))


def only_cases(scenario: Scenario, names: list[str], source: str) -> Scenario:
    """The scenario cut down to some of its cases, in the lab's order, with the checks that
    name no other case."""
    known = [c.name for c in scenario.cases]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError([Problem(source, "scenario", f"has no case {', '.join(map(repr, unknown))}",
                                  f"cases: {', '.join(known)}")])
    keep = set(names)
    return Scenario(tuple(c for c in scenario.cases if c.name in keep),
                    tuple(c for c in scenario.checks if c.case in keep and (c.other_case or c.case) in keep))


def _percent(item: dict, key: str, default: float) -> float:
    try:
        return float(str(item.get(key, default)).rstrip("%"))
    except ValueError:
        raise ValueError(f"{key} {item[key]!r} is not a percentage") from None


def _impairment(item, here: str, switch_ports, problems: Problems) -> Impairment | None:
    """One `impair:` entry (a case's, or a step's), or None and a problem."""
    node, _, port = str(item.get("port", "")).partition(":") if isinstance(item, dict) else ("", "", "")
    if (node, port) not in switch_ports:
        problems.add(here, f"{item!r} does not name a switch port", "write port: leaf1:eth3")
        return None
    try:
        rate_pct = _percent(item, "rate", 100)
        if not 0 < rate_pct <= 100:
            raise ValueError(f"rate {item['rate']!r} is not a share of the link's rate")
        loss_pct = _percent(item, "loss", 0)
        if not 0 <= loss_pct <= 100:
            raise ValueError(f"loss {item['loss']!r} is not a share of the frames")
        return Impairment(node, port, parse_delay(item.get("delay", 0)), parse_delay(item.get("jitter", 0)),
                          loss_pct, rate_pct)
    except ValueError as exc:
        problems.add(here, str(exc), "delay and jitter like 20us, loss like 0.5% (100%: the link dies silently), "
                                     "rate like 25% (of the link's)")
        return None


def parse_check(text: str) -> Check | None:
    m = _CHECK.match(text)
    if not m:
        return None
    case, obs, op, rhs = m.groups()
    if _NUMBER.match(rhs):
        return Check(text, case, obs, op, value=float(rhs))
    r = _RHS_CASE.match(rhs)
    if not r:
        return None
    return Check(text, case, obs, op, other_case=r.group(2), other_observation=r.group(3),
                 factor=float(r.group(1) or 1.0))


# ---------------------------------------------------------------- observations (pure)

def switch_observations(counters: Mapping[str, dict], host_facing: set[tuple[str, str]]) -> dict[str, float]:
    """From each switch's counters (since the case's clear)."""
    obs = {k: 0.0 for k in ("drops", "pfc_tx_frames", "pfc_tx_frames_to_hosts", "pfc_tx_frames_to_switches",
                            "pfc_rx_frames", "ecn_marked_packets", "max_queue_depth_bytes", "max_headroom_bytes",
                            "pfcwd_storms", "pfcwd_restored", "held_past_headroom")}
    for reason in FABRIC_DROP_REASONS:
        obs[f"drops.{reason}"] = 0.0
    for node, c in counters.items():
        for reason, d in c["drops"].items():
            if reason in FABRIC_DROP_REASONS:
                obs["drops"] += d["packets"]
                obs[f"drops.{reason}"] += d["packets"]
        for name, port in c["ports"].items():
            sent = sum(port["pfc_tx_frames"])
            obs["pfc_tx_frames"] += sent
            obs["pfc_tx_frames_to_hosts" if (node, name) in host_facing else "pfc_tx_frames_to_switches"] += sent
            obs["pfc_rx_frames"] += sum(port["pfc_rx_frames"])
            for q in port["queues"]:
                obs["ecn_marked_packets"] += q["ecn_marked_packets"]
                obs["max_queue_depth_bytes"] = max(obs["max_queue_depth_bytes"], q["watermark_bytes"])
                obs["pfcwd_storms"] += (q.get("pfcwd") or {}).get("storms_detected", 0)
                obs["pfcwd_restored"] += (q.get("pfcwd") or {}).get("storms_restored", 0)
            for pg in port["pgs"]:
                obs["max_headroom_bytes"] = max(obs["max_headroom_bytes"], pg["headroom_watermark_bytes"])
                obs["held_past_headroom"] += pg["held_packets"]
    return obs


def nic_observations(counters: Sequence[Mapping]) -> dict[str, float]:
    """From the job's NICs' counters (since the case's clear): reordering and NAKs by cause.
    A backend without a counter reads 0."""
    obs = {k: float(sum(c.get(k, 0) for c in counters))
           for k in ("ooo_received", "naks_sent", "naks_sent_out_of_order", "naks_sent_place_gap")}
    distances = [c.get("reorder_distance") or {} for c in counters]
    obs["reorder_distance_max"] = float(max((d.get("max", 0) for d in distances), default=0))
    obs["reorder_distance_p99"] = float(max((d.get("p99", 0) for d in distances), default=0))
    return obs


def ecmp_observations(groups: Mapping[str, Mapping]) -> dict[str, float]:
    """From every switch's adaptive ECMP groups (switchd's `ecmp_groups`, by switch)."""
    every = [g for by_group in groups.values() for g in by_group.values()]
    return {"flowlet_reassignments": float(sum(g["reassignments"] for g in every)),
            "flowset_collisions": float(sum(g["collisions"] for g in every))}


def _is_prefix(text: str) -> bool:
    """A.B.C.D/LEN, as switchd's FIB names its routes."""
    if "/" not in text:
        return False
    try:
        ipaddress.IPv4Network(text)
    except ValueError:
        return False
    return True


def queued_bytes(counters: Mapping[str, dict]) -> dict[tuple[str, str], float]:
    """Every switch port's bytes taken into its egress queues since the clear: sent, or still queued."""
    return {(node, name): port["tx_bytes"] + sum(q["depth_bytes"] for q in port["queues"])
            for node, c in counters.items() for name, port in c["ports"].items()}


def fib_observations(routes: Mapping[str, Mapping[str, Sequence]]) -> dict[str, float]:
    """From every switch's programmed routes (switchd's `fib`, by switch): each switch's next hops
    to every prefix any switch routes, 0 where it has no route."""
    prefixes = {prefix for by_prefix in routes.values() for prefix in by_prefix}
    return {f"fib_next_hops.{node}:{prefix}": float(len(by_prefix.get(prefix, ())))
            for node, by_prefix in routes.items() for prefix in prefixes}


def port_observations(counters: Mapping[str, dict], rates_bps: Mapping[tuple[str, str], float],
                      uplinks: set[tuple[str, str]], wall_s: float,
                      queued_at_last_step: Mapping[tuple[str, str], float] | None = None) -> dict[str, float]:
    """Per switch port and over the uplinks, from each switch's counters (since the case's clear),
    each port's line rate and the job's wall time, both production-equivalent; and the bytes each
    port's queues took after the case's last step (queued_bytes then; None: no step ran)."""
    queued = queued_bytes(counters)
    obs: dict[str, float] = {}
    by_leaf: dict[str, list[float]] = {}
    uplink_util = []
    for node, c in counters.items():
        for name, port in c["ports"].items():
            sent = port["tx_bytes"]
            util = sent * 8 / (rates_bps[(node, name)] * wall_s) if wall_s > 0 else float("nan")
            obs[f"port_tx_bytes.{node}:{name}"] = sent
            obs[f"port_tx_util.{node}:{name}"] = util
            obs[f"port_queued_after_steps.{node}:{name}"] = (
                queued[(node, name)] - queued_at_last_step[(node, name)] if queued_at_last_step is not None
                else float("nan"))
            if (node, name) in uplinks:
                by_leaf.setdefault(node, []).append(sent)
                uplink_util.append(util)
    mean_bytes = sum(sum(sent) / len(sent) for sent in by_leaf.values())
    obs["uplink_imbalance"] = sum(max(sent) for sent in by_leaf.values()) / mean_bytes if mean_bytes else float("nan")
    obs["uplink_max_util"] = max(uplink_util, default=float("nan"))
    return obs


def job_observations(report: Mapping) -> dict[str, float]:
    total = report.get("total") or {}
    counters = total.get("counters") or {}
    fct = total.get("fct_s") or {}
    obs = {
        "job_time_s": total.get("time_s", {}).get("production", float("nan")),
        "job_wall_s": total.get("wall_s", {}).get("production", float("nan")),
        "busbw_gbps": total.get("busbw_bps", {}).get("production", float("nan")) / 1e9,
        "busbw_vs_line_rate": total.get("busbw_vs_line_rate", float("nan")),
        "fct_max_s": (fct.get("max") or {}).get("production", float("nan")),
        "flow_jain": total.get("flow_jain") if total.get("flow_jain") is not None else float("nan"),
        "host_pause_frames": counters.get("pfc_pause_frames", 0),
        "host_paused_s": (counters.get("pfc_paused_s") or {}).get("production", 0.0),
    }
    for key in ("cnps_sent", "cnps_received", "retransmitted_packets", "retransmitted_bytes", "timeouts"):
        obs[key] = counters.get(key, 0)
    return obs


def probe_observations(reports: Mapping[str, Mapping]) -> dict[str, float]:
    """From probe reports' JSON, keyed by "node:iface"."""
    obs = {}
    for where, r in reports.items():
        pfc = r.get("pfc", [])
        obs[f"probe.{where}.pfc_xoff_frames"] = sum(p.get("xoff_frames", 0) for p in pfc)
        obs[f"probe.{where}.pfc_xon_frames"] = sum(p.get("xon_frames", 0) for p in pfc)
        obs[f"probe.{where}.ce_packets"] = sum(f.get("ce_packets", 0) for f in r.get("flows", []))
        qps = r.get("qps", [])
        obs[f"probe.{where}.cnps"] = sum(q.get("cnps", 0) for q in qps)
        obs[f"probe.{where}.rewinds"] = sum(q.get("rewinds", 0) for q in qps)
        obs[f"probe.{where}.psn_gaps"] = sum(q.get("psn_gaps", 0) for q in qps)
    return obs


@dataclass(frozen=True)
class CheckResult:
    check: Check
    passed: bool
    left: float
    right: float


def evaluate(checks: tuple[Check, ...], observed: Mapping[str, Mapping[str, float]]) -> list[CheckResult]:
    results = []
    for check in checks:
        left = observed.get(check.case, {}).get(check.observation, float("nan"))
        if check.value is not None:
            right = check.value
        else:
            right = check.factor * observed.get(check.other_case, {}).get(check.other_observation, float("nan"))
        results.append(CheckResult(check, bool(OPS[check.op](left, right)), left, right))
    return results
