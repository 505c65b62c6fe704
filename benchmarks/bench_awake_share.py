"""What the keep-awake spinners (rocelab.kernel.awake) take from an ordinary process: none, as
`up` starts them now (their session's group at nice 19), and as it started them before (the
group at nice 0), in the same run.

    python benchmarks/bench_awake_share.py [--rounds 3]

`up` starts each spinner in a session of its own. Where the kernel groups processes by session
(CONFIG_SCHED_AUTOGROUP), the CPUs are first shared between the sessions' groups by the groups'
nice, and only then by policy inside each group, so SCHED_IDLE alone does not make a spinner
yield to the processes of other sessions. Each round, each way: one ordinary process of this
session runs a fixed CPU-bound loop, and `python -m rocelab --help` starts (the price of every
command a user types); the figures are wall-clock seconds and the loop's wall time over its CPU
time (1.0: the spinners took nothing from it). Needs root (the groups' nice).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from rocelab.kernel import awake  # noqa: E402
from rocelab.kernel.netns import stop  # noqa: E402

LOOP = "import time; c = time.process_time(); x = sum(range(30_000_000)); print(time.process_time() - c)"
SETTLE_S = 0.5  # a spinner sets its group's nice as it starts


def spinners(group_nice: int | None) -> list[subprocess.Popen]:
    """One spinner per CPU in a session of its own, as the netns engine starts them; the
    group's nice then forced to `group_nice` (None: left as the spinner set it)."""
    procs = [subprocess.Popen(argv, start_new_session=True) for argv in awake.commands()]
    time.sleep(SETTLE_S)
    if group_nice is not None:
        for p in procs:
            Path(f"/proc/{p.pid}/autogroup").write_text(f"{group_nice}\n")
    return procs


def measure() -> tuple[float, float, float]:
    """(the loop's wall s, its CPU s, `rocelab --help`'s wall s)."""
    start = time.monotonic()
    cpu_s = float(subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True, check=True).stdout)
    loop_wall_s = time.monotonic() - start
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "rocelab", "--help"], capture_output=True, check=True, cwd=ROOT)
    return loop_wall_s, cpu_s, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not Path(awake.AUTOGROUP).exists():
        sys.exit("bench_awake_share: this kernel has no autogroups (/proc/self/autogroup): nothing to compare")
    table = Table(title="An ordinary process beside the keep-awake spinners", title_justify="left")
    for column in ("round", "spinners", "loop wall", "loop CPU", "wall / CPU", "rocelab --help"):
        table.add_column(column, justify="right")
    for n in range(1, args.rounds + 1):
        for label, nice in (("none", None), ("group nice 0 (before)", 0), ("group nice 19 (up now)", None)):
            procs = spinners(nice) if label != "none" else []
            try:
                wall_s, cpu_s, help_s = measure()
            finally:
                stop([p.pid for p in procs])
                for p in procs:
                    p.wait()
            table.add_row(str(n), label, f"{wall_s:.2f} s", f"{cpu_s:.2f} s", f"{wall_s / cpu_s:.2f}", f"{help_s:.2f} s")
    Console().print(table)


if __name__ == "__main__":
    main()
