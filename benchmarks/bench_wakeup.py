"""What one sleep and wake-up costs the sleeper's CPU here, by what ends the sleep: the floor
under an agent's CPU per frame, which wakes once or twice per frame at the TDFs labs run at.

    python benchmarks/bench_wakeup.py [--wakes 5000] [--rounds 2]

A process at the agents' scheduling (SCHED_RR 1), pinned to CPU 0, sleeps in select() on a pipe,
as the agents' loops sleep on their ports, and its thread's CPU time (CLOCK_THREAD_CPUTIME_ID) is
divided by its wake-ups:
1. woken by a byte another process, on CPU 1, writes every 100 µs; select() with no timeout;
2. the same with a 10 ms timeout: a timer armed and cancelled, later than the CPU's next tick;
3. the same with a 200 µs timeout: a timer armed and cancelled, the earliest on the CPU, as an
   agent's next due event usually is;
4. no writer: woken by its own 20 µs timeout (a timer that fires);
5. woken by the writer, with a timerfd among the descriptors kept armed 1 ms ahead and set
   again only when it fires (every ~10 wake-ups): a timer that is not armed and cancelled at
   every sleep (libc's timerfd_create and timerfd_settime, through ctypes).
With the CPUs kept awake as `up` keeps them (a PM QoS request, rocelab.kernel.awake) where this
machine allows it, else as they are. The ratios to (1) are what a timer costs; on a virtual
machine, programming the CPU's timer device can leave the guest for the hypervisor.
Needs root for SCHED_RR; runs without it at the default scheduling and says so.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import select
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rocelab.kernel import awake  # noqa: E402

WRITER = """
import os, sys, time
os.sched_setaffinity(0, {1})
fd, period = int(sys.argv[1]), float(sys.argv[2])
while True:
    due = time.monotonic() + period
    while time.monotonic() < due:
        pass
    os.write(fd, b"x")
"""


CLOCK_MONOTONIC, TFD_NONBLOCK, TFD_TIMER_ABSTIME = 1, 0o4000, 1
KEPT_AHEAD_S = 1e-3


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", Timespec), ("it_value", Timespec)]


class KeptTimer:
    """A timerfd armed KEPT_AHEAD_S ahead and set again only when it fires."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create")
        self.arm()

    def arm(self) -> None:
        due = time.monotonic_ns() + int(KEPT_AHEAD_S * 1e9)
        spec = Itimerspec(Timespec(0, 0), Timespec(due // 10**9, due % 10**9))
        if self.libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def close(self) -> None:
        os.close(self.fd)


def cpu_per_wake_us(wakes: int, timeout_s: float | None, writer: bool, kept_timer: bool = False) -> float:
    """The sleeper's CPU µs per wake-up: select() on a pipe with this timeout (and a timerfd kept
    armed), fed every 100 µs by a writer on CPU 1, or not fed at all."""
    read_fd, write_fd = os.pipe()
    feeder = subprocess.Popen([sys.executable, "-c", WRITER, str(write_fd), "100e-6"], pass_fds=(write_fd,)) \
        if writer else None
    timer = KeptTimer() if kept_timer else None
    fds = [read_fd] + ([timer.fd] if timer else [])
    try:
        start = time.thread_time()
        for _ in range(wakes):
            readable = select.select(fds, [], [], timeout_s)[0]
            if read_fd in readable:
                os.read(read_fd, 4096)
            if timer and timer.fd in readable:
                os.read(timer.fd, 8)
                timer.arm()
        return (time.thread_time() - start) / wakes * 1e6
    finally:
        if feeder:
            feeder.kill()
            feeder.wait()
        if timer:
            timer.close()
        os.close(read_fd)
        os.close(write_fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wakes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not {0, 1} <= os.sched_getaffinity(0):
        sys.exit("bench_wakeup: needs CPUs 0 and 1 (the sleeper on one, the writer on the other)")
    os.sched_setaffinity(0, {0})
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
        scheduling = "SCHED_RR 1"
    except PermissionError:
        scheduling = "the default scheduling (not root)"
    with contextlib.ExitStack() as stack:
        if awake.how() == awake.PM_QOS_MODE:
            stack.callback(os.close, awake.request_pm_qos())
            kept = "kept awake by a PM QoS request of 0 µs"
        else:
            kept = "not kept awake (no PM QoS request possible here)"
        print(f"{os.cpu_count()} CPUs, {kept}; the sleeper at {scheduling} on CPU 0, the writer on CPU 1")
        ways = (("woken by the writer, no timeout", None, True, False),
                ("woken by the writer, 10 ms timeout", 10e-3, True, False),
                ("woken by the writer, 200 µs timeout", 200e-6, True, False),
                ("woken by its own 20 µs timeout", 20e-6, False, False),
                ("woken by the writer, a timerfd kept armed", None, True, True))
        print(f"{'':42s}" + "".join(f"{'round ' + str(r + 1):>22s}" for r in range(args.rounds)))
        rows = {name: [] for name, *_ in ways}
        for _ in range(args.rounds):
            for name, timeout_s, writer, kept_timer in ways:
                rows[name].append(cpu_per_wake_us(args.wakes, timeout_s, writer, kept_timer))
        base = rows[ways[0][0]]
        for name, values in rows.items():
            print(f"{name:42s}" + "".join(f"{v:9.1f} µs ({v / b:4.1f}×)" for v, b in zip(values, base)))


if __name__ == "__main__":
    main()
