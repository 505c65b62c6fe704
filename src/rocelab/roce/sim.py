"""An in-memory fabric for NIC cores under a simulated clock, for tests and benchmarks.

A star: every NIC hangs off one port of an output-queued L2 switch that forwards by
destination MAC. Each switch egress port serializes at its rate through a FIFO that
can CE-mark (RED-like between Kmin and Kmax, as a DCQCN congestion point) and tail
drop; its cable adds delay and may lose or hold back (reorder) frames. A NIC's frames
cross its own cable one after another at its port rate. Events run in time order from
a heap; NICs are polled exactly when their `next_event` says.
Randomness comes from the rng passed in, so a seed makes a run repeatable.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass
from typing import Callable

from rocelab.roce.config import NicConfig
from rocelab.roce.nic import Nic
from rocelab.traffic.summary import jain_index
from rocelab.roce.wire import mark_ce

_POLL, _AT_SWITCH, _AT_NIC, _DEQUEUE = 0, 1, 2, 3
ENQUEUE, DEQUEUE = "enqueue", "dequeue"


@dataclass(frozen=True)
class EcnMarking:
    """Mark with probability 0 below kmin, rising linearly to pmax at kmax, 1 above kmax.

    `at` is when the queue is read: on `enqueue`, the depth a frame finds as it arrives
    (WRED at admission, as switchd and SAI's WRED profiles do); on `dequeue`, the depth it
    leaves behind as it starts to leave (the HPCC simulator's switch, SwitchNotifyDequeue).
    Dequeue marking tells the sender about the queue as it is now, not as it was one
    queueing delay ago, which shortens DCQCN's feedback loop by that delay."""

    kmin_bytes: int
    kmax_bytes: int
    pmax: float
    at: str = ENQUEUE

    def __post_init__(self) -> None:
        if self.at not in (ENQUEUE, DEQUEUE):
            raise ValueError(f"EcnMarking: at={self.at!r} must be {ENQUEUE} or {DEQUEUE}")

    def probability(self, queue_bytes: int) -> float:
        if queue_bytes <= self.kmin_bytes:
            return 0.0
        if queue_bytes > self.kmax_bytes:
            return 1.0
        span_bytes = max(1, self.kmax_bytes - self.kmin_bytes)
        return self.pmax * (queue_bytes - self.kmin_bytes) / span_bytes


@dataclass
class PortCounters:
    forwarded_packets: int = 0
    forwarded_bytes: int = 0
    ecn_marked: int = 0
    tail_drops: int = 0
    lost: int = 0  # by the cable's random loss
    reordered: int = 0  # held back by reorder_delay_s
    max_queue_bytes: int = 0


class _Port:
    def __init__(self, nic: Nic, rate_bps: float, delay_s: float, loss: float, reorder: float,
                 reorder_delay_s: float, ecn: EcnMarking | None, queue_limit_bytes: int | None):
        self.nic = nic
        self.rate_bps = rate_bps
        self.delay_s = delay_s
        self.loss = loss
        self.reorder = reorder
        self.reorder_delay_s = reorder_delay_s
        self.ecn = ecn
        self.queue_limit_bytes = queue_limit_bytes
        self.busy_until_s = 0.0  # the switch's egress towards the NIC
        self.uplink_free_s = 0.0  # the NIC's own transmitter, towards the switch
        self.in_queue: deque[tuple[float, int]] = deque()  # (departure time, bytes)
        self.queue_bytes = 0
        self.counters = PortCounters()
        self.poll_at_s = float("inf")


class FabricSim:
    """NIC cores on a simulated switch. Attach NICs, post work, then run()."""

    def __init__(self, rng: random.Random, *, overhead_bytes: int = 24):
        self.now = 0.0
        self._rng = rng
        self.overhead_bytes = overhead_bytes
        self._ports: dict[bytes, _Port] = {}
        self._events: list[tuple] = []
        self._seq = 0
        # Called with (nic, frame) for every frame a NIC transmits.
        self.on_transmit: Callable[[Nic, bytes], None] | None = None

    def attach(self, nic: Nic, *, rate_bps: float | None = None, delay_s: float = 0.0,
               loss: float = 0.0, reorder: float = 0.0, reorder_delay_s: float = 0.0,
               ecn: EcnMarking | None = None, queue_limit_bytes: int | None = None) -> None:
        """Connect `nic` to a switch port; the port's settings shape traffic *to* the NIC.

        rate_bps defaults to the NIC's port rate; delay_s is the cable's one-way delay.
        """
        self._ports[nic.mac] = _Port(nic, rate_bps or nic.port_rate_bps, delay_s, loss, reorder,
                                     reorder_delay_s, ecn, queue_limit_bytes)
        self.wake(nic)

    def port_counters(self, nic: Nic) -> PortCounters:
        return self._ports[nic.mac].counters

    def queue_bytes(self, nic: Nic) -> int:
        """The depth now of the switch port towards `nic` (frames still to leave)."""
        return _drained(self._ports[nic.mac], self.now)

    def wire_bytes(self, nic: Nic) -> float:
        """Bytes (frame overhead included) the switch port towards `nic` has put on its wire
        by now, the frame being serialized counted for the part already sent."""
        port = self._ports[nic.mac]
        counters = port.counters
        sent = counters.forwarded_bytes + counters.forwarded_packets * self.overhead_bytes - _drained(port, self.now)
        if port.in_queue:
            depart_s, size = port.in_queue[0]
            sent += max(0.0, size - (depart_s - self.now) * port.rate_bps / 8)
        return sent

    def wake(self, nic: Nic) -> None:
        """Schedule a poll of `nic` when it next has something to do (after posting work)."""
        port = self._ports[nic.mac]
        due = nic.next_event(self.now)
        if due is not None:
            due = max(due, self.now)
            if due < port.poll_at_s:
                port.poll_at_s = due
                self._push(due, _POLL, port, None)

    def run(self, until_s: float, stop: Callable[[], bool] | None = None) -> bool:
        """Run events up to `until_s`; True if `stop()` became true first."""
        events = self._events
        while events and events[0][0] <= until_s:
            when, _, kind, port, frame = heapq.heappop(events)
            self.now = when
            if kind == _POLL:
                if when != port.poll_at_s:
                    continue  # superseded by an earlier poll
                port.poll_at_s = float("inf")
                self._transmit(port, when)
            elif kind == _AT_SWITCH:
                self._enqueue(frame, when)
            elif kind == _DEQUEUE:
                self._depart(port, frame, when)
            else:
                port.nic.receive(frame, when)
                self.wake(port.nic)
            if stop is not None and stop():
                return True
        self.now = max(self.now, until_s)
        return False

    def _push(self, when: float, kind: int, port: _Port, frame: bytes | None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, port, frame))

    def _transmit(self, port: _Port, now: float) -> None:
        nic = port.nic
        # Frames of one poll (a pacer catching up) leave back to back, not all at once.
        wire_s = max(now, port.uplink_free_s)
        for frame in nic.poll(now):
            if self.on_transmit is not None:
                self.on_transmit(nic, frame)
            wire_s += (len(frame) + self.overhead_bytes) * 8 / nic.port_rate_bps
            self._push(wire_s + port.delay_s, _AT_SWITCH, port, frame)
        port.uplink_free_s = wire_s
        self.wake(nic)

    def _enqueue(self, frame: bytes, now: float) -> None:
        port = self._ports.get(frame[:6])
        if port is None:
            return  # no such MAC: a real L2 switch would flood; nothing listens here
        queue = port.in_queue
        _drained(port, now)
        counters = port.counters
        size = len(frame) + self.overhead_bytes
        if port.queue_limit_bytes is not None and port.queue_bytes + size > port.queue_limit_bytes:
            counters.tail_drops += 1
            return
        ecn = port.ecn
        if ecn is not None and ecn.at == ENQUEUE:
            frame = self._mark(port, frame, port.queue_bytes)
        start = max(now, port.busy_until_s)
        depart = start + size * 8 / port.rate_bps
        port.busy_until_s = depart
        queue.append((depart, size))
        port.queue_bytes += size
        counters.max_queue_bytes = max(counters.max_queue_bytes, port.queue_bytes)
        counters.forwarded_packets += 1
        counters.forwarded_bytes += len(frame)
        if ecn is not None and ecn.at == DEQUEUE:
            self._push(start, _DEQUEUE, port, frame)  # marked as it starts to leave
        else:
            self._depart(port, frame, start)

    def _mark(self, port: _Port, frame: bytes, queue_bytes: int) -> bytes:
        if self._rng.random() < port.ecn.probability(queue_bytes):
            marked = mark_ce(frame)
            if marked is not None:
                port.counters.ecn_marked += 1
                return marked
        return frame

    def _depart(self, port: _Port, frame: bytes, start_s: float) -> None:
        """A frame starts onto the port's wire at `start_s`: dequeue marking, then the cable."""
        counters = port.counters
        size = len(frame) + self.overhead_bytes
        if port.ecn is not None and port.ecn.at == DEQUEUE:
            # What stays behind it: everything queued, less what has left and itself.
            frame = self._mark(port, frame, _drained(port, start_s) - size)
        depart = start_s + size * 8 / port.rate_bps
        if port.loss and self._rng.random() < port.loss:
            counters.lost += 1
            return
        arrive = depart + port.delay_s
        if port.reorder and self._rng.random() < port.reorder:
            counters.reordered += 1
            arrive += port.reorder_delay_s
        self._push(arrive, _AT_NIC, port, frame)


def _drained(port: _Port, now: float) -> int:
    """Let go of the frames that have left the port by `now`; the depth that remains."""
    queue = port.in_queue
    while queue and queue[0][0] <= now:
        port.queue_bytes -= queue.popleft()[1]
    return port.queue_bytes


def connect_qps(a: Nic, b: Nic, **connect_options) -> tuple[int, int]:
    """Create a QP on each NIC and connect them to each other (the out-of-band exchange
    a real application does over TCP). Returns (QPN on a, QPN on b)."""
    qa, qb = a.create_qp(), b.create_qp()
    a.connect(qa.qpn, remote_qpn=qb.qpn, remote_ip=b.ip, remote_mac=b.mac,
              remote_psn=qb.initial_psn, **connect_options)
    b.connect(qb.qpn, remote_qpn=qa.qpn, remote_ip=a.ip, remote_mac=a.mac,
              remote_psn=qa.initial_psn, **connect_options)
    return qa.qpn, qb.qpn


def poll_until(nic: Nic, until_s: float, start_s: float = 0.0) -> list[tuple[float, bytes]]:
    """Poll a NIC with no fabric at every event it asks for, from `start_s` up to
    `until_s`; the frames it sends with their times (for step-by-step tests)."""
    sent = []
    now = start_s
    while True:
        due = nic.next_event(now)
        if due is None or due > until_s:
            return sent
        now = max(now, due)
        sent.extend((now, frame) for frame in nic.poll(now))


@dataclass(frozen=True)
class IncastResult:
    """N senders into one port, over the measuring window."""

    flow_bps: tuple[float, ...]  # each sender's goodput at the receiver
    utilisation: float  # the share of the window the bottleneck port was sending (wire bytes)
    jain: float  # Jain's fairness index of flow_bps: 1 is perfectly fair, 1/N one flow takes all
    queue_bytes: tuple[int, ...]  # the bottleneck's depth, sampled every `sample_s`
    cnps: int  # CNPs the senders received in the window
    rate_series_bps: tuple[tuple[float, ...], ...]  # per sample: each sender's DCQCN rate


def incast_fairness(senders: int, nic_config: NicConfig, *, rate_bps: float = 100e9, ecn: EcnMarking,
                    warmup_s: float = 0.5e-3, window_s: float = 2e-3, sample_s: float = 10e-6,
                    write_bytes: int = 64 << 20, seed: int = 1) -> IncastResult:
    """`senders` NICs write `write_bytes` each, all at once, to one receiver behind one
    switch port of the same speed (1 µs cables, `ecn` marking there); measured from
    `warmup_s` to `warmup_s + window_s` of simulated time."""
    rng = random.Random(seed)

    def nic(index: int) -> Nic:
        return Nic(f"02:00:00:00:01:{index:02x}", f"198.18.1.{index}", rate_bps, nic_config, rng=rng)

    sink = nic(senders + 1)
    flows = [(a, *connect_qps(a, sink)) for a in (nic(i + 1) for i in range(senders))]
    mr = sink.register_mr(bytearray(1 << 20))
    sim = FabricSim(random.Random(seed + 1))
    for a, _, _ in flows:
        sim.attach(a, delay_s=1e-6)
    sim.attach(sink, delay_s=1e-6, ecn=ecn)
    chunk = bytes(1 << 20)
    for a, qa, _ in flows:
        for i in range(write_bytes >> 20):
            a.post_write(qa, i, chunk, remote_va=mr.va, r_key=mr.r_key)
        sim.wake(a)
    sim.run(warmup_s)
    before = [sink.qp(qb).counters.rx_bytes for _, _, qb in flows]
    cnps_before = sum(a.qp(qa).counters.cnps_received for a, qa, _ in flows)
    wire_before = sim.wire_bytes(sink)
    depth, rates = [], []
    t = warmup_s
    while t < warmup_s + window_s - 1e-12:
        t += sample_s
        sim.run(t)
        depth.append(sim.queue_bytes(sink))
        rates.append(tuple(a.qp(qa).cc.rate_bps for a, qa, _ in flows))
    moved = [sink.qp(qb).counters.rx_bytes - b for (_, _, qb), b in zip(flows, before)]
    flow_bps = tuple(m * 8 / window_s for m in moved)
    return IncastResult(flow_bps, (sim.wire_bytes(sink) - wire_before) * 8 / window_s / rate_bps, jain_index(flow_bps), tuple(depth),
                        sum(a.qp(qa).counters.cnps_received for a, qa, _ in flows) - cnps_before, tuple(rates))
