"""The thin shell every node agent (switchd, nicd) shares: AF_PACKET ports, a control
socket and one single-threaded event loop around a pure data-plane core.

The core is anything with `receive(port, frame, now)`, `poll(now) → [(port, frame)]` and
`next_event(now) → time | None` (and, if it is in C and reads a port's receive ring itself,
`receive_ring`: rocelab.kernel.ring.RxRing.read_by); the loop sleeps exactly until the
core's next event or until a frame, a control request or a netlink event arrives. No threads: a control
request never races the data plane.

The loop also measures how well it keeps the emulated schedule, in one `Lateness` histogram:
every time it runs the core for an event that was due (a frame's departure from its shaper,
a pause expiring, a DCQCN or retransmission timer), how late it ran it; for every batch of
frames it reads from a port at one wake-up, how long the oldest waited in the kernel since
it arrived (the receive time the kernel writes beside it in the port's ring, rocelab.kernel.ring).
It also counts the frames the kernel dropped because the loop did not read them in time: a
full ring (PACKET_STATISTICS). Time dilation is faithful only while these stay
small: rocelab.runtime.fidelity judges them.
"""

from __future__ import annotations

import bisect
import errno
import os
import select
import signal
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from rocelab.kernel.control import ControlServer
from rocelab.ethernet import ETH_P_ALL
from rocelab.kernel.netns import PACKET_IGNORE_OUTGOING, PACKET_STATISTICS, SOL_PACKET, packet_socket
from rocelab.kernel.ring import RxRing

# What the loop reads from one port before the others get a turn and the core runs: at most
# an egress shaper's bucket (rocelab.switch.shaper.DEFAULT_BURST_BYTES, 4 jumbo frames), which
# is all a port may send per run of the core when it runs late. Read more between runs and a
# flood the line could carry backs up in the queues.
ROUND_FRAMES = 64
ROUND_BYTES = 32 << 10
DRAIN_ROUNDS = 16  # rounds per wake-up before the loop looks at control requests again
IDLE_WAIT_S = 0.05  # the longest sleep with nothing due: bounds how late a stop is seen
RT_PRIORITY = 1  # the lowest real-time priority: ahead of every ordinary process, behind the kernel's RT threads
NICE_FALLBACK = -10
REALTIME = f"SCHED_RR {RT_PRIORITY}"


class Core(Protocol):
    def receive(self, port: str, frame: bytes, now: float) -> None: ...

    def poll(self, now: float) -> Iterable[tuple[str, bytes]]: ...

    def next_event(self, now: float) -> float | None: ...


class Port:
    """A port the loop reads through its receive ring and writes through its socket."""

    __slots__ = ("sock", "ring", "send")

    def __init__(self, sock: socket.socket, ring: RxRing):
        self.sock = sock
        self.ring = ring
        self.send = sock.send


def open_port(ifname: str) -> Port:
    # Bound to no protocol until its ring is set up, so no frame queues outside the ring.
    sock = packet_socket(ifname, protocol=0)
    try:
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        ring = RxRing(sock)
        sock.bind((ifname, ETH_P_ALL))
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return Port(sock, ring)


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


# Upper bounds of the lateness histogram's buckets, in seconds of the emulated clock: fixed,
# so two readings subtract, and fine where a frame's time on a dilated link lies (0.1–10 ms).
LATENESS_BOUNDS_S = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 1e-1, 2e-1, 5e-1, 1.0)
TPACKET_STATS = struct.Struct("=II")  # tp_packets, tp_drops


@dataclass
class Lateness:
    """How late due events ran: a histogram over LATENESS_BOUNDS_S (the last count is for
    anything later), with the total and the worst. Counts only grow: readers subtract."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENESS_BOUNDS_S) + 1))
    total_s: float = 0.0
    max_s: float = 0.0

    def record(self, late_s: float) -> None:
        self.counts[bisect.bisect_left(LATENESS_BOUNDS_S, late_s)] += 1
        self.total_s += late_s
        if late_s > self.max_s:
            self.max_s = late_s


@dataclass
class LoopStats:
    rx_frames: int = 0
    tx_frames: int = 0
    tx_errors: dict[str, int] = field(default_factory=dict)  # errno name → count
    scheduling: str = "ordinary"  # what claim_cpu() got
    lateness: Lateness = field(default_factory=Lateness)
    rx_dropped: int = 0  # frames the kernel dropped from a full receive queue (PACKET_STATISTICS)


@dataclass
class Loop:
    core: Core
    ports: dict[str, Port]
    control: ControlServer
    watchers: dict[int, Callable[[], None]] = field(default_factory=dict)  # fd → callback
    clock: Callable[[], float] = time.monotonic
    stats: LoopStats = field(default_factory=LoopStats)
    stopping: bool = False

    def stop(self, *_: object) -> None:
        self.stopping = True

    def read_drops(self) -> LoopStats:
        """The stats, with the kernel's receive-queue drops added up (reading them resets them)."""
        for port in self.ports.values():
            self.stats.rx_dropped += TPACKET_STATS.unpack(port.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS,
                                                                          TPACKET_STATS.size))[1]
        return self.stats

    def run(self) -> None:
        self.stats.scheduling = claim_cpu()
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        core, control, watchers = self.core, self.control, self.watchers
        # Plain descriptors, looked up once: select() calls no Python fileno() per wake-up.
        port_fds = {port.sock.fileno(): name for name, port in self.ports.items()}
        listener_fd = control.listener.fileno()
        fixed = [*port_fds, listener_fd]
        while not self.stopping:
            now = self.clock()
            due = core.next_event(now)
            wait_s = IDLE_WAIT_S if due is None else min(max(due - now, 0.0), IDLE_WAIT_S)
            clients = {conn.fileno(): conn for conn in control.clients} if control.clients else {}
            readable, _, _ = select.select([*fixed, *clients, *watchers], [], [], wait_s)
            ready = []
            for fd in readable:
                name = port_fds.get(fd)
                if name is not None:
                    ready.append(name)
                elif fd == listener_fd:
                    control.accept()
                elif fd in watchers:
                    watchers[fd]()
                elif fd in clients:
                    control.serve(clients[fd])
            if ready:
                self._drain(ready, due)
            else:
                self._transmit(due)

    def _drain(self, ready: list[str], due: float | None) -> None:
        """Read the readable ports until they are empty, a round (ROUND_FRAMES or ROUND_BYTES)
        from each in turn, and run the core after every round: its egress may send only a
        burst per run (a shaper that wakes late does not catch up past its bucket), so reading
        a long batch before running it would overfill its queues. At most DRAIN_ROUNDS
        rounds, so control requests and watchers are seen between floods."""
        ports, stats, receive = self.ports, self.stats, self.core.receive
        receive_ring = getattr(self.core, "receive_ring", None)  # a core in C that reads the ring itself
        unmeasured = set(ready)
        for rnd in range(DRAIN_ROUNDS):
            now = self.clock()  # one timestamp per round: these frames arrived together
            if rnd:
                due = self.core.next_event(now)
            for name in tuple(ready):
                ring = ports[name].ring
                if receive_ring is not None:
                    n, first_s, empty = ring.read_by(receive_ring, name, now, ROUND_FRAMES, ROUND_BYTES)
                else:
                    n, first_s, empty = ring.read(name, receive, now, ROUND_FRAMES, ROUND_BYTES)
                stats.rx_frames += n
                if empty:
                    ready.remove(name)
                if n and name in unmeasured:  # the port's oldest frame: how long it waited to be read
                    unmeasured.discard(name)
                    self.stats.lateness.record(max(time.time() - first_s, 0.0))
            self._transmit(due)
            if not ready:
                return

    def _transmit(self, due: float | None) -> None:
        # One send() per frame. A PACKET_TX_RING flushed once per port and round, and
        # PACKET_QDISC_BYPASS, were measured under bench_switchd's flood and saved nothing:
        # on a veth the kernel's work per frame (the far end's receive runs in this send)
        # costs far more than the system call.
        now = self.clock()
        if due is not None and due <= now:
            self.stats.lateness.record(now - due)
        ports, sent = self.ports, 0
        for name, frame in self.core.poll(now):
            try:
                ports[name].send(frame)
                sent += 1
            except OSError as exc:  # a full peer backlog or a downed link: count, never stop
                key = errno.errorcode.get(exc.errno, str(exc.errno))
                self.stats.tx_errors[key] = self.stats.tx_errors.get(key, 0) + 1
        self.stats.tx_frames += sent
