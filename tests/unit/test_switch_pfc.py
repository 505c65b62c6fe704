"""PFC in the switch core: the threshold probe sonic-mgmt runs against a real switch,
honouring a peer's pause, keeping our own pause alive, and the PFC watchdog."""

from __future__ import annotations

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from rocelab.qos.model import PfcWatchdog
from rocelab.switch.pipeline import PAUSE_REACH_BYTES
from test_switch_support import (
    LOSSLESS_TC, RATE_BPS, drive, ingress_pool, lossless_pg_profile,
    lossless_profile, make_switch, pfc_from_peer, port_specs, roce, run,
)

PKT_BYTES = 1000
QUANTUM_S = 512 / RATE_BPS  # one pause quantum at this port speed


def pfc_sent(sent: list[tuple[float, str, bytes]]) -> list[tuple[float, str, dict[int, int]]]:
    """The PFC frames among `sent`, decoded by scapy: (time, port, {priority: quanta})."""
    out = []
    for t, port, frame in sent:
        pkt = Ether(frame)
        if MACControlClassBasedFlowControl in pkt:
            assert pkt.dst == "01:80:c2:00:00:01"
            pfc = pkt[MACControlClassBasedFlowControl]
            out.append((t, port, {p: getattr(pfc, f"c{p}_pause_time") for p in range(8)
                                  if getattr(pfc, f"c{p}_enabled")}))
    return out


def data_sent(sent, port: str) -> list[tuple[float, bytes]]:
    return [(t, f) for t, p, f in sent if p == port and Ether(f).type == 0x0800]


def pg_counters(switch, port: str, pg: int = LOSSLESS_TC, now: float = 0.0) -> dict:
    return switch.counters(now)["ports"][port]["pgs"][pg]


def hold_egress(switch, port: str, now: float) -> None:
    """The peer on `port` pauses the lossless priority, so nothing drains (sonic-mgmt
    disables the egress port's transmitter instead)."""
    switch.receive(port, pfc_from_peer(port, {LOSSLESS_TC: 0xFFFF}), now)


def send(switch, n: int, now: float, src: str = "eth1", dst: str = "eth2") -> None:
    frame = roce(src, dst, PKT_BYTES)
    for _ in range(n):
        switch.receive(src, frame, now)


@pytest.mark.parametrize("xon_offset_bytes, xon_bytes", [
    (10_000, 8_000),  # resume point set by the offset below the trigger
    (35_000, 8_000),  # resume point set by xon
])
def test_sonic_mgmt_pfc_threshold_probe(xon_offset_bytes, xon_bytes):
    pg = lossless_pg_profile(size_bytes=2_000, static_th_bytes=40_000, xoff_bytes=20_000,
                             xon_bytes=xon_bytes, xon_offset_bytes=xon_offset_bytes)
    switch = make_switch(lossless_profile(pg))
    # What sonic-mgmt computes from the buffer profile: the packet that does not fit under
    # reserved + threshold triggers PFC and lands in headroom, which holds xoff bytes.
    pkts_short_of_trigger = (pg.size_bytes + pg.static_th_bytes) // PKT_BYTES
    pkts_in_headroom = pg.xoff_bytes // PKT_BYTES
    hold_egress(switch, "eth2", 0.0)

    send(switch, pkts_short_of_trigger, 0.0)
    assert pfc_sent(run(switch, 0.0, 0.0)) == []
    assert pg_counters(switch, "eth1")["drops"] == {}

    send(switch, 1, 0.0)
    (_t, port, quanta), = pfc_sent(run(switch, 0.0, 0.0))
    assert port == "eth1" and list(quanta) == [LOSSLESS_TC] and quanta[LOSSLESS_TC] > 0

    send(switch, pkts_in_headroom - 1, 0.0)
    assert pg_counters(switch, "eth1")["drops"] == {}
    send(switch, 1, 0.0)
    counters = pg_counters(switch, "eth1")
    assert counters["drops"]["headroom_exceeded"]["packets"] == 1
    assert counters["headroom_watermark_bytes"] == pg.xoff_bytes

    # Release the egress: XON follows once headroom has drained and shared use has
    # fallen to max(threshold − xon_offset, xon).
    switch.receive("eth2", pfc_from_peer("eth2", {LOSSLESS_TC: 0}), 0.001)
    sent = run(switch, 0.001, 1.0)
    xon_at = next(i for i, (_t, p, f) in enumerate(sent)
                  if p == "eth1" and pfc_sent([(_t, p, f)])[0][2] == {LOSSLESS_TC: 0})
    drained_before_xon = sum(1 for _t, p, _f in sent[:xon_at] if p == "eth2")
    resume_bytes = max(pg.static_th_bytes - xon_offset_bytes, xon_bytes)
    assert drained_before_xon == pkts_in_headroom + (pg.static_th_bytes - resume_bytes) // PKT_BYTES
    assert len(data_sent(sent, "eth2")) == pkts_short_of_trigger + pkts_in_headroom


def test_dynamic_threshold_follows_free_pool():
    pool = ingress_pool(size_bytes=100_000)
    pg = lossless_pg_profile(size_bytes=0, static_th_bytes=None, dynamic_th=0)
    switch = make_switch(lossless_profile(pg, pools=pool))
    hold_egress(switch, "eth2", 0.0)
    # A packet fits while shared + size ≤ 2^dynamic_th × (pool size − pool shared use).
    alpha = 2 ** pg.dynamic_th
    fitting = 0
    while (fitting + 1) * PKT_BYTES <= alpha * (100_000 - fitting * PKT_BYTES):
        fitting += 1
    send(switch, fitting, 0.0)
    assert pfc_sent(run(switch, 0.0, 0.0)) == []
    send(switch, 1, 0.0)
    assert [q for _t, _p, q in pfc_sent(run(switch, 0.0, 0.0))] == [{LOSSLESS_TC: 0xFFFF}]


def test_shared_headroom_pool_bounds_headroom():
    pool = ingress_pool(xoff_bytes=15_000)
    pg = lossless_pg_profile(size_bytes=0)
    switch = make_switch(lossless_profile(pg, pools=pool))
    hold_egress(switch, "eth2", 0.0)
    send(switch, pg.static_th_bytes // PKT_BYTES, 0.0)
    shared_headroom = pool["ingress_lossless_pool"].xoff_bytes
    assert shared_headroom < pg.xoff_bytes
    send(switch, shared_headroom // PKT_BYTES, 0.0)
    assert pg_counters(switch, "eth1")["drops"] == {}
    send(switch, 1, 0.0)
    assert pg_counters(switch, "eth1")["drops"]["headroom_exceeded"]["packets"] == 1


def test_received_pause_holds_queue_for_its_quanta():
    switch = make_switch(lossless_profile())
    quanta = 2_000
    switch.receive("eth2", pfc_from_peer("eth2", {LOSSLESS_TC: quanta}), 0.0)
    send(switch, 1, 0.0)
    (t, _frame), = data_sent(run(switch, 0.0, 1.0), "eth2")
    assert t == pytest.approx(quanta * QUANTUM_S)
    paused = switch.counters(1.0)["ports"]["eth2"]["paused_time_s"]
    assert paused[LOSSLESS_TC] == pytest.approx(quanta * QUANTUM_S)
    assert switch.counters(1.0)["ports"]["eth2"]["pfc_rx_frames"][LOSSLESS_TC] == 1


def test_xon_releases_pause_early():
    switch = make_switch(lossless_profile())
    switch.receive("eth2", pfc_from_peer("eth2", {LOSSLESS_TC: 0xFFFF}), 0.0)
    send(switch, 1, 0.0)
    sent = drive(switch, [(0.002, "eth2", pfc_from_peer("eth2", {LOSSLESS_TC: 0}))], 0.0, 1.0)
    (t, _frame), = data_sent(sent, "eth2")
    assert t == pytest.approx(0.002)
    assert switch.counters(1.0)["ports"]["eth2"]["paused_time_s"][LOSSLESS_TC] == \
        pytest.approx(0.002)


def test_pause_for_priority_without_pfc_is_not_honoured():
    switch = make_switch(lossless_profile())
    switch.receive("eth2", pfc_from_peer("eth2", {0: 0xFFFF}), 0.0)
    send(switch, 1, 0.0, src="eth1", dst="eth2")
    switch.receive("eth1", roce("eth1", "eth2", PKT_BYTES, dscp=0), 0.0)
    assert len(data_sent(run(switch, 0.0, 0.01), "eth2")) == 2
    assert switch.counters(0.01)["ports"]["eth2"]["pfc_rx_frames"][0] == 1


def test_xoff_is_refreshed_before_the_peer_pause_expires():
    pg = lossless_pg_profile()
    switch = make_switch(lossless_profile(pg))
    send(switch, (pg.static_th_bytes + pg.size_bytes) // PKT_BYTES + 1, 0.0)
    # The egress peer keeps pausing us, so our PG stays above its trigger for 2 s.
    storm = [(i * 0.1, "eth2", pfc_from_peer("eth2", {LOSSLESS_TC: 0xFFFF}))
             for i in range(20)]
    xoffs = [t for t, p, q in pfc_sent(drive(switch, storm, 0.0, 2.0))
             if p == "eth1" and q == {LOSSLESS_TC: 0xFFFF}]
    peer_pause_s = 0xFFFF * QUANTUM_S
    assert xoffs[0] == 0.0 and xoffs[-1] > 2.0 - peer_pause_s
    assert max(b - a for a, b in zip(xoffs, xoffs[1:])) < peer_pause_s


@pytest.mark.parametrize("action", ["drop", "forward"])
def test_pfc_watchdog_detects_storm_and_restores(action):
    wd = PfcWatchdog(action=action, detection_time_ms=200, restoration_time_ms=200)
    switch = make_switch(lossless_profile(pfc_wd=wd))
    storm_until_s = 0.5
    storm = [(i * 0.05, "eth2", pfc_from_peer("eth2", {LOSSLESS_TC: 0xFFFF}))
             for i in range(int(storm_until_s / 0.05))]
    traffic = [(0.01 + i * 0.02, "eth1", roce("eth1", "eth2", PKT_BYTES)) for i in range(50)]
    sent = drive(switch, storm + traffic, 0.0, 2.0)
    out = [t for t, _f in data_sent(sent, "eth2")]
    queue = switch.counters(2.0)["ports"]["eth2"]["queues"][LOSSLESS_TC]
    assert queue["pfcwd"] == {"stormed": False, "storms_detected": 1, "storms_restored": 1}
    assert not [t for t in out if t < wd.detection_time_ms / 1000]  # paused until detection
    last_pause_s = storm[-1][0]
    restored_s = last_pause_s + wd.restoration_time_ms / 1000
    if action == "drop":
        dropped = queue["drops"]["pfcwd_drop"]["packets"]
        assert dropped > 0
        assert not [t for t in out if t < restored_s]
        assert len(out) + dropped == len(traffic)
    else:
        assert "pfcwd_drop" not in queue["drops"]
        assert [t for t in out if 0.2 <= t < last_pause_s]  # forwarded despite the pauses
        assert len(out) == len(traffic)
    assert [t for t in out if t > restored_s]  # traffic flows after restoration


def test_a_frame_owed_to_a_late_xoff_is_held_past_the_headroom_and_only_such_a_frame():
    """switchd read the frames late (its loop stalled): the XOFF was due when the frame that
    filled the PG past its threshold arrived, and left only when switchd read it. A frame the
    peer sent after a timely XOFF would have reached it, and before the late one could, is held
    past the full headroom; one that was in flight anyway, or sent after the late XOFF had time
    to arrive (a peer ignoring the pause), is dropped as before."""
    pg = lossless_pg_profile(size_bytes=2_000, static_th_bytes=40_000, xoff_bytes=20_000)
    delay_s, jitter_s = 50e-6, 20e-6
    switch = make_switch(lossless_profile(pg), specs=port_specs(delay_s=delay_s, jitter_s=jitter_s))
    hold_egress(switch, "eth2", 0.0)
    frame = roce("eth1", "eth2", PKT_BYTES)
    size = len(frame)
    reach_s = 2 * (delay_s + jitter_s) + PAUSE_REACH_BYTES * 8 / RATE_BPS
    hair_s = 1e-6
    late_s = 0.010  # the stall: everything below is read at this time
    while not pg_counters(switch, "eth1", now=late_s)["xoff"]:  # arrived at 0: XOFF due at 0, left at late_s
        switch.receive("eth1", frame, late_s, 0.0)
    while pg_counters(switch, "eth1", now=late_s)["headroom_bytes"] + size <= pg.xoff_bytes:
        switch.receive("eth1", frame, late_s, reach_s / 2)  # in flight when a timely XOFF left
    assert pg_counters(switch, "eth1", now=late_s)["drops"] == {}

    for arrival_s, held, dropped in [(reach_s / 2, 0, 1),  # in flight anyway: the headroom was too small
                                     (reach_s - hair_s, 0, 2),  # still in flight when a timely XOFF arrived
                                     (reach_s + hair_s, 1, 2),  # sent after: owed to the stall, held
                                     (late_s + reach_s / 2, 2, 2),  # the late XOFF could not reach the peer yet
                                     (late_s + reach_s - hair_s, 3, 2),
                                     (late_s + reach_s + hair_s, 3, 3)]:  # it could: the peer ignores the pause
        switch.receive("eth1", frame, late_s + reach_s * 2, arrival_s)
        counters = pg_counters(switch, "eth1", now=late_s)
        assert (counters["held_packets"], counters["drops"]["headroom_exceeded"]["packets"]) == (held, dropped), \
            arrival_s
    assert counters["held_bytes"] == 3 * size
    assert counters["headroom_bytes"] > pg.xoff_bytes  # held past it,
    assert counters["headroom_watermark_bytes"] <= pg.xoff_bytes  # which the watermark leaves out

    # Counters cleared while held bytes are still in the headroom: the new watermark leaves them out.
    switch.clear_counters(late_s)
    assert pg_counters(switch, "eth1", now=late_s)["headroom_watermark_bytes"] == pg.xoff_bytes
    # The held frames leave with the rest once the egress resumes, and their bytes come back.
    switch.receive("eth2", pfc_from_peer("eth2", {LOSSLESS_TC: 0}), 0.1)
    sent = data_sent(run(switch, 0.1, 2.0), "eth2")
    drained = pg_counters(switch, "eth1", now=2.0)
    assert len(sent) == counters["rx_packets"] and drained["headroom_bytes"] == drained["shared_bytes"] == 0


def test_with_its_xoff_on_time_a_pg_holds_nothing_past_its_headroom():
    """Read as they arrive (no stall), every frame past the headroom is dropped, however late
    it comes: what a peer that ignores the pause costs."""
    pg = lossless_pg_profile(size_bytes=2_000, static_th_bytes=40_000, xoff_bytes=20_000)
    switch = make_switch(lossless_profile(pg))
    hold_egress(switch, "eth2", 0.0)
    frame = roce("eth1", "eth2", PKT_BYTES)
    for i in range(200):
        switch.receive("eth1", frame, i * 1e-4, i * 1e-4)
    counters = pg_counters(switch, "eth1", now=0.02)
    assert counters["held_packets"] == 0 and counters["drops"]["headroom_exceeded"]["packets"] > 100


def test_frames_held_past_a_pgs_headroom_leave_the_pools_shared_headroom_to_the_other_pgs():
    """eth1's switch read late holds 5 frames past its PG's headroom; eth3's PG, read on time,
    still gets all of the pool's shared headroom that eth1's own traffic left it."""
    pool = ingress_pool(xoff_bytes=30_000)
    pg = lossless_pg_profile(size_bytes=0, static_th_bytes=20_000, xoff_bytes=20_000)
    switch = make_switch(lossless_profile(pg, pools=pool))
    hold_egress(switch, "eth2", 0.0)
    late = roce("eth1", "eth2", PKT_BYTES)
    while pg_counters(switch, "eth1")["headroom_bytes"] + PKT_BYTES <= pg.xoff_bytes:  # due at 0, left at 1 s
        switch.receive("eth1", late, 1.0, 0.0)
    for _ in range(5):
        switch.receive("eth1", late, 1.0, 0.5)  # sent long after a timely XOFF reached the peer
    assert pg_counters(switch, "eth1")["held_packets"] == 5
    on_time = roce("eth3", "eth2", PKT_BYTES)
    for _ in range((pg.static_th_bytes + 10_000) // PKT_BYTES):  # 10 kB into headroom: the pool's 30 kB has them
        switch.receive("eth3", on_time, 1.0)
    eth3 = pg_counters(switch, "eth3")
    assert eth3["drops"] == {} and eth3["headroom_bytes"] == 10_000
    switch.receive("eth3", on_time, 1.0)  # the pool's shared headroom is full now
    assert pg_counters(switch, "eth3")["drops"]["headroom_exceeded"]["packets"] == 1


def test_each_run_of_a_switch_test_builds_the_pipeline_it_is_named_for(request):
    """tests/unit/conftest.py runs every test of a switch module once per pipeline, without the
    test asking for it: the [c] run must build the C one (under pytest 9 it silently built the
    Python one until the conftest asked for the fixture by name)."""
    assert make_switch(lossless_profile()).implementation == request.node.callspec.params["switch_implementation"]
