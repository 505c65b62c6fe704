"""Egress scheduling, line-rate shaping and link impairments, measured on what leaves."""

from __future__ import annotations

import pytest
from scapy.layers.l2 import Ether

from rocelab.qos.model import BufferProfile, QueueQos, Scheduler
from rocelab.registry import UnknownName
from test_switch_support import (
    RATE_BPS, drive, every_port, make_switch, paced, port_specs, qos_profile, roce,
    scheduled_profile, with_port,
)

SECOND = 1.0
TOS_OFFSET = 14 + 1


def bytes_by_dscp(sent, port: str, since_s: float = 0.0) -> dict[int, int]:
    out: dict[int, int] = {}
    for t, p, frame in sent:
        if p == port and t >= since_s:
            dscp = frame[TOS_OFFSET] >> 2  # too many frames to dissect each with scapy
            out[dscp] = out.get(dscp, 0) + len(frame)
    return out


def two_classes_into_eth3(switch, sizes=(1500, 500), until_s=SECOND):
    """DSCP 0 from eth1 and DSCP 1 from eth2, each offered at line rate into eth3: eth3
    is oversubscribed twice, both its queues stay backlogged."""
    arrivals = (paced("eth1", roce("eth1", "eth3", sizes[0], dscp=0), RATE_BPS, 0.0, until_s)
                + paced("eth2", roce("eth2", "eth3", sizes[1], dscp=1), RATE_BPS, 0.0, until_s))
    return drive(switch, arrivals, 0.0, until_s)


@pytest.mark.parametrize("weights", [(1, 3), (50, 50), (10, 40)])
def test_dwrr_shares_bandwidth_by_weight(weights):
    switch = make_switch(scheduled_profile({
        0: Scheduler("scheduler.0", "DWRR", weights[0]),
        1: Scheduler("scheduler.1", "DWRR", weights[1]),
    }))
    # Warm-up of 0.1 s for both queues to build up, then measure.
    by_dscp = bytes_by_dscp(two_classes_into_eth3(switch), "eth3", since_s=0.1)
    total = by_dscp[0] + by_dscp[1]
    for q in (0, 1):
        share = weights[q] / sum(weights)
        assert by_dscp[q] / total == pytest.approx(share, rel=0.05)


def test_strict_priority_starves_lower_queues():
    switch = make_switch(scheduled_profile({
        0: Scheduler("scheduler.0", "DWRR", 100),
        1: Scheduler("scheduler.strict", "STRICT"),
    }))
    by_dscp = bytes_by_dscp(two_classes_into_eth3(switch), "eth3", since_s=0.01)
    assert by_dscp.get(0, 0) == 0
    assert by_dscp[1] * 8 == pytest.approx(RATE_BPS * (SECOND - 0.01), rel=0.01)


def test_higher_strict_queue_goes_first():
    switch = make_switch(scheduled_profile({
        0: Scheduler("scheduler.strict", "STRICT"),
        1: Scheduler("scheduler.strict", "STRICT"),
    }))
    by_dscp = bytes_by_dscp(two_classes_into_eth3(switch), "eth3", since_s=0.01)
    assert by_dscp.get(0, 0) == 0 and by_dscp[1] > 0


def test_unknown_scheduler_type_names_the_valid_ones():
    with pytest.raises(UnknownName, match="DWRR, STRICT, WRR"):
        make_switch(scheduled_profile({0: Scheduler("scheduler.0", "PRIORITY", 1)}))


def test_port_is_shaped_to_its_rate():
    # 150% of line rate offered: eth2 sends exactly as fast as its rate allows.
    frame = roce("eth1", "eth2", 1500, dscp=0)
    arrivals = paced("eth1", frame, RATE_BPS * 1.5, 0.0, 2 * SECOND)
    sent = drive(make_switch(qos_profile({})), arrivals, 0.0, 2 * SECOND)
    in_second = sum(len(f) for t, p, f in sent if p == "eth2" and SECOND <= t < 2 * SECOND)
    assert in_second * 8 == pytest.approx(RATE_BPS, rel=0.01)
    # back-to-back frames are one serialization time apart
    times = [t for t, p, _f in sent if p == "eth2"][:100]
    gaps = {round(b - a, 9) for a, b in zip(times, times[1:])}
    assert gaps == {round(len(frame) * 8 / RATE_BPS, 9)}


def test_lossy_queue_tail_drops_at_its_limit_and_never_sends_pfc():
    limit = BufferProfile("egress_lossy_profile", "", size_bytes=0, static_th_bytes=10_000)
    profile = qos_profile(every_port(queues={0: QueueQos(buffer=limit)}))
    switch = make_switch(profile)
    frame = roce("eth1", "eth2", 1000, dscp=0)
    for _ in range(25):
        switch.receive("eth1", frame, 0.0)
    counters = switch.counters(0.0)["ports"]
    assert counters["eth2"]["queues"][0]["drops"]["tail_drop"]["packets"] == \
        25 - limit.static_th_bytes // len(frame)
    arrivals = paced("eth1", frame, RATE_BPS * 3, 0.0, 0.5)
    sent = drive(switch, arrivals, 0.0, 1.0)
    assert not [f for _t, _p, f in sent if f[12:14] == b"\x88\x08"]  # no MAC Control
    counters = switch.counters(1.0)["ports"]
    assert counters["eth1"]["pfc_tx_frames"] == [0] * 8
    assert counters["eth2"]["queues"][0]["drops"]["tail_drop"]["packets"] > 25


def test_link_delay_and_jitter_keep_frames_in_order():
    specs = with_port(port_specs(), "eth2", delay_s=0.005, jitter_s=0.002)
    switch = make_switch(qos_profile({}), specs)
    frames = [roce("eth1", "eth2", 200, dscp=0, sport=1000 + i) for i in range(200)]
    arrivals = [(i * 0.001, "eth1", f) for i, f in enumerate(frames)]
    sent = [(t, f) for t, p, f in drive(switch, arrivals, 0.0, 2.0) if p == "eth2"]
    sports = [Ether(f).sport for _t, f in sent]
    assert sports == sorted(sports) and len(sent) == len(frames)  # a cable never reorders
    delays = [t - i * 0.001 for i, (t, _f) in enumerate(sent)]
    assert min(delays) >= 0.005 - 0.002 - 1e-9 and max(delays) <= 0.005 + 0.002 + 1e-9
    assert max(delays) - min(delays) > 0.002  # the jitter shows


def test_link_loss_is_random_and_counted():
    specs = with_port(port_specs(), "eth2", loss_pct=10.0)
    switch = make_switch(qos_profile({}), specs)
    n = 4000
    arrivals = paced("eth1", roce("eth1", "eth2", 200, dscp=0), RATE_BPS / 2, 0.0,
                     n * 200 * 8 / (RATE_BPS / 2))
    sent = [f for _t, p, f in drive(switch, arrivals, 0.0, 5.0) if p == "eth2"]
    lost = switch.counters(5.0)["ports"]["eth2"]["drops"]["impairment_loss"]["packets"]
    assert len(sent) + lost == len(arrivals)
    assert lost / len(arrivals) == pytest.approx(0.10, abs=0.02)



def test_impairment_set_at_run_time_delays_then_loses_frames():
    switch = make_switch(qos_profile({}))
    switch.set_impairment("eth2", delay_s=0.010, jitter_s=0.0, loss_pct=0.0)
    switch.receive("eth1", roce("eth1", "eth2", 100), 0.0)
    assert switch.poll(0.0) == []  # on the cable for 10 ms
    assert switch.poll(0.005) == []
    assert [port for port, _ in switch.poll(0.0101)] == ["eth2"]
    switch.set_impairment("eth2", delay_s=0.0, jitter_s=0.0, loss_pct=100.0)
    switch.receive("eth1", roce("eth1", "eth2", 100), 1.0)
    assert switch.poll(1.1) == []
    assert switch.counters(1.1)["ports"]["eth2"]["drops"]["impairment_loss"]["packets"] == 1
    with pytest.raises(ValueError):
        switch.set_impairment("eth2", delay_s=-1, jitter_s=0.0, loss_pct=0.0)
