"""RDMA READ in the emulated NIC (rocelab.roce.qp): the request and its responses on the wire
(decoded by scapy), PSN use, ordering against other requests, outstanding reads, loss and
errors, under a simulated clock."""

from __future__ import annotations

import random

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.l2 import Ether

import rocelab.probes.layers  # noqa: F401  (RETH after a READ request, AETH after its responses)
from rocelab.probes.layers import RETH
from rocelab.roce import NicConfig, QpState, WcOpcode, WcStatus
from rocelab.roce.sim import EcnMarking, FabricSim, connect_qps, poll_until
from rocelab.roce.wire import Opcode, Syndrome, parse_frame

from tests.unit.test_roce_transport import nic_pair

READ_REQUEST = int(Opcode.RDMA_READ_REQUEST)
FIRST, MIDDLE, LAST, ONLY = (int(op) for op in (Opcode.RDMA_READ_RESPONSE_FIRST, Opcode.RDMA_READ_RESPONSE_MIDDLE,
                                                Opcode.RDMA_READ_RESPONSE_LAST, Opcode.RDMA_READ_RESPONSE_ONLY))


def completions(nic) -> list[tuple[int, str, str, int]]:
    return [(wc.wr_id, wc.opcode, wc.status, wc.byte_len) for wc in nic.poll_completions()]


def exchange(a, b, *, until_s: float = 1e-3, drop=lambda sender, frame: False) -> list[tuple[str, bytes]]:
    """Run a and b back to back with no delay, delivering every frame except those `drop`
    picks; every frame sent, in order, as (sender, frame)."""
    wire, now = [], 0.0
    while now < until_s:
        moved = False
        for name, nic, peer in (("a", a, b), ("b", b, a)):
            for frame in nic.poll(now):
                wire.append((name, frame))
                moved = True
                if not drop(name, frame):
                    peer.receive(frame, now)
        if not moved:
            due = [t for t in (a.next_event(now), b.next_event(now)) if t is not None]
            if not due:
                break
            now = max(now, min(due))
    return wire


def first_response_of(psn: int):
    """An exchange() drop rule: the responder's first frame carrying `psn`, once."""
    lost = []

    def drop(sender: str, frame: bytes) -> bool:
        if sender == "b" and not lost and parse_frame(frame).psn == psn & 0xFFFFFF:
            lost.append(frame)
            return True
        return False

    return drop


def test_a_read_is_one_request_and_pmtu_responses_carrying_its_psns():
    """Sizes around the path MTU: one READ request with RETH (VA, R_Key, length) that takes as many
    PSNs as its responses; ONLY, or FIRST, MIDDLE…, LAST with AETH on all but MIDDLE; the data
    lands in the requester's buffer; scapy reads every frame the same way."""
    pmtu = 1024
    a, b = nic_pair(pmtu_bytes=pmtu)
    qa, qb = connect_qps(a, b)
    rng = random.Random(1)
    sizes = (0, 1, pmtu, pmtu + 1, 3 * pmtu + 5)
    source = bytearray(rng.randbytes(4 * pmtu))
    mr = b.register_mr(source)
    targets = [bytearray(n) for n in sizes]
    for wr_id, target in enumerate(targets):
        a.post_read(qa, wr_id, target, remote_va=mr.va + 7, r_key=mr.r_key)
    wire = exchange(a, b)
    assert completions(a) == [(i, WcOpcode.RDMA_READ, WcStatus.SUCCESS, n) for i, n in enumerate(sizes)]
    for target in targets:
        assert target == source[7:7 + len(target)]
    requests = [Ether(f) for who, f in wire if who == "a" and Ether(f)[BTH].opcode == READ_REQUEST]
    responses = [Ether(f) for who, f in wire if who == "b" and Ether(f)[BTH].opcode in (FIRST, MIDDLE, LAST, ONLY)]
    counts = [max(1, -(-n // pmtu)) for n in sizes]
    assert [(r[RETH].va, r[RETH].r_key, r[RETH].dma_length) for r in requests] == [
        (mr.va + 7, mr.r_key, n) for n in sizes]
    psn = a.qp(qa).initial_psn
    assert [r[BTH].psn for r in requests] == [psn + sum(counts[:i]) for i in range(len(sizes))]
    expected = []
    for n, count in zip(sizes, counts):
        expected += [ONLY] if count == 1 else [FIRST, *[MIDDLE] * (count - 2), LAST]
    assert [r[BTH].opcode for r in responses] == expected
    assert [r[BTH].psn for r in responses] == list(range(psn, psn + sum(counts)))
    assert all((AETH in r) == (r[BTH].opcode != MIDDLE) for r in responses)
    assert all(r[AETH].syndrome == Syndrome.ACK for r in responses if AETH in r)
    assert b.counters()["read_responses_sent"] == sum(counts)
    assert a.counters()["retransmitted_packets"] == 0


def test_responses_and_the_acks_of_later_requests_leave_the_responder_in_psn_order():
    """A WRITE, a 4-packet READ and a WRITE in a row: the ACK of the second WRITE follows the
    READ's responses, and the first WRITE's completion needs no ACK of its own (the responses
    acknowledge it)."""
    pmtu = 1024
    a, b = nic_pair(pmtu_bytes=pmtu)
    qa, qb = connect_qps(a, b)
    region = bytearray(random.Random(2).randbytes(8 * pmtu))
    mr = b.register_mr(region)
    landing = bytearray(4 * pmtu)
    a.post_write(qa, 1, b"x" * 100, remote_va=mr.va, r_key=mr.r_key)
    a.post_read(qa, 2, landing, remote_va=mr.va + pmtu, r_key=mr.r_key)
    a.post_write(qa, 3, b"y" * 100, remote_va=mr.va + 6 * pmtu, r_key=mr.r_key)
    wire = exchange(a, b)
    assert [c[:3] for c in completions(a)] == [(1, WcOpcode.RDMA_WRITE, WcStatus.SUCCESS),
                                               (2, WcOpcode.RDMA_READ, WcStatus.SUCCESS),
                                               (3, WcOpcode.RDMA_WRITE, WcStatus.SUCCESS)]
    assert landing == region[pmtu:5 * pmtu]
    from_b = [parse_frame(f) for who, f in wire if who == "b"]
    psns = [p.psn for p in from_b]
    assert psns == sorted(psns)
    assert [p.opcode for p in from_b][-1] == int(Opcode.ACKNOWLEDGE)


@pytest.mark.parametrize("nic, qp, outstanding", [(4, None, 4), (16, 2, 2)])
def test_a_qp_keeps_at_most_max_rd_atomic_reads_outstanding(nic, qp, outstanding):
    """The NIC's max_rd_atomic, or the QP's own from its connect (perftest's -o)."""
    a, b = nic_pair(max_rd_atomic=nic)
    qa, _ = connect_qps(a, b, max_rd_atomic=qp)
    mr = b.register_mr(bytearray(100))
    for wr_id in range(10):
        a.post_read(qa, wr_id, bytearray(10), remote_va=mr.va, r_key=mr.r_key)
    sent = [parse_frame(f) for _, f in poll_until(a, 0.5e-3)]  # before the retransmission timeout
    assert [p.opcode for p in sent] == [READ_REQUEST] * outstanding  # then nothing until responses come
    assert not a.poll_completions()


def test_a_lost_response_is_asked_for_again_from_where_it_went_missing():
    """The third of eight responses is lost: the fourth is out of order, the requester asks for
    the read again from the third's PSN (one new request for the rest, no timeout), and the
    data arrives whole."""
    pmtu = 1024
    a, b = nic_pair(pmtu_bytes=pmtu)
    qa, qb = connect_qps(a, b)
    region = bytearray(random.Random(3).randbytes(8 * pmtu))
    mr = b.register_mr(region)
    landing = bytearray(len(region))
    a.post_read(qa, 9, landing, remote_va=mr.va, r_key=mr.r_key)
    psn = a.qp(qa).initial_psn
    wire = exchange(a, b, drop=first_response_of(psn + 2))
    assert completions(a) == [(9, WcOpcode.RDMA_READ, WcStatus.SUCCESS, len(region))]
    assert landing == region
    requests = [parse_frame(f) for who, f in wire if who == "a" and parse_frame(f).opcode == READ_REQUEST]
    assert [(r.psn, r.va, r.dma_length) for r in requests] == [
        (psn, mr.va, 8 * pmtu), (psn + 2, mr.va + 2 * pmtu, 6 * pmtu)]
    counters = a.counters()
    assert counters["read_rerequests"] == 1 and counters["timeouts"] == 0
    assert counters["qps"][str(qa)]["drops"]["read_response_out_of_order"] >= 1
    assert b.counters()["duplicates_received"] == 1  # the second request, for PSNs already seen


@pytest.mark.parametrize("receive_order", ["gbn", "place"])
def test_1mb_read_arrives_intact_over_loss_and_reordering(receive_order):
    a, b = nic_pair(pmtu_bytes=4096, receive_order=receive_order, place_nak_distance_packets=16)
    qa, qb = connect_qps(a, b)
    region = bytearray(random.Random(4).randbytes(1 << 20))
    original = bytes(region)
    mr = b.register_mr(region)
    landings = [bytearray(256 << 10) for _ in range(4)]
    for i, landing in enumerate(landings):  # with a WRITE between reads, so ACKs and responses mix
        a.post_read(qa, i, landing, remote_va=mr.va + i * len(landing), r_key=mr.r_key)
        a.post_write(qa, 100 + i, b"z" * 5000, remote_va=mr.va, r_key=mr.r_key)
    sim = FabricSim(random.Random(5))
    for nic in (a, b):
        sim.attach(nic, delay_s=1e-6, loss=0.01, reorder=0.05, reorder_delay_s=2e-6)
    assert sim.run(10.0, stop=lambda: a.qp(qa).counters.messages_sent == 8)
    done = completions(a)
    assert all(status == WcStatus.SUCCESS for _, _, status, _ in done) and len(done) == 8
    for i, landing in enumerate(landings):
        start = i * len(landing)
        # The WRITEs change the region's first 5000 bytes: a read of them asked again after the
        # first WRITE executed reads what it wrote, as a real responder would.
        skip = 5000 if i == 0 else 0
        assert landing[skip:] == original[start + skip:start + len(landing)]
    counters = a.counters()
    assert sim.port_counters(a).lost > 0  # responses were lost ...
    assert counters["read_rerequests"] + counters["timeouts"] > 0  # ... and asked for again
    assert a.qp(qa).state is QpState.RTS and b.qp(qb).state is QpState.RTS


def test_a_read_lands_only_in_a_writable_buffer_and_config_checks_max_rd_atomic():
    a, b = nic_pair()
    qa, _ = connect_qps(a, b)
    with pytest.raises(ValueError, match="writable"):
        a.post_read(qa, 1, b"read-only", remote_va=0, r_key=0)
    with pytest.raises(ValueError, match="max_rd_atomic"):
        NicConfig(max_rd_atomic=0)


@pytest.mark.parametrize("seed", range(12))
def test_mixed_reads_writes_and_sends_over_loss_all_complete_with_the_right_bytes(seed):
    """Random mixes of READ, WRITE and SEND of random sizes, on random settings, over a lossy,
    reordering link: every work request completes successfully, in posting order, and every READ
    brings back what its part of the region held (the WRITEs go to a part no READ reads)."""
    rng = random.Random(seed)
    pmtu = rng.choice((256, 1024, 4096))
    a, b = nic_pair(seed, pmtu_bytes=pmtu, receive_order=rng.choice(("gbn", "place")),
                    place_nak_distance_packets=8, max_rd_atomic=rng.choice((1, 2, 16)),
                    max_inflight_packets=rng.choice((8, 64, 1024)))
    qa, qb = connect_qps(a, b)
    readable = rng.randbytes(64 << 10)
    region = bytearray(readable + bytes(64 << 10))
    mr = b.register_mr(region)
    posted, reads = [], []
    for wr_id in range(40):
        size = rng.choice((0, 1, pmtu - 1, pmtu, pmtu + 1, 5 * pmtu + 3, 20_000))
        verb = rng.choice(("read", "write", "send"))
        if verb == "read":
            at = rng.randrange(0, len(readable) - size + 1)
            landing = bytearray(size)
            a.post_read(qa, wr_id, landing, remote_va=mr.va + at, r_key=mr.r_key)
            reads.append((landing, readable[at:at + size]))
        elif verb == "write":
            a.post_write(qa, wr_id, rng.randbytes(size), remote_va=mr.va + len(readable), r_key=mr.r_key)
        else:
            b.post_recv(qb, 1000 + wr_id, bytearray(5 * 4096 + 3))
            a.post_send(qa, wr_id, rng.randbytes(size))
        posted.append(wr_id)
    sim = FabricSim(random.Random(seed + 100))
    for nic in (a, b):
        sim.attach(nic, delay_s=2e-6, loss=0.02, reorder=0.05, reorder_delay_s=3e-6)
    assert sim.run(30.0, stop=lambda: a.qp(qa).counters.messages_sent == len(posted))
    done = completions(a)
    assert [c[0] for c in done] == posted and all(c[2] == WcStatus.SUCCESS for c in done), done
    for landing, expected in reads:
        assert landing == expected
    assert readable == region[:len(readable)]  # a READ never writes the region it reads


def test_ce_marked_responses_make_the_requester_notify_and_the_responder_slow_down():
    """The responses are the data of a READ: where they queue and are marked, the requester is the
    notification point (its CNPs go to the responder's QP) and the responder's DCQCN cuts the rate
    its responses leave at."""
    a, b = nic_pair(pmtu_bytes=4096)
    qa, qb = connect_qps(a, b)
    region = bytearray(4 << 20)
    mr = b.register_mr(region)
    a.post_read(qa, 1, bytearray(len(region)), remote_va=mr.va, r_key=mr.r_key)
    sim = FabricSim(random.Random(6))
    # The switch port towards the requester runs at half the responder's rate: the responses queue.
    sim.attach(a, rate_bps=50e9, delay_s=1e-6, ecn=EcnMarking(kmin_bytes=20_000, kmax_bytes=200_000, pmax=0.2))
    sim.attach(b, delay_s=1e-6)
    assert sim.run(1.0, stop=lambda: a.qp(qa).counters.messages_sent == 1)
    assert completions(a) == [(1, WcOpcode.RDMA_READ, WcStatus.SUCCESS, len(region))]
    requester, responder = a.counters(), b.counters()
    assert sim.port_counters(a).ecn_marked > 0
    assert requester["ce_received"] > 0 and requester["cnps_sent"] > 0
    assert responder["cnps_received"] == requester["cnps_sent"]
    assert b.qp(qb).cc.rate_bps < 100e9  # cut by the CNPs, not yet recovered


def test_a_fatal_nak_goes_behind_the_read_responses_owed_before_it():
    """A valid READ, then a WRITE with a bad R_Key: the READ's responses still leave, then the NAK;
    the READ completes, the WRITE fails, and both QPs end in ERROR."""
    a, b = nic_pair(pmtu_bytes=1024)
    qa, qb = connect_qps(a, b)
    region = bytearray(random.Random(7).randbytes(4 * 1024))
    mr = b.register_mr(region)
    landing = bytearray(len(region))
    a.post_read(qa, 1, landing, remote_va=mr.va, r_key=mr.r_key)
    a.post_write(qa, 2, b"w" * 10, remote_va=mr.va, r_key=mr.r_key ^ 1)
    wire = exchange(a, b)
    assert [c[:3] for c in completions(a)] == [(1, WcOpcode.RDMA_READ, WcStatus.SUCCESS),
                                               (2, WcOpcode.RDMA_WRITE, WcStatus.REM_ACCESS_ERR)]
    assert landing == region
    from_b = [parse_frame(f).opcode for who, f in wire if who == "b"]
    assert from_b == [FIRST, MIDDLE, MIDDLE, LAST, int(Opcode.ACKNOWLEDGE)]
    assert a.qp(qa).state is QpState.ERROR and b.qp(qb).state is QpState.ERROR
    # The responder's QP counts what it sent, responses included.
    counters = b.counters()["qps"][str(qb)]
    assert counters["tx_packets"] == 5 and counters["read_responses_sent"] == 4


def test_a_read_wider_than_the_psn_window_is_asked_again_mid_way_and_completes():
    """A READ takes a PSN per response, so one asked again mid-way lies further behind the
    responder's expected PSN than its window for other requests: it is still a duplicate READ
    (IBA's duplicate range is half the PSN space), executed again from there, and what was still
    queued of the first answer is not sent."""
    pmtu = 256
    a, b = nic_pair(pmtu_bytes=pmtu, max_inflight_packets=16, psn_window_packets=16, place_nak_distance_packets=8)
    qa, qb = connect_qps(a, b)
    region = bytearray(random.Random(8).randbytes(64 * pmtu))
    mr = b.register_mr(region)
    landing = bytearray(len(region))
    a.post_read(qa, 1, landing, remote_va=mr.va, r_key=mr.r_key)
    exchange(a, b, drop=first_response_of(a.qp(qa).initial_psn + 5))
    assert completions(a) == [(1, WcOpcode.RDMA_READ, WcStatus.SUCCESS, len(region))] and landing == region
    requester, responder = a.counters(), b.counters()
    assert requester["timeouts"] == 0 and requester["read_rerequests"] == 1
    assert responder["qps"][str(qb)]["drops"] == {} and responder["duplicates_received"] == 1
    # The first answer up to the response that showed the gap (PSNs 0-6), then 5-63 again: what was
    # still queued of the first when the READ came again was dropped, not sent.
    assert responder["read_responses_sent"] == 7 + 59
