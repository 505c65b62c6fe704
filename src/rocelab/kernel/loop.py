"""The thin shell every node agent (switchd, nicd) shares: AF_PACKET ports, a control
socket and one single-threaded event loop around a pure data-plane core.

The core is anything with `receive(port, frame, now)`, `poll(now) → [(port, frame)]` and
`next_event(now) → time | None`; the loop sleeps exactly until the core's next event or
until a frame, a control request or a netlink event arrives. No threads: a control
request never races the data plane.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from rocelab.kernel.control import ControlServer
from rocelab.kernel.netns import PACKET_IGNORE_OUTGOING, SOL_PACKET, packet_socket

RCVBUF_BYTES = 8 << 20
MAX_FRAME = 65536
BATCH = 64  # frames read from one port before the others get a turn
IDLE_WAIT_S = 0.05  # the longest sleep with nothing due: bounds how late a stop is seen
RT_PRIORITY = 1  # the lowest real-time priority: ahead of every ordinary process, behind the kernel's RT threads
NICE_FALLBACK = -10
REALTIME = f"SCHED_RR {RT_PRIORITY}"


class Core(Protocol):
    def receive(self, port: str, frame: bytes, now: float) -> None: ...

    def poll(self, now: float) -> Iterable[tuple[str, bytes]]: ...

    def next_event(self, now: float) -> float | None: ...


def open_port(ifname: str) -> socket.socket:
    sock = packet_socket(ifname, rcvbuf_bytes=RCVBUF_BYTES)
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    sock.setblocking(False)
    return sock


def claim_cpu() -> str:
    """Put this agent ahead of ordinary processes and say what it got.

    An agent that runs late reacts late: a switch that reads a burst late sends its XOFF
    late, and at TDF 1000 a 45 KB headroom is only 3.6 ms of wall time (README, "Agents run
    real-time", has the measurements). Agents block in select() between frames, so they take
    only what they use, and the kernel keeps 5% for ordinary processes. A container without
    a real-time budget (Docker's default) gets nice -10; without CAP_SYS_NICE, nothing.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_RR | os.SCHED_RESET_ON_FORK, os.sched_param(RT_PRIORITY))
        return REALTIME
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE_FALLBACK)
        return f"nice {NICE_FALLBACK}"
    except OSError:
        return "ordinary"


@dataclass
class LoopStats:
    rx_frames: int = 0
    tx_frames: int = 0
    tx_errors: dict[str, int] = field(default_factory=dict)  # errno name → count
    scheduling: str = "ordinary"  # what claim_cpu() got


@dataclass
class Loop:
    core: Core
    ports: dict[str, socket.socket]
    control: ControlServer
    watchers: dict[int, Callable[[], None]] = field(default_factory=dict)  # fd → callback
    clock: Callable[[], float] = time.monotonic
    stats: LoopStats = field(default_factory=LoopStats)
    stopping: bool = False

    def stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> None:
        self.stats.scheduling = claim_cpu()
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        by_fd = {s.fileno(): name for name, s in self.ports.items()}
        core, ports, control, stats = self.core, self.ports, self.control, self.stats
        listener = control.listener
        # One receive buffer for every frame: the core copies what it keeps.
        buffer = bytearray(MAX_FRAME)
        view = memoryview(buffer)
        while not self.stopping:
            now = self.clock()
            due = core.next_event(now)
            wait_s = IDLE_WAIT_S if due is None else min(max(due - now, 0.0), IDLE_WAIT_S)
            readable, _, _ = select.select([*ports.values(), listener, *control.clients, *self.watchers],
                                           [], [], wait_s)
            for item in readable:
                fd = item if isinstance(item, int) else item.fileno()
                name = by_fd.get(fd)
                if name is not None:
                    recv_into = ports[name].recv_into
                    receive = self.core.receive
                    now = self.clock()  # one timestamp per batch: these frames arrived together
                    for _ in range(BATCH):
                        try:
                            size = recv_into(buffer)
                        except BlockingIOError:
                            break
                        stats.rx_frames += 1
                        receive(name, view[:size], now)
                elif item is listener:
                    control.accept()
                elif fd in self.watchers:
                    self.watchers[fd]()
                elif item in control.clients:
                    control.serve(item)
            self._transmit()

    def _transmit(self) -> None:
        for name, frame in self.core.poll(self.clock()):
            try:
                self.ports[name].send(frame)
                self.stats.tx_frames += 1
            except OSError as exc:  # a full peer backlog or a downed link: count, never stop
                key = errno.errorcode.get(exc.errno, str(exc.errno))
                self.stats.tx_errors[key] = self.stats.tx_errors.get(key, 0) + 1
