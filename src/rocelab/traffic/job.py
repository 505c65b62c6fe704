"""Jobs: a pattern run on a live lab, orchestrated from the CLI process.

    resolve  the lab's hosts and NIC backend, the spec's hosts, the pattern's plan
    prepare  every host's agent creates its QPs (and region) for its peers
    connect  QPN, PSN, address, VA and R_Key exchanged out of band; plans loaded
    start    one CLOCK_MONOTONIC instant for all (every namespace reads the same clock)
    watch    progress polled until every host is done; a host that fails, or a job
             that moves no byte for stall_timeout_s, ends the job with JobFailed
    collect  every host's records → the report (rocelab.traffic.summary)
    end      QPs destroyed on every host, whatever happened

The agents are nicd (nic: emulated, started by `up`) or the verbs agents (nic: verbs),
which the job starts itself and stops at the end. Nothing here prints: progress goes to
the `on_progress` callback, the report is returned.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Mapping

from rocelab.engines import AgentProcess, builtin_engines
from rocelab.engines.netns import AgentFailed, wait_ready
from rocelab.kernel import control
from rocelab.model.kinds import VERBS, builtin_nic_backends
from rocelab.model.lab import load_lab
from rocelab.roce.verbs import require_device, require_pyverbs
from rocelab.errors import InputError, Problem
from rocelab.registry import Registry
from rocelab.runtime.fidelity import Watch, record_links
from rocelab.engines.state import LabState
from rocelab.traffic.patterns import Pattern, PatternError, Plan, builtin_patterns
from rocelab.traffic.summary import build_report
from rocelab.traffic.calc import BITS_PER_BYTE
from rocelab.traffic.runner import DONE, FAILED, GAP, WAITING
from rocelab.traffic.spec import JobSpec

POLL_S = 0.2
STALL_ROUNDS = 4  # _stall_s
RECOVERY_TIMEOUTS = 4  # _stall_s: a lost retransmission waits its doubled timeout, 1 + 2 of them, and one more
START_MARGIN_S = 0.2  # from the last job_start request to the common start instant
REQUEST_TIMEOUT_S = 30.0  # job_result of a long job is a few MB of JSON
PEAK_WINDOW = 0.05  # bw: the peak is the best rate over a twentieth of the run


class JobFailed(RuntimeError):
    """The job ran and did not finish: a QP failed, or nothing moved for too long."""


class JobStalled(JobFailed):
    """Nothing moved for the job's stall_timeout: every QP alive, every byte stuck (a PFC
    storm's signature), as opposed to a QP that failed."""


class JobStopped(JobFailed):
    """The caller asked the job to stop before it finished (a background job, say)."""


@dataclass(frozen=True)
class Progress:
    elapsed_s: float
    bytes_done: int  # sent and acknowledged + received, over all hosts
    bytes_total: int
    iterations_done: int  # by the slowest host
    iterations: int
    hosts: Mapping[str, dict]  # host → its runner status
    busbw_factor_bits: float = 0.0  # size × bus factor × 8: the bits one iteration counts as busbw

    @property
    def busbw_bps(self) -> float:
        """busbw so far (emulated): the share of the job's bytes moved, counted as iterations, over
        the time since the start (compute gaps included, unlike the report's per-iteration busbw)."""
        if self.elapsed_s <= 0 or self.bytes_total <= 0:
            return 0.0
        return self.busbw_factor_bits * self.iterations * self.bytes_done / self.bytes_total / self.elapsed_s


def lab_hosts(record: LabState) -> dict[str, str]:
    """Host name → its NIC's address, in lab order."""
    return {n.name: n.interfaces[0].address.split("/")[0] for n in record.nodes if n.role == "host" and n.interfaces}


@contextlib.contextmanager
def _agents(record: LabState, hosts: tuple[str, ...]) -> Iterator[dict[str, Path]]:
    backend = builtin_nic_backends().get(record.nic)
    if backend.agent is not None and not backend.per_job:
        yield {h: control.socket_path(record.name, h) for h in hosts}
    elif backend.agent == VERBS:
        with _verbs_agents(record, hosts) as sockets:
            yield sockets
    else:
        raise InputError([Problem(record.name, "", "has no NIC on its hosts (nic: none)",
                                  "set `nic: emulated` (or `nic: verbs`) in the lab's lab.yml, then "
                                  "`invoke down` and `invoke up` it again")])


@contextlib.contextmanager
def _verbs_agents(record: LabState, hosts: tuple[str, ...]) -> Iterator[dict[str, Path]]:
    """A verbs agent in each host's namespace for the length of a job; their sockets. The
    netns engine starts them as it starts nicd (same configuration file, socket and log)."""
    require_device(require_pyverbs())  # fail here, once, before any process starts
    lab = replace(load_lab(Path(record.source).parent.name), name=record.name, tdf=record.tdf)
    engine = builtin_engines().get(record.engine)
    procs: dict[str, AgentProcess] = {}
    try:
        for host in hosts:
            procs[host] = engine.spawn_agent(lab, lab.fabric.node(host), record.node(host).netns, VERBS.module)
        for host, proc in procs.items():
            wait_ready(record.name, host, VERBS.module, proc)
        yield {h: control.socket_path(record.name, h) for h in hosts}
    except AgentFailed as exc:
        raise JobFailed(str(exc)) from None
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


def make_plan(record: LabState, spec: JobSpec, patterns: Registry[Pattern] | None = None) -> Plan:
    """The spec's pattern over the spec's hosts (default: every host of the lab)."""
    patterns = patterns or builtin_patterns()
    known = lab_hosts(record)
    hosts = spec.hosts or tuple(known)
    where = "hosts" if spec.source != "command line" else "--hosts"
    unknown = [h for h in hosts if h not in known]
    if unknown:
        raise InputError([Problem(spec.source, where, f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} "
                                  f"not a host of {record.name}", f"hosts: {', '.join(known)}")])
    try:
        return patterns.get(spec.pattern).plan(hosts, spec.size_bytes, spec.options)
    except PatternError as exc:
        raise InputError([Problem(spec.source, "", str(exc))]) from None


def _ask(sockets: Mapping[str, Path], host: str, op: str, **fields) -> dict:
    try:
        return control.request(sockets[host], op, timeout_s=REQUEST_TIMEOUT_S, **fields)
    except (OSError, RuntimeError) as exc:
        raise JobFailed(f"{host}: {exc}") from None


def run_job(record: LabState, spec: JobSpec, *, on_progress: Callable[[Progress], None] | None = None,
            record_messages: bool = False, clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep,
            stop: Callable[[], bool] = lambda: False,
            on_start: Callable[[float], object] | None = None) -> tuple[dict, dict[str, dict]]:
    """Run `spec` on the lab; (report, each host's runner result). Raises InputError for a
    spec the lab cannot run, JobFailed for a job that did not finish (JobStalled when nothing
    moved for its stall timeout, JobStopped once `stop()` is true). `on_start(t)` hears the
    `clock()` time at which every host starts sending, once their QPs are connected."""
    plan = make_plan(record, spec)
    hosts = plan.hosts
    job_id = f"{os.getpid()}-{time.time_ns()}"
    with _agents(record, hosts) as sockets:
        try:
            prepared = {}
            for h in hosts:
                prepared[h] = _ask(sockets, h, "job_prepare", job=job_id, steps=[s.to_json() for s in plan.steps[h]],
                                   peers={p: spec.qps for p in plan.peers(h)},
                                   iterations=spec.iterations, compute_gap_s=spec.compute_gap_s * record.tdf,
                                   message_bytes=spec.message_bytes, verb=spec.verb, record_messages=record_messages,
                                   max_rd_atomic=spec.outstanding_reads)
            for h in hosts:
                _ask(sockets, h, "job_connect", job=job_id, peers={
                    p: {"ip": prepared[p]["ip"], "qps": prepared[p]["qps"][h], "region": prepared[p]["region"]}
                    for p in prepared[h]["qps"]})
            watch = Watch(record)
            start_at = clock() + START_MARGIN_S
            for h in hosts:
                _ask(sockets, h, "job_start", job=job_id, start_at=start_at)
            if on_start is not None:
                on_start(start_at)
            _watch(sockets, hosts, job_id, spec, start_at, plan.size_bytes * plan.bus_factor * BITS_PER_BYTE,
                   on_progress, clock, sleep, stop, _stall_s(spec, plan, prepared))
            fidelity = watch.result(record_links(record))
            results = {h: _ask(sockets, h, "job_result", job=job_id) for h in hosts}
        finally:
            for h in hosts:
                with contextlib.suppress(JobFailed):
                    _ask(sockets, h, "job_end", job=job_id)
    line_rate_bps = min(prepared[h]["port_rate_bps"] for h in hosts)
    report = build_report(lab=record.name, plan=plan, results=results, tdf=record.tdf, line_rate_bps=line_rate_bps,
                          iterations=spec.iterations, qps=spec.qps, verb=spec.verb,
                          message_bytes=spec.message_bytes, compute_gap_s=spec.compute_gap_s * record.tdf)
    return {**report, "fidelity": fidelity.to_json()}, results


def _stall_s(spec: JobSpec, plan: Plan, prepared: Mapping[str, dict]) -> float:
    """How long the job may move nothing before it counts as stalled: its stall timeout, or, where
    longer, STALL_ROUNDS times what a host's first messages take on its own port. Progress is
    counted in whole messages, and a host's QPs share its port (at a high TDF, 16 QPs of 1 MiB
    at 8 Mb/s finish their first messages together after 17 s); an ECMP collision or PFC may
    halve that rate again. And never shorter than the NICs' own loss recovery, RECOVERY_TIMEOUTS
    of their (dilated) retransmission timeout: at TDF 25000 nicd's 1 ms is 25 s, and a
    retransmission lost again waits 50 s, which is recovery, not a stall."""
    first_round_s = max(len(plan.peers(h)) * spec.qps * spec.message_bytes * BITS_PER_BYTE
                           / prepared[h]["port_rate_bps"] for h in plan.hosts)
    recovery_s = max(prepared[h].get("retransmit_timeout_s", 0.0) for h in plan.hosts) * RECOVERY_TIMEOUTS
    return max(spec.stall_timeout_s, STALL_ROUNDS * first_round_s, recovery_s)


def _watch(sockets: Mapping[str, Path], hosts: tuple[str, ...], job_id: str, spec: JobSpec, start_at: float,
           busbw_factor_bits: float, on_progress: Callable[[Progress], None] | None, clock: Callable[[], float],
           sleep: Callable[[float], None], stop: Callable[[], bool], stall_s: float) -> None:
    last_moved = clock()
    last_mark = None
    while True:
        sleep(POLL_S)
        status = {h: _ask(sockets, h, "job_status", job=job_id) for h in hosts}
        now = clock()
        failed = [h for h, s in status.items() if s["state"] == FAILED]
        if failed:
            raise JobFailed("; ".join(f"{h}: {status[h]['error']}" for h in failed) + _waiting(status))
        done = sum(s["bytes_sent"] + s["bytes_received"] for s in status.values())
        total = sum(s["bytes_to_send"] + s["bytes_to_receive"] for s in status.values())
        mark = (done, tuple(s["iteration"] for s in status.values()))
        idle = any(s["state"] in (WAITING, GAP) for s in status.values())
        if mark != last_mark or idle:
            last_mark, last_moved = mark, now
        if on_progress is not None:
            on_progress(Progress(max(0.0, now - start_at), done, total,
                                 min(s["iteration"] for s in status.values()), spec.iterations, status,
                                 busbw_factor_bits))
        if all(s["state"] == DONE for s in status.values()):
            return
        if stop():
            raise JobStopped(f"stopped ({done:,} of {total:,} bytes moved)")
        if now - last_moved > stall_s:
            raise JobStalled(f"no progress for {stall_s:g} s ({done:,} of {total:,} bytes moved)"
                            + _waiting(status))


def _waiting(status: Mapping[str, dict]) -> str:
    stuck = [f"{h} waits in {s['waiting_for']}" for h, s in status.items() if s.get("waiting_for")]
    return ("; " + "; ".join(stuck)) if stuck else ""


# ---- bw: perftest's ib_write_bw in spirit -------------------------------------------------

def bw_spec(src: str, dst: str, *, message_bytes: int, qps: int, messages: int, verb: str = "write") -> JobSpec:
    """One elephant flow of `messages` messages of `message_bytes`, all posted at once (the
    runner keeps its tx depth outstanding per QP)."""
    return JobSpec(pattern="elephant", hosts=(src, dst), size_bytes=message_bytes * messages, iterations=1,
                   qps=qps, message_bytes=message_bytes, verb=verb)


def bw_summary(report: Mapping, sender: Mapping, message_bytes: int) -> dict:
    """perftest's columns from the progress samples of the host that posted the work ([time,
    bytes, messages] acknowledged, or read, since the previous one): average bandwidth, peak
    bandwidth (the best window lasting at least PEAK_WINDOW of the run: ACKs are coalesced, so
    single completions come in bursts), message rate."""
    tdf = report["tdf"]
    samples = sender["messages"]
    start = report["per_iteration"][0]["start_s"] if report["per_iteration"] else 0.0
    times, done_bytes = [start], [0]
    for t, n, _ in samples:
        times.append(t)
        done_bytes.append(done_bytes[-1] + n)
    messages = sum(m for _, _, m in samples)
    seconds = max(times[-1] - start, 1e-12)
    average = 8 * done_bytes[-1] / seconds
    peak, j = 0.0, 0
    for k in range(1, len(times)):
        while times[k] - times[j + 1] >= PEAK_WINDOW * seconds:
            j += 1
        if times[k] - times[j] >= PEAK_WINDOW * seconds:
            peak = max(peak, 8 * (done_bytes[k] - done_bytes[j]) / (times[k] - times[j]))
    peak = max(peak, average)
    return {"message_bytes": message_bytes, "messages": messages, "qps": report["qps"], "verb": report["verb"],
            "time_s": {"emulated": seconds, "production": seconds / tdf},
            "bw_average_bps": {"emulated": average, "production": average * tdf},
            "bw_peak_bps": {"emulated": peak, "production": peak * tdf},
            "msg_rate_pps": {"emulated": messages / seconds, "production": messages / seconds * tdf},
            "line_rate_bps": report["line_rate_bps"], "bw_vs_line_rate": average / report["line_rate_bps"]["emulated"],
            "counters": report["total"].get("counters")}


def run_bw(record: LabState, src: str, dst: str, *, message_bytes: int, qps: int, duration_s: float,
           on_progress: Callable[[Progress], None] | None = None, verb: str = "write",
           outstanding_reads: int | None = None) -> dict:
    """Stream from src to dst for about `duration_s` of wall time at line rate: src WRITEs, or
    with verb "read" dst READs from src (ib_read_bw, run on dst), `outstanding_reads` at a time
    per QP (None: the NIC's max_rd_atomic)."""
    rate_bps = _port_rate(record, src)
    messages = max(1, round(duration_s * rate_bps / 8 / message_bytes))
    spec = replace(bw_spec(src, dst, message_bytes=message_bytes, qps=qps, messages=messages, verb=verb),
                   source="bw", outstanding_reads=outstanding_reads)
    report, results = run_job(record, spec, on_progress=on_progress, record_messages=True)
    poster = dst if verb == "read" else src
    return {"src": src, "dst": dst, **bw_summary(report, results[poster], message_bytes),
            "fidelity": report["fidelity"], "job": report}


def run_latency(record: LabState, src: str, dst: str, *, message_bytes: int, iterations: int,
                verb: str = "write") -> dict:
    """perftest's ib_write_lat: `iterations` round trips of one RDMA WRITE each way, the
    latency half of each round trip as src sees it; or ib_read_lat (verb "read"): `iterations`
    RDMA READs by src of dst's region, one at a time, the latency each whole round trip (as
    perftest reports a READ's). Latencies in emulated seconds, sorted, and the emulation's timing
    resolution (`resolution_s`: how late an agent may run an event)."""
    _port_rate(record, src)
    if verb == "read":  # dst's data to src, pulled by src: an elephant from dst, one message an iteration
        spec = JobSpec(pattern="elephant", hosts=(dst, src), size_bytes=message_bytes, iterations=iterations,
                       message_bytes=message_bytes, verb="read", source="lat")
    else:
        spec = JobSpec(pattern="pingpong", hosts=(src, dst), size_bytes=message_bytes, iterations=iterations,
                       message_bytes=message_bytes, verb="write", source="lat")
    report, results = run_job(record, spec)
    share = 1 if verb == "read" else 2
    latency = sorted((i["end_s"] - i["start_s"]) / share for i in results[src]["iterations"])
    return {"src": src, "dst": dst, "verb": verb, "message_bytes": message_bytes, "iterations": len(latency),
            "latency_s": latency, "tdf": record.tdf, "fidelity": report["fidelity"],
            "resolution_s": record.fidelity_bound_s}


def _port_rate(record: LabState, host: str) -> float:
    if host not in lab_hosts(record):
        raise InputError([Problem("bw", host, f"is not a host of {record.name}",
                                  f"hosts: {', '.join(lab_hosts(record))}")])
    with _agents(record, (host,)) as sockets:
        return float(_ask(sockets, host, "ping")["port_rate_bps"])
