"""How late this machine wakes a real-time thread with nothing else to do, and how late the
agents ran their due events, with the CPUs kept awake (rocelab.kernel.awake, as `up` does) and
without (ROCELAB_KEEP_AWAKE=0), in the same run.

    python benchmarks/bench_host_lateness.py [--seconds 5] [--sleep-us 500] [--rounds 2]

Each round, each way:
1. One thread at the agents' scheduling (SCHED_RR 1, rocelab.kernel.loop.claim_cpu) sleeps
   --sleep-us again and again for --seconds and measures how much later than asked it woke:
   p50, p99, p99.9 and the worst, the share of wake-ups later than 1 ms, and the share of the
   CPUs' time the VM's host took meanwhile (steal, /proc/stat). No agent and no frame: what
   the machine itself gives a process that only sleeps.
2. The calibration lab (rocelab.runtime.calibration) as `up` measures it: its agents' lateness
   p99 in each run of the fastest flow, and the median `up` keeps.
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


@contextlib.contextmanager
def spinners(on: bool):
    """The CPUs kept awake as `up` keeps them (here in this namespace), or not."""
    procs = [subprocess.Popen(argv) for argv in awake.commands()] if on else []
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
    console = Console()
    table = Table(title=f"A thread sleeping {args.sleep_us:g} µs at the agents' scheduling, then the calibration's "
                  "agents; the CPUs kept awake or not", title_justify="left")
    for column in ("round", "CPUs awake", "scheduling", "wake-ups", "p50", "p99", "p99.9", "worst", "> 1 ms", "steal",
                   "agents' p99 (runs)", "kept by up"):
        table.add_column(column, justify="right")
    for n in range(1, args.rounds + 1):
        for on in (False, True):
            with spinners(on):
                scheduling, late, steal = wake_lateness(args.seconds, args.sleep_us / 1e6)
            os.environ[awake.KEEP_AWAKE_ENV] = "1" if on else "0"  # the calibration lab's own spinners
            flows = calibration.measure_flows(f"bench-late{n}{int(on)}")
            fastest = [f.late_p99_s for f in flows if (f.src, f.dst) == calibration.FLOWS[0][:2]]
            table.add_row(str(n), "yes" if on else "no", scheduling, f"{len(late):,}",
                          *(f"{quantile(late, q) * 1e3:.2f} ms" for q in (0.5, 0.99, 0.999)),
                          f"{late[-1] * 1e3:.1f} ms", f"{sum(v > 1e-3 for v in late) / len(late):.1%}", f"{steal:.1%}",
                          " / ".join(f"{v * 1e3:.2f}" for v in fastest) + " ms",
                          f"{calibration.costs_of(flows).late_p99_s * 1e3:.2f} ms")
    console.print(table)
    console.print(f"{os.cpu_count()} CPUs; lateness on the wall clock; `kept by up`: the median of the round's runs "
                  "(rocelab.runtime.calibration.LATENESS_RUNS)")


if __name__ == "__main__":
    main()
