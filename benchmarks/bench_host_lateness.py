"""How late this machine wakes a real-time thread with nothing else to do, and how late the
agents ran their due events and what a frame cost them, with the CPUs kept awake by a PM QoS
request (rocelab.kernel.awake, as `up` does where it can), by idle-priority spinners
(ROCELAB_KEEP_AWAKE=spin) and not at all (ROCELAB_KEEP_AWAKE=0), in the same run.

    python benchmarks/bench_host_lateness.py [--seconds 5] [--sleep-us 500] [--rounds 2]

Each round, each way:
1. One thread at the agents' scheduling (SCHED_RR 1, rocelab.kernel.loop.claim_cpu) sleeps
   --sleep-us again and again for --seconds and measures how much later than asked it woke:
   p50, p99, p99.9 and the worst, the share of wake-ups later than 1 ms, and the share of the
   CPUs' time the VM's host took meanwhile (steal, /proc/stat). No agent and no frame: what
   the machine itself gives a process that only sleeps.
2. The calibration lab (rocelab.runtime.calibration) as `up` measures it: its agents' lateness
   p99 in each run of the fastest flow, and the median `up` keeps; switchd's and nicd's CPU per
   data frame at the calibration's three frame rates, and their ratio to the spinners' figures.
Several rounds show how both move with the host's load. Needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from rocelab.kernel import awake  # noqa: E402
from rocelab.kernel.loop import claim_cpu  # noqa: E402
from rocelab.kernel.netns import stop  # noqa: E402
from rocelab.runtime import calibration  # noqa: E402
from rocelab.runtime.fidelity import cpu_share, cpu_times  # noqa: E402


def wake_lateness(seconds: float, sleep_s: float) -> tuple[str, list[float], float]:
    """At the agents' scheduling: how late each sleep of `sleep_s` woke over `seconds`, and the
    host's steal share meanwhile; then back to ordinary, so the calibration is driven as `up` drives it."""
    scheduling = claim_cpu()
    late = []
    before = cpu_times()
    end = time.monotonic() + seconds
    while (start := time.monotonic()) < end:
        time.sleep(sleep_s)
        late.append(time.monotonic() - start - sleep_s)
    steal = cpu_share(before, cpu_times(), os.cpu_count() or 1).steal
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return scheduling, sorted(late), steal


WAYS = {"none": "0", "spinners": "spin", awake.PM_QOS_MODE: "1"}  # → ROCELAB_KEEP_AWAKE


@contextlib.contextmanager
def kept_awake(how: str):
    """The CPUs kept awake as `up` would keep them this way (here in this namespace); the
    environment stays set, so the calibration lab that follows is kept awake the same way."""
    os.environ[awake.KEEP_AWAKE_ENV] = WAYS[how]
    procs = [subprocess.Popen(argv) for argv in awake.commands()] if awake.wanted() else []
    try:
        yield
    finally:
        stop([p.pid for p in procs])
        for p in procs:
            p.wait()


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the thread sleeps and wakes each round")
    parser.add_argument("--sleep-us", type=float, default=500.0, help="each sleep (µs): a frame's time at TDF ~1500")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    console = Console(width=220)
    ways = [w for w in WAYS if w != awake.PM_QOS_MODE or awake.how() == awake.PM_QOS_MODE]
    table = Table(title=f"A thread sleeping {args.sleep_us:g} µs at the agents' scheduling, then the calibration's "
                  "agents, by how the CPUs are kept awake", title_justify="left")
    for column in ("round", "CPUs awake", "scheduling", "wake-ups", "p50", "p99", "p99.9", "worst", "> 1 ms", "steal",
                   "agents' p99 (runs)", "kept by up", "switchd µs/frame", "nicd µs/frame"):
        table.add_column(column, justify="right")
    ratios: list[str] = []
    for n in range(1, args.rounds + 1):
        per_frame = {}
        for how in ways:
            with kept_awake(how):
                scheduling, late, steal = wake_lateness(args.seconds, args.sleep_us / 1e6)
            flows = calibration.measure_flows(f"bench-late{n}{how[0]}")
            fastest = [f.late_p99_s for f in flows if f.hosts == calibration.FLOWS[0][0]]
            rates = flows[:len(calibration.FLOWS)]
            per_frame[how] = ([f.per_frame("leaf1")[0] for f in rates],
                              [f.nic_cores() / f.frames_per_s * 1e6 for f in rates])
            table.add_row(str(n), how, scheduling, f"{len(late):,}",
                          *(f"{quantile(late, q) * 1e3:.2f} ms" for q in (0.5, 0.99, 0.999)),
                          f"{late[-1] * 1e3:.1f} ms", f"{sum(v > 1e-3 for v in late) / len(late):.1%}", f"{steal:.1%}",
                          " / ".join(f"{v * 1e3:.2f}" for v in fastest) + " ms",
                          f"{calibration.costs_of(flows).late_p99_s * 1e3:.2f} ms",
                          " / ".join(f"{v:.0f}" for v in per_frame[how][0]),
                          " / ".join(f"{v:.0f}" for v in per_frame[how][1]))
        if awake.PM_QOS_MODE in per_frame:
            (sw, nic), (sw0, nic0) = per_frame[awake.PM_QOS_MODE], per_frame["spinners"]
            ratios.append(f"round {n}: switchd " + " / ".join(f"{a / b:.2f}x" for a, b in zip(sw, sw0))
                          + ", nicd " + " / ".join(f"{a / b:.2f}x" for a, b in zip(nic, nic0)))
    console.print(table)
    console.print(f"{os.cpu_count()} CPUs; lateness on the wall clock; `kept by up`: the median of the round's runs "
                  "(rocelab.runtime.calibration.LATENESS_RUNS); µs per data frame in the calibration's three flows, "
                  "fastest first (its 100G, 20G and 4G ports)")
    for line in ratios:
        console.print(f"CPU per frame, PM QoS against spinners, {line}")


if __name__ == "__main__":
    main()
