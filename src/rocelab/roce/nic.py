"""The emulated RoCE NIC's core: QPs, scheduler, port pacer, PFC and counters, no I/O.

The shell (nicd) owns the socket and the clock and drives the core with three calls:

    nic.receive(frame, now)      every frame read from the port
    nic.poll(now) -> [frame]     frames to write now
    nic.next_event(now)          when to call poll next (None: nothing pending)

Transmission order at each free port slot: control frames (ACK/NAK/CNP), highest
priority first, then one data packet from the next ready QP in round robin. A frame
waits while its priority is paused by PFC; a data packet also waits for its QP's pacer
(the congestion-control rate). The port itself is paced at `port_rate_bps`, counting
`frame_overhead_bytes` per frame.

Time is whatever `now` the caller passes, in seconds; under time dilation pass the
dilated port rate and a `dilate()`d config (rocelab.roce.config).
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import fields

from rocelab.roce.cc import CcRegistry, builtin_cc_registry
from rocelab.roce.config import NicConfig
from rocelab.roce.qp import (
    NEVER, QP_COUNTERS, QP_REPORT_FIELDS, READ_RESPONSES, MemoryRegion, QpCounters, QpState, QueuePair,
    WorkCompletion, counter_values, reorder_summary,
)
from rocelab.ethernet import ECN_CE, PauseTimers, mac_bytes, pause_duration_s
from rocelab.roce.wire import (
    OP_ACKNOWLEDGE, OP_CNP, PRIORITIES, PSN_MASK, QPN_MASK, MalformedFrame, NotRoce, PauseFrame, ip_to_bytes,
    parse_frame,
)

_RTS = QpState.RTS  # bound once: an enum's member costs ~10× a global to read (see wire.OP_CNP)

_FIRST_QPN = 0x11  # QP0 and QP1 are InfiniBand's management QPs; rxe also starts here
_FIRST_VA = 0x7F00_0000_0000
_PAGE_BYTES = 4096
# QP counters the NIC sums; its own tx/rx count every frame at the port instead.
_QP_TOTALS = tuple(f.name for f in fields(QpCounters)
                   if f.name not in ("tx_packets", "tx_bytes", "rx_packets", "rx_bytes"))


class Nic:
    """One emulated RoCEv2 NIC port with its QPs and memory regions.

    `rng` draws initial PSNs and R_Keys, so a seeded rng makes a run repeatable.
    Misuse of the API (unknown QPN, bad connect arguments) raises ValueError; received
    bytes never raise: bad frames are counted in `counters()["drops"]` by reason.
    """

    def __init__(self, mac: str | bytes, ip: str | bytes, port_rate_bps: float,
                 config: NicConfig | None = None, *, rng: random.Random,
                 cc_registry: CcRegistry | None = None):
        self.mac = mac_bytes(mac)
        self.ip = ip_to_bytes(ip)
        if port_rate_bps <= 0:
            raise ValueError(f"port_rate_bps={port_rate_bps} must be positive")
        self.port_rate_bps = float(port_rate_bps)
        self.config = config or NicConfig()
        self._rng = rng
        self._cc_registry = cc_registry or builtin_cc_registry()
        self._cc_registry.check(self.config.cc_algorithm)
        self._qps: dict[int, QueuePair] = {}
        self._connected: list[QueuePair] = []  # round-robin order of the data scheduler
        self._rr_next = 0
        self._mrs: dict[int, MemoryRegion] = {}
        self._next_qpn = _FIRST_QPN
        self._next_va = _FIRST_VA
        self._completions: deque[WorkCompletion] = deque()
        self._retired: Counter[str] = Counter()  # counters of destroyed QPs
        self._retired_distances: Counter[int] = Counter()  # and their reorder distances
        # Control frames (ACK, NAK, CNP) per priority, with the QP they count against.
        self._control: list[deque[tuple[QueuePair, bytes]]] = [deque() for _ in range(PRIORITIES)]
        self._control_frames = 0  # how many wait in _control: most polls find none
        self._burst_s = self.config.pacing_burst_bytes * 8 / self.port_rate_bps
        self._port_free_s = 0.0
        self._now = 0.0
        self.tx_packets = self.tx_bytes = self.rx_packets = self.rx_bytes = 0
        self.drops: Counter[str] = Counter()
        # PFC: priority p is paused while now < self._pause.until_s[p].
        self._pause = PauseTimers()
        self._pause_frames = [0] * PRIORITIES
        self._xon_frames = [0] * PRIORITIES

    # ---- verbs -----------------------------------------------------------------------

    def register_mr(self, buf: bytearray | memoryview, va: int | None = None) -> MemoryRegion:
        """Make `buf` reachable by remote WRITEs; its VA and R_Key go to the peer out of band."""
        r_key = self._rng.getrandbits(32)
        while r_key in self._mrs:
            r_key = self._rng.getrandbits(32)
        if va is None:
            va = self._next_va
        mr = MemoryRegion(va, r_key, buf)
        self._next_va = max(self._next_va, -(-(va + mr.length) // _PAGE_BYTES) * _PAGE_BYTES)
        self._mrs[r_key] = mr
        return mr

    def deregister_mr(self, r_key: int) -> None:
        self._mrs.pop(r_key, None)

    def create_qp(self, initial_psn: int | None = None) -> QueuePair:
        """A QP in INIT; its `qpn` and `initial_psn` go to the peer out of band."""
        if self._next_qpn > QPN_MASK:
            raise ValueError("out of QP numbers")
        psn = self._rng.getrandbits(24) if initial_psn is None else initial_psn
        if not 0 <= psn <= PSN_MASK:
            raise ValueError(f"initial_psn={psn} must be 0..2^24-1")
        qp = QueuePair(self._next_qpn, psn, mac=self.mac, ip=self.ip, config=self.config,
                       memory_regions=self._mrs, completions=self._completions)
        self._qps[qp.qpn] = qp
        self._next_qpn += 1
        return qp

    def connect(self, qpn: int, *, remote_qpn: int, remote_ip: str | bytes,
                remote_mac: str | bytes, remote_psn: int, udp_sport: int | None = None,
                dscp: int | None = None, pmtu_bytes: int | None = None,
                cc_algorithm: str | None = None, max_rd_atomic: int | None = None) -> None:
        """Move QP `qpn` to RTS towards the peer QP.

        remote_mac is the next hop's MAC (the ToR's, in a routed fabric); remote_psn is the
        peer's initial_psn. None takes the NIC default: udp_sport from the QPN pair,
        dscp, pmtu_bytes and max_rd_atomic from the config, cc_algorithm config.cc_algorithm.
        """
        qp = self.qp(qpn)
        algorithm = cc_algorithm or self.config.cc_algorithm
        cc = self._cc_registry.create(algorithm, self.port_rate_bps, self.config.cc)
        qp.connect(remote_qpn=remote_qpn, remote_ip=ip_to_bytes(remote_ip),
                   remote_mac=mac_bytes(remote_mac), remote_psn=remote_psn,
                   udp_sport=udp_sport, dscp=dscp, pmtu_bytes=pmtu_bytes, cc=cc, max_rd_atomic=max_rd_atomic)
        self._connected.append(qp)

    def reconfigure(self, config: NicConfig) -> None:
        """A setting changed on the running NIC (mlnx_qos, sysfs): PFC and each connected QP's
        priority follow at once; DSCP, ToS and congestion control are a QP's from its connect,
        so they apply to QPs connected from now on."""
        self._cc_registry.check(config.cc_algorithm)
        self.config = config
        for qp in self._qps.values():
            qp.retarget(config)
        self._rr_next = 0

    def destroy_qp(self, qpn: int) -> None:
        """Flush QP `qpn`'s outstanding work (WR_FLUSH_ERR) and forget it; its counters stay
        in the NIC totals, so they never go backwards."""
        qp = self.qp(qpn)
        qp.flush()
        del self._qps[qpn]
        if qp in self._connected:
            self._connected.remove(qp)
            self._rr_next = 0
        self._retired.update(qp.counters.as_dict())
        self._retired_distances.update(qp.reorder_distances)

    def post_write(self, qpn: int, wr_id: int, data: bytes | bytearray | memoryview, *,
                   remote_va: int, r_key: int) -> None:
        """RDMA WRITE `data` to [remote_va, remote_va + len) of the peer's region r_key."""
        self.qp(qpn).post_write(wr_id, data, remote_va, r_key)

    def post_send(self, qpn: int, wr_id: int, data: bytes | bytearray | memoryview) -> None:
        """SEND `data` into the peer QP's oldest posted receive buffer."""
        self.qp(qpn).post_send(wr_id, data)

    def post_read(self, qpn: int, wr_id: int, buf: bytearray | memoryview, *, remote_va: int, r_key: int) -> None:
        """RDMA READ len(buf) bytes from [remote_va, …) of the peer's region r_key into `buf`."""
        self.qp(qpn).post_read(wr_id, buf, remote_va, r_key)

    def post_recv(self, qpn: int, wr_id: int, buf: bytearray | memoryview) -> None:
        """Offer `buf` for one incoming SEND."""
        self.qp(qpn).post_recv(wr_id, buf)

    def poll_completions(self, max_entries: int | None = None) -> list[WorkCompletion]:
        """Completed work requests of every QP, oldest first, removed from the queue."""
        completions = self._completions
        if not completions:  # what most calls find
            return []
        if max_entries is None or max_entries >= len(completions):  # all of them, at once
            taken = list(completions)
            completions.clear()
            return taken
        return [completions.popleft() for _ in range(max_entries)]

    def qp(self, qpn: int) -> QueuePair:
        try:
            return self._qps[qpn]
        except KeyError:
            raise ValueError(f"no QP {qpn:#x} on this NIC") from None

    # ---- data plane --------------------------------------------------------------------

    def receive(self, frame: bytes, now: float) -> None:
        """Take one frame from the port. Never raises on its contents."""
        self._now = now
        self.rx_packets += 1
        self.rx_bytes += len(frame)
        try:
            pkt = parse_frame(frame)
        except MalformedFrame as bad:
            self.drops[bad.reason] += 1
            return
        except NotRoce:
            self.drops["not_roce"] += 1
            return
        if isinstance(pkt, PauseFrame):
            self._on_pause(pkt, now)
            return
        if pkt.dst_ip != self.ip:
            self.drops["wrong_dst_ip"] += 1
            return
        qp = self._qps.get(pkt.dest_qpn)
        if qp is None:
            self.drops["unknown_qp"] += 1
            return
        if qp.state is not _RTS:
            qp.drops["qp_not_ready"] += 1
            return
        if pkt.src_ip != qp.remote_ip:
            qp.drops["wrong_source_ip"] += 1
            return
        counters = qp.counters
        counters.rx_packets += 1
        counters.rx_bytes += pkt.frame_bytes
        opcode = pkt.opcode
        if opcode == OP_ACKNOWLEDGE:
            qp.on_ack(pkt, now)
        elif opcode == OP_CNP:
            qp.on_cnp(now)
        else:
            # A CE-marked request, or READ response, is congestion on the way to this NIC.
            if pkt.ecn == ECN_CE:
                cnp = qp.cnp_frame(now)
                if cnp is not None:
                    self._control[qp.cnp_priority].append((qp, cnp))
                    self._control_frames += 1
            if opcode in READ_RESPONSES:
                qp.on_read_response(pkt, now)
                return
            reply = qp.on_request(pkt)
            if reply is not None and not qp.queue_behind_responses(reply):
                self._control[qp.priority].append((qp, reply))
                self._control_frames += 1

    def poll(self, now: float) -> list[bytes]:
        """Frames to transmit now, in order; the port pacer decides how many."""
        self._now = now
        sendable = self._control_frames > 0
        for qp in self._connected:
            # Timers only where due: check_timeout and repace would return at once elsewhere.
            if qp.rto_deadline_s <= now:
                qp.check_timeout(now)
            if qp.waiting(now):
                qp.repace(now)
            if qp.ready_s <= now:
                sendable = True
        frames = []
        free = self._port_free_s
        if now - self._burst_s > free:  # max() without the builtin call: this runs every poll
            free = now - self._burst_s
        if sendable:  # else _next_frame would find nothing to send
            overhead = self.config.frame_overhead_bytes
            while free <= now:
                frame = self._next_frame(now)
                if frame is None:
                    break
                frames.append(frame)
                self.tx_packets += 1
                self.tx_bytes += len(frame)
                free += (len(frame) + overhead) * 8 / self.port_rate_bps
        self._port_free_s = free
        return frames

    def _next_frame(self, now: float) -> bytes | None:
        pause_until = self._pause.until_s
        if self._control_frames:
            for priority in range(PRIORITIES - 1, -1, -1):
                queue = self._control[priority]
                if queue and pause_until[priority] <= now:
                    qp, frame = queue.popleft()
                    self._control_frames -= 1
                    qp.counters.tx_packets += 1
                    qp.counters.tx_bytes += len(frame)
                    return frame
        qps = self._connected
        n = len(qps)
        rr_next = self._rr_next
        for i in range(n):
            qp = qps[(rr_next + i) % n]
            if qp.ready_s <= now and pause_until[qp.priority] <= now:
                self._rr_next = (rr_next + i + 1) % n
                return qp.next_frame(now)
        return None

    def next_event(self, now: float) -> float | None:
        """The earliest time poll() has something to do (≤ now: at once), None if nothing."""
        port = self._port_free_s
        pause_until = self._pause.until_s
        due = NEVER
        if self._control_frames:
            for priority in range(PRIORITIES):
                if self._control[priority]:
                    due = min(due, max(port, pause_until[priority]))
        for qp in self._connected:
            if qp.rto_deadline_s < due:
                due = qp.rto_deadline_s
            # A QP with a packet to send is due at max(wake_at(), port, pause): that can lower
            # `due` only if each of the three is below it, so with many QPs, once one is due as
            # soon as the port frees, the rest are not asked.
            if qp.ready_s != NEVER and port < due:
                pause = pause_until[qp.priority]
                if pause < due:
                    wake = qp.wake_at()
                    if wake < due:  # due = max(wake, port, pause)
                        due = wake
                        if port > due:
                            due = port
                        if pause > due:
                            due = pause
        return None if due == NEVER else due

    # ---- PFC ---------------------------------------------------------------------------

    def _on_pause(self, pause: PauseFrame, now: float) -> None:
        honoured = self.config.pfc_enabled()
        for priority, quanta in enumerate(pause.quanta):
            if quanta is None:
                continue
            if quanta == 0:  # XON
                self._xon_frames[priority] += 1
            else:
                self._pause_frames[priority] += 1
            if priority not in honoured:  # PFC off for it on this NIC: counted, not obeyed
                continue
            # A new pause time replaces the old one, whether longer or shorter; XON ends it now.
            self._pause.pause(priority, now, pause_duration_s(quanta, self.port_rate_bps))

    def paused_time_s(self, priority: int, now: float) -> float:
        """Total time priority `priority` has spent paused up to `now`."""
        return self._pause.paused_time_s(priority, now)

    # ---- counters ----------------------------------------------------------------------

    def clear_reorder_distances(self) -> None:
        """Start the reorder distances afresh: a max and a p99 cannot be read as a difference
        from a baseline, as the counts are."""
        self._retired_distances.clear()
        for qp in self._qps.values():
            qp.reorder_distances.clear()

    def counters(self, now: float | None = None, packed: bool = False) -> dict:
        """JSON-able counters as of `now`, or of the last receive/poll.

        tx/rx packets and bytes count every frame at the port (dropped ones included);
        the other top-level counters are sums over QPs, destroyed ones included
        (fatal_errors: how many QPs went to ERROR). `drops` holds frames dropped before
        reaching a QP; each QP has its own `drops`. `packed`: each QP's report as a list in
        QP_REPORT_FIELDS' order (expand_qps makes it the dict): a 16-QP NIC's dicts and their
        JSON held nicd's loop ~0.3 ms a request, near a frame's time at the TDFs `up` picks.
        """
        now = self._now if now is None else max(now, self._now)
        totals = self._retired.copy()
        # Column sums over the QPs in C (zip, sum): a 16-QP NIC answers the sampler 20 times a second.
        totals.update(dict(zip(QP_COUNTERS, map(sum, zip(*(counter_values(qp.counters) for qp in self._qps.values()))))))
        distances = self._retired_distances.copy()
        for qp in self._qps.values():
            distances.update(qp.reorder_distances)
        return {
            "tx_packets": self.tx_packets, "tx_bytes": self.tx_bytes,
            "rx_packets": self.rx_packets, "rx_bytes": self.rx_bytes,
            **{name: totals[name] for name in _QP_TOTALS},
            "qps_in_error": sum(qp.state is QpState.ERROR for qp in self._qps.values()),
            "reorder_distance": reorder_summary(distances),  # every QP's, destroyed ones included
            "drops": dict(self.drops),
            "pfc": {
                "rx_pause_frames": list(self._pause_frames),
                "rx_xon_frames": list(self._xon_frames),
                "paused_time_s": [self.paused_time_s(p, now) for p in range(PRIORITIES)],
            },
            "qps": {str(qpn): qp.packed_report(now) if packed else qp.report(now) for qpn, qp in self._qps.items()},
        }


def expand_qps(counters: dict) -> dict:
    """Nic.counters(packed=True) as Nic.counters() gives it: each QP's list as its dict."""
    return {**counters, "qps": {qpn: dict(zip(QP_REPORT_FIELDS, values)) for qpn, values in counters["qps"].items()}}
