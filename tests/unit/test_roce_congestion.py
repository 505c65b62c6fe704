"""Congestion at the NIC: CNP generation (notification point), DCQCN on a shared
bottleneck (reaction point), and 802.1Qbb pause frames."""

from __future__ import annotations

import random

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.l2 import Ether
from scapy.packet import raw

from rocelab.roce import Nic, NicConfig, dilate
from rocelab.roce.sim import EcnMarking, FabricSim, connect_qps, poll_until
from rocelab.ethernet import pause_duration_s
from rocelab.roce.wire import Opcode, PauseFrame, mark_ce, parse_frame
from pfc_gen_frames import TIME_FIELDS_BEFORE_7420, pfc_gen_pfc

SWITCH_MAC = "02:00:00:00:ff:ff"


def pfc_frame(quanta: dict[int, int]) -> bytes:
    """An 802.1Qbb frame from the ToR pausing each priority for its quanta (0 = XON)."""
    fields = {}
    for priority, q in quanta.items():
        fields[f"c{priority}_enabled"] = 1
        fields[f"c{priority}_pause_time"] = q
    frame = raw(Ether(dst="01:80:c2:00:00:01", src=SWITCH_MAC)
                / MACControlClassBasedFlowControl(**fields))
    return frame + bytes(60 - len(frame))


def make_nic(index: int, rate_bps: float, rng: random.Random, tdf: float = 1,
             **config) -> Nic:
    """A NIC at `rate_bps`; with tdf > 1 its timers are dilated as in a lab."""
    return Nic(f"02:00:00:00:00:{index:02x}", f"198.18.0.{index}", rate_bps,
               dilate(NicConfig(**config), tdf), rng=rng)


def test_ce_burst_yields_at_most_one_cnp_per_interval_per_qp():
    rng = random.Random(1)
    a, b = make_nic(1, 100e9, rng, pmtu_bytes=1024), make_nic(2, 100e9, rng, pmtu_bytes=1024)
    flows = [connect_qps(a, b), connect_qps(a, b)]
    mr = b.register_mr(bytearray(1 << 20))
    for qa, _ in flows:
        a.post_write(qa, 1, bytes(256 * 1024), remote_va=mr.va, r_key=mr.r_key)
    data = [frame for _, frame in poll_until(a, 40e-6)]  # round robin over both QPs
    assert len(data) >= 400
    cnp_times: dict[int, list[float]] = {}
    for i, frame in enumerate(data[:400]):  # 400 CE-marked packets, 0.5 us apart
        now = i * 0.5e-6
        b.receive(mark_ce(frame), now)
        for sent in b.poll(now):
            pkt = parse_frame(sent)
            if pkt.opcode == Opcode.CNP:
                cnp_times.setdefault(pkt.dest_qpn, []).append(now)
                assert pkt.becn and pkt.dscp == 48 and pkt.ecn == 0 and pkt.psn == 0
                assert bytes(pkt.payload) == b"" and len(sent) == 14 + 20 + 8 + 12 + 16 + 4
                a.receive(sent, now)
    assert set(cnp_times) == {qa for qa, _ in flows}
    for times in cnp_times.values():
        # Each QP sees a CE every microsecond for 200 us: a CNP at the first, then one at
        # the first CE at least 50 us after the previous CNP.
        gaps = [later - earlier for earlier, later in zip(times, times[1:])]
        assert times[0] < 1e-6 and len(times) == 4
        assert all(50e-6 - 1e-12 <= gap <= 51e-6 + 1e-12 for gap in gaps)
    for qa, qb in flows:
        assert b.qp(qb).counters.ce_received == 200 and b.qp(qb).counters.cnps_sent == 4
        assert a.qp(qa).counters.cnps_received == 4
        assert a.qp(qa).cc.rate_bps < 100e9 / 4  # four cuts at alpha ≈ 1


def _two_flows_into_one_port(cc_algorithm: str) -> tuple[float, float, float, int, list[Nic]]:
    """A1 and A2 send to B over one switch port of their own speed (2:1 over-subscription);
    A2 starts 5 ms after A1. Returns Jain's index and utilisation over the last 25 ms,
    the final rates' ratio, the port's peak queue, and the NICs."""
    rate_bps = 10e9
    rng = random.Random(2)
    a1, a2, b = (make_nic(i, rate_bps, rng, cc_algorithm=cc_algorithm) for i in (1, 2, 3))
    (q1, r1), (q2, r2) = connect_qps(a1, b), connect_qps(a2, b)
    mr = b.register_mr(bytearray(1 << 20))
    chunk = bytes(1 << 20)
    sim = FabricSim(random.Random(3))
    sim.attach(a1, delay_s=1e-6)
    sim.attach(a2, delay_s=1e-6)
    # Paper-style marking: Kmin 5 KB, Kmax 200 KB, Pmax 1%.
    sim.attach(b, delay_s=1e-6, ecn=EcnMarking(5_000, 200_000, 0.01))
    for i in range(64):
        a1.post_write(q1, i, chunk, remote_va=mr.va, r_key=mr.r_key)
    sim.wake(a1)
    sim.run(5e-3)
    for i in range(64):
        a2.post_write(q2, i, chunk, remote_va=mr.va, r_key=mr.r_key)
    sim.wake(a2)
    sim.run(25e-3)
    before = (b.qp(r1).counters.rx_bytes, b.qp(r2).counters.rx_bytes)
    sim.run(50e-3)
    x1 = b.qp(r1).counters.rx_bytes - before[0]
    x2 = b.qp(r2).counters.rx_bytes - before[1]
    jain = (x1 + x2) ** 2 / (2 * (x1 * x1 + x2 * x2))
    utilisation = (x1 + x2) * 8 / 25e-3 / rate_bps
    return jain, utilisation, x1 / x2, sim.port_counters(b).max_queue_bytes, [a1, a2, b]


def test_two_dcqcn_flows_converge_to_fair_share_with_a_bounded_queue():
    jain, utilisation, _, peak_queue_bytes, (a1, a2, _) = _two_flows_into_one_port("dcqcn")
    assert jain >= 0.95
    assert utilisation >= 0.8
    assert peak_queue_bytes < 1_000_000
    for nic in (a1, a2):
        counters = nic.counters()
        assert counters["cnps_received"] > 0
        rate_bps = next(iter(counters["qps"].values()))["cc"]["rate_bps"]
        assert 2e9 < rate_bps < 8e9


def test_without_congestion_control_the_queue_holds_both_requesters_whole_windows():
    """Nothing but the RC window limits a sender: the port's queue fills with nearly every
    packet the two requesters may have unacknowledged, and nothing is lost or retransmitted
    (the queue has no limit here)."""
    _, _, _, peak_queue_bytes, nics = _two_flows_into_one_port("none")
    config = nics[0].config
    assert peak_queue_bytes > 0.95 * 2 * config.max_inflight_packets * config.pmtu_bytes
    for nic in nics[:2]:
        assert nic.counters()["retransmitted_packets"] == nic.counters()["naks_received"] == 0


def _one_writer(seed: int, **to_b) -> tuple[FabricSim, Nic, Nic, int, object]:
    """A writes to B over the simulated switch, 10G NICs, 1 µs cables; `to_b` sets B's switch
    port. Returns the sim, A, B, A's QPN and B's memory region."""
    rng = random.Random(seed)
    a, b = make_nic(1, 10e9, rng), make_nic(2, 10e9, rng)
    qa, _ = connect_qps(a, b)
    mr = b.register_mr(bytearray(1 << 20))
    sim = FabricSim(random.Random(seed + 1))
    sim.attach(a, delay_s=1e-6)
    sim.attach(b, delay_s=1e-6, **to_b)
    return sim, a, b, qa, mr


@pytest.mark.parametrize("at, marked", [("enqueue", 2), ("dequeue", 1)])
def test_a_congestion_point_reads_its_queue_on_enqueue_or_on_dequeue(at, marked):
    """Three frames into a port four times slower, marking whenever anything else is queued:
    on enqueue the 2nd and 3rd each find a frame ahead of them; on dequeue only the 2nd
    leaves one behind it (the 3rd has arrived by then, nothing follows the 3rd)."""
    sim, a, b, qa, mr = _one_writer(13, rate_bps=2.5e9, ecn=EcnMarking(0, 0, 1.0, at=at))
    a.post_write(qa, 1, bytes(3 * a.config.pmtu_bytes), remote_va=mr.va, r_key=mr.r_key)
    sim.wake(a)
    sim.run(1e-3)
    assert sim.port_counters(b).ecn_marked == b.counters()["ce_received"] == marked
    assert [c.status.value for c in a.poll_completions()] == ["SUCCESS"]
    with pytest.raises(ValueError, match="at='egress' must be enqueue or dequeue"):
        EcnMarking(0, 0, 1.0, at="egress")


def test_frames_of_one_poll_cross_the_nics_cable_back_to_back_in_order():
    """A pacer that wakes after an idle spell hands out a burst in one poll; on the wire the
    frames still follow each other at the port's rate, so the message's short tail never
    overtakes the full frames before it (which the responder would NAK as a PSN gap)."""
    sim, a, b, qa, mr = _one_writer(11)
    sent_at = []
    sim.on_transmit = lambda nic, frame: sent_at.append(sim.now) if nic is a else None
    sim.run(1e-3)  # idle: both pacers may catch up a burst
    a.post_write(qa, 1, bytes(2 * a.config.pmtu_bytes + 100), remote_va=mr.va, r_key=mr.r_key)
    sim.wake(a)
    sim.run(2e-3)
    assert sent_at[:2] == [1e-3, 1e-3]  # one poll handed out more than one frame
    assert [c.status.value for c in a.poll_completions()] == ["SUCCESS"]
    assert b.counters()["naks_sent"] == b.counters()["duplicates_received"] == 0


@pytest.mark.parametrize("rate_bps, tdf", [(100e9, 1), (100e6, 1000)])  # production, lab
def test_pfc_pause_stops_a_priority_for_its_quanta_and_xon_resumes(rate_bps, tdf):
    rng = random.Random(4)
    a, b = make_nic(1, rate_bps, rng, tdf), make_nic(2, rate_bps, rng, tdf)
    qa, _ = connect_qps(a, b)
    assert a.qp(qa).priority == 3  # DSCP 26 → priority 3
    a.post_write(qa, 1, bytes(4 << 20), remote_va=0, r_key=0)
    frame_s = (4096 + 74 + 24) * 8 / rate_bps  # one full data packet on the wire
    t0 = 20 * frame_s
    poll_until(a, t0)

    a.receive(pfc_frame({3: 1000}), t0)
    pause_s = pause_duration_s(1000, rate_bps)
    assert pause_s == pytest.approx(1000 * 512 / rate_bps)
    after = poll_until(a, t0 + pause_s + 5 * frame_s, start_s=t0)
    assert after[0][0] == pytest.approx(t0 + pause_s, rel=1e-9)  # nothing until it expires

    t1 = after[-1][0] + frame_s
    a.receive(pfc_frame({3: 0xFFFF}), t1)
    a.receive(pfc_frame({5: 0xFFFF}), t1)  # another priority: no effect on 3
    xon_at = t1 + 7 * frame_s
    assert poll_until(a, xon_at, start_s=t1) == []
    assert a.next_event(t1) == pytest.approx(t1 + pause_duration_s(0xFFFF, rate_bps))
    a.receive(pfc_frame({3: 0}), xon_at)
    resumed = poll_until(a, xon_at + frame_s, start_s=xon_at)
    assert resumed and resumed[0][0] == pytest.approx(xon_at)

    pfc = a.counters()["pfc"]
    assert pfc["rx_pause_frames"] == [0, 0, 0, 2, 0, 1, 0, 0]
    assert pfc["rx_xon_frames"][3] == 1
    assert pfc["paused_time_s"][3] == pytest.approx(pause_s + 7 * frame_s, rel=1e-9)


def test_acks_wait_for_their_paused_priority_but_cnps_do_not():
    rng = random.Random(5)
    a, b = make_nic(1, 100e9, rng), make_nic(2, 100e9, rng)
    qa, qb = connect_qps(a, b)
    mr = b.register_mr(bytearray(4096))
    a.post_write(qa, 1, bytes(4096), remote_va=mr.va, r_key=mr.r_key)
    (_, frame), = poll_until(a, 1e-6)
    b.receive(pfc_frame({3: 0xFFFF}), 0.0)
    b.receive(mark_ce(frame), 1e-6)
    first = [parse_frame(f).opcode for f in b.poll(1e-6)]
    assert first == [Opcode.CNP]  # priority 6; the ACK waits on priority 3
    b.receive(pfc_frame({3: 0}), 2e-6)
    assert [parse_frame(f).opcode for f in b.poll(2e-6)] == [Opcode.ACKNOWLEDGE]


def test_802_3x_pause_stops_every_priority():
    rng = random.Random(6)
    a, b = make_nic(1, 100e9, rng), make_nic(2, 100e9, rng)
    qa, _ = connect_qps(a, b)
    a.post_write(qa, 1, bytes(8192), remote_va=0, r_key=0)
    global_pause = raw(Ether(dst="01:80:c2:00:00:01", src=SWITCH_MAC)
                       / MACControlPause(pause_time=0x100))
    global_pause += bytes(60 - len(global_pause))
    assert isinstance(parse_frame(global_pause), PauseFrame)
    a.receive(global_pause, 0.0)
    assert a.poll(0.0) == []
    assert a.next_event(0.0) == pytest.approx(pause_duration_s(0x100, 100e9))


def test_a_short_pfc_frame_from_pfc_gen_pauses_the_nic_as_its_padded_self():
    """pfc_gen.py's 32-byte frame (7 time fields, no padding): the NIC reads it as the MAC that
    sent it would have padded it, so priority 3 pauses for the quanta asked."""
    rng = random.Random(7)
    a, b = make_nic(1, 100e9, rng), make_nic(2, 100e9, rng)
    qa, _ = connect_qps(a, b)
    a.post_write(qa, 1, bytes(8192), remote_va=0, r_key=0)
    short = pfc_gen_pfc(1 << 3, 0xFFFF, TIME_FIELDS_BEFORE_7420)
    assert len(short) == 32
    a.receive(short, 0.0)
    assert a.poll(0.0) == []
    assert a.next_event(0.0) == pytest.approx(pause_duration_s(0xFFFF, 100e9))
    assert a.counters()["pfc"]["rx_pause_frames"][3] == 1


def test_four_flows_into_one_port_under_each_dcqcn_set():
    """The bench_dcqcn scenario, asserted on what holds for both sets: the port's share is
    split fairly and never exceeds line rate; and on what separates them: ConnectX's recovery
    keeps the port busier than the paper's, at the price of a deeper queue."""
    from rocelab.roce.config import roce_config
    from rocelab.roce.sim import incast_fairness

    ecn = EcnMarking(100_000, 400_000, 0.2)
    runs = {name: incast_fairness(4, roce_config({"dcqcn": name}), ecn=ecn, window_s=1e-3, write_bytes=16 << 20)
            for name in ("paper", "connectx")}
    for r in runs.values():
        assert len(r.flow_bps) == 4
        assert 0 < r.utilisation <= 1.0 + 1e-9 and sum(r.flow_bps) <= 100e9
        assert r.jain >= 0.95
        assert len(r.queue_bytes) == len(r.rate_series_bps) == 100  # a sample every 10 µs of 1 ms
    # The paper's flows were cut in the first burst and are still crawling back: no CNP since.
    assert runs["connectx"].cnps > 0 and runs["connectx"].utilisation > 2 * runs["paper"].utilisation
    assert max(runs["connectx"].queue_bytes) > max(runs["paper"].queue_bytes)


def test_connectx_flows_converge_to_a_busy_port_with_the_queue_below_kmax():
    """Once the first burst's collapse has recovered (a few 300 µs timer steps), ConnectX's
    set keeps the port busy and fair while the queue swings around Kmin, under Kmax."""
    from rocelab.roce.config import roce_config
    from rocelab.roce.sim import incast_fairness

    kmin, kmax = 100_000, 400_000
    r = incast_fairness(4, roce_config({"dcqcn": "connectx"}), ecn=EcnMarking(kmin, kmax, 0.2),
                        warmup_s=5e-3, window_s=2e-3, write_bytes=128 << 20)
    queue = sorted(r.queue_bytes)
    assert r.utilisation >= 0.9 and r.jain >= 0.95
    assert queue[int(0.9 * (len(queue) - 1))] < kmax  # marks hold it under Kmax …
    assert queue[-1] > kmin and r.cnps > 0  # … and it does reach the marking band


def test_paper_flows_once_recovered_settle_around_kmin():
    """DCQCN's fixed point: once the paper's set has climbed back from the first burst's
    collapse (~20 ms at +100 Mb/s per 55 µs), its small steps hold the queue where marks
    just begin, around Kmin, with the port busy (docs/DCQCN.md: ConnectX's coarser 300 µs
    steps cycle through Kmin instead)."""
    from rocelab.roce.config import roce_config
    from rocelab.roce.sim import incast_fairness

    kmin, kmax = 100_000, 400_000
    r = incast_fairness(4, roce_config({"dcqcn": "paper"}), ecn=EcnMarking(kmin, kmax, 0.2),
                        warmup_s=20e-3, window_s=2e-3, write_bytes=512 << 20)
    queue = sorted(r.queue_bytes)
    assert r.utilisation >= 0.99 and r.jain >= 0.95 and r.cnps > 0
    assert kmin / 2 <= queue[len(queue) // 2] <= kmax
