"""Keep this machine's CPUs from sleeping while a lab runs.

    python -m rocelab.kernel.awake CPU      (started by the engine, one per CPU, never by hand)

On a virtual machine a CPU with nothing to run halts, and the hypervisor gives its physical
core to something else; the next timer or frame must wait for the host to schedule the vCPU
again, a millisecond or more when the host is busy. The agents sleep between frames, so each of
their wake-ups paid that. Measured on this project's VM (2 vCPUs, 2026-11-26,
benchmarks/bench_host_lateness.py): a real-time thread sleeping 500 µs woke up to 2-7 ms
late, p99 0.13-0.71 ms, with the machine idle, and p99 0.06-0.08 ms, never later than 3 ms,
beside two busy processes. This process is such a busy process that takes nothing from anyone:
it spins at SCHED_IDLE, pinned to one CPU, so every other process (ordinary ones included) and
every agent (real-time, rocelab.kernel.loop.claim_cpu) runs ahead of it at once, inside the
VM, without the host's help. SCHED_IDLE alone is not enough where the kernel groups processes
by session (CONFIG_SCHED_AUTOGROUP, on by default in Debian's kernel and this VM's): the
scheduler first shares the CPUs fairly between sessions' groups, then by policy inside each, so
a spinner started in a session of its own took half a CPU from every ordinary process of other
sessions (`rocelab run`, pytest, FRR, the training workers): a CPU-bound loop took 2.07-2.08
times its CPU time on the wall clock beside the spinners, 1.05-1.07 once their groups were at
nice 19, 1.04 with none (2026-11-26, benchmarks/bench_awake_share.py). So each spinner puts its
group there. It lives in one of the lab's namespaces, so `down` stops it with
the agents; ROCELAB_KEEP_AWAKE=0 starts none (a laptop on battery, say: labs then need higher
TDFs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

KEEP_AWAKE_ENV = "ROCELAB_KEEP_AWAKE"
AUTOGROUP = "/proc/self/autogroup"  # absent where the kernel has no autogroups: nothing to lower then
AUTOGROUP_NICE = 19  # the lowest weight a session's group can have


def wanted() -> bool:
    return os.environ.get(KEEP_AWAKE_ENV, "1") != "0"


def commands() -> list[list[str]]:
    """One spinner's argv per CPU this process may run on."""
    return [[sys.executable, "-m", __name__, str(cpu)] for cpu in sorted(os.sched_getaffinity(0))]


def spin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if os.path.exists(AUTOGROUP):
        Path(AUTOGROUP).write_text(f"{AUTOGROUP_NICE}\n")
    while True:
        pass


if __name__ == "__main__":
    spin(int(sys.argv[1]))
