"""One host's plan, executed over a NIC's verbs: pure, no I/O and no clock of its own.

The runner posts work requests and reads completions through a small verbs interface
(`Transport`): the emulated NIC core (rocelab.roce.Nic) has it, and so has the pyverbs
backend (rocelab.roce.verbs). The shell that owns the NIC calls `advance(now)` after every
frame it feeds the NIC and before every poll, and wakes it at `next_event(now)`.

Transfers move as SEND messages by default: the receiver's RECV completion is the arrival
signal, with no extra packet. With verb "write" each message is an RDMA WRITE into the
peer's registered region followed by an empty SEND on the same QP; RC delivers in order,
so that SEND's arrival proves the WRITE landed (the NIC core has no WRITE with immediate).
With verb "read" the receiver pulls: it posts RDMA READs of the sender's registered region
when its step begins, and a read's completion is the arrival. The sender takes no part (its
NIC answers the reads): its steps end at once, its iterations are marked passive and left out
of the job's timing, and its NIC's counters (the responses it sent, the CNPs it took) are
not in the job's per-iteration counters.

A transfer is cut for the wire: an equal share per QP to that peer (each QP has its own
UDP source port, so ECMP can spread them), each share into messages of at most
`message_bytes`. Up to SEND_DEPTH messages per QP are outstanding, as perftest's tx
depth. Receives are pre-posted RECV_DEPTH deep per QP and refilled on every completion,
so a SEND never finds an empty receive queue (no RNR NAK). Payloads are scratch: the
collectives move bytes, they do not add numbers.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Iterator, Mapping, Protocol, Sequence

from rocelab.traffic.patterns import Step, chunk_sizes

SEND_DEPTH = 128  # and READs: the NIC keeps max_rd_atomic of them on the wire, the rest wait on the QP
RECV_DEPTH = 64
SAMPLE_S = 1e-3  # bw: one progress sample per millisecond at most
VERBS = ("send", "write", "read")
# The verbs that need a registered region on each host, and whose messages size it: the ones it
# receives (WRITEs land in it) or the ones it sends (READs are served from it).
REGION_HOLDS = {"write": "recvs", "read": "sends"}

READY, WAITING, RUNNING, GAP, DONE, FAILED = "ready", "waiting", "running", "compute-gap", "done", "failed"


class Completion(Protocol):
    wr_id: int
    qpn: int
    opcode: str  # RDMA_WRITE, RDMA_READ, SEND, RECV
    status: str  # SUCCESS or an error name
    byte_len: int


class Transport(Protocol):
    def post_send(self, qpn: int, wr_id: int, data: bytes | memoryview) -> None: ...

    def post_write(self, qpn: int, wr_id: int, data: bytes | memoryview, *, remote_va: int,
                   r_key: int) -> None: ...

    def post_read(self, qpn: int, wr_id: int, buf: memoryview, *, remote_va: int, r_key: int) -> None: ...

    def post_recv(self, qpn: int, wr_id: int, buf: bytearray | memoryview) -> None: ...

    def poll_completions(self) -> list[Completion]: ...

    def counters(self) -> dict: ...


@dataclass(frozen=True)
class PeerQps:
    """This host's QPs to one peer, and the peer's region for verbs "write" and "read"."""

    qpns: tuple[int, ...]
    remote_va: int = 0
    r_key: int = 0


def qp_messages(size_bytes: int, nqps: int, index: int, message_bytes: int) -> Iterator[int]:
    """Sizes of the messages QP `index` of `nqps` carries for one transfer, in order: its
    share of the transfer, cut into messages of at most `message_bytes`. Lazy: a bw stream
    can be millions of messages."""
    full, rest = divmod(chunk_sizes(size_bytes, nqps)[index], message_bytes)
    yield from itertools.repeat(message_bytes, full)
    if rest:
        yield rest


def message_count(size_bytes: int, nqps: int, message_bytes: int) -> int:
    return sum(-(-share // message_bytes) for share in chunk_sizes(size_bytes, nqps))


def largest_message(steps: Sequence[Step], nqps: Mapping[str, int], message_bytes: int,
                    direction: str) -> int:
    """The biggest message this host sends ("sends") or receives ("recvs")."""
    return max((min(message_bytes, -(-t.size_bytes // nqps[t.peer])) for step in steps
                for t in getattr(step, direction)), default=0)


COUNTER_KEYS = ("tx_bytes", "rx_bytes", "retransmitted_bytes", "retransmitted_packets", "timeouts",
                "naks_received", "cnps_sent", "cnps_received", "ce_received")


def counter_snapshot(counters: Mapping) -> dict[str, float]:
    """The NIC counters a job reports, flattened; missing ones (a backend that lacks them)
    read 0."""
    pfc = counters.get("pfc") or {}
    snap = {key: counters.get(key, 0) for key in COUNTER_KEYS}
    snap["pfc_pause_frames"] = sum(pfc.get("rx_pause_frames", ()))
    snap["pfc_paused_s"] = sum(pfc.get("paused_time_s", ()))
    return snap


def _delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in after}


class PlanRunner:
    """Runs `steps` for `iterations` rounds, `compute_gap_s` apart (a training step's
    compute between syncs), from `start(at)` on. Progress and records for the job report:
    `status()`, `result()`."""

    def __init__(self, transport: Transport, steps: Sequence[Step], peers: Mapping[str, PeerQps], *,
                 iterations: int, compute_gap_s: float, message_bytes: int, verb: str = "send",
                 record_messages: bool = False):
        if verb not in VERBS:
            raise ValueError(f"verb {verb!r}: expected one of {VERBS}")
        if iterations < 1 or message_bytes < 1 or compute_gap_s < 0:
            raise ValueError("iterations and message_bytes must be ≥ 1, compute_gap_s ≥ 0")
        missing = {t.peer for step in steps for t in (*step.sends, *step.recvs)} - set(peers)
        if missing:
            raise ValueError(f"no QPs to {sorted(missing)}")
        self._t = transport
        self._steps = list(steps)
        self._peers = dict(peers)
        self._iterations = iterations
        self._gap_s = compute_gap_s
        self._message_bytes = message_bytes
        self._verb = verb
        self._record_messages = record_messages
        nqps = {p: len(q.qpns) for p, q in self._peers.items()}
        self._nqps = nqps
        out_bytes = largest_message(self._steps, nqps, message_bytes, "sends")
        self._send_buf = memoryview((bytes(range(256)) * (out_bytes // 256 + 1))[:out_bytes])
        # SEND and READ land here; with verb "write" the data lands in the host's region and only
        # the empty notification SEND takes a receive.
        in_bytes = largest_message(self._steps, nqps, message_bytes, "recvs") if verb != "write" else 0
        self._recv_buf = memoryview(bytearray(in_bytes))
        self._passive = verb == "read" and not any(step.recvs for step in self._steps)
        self._peer_of = {qpn: p for p, q in self._peers.items() for qpn in q.qpns}
        # Receive side: what each QP will carry, in order, over the whole job.
        self._flow_recv_msgs = [self._by_peer(step.recvs, messages=True) for step in self._steps]
        self._step_recv_msgs = [sum(flows.values()) for flows in self._flow_recv_msgs]
        self._flow_recv_bytes = [self._by_peer(step.recvs, messages=False) for step in self._steps]
        self._incoming: dict[int, Iterator[tuple[int, int, str, int]]] = {
            qpn: self._expected(peer, index) for peer, q in self._peers.items() for index, qpn in enumerate(q.qpns)}
        self._posted_recvs: dict[int, deque] = {qpn: deque() for qpn in self._peer_of}
        self._recv_left: dict[tuple[int, int], int] = {}
        self._flow_left: dict[tuple[int, int, str], int] = {}
        self._recv_flows_done: set[tuple[int, int, str]] = set()
        # Send side: the current step only.
        self._outgoing: dict[int, deque[Iterator[int]]] = {qpn: deque() for qpn in self._peer_of}
        self._posted_sends: dict[int, deque] = {qpn: deque() for qpn in self._peer_of}
        self._send_left = 0
        self._send_flow_left: dict[str, int] = {}
        self._send_flow_log: dict[str, list] = {}
        self._next_wr_id = 1
        self.state = READY
        self.error: str | None = None
        self._wake_at = 0.0
        self._iteration = 0
        self._step = 0
        self._step_start = 0.0
        self._iter_start = 0.0
        self._iter_counters: dict[str, float] = {}
        self.bytes_sent = self.bytes_received = 0
        self._bytes_to_send = 0 if verb == "read" else iterations * sum(
            t.size_bytes for step in self._steps for t in step.sends)
        self._bytes_to_receive = iterations * sum(t.size_bytes for step in self._steps for t in step.recvs)
        self._log_sends: list[list] = []  # [iteration, step, peer, bytes, posted_at, done_at]
        self._log_recvs: list[list] = []  # [iteration, step, peer, bytes, arrived_at]
        self._log_pulls: list[list] = []  # read: [iteration, step, peer, bytes, posted_at]
        self._log_steps: list[list] = []  # [iteration, step, start, end]
        self._log_iterations: list[dict] = []
        self._log_messages: list[list] = []  # bw: [time, bytes, messages] acknowledged since the last sample
        self._unsampled = [0, 0]  # bytes, messages
        for qpn in self._peer_of:
            self._refill(qpn)

    # ---- plan bookkeeping ------------------------------------------------------------

    def _by_peer(self, transfers: Sequence, *, messages: bool) -> dict[str, int]:
        """Messages (or bytes) per peer of a step's transfers."""
        totals: dict[str, int] = {}
        for t in transfers:
            n = message_count(t.size_bytes, self._nqps[t.peer], self._message_bytes) if messages else t.size_bytes
            totals[t.peer] = totals.get(t.peer, 0) + n
        return totals

    def _expected(self, peer: str, index: int) -> Iterator[tuple[int, int, str, int]]:
        """The messages QP `index` to `peer` will receive, in order, over every iteration."""
        for i in range(self._iterations):
            for s, step in enumerate(self._steps):
                for t in step.recvs:
                    if t.peer == peer:
                        for size in qp_messages(t.size_bytes, self._nqps[peer], index, self._message_bytes):
                            yield i, s, peer, size

    def _refill(self, qpn: int) -> None:
        if self._verb == "read":  # nothing to receive into: reads are posted as steps begin
            return
        posted = self._posted_recvs[qpn]
        incoming = self._incoming[qpn]
        while len(posted) < RECV_DEPTH:
            entry = next(incoming, None)
            if entry is None:
                return
            self._t.post_recv(qpn, self._wr_id(), self._recv_buf)
            posted.append(entry)

    def _wr_id(self) -> int:
        self._next_wr_id += 1
        return self._next_wr_id

    # ---- driving -----------------------------------------------------------------------

    def start(self, at: float) -> None:
        """Begin the first iteration at `at` (a time on the shell's clock)."""
        if self.state != READY:
            raise ValueError(f"the job is {self.state}, not {READY}")
        self.state = WAITING
        self._wake_at = at

    def next_event(self, now: float) -> float | None:
        return self._wake_at if self.state in (WAITING, GAP) else None

    def advance(self, now: float) -> bool:
        """Take completions and move on as far as the plan allows; True if work was posted
        (the NIC has frames to send)."""
        if self.state in (READY, DONE, FAILED):
            return False
        posted = False
        for wc in self._t.poll_completions():
            posted |= self._on_completion(wc, now)
            if self.state == FAILED:
                return False
        while True:
            if self.state in (WAITING, GAP) and now >= self._wake_at:
                posted |= self._begin_iteration(now)
            elif self.state == RUNNING and self._step_complete():
                posted |= self._end_step(now)
            else:
                return posted

    def _on_completion(self, wc: Completion, now: float) -> bool:
        peer = self._peer_of.get(wc.qpn, "?")
        if wc.status != "SUCCESS":
            self.fail(f"{wc.opcode} on QP {wc.qpn:#x} to {peer} completed with {wc.status}")
            return False
        if wc.opcode == "RECV":
            self._on_arrival(wc, now)
        elif wc.opcode == "RDMA_READ":
            self._on_arrival(wc, now)
            return self.state != FAILED and self._post_sends(wc.qpn)
        elif wc.opcode == "SEND":
            return self._on_sent(wc.qpn, now)
        return False  # an RDMA WRITE: its notification SEND completes the message

    def _on_arrival(self, wc: Completion, now: float) -> None:
        posted = self._posted_recvs[wc.qpn]
        if not posted:
            self.fail(f"QP {wc.qpn:#x} received a message the plan does not expect")
            return
        i, s, peer, size = posted.popleft()
        if self._verb != "write" and wc.byte_len != size:
            self.fail(f"a message from {peer} (iteration {i}, step {s}) carried {wc.byte_len} B, "
                      f"the plan says {size} B")
            return
        self.bytes_received += size
        key = (i, s)
        self._recv_left[key] = self._recv_left.get(key, self._step_recv_msgs[s]) - 1
        if self._record_messages and self._verb == "read":
            self._sample(now, size, last=not self._recv_left[key])
        flow = (i, s, peer)
        left = self._flow_left.get(flow, self._flow_recv_msgs[s][peer]) - 1
        if left:
            self._flow_left[flow] = left
        else:
            self._flow_left.pop(flow, None)
            self._recv_flows_done.add(flow)
            self._log_recvs.append([i, s, peer, self._flow_recv_bytes[s][peer], now])
        self._refill(wc.qpn)

    def _on_sent(self, qpn: int, now: float) -> bool:
        posted = self._posted_sends[qpn]
        if not posted:
            self.fail(f"QP {qpn:#x} completed a SEND the runner did not post")
            return False
        peer, size = posted.popleft()
        self.bytes_sent += size
        self._send_left -= 1
        if self._record_messages:
            self._sample(now, size, last=not self._send_left)
        self._send_flow_left[peer] -= 1
        if not self._send_flow_left[peer]:
            self._send_flow_log[peer][5] = now
        return self._post_sends(qpn)

    def _sample(self, now: float, size: int, *, last: bool) -> None:
        """bw: count a message acknowledged (sent) or read; a sample per SAMPLE_S, and at the last."""
        pending = self._unsampled
        pending[0] += size
        pending[1] += 1
        previous = self._log_messages[-1][0] if self._log_messages else self._step_start
        if now - previous >= SAMPLE_S or last:
            self._log_messages.append([now, *pending])
            self._unsampled = [0, 0]

    def _post_sends(self, qpn: int) -> bool:
        """The next messages of this step on the QP, up to SEND_DEPTH posted: SENDs, WRITEs (each
        with its notification SEND) or, with verb read, READs of the peer's region."""
        reading = self._verb == "read"
        outgoing = self._outgoing[qpn]
        posted = self._posted_recvs[qpn] if reading else self._posted_sends[qpn]
        peer_name = self._peer_of[qpn]
        peer = self._peers[peer_name]
        any_posted = False
        while outgoing and len(posted) < SEND_DEPTH:
            size = next(outgoing[0], None)
            if size is None:
                outgoing.popleft()
                continue
            wr_id = self._wr_id()
            if reading:
                self._t.post_read(qpn, wr_id, self._recv_buf[:size], remote_va=peer.remote_va, r_key=peer.r_key)
                posted.append((self._iteration, self._step, peer_name, size))
            elif self._verb == "write":
                self._t.post_write(qpn, wr_id, self._send_buf[:size], remote_va=peer.remote_va, r_key=peer.r_key)
                self._t.post_send(qpn, wr_id, b"")
                posted.append((peer_name, size))
            else:
                self._t.post_send(qpn, wr_id, self._send_buf[:size])
                posted.append((peer_name, size))
            any_posted = True
        return any_posted

    def _begin_iteration(self, now: float) -> bool:
        self.state = RUNNING
        self._iter_start = now
        self._iter_counters = counter_snapshot(self._t.counters())
        self._step = 0
        return self._begin_step(now)

    def _begin_step(self, now: float) -> bool:
        i, s = self._iteration, self._step
        step = self._steps[s]
        self._step_start = now
        self._recv_left.setdefault((i, s), self._step_recv_msgs[s])
        self._send_flow_left = {}
        self._send_flow_log = {}
        self._send_left = 0
        if self._verb == "read":
            self._queue_pulls(step, now)
        else:
            self._queue_sends(step, now)
        posted = False
        for qpn in self._outgoing:
            posted |= self._post_sends(qpn)
        return posted

    def _queue_sends(self, step: Step, now: float) -> None:
        """This step's transfers from this host, cut into messages per QP."""
        i, s = self._iteration, self._step
        for t in step.sends:
            nqps = self._nqps[t.peer]
            for index, qpn in enumerate(self._peers[t.peer].qpns):
                self._outgoing[qpn].append(qp_messages(t.size_bytes, nqps, index, self._message_bytes))
            count = message_count(t.size_bytes, nqps, self._message_bytes)
            self._send_left += count
            self._send_flow_left[t.peer] = self._send_flow_left.get(t.peer, 0) + count
            entry = self._send_flow_log.get(t.peer)
            if entry is None:
                entry = self._send_flow_log[t.peer] = [i, s, t.peer, 0, now, now]
                self._log_sends.append(entry)
            entry[3] += t.size_bytes

    def _queue_pulls(self, step: Step, now: float) -> None:
        """read: this step's transfers to this host, as READs of the senders' regions."""
        i, s = self._iteration, self._step
        pulled: dict[str, list] = {}
        for t in step.recvs:
            nqps = self._nqps[t.peer]
            for index, qpn in enumerate(self._peers[t.peer].qpns):
                self._outgoing[qpn].append(qp_messages(t.size_bytes, nqps, index, self._message_bytes))
            entry = pulled.get(t.peer)
            if entry is None:
                entry = pulled[t.peer] = [i, s, t.peer, 0, now]
                self._log_pulls.append(entry)
            entry[3] += t.size_bytes

    def _step_complete(self) -> bool:
        return self._send_left == 0 and self._recv_left[(self._iteration, self._step)] == 0

    def _end_step(self, now: float) -> bool:
        i, s = self._iteration, self._step
        del self._recv_left[(i, s)]
        self._recv_flows_done -= {(i, s, p) for p in self._flow_recv_msgs[s]}
        self._log_steps.append([i, s, self._step_start, now])
        if s + 1 < len(self._steps):
            self._step = s + 1
            return self._begin_step(now)
        counters = counter_snapshot(self._t.counters())
        self._log_iterations.append({"index": i, "start_s": self._iter_start, "end_s": now,
                                     "counters": _delta(counters, self._iter_counters), "passive": self._passive})
        self._iteration = i + 1
        if self._iteration == self._iterations:
            self.state = DONE
        else:
            self.state = GAP
            self._wake_at = now + self._gap_s
        return False

    def fail(self, error: str) -> None:
        if self.state not in (DONE, FAILED):
            self.state = FAILED
            self.error = error

    # ---- reporting ---------------------------------------------------------------------

    def status(self) -> dict:
        """Progress for the orchestrator's display and its stall detector."""
        waiting = ""
        if self.state == RUNNING:
            i, s = self._iteration, self._step
            to = sorted(p for p, left in self._send_flow_left.items() if left)
            froms = sorted(p for p in self._flow_recv_msgs[s] if (i, s, p) not in self._recv_flows_done)
            waiting = (f"iteration {i} step {s}: {self._send_left} message(s) to {', '.join(to) or 'nobody'} "
                       f"to be acknowledged, {self._recv_left[(i, s)]} to arrive from {', '.join(froms) or 'nobody'}")
        return {"state": self.state, "error": self.error, "iteration": self._iteration, "step": self._step,
                "bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "bytes_to_send": self._bytes_to_send, "bytes_to_receive": self._bytes_to_receive,
                "waiting_for": waiting}

    def result(self) -> dict:
        """Everything the job report is computed from; times on the shell's clock."""
        return {**self.status(), "iterations": self._log_iterations, "steps": self._log_steps,
                "sends": self._log_sends, "recvs": self._log_recvs, "pulls": self._log_pulls,
                "messages": self._log_messages}
