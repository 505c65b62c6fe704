"""What watching a lab costs it: the run's sampler, which asks every agent for its counters while
a case runs, against the way it polled before 2026-11-27, same lab, same run.

    python benchmarks/bench_sampling.py [--lab lab-placement] [--tdf 15000] [--polls 100] [--rounds 2]

1. One poll of the idle lab (`read_lab`: every agent's counters): the agents' CPU and the
   reader's, with a connection per request (before) and with connections kept open
   (rocelab.kernel.control.Connections, the sampler's now).
2. The lab's first case's traffic (an 8-rank ring AllReduce in lab-placement) under the sampler
   as it runs now (kept connections, polls spaced POLL_SPACING times their own duration, at
   least 50 ms apart) and as before (a connection per request, every 50 ms): the agents' CPU
   over the job, this process's (the sampler's thread and the job's orchestration, which is the
   same both ways), the polls taken, and how late the agents ran their due events (p99, wall).
   Alternating, --rounds times.
Needs root. The figures are this machine's; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from rocelab.engines import builtin_engines  # noqa: E402
from rocelab.kernel.control import Connections  # noqa: E402
from rocelab.model.lab import load_lab  # noqa: E402
from rocelab.model.tdf import TdfChoice  # noqa: E402
from rocelab.runtime import timeseries  # noqa: E402
from rocelab.runtime.fidelity import cpu_ns, timings  # noqa: E402
from rocelab.runtime.readings import read_lab  # noqa: E402
from rocelab.traffic.job import run_job  # noqa: E402


def agents_cpu_s(pids: set[int]) -> float:
    return sum(cpu_ns(pid) for pid in pids) / 1e9


def per_poll(record, pids, polls: int, connections: Connections | None) -> tuple[float, float]:
    """(agents' CPU ms, reader's CPU ms) per poll of every agent."""
    agents, reader = agents_cpu_s(pids), time.process_time()
    for _ in range(polls):
        read_lab(record, connections=connections)
    return (agents_cpu_s(pids) - agents) / polls * 1e3, (time.process_time() - reader) / polls * 1e3


def under_sampler(record, pids, job, now: bool) -> dict:
    """The job with the sampler as it runs now, or as it polled before."""
    spacing = timeseries.POLL_SPACING
    if not now:
        timeseries.POLL_SPACING = 0
    before = read_lab(record).agents
    agents, reader = agents_cpu_s(pids), time.process_time()
    sampler = timeseries.Sampler(record, read=None if now else (lambda: read_lab(record).agents)).start()
    try:
        report, _ = run_job(record, job)
    finally:
        series = sampler.stop()
        timeseries.POLL_SPACING = spacing
    spent, read_s = agents_cpu_s(pids) - agents, time.process_time() - reader
    late = max((t.estimate_s(0.99) for t in timings(before, read_lab(record).agents) if t.events), default=0.0)
    return {"agents_s": spent, "reader_s": read_s, "polls": len(series.t_s), "late_p99_ms": late * 1e3,
            "job_s": report["total"]["time_s"]["emulated"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="lab-placement")
    parser.add_argument("--tdf", type=int, default=15000)
    parser.add_argument("--polls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    lab = replace(load_lab(args.lab), tdf=args.tdf, tdf_how="option")
    case = lab.scenario.cases[0]
    job = case.traffic
    engine = builtin_engines().get("netns")
    record = engine.up(lab, TdfChoice(args.tdf, "option", 0.0, "bench_sampling"))
    try:
        pids = {p["pid"] for p in record.processes}
        print(f"{args.lab} at TDF {args.tdf}: {len(record.processes)} agents' sockets in {len(pids)} processes")
        print("\n1. one poll of every agent, idle lab (agents' CPU / reader's CPU, ms)")
        for _ in range(args.rounds):
            before = per_poll(record, pids, args.polls, None)
            with Connections() as kept:
                now = per_poll(record, pids, args.polls, kept)
            print(f"   a connection per request {before[0]:5.1f} / {before[1]:5.1f}   kept {now[0]:5.1f} / {now[1]:5.1f}"
                  f"   ratio {now[0] / before[0]:.2f} / {now[1] / before[1]:.2f}")
        print(f"\n2. case {case.name}'s traffic ({job.pattern}, {len(job.hosts)} hosts) under the sampler")
        runs: dict[bool, list[dict]] = {True: [], False: []}
        for _ in range(args.rounds):
            for now in (False, True):
                r = under_sampler(record, pids, job, now)
                runs[now].append(r)
                print(f"   {'now   ' if now else 'before'} agents {r['agents_s']:5.2f} s CPU, sampler + job {r['reader_s']:5.2f} s,"
                      f" {r['polls']:4d} polls, lateness p99 {r['late_p99_ms']:.2f} ms, job {r['job_s']:.1f} s")
        for key, label in (("agents_s", "agents' CPU"), ("reader_s", "sampler's and job's CPU")):
            ratio = statistics.median(n[key] for n in runs[True]) / statistics.median(b[key] for b in runs[False])
            print(f"   {label}: now ÷ before {ratio:.2f}")
    finally:
        engine.down(record)


if __name__ == "__main__":
    main()
