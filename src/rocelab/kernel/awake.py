"""Keep this machine's CPUs from sleeping while a lab runs.

    python -m rocelab.kernel.awake pm-qos   (started by the engine, never by hand)
    python -m rocelab.kernel.awake CPU      (where the PM QoS device cannot be written: one per CPU)

On a virtual machine a CPU with nothing to run halts, and the hypervisor gives its physical
core to something else; the next timer or frame must wait for the host to schedule the vCPU
again, a millisecond or more when the host is busy. The agents sleep between frames, so each of
their wake-ups paid that. Measured on this project's VM (2 vCPUs, 2026-11-26,
benchmarks/bench_host_lateness.py): a real-time thread sleeping 500 µs woke up to 2-7 ms
late, p99 0.13-0.71 ms, with the machine idle, and p99 0.06-0.08 ms, never later than 3 ms,
beside two busy processes.

The kernel's own way to keep a CPU from halting is a PM QoS request: while some process holds
/dev/cpu_dma_latency open with 0 written to it, cpuidle picks only its polling state, and an idle
CPU spins in the idle task. That also spares each wake-up its inter-processor interrupt: a CPU
polling in its idle task is woken by a flag, a CPU running anything else (a spinner below) by an
interrupt, which on a nested VM costs tens of microseconds at both ends. Measured on this VM
(2026-11-27, the calibration lab at ~2,400 data frames/s, two rounds of `bench_host_lateness.py`):
switchd's CPU per frame 83-84 µs with the request against 119-121 µs with spinners (0.69-0.70x),
nicd's 96-100 against 119-127 µs (0.75-0.84x), the agents' lateness p99 0.18-0.20 ms against
0.22-0.25 ms. So `up` holds one request for the lab (`pm-qos`), in a process that only sleeps.

Where the device cannot be written (no PM QoS, no root), or ROCELAB_KEEP_AWAKE=spin, one busy
process per CPU that takes nothing from anyone: it spins at SCHED_IDLE, pinned to one CPU, so
every other process (ordinary ones included) and every agent (real-time,
rocelab.kernel.loop.claim_cpu) runs ahead of it at once, inside the VM, without the host's help.
SCHED_IDLE alone is not enough where the kernel groups processes by session
(CONFIG_SCHED_AUTOGROUP, on by default in Debian's kernel and this VM's): the scheduler first
shares the CPUs fairly between sessions' groups, then by policy inside each, so a spinner
started in a session of its own took half a CPU from every ordinary process of other sessions
(`rocelab run`, pytest, FRR, the training workers): a CPU-bound loop took 2.07-2.08 times its
CPU time on the wall clock beside the spinners, 1.05-1.07 once their groups were at nice 19,
1.04 with none (2026-11-26, benchmarks/bench_awake_share.py). So each spinner puts its group
there.

Either lives in one of the lab's namespaces, so `down` stops it with the agents;
ROCELAB_KEEP_AWAKE=0 starts none (a laptop on battery, say: labs then need higher TDFs).
"""

from __future__ import annotations

import os
import signal
import struct
import sys
from pathlib import Path

KEEP_AWAKE_ENV = "ROCELAB_KEEP_AWAKE"  # 0: none; spin: spinners even where PM QoS is there
AUTOGROUP = "/proc/self/autogroup"  # absent where the kernel has no autogroups: nothing to lower then
AUTOGROUP_NICE = 19  # the lowest weight a session's group can have
PM_QOS = "/dev/cpu_dma_latency"
PM_QOS_MODE = "pm-qos"
PM_QOS_LATENCY = struct.Struct("=i")  # the request: the longest wake-up latency allowed, µs


def wanted() -> bool:
    return os.environ.get(KEEP_AWAKE_ENV, "1") != "0"


def how() -> str:
    """How `up` keeps the CPUs awake here: "pm-qos", "spinners" or "none"."""
    if not wanted():
        return "none"
    return "spinners" if os.environ.get(KEEP_AWAKE_ENV) == "spin" or not os.access(PM_QOS, os.W_OK) else PM_QOS_MODE


def commands() -> list[list[str]]:
    """The keep-awake processes' argv: one holding the PM QoS request, or one spinner per CPU
    this process may run on."""
    if how() == PM_QOS_MODE:
        return [[sys.executable, "-m", __name__, PM_QOS_MODE]]
    return [[sys.executable, "-m", __name__, str(cpu)] for cpu in sorted(os.sched_getaffinity(0))]


def running(pids: list[int]) -> str:
    """How these keep-awake processes (a lab's) keep the CPUs awake: "pm-qos", "spinners" or "none"."""
    # Here, not at the top: the keep-awake processes import this module and need no pyroute2.
    from rocelab.kernel.netns import cmdline

    argv = cmdline(pids[0]).split(b"\0") if pids else []
    if len(argv) < 2:  # none, or gone
        return "none"
    return PM_QOS_MODE if argv[-2] == PM_QOS_MODE.encode() else "spinners"


def request_pm_qos() -> int:
    """A PM QoS request of 0 µs, held while the descriptor returned stays open."""
    fd = os.open(PM_QOS, os.O_WRONLY)
    os.write(fd, PM_QOS_LATENCY.pack(0))
    return fd


def hold_pm_qos() -> None:
    """Hold a PM QoS request of 0 µs until stopped: the kernel drops it when the device closes."""
    request_pm_qos()
    while True:
        signal.pause()


def spin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if os.path.exists(AUTOGROUP):
        Path(AUTOGROUP).write_text(f"{AUTOGROUP_NICE}\n")
    while True:
        pass


if __name__ == "__main__":
    if sys.argv[1] == PM_QOS_MODE:
        hold_pm_qos()
    else:
        spin(int(sys.argv[1]))
