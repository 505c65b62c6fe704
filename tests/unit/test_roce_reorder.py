"""What the responder does with reordering (rocelab.roce.qp): gbn NAKs the first packet ahead
of the expected PSN, place keeps it (ConnectX-5+ out-of-order placement) and completes a
message once it is contiguous; a real loss is still recovered under place. Generated traces:
any reordering within the window through place delivers what the in-order stream through gbn
delivers."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocelab.roce import NicConfig, WcStatus
from rocelab.roce.qp import reorder_summary
from rocelab.roce.sim import FabricSim, connect_qps, poll_until
from rocelab.roce.wire import Syndrome, parse_frame
from test_roce_transport import nic_pair, packets, statuses

PMTU = 1024


def sent_frames(receive_order: str, messages: list[tuple[str, int]], **config):
    """Sender a, responder b (receive_order), every message posted: b, its memory regions
    (one per WRITE, one receive buffer per SEND) and a's frames in PSN order."""
    a, b = nic_pair(pmtu_bytes=PMTU, receive_order=receive_order, **config)
    qa, qb = connect_qps(a, b)
    rng = random.Random(len(messages))
    targets = []
    for i, (verb, size) in enumerate(messages):
        data = rng.randbytes(size)
        target = bytearray(size)
        targets.append(target)
        if verb == "write":
            mr = b.register_mr(target)
            a.post_write(qa, i, data, remote_va=mr.va, r_key=mr.r_key)
        else:
            b.post_recv(qb, 100 + i, target)
            a.post_send(qa, i, data)
    return a, b, qb, targets, [f for _t, f in poll_until(a, 1e-4)]  # before the first timeout


def deliver(b, frames) -> list:
    for frame in frames:
        b.receive(frame, 1e-3)
    return packets(poll_until(b, 1.0, start_s=1e-3))


def shuffled_within(frames: list[bytes], distance: int, rng: random.Random) -> list[bytes]:
    """`frames` reordered with no frame arriving more than `distance` places early."""
    keyed = sorted(range(len(frames)), key=lambda i: i + rng.uniform(0, distance))
    return [frames[i] for i in keyed]


@settings(max_examples=150, deadline=None)
@given(messages=st.lists(st.tuples(st.sampled_from(["write", "send"]), st.integers(1, 6 * PMTU)),
                         min_size=1, max_size=6),
       distance=st.integers(0, 12), seed=st.integers(0, 2**32 - 1))
def test_a_reordered_stream_through_place_delivers_what_in_order_through_gbn_does(messages, distance, seed):
    a, b, qb, in_order_targets, frames = sent_frames("gbn", messages)
    deliver(b, frames)
    gbn_completions = statuses(b)
    _a, p, qp_place, placed_targets, frames = sent_frames("place", messages)
    replies = deliver(p, shuffled_within(frames, distance, random.Random(seed)))
    assert placed_targets == in_order_targets
    assert statuses(p) == gbn_completions
    assert all(r.syndrome == Syndrome.ACK for r in replies)  # reordering within the window is no loss
    assert replies[-1].psn == parse_frame(frames[-1]).psn  # everything acknowledged, cumulatively
    counters = p.qp(qp_place).counters
    assert counters.naks_sent == 0 and counters.messages_received == len(messages)
    assert counters.ooo_received == sum(p.qp(qp_place).reorder_distances.values())


def test_place_completes_a_message_only_once_it_is_contiguous():
    a, b, qb, (target,), frames = sent_frames("place", [("send", 4 * PMTU)])
    assert deliver(b, frames[1:]) == []  # kept: no NAK, no ACK past the hole
    assert statuses(b) == [] and b.qp(qb).counters.ooo_received == 3
    (ack,) = deliver(b, frames[:1])
    assert (ack.syndrome, ack.psn) == (Syndrome.ACK, parse_frame(frames[-1]).psn)
    assert statuses(b) == [(100, WcStatus.SUCCESS)]
    assert b.qp(qb).report(0.0)["reorder_distance"] == {"max": 3, "p99": 3}


def test_gbn_naks_the_first_packet_ahead_and_counts_the_cause():
    a, b, qb, _targets, frames = sent_frames("gbn", [("send", 4 * PMTU)])
    (nak,) = deliver(b, frames[1:])
    assert (nak.syndrome, nak.psn) == (Syndrome.NAK_PSN_SEQUENCE_ERROR, parse_frame(frames[0]).psn)
    counters = b.qp(qb).counters
    assert (counters.naks_sent_out_of_order, counters.naks_sent_place_gap, counters.ooo_received) == (1, 0, 3)
    assert b.counters()["reorder_distance"] == {"max": 3, "p99": 3}


def test_under_place_a_hole_far_behind_the_newest_packet_is_a_loss_naked_once():
    a, b, qb, _targets, frames = sent_frames("place", [("write", 40 * PMTU)], place_nak_distance_packets=8)
    replies = deliver(b, frames[:3] + frames[4:])
    naks = [r for r in replies if r.syndrome == Syndrome.NAK_PSN_SEQUENCE_ERROR]
    assert [n.psn for n in naks] == [parse_frame(frames[3]).psn]
    assert b.qp(qb).counters.naks_sent_place_gap == 1
    (ack,) = deliver(b, frames[3:4])  # the resent hole: everything kept behind it is placed
    assert ack.psn == parse_frame(frames[-1]).psn and b.qp(qb).counters.messages_received == 1


def test_place_rewinds_far_less_than_gbn_under_reordering_alone():
    retransmitted = {}
    for receive_order in ("gbn", "place"):
        a, b = nic_pair(pmtu_bytes=PMTU, receive_order=receive_order)
        qa, qb = connect_qps(a, b)
        mr = b.register_mr(bytearray(1 << 19))
        a.post_write(qa, 1, bytes(1 << 19), remote_va=mr.va, r_key=mr.r_key)
        sim = FabricSim(random.Random(3))
        for nic in (a, b):
            sim.attach(nic, delay_s=1e-6, reorder=0.2, reorder_delay_s=2e-6)
        assert sim.run(10.0, stop=lambda: a.qp(qa).counters.messages_sent == 1)
        retransmitted[receive_order] = a.qp(qa).counters.retransmitted_packets
    assert retransmitted["place"] == 0 < retransmitted["gbn"]


def test_reorder_summary_reads_max_and_p99():
    from collections import Counter
    assert reorder_summary(Counter()) == {"max": 0, "p99": 0}
    assert reorder_summary(Counter({1: 990, 5: 9, 40: 1})) == {"max": 40, "p99": 1}
    assert reorder_summary(Counter({1: 980, 5: 19, 40: 1})) == {"max": 40, "p99": 5}


def test_receive_order_is_checked():
    with pytest.raises(ValueError, match="receive_order='sack' must be one of gbn, place"):
        NicConfig(receive_order="sack")
    with pytest.raises(ValueError, match="place_nak_distance_packets=0"):
        NicConfig(place_nak_distance_packets=0)
