"""The thin shell every node agent (switchd, nicd) shares: AF_PACKET ports, a control
socket and one single-threaded event loop around a pure data-plane core.

The core is anything with `receive(port, frame, now)`, `poll(now) → [(port, frame)]` and
`next_event(now) → time | None` (a core whose `takes_arrival_time` is true gets each frame's
kernel receive time too, on the loop's clock: `receive(port, frame, now, arrival_s)`), and one
loop may answer several control sockets (one nicd serving several hosts' NICs,
rocelab.roce.agent). The loop sleeps exactly until the core's next event or until a frame, a
control request or a netlink event arrives. No threads: a control
request never races the data plane. A core that can run this loop itself (`serve`: switchd's
C pipeline, rocelab.switch.fastpath) does so for as long as frames and timers are all there is
to do, and hands back control only for a control request, a netlink event or a stop. Around a
core written in Python (nicd's NicGroup, switchd's Python pipeline) the same wake-ups run in C
where rocelab.kernel._loop is built (`shell`), Python entered only for the core's own calls;
`_wait_and_serve` below is their reference.

What a wake-up costs sets what a frame costs: on a virtual machine a sleep and its wake-up cost
tens of microseconds of CPU, more than the work of a frame. So the loop serves every event due
within `early_s` of the real clock at once, in the wake-up it already has: its clock moves ahead
to that event's time (never back), and the frame leaves up to `early_s` before its due time.
`early_s` is a quarter of the fidelity bound at most (rocelab.runtime.fidelity, EARLY_SHARE):
what the judgement already accepts as "the wire sees the same frames in the same order".
For the same reason a sleep until a later event ends `early_s` before it: a timed sleep ends
late here, 13.6 µs at the median and 32 µs at the 99th percentile (this project's 2-core VM,
epoll_pwait2 for 20-100 µs at SCHED_RR with the PM QoS request held, rocelab.kernel.awake,
2026-12-07), so woken at the event's time the loop ran every timed event that late; woken
before it, on time unless the wake-up came more than `early_s` late.

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
import contextlib
import errno
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence

from rocelab.kernel.control import ControlServer
from rocelab.ethernet import ETH_P_ALL
from rocelab.kernel.netns import in_netns, PACKET_IGNORE_OUTGOING, PACKET_STATISTICS, SOL_PACKET, packet_socket
from rocelab.kernel.ring import RxRing

try:
    from rocelab.kernel import _loop
except ImportError:  # no C compiler at install time: the Python loop runs
    _loop = None
PURE_LOOP_ENV = "ROCELAB_PURE_LOOP"  # set to 1: a Python core runs in the Python loop even where C is built

# What the loop reads from one port before the others get a turn and the core runs: at most
# an egress shaper's bucket (rocelab.switch.shaper.DEFAULT_BURST_BYTES, 4 jumbo frames), which
# is all a port may send per run of the core when it runs late. Read more between runs and a
# flood the line could carry backs up in the queues.
ROUND_FRAMES = 64
ROUND_BYTES = 32 << 10
DRAIN_ROUNDS = 16  # rounds per wake-up before the loop looks at control requests again
IDLE_WAIT_S = 0.05  # the longest sleep with nothing due: bounds how late a stop is seen
# How early a due event may run: this share of the fidelity bound (one MTU frame on the lab's
# fastest link), and never more than EARLY_MAX_S, about what one sleep and wake-up costs here.
EARLY_SHARE = 0.25
EARLY_MAX_S = 50e-6
RT_PRIORITY = 1  # the lowest real-time priority: ahead of every ordinary process, behind the kernel's RT threads
NICE_FALLBACK = -10
REALTIME = f"SCHED_RR {RT_PRIORITY}"


def loop_shell() -> str:
    """Which loop runs a Python core (nicd's) here: "c" where rocelab.kernel._loop is built and not
    switched off (ROCELAB_PURE_LOOP=1), else "python"."""
    return "python" if _loop is None or os.environ.get(PURE_LOOP_ENV) == "1" else "c"


def shell_note(shell: str) -> str:
    """What an agent's log says of the loop its Python core runs in."""
    if shell == "c":
        return "the loop in C (rocelab.kernel._loop)"
    return f"the loop in Python ({'rocelab.kernel._loop is not built' if _loop is None else PURE_LOOP_ENV + '=1'})"


def early_s(fidelity_bound_s: float) -> float:
    """How early the loop may run a due event, for a lab whose fidelity bound is this."""
    return min(EARLY_SHARE * fidelity_bound_s, EARLY_MAX_S)


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
# so two readings subtract; 1, 1.5, 2, 3, 5, 7 per decade from 10 µs to 1 s, fine enough where
# a frame's time on a dilated link lies (0.05–10 ms) that the fidelity judgement, which counts
# a whole bucket as late when the bound falls inside it, errs by less than one step.
LATENESS_BOUNDS_S = tuple(round(step * 10.0 ** exponent, 9) for exponent in range(-5, 0)
                          for step in (1, 1.5, 2, 3, 5, 7)) + (1.0,)
TPACKET_STATS = struct.Struct("=II")  # tp_packets, tp_drops


@dataclass
class Lateness:
    """How late due events ran: a histogram over LATENESS_BOUNDS_S (the last count is for
    anything later), with the total and the worst. Counts only grow: readers subtract.

    `wakes` is a second histogram over the same bounds: each wake-up's latest event, no later
    than the time since the wake-up before it ended. A stall is one late event in `counts`
    however long it lasted (what fell due meanwhile is served in the wake-up that ends it,
    late together); `wakes` says how long the loop ran behind, once per wake-up, so the
    fidelity judgement can add up the time (rocelab.runtime.fidelity). The cap keeps a
    catch-up that takes several wake-ups (a backlog past DRAIN_ROUNDS) from counting its
    stall again in each."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENESS_BOUNDS_S) + 1))
    total_s: float = 0.0
    max_s: float = 0.0
    wakes: list[int] = field(default_factory=lambda: [0] * (len(LATENESS_BOUNDS_S) + 1))
    wake_max_s = -1.0  # this wake-up's latest event so far, -1 none yet: the loop's, not the reply's (no field)

    def record(self, late_s: float) -> None:
        self.counts[bisect.bisect_left(LATENESS_BOUNDS_S, late_s)] += 1
        self.total_s += late_s
        if late_s > self.max_s:
            self.max_s = late_s
        if late_s > self.wake_max_s:
            self.wake_max_s = late_s

    def end_wake(self, since_last_s: float) -> None:
        """The wake-up is over, `since_last_s` after the one before it ended: its latest event
        into `wakes`, if it recorded any."""
        if self.wake_max_s >= 0.0:
            late_s = self.wake_max_s if self.wake_max_s < since_last_s else since_last_s
            self.wakes[bisect.bisect_left(LATENESS_BOUNDS_S, late_s)] += 1
            self.wake_max_s = -1.0


@dataclass
class LoopStats:
    rx_frames: int = 0
    tx_frames: int = 0
    wakeups: int = 0  # sleeps the loop woke from: what its CPU cost follows
    members: list[str] = field(default_factory=list)  # the nodes one loop serves, when it serves several
    tx_errors: dict[str, int] = field(default_factory=dict)  # errno name → count
    scheduling: str = "ordinary"  # what claim_cpu() got
    lateness: Lateness = field(default_factory=Lateness)
    rx_dropped: int = 0  # frames the kernel dropped from a full receive queue (PACKET_STATISTICS)

    def to_json(self) -> dict:
        """As dataclasses.asdict would give it, in a tenth of its time: every counters reply carries it."""
        late = self.lateness
        return {"rx_frames": self.rx_frames, "tx_frames": self.tx_frames, "wakeups": self.wakeups,
                "members": list(self.members), "tx_errors": dict(self.tx_errors), "scheduling": self.scheduling,
                "lateness": {"counts": list(late.counts), "total_s": late.total_s, "max_s": late.max_s,
                             "wakes": list(late.wakes)},
                "rx_dropped": self.rx_dropped}


@dataclass
class Loop:
    core: Core
    ports: dict[str, Port]
    controls: Sequence[ControlServer]
    watchers: dict[int, Callable[[], None]] = field(default_factory=dict)  # fd → callback
    clock: Callable[[], float] = time.monotonic
    early_s: float = 0.0
    stats: LoopStats = field(default_factory=LoopStats)
    stopping: bool = False
    ahead: float = 0.0  # the loop's clock, when it ran ahead of `clock` to serve an event early
    ended: float = 0.0  # `clock` when the last wake-up ended (Lateness.end_wake)
    # "c": a Python core's wake-ups run in rocelab.kernel._loop (the monotonic clock only), else here
    shell: str = field(default_factory=loop_shell)
    # The C shell's epoll set, kept from turn to turn, and what each descriptor in it was added for
    epoll: select.epoll | None = field(default=None, repr=False)
    in_epoll: dict[int, object] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.clock is not time.monotonic:
            self.shell = "python"

    def stop(self, *_: object) -> None:
        self.stopping = True

    def now(self, clock: float | None = None) -> float:
        """The loop's clock: `clock` (read now where not given), or the time of the last event
        served early if that is later."""
        t = self.clock() if clock is None else clock
        return t if t > self.ahead else self.ahead

    def _run_early(self, due: float | None, clock: float) -> float:
        """The loop's clock at real time `clock`, moved ahead to an event due within early_s of
        it (never back), which then runs at once. Measured from the real clock: from a clock
        already ahead, events each within early_s of the last would run ahead of it without end."""
        now = self.now(clock)
        if due is not None and now < due <= clock + self.early_s:
            self.ahead = now = due
        return now

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
        core, watchers = self.core, self.watchers
        # Plain descriptors, looked up once: select() calls no Python fileno() per wake-up.
        port_fds = {port.sock.fileno(): name for name, port in self.ports.items()}
        listeners = {control.listener.fileno(): control for control in self.controls}
        fixed = [*port_fds, *listeners]
        try:
            while not self.stopping:
                clients = {conn.fileno(): (control, conn) for control in self.controls for conn in control.clients}
                serve = getattr(core, "serve", None)  # looked up each time: a reload may swap the core
                if serve is not None:
                    readable = self._serve_in_core(serve, [*listeners, *clients, *watchers])
                elif self.shell == "c":
                    readable = self._serve_in_c({**listeners, **{fd: conn for fd, (_, conn) in clients.items()},
                                                 **watchers})
                else:
                    readable = self._wait_and_serve(port_fds, [*fixed, *clients, *watchers])
                # One descriptor a turn: the others stay readable, so the next turn hands back at once,
                # having run the data plane's due events first. A sampler asks every NIC of a shared
                # nicd at the same moment, ~1 ms a reply with 16 QPs: served back to back, four of them
                # held the NICs' due events for longer than a frame lasts at TDF 6000.
                for fd in readable[:1]:
                    if fd in listeners:
                        listeners[fd].accept()
                    elif fd in watchers:
                        watchers[fd]()
                    elif fd in clients:
                        control, conn = clients[fd]
                        control.serve(conn)
        finally:
            if self.epoll is not None:
                self.epoll.close()
                self.epoll = None
                self.in_epoll.clear()

    def _wait_and_serve(self, port_fds: dict[int, str], fds: list[int]) -> list[int]:
        """One wake-up in Python: sleep until the core's next event or a descriptor is readable,
        run the readable ports and the due events; the other readable descriptors."""
        clock = self.clock()
        due = self.core.next_event(self.now(clock))
        now = self._run_early(due, clock)
        # A sleep for a later event ends early_s before it, where _run_early takes it: a timed
        # sleep ends 13-30 µs late here, and woken at the event's time it would run that late.
        if due is None:
            wait_s = IDLE_WAIT_S
        elif due > now:  # then more than early_s off: _run_early took it otherwise
            wait_s = min(due - self.early_s - clock, IDLE_WAIT_S)
        else:
            wait_s = 0.0
        readable, _, _ = select.select(fds, [], [], wait_s)
        woke = self.clock()
        self._run_early(due, woke)
        if wait_s:  # a sleep, and what woke it: the costly part
            self.stats.wakeups += 1
        ready = [port_fds[fd] for fd in readable if fd in port_fds]
        if ready:
            self._drain(ready, due)
        else:
            self._transmit(due)
        self.stats.lateness.end_wake(woke - self.ended)
        self.ended = self.clock()
        return [fd for fd in readable if fd not in port_fds]

    def _serve_in_c(self, others: dict[int, object]) -> list[int]:
        """_wait_and_serve's wake-ups in C (rocelab.kernel._loop) around this Python core, until one
        of `others` (descriptor → the listener, client or watcher behind it) is readable, a signal
        came or the loop was idle; then count what it counted."""
        ports = self.ports
        port_fds = {p.sock.fileno(): p for p in ports.values()}
        readable, heads, self.ahead, self.ended, counted = _loop.serve(
            self.core, [(name, p.sock.fileno(), p.ring.map, p.ring.head) for name, p in ports.items()], [*others],
            self._epoll_fd({**port_fds, **others}), next(iter(ports.values())).ring.geometry, self.early_s,
            IDLE_WAIT_S, self.ahead, self.ended, LATENESS_BOUNDS_S, ROUND_FRAMES, ROUND_BYTES, DRAIN_ROUNDS)
        for port, head in zip(ports.values(), heads):
            port.ring.head = head
        self._count(counted)
        return readable

    def _epoll_fd(self, wanted: dict[int, object]) -> int:
        """The C shell's epoll set, holding `wanted` (descriptor → what it was added for): kept from
        turn to turn, as building it anew at each control request held a 24-host nicd's data plane
        for its ~75 epoll_ctl calls every time (lab-placement fell behind at TDF 2000 that way, not
        with ppoll). A descriptor closed since leaves the set by itself (the kernel drops it with its
        file); one whose number now belongs to another object is added again."""
        if self.epoll is None:
            self.epoll = select.epoll()
        epoll, added = self.epoll, self.in_epoll
        for fd in [fd for fd, was in added.items() if wanted.get(fd) is not was]:
            with contextlib.suppress(OSError):  # closed: already gone from the set
                epoll.unregister(fd)
            del added[fd]
        for fd, what in wanted.items():
            if fd not in added:
                epoll.register(fd, select.EPOLLIN)
                added[fd] = what
        return epoll.fileno()

    def _count(self, counted: tuple) -> None:
        """Add what a loop in C counted (rx, tx, wake-ups, lateness counts, total, max, {errno: n},
        each wake-up's latest event by lateness bucket)."""
        rx, tx, wakeups, counts, total_s, max_s, errors, wakes = counted
        stats, lateness = self.stats, self.stats.lateness
        stats.rx_frames += rx
        stats.tx_frames += tx
        stats.wakeups += wakeups
        for i, n in enumerate(counts[:len(lateness.counts)]):
            lateness.counts[i] += n
        for i, n in enumerate(wakes[:len(lateness.wakes)]):
            lateness.wakes[i] += n
        lateness.total_s += total_s
        lateness.max_s = max(lateness.max_s, max_s)
        for number, n in errors.items():
            key = errno.errorcode.get(number, str(number))
            stats.tx_errors[key] = stats.tx_errors.get(key, 0) + n

    def _serve_in_core(self, serve, fds: list[int]) -> list[int]:
        """Hand the loop to a core that runs it itself (switchd's C pipeline) until one of `fds`
        is readable, a trapped frame waits for the CPU or a signal came; then send what the CPU
        answers and count what the core counted."""
        ports = [self.ports[name] for name in self.core.port_names]
        readable, heads = serve([(p.sock.fileno(), p.ring.map, p.ring.head) for p in ports], fds,
                                ports[0].ring.geometry, self.early_s, IDLE_WAIT_S, LATENESS_BOUNDS_S,
                                ROUND_FRAMES, ROUND_BYTES, DRAIN_ROUNDS)
        for port, head in zip(ports, heads):
            port.ring.head = head
        self._count(self.core.take_loop_counts())
        self._transmit(None)  # the CPU's answers to what was trapped
        return readable

    def _drain(self, ready: list[str], due: float | None) -> None:
        """Read the readable ports until they are empty, a round (ROUND_FRAMES or ROUND_BYTES)
        from each in turn, and run the core after every round: its egress may send only a
        burst per run (a shaper that wakes late does not catch up past its bucket), so reading
        a long batch before running it would overfill its queues. At most DRAIN_ROUNDS
        rounds, so control requests and watchers are seen between floods."""
        ports, stats, receive = self.ports, self.stats, self.core.receive
        arrival = getattr(self.core, "takes_arrival_time", False)
        unmeasured = set(ready)
        for rnd in range(DRAIN_ROUNDS):
            now = self.now()  # one timestamp per round: these frames arrived together
            wall = time.time() if arrival else None  # the epoch time at `now`: each frame's arrival
            if rnd:
                due = self.core.next_event(now)
            for name in tuple(ready):
                n, first_s, empty = ports[name].ring.read(name, receive, now, ROUND_FRAMES, ROUND_BYTES, wall)
                stats.rx_frames += n
                if not n and not rnd:  # readable and empty: a port taken down reports ENETDOWN until read
                    ports[name].sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
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
        now = self.now()
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


def build_members(configs: list[dict], make: Callable[[dict, Callable[[str], str]], object], into: list) -> None:
    """Build each node of a shared agent in its own namespace (its sockets open there), appending
    to `into` as it goes so that the caller closes what was built if a later node fails. A port is
    known to the loop as `node/port` when the process serves several nodes (two hosts' ports share
    a name, eth1)."""
    for config in configs:
        node = config["node"]
        key = str if len(configs) == 1 else (lambda name, node=node: f"{node}/{name}")
        with in_netns(config["netns"]) if config.get("netns") else contextlib.nullcontext():
            into.append(make(config, key))
    settle_heap()


def settle_heap() -> None:
    """Move everything an agent made before its loop (its modules, its nodes: ~34,000 objects)
    out of the cyclic garbage collector's reach, its garbage collected first (once, at start-up).
    Else the collections that the loop's own allocations set off mid-run traverse them while the
    loop stands still, longer than a frame at the TDFs `up` picks: a generation-1 one 0.8-1.6 ms
    in lab-ecn-dcqcn's run, a full one ~10 ms (benchmarks/bench_gc_pause.py)."""
    gc.collect()
    gc.freeze()


def agent_main(argv: list[str], module: str, serve: Callable[[list[dict]], None]) -> int:
    """An agent's command line: one JSON config per node it serves."""
    if not argv:
        print(f"usage: python -m {module} CONFIG_JSON...", file=sys.stderr)
        return 2
    serve([json.loads(Path(arg).read_text()) for arg in argv])
    return 0
