"""RC transport of the emulated NIC: segmentation, go-back-N, ACK/NAK rules, timeouts,
RNR, errors and malformed frames, under a simulated clock."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from rocelab.roce import Nic, NicConfig, QpState, WcStatus, dilate
from rocelab.roce.agent import _subtract
from rocelab.roce.nic import expand_qps
from rocelab.roce.sim import FabricSim, connect_qps, poll_until
from rocelab.roce.wire import (
    ECN_ECT0,
    FlowHeaders,
    Opcode,
    RocePacket,
    Syndrome,
    parse_frame,
    reth,
)

RATE_BPS = 100e9
MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
IP_A, IP_B = "198.18.0.10", "198.18.0.11"


def nic_pair(seed: int = 1, **config) -> tuple[Nic, Nic]:
    rng = random.Random(seed)
    cfg = NicConfig(**config)
    return (Nic(MAC_A, IP_A, RATE_BPS, cfg, rng=rng), Nic(MAC_B, IP_B, RATE_BPS, cfg, rng=rng))


def packets(frames: list[tuple[float, bytes]]) -> list[RocePacket]:
    return [parse_frame(frame) for _, frame in frames]


def statuses(nic: Nic) -> list[tuple[int, str]]:
    return [(wc.wr_id, wc.status) for wc in nic.poll_completions()]


@pytest.mark.parametrize("pmtu_bytes", [1024, 4096])
@pytest.mark.parametrize("reorder", [0.0, 0.05])
@pytest.mark.parametrize("receive_order", ["gbn", "place"])
def test_1mb_write_arrives_intact_over_loss_and_reordering(pmtu_bytes, reorder, receive_order):
    """Under either receiver (rocelab.roce.qp): gbn NAKs every gap, place only a hole far
    enough behind the newest packet to be a loss."""
    a, b = nic_pair(pmtu_bytes=pmtu_bytes, receive_order=receive_order, place_nak_distance_packets=16)
    qa, qb = connect_qps(a, b)
    data = random.Random(2).randbytes(1 << 20)
    target = bytearray(len(data))
    mr = b.register_mr(target)
    a.post_write(qa, 42, data, remote_va=mr.va, r_key=mr.r_key)
    sim = FabricSim(random.Random(3))
    for nic in (a, b):  # 1% loss each way; reordered frames are held back 5 packet times
        sim.attach(nic, delay_s=1e-6, loss=0.01, reorder=reorder, reorder_delay_s=2e-6)
    assert sim.run(10.0, stop=lambda: a.qp(qa).counters.messages_sent == 1)
    assert statuses(a) == [(42, WcStatus.SUCCESS)]
    assert target == data
    sender = a.counters()
    assert sender["retransmitted_packets"] > 0 and sender["retransmitted_bytes"] > 0
    assert sender["naks_received"] > 0
    assert b.counters()["naks_sent"] >= sender["naks_received"]  # NAKs can be lost too
    receiver = b.counters()
    assert receiver["ooo_received"] > 0  # after a loss, or overtaken
    gbn, place = receiver["naks_sent_out_of_order"], receiver["naks_sent_place_gap"]
    assert (gbn > 0 and place == 0) if receive_order == "gbn" else (gbn == 0 and place > 0)
    assert sim.port_counters(b).lost > 0
    if reorder:
        assert sim.port_counters(b).reordered > 0
    json.dumps(sender)


def test_one_qp_fills_a_dilated_100g_link():
    """The lab's case: 100G at TDF 1000 is a 100 Mb/s port with every period × 1000."""
    rng = random.Random(15)
    config = dilate(NicConfig(), 1000)
    a = Nic(MAC_A, IP_A, 100e6, config, rng=rng)
    b = Nic(MAC_B, IP_B, 100e6, config, rng=rng)
    qa, _ = connect_qps(a, b)
    size_bytes = 4 << 20
    mr = b.register_mr(bytearray(size_bytes))
    a.post_write(qa, 1, bytes(size_bytes), remote_va=mr.va, r_key=mr.r_key)
    sim = FabricSim(random.Random(16))
    sim.attach(a, delay_s=25e-6)  # a 5 m cable's 25 ns, dilated
    sim.attach(b, delay_s=25e-6)
    assert sim.run(10.0, stop=lambda: a.qp(qa).counters.messages_sent == 1)
    assert size_bytes * 8 / sim.now / 100e6 >= 0.95
    assert a.counters()["timeouts"] == 0


@pytest.mark.parametrize("pmtu_bytes", [1024, 2048, 4096])
def test_send_is_segmented_by_pmtu_into_posted_receives(pmtu_bytes):
    a, b = nic_pair(pmtu_bytes=pmtu_bytes)
    qa, qb = connect_qps(a, b)
    rng = random.Random(4)
    messages = [rng.randbytes(n) for n in (0, 1, pmtu_bytes, pmtu_bytes + 1, 3 * pmtu_bytes + 5)]
    buffers = [bytearray(4 * pmtu_bytes) for _ in messages]
    for i, (message, buf) in enumerate(zip(messages, buffers)):
        b.post_recv(qb, i, buf)
        a.post_send(qa, i, message)
    sim = FabricSim(random.Random(5))
    sent = []
    sim.on_transmit = lambda nic, frame: sent.append(parse_frame(frame)) if nic is a else None
    sim.attach(a)
    sim.attach(b)
    assert sim.run(1.0, stop=lambda: a.qp(qa).counters.messages_sent == len(messages))
    received = b.poll_completions()
    assert [(wc.wr_id, wc.opcode, wc.status, wc.byte_len) for wc in received] == [
        (i, "RECV", "SUCCESS", len(m)) for i, m in enumerate(messages)]
    for message, buf in zip(messages, buffers):
        assert buf[:len(message)] == message
    expected_packets = sum(max(1, -(-len(m) // pmtu_bytes)) for m in messages)
    assert len(sent) == expected_packets
    assert {p.opcode for p in sent} == {Opcode.SEND_ONLY, Opcode.SEND_FIRST, Opcode.SEND_MIDDLE,
                                        Opcode.SEND_LAST}
    assert all(len(p.payload) == pmtu_bytes for p in sent
               if p.opcode in (Opcode.SEND_FIRST, Opcode.SEND_MIDDLE))


def test_write_segments_carry_reth_on_first_only_and_ackreq_on_last():
    a, b = nic_pair(pmtu_bytes=1024, ack_req_interval_packets=1 << 20)
    qa, qb = connect_qps(a, b)
    mr = b.register_mr(bytearray(8192))
    a.post_write(qa, 1, bytes(3000), remote_va=mr.va + 100, r_key=mr.r_key)
    sent = packets(poll_until(a, 1e-4))  # before the retransmission timeout
    assert [p.opcode for p in sent] == [Opcode.RDMA_WRITE_FIRST, Opcode.RDMA_WRITE_MIDDLE,
                                        Opcode.RDMA_WRITE_LAST]
    assert (sent[0].va, sent[0].r_key, sent[0].dma_length) == (mr.va + 100, mr.r_key, 3000)
    assert [p.ackreq for p in sent] == [False, False, True]
    first = a.qp(qa).initial_psn
    assert [p.psn for p in sent] == [first, (first + 1) & 0xFFFFFF, (first + 2) & 0xFFFFFF]
    assert all(p.dscp == 26 and p.ecn == ECN_ECT0 for p in sent)


def test_psn_wraps_at_24_bits():
    rng = random.Random(6)
    a = Nic(MAC_A, IP_A, RATE_BPS, NicConfig(pmtu_bytes=1024), rng=rng)
    b = Nic(MAC_B, IP_B, RATE_BPS, NicConfig(pmtu_bytes=1024), rng=rng)
    qp_a, qp_b = a.create_qp(initial_psn=0xFFFFF0), b.create_qp(initial_psn=0xFFFFFE)
    a.connect(qp_a.qpn, remote_qpn=qp_b.qpn, remote_ip=IP_B, remote_mac=MAC_B, remote_psn=0xFFFFFE)
    b.connect(qp_b.qpn, remote_qpn=qp_a.qpn, remote_ip=IP_A, remote_mac=MAC_A, remote_psn=0xFFFFF0)
    data = rng.randbytes(64 * 1024)
    target = bytearray(len(data))
    mr = b.register_mr(target)
    a.post_write(qp_a.qpn, 1, data, remote_va=mr.va, r_key=mr.r_key)
    sim = FabricSim(random.Random(7))
    sim.attach(a, loss=0.02)
    sim.attach(b, loss=0.02)
    assert sim.run(10.0, stop=lambda: qp_a.counters.messages_sent == 1)
    assert target == data and statuses(a) == [(1, WcStatus.SUCCESS)]


def test_gap_is_naked_once_and_requester_goes_back_n():
    a, b = nic_pair(pmtu_bytes=1024)
    qa, qb = connect_qps(a, b)
    mr = b.register_mr(bytearray(16 * 1024))
    a.post_write(qa, 1, bytes(10 * 1024), remote_va=mr.va, r_key=mr.r_key)
    frames = poll_until(a, 1e-6)
    assert len(frames) == 10
    lost_psn = parse_frame(frames[3][1]).psn
    for i, (_, frame) in enumerate(frames):
        if i != 3:
            b.receive(frame, 2e-6)
    replies = poll_until(b, 1e-3, start_s=2e-6)
    naks = [p for p in packets(replies) if p.syndrome == Syndrome.NAK_PSN_SEQUENCE_ERROR]
    assert len(naks) == 1 and naks[0].psn == lost_psn  # six packets after the gap, one NAK
    assert b.qp(qb).drops["psn_out_of_order"] == 6
    for _, reply in replies:
        a.receive(reply, 3e-6)
    resent = packets(poll_until(a, 4e-6, start_s=3e-6))
    assert [p.psn for p in resent] == [(lost_psn + i) & 0xFFFFFF for i in range(7)]
    assert a.qp(qa).counters.retransmitted_packets == 7
    assert a.qp(qa).counters.naks_received == 1


def test_duplicate_is_reacked_and_acks_coalesce():
    a, b = nic_pair(pmtu_bytes=1024, ack_coalesce_packets=4, ack_req_interval_packets=1 << 20)
    qa, qb = connect_qps(a, b)
    mr = b.register_mr(bytearray(16 * 1024))
    a.post_write(qa, 1, bytes(10 * 1024), remote_va=mr.va, r_key=mr.r_key)
    frames = poll_until(a, 1e-6)
    for _, frame in frames:
        b.receive(frame, 2e-6)
    acks = packets(poll_until(b, 1e-3, start_s=2e-6))
    psns = [p.psn for _, p in zip(frames, packets(frames))]
    # ACK after packets 4 and 8, and on the AckReq of the last one; MSN counts messages.
    assert [(p.psn, p.syndrome, p.msn) for p in acks] == [
        (psns[3], 0x1F, 0), (psns[7], 0x1F, 0), (psns[9], 0x1F, 1)]
    b.receive(frames[5][1], 3e-6)
    b.receive(frames[6][1], 3e-6)  # second duplicate without AckReq: no second re-ACK
    b.receive(frames[9][1], 3e-6)  # a duplicate with AckReq is always answered
    reacks = packets(poll_until(b, 1e-3, start_s=3e-6))
    assert [(p.psn, p.syndrome) for p in reacks] == [(psns[9], 0x1F), (psns[9], 0x1F)]
    assert b.qp(qb).counters.duplicates_received == 3


def test_timeouts_back_off_exponentially_then_fail_the_qp():
    a, _ = nic_pair(retransmit_timeout_s=1e-3, retry_limit=3)
    qp = a.create_qp()
    a.connect(qp.qpn, remote_qpn=0x99, remote_ip=IP_B, remote_mac=MAC_B, remote_psn=0)
    a.post_write(qp.qpn, 1, bytes(100), remote_va=0, r_key=1)
    a.post_write(qp.qpn, 2, bytes(100), remote_va=0, r_key=1)
    sent = poll_until(a, 1.0)  # nobody answers
    times = [t for t, frame in sent if parse_frame(frame).psn == qp.initial_psn]
    assert times[1:] == pytest.approx([1e-3, 3e-3, 7e-3], abs=1e-6)  # 1, 2, 4 ms apart
    assert qp.state is QpState.ERROR and qp.counters.timeouts == 4
    assert statuses(a) == [(1, WcStatus.RETRY_EXC_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert a.counters()["qps_in_error"] == 1 and a.counters()["fatal_errors"] == 1
    a.post_send(qp.qpn, 3, b"late")
    assert statuses(a) == [(3, WcStatus.WR_FLUSH_ERR)]
    assert a.next_event(1.0) is None
    a.destroy_qp(qp.qpn)
    assert a.counters()["qps_in_error"] == 0 and a.counters()["fatal_errors"] == 1
    assert a.counters()["timeouts"] == 4 and a.counters()["qps"] == {}


def test_destroying_a_qp_flushes_its_work_and_keeps_its_counters():
    a, b = nic_pair()
    qa, qb = connect_qps(a, b)
    a.post_send(qa, 1, b"never sent")
    b.post_recv(qb, 2, bytearray(10))
    poll_until(a, 1e-6)
    a.destroy_qp(qa)
    b.destroy_qp(qb)
    assert statuses(a) == [(1, WcStatus.WR_FLUSH_ERR)]
    assert statuses(b) == [(2, WcStatus.WR_FLUSH_ERR)]
    assert a.counters()["fatal_errors"] == 0 and a.next_event(0.0) is None
    assert a.counters()["qps"] == {}
    with pytest.raises(ValueError, match="no QP"):
        a.post_send(qa, 3, b"gone")


def test_send_without_receive_gets_rnr_nak_then_retries():
    a, b = nic_pair(rnr_retry_delay_s=1e-3)
    qa, qb = connect_qps(a, b)
    a.post_send(qa, 1, b"hello")
    sim = FabricSim(random.Random(9))
    sim.attach(a, delay_s=1e-6)
    sim.attach(b, delay_s=1e-6)
    sim.run(0.5e-3)
    assert a.qp(qa).counters.rnr_naks_received == 1
    buf = bytearray(16)
    b.post_recv(qb, 7, buf)
    assert sim.run(0.1, stop=lambda: a.qp(qa).counters.messages_sent == 1)
    assert sim.now > 1e-3
    assert buf[:5] == b"hello" and statuses(b) == [(7, WcStatus.SUCCESS)]
    assert a.qp(qa).counters.timeouts == 0


def test_an_rnr_wait_with_a_dcqcn_timer_pending_lets_time_move_on():
    """DCQCN's rate-increase timer falls due while the QP waits out an RNR NAK: the timer runs
    then, and the NIC's next event moves past it. It used to stay at the timer's time (the CC
    ran its timers only while the pacer waited), so an agent polled the NIC again and again at
    the same instant, never reaching the end of the wait."""
    a, b = nic_pair(rnr_retry_delay_s=1e-3, cc_algorithm="dcqcn")
    qa, qb = connect_qps(a, b)
    a.post_send(qa, 1, b"hello")
    a.qp(qa).cc.on_cnp(0.0)  # the rate cut: its increase timer runs from here
    cut_bps = a.qp(qa).cc.rate_bps
    now, same = 0.0, 0

    def step() -> None:
        nonlocal now, same
        due = min(d for d in (a.next_event(now), b.next_event(now)) if d is not None)
        same = same + 1 if due <= now else 0
        assert same < 10, f"next_event answers {due} at {now} again and again"
        now = max(now, due)
        for frame in a.poll(now):
            b.receive(frame, now)
        for frame in b.poll(now):
            a.receive(frame, now)

    while now < 0.5e-3:
        step()
    assert a.qp(qa).counters.rnr_naks_received == 1
    assert a.qp(qa).cc.rate_bps > cut_bps  # its timers ran during the wait
    buf = bytearray(16)
    b.post_recv(qb, 7, buf)
    while a.qp(qa).counters.messages_sent == 0:
        step()
    assert now >= 1e-3 and buf[:5] == b"hello"  # not before the wait ends


@pytest.mark.parametrize("verb", ["write", "read"])
@pytest.mark.parametrize("mistake", ["past_the_end", "deregistered"])
def test_bad_r_key_fails_both_ends_with_remote_access_error(mistake, verb):
    a, b = nic_pair()
    qa, qb = connect_qps(a, b)
    mr = b.register_mr(bytearray(100))
    if mistake == "deregistered":
        b.deregister_mr(mr.r_key)
    size = 200 if mistake == "past_the_end" else 10
    post = a.post_write if verb == "write" else a.post_read
    post(qa, 1, bytearray(size), remote_va=mr.va, r_key=mr.r_key)
    post(qa, 2, bytearray(10), remote_va=mr.va, r_key=mr.r_key)
    sim = FabricSim(random.Random(10))
    sim.attach(a)
    sim.attach(b)
    sim.run(0.1)
    assert statuses(a) == [(1, WcStatus.REM_ACCESS_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert a.qp(qa).state is QpState.ERROR and b.qp(qb).state is QpState.ERROR
    assert b.qp(qb).drops["remote_access_error"] == 1


def test_malformed_frames_are_counted_and_dropped_while_the_qp_keeps_working():
    a, b = nic_pair(pmtu_bytes=1024)
    qa, qb = connect_qps(a, b)
    data = random.Random(11).randbytes(256 * 1024)
    target = bytearray(len(data))
    mr = b.register_mr(target)
    a.post_write(qa, 1, data, remote_va=mr.va, r_key=mr.r_key)
    sim = FabricSim(random.Random(12))
    sent: list[bytes] = []
    sim.on_transmit = lambda nic, frame: sent.append(frame) if nic is a else None
    sim.attach(a, delay_s=1e-6)
    sim.attach(b, delay_s=1e-6)
    sim.run(5e-6)  # mid-transfer

    valid = sent[-1]
    expected_psn = parse_frame(valid).psn + 1
    to_b = FlowHeaders(a.mac, b.mac, a.ip, b.ip, dscp=26, ecn=ECN_ECT0, ttl=64, udp_sport=1234)
    bad_icrc = bytearray(valid)
    bad_icrc[-10] ^= 0xFF
    rng = random.Random(13)
    garbage = [
        bytes(bad_icrc),
        to_b.frame(Opcode.SEND_ONLY, 0x777, 0, payload=b"who?"),  # unknown QP
        to_b.frame(Opcode.RDMA_WRITE_ONLY, qb, expected_psn + (1 << 20),  # far ahead
                   extension=reth(mr.va, mr.r_key, 4), payload=b"late"),
        to_b.frame(0x13, qb, expected_psn, extension=bytes(28)),  # atomic COMPARE_SWAP: unsupported
        FlowHeaders(a.mac, b.mac, a.ip, b.ip, dscp=26, ecn=ECN_ECT0, ttl=64, udp_sport=1234,
                    pkey=0x1234).frame(Opcode.SEND_ONLY, qb, expected_psn, payload=b"other"),
        valid[:40],
        b"",
        bytes.fromhex("ffffffffffff") + a.mac + bytes.fromhex("0806") + bytes(28),  # ARP
        *(rng.randbytes(rng.randrange(1, 1500)) for _ in range(50)),
    ]
    for frame in garbage:
        b.receive(frame, sim.now)
    drops = b.counters()["drops"]
    assert drops["bad_icrc"] == 1 and drops["unknown_qp"] == 1 and drops["truncated"] >= 2
    assert drops["bad_opcode"] == 1 and drops["bad_pkey"] == 1
    assert drops["not_roce"] >= 1
    assert b.qp(qb).drops["psn_out_of_window"] == 1
    sim.wake(b)
    assert sim.run(1.0, stop=lambda: a.qp(qa).counters.messages_sent == 1)
    assert target == data and statuses(a) == [(1, WcStatus.SUCCESS)]
    assert b.qp(qb).state is QpState.RTS


def test_random_frames_with_valid_icrc_never_raise():
    """Well-formed headers with random opcodes, PSNs, syndromes, RETHs and sizes reach the
    QP logic itself; whatever they do to the QP, the NIC must not raise."""
    rng = random.Random(14)
    reasons: Counter[str] = Counter()
    for trial in range(20):
        a, b = nic_pair(seed=trial, pmtu_bytes=1024)
        qa, qb = connect_qps(a, b)
        mr = b.register_mr(bytearray(8192))
        b.post_recv(qb, 1, bytearray(2048))
        a.post_write(qa, 1, bytes(5000), remote_va=mr.va, r_key=mr.r_key)
        to_b = FlowHeaders(a.mac, b.mac, a.ip, b.ip, dscp=26, ecn=rng.choice((2, 3)), ttl=64,
                           udp_sport=1)
        to_a = FlowHeaders(b.mac, a.mac, b.ip, a.ip, dscp=26, ecn=2, ttl=64, udp_sport=1)
        now = 0.0
        for _ in range(300):
            now += 1e-7
            opcode = rng.choice(list(Opcode))
            ext = {Opcode.RDMA_WRITE_FIRST: 16, Opcode.RDMA_WRITE_ONLY: 16,
                   Opcode.ACKNOWLEDGE: 4, Opcode.CNP: 16}.get(opcode, 0)
            if ext == 16 and opcode != Opcode.CNP and rng.random() < 0.5:
                extension = reth(mr.va + rng.randrange(-10, 9000), rng.choice((mr.r_key, 5)),
                                 rng.randrange(0, 9000))
            else:
                extension = rng.randbytes(ext)
            payload = rng.randbytes(rng.choice((0, 1, 1023, 1024, 1025, 2000)))
            # A's PSNs: what B expects and what A's ACKs name.
            psn = (a.qp(qa).initial_psn + rng.randrange(-3, 40)) & 0xFFFFFF
            target, headers, qpn = (a, to_a, qa) if opcode == Opcode.ACKNOWLEDGE else (b, to_b, qb)
            target.receive(headers.frame(opcode, qpn, psn, ackreq=rng.random() < 0.3,
                                         extension=extension, payload=payload), now)
            a.poll(now)
            b.poll(now)
        json.dumps([a.counters(), b.counters()])
        reasons.update(a.qp(qa).drops)
        reasons.update(b.qp(qb).drops)
    assert {"psn_out_of_order", "bad_opcode_sequence", "bad_length"} <= set(reasons)


def test_api_misuse_raises_value_errors():
    a, _ = nic_pair()
    with pytest.raises(ValueError, match="no QP"):
        a.post_send(0x1234, 1, b"x")
    qp = a.create_qp()
    with pytest.raises(ValueError, match="pmtu_bytes=1500"):
        a.connect(qp.qpn, remote_qpn=1, remote_ip=IP_B, remote_mac=MAC_B, remote_psn=0,
                  pmtu_bytes=1500)
    a.connect(qp.qpn, remote_qpn=1, remote_ip=IP_B, remote_mac=MAC_B, remote_psn=0)
    with pytest.raises(ValueError, match="not INIT"):
        a.connect(qp.qpn, remote_qpn=1, remote_ip=IP_B, remote_mac=MAC_B, remote_psn=0)
    with pytest.raises(ValueError, match="writable"):
        a.register_mr(b"read only")


def test_packed_counters_expand_to_the_counters_and_a_baseline_subtracts_the_same_either_way():
    """nicd answers its sampler packed (a list per QP) and keeps its `clear` baseline packed:
    expanded, both are what the dict form gives, and so is their difference."""
    a, b = nic_pair(pmtu_bytes=1024)
    qa, qb = connect_qps(a, b)
    mr = b.register_mr(bytearray(1 << 16))
    for wr_id in (1, 2):
        a.post_write(qa, wr_id, bytes(1 << 15), remote_va=mr.va, r_key=mr.r_key)
    sim = FabricSim(random.Random(4))
    for nic in (a, b):
        sim.attach(nic, delay_s=1e-6, loss=0.05)
    assert sim.run(10.0, stop=lambda: a.qp(qa).counters.messages_sent == 1)
    base, base_packed = a.counters(sim.now), a.counters(sim.now, packed=True)
    assert sim.run(10.0, stop=lambda: a.qp(qa).counters.messages_sent == 2)
    now, packed = a.counters(sim.now), a.counters(sim.now, packed=True)
    assert isinstance(packed["qps"][str(qa)], list) and now["qps"][str(qa)]["retransmitted_packets"] > 0
    assert expand_qps(json.loads(json.dumps(packed))) == json.loads(json.dumps(now))
    assert expand_qps(_subtract(packed, base_packed)) == _subtract(now, base)
    assert _subtract(now, base)["qps"][str(qa)]["messages_sent"] == 1
