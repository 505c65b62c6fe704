"""What `invoke dashboard` costs the agents: their CPU with and without a dashboard polling.

    python benchmarks/bench_dashboard.py [--rounds 3] [--idle 10]

Brings lab-pfc up (in a state folder of its own), then alternates rounds without and with
a real `rocelab dashboard` serving and a client reading its event stream (5 frames a
second, each a counters request to every agent). Each round measures the agents' CPU
(switchd and every nicd: utime + stime from /proc) over an idle spell and over one
`traffic incast-4to1`. Prints CPU seconds per round, the extra the dashboard adds (per
wall second idle: share of a core; during traffic: against the same round without), and
the dashboard process's own CPU. Needs root; run under the live-test lock.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from bench_switchd import cpu_s  # noqa: E402  (utime + stime of a pid, from /proc)
from rocelab.engines import state as lab_state  # noqa: E402

CLI = [sys.executable, "-m", "rocelab"]
LAB = "lab-pfc"


def agents_cpu_s() -> float:
    return sum(cpu_s(p["pid"]) for p in lab_state.load(LAB).processes)


def measured(action) -> tuple[float, float]:
    """(agents' CPU seconds, wall seconds) over `action()`."""
    cpu, wall = agents_cpu_s(), time.monotonic()
    action()
    return agents_cpu_s() - cpu, time.monotonic() - wall


def incast() -> None:
    subprocess.run([*CLI, "traffic", "incast-4to1", "--lab", LAB, "--report-dir", "none"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Dashboard:
    """A real `rocelab dashboard` and one client reading its event stream."""

    def __enter__(self) -> "Dashboard":
        self.proc = subprocess.Popen([*CLI, "dashboard", LAB, "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.url = self.proc.stdout.readline().split()[1]
        self.events = 0
        self.stop = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        time.sleep(1.0)  # the first frames
        self.cpu_start = cpu_s(self.proc.pid)
        return self

    def _read(self) -> None:
        with urllib.request.urlopen(f"{self.url}events") as stream:
            for line in stream:
                if self.stop.is_set():
                    return
                self.events += line.startswith(b"data:")

    def __exit__(self, *exc: object) -> None:
        self.cpu = cpu_s(self.proc.pid) - self.cpu_start
        self.stop.set()
        self.proc.terminate()
        self.proc.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle lab per round")
    args = parser.parse_args()
    subprocess.run([*CLI, "up", LAB], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    rows = {False: [], True: []}
    try:
        incast()  # warm-up
        for r in range(args.rounds):
            for with_dashboard in (False, True):
                if with_dashboard:
                    with Dashboard() as dash:
                        idle = measured(lambda: time.sleep(args.idle))
                        busy = measured(incast)
                        time.sleep(0.5)
                    extra = f"dashboard: {dash.events} events, its own CPU {dash.cpu:.2f} s"
                else:
                    idle = measured(lambda: time.sleep(args.idle))
                    busy = measured(incast)
                    extra = ""
                rows[with_dashboard].append((idle, busy))
                print(f"round {r + 1} {'with   ' if with_dashboard else 'without'}: agents idle {idle[0]:.3f} s CPU "
                      f"over {idle[1]:.1f} s; incast {busy[0]:.2f} s CPU over {busy[1]:.1f} s  {extra}")
    finally:
        subprocess.run([*CLI, "down", LAB], cwd=ROOT, stdout=subprocess.DEVNULL)

    def idle_share(with_dashboard: bool) -> float:
        return statistics.median(cpu / wall for (cpu, wall), _ in rows[with_dashboard])

    def busy_cpu(with_dashboard: bool) -> float:
        return statistics.median(cpu for _, (cpu, _) in rows[with_dashboard])

    print(f"idle lab: agents use {100 * idle_share(False):.2f}% of a core without, {100 * idle_share(True):.2f}% "
          f"with the dashboard: +{100 * (idle_share(True) - idle_share(False)):.2f} points of a core (median)")
    print(f"incast-4to1: agents' CPU {busy_cpu(False):.2f} s without, {busy_cpu(True):.2f} s with: "
          f"{100 * (busy_cpu(True) / busy_cpu(False) - 1):+.1f}% (median)")


if __name__ == "__main__":
    main()
