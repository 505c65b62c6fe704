"""A reliable-connected (RC) queue pair: requester and responder halves.

Requester: work requests (RDMA WRITE, SEND) get their PSNs when posted, one per
path-MTU segment, so go-back-N only has to move a cursor. Packets are built when the
NIC's scheduler asks for one; AckReq rides on a message's last packet, every
`ack_req_interval_packets` and whenever the window fills. An ACK of PSN p acknowledges
everything up to p; a NAK (PSN sequence error) with PSN p acknowledges up to p − 1 and
sends everything again from p; a timeout sends everything again from the oldest
unacknowledged PSN, doubling the timeout each time, and fails the QP after retry_limit.

Responder, by `receive_order`:

  gbn    accepts only the expected PSN. A later PSN is dropped and NAKed once per gap (not
         again until the expected PSN arrives): the requester goes back N.
  place  ConnectX-5 and later's out-of-order data placement for RC (NVIDIA: "packets can now
         be handled instead of being dropped, in order to avoid retransmission"; MLNX_OFED's
         "Out-of-Order (OOO) Data Placement", switched on per device by
         MLX5_RELAXED_PACKET_ORDERING_ON). A later PSN within the window is kept, not NAKed;
         when the expected PSN arrives, everything contiguous behind it is placed in PSN order,
         ACKed cumulatively, and a message completes once it is contiguous. What NVIDIA does
         not document is how a real loss is found; here, a hole is taken for a loss once a
         packet arrives place_nak_distance_packets PSNs past it: one NAK (PSN sequence error
         at the hole), so the requester resends from the hole (what it resends that was kept
         arrives again as a duplicate); the requester's timeout remains the backstop. Kept
         packets wait in the responder (the window's memory) and reach the memory region when
         contiguous: the bytes a WRITE leaves and the completions are what placement gives,
         the order memory is written in is not modelled.

Either way an earlier PSN is a duplicate, answered with a re-ACK (the first after progress,
and any with AckReq); a duplicate RDMA READ request is executed again from its PSN (its
responses were lost; what is still queued of its earlier answer from there on is dropped), as
far back as half the PSN space, since a READ takes a PSN per response. A fatal NAK goes out
behind the READ responses owed for earlier requests. Accepted WRITEs land in a registered
memory region by VA and R_Key; SENDs land in the oldest posted receive. Counters:
`ooo_received` (packets ahead of the expected PSN), the reorder distance (how far ahead, in
PSNs: `reorder_distances`, its max and p99 in the report) and NAKs by cause
(`naks_sent_out_of_order` under gbn, `naks_sent_place_gap` under place, beside the fatal ones
in `naks_sent` and `rnr_naks_sent`).

RDMA READ, as the InfiniBand specification's RC transport has it: a read of N path-MTU
segments is one request (BTH + RETH) that takes N PSNs of the requester's sequence; the
responder answers with N responses (FIRST, MIDDLE…, LAST, or ONLY; AETH on all but MIDDLE)
carrying those PSNs, read from its region by VA and R_Key, from its own side of the QP (the
same pacer and congestion control as its requests; CE-marked responses make the requester send
the CNPs). Responses and the ACKs of later requests leave the responder in PSN order. A
response acknowledges everything before its read. The requester keeps at most `max_rd_atomic`
reads outstanding (the NIC's, or its connect()'s); a response ahead of the one it expects
means one was lost: it asks again from the first missing PSN (a new request for the rest of
the read, once per gap), and so does an ACK or NAK for a PSN past an incomplete read (the
responder answers in order, so the read's responses were lost), and so does a timeout.

Internally PSNs are unbounded integers ("seq"), reduced to 24 bits only on the wire,
so wrap-around needs no special cases. Nothing here raises on a packet: problems are
counted in `drops` by reason.
"""

from __future__ import annotations

import operator
import zlib
from collections import Counter, deque
from dataclasses import dataclass, fields
from enum import StrEnum

from rocelab.roce.cc import CongestionControl
from rocelab.roce.config import PMTU_VALUES_BYTES, NicConfig
from rocelab.roce.wire import (
    CNP_RESERVED,
    ECN_ECT0,
    PSN_MASK,
    QPN_MASK,
    SYNDROME_KIND_ACK,
    SYNDROME_KIND_MASK,
    SYNDROME_KIND_NAK,
    SYNDROME_KIND_RNR_NAK,
    OP_ACKNOWLEDGE,
    OP_CNP,
    FlowHeaders,
    Opcode,
    RocePacket,
    Syndrome,
    aeth,
    reth,
)


class QpState(StrEnum):
    INIT = "INIT"  # created; PSN and QPN known, waiting for connect()
    RTS = "RTS"  # connected: sends and receives
    ERROR = "ERROR"  # failed; outstanding work completed with an error status


class WcStatus(StrEnum):
    """Work completion status, named as in ibverbs (IBV_WC_*)."""

    SUCCESS = "SUCCESS"
    LOC_LEN_ERR = "LOC_LEN_ERR"
    REM_INV_REQ_ERR = "REM_INV_REQ_ERR"
    REM_ACCESS_ERR = "REM_ACCESS_ERR"
    REM_OP_ERR = "REM_OP_ERR"
    RETRY_EXC_ERR = "RETRY_EXC_ERR"
    RNR_RETRY_EXC_ERR = "RNR_RETRY_EXC_ERR"
    WR_FLUSH_ERR = "WR_FLUSH_ERR"


class WcOpcode(StrEnum):
    RDMA_WRITE = "RDMA_WRITE"
    RDMA_READ = "RDMA_READ"
    SEND = "SEND"
    RECV = "RECV"


@dataclass(frozen=True, slots=True)
class WorkCompletion:
    wr_id: int
    qpn: int
    opcode: WcOpcode
    status: WcStatus
    byte_len: int


class MemoryRegion:
    """A registered buffer that remote WRITEs may reach at [va, va + length) with r_key."""

    __slots__ = ("va", "r_key", "buf", "_view")

    def __init__(self, va: int, r_key: int, buf: bytearray | memoryview):
        self.va = va
        self.r_key = r_key
        self.buf = buf
        self._view = memoryview(buf).cast("B")
        if self._view.readonly:
            raise ValueError("a memory region needs a writable buffer (bytearray)")

    @property
    def length(self) -> int:
        return self._view.nbytes

    def window(self, va: int, length: int) -> memoryview | None:
        """The bytes [va, va + length) if they lie inside the region, else None."""
        start = va - self.va
        if start < 0 or length < 0 or start + length > self._view.nbytes:
            return None
        return self._view[start:start + length]


@dataclass(slots=True)
class QpCounters:
    tx_packets: int = 0
    tx_bytes: int = 0
    rx_packets: int = 0
    rx_bytes: int = 0
    retransmitted_packets: int = 0
    retransmitted_bytes: int = 0
    acks_sent: int = 0
    acks_received: int = 0
    naks_sent: int = 0
    naks_received: int = 0
    rnr_naks_sent: int = 0
    rnr_naks_received: int = 0
    timeouts: int = 0
    duplicates_received: int = 0
    ooo_received: int = 0  # request packets ahead of the expected PSN
    naks_sent_out_of_order: int = 0  # gbn: sequence-error NAKs for a PSN ahead of the expected one
    naks_sent_place_gap: int = 0  # place: sequence-error NAKs for a hole taken for a loss
    ce_received: int = 0
    cnps_sent: int = 0
    cnps_received: int = 0
    read_responses_sent: int = 0  # responder: RDMA READ response packets, again ones included
    read_rerequests: int = 0  # requester: reads asked again from a missing response (not timeouts)
    implied_naks: int = 0  # of those, found by an ACK or NAK past the read (mlx5's implied_nak_seq_err)
    messages_sent: int = 0
    messages_received: int = 0
    fatal_errors: int = 0  # transitions to ERROR other than by destroy

    def as_dict(self) -> dict[str, int]:
        # Not dataclasses.asdict: its deep copy made a 16-QP NIC's counters request take ~2 ms
        # of nicd's loop; these are flat ints.
        return dict(zip(QP_COUNTERS, counter_values(self)))


QP_COUNTERS = tuple(f.name for f in fields(QpCounters))
counter_values = operator.attrgetter(*QP_COUNTERS)  # QpCounters → its values in QP_COUNTERS' order, in one C call
QP_REPORT_FIELDS = ("state", "error_status", "priority", "cc", *QP_COUNTERS, "reorder_distance", "drops")


class _SendWr:
    """A posted SEND, WRITE or READ; `data` is what a SEND or WRITE sends, or where a READ lands."""

    __slots__ = ("wr_id", "opcode", "segment_opcodes", "data", "remote_va", "r_key", "first_seq", "last_seq")

    def __init__(self, wr_id: int, opcode: WcOpcode, data: memoryview, remote_va: int,
                 r_key: int, first_seq: int, last_seq: int):
        self.wr_id = wr_id
        self.opcode = opcode
        self.segment_opcodes = _SEGMENT_OPCODES.get(opcode)  # looked up once, not per packet
        self.data = data
        self.remote_va = remote_va
        self.r_key = r_key
        self.first_seq = first_seq
        self.last_seq = last_seq


class _ReadResponses:
    """The responder's answer to one READ request: `count` responses from PSN `first_seq`, of
    which those before `stop` are still to go (all, unless the read was asked again mid-way)."""

    __slots__ = ("first_seq", "data", "count", "sent", "stop")

    def __init__(self, first_seq: int, data: memoryview, count: int):
        self.first_seq = first_seq
        self.data = data
        self.count = count
        self.sent = 0
        self.stop = count


class _RecvWr:
    __slots__ = ("wr_id", "buf")

    def __init__(self, wr_id: int, buf: memoryview):
        self.wr_id = wr_id
        self.buf = buf


NEVER = float("inf")  # a time that does not come: no timer running, nothing to send
# What the per-packet paths use of the enums, bound once and opcodes as ints (see wire.OP_CNP).
_RTS = QpState.RTS
_RDMA_WRITE = WcOpcode.RDMA_WRITE
_RDMA_READ = WcOpcode.RDMA_READ
OP_READ_REQUEST = int(Opcode.RDMA_READ_REQUEST)
# (ONLY, FIRST, MIDDLE, LAST) of a read's responses, as for a WR's segments below.
_READ_RESPONSE_OPCODES = tuple(map(int, (Opcode.RDMA_READ_RESPONSE_ONLY, Opcode.RDMA_READ_RESPONSE_FIRST,
                                         Opcode.RDMA_READ_RESPONSE_MIDDLE, Opcode.RDMA_READ_RESPONSE_LAST)))
READ_RESPONSES = frozenset(_READ_RESPONSE_OPCODES)
_ENDS_READ = frozenset(map(int, (Opcode.RDMA_READ_RESPONSE_LAST, Opcode.RDMA_READ_RESPONSE_ONLY)))
_SYNDROME_ACK = int(Syndrome.ACK)
_BEGINS_MESSAGE = frozenset(map(int, (Opcode.SEND_FIRST, Opcode.SEND_ONLY,
                                      Opcode.RDMA_WRITE_FIRST, Opcode.RDMA_WRITE_ONLY)))
_ENDS_MESSAGE = frozenset(map(int, (Opcode.SEND_LAST, Opcode.SEND_ONLY,
                                    Opcode.RDMA_WRITE_LAST, Opcode.RDMA_WRITE_ONLY)))
_FULL_SEGMENT = frozenset(map(int, (Opcode.SEND_FIRST, Opcode.SEND_MIDDLE,
                                    Opcode.RDMA_WRITE_FIRST, Opcode.RDMA_WRITE_MIDDLE)))
_WRITE_OPCODES = frozenset(map(int, (Opcode.RDMA_WRITE_FIRST, Opcode.RDMA_WRITE_MIDDLE,
                                     Opcode.RDMA_WRITE_LAST, Opcode.RDMA_WRITE_ONLY)))
# (ONLY, FIRST, MIDDLE, LAST) per kind of work request.
_SEGMENT_OPCODES = {
    WcOpcode.RDMA_WRITE: tuple(map(int, (Opcode.RDMA_WRITE_ONLY, Opcode.RDMA_WRITE_FIRST,
                                         Opcode.RDMA_WRITE_MIDDLE, Opcode.RDMA_WRITE_LAST))),
    WcOpcode.SEND: tuple(map(int, (Opcode.SEND_ONLY, Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST))),
}
_NAK_STATUS = {
    Syndrome.NAK_INVALID_REQUEST: WcStatus.REM_INV_REQ_ERR,
    Syndrome.NAK_REMOTE_ACCESS_ERROR: WcStatus.REM_ACCESS_ERR,
    Syndrome.NAK_REMOTE_OPERATIONAL_ERROR: WcStatus.REM_OP_ERR,
}


def psn_delta(psn: int, reference: int) -> int:
    """Signed distance from 24-bit PSN `reference` to `psn`, in [−2^23, 2^23)."""
    return ((psn - reference + 0x800000) & PSN_MASK) - 0x800000


def reorder_summary(distances: Counter[int]) -> dict[str, int]:
    """The max and p99 of reorder distances counted as {distance: arrivals}; 0 for none."""
    total = sum(distances.values())
    p99 = seen = 0
    for distance in sorted(distances):
        seen += distances[distance]
        if seen >= 0.99 * total:
            p99 = distance
            break
    return {"max": max(distances, default=0), "p99": p99}


def default_udp_sport(qpn: int, remote_qpn: int) -> int:
    """A stable UDP source port in 0xC000–0xFFFF from the QP pair, for ECMP entropy."""
    return 0xC000 | (zlib.crc32(qpn.to_bytes(3, "big") + remote_qpn.to_bytes(3, "big")) & 0x3FFF)


class QueuePair:
    """One RC QP. Made by `Nic.create_qp`; the NIC feeds it packets and asks it for frames."""

    # Slots: a QP has too many attributes for CPython's shared-key instance dicts, and its
    # per-packet reads and writes are quicker through slots than through a dict of its own.
    __slots__ = ("qpn", "initial_psn", "state", "error_status", "counters", "drops", "_mac", "_ip", "_cfg",
                 "_mrs", "_completions", "remote_qpn", "remote_ip", "priority", "cnp_priority", "cc", "_pmtu",
                 "_tx", "_cnp_tx", "_send_wrs", "_send_idx", "_next_seq", "_send_seq", "_una_seq",
                 "_sent_high_seq", "_rto_s", "rto_deadline_s", "_retries", "_rnr_retries", "_rnr_until_s",
                 "next_send_s", "ready_s", "_pace_from_s", "_pace_bits", "_pace_rate_bps", "_expected_seq",
                 "_msn", "_nak_sent", "_dup_acked", "_unacked_packets", "_recvs", "_rx_view", "_rx_offset",
                 "_rx_is_write", "_rx_recv", "_last_cnp_s", "_kept", "reorder_distances", "_reads", "_reads_sent",
                 "_read_gap_asked", "_responses", "_max_rd_atomic")

    def __init__(self, qpn: int, initial_psn: int, *, mac: bytes, ip: bytes, config: NicConfig,
                 memory_regions: dict[int, MemoryRegion], completions: deque[WorkCompletion]):
        self.qpn = qpn
        self.initial_psn = initial_psn
        self.state = QpState.INIT
        self.error_status: WcStatus | None = None
        self.counters = QpCounters()
        self.drops: Counter[str] = Counter()
        self._mac = mac
        self._ip = ip
        self._cfg = config
        self._mrs = memory_regions
        self._completions = completions
        # Set by connect().
        self.remote_qpn = 0
        self.remote_ip = b""
        self.priority = 0
        self.cnp_priority = 0
        self.cc: CongestionControl | None = None
        self._pmtu = config.pmtu_bytes
        self._tx: FlowHeaders | None = None
        self._cnp_tx: FlowHeaders | None = None
        # Requester.
        self._send_wrs: deque[_SendWr] = deque()
        self._send_idx = 0  # index in _send_wrs of the WR holding _send_seq
        self._next_seq = initial_psn  # next PSN to assign to a posted WR
        self._send_seq = initial_psn  # next PSN to put on the wire
        self._una_seq = initial_psn  # oldest unacknowledged PSN
        self._sent_high_seq = initial_psn  # one past the highest PSN ever sent
        self._rto_s = config.retransmit_timeout_s
        self.rto_deadline_s = NEVER  # the retransmit timer, NEVER when not running; it runs only while RTS
        self._retries = 0
        self._rnr_retries = 0
        self._rnr_until_s = 0.0
        self._max_rd_atomic = config.max_rd_atomic  # or connect()'s
        self._reads = 0  # READ WRs posted and not complete
        self._reads_sent = 0  # of those, the ones before the send cursor (requested)
        self._read_gap_asked = False  # a response was missing and the read was asked again
        self.next_send_s = 0.0  # pacer: earliest start of the next data packet
        # When the next data packet may start (pacer, RNR wait), NEVER if none can. The NIC reads
        # it for every QP at every poll and next_event, so it is kept (_update_ready) wherever what
        # it depends on moves, not worked out there.
        self.ready_s = NEVER
        # The pacer as a rate limiter: the bits of the last packet still to "drain" at the CC
        # rate from _pace_from_s; a rate change mid-gap re-plans what is left (repace).
        self._pace_from_s = 0.0
        self._pace_bits = 0.0
        self._pace_rate_bps = 0.0
        # Responder.
        self._expected_seq = 0
        self._msn = 0
        self._nak_sent = False  # a NAK for this gap is out; stay quiet until it fills
        self._dup_acked = False  # a duplicate was re-ACKed since the last progress
        self._unacked_packets = 0
        self._recvs: deque[_RecvWr] = deque()
        self._rx_view: memoryview | None = None  # where the message in progress lands
        self._rx_offset = 0
        self._rx_is_write = False
        self._rx_recv: _RecvWr | None = None
        self._last_cnp_s = float("-inf")
        self._kept: dict[int, RocePacket] = {}  # place: packets ahead of the expected PSN, by seq
        self.reorder_distances: Counter[int] = Counter()  # PSNs ahead of the expected one → arrivals
        # READ responses to send, in PSN order, with the ACK/NAK frames of later requests behind them.
        self._responses: deque[_ReadResponses | bytes] = deque()

    # ---- setup -------------------------------------------------------------------

    def connect(self, *, remote_qpn: int, remote_ip: bytes, remote_mac: bytes, remote_psn: int,
                udp_sport: int | None, dscp: int | None, pmtu_bytes: int | None,
                cc: CongestionControl, max_rd_atomic: int | None = None) -> None:
        """INIT → RTS with the peer's QPN, address and start PSN (exchanged out of band)."""
        cfg = self._cfg
        dscp = cfg.dscp if dscp is None else dscp
        pmtu = cfg.pmtu_bytes if pmtu_bytes is None else pmtu_bytes
        sport = default_udp_sport(self.qpn, remote_qpn) if udp_sport is None else udp_sport
        problems = []
        if self.state is not QpState.INIT:
            problems.append(f"QP {self.qpn} is {self.state}, not INIT")
        if not 0 < remote_qpn <= QPN_MASK:
            problems.append(f"remote_qpn={remote_qpn} must be 1..2^24-1")
        if not 0 <= remote_psn <= PSN_MASK:
            problems.append(f"remote_psn={remote_psn} must be 0..2^24-1")
        if not 0 <= sport <= 0xFFFF:
            problems.append(f"udp_sport={sport} must be 0..65535")
        if not 0 <= dscp < 64:
            problems.append(f"dscp={dscp} must be 0..63")
        if pmtu not in PMTU_VALUES_BYTES:
            problems.append(f"pmtu_bytes={pmtu} must be one of {PMTU_VALUES_BYTES}")
        if max_rd_atomic is not None and max_rd_atomic < 1:
            problems.append(f"max_rd_atomic={max_rd_atomic} must be at least 1")
        if problems:
            raise ValueError("; ".join(problems))
        self.remote_qpn = remote_qpn
        self.remote_ip = remote_ip
        self.priority = cfg.priority_of(dscp)
        self.cnp_priority = cfg.priority_of(cfg.cnp_dscp)
        self.cc = cc
        self._pmtu = pmtu
        if max_rd_atomic is not None:
            self._max_rd_atomic = max_rd_atomic
        self._expected_seq = remote_psn

        def tci(priority: int) -> int | None:
            return None if cfg.vlan_id is None else (priority << 13) | cfg.vlan_id

        self._tx = FlowHeaders(self._mac, remote_mac, self._ip, remote_ip, dscp=dscp,
                               ecn=ECN_ECT0, ttl=cfg.ttl, udp_sport=sport,
                               vlan_tci=tci(self.priority))
        # CNPs are not ECN-capable: a congested queue must not mark the congestion signal.
        self._cnp_tx = FlowHeaders(self._mac, remote_mac, self._ip, remote_ip, dscp=cfg.cnp_dscp,
                                   ecn=0, ttl=cfg.ttl, udp_sport=sport,
                                   vlan_tci=tci(self.cnp_priority))
        self.state = QpState.RTS
        self._update_ready()

    def retarget(self, config: NicConfig) -> None:
        """The NIC's settings changed: a connected QP's frames wait on the priority the new
        trust and DSCP map give its DSCP (an 802.1Q tag, where there is one, keeps its PCP)."""
        self._cfg = config
        if self._tx is not None:
            self.priority = config.priority_of(self._tx.dscp)
            self.cnp_priority = config.priority_of(self._cnp_tx.dscp)
        self._update_ready()  # the window may have changed

    # ---- posting -------------------------------------------------------------------

    def post_write(self, wr_id: int, data: bytes | bytearray | memoryview, remote_va: int,
                   r_key: int) -> None:
        self._post(wr_id, WcOpcode.RDMA_WRITE, data, remote_va, r_key)

    def post_send(self, wr_id: int, data: bytes | bytearray | memoryview) -> None:
        self._post(wr_id, WcOpcode.SEND, data, 0, 0)

    def post_read(self, wr_id: int, buf: bytearray | memoryview, remote_va: int, r_key: int) -> None:
        """RDMA READ len(buf) bytes from [remote_va, …) of the peer's region r_key into buf."""
        if memoryview(buf).readonly:
            raise ValueError("a read lands in a writable buffer (bytearray)")
        self._post(wr_id, _RDMA_READ, buf, remote_va, r_key)

    def post_recv(self, wr_id: int, buf: bytearray | memoryview) -> None:
        view = memoryview(buf).cast("B")
        if view.readonly:
            raise ValueError("a receive buffer must be writable (bytearray)")
        if self.state is QpState.ERROR:
            self._complete(wr_id, WcOpcode.RECV, WcStatus.WR_FLUSH_ERR, 0)
        else:
            self._recvs.append(_RecvWr(wr_id, view))

    def _post(self, wr_id: int, opcode: WcOpcode, data: bytes | bytearray | memoryview,
              remote_va: int, r_key: int) -> None:
        view = memoryview(data).cast("B")
        if view.nbytes >= 1 << 31:
            raise ValueError(f"a message of {view.nbytes} bytes exceeds the 2 GiB RC limit")
        if self.state is QpState.ERROR:
            self._complete(wr_id, opcode, WcStatus.WR_FLUSH_ERR, view.nbytes)
            return
        packets = self._segments(view.nbytes)
        first = self._next_seq
        self._send_wrs.append(_SendWr(wr_id, opcode, view, remote_va, r_key, first,
                                      first + packets - 1))
        self._next_seq = first + packets
        if opcode is _RDMA_READ:
            self._reads += 1
        self._update_ready()

    def _segments(self, nbytes: int) -> int:
        """Packets (so PSNs) a message of `nbytes` takes at this QP's path MTU: at least one."""
        return max(1, -(-nbytes // self._pmtu))

    # ---- requester: sending --------------------------------------------------------

    def _update_ready(self) -> None:
        if self._responses:  # the responder's READ responses wait only for the pacer (and leave in ERROR too)
            self.ready_s = self.next_send_s
        elif (self.state is not _RTS or self._send_seq >= self._next_seq
                or self._send_seq - self._una_seq >= self._cfg.max_inflight_packets
                or (self._reads_sent >= self._max_rd_atomic and self._reads
                    and self._send_wrs[self._send_idx].opcode is _RDMA_READ)):
            self.ready_s = NEVER
        else:  # max() without the builtin's call: this runs for every packet sent
            self.ready_s = self._rnr_until_s if self._rnr_until_s > self.next_send_s else self.next_send_s

    def next_frame(self, now: float) -> bytes:
        """The next READ response, or else the data packet at the send cursor; call only when
        ready_s ≤ now."""
        if self._responses:
            return self._next_response(now)
        cfg = self._cfg
        seq = self._send_seq
        wr = self._send_wrs[self._send_idx]
        index = seq - wr.first_seq
        if wr.opcode is _RDMA_READ:
            return self._read_request(wr, index, now)
        only, first, middle, last = wr.segment_opcodes
        is_last = seq == wr.last_seq
        extension = b""
        if index == 0:
            opcode = only if is_last else first
            if wr.opcode is _RDMA_WRITE:
                extension = reth(wr.remote_va, wr.r_key, wr.data.nbytes)
        else:
            opcode = last if is_last else middle
        offset = index * self._pmtu
        payload = wr.data[offset:offset + self._pmtu]
        self._send_seq = seq + 1
        if is_last:
            self._send_idx += 1
        ackreq = (is_last or seq % cfg.ack_req_interval_packets == 0
                  or seq + 1 - self._una_seq >= cfg.max_inflight_packets)
        frame = self._tx.frame(opcode, self.remote_qpn, seq, ackreq=ackreq,
                               extension=extension, payload=payload)
        self._sent(frame, seq, seq + 1, now)
        return frame

    def _read_request(self, wr: _SendWr, index: int, now: float) -> bytes:
        """The READ request for the read's rest from PSN first_seq + index (all of it at first;
        after a lost response, from the first missing one). It takes every PSN the rest's
        responses carry."""
        offset = index * self._pmtu
        seq = self._send_seq
        frame = self._tx.frame(OP_READ_REQUEST, self.remote_qpn, seq,
                               extension=reth(wr.remote_va + offset, wr.r_key, wr.data.nbytes - offset))
        self._send_seq = wr.last_seq + 1
        self._send_idx += 1
        self._reads_sent += 1
        self._sent(frame, seq, wr.last_seq + 1, now)
        return frame

    def _next_response(self, now: float) -> bytes:
        """The responder's next READ response (or an ACK/NAK queued behind the responses)."""
        item = self._responses[0]
        counters = self.counters
        if isinstance(item, bytes):
            self._responses.popleft()
            counters.tx_packets += 1
            counters.tx_bytes += len(item)
            self._update_ready()
            return item
        index = item.sent
        item.sent = index + 1
        only, first, middle, last = _READ_RESPONSE_OPCODES
        if item.count == 1:
            opcode = only
        else:
            opcode = first if index == 0 else last if item.sent == item.count else middle
        if item.sent == item.stop:
            self._responses.popleft()
        offset = index * self._pmtu
        frame = self._tx.frame(opcode, self.remote_qpn, item.first_seq + index,
                               extension=b"" if opcode == middle else aeth(_SYNDROME_ACK, self._msn),
                               payload=item.data[offset:offset + self._pmtu])
        counters.read_responses_sent += 1
        counters.tx_packets += 1
        counters.tx_bytes += len(frame)
        self._pace(frame, now)
        return frame

    def _sent(self, frame: bytes, seq: int, end_seq: int, now: float) -> None:
        """Count a requester's packet that takes PSNs [seq, end_seq), start the timer and pace."""
        size = len(frame)
        counters = self.counters
        counters.tx_packets += 1
        counters.tx_bytes += size
        if seq < self._sent_high_seq:
            counters.retransmitted_packets += 1
            counters.retransmitted_bytes += size
        if end_seq > self._sent_high_seq:
            self._sent_high_seq = end_seq
        if self.rto_deadline_s == NEVER:
            self.rto_deadline_s = now + self._rto_s
        self._pace(frame, now)

    def _pace(self, frame: bytes, now: float) -> None:
        """Pace at the congestion-control rate, counting what the wire carries."""
        cfg = self._cfg
        wire_bytes = len(frame) + cfg.frame_overhead_bytes
        cc = self.cc
        cc.advance(now)
        cc.on_sent(wire_bytes, now)
        rate_bps = cc.rate_bps
        start = now - cfg.pacing_burst_bytes * 8 / rate_bps
        if self.next_send_s >= start:  # max(next_send_s, start)
            start = self.next_send_s
        self._pace_from_s, self._pace_bits, self._pace_rate_bps = start, wire_bytes * 8, rate_bps
        self.next_send_s = start + wire_bytes * 8 / rate_bps
        self._update_ready()

    def waiting(self, now: float) -> bool:
        """Whether the QP holds back a packet it has, or a gap of its pacer's, at `now`."""
        return now < self.next_send_s or now < self.ready_s < NEVER

    def wake_at(self) -> float:
        """When the NIC must next look at this QP's sending, given ready_s is not NEVER:
        ready_s, or sooner when the congestion control's own timer can raise the rate while the
        pacer waits."""
        ready = self.ready_s
        change = self.cc.next_change_s()
        if change is None:
            return ready
        if self._pace_from_s > change:  # min(ready, max(change, pace_from)), without the calls
            change = self._pace_from_s
        return change if change < ready else ready

    def repace(self, now: float) -> None:
        """Apply the CC's timers up to `now`; call while waiting(now) (its pacer, or an RNR wait:
        wake_at() wakes the NIC for them in both). If the rate moved while the pacer waits, what
        is left of the gap drains at the new rate, as a hardware rate limiter does."""
        cc = self.cc
        if cc is None:
            return
        cc.advance(now)
        if now >= self.next_send_s:  # an RNR wait: no gap of the pacer's to re-plan
            return
        rate_bps = cc.rate_bps
        if rate_bps == self._pace_rate_bps or now < self._pace_from_s:
            return
        left_bits = max(0.0, self._pace_bits - (now - self._pace_from_s) * self._pace_rate_bps)
        self._pace_from_s, self._pace_bits, self._pace_rate_bps = now, left_bits, rate_bps
        self.next_send_s = now + left_bits / rate_bps
        self._update_ready()

    # ---- requester: ACK, NAK, timeout ----------------------------------------------

    def on_ack(self, pkt: RocePacket, now: float) -> None:
        """An ACKNOWLEDGE packet for this QP's requester."""
        seq = self._una_seq + psn_delta(pkt.psn, self._una_seq & PSN_MASK)
        kind = pkt.syndrome & SYNDROME_KIND_MASK
        if kind == SYNDROME_KIND_ACK:
            self.counters.acks_received += 1
            if not self._una_seq - 1 <= seq < self._sent_high_seq:
                self.drops["ack_psn_out_of_window"] += 1
                return
            acked = self._unread(seq) if self._reads else seq
            self._acknowledge(acked, now)
            if acked < seq:  # what the responder sent for a read up to seq was lost
                self._ask_again(acked + 1, implied=True)
            return
        if kind not in (SYNDROME_KIND_NAK, SYNDROME_KIND_RNR_NAK):
            self.drops["bad_syndrome"] += 1
            return
        # A NAK carries the PSN the responder expects: everything before it arrived.
        if not self._una_seq <= seq < self._sent_high_seq:
            self.drops["nak_psn_out_of_window"] += 1
            return
        acked = self._unread(seq - 1) if self._reads else seq - 1
        self._acknowledge(acked, now)
        if acked < seq - 1:  # what the responder sent for a read before seq was lost
            self._ask_again(acked + 1, implied=True)
            seq = acked + 1
        if kind == SYNDROME_KIND_RNR_NAK:
            self.counters.rnr_naks_received += 1
            self._rnr_retries += 1
            if self._rnr_retries > self._cfg.rnr_retry_limit:
                self._fail(WcStatus.RNR_RETRY_EXC_ERR)
                return
            self._rnr_until_s = now + self._cfg.rnr_retry_delay_s
            # The wait is the responder's request, not a loss: no timeout during it.
            self.rto_deadline_s = self._rnr_until_s + self._rto_s
            self._rewind(seq)
            return
        self.counters.naks_received += 1
        if pkt.syndrome == Syndrome.NAK_PSN_SEQUENCE_ERROR:
            self._rewind(seq)
        else:
            self._fail(_NAK_STATUS.get(pkt.syndrome, WcStatus.REM_OP_ERR))

    def _acknowledge(self, seq: int, now: float) -> None:
        """Everything up to and including `seq` has arrived."""
        if seq < self._una_seq:
            return
        self._una_seq = seq + 1
        self._retries = 0
        self._rnr_retries = 0
        self._rto_s = self._cfg.retransmit_timeout_s
        wrs = self._send_wrs
        while wrs and wrs[0].last_seq <= seq:
            wr = wrs.popleft()
            if wr.opcode is _RDMA_READ:
                self._reads -= 1
                if self._send_idx > 0:  # it was requested (before the cursor)
                    self._reads_sent -= 1
            self._send_idx -= 1
            self.counters.messages_sent += 1
            self._complete(wr.wr_id, wr.opcode, WcStatus.SUCCESS, wr.data.nbytes)
        if self._send_seq <= seq:
            # Acknowledged beyond the cursor (after a rewind): skip what arrived.
            self._send_seq = seq + 1
            self._send_idx = 0
            self._reads_sent = 0
        self.rto_deadline_s = now + self._rto_s if self._una_seq < self._sent_high_seq else NEVER
        self._update_ready()

    def _rewind(self, seq: int) -> None:
        """Go back N: send again from `seq`."""
        self._send_seq = seq
        self._send_idx = 0
        self._reads_sent = 0
        for wr in self._send_wrs:
            if wr.last_seq >= seq:
                break
            self._send_idx += 1
            self._reads_sent += wr.opcode is _RDMA_READ
        self._update_ready()

    def _unread(self, seq: int) -> int:
        """The PSN before the first READ response still missing at or before `seq` (an ACK or
        NAK up to `seq` acknowledges no further: the read's data has not arrived), else seq."""
        for wr in self._send_wrs:
            if wr.first_seq > seq:
                break
            if wr.opcode is _RDMA_READ:
                missing = wr.first_seq if wr.first_seq > self._una_seq else self._una_seq
                return missing - 1 if missing <= seq else seq
        return seq

    def _ask_again(self, seq: int, *, implied: bool = False) -> None:
        """The READ response for `seq` is missing (a later response came, or, `implied`, an ACK or
        NAK past it): request the read again from it, once per gap (progress clears the flag)."""
        if self._read_gap_asked or self._send_seq <= seq:
            return
        self._read_gap_asked = True
        self.counters.read_rerequests += 1
        self.counters.implied_naks += implied
        self._rewind(seq)

    def on_read_response(self, pkt: RocePacket, now: float) -> None:
        """An RDMA READ response for this QP's requester: the next one expected lands in the
        read's buffer; it acknowledges everything before the read."""
        una = self._una_seq
        # Nearly every response carries the PSN expected next: no signed distance to work out.
        seq = una if pkt.psn == una & PSN_MASK else una + psn_delta(pkt.psn, una & PSN_MASK)
        if seq < una:
            self.drops["duplicate_read_response"] += 1
            return
        if seq >= self._sent_high_seq:
            self.drops["read_response_out_of_window"] += 1
            return
        wrs = self._send_wrs
        wr = wrs[0] if wrs else None
        if wr is not None and wr.opcode is not _RDMA_READ:
            wr = next((wr for wr in wrs if wr.opcode is _RDMA_READ), None)  # the oldest read
        if wr is None or seq < wr.first_seq:
            self.drops["unexpected_read_response"] += 1
            return
        expected = wr.first_seq if wr.first_seq > una else una
        if seq != expected:  # one before it (of this read, or of an older one) was lost
            self.counters.ooo_received += 1
            self.drops["read_response_out_of_order"] += 1
            self._acknowledge(wr.first_seq - 1, now)
            self._ask_again(expected)
            return
        index = seq - wr.first_seq
        offset = index * self._pmtu
        size = len(pkt.payload)
        ends = seq == wr.last_seq
        if (pkt.opcode in _ENDS_READ) != ends or size != (wr.data.nbytes - offset if ends else self._pmtu):
            self.drops["bad_read_response"] += 1
            return
        wr.data[offset:offset + size] = pkt.payload
        self._read_gap_asked = False
        self._acknowledge(seq, now)

    def check_timeout(self, now: float) -> None:
        if now < self.rto_deadline_s or self.state is not _RTS:
            return
        if self._una_seq >= self._sent_high_seq:
            self.rto_deadline_s = NEVER
            return
        self.counters.timeouts += 1
        self._retries += 1
        if self._retries > self._cfg.retry_limit:
            self._fail(WcStatus.RETRY_EXC_ERR)
            return
        self._rto_s *= 2
        self.rto_deadline_s = now + self._rto_s
        self._rewind(self._una_seq)

    # ---- responder -----------------------------------------------------------------

    def on_request(self, pkt: RocePacket) -> bytes | None:
        """A SEND or RDMA WRITE packet for this QP's responder; returns an ACK/NAK or None."""
        expected = self._expected_seq
        psn = pkt.psn
        # Nearly every packet carries the expected PSN: no signed distance to work out.
        delta = 0 if psn == expected & PSN_MASK else psn_delta(psn, expected & PSN_MASK)
        if delta > 0:
            if delta > self._cfg.psn_window_packets:
                self.drops["psn_out_of_window"] += 1
                return None
            if self._cfg.receive_order == "place":
                return self._keep(pkt, expected + delta, delta)
            self.counters.ooo_received += 1
            self.reorder_distances[delta] += 1
            self.drops["psn_out_of_order"] += 1
            if self._nak_sent:
                return None
            self._nak_sent = True
            self.counters.naks_sent += 1
            self.counters.naks_sent_out_of_order += 1
            return self._aeth_frame(Syndrome.NAK_PSN_SEQUENCE_ERROR, expected)
        if delta < 0:
            if pkt.opcode == OP_READ_REQUEST:  # its responses were lost: read again
                # A READ takes a PSN per response, so asked again mid-way it can lie further back
                # than the window any other request may: IBA's duplicate range is half the PSN space.
                self.counters.duplicates_received += 1
                self._forget_responses_from(expected + delta)
                return self._respond(pkt, expected + delta)
            if -delta > self._cfg.psn_window_packets:
                self.drops["psn_out_of_window"] += 1
                return None
            self.counters.duplicates_received += 1
            if pkt.ackreq or not self._dup_acked:
                self._dup_acked = True
                self.counters.acks_sent += 1
                return self._aeth_frame(Syndrome.ACK, expected - 1)
            return None
        reply = self._accept(pkt)
        ackreq = pkt.ackreq
        kept = self._kept
        while reply is None and kept and self._expected_seq in kept:  # place: the hole is filled
            pkt = kept.pop(self._expected_seq)
            ackreq = ackreq or pkt.ackreq
            reply = self._accept(pkt)
        if reply is not None:
            return reply
        if ackreq or self._unacked_packets >= self._cfg.ack_coalesce_packets:
            self._unacked_packets = 0
            self.counters.acks_sent += 1
            return self._aeth_frame(_SYNDROME_ACK, self._expected_seq - 1)
        return None

    def _keep(self, pkt: RocePacket, seq: int, delta: int) -> bytes | None:
        """place: a packet ahead of the expected PSN is kept until the hole before it fills;
        one NAK when it is far enough past the hole for the hole to be a loss."""
        if seq in self._kept:
            self.counters.duplicates_received += 1
            return None
        self._kept[seq] = pkt
        self.counters.ooo_received += 1
        self.reorder_distances[delta] += 1
        if delta < self._cfg.place_nak_distance_packets or self._nak_sent:
            return None
        self._nak_sent = True
        self.counters.naks_sent += 1
        self.counters.naks_sent_place_gap += 1
        return self._aeth_frame(Syndrome.NAK_PSN_SEQUENCE_ERROR, self._expected_seq)

    def _accept(self, pkt: RocePacket) -> bytes | None:
        """The expected PSN: placed, and the responder moves on; a NAK frame if it can't be."""
        expected = self._expected_seq
        if pkt.opcode == OP_READ_REQUEST:
            if self._rx_view is not None:  # in the middle of a SEND or WRITE
                self.drops["bad_opcode_sequence"] += 1
                return self._fatal_nak(Syndrome.NAK_INVALID_REQUEST, expected)
            nak = self._respond(pkt, expected)
            if nak is None:
                self._expected_seq = expected + self._segments(pkt.dma_length)
                self._nak_sent = False
                self._dup_acked = False
                self._unacked_packets = 0  # the responses acknowledge what came before
                self._msn += 1
                self.counters.messages_received += 1
            return nak
        nak = self._place(pkt)
        if nak is not None:
            if nak == Syndrome.RNR_NAK:
                self._nak_sent = True  # the rest of this message is out of order until retried
                self.counters.rnr_naks_sent += 1
                return self._aeth_frame(nak, expected)
            return self._fatal_nak(nak, expected)
        self._expected_seq = expected + 1
        self._nak_sent = False
        self._dup_acked = False
        self._unacked_packets += 1
        return None

    def _fatal_nak(self, nak: Syndrome, expected: int) -> bytes:
        """Invalid requests and access errors are fatal to an RC QP at both ends: the NAK, and ERROR.
        READ responses owed for earlier requests still go, before the NAK (the NIC queues it
        behind them)."""
        self.counters.naks_sent += 1
        frame = self._aeth_frame(nak, expected)
        self._fail(_NAK_STATUS[nak], oldest=WcStatus.WR_FLUSH_ERR, keep_responses=True)
        return frame

    def _respond(self, pkt: RocePacket, seq: int) -> bytes | None:
        """Queue the responses to a READ request for PSN `seq`; a fatal NAK if the region does
        not hold what it asks for."""
        mr = self._mrs.get(pkt.r_key)
        view = mr.window(pkt.va, pkt.dma_length) if mr is not None else None
        if view is None:
            self.drops["remote_access_error"] += 1
            return self._fatal_nak(Syndrome.NAK_REMOTE_ACCESS_ERROR, seq)
        self._responses.append(_ReadResponses(seq, view, self._segments(pkt.dma_length)))
        self._update_ready()
        return None

    def _forget_responses_from(self, seq: int) -> None:
        """A READ asked again from PSN `seq`: what is still queued from there on is not sent (the
        requester discards it, and asks again for everything after `seq` too)."""
        kept: deque[_ReadResponses | bytes] = deque()
        for item in self._responses:
            if isinstance(item, bytes):  # an ACK or NAK of a request before the next read: it stays
                kept.append(item)
                continue
            if item.first_seq >= seq:
                break
            if item.first_seq + item.stop > seq:  # it holds seq: it stops before it
                item.stop = max(seq - item.first_seq, item.sent)
                if item.stop > item.sent:
                    kept.append(item)
                break
            kept.append(item)
        self._responses = kept

    def queue_behind_responses(self, frame: bytes) -> bool:
        """Whether the ACK or NAK `frame` waits behind READ responses still to go (the responder
        answers in PSN order), rather than going out as a control frame."""
        if not self._responses:
            return False
        self._responses.append(frame)
        return True

    def _place(self, pkt: RocePacket) -> Syndrome | None:
        """Put an in-order packet's payload where it belongs; a NAK syndrome if it can't."""
        opcode = pkt.opcode
        size = len(pkt.payload)
        begins = opcode in _BEGINS_MESSAGE
        is_write = opcode in _WRITE_OPCODES
        if begins == (self._rx_view is not None) or (not begins and is_write != self._rx_is_write):
            self.drops["bad_opcode_sequence"] += 1
            return Syndrome.NAK_INVALID_REQUEST
        if size > self._pmtu or (opcode in _FULL_SEGMENT and size != self._pmtu):
            self.drops["bad_length"] += 1
            return Syndrome.NAK_INVALID_REQUEST
        if begins and is_write:
            mr = self._mrs.get(pkt.r_key)
            view = mr.window(pkt.va, pkt.dma_length) if mr is not None else None
            if view is None:
                self.drops["remote_access_error"] += 1
                return Syndrome.NAK_REMOTE_ACCESS_ERROR
            self._rx_view, self._rx_offset, self._rx_is_write = view, 0, True
        elif begins:
            if not self._recvs:
                self.drops["receiver_not_ready"] += 1
                return Syndrome.RNR_NAK
            self._rx_recv = self._recvs.popleft()
            self._rx_view, self._rx_offset, self._rx_is_write = self._rx_recv.buf, 0, False
        view = self._rx_view
        offset = self._rx_offset
        if offset + size > view.nbytes:
            self.drops["bad_length"] += 1
            if not is_write:
                self._complete(self._rx_recv.wr_id, WcOpcode.RECV, WcStatus.LOC_LEN_ERR, 0)
                self._rx_recv = None
            return Syndrome.NAK_INVALID_REQUEST
        view[offset:offset + size] = pkt.payload
        self._rx_offset = offset + size
        if opcode in _ENDS_MESSAGE:
            if is_write and self._rx_offset != view.nbytes:
                self.drops["bad_length"] += 1
                return Syndrome.NAK_INVALID_REQUEST
            if not is_write:
                self._complete(self._rx_recv.wr_id, WcOpcode.RECV, WcStatus.SUCCESS,
                               self._rx_offset)
                self._rx_recv = None
            self._rx_view = None
            self._msn += 1
            self.counters.messages_received += 1
        return None

    def _aeth_frame(self, syndrome: int, seq: int) -> bytes:
        return self._tx.frame(OP_ACKNOWLEDGE, self.remote_qpn, seq,
                              extension=aeth(syndrome, self._msn))

    # ---- congestion notification ----------------------------------------------------

    def cnp_frame(self, now: float) -> bytes | None:
        """Notification point: a CE-marked request arrived; a CNP unless one went out
        less than cnp_interval_s ago."""
        self.counters.ce_received += 1
        if now - self._last_cnp_s < self._cfg.cnp_interval_s:
            return None
        self._last_cnp_s = now
        self.counters.cnps_sent += 1
        return self._cnp_tx.frame(OP_CNP, self.remote_qpn, 0, becn=True,
                                  extension=CNP_RESERVED)

    def on_cnp(self, now: float) -> None:
        self.counters.cnps_received += 1
        self.cc.on_cnp(now)

    # ---- completion and failure --------------------------------------------------------

    def _complete(self, wr_id: int, opcode: WcOpcode, status: WcStatus, byte_len: int) -> None:
        self._completions.append(WorkCompletion(wr_id, self.qpn, opcode, status, byte_len))

    def flush(self) -> None:
        """→ ERROR with every outstanding work request flushed (QP destroyed)."""
        if self.state is not QpState.ERROR:
            self._fail(WcStatus.WR_FLUSH_ERR)

    def _fail(self, status: WcStatus, oldest: WcStatus | None = None, keep_responses: bool = False) -> None:
        """→ ERROR: the oldest send WR completes with `oldest` (default `status`), all other
        work is flushed; READ responses still to go are dropped unless `keep_responses` (a
        responder's error: what it owed for earlier requests still leaves)."""
        self.state = QpState.ERROR
        self.error_status = status
        if status is not WcStatus.WR_FLUSH_ERR:
            self.counters.fatal_errors += 1
        self.rto_deadline_s = NEVER
        for i, wr in enumerate(self._send_wrs):
            self._complete(wr.wr_id, wr.opcode, (oldest or status) if i == 0
                           else WcStatus.WR_FLUSH_ERR, wr.data.nbytes)
        self._send_wrs.clear()
        self._reads = self._reads_sent = 0
        if not keep_responses:
            self._responses.clear()
        if self._rx_recv is not None:
            self._recvs.appendleft(self._rx_recv)
            self._rx_recv = None
        for recv in self._recvs:
            self._complete(recv.wr_id, WcOpcode.RECV, WcStatus.WR_FLUSH_ERR, 0)
        self._recvs.clear()
        self._send_seq = self._una_seq = self._next_seq
        self._kept.clear()
        self._update_ready()

    def report(self, now: float) -> dict:
        """JSON-able counters and state of this QP, congestion control advanced to `now`."""
        return dict(zip(QP_REPORT_FIELDS, self.packed_report(now)))

    def packed_report(self, now: float) -> list:
        """report()'s values in QP_REPORT_FIELDS' order: no dict of ~30 keys per QP for a
        frequent reader (rocelab.roce.nic.expand_qps)."""
        if self.cc is not None:
            self.cc.advance(now)
        return [str(self.state), None if self.error_status is None else str(self.error_status), self.priority,
                None if self.cc is None else {"algorithm": self.cc.name, **self.cc.state()},
                *counter_values(self.counters), reorder_summary(self.reorder_distances), dict(self.drops)]
