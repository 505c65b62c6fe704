"""Counter samples into series: a real switch core through a PFC incast and real NIC cores
under DCQCN, both on a simulated clock, and the Sampler's thread on canned readings."""

from __future__ import annotations

import json
import random
import time

import pytest

from rocelab.runtime.readings import AgentReading
from rocelab.roce import Nic, NicConfig
from rocelab.roce.sim import EcnMarking, FabricSim, connect_qps
from rocelab.engines.state import LabState
from rocelab.runtime.timeseries import POLL_SPACING, Sampler, TimeSeries, build, observe
from test_switch_support import (
    LOSSLESS_TC, RATE_BPS, drive, lossless_profile, make_switch, paced, pfc_from_peer, roce,
)

TDF = 1000
SENDERS = ("eth1", "eth3", "eth4")  # a 3:1 incast into eth2, each at half rate: 1.5× its drain
SEND_RATE_BPS = RATE_BPS / 2
PKT_BYTES = 1000
INCAST_END_S = 0.3
PAUSE_AT_S = 0.2  # the receiver on eth2 pauses the lossless priority for 0xFFFF quanta
PAUSE_S = 0xFFFF * 512 / RATE_BPS
SAMPLE_S = 0.005


def switch_incast(sample_s: float = SAMPLE_S, until_s: float = 0.8) -> tuple[list[float], list[list[AgentReading]]]:
    """A switch core driven through a lossless 3:1 incast, sampled every `sample_s` of
    simulated time: (times, the readings a Sampler would have taken)."""
    switch = make_switch(lossless_profile())
    arrivals = [a for p in SENDERS for a in paced(p, roce(p, "eth2", PKT_BYTES), SEND_RATE_BPS, 0.0, INCAST_END_S)]
    arrivals.append((PAUSE_AT_S, "eth2", pfc_from_peer("eth2", {LOSSLESS_TC: 0xFFFF})))
    times, readings = [0.0], [[AgentReading("leaf1", "switchd", {"counters": switch.counters(0.0)})]]
    t = 0.0
    while t < until_s:
        end = round(t + sample_s, 9)
        drive(switch, [a for a in arrivals if t < a[0] <= end or (t == 0.0 and a[0] == 0.0)], t, end)
        times.append(end)
        readings.append([AgentReading("leaf1", "switchd", {"counters": switch.counters(end)})])
        t = end
    return times, readings


def nic_congestion(sample_s: float = 1e-3, until_s: float = 20e-3) -> tuple[list[float], list[list[AgentReading]]]:
    """Two DCQCN senders into one 10G receiver port that CE-marks: NIC cores sampled every
    `sample_s` of simulated time."""
    rng = random.Random(5)
    nics = [Nic(f"02:00:00:00:00:0{i}", f"198.18.0.{i}", 10e9, NicConfig(), rng=rng) for i in (1, 2, 3)]
    a1, a2, b = nics
    sim = FabricSim(random.Random(6))
    for nic in (a1, a2):
        sim.attach(nic, delay_s=1e-6)
    sim.attach(b, delay_s=1e-6, ecn=EcnMarking(5_000, 200_000, 0.01))
    mr = b.register_mr(bytearray(1 << 20))
    for sender in (a1, a2):
        qpn, _ = connect_qps(sender, b)
        for i in range(32):
            sender.post_write(qpn, i, bytes(1 << 20), remote_va=mr.va, r_key=mr.r_key)
        sim.wake(sender)

    def read() -> list[AgentReading]:
        return [AgentReading(f"h{i}", "nicd", {"counters": nic.counters()}) for i, nic in enumerate(nics, 1)]

    times, readings = [0.0], [read()]
    while times[-1] < until_s:
        t = round(times[-1] + sample_s, 9)
        sim.run(t)
        times.append(t)
        readings.append(read())
    return times, readings


def series_of(times, readings, interval_s: float) -> TimeSeries:
    return build("unit", TDF, interval_s, times, [observe(r) for r in readings])


@pytest.fixture(scope="module")
def incast():
    times, readings = switch_incast()
    return readings[-1][0].reply["counters"], series_of(times, readings, SAMPLE_S)


def test_queue_depth_rises_during_the_incast_and_drains_after(incast):
    _, ts = incast
    (depth,) = ts.of("queue_depth_bytes", node="leaf1", port="eth2", queue=str(LOSSLESS_TC))
    rising = depth.values[:6]
    assert rising == sorted(set(rising))  # strictly rising from empty as the incast starts
    peak = max(depth.values)
    assert peak > 50_000
    assert depth.values[-1] == 0  # drained once the pause expired and the senders stopped
    # While the receiver holds the priority paused, nothing drains: the queue only grows.
    paused = [v for t, v in zip(ts.t_s, depth.values) if PAUSE_AT_S < t < INCAST_END_S]
    assert paused == sorted(paused)


def test_pfc_series_count_every_frame_the_switch_sent_and_received(incast):
    counters, ts = incast
    for port in SENDERS:
        (tx,) = ts.of("pfc_tx_frames", port=port, priority=str(LOSSLESS_TC))
        assert sum(tx.values) == counters["ports"][port]["pfc_tx_frames"][LOSSLESS_TC] >= 2  # XOFF … XON
    assert sum(sum(s.values) for s in ts.of("pfc_tx_frames")) == sum(
        sum(p["pfc_tx_frames"]) for p in counters["ports"].values())
    (rx,) = ts.of("pfc_rx_frames", port="eth2")
    assert sum(rx.values) == 1 and rx.values[_index_after(ts, PAUSE_AT_S)] == 1
    (paused,) = ts.of("paused_fraction", port="eth2", priority=str(LOSSLESS_TC))
    held = [v for t, v in zip(ts.t_s, paused.values) if PAUSE_AT_S + SAMPLE_S < t <= PAUSE_AT_S + PAUSE_S - SAMPLE_S]
    assert held and all(v == pytest.approx(1.0) for v in held)
    assert sum(v * SAMPLE_S for v in paused.values) == pytest.approx(PAUSE_S, rel=1e-6)
    (xoff,) = ts.of("pg_xoff", port="eth1", pg=str(LOSSLESS_TC))
    assert max(xoff.values) == 1 and xoff.values[-1] == 0


def _index_after(ts: TimeSeries, t_s: float) -> int:
    return next(i for i, t in enumerate(ts.t_s) if t >= t_s)


def test_drops_are_series_by_place_and_reason(incast):
    counters, ts = incast
    for port in SENDERS:
        (drops,) = ts.of("drops", port=port, where=f"pg{LOSSLESS_TC}", reason="headroom_exceeded")
        assert sum(drops.values) == counters["ports"][port]["pgs"][LOSSLESS_TC]["drops"]["headroom_exceeded"]["packets"]


def test_flow_rates_and_cnps_from_nic_cores():
    times, readings = nic_congestion()
    ts = series_of(times, readings, 1e-3)
    last = {r.node: r.reply["counters"] for r in readings[-1]}
    for node in ("h1", "h2"):
        (qpn,) = last[node]["qps"]
        (rate,) = ts.of("qp_rate_bps", node=node, qpn=qpn)
        assert rate.values[0] == 10e9 and min(rate.values) < 8e9  # DCQCN cut the rate
        (cnps,) = ts.of("cnps_received", node=node, qpn=qpn)
        assert sum(cnps.values) == last[node]["qps"][qpn]["cnps_received"] > 0
        (sent,) = ts.of("qp_tx_bps", node=node, qpn=qpn)
        assert sum(v * 1e-3 for v in sent.values) == pytest.approx(last[node]["qps"][qpn]["tx_bytes"] * 8)
    # Two senders share one 10G port: together they never send above its rate.
    together = [sum(s.values[i] for s in ts.of("qp_tx_bps")) for i in range(len(ts.t_s))]
    assert 0 < max(together) <= 10e9 * 1.01


def test_a_counter_that_restarts_counts_from_zero_and_rates_use_the_interval():
    key = ("pfc_tx_frames", (("node", "leaf1"), ("port", "eth1"), ("priority", "3")))
    rate = ("qp_tx_bps", (("node", "h1"), ("qpn", "17")))
    ts = build("unit", TDF, 0.5, [0.0, 0.5, 1.0, 2.0],
               [{key: 5, rate: 0}, {key: 7, rate: 1000}, {key: 2}, {key: 4, rate: 500}])
    assert ts.of("pfc_tx_frames")[0].values == [0, 2, 2, 2]
    assert ts.of("qp_tx_bps")[0].values == [0, 16_000, 0, 4000]
    assert ts.t_production_s == [0.0, 0.0005, 0.001, 0.002]


def test_a_time_series_is_plain_json_both_ways(incast):
    _, ts = incast
    doc = json.loads(json.dumps(ts.to_json()))
    assert doc["t_production_s"][1] == pytest.approx(doc["t_s"][1] / TDF)
    assert TimeSeries.from_json(doc) == ts


def _lab() -> LabState:
    return LabState("unit", "netns", "topologies/incast-1x5.yml", "switchd", TDF, "up")


def test_the_sampler_polls_in_the_background_and_halves_resolution_at_its_cap():
    _, readings = switch_incast(sample_s=0.05)
    feed = iter(readings * 100)
    sampler = Sampler(_lab(), interval_s=0.002, max_samples=16, read=lambda: next(feed)).start()
    time.sleep(0.3)
    ts = sampler.stop()
    assert 8 <= len(ts.t_s) <= 16
    assert ts.interval_s > 0.002  # halved at least once
    assert ts.t_s == sorted(ts.t_s) and ts.t_s[0] >= 0
    assert sampler.stop() is ts


def test_an_agent_that_misses_a_poll_is_counted_and_its_last_values_carried():
    _, readings = switch_incast(sample_s=0.1)
    silent = [AgentReading("leaf1", "switchd", None, "did not answer")]
    feed = iter([readings[3], silent, readings[5]] + [readings[5]] * 1000)
    with Sampler(_lab(), interval_s=0.01, read=lambda: next(feed)) as sampler:
        time.sleep(0.05)
    ts = sampler.series
    assert ts.missed_polls == {"leaf1": 1}
    (tx,) = ts.of("pfc_tx_frames", port="eth1", priority=str(LOSSLESS_TC))
    assert tx.values[1] == 0  # the missed poll repeats the last values: no made-up frames


def test_a_sampler_thread_failure_surfaces_in_stop():
    def broken():
        raise ValueError("bad counters")

    sampler = Sampler(_lab(), interval_s=0.01, read=broken).start()
    with pytest.raises(RuntimeError, match="bad counters"):
        sampler.stop()


def test_a_slow_poll_spaces_the_next_ones_so_sampling_costs_a_bounded_share():
    """A poll that takes 10 ms is followed by one POLL_SPACING × 10 ms later, not interval_s: what
    the sampler asks of the agents stays a bounded share of their time as a lab grows. The
    series says the spacing its points have."""
    _, readings = switch_incast(sample_s=0.05)
    feed = iter(readings * 100)

    def slow():
        time.sleep(0.01)
        return next(feed)

    sampler = Sampler(_lab(), interval_s=0.002, read=slow).start()
    time.sleep(0.5)
    ts = sampler.stop()
    gaps = [b - a for a, b in zip(ts.t_s, ts.t_s[1:])]
    assert min(gaps[:-1]) >= POLL_SPACING * 0.01 * 0.9  # the last poll closes the span at stop()
    assert len(ts.t_s) <= 0.5 / (POLL_SPACING * 0.01) + 2
    assert ts.interval_s >= POLL_SPACING * 0.01 * 0.9
