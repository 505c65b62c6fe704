"""Running a lab's scenario (rocelab.model.scenario) on the running lab: each case's
profile, impairments, storm, probes and job, its observations read from the counters,
then the checks and a verdict."""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from rocelab.engines import builtin_engines, frr
from rocelab.engines import state as lab_state
from rocelab.engines.netns import wait_converged
from rocelab.engines.state import LabState
from rocelab.kernel import control, deadlink, frrloss
from rocelab.kernel.loop import REALTIME
from rocelab.model.scenario import (Case, CaseStep, CheckResult, Impairment, Scenario, ecmp_observations, evaluate,
                                    fib_observations, job_observations, nic_observations, port_observations,
                                    probe_observations, queued_bytes, switch_observations)
from rocelab.probes import Probe
from rocelab.routing.bgp import FRR_BFD_INTERVAL_MS, FRR_BFD_MULTIPLIER, BgpConfig
from rocelab.probes.storm import hold_pfc_pause
from rocelab.qos.sonic import load_config_db
from rocelab.runtime.fidelity import Fidelity, Watch, port_links
from rocelab.runtime.readings import read_counters
from rocelab.runtime.timeseries import Sampler
from rocelab.train.core import TRAINING_HEADLINE, training_observations
from rocelab.train.runner import run_training
from rocelab.traffic.job import JobFailed, JobStalled, run_job
from rocelab.traffic.runner import counter_snapshot
from rocelab.traffic.spec import JobSpec


# How long a step waits, in wall time, for the switches to see the links it shut go down.
SEEN_TIMEOUT_S = 5.0


def agent_sockets(record: LabState, what: str) -> dict[str, Path]:
    """Control socket of every agent of one kind ("switchd", "nicd") in a running lab."""
    return {p["node"]: control.socket_path(record.name, p["node"]) for p in record.processes if p["what"] == what}


def agents_not_realtime(record: LabState) -> dict[str, str]:
    """Agents that did not get real-time scheduling (rocelab.kernel.loop.claim_cpu), with what they
    got: on a busy machine they can react late enough to overflow an emulated headroom."""
    got = {node: control.request(sock, "ping").get("scheduling", "ordinary")
           for what in ("switchd", "nicd") for node, sock in agent_sockets(record, what).items()}
    return {node: how for node, how in got.items() if how != REALTIME}


def impair(record: LabState, imp: Impairment) -> None:
    """A switch port's link impaired from now on. A silent loss (100%) is a dead transmitter in the
    kernel (rocelab.kernel.deadlink), under the emulated ASIC, which keeps sending and counting as a
    real one would; the rest is switchd's, and a lesser loss takes its share of FRR's packets too
    where the lab routes on FRR (rocelab.kernel.frrloss)."""
    sock = control.socket_path(record.name, imp.node)
    control.request(sock, "impair", port=imp.port, delay_s=imp.delay_s * record.tdf, jitter_s=imp.jitter_s * record.tdf,
                    loss_pct=0.0 if imp.silent else imp.loss_pct, rate_pct=imp.rate_pct, silent=imp.silent)
    if record.routes_on_frr:
        frrloss.set_loss(record.node(imp.node).netns, imp.port, 0.0 if imp.silent else imp.loss_pct)


def revive_links(record: LabState, fabric,
                 start_ports: Callable[[str, list[str]], object] | None = None) -> list[str]:
    """Every switch port's link as the lab built it: the emulated ASIC's impairments cleared, the
    dead transmitters revived, FRR's packets no longer lost and, where `start_ports(node, ports)`
    is given (the front door's, through the switch's running config, which its shell reads the
    links from), a port the last case shut started again. What it revived, NODE:PORT."""
    revived = []
    for node, sock in agent_sockets(record, "switchd").items():
        if start_ports is not None:
            links = control.request(sock, "links")["links"]
            shut = [port.name for port in fabric.node(node).ports if links[port.name]["admin"] == "down"]
            if shut:
                start_ports(node, shut)
                revived += [f"{node}:{port}" for port in shut]
        for port in fabric.node(node).ports:
            control.request(sock, "impair", port=port.name)
        netns = record.node(node).netns
        lossy = frrloss.clear(netns) if record.routes_on_frr else []
        revived += [f"{node}:{port}" for port in dict.fromkeys([*deadlink.revive(netns), *lossy])]
    return revived


def reconfigure_bgp(record: LabState, configs: Mapping[str, tuple[BgpConfig, str]]) -> dict[str, BgpConfig]:
    """bgpd restarted on each switch whose configuration for the case (its `bgp:` over the lab's)
    renders another bgpd.conf than the one it runs (rocelab.engines.frr.restart_bgpd), the lab's
    record following; those switches and their configurations."""
    started = frr.restart_bgpd(record.name, {node: (record.node(node).netns, config)
                                             for node, (config, _) in configs.items()},
                               builtin_engines().get(record.engine).frr_daemons)
    for node, proc in started.items():
        record.routing["daemons"] = [d for d in record.routing["daemons"]
                                     if (d["node"], d["what"]) != (node, "bgpd")] + [
            {"node": node, "pid": proc.pid, "what": "bgpd"}]
        record.routing["switches"][node]["how"] = configs[node][1]
    if started:
        lab_state.save(record)
    return {node: configs[node][0] for node in started}


def settle_routing(record: LabState, fabric, case: Case, reconfigured: Mapping[str, BgpConfig], revived: list[str],
                   on_note: Callable[[str], object] | None = None) -> None:
    """After a case's start changed the fabric under FRR: every route programmed
    (rocelab.engines.netns.wait_converged), and every BGP session Established again where bgpd
    restarted (and then given the lines it starts without: rocelab.engines.frr.finish_config);
    what it waits for, and the prefixes left narrower than the fabric's paths, said to `on_note`."""
    note = on_note or (lambda text: None)
    design = f"this case's `bgp:` {case.bgp.text()}" if case.bgp else "the lab's BGP design"
    what = ([f"bgpd restarted on {', '.join(reconfigured)} for {design}"] if reconfigured else []) + \
        ([f"revived {', '.join(revived)} (left by the last case)"] if revived else [])
    note(f"{'; '.join(what)}; waiting for BGP to converge again, seconds of wall time")
    started = time.monotonic()
    narrower = wait_converged(fabric, record, established=bool(reconfigured))
    frr.finish_config(record.name, reconfigured)
    note(f"BGP converged in {time.monotonic() - started:.1f} s (wall clock)"
         + (f", narrower than the fabric's equal-cost paths: {', '.join(narrower)}" if narrower else ""))


def start_clean(record: LabState, cc: str | None, dcqcn: str | None = None, receive_order: str | None = None) -> None:
    """Before a measurement: the NICs' congestion control, DCQCN parameter set and receive
    order for the QPs they connect next (None: each NIC's own, from the lab and its host's NIC
    files), and every agent's counters (and watermarks) cleared."""
    for sock in agent_sockets(record, "nicd").values():
        control.request(sock, "set_cc", algorithm=cc, dcqcn=dcqcn, receive_order=receive_order)
    for sock in [*agent_sockets(record, "switchd").values(), *agent_sockets(record, "nicd").values()]:
        control.request(sock, "clear")


def stormed_queues(counters: Mapping[str, dict]) -> list[str]:
    """NODE:PORT/queue of every queue the PFC watchdog holds as stormed."""
    return [f"{node}:{name}/{i}" for node, c in counters.items() for name, port in c["ports"].items()
            for i, q in enumerate(port["queues"]) if (q.get("pfcwd") or {}).get("stormed")]


def read_restored(switches: Mapping[str, Path], profile: Path | None, poll_s: float = 0.1) -> dict[str, dict]:
    """Every switch's counters, once no PFC watchdog holds a queue as stormed: after a storm
    ends, the watchdogs get their restoration time (restoration_wait_s), as an operator would
    give it, and the counters are read then, restored or not."""
    deadline = None
    while True:
        replies = {n: read_counters(s) for n, s in switches.items()}
        counters = {n: r["counters"] for n, r in replies.items()}
        if not stormed_queues(counters):
            return counters
        if deadline is None:
            pfc_wd_tdf = next(iter(replies.values()))["pfc_wd_tdf"]
            deadline = time.monotonic() + restoration_wait_s(profile, pfc_wd_tdf)
        elif time.monotonic() > deadline:
            return counters
        time.sleep(poll_s)


def restoration_wait_s(profile: Path | None, pfc_wd_tdf: int) -> float:
    """Wall time the slowest watchdog of a profile takes to restore a queue, with a margin."""
    if profile is None:
        return 0.0
    times_ms = [p.pfc_wd.restoration_time_ms for p in load_config_db(profile).ports.values() if p.pfc_wd]
    return 2 * max(times_ms, default=0) * pfc_wd_tdf / 1000 + 1.0


@dataclass
class CaseResult:
    case: Case
    observations: dict[str, float]
    job: dict | None = None
    error: str | None = None
    probes: dict[str, dict] = field(default_factory=dict)
    series: object = None
    fidelity: Fidelity | None = None  # did the agents keep the emulated schedule through the case
    steps: list[StepResult] = field(default_factory=list)  # the case's steps as they ran

    @property
    def behind(self) -> bool:
        return self.fidelity is not None and not self.fidelity.kept_up


@dataclass(frozen=True)
class StepResult:
    """A step as it ran: when it was asked for and when it was typed (production-equivalent
    seconds from the job's start: wall time on the lab ÷ TDF), and its exit status."""

    step: CaseStep
    typed_s: float
    status: int
    # Every switch port's bytes sent or queued once the step had taken effect (queued_at_step),
    # for port_queued_after_steps.
    queued_bytes: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"at_s": self.step.at_s, "typed_s": self.typed_s, "node": self.step.node,
                "command": self.step.text, "status": self.status}


def queued_at_step(switches: Mapping[str, Path], timeout_s: float = SEEN_TIMEOUT_S) -> dict[tuple[str, str], float]:
    """queued_bytes once every switch has seen its links that are down go down (a step that shut a
    link: both ends), or after `timeout_s` of wall time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any({p for p, link in control.request(s, "links")["links"].items() if link["oper"] != "up"}
                   - set(control.request(s, "fib")["down"]) for s in switches.values()):
            break
        time.sleep(0.005)
    return queued_bytes({n: read_counters(s)["counters"] for n, s in switches.items()})


def _typed_at_times(case: Case, run_step, start: queue.Queue, stop: threading.Event, tdf: int,
                    ran: list[StepResult], snapshot: Callable[[], Mapping] = dict) -> None:
    """A case's `steps:`, each at its time on the dilated time line (at × TDF of wall time after the
    job's data started, the monotonic time `start` hands over once the job has connected its QPs),
    until the job ends; what each did, and `snapshot()` after it, go to `ran`."""
    while True:
        try:
            started = start.get(timeout=0.05)
            break
        except queue.Empty:
            if stop.is_set():
                return
    for step in case.steps:
        if stop.wait(max(0.0, started + step.at_s * tdf - time.monotonic())):
            return
        typed_s = (time.monotonic() - started) / tdf
        status = run_step(case, step)
        ran.append(StepResult(step, typed_s, status, snapshot()))


def run_case(record: LabState, case: Case, lab_profile: Path | None, fabric, *,
             on_progress=None, on_step=None, sample_interval_s: float = 0.05, run_step=None,
             reload: bool = True, on_note: Callable[[str], object] | None = None,
             bgp: Callable[[Case], Mapping[str, tuple[BgpConfig, str]]] | None = None,
             start_ports: Callable[[str, list[str]], object] | None = None) -> CaseResult:
    """`run_step(case, step)` types a case's step (the front door's node CLI) and returns its exit status;
    `reload=False` keeps the switches' running configs (a challenge's grader); `on_note` hears what
    the case waits for before its job (BGP converging after a revived link); `bgp(case)` is every
    switch's BGP configuration for the case (rocelab.routing.design.lab_bgp), which bgpd is
    restarted on where it runs another (None: FRR keeps what it runs); `start_ports(node, ports)`
    starts the ports a case shut (None: they stay shut, as a challenge's grader keeps them)."""
    switches = agent_sockets(record, "switchd")
    nics = agent_sockets(record, "nicd")
    if reload:
        for sock in switches.values():
            control.request(sock, "reload",
                            profile=str(case.profile or lab_profile) if (case.profile or lab_profile) else None,
                            load_balancing=case.load_balancing)
    reconfigured = reconfigure_bgp(record, bgp(case)) if bgp is not None else {}
    revived = revive_links(record, fabric, start_ports)
    if (reconfigured or revived) and record.routes_on_frr:
        settle_routing(record, fabric, case, reconfigured, revived, on_note)
    for imp in case.impair:
        impair(record, imp)
    start_clean(record, case.cc, case.dcqcn, case.receive_order)
    watch = Watch(record)
    spec = case.traffic
    probes = {f"{n}:{i}": Probe(record.node(n).netns, i).start() for n, i in case.probes}
    storm = stop = None
    if case.storm:
        host = fabric.node(case.storm.host).ports[0]
        stop = multiprocessing.get_context("fork").Event()
        storm = multiprocessing.get_context("fork").Process(
            target=hold_pfc_pause, args=(record.node(host.node).netns, host.name, host.mac, case.storm.priority, stop),
            daemon=True)
        storm.start()
    background = None
    job_done = threading.Event()
    if case.background is not None:
        # Its outcome is not the case's: it only loads the fabric (it may well stall).
        background = threading.Thread(target=_run_background, args=(record, case.background, job_done), daemon=True)
        background.start()
    report = error = training = None
    stalled = False
    sampler = Sampler(record, interval_s=sample_interval_s).start()
    typing, ran, start = None, [], queue.Queue(maxsize=1)
    if case.steps and run_step is not None:
        typing = threading.Thread(target=_typed_at_times, daemon=True,
                                  args=(case, run_step, start, job_done, record.tdf, ran,
                                        lambda: queued_at_step(switches)))
        typing.start()
    try:
        if case.training is not None:
            start.put(time.monotonic())  # a training job's steps count from its launch
            training = run_training(record, fabric, case.training, on_step=on_step)
            error, stalled = training.error, training.stalled
        else:
            report, _ = run_job(record, spec, on_progress=on_progress, on_start=start.put)
    except JobFailed as exc:
        error, stalled = str(exc), isinstance(exc, JobStalled)
    finally:
        job_done.set()
        if typing is not None:
            typing.join()
        if background is not None:
            background.join()
        series = sampler.stop()
        if storm is not None:
            stop.set()
            storm.join(5)
        probe_reports = {where: p.stop().to_json() for where, p in probes.items()}
    links = port_links(fabric)
    fidelity = watch.result(links)
    counters = read_restored(switches, case.profile or lab_profile)
    groups = {node: control.request(sock, "counters", packed=True).get("ecmp_groups", {})
              for node, sock in switches.items()}
    routes = {node: control.request(sock, "fib")["routes"] for node, sock in switches.items()}
    job_nics = [control.request(nics[h], "counters")["counters"] for h in (spec and spec.hosts) or nics if h in nics]
    host_facing = {(s.name, p.name) for s in fabric.switches for p in s.ports if fabric.node(p.peer_node).role == "host"}
    obs = switch_observations(counters, host_facing)
    if report is not None:
        obs |= job_observations(report)
    else:
        obs |= {k: float("nan") for k in ("job_time_s", "job_wall_s", "busbw_gbps", "busbw_vs_line_rate", "fct_max_s")}
        # No report: the job's own NICs say what they went through (cleared at the case's start).
        nic = [counter_snapshot(c) for c in job_nics]
        obs |= {k: float(sum(c[k] for c in nic)) for k in
                ("cnps_sent", "cnps_received", "retransmitted_packets", "retransmitted_bytes", "timeouts")}
        obs |= {"host_pause_frames": float(sum(c["pfc_pause_frames"] for c in nic)),
                "host_paused_s": sum(c["pfc_paused_s"] for c in nic) / record.tdf}
    obs |= nic_observations(job_nics) | ecmp_observations(groups) | fib_observations(routes)
    obs["stalled"] = float(stalled)
    obs["dead_link_frames"] = float(sum(sum(deadlink.dead(record.node(node).netns).values()) for node in switches))
    obs["frr_packets_lost"] = float(sum(sum(frrloss.lost(record.node(node).netns).values()) for node in switches)
                                    if record.routes_on_frr else 0)
    obs["retransmitted_bytes_per_drop"] = obs["retransmitted_bytes"] / obs["drops"] if obs["drops"] else 0.0
    obs |= probe_observations(probe_reports)
    rates_bps = {port: rate_bps for port, (rate_bps, _) in links.items()}
    uplinks = {(s.name, p.name) for s in fabric.switches if s.role == "leaf" for p in s.ports
               if fabric.node(p.peer_node).role == "spine"}
    if training is not None:
        obs |= training_observations(training, counters, fabric)
        report = training.to_json()
    # A training job's wall time is emulated time (links at rate/TDF): ÷ TDF for utilisation.
    wall_s = obs["job_wall_s"] if training is None else training.train_time_s / record.tdf
    obs |= port_observations(counters, rates_bps, uplinks, wall_s, ran[-1].queued_bytes if ran else None)
    return CaseResult(case, obs, report, error, probe_reports, series, fidelity, ran)


def _run_background(record: LabState, spec: JobSpec, done: threading.Event) -> None:
    with contextlib.suppress(JobFailed):
        run_job(record, spec, stop=done.is_set)


def wait_quiet(seconds: float = 0.2) -> None:
    """Between cases: let frames still on the (dilated) cables land before counters clear."""
    time.sleep(seconds)


# Shown for every lab beside the observations its checks name; --json carries them all.
HEADLINE = ("job_time_s", "busbw_gbps", "fct_max_s", "flow_jain", "drops", "pfc_tx_frames", "pfc_tx_frames_to_switches",
            "ecn_marked_packets", "cnps_received", "retransmitted_packets", "max_queue_depth_bytes",
            "host_paused_s")


STEPS_TITLE = "Steps (at: asked for, typed: when it ran; production-equivalent time from the job's start)"
STEP_COLUMNS = ("case", "at", "typed", "node", "command", "exit")


@dataclass
class ScenarioRun:
    lab: str
    cases: list[CaseResult]
    checks: list[CheckResult]

    def stall_checked(self) -> set[str]:
        """Cases where a stall is the lesson (a check names their `stalled`); elsewhere it fails the run."""
        return {r.check.case for r in self.checks if r.check.observation == "stalled"}

    def behind(self) -> set[str]:
        """Cases in which the agents fell behind the emulated schedule."""
        return {c.case.name for c in self.cases if c.behind}

    def inconclusive(self, result: CheckResult) -> bool:
        """A check on a case that fell behind: its outcome depends on timing the emulation did not keep."""
        return bool({result.check.case, result.check.other_case} & self.behind())

    @property
    def verdict(self) -> str:
        """passed, failed, or inconclusive (nothing failed where the emulation kept up, but
        something was judged where it did not)."""
        expected, behind = self.stall_checked(), self.behind()
        errors = [c for c in self.cases if c.error and not (c.observations.get("stalled") and c.case.name in expected)]
        if any(not r.passed and not self.inconclusive(r) for r in self.checks) or \
                any(c.case.name not in behind for c in errors):
            return "failed"
        if behind and (errors or any(self.inconclusive(r) for r in self.checks)):
            return "inconclusive"
        return "passed"

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"

    def shown(self) -> list[str]:
        named = [o for c in self.checks for o in (c.check.observation, c.check.other_observation) if o]
        headline = TRAINING_HEADLINE if all(c.case.training for c in self.cases) else HEADLINE
        return list(dict.fromkeys([*headline, *named]))

    def rows(self) -> list[list[str]]:
        return [[name, *(_fmt(c.observations.get(name, float("nan")), name) for c in self.cases)]
                for name in self.shown()]

    def check_rows(self) -> list[list[str]]:
        return [["inconclusive" if self.inconclusive(r) else "pass" if r.passed else "FAIL", r.check.text,
                 _fmt(r.left, r.check.observation), _fmt(r.right, r.check.other_observation or "")]
                for r in self.checks]

    def time_note(self, record: LabState) -> str:
        """Which figures are emulated time and which FRR's wall clock, where a case typed steps or
        the lab routes on FRR; empty elsewhere."""
        bgp = record.routes_on_frr
        if not bgp and not self.step_rows():
            return ""
        tdf = record.tdf
        note = (f"Time: the observations and the steps' times are emulated time, shown production-equivalent "
                f"(the lab's wall time ÷ TDF {tdf:,})")
        detect_s = record.routing.get("link_down_detect_s", 0.0)
        dark = (f"A shut link's far end sees it down {detect_s * 1e3:g} ms later (link_down_detect_ms, emulated "
                "time), forwarding into it until then" if detect_s else
                "A shut link's far end sees it down at once (link_down_detect_ms: 0)")
        if not bgp:
            return f"{note}. {dark}."
        rate = record.routing.get("fib_routes_per_s")
        note += f", as is each switch's FIB programming ({rate:,.0f} routes/s)" if rate else ""
        bfd_s = FRR_BFD_MULTIPLIER * FRR_BFD_INTERVAL_MS / 1e3
        return note + (f". FRR runs on the wall clock: BGP's reaction to a link going down, BFD's detection "
                       f"({FRR_BFD_MULTIPLIER} × {FRR_BFD_INTERVAL_MS} ms) and hold timers take that long in wall time, {tdf:,} times less in "
                       f"production-equivalent time (BFD's {bfd_s * 1e3:g} ms reads as {bfd_s / tdf * 1e6:g} µs). "
                       + f"{dark}; FRR's zebra sees the kernel's carrier drop at once."
                       + (f" A silently dead link stays a black hole until BFD notices: {bfd_s * 1e3:g} ms on a real "
                          f"fabric, {bfd_s / tdf * 1e6:g} µs here, so the frames it swallows and the retransmissions "
                          "they cost are a real fabric's lower bound." if self.silent_faults() else ""))

    def silent_faults(self) -> bool:
        """Whether a case killed a link's transmitter silently (impair loss 100%, or a step's that ran)."""
        return any(imp.silent for c in self.cases
                   for imp in (*c.case.impair, *(s.step.impair for s in c.steps if s.step.impair)))

    def step_rows(self) -> list[list[str]]:
        return [[c.case.name, _fmt(s.step.at_s, "at_s"), _fmt(s.typed_s, "typed_s"), s.step.node,
                 s.step.text, str(s.status)] for c in self.cases for s in c.steps]

    def to_json(self) -> dict:
        return {
            "lab": self.lab, "passed": self.passed, "verdict": self.verdict,
            "cases": [{"case": c.case.name, "title": c.case.title, "error": c.error, "observations": c.observations,
                       "job": c.job, "probes": c.probes, "fidelity": c.fidelity.to_json() if c.fidelity else None,
                       "steps": [s.to_json() for s in c.steps]}
                      for c in self.cases],
            "checks": [{"check": r.check.text, "passed": r.passed, "inconclusive": self.inconclusive(r),
                        "left": r.left, "right": r.right} for r in self.checks],
        }


def _fmt(value: float, name: str) -> str:
    if value != value:  # NaN: the case produced no such figure
        return "N/A"
    if name.endswith("_s") and value:
        for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if abs(value) >= scale:
                return f"{value / scale:.4g} {unit}"
        return f"{value * 1e9:.4g} ns"
    if value == int(value) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def run(record: LabState, scenario: Scenario, lab_profile: Path | None, fabric, *,
        on_case: Callable[[Case], object] | None = None, on_progress=None, on_step=None,
        run_step=None, on_note: Callable[[str], object] | None = None,
        bgp: Callable[[Case], Mapping[str, tuple[BgpConfig, str]]] | None = None,
        start_ports: Callable[[str, list[str]], object] | None = None) -> ScenarioRun:
    """`on_progress` hears traffic jobs' progress; `on_step(step, workers)` each step of a training job;
    `run_step(case, step)` types a case's `steps:` on their nodes; `on_note` what a case waits for;
    `bgp(case)` every switch's BGP configuration for a case, `start_ports` how a shut port starts (run_case)."""
    results = []
    for case in scenario.cases:
        if on_case is not None:
            on_case(case)
        results.append(run_case(record, case, lab_profile, fabric, on_progress=on_progress, on_step=on_step,
                                run_step=run_step, on_note=on_note, bgp=bgp, start_ports=start_ports))
        wait_quiet()
    observed = {r.case.name: r.observations for r in results}
    return ScenarioRun(record.name, results, evaluate(scenario.checks, observed))
