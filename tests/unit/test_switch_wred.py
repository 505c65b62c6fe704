"""WRED / ECN marking on egress queue depth, observed on the frames the switch sends."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from rocelab.qos.model import WredProfile
from test_switch_support import (
    CE, ECT0, ECT1, NOT_ECT, lossless_pg_profile, lossless_profile, make_switch, roce, run,
)

KMIN, KMAX, PMAX_PCT = 200_000, 1_000_000, 50
FILLER_BYTES = 4000
PROBE_BYTES = 64


def wred(wred_green_enable: bool = False) -> WredProfile:
    return WredProfile("AZURE_LOSSLESS", wred_green_enable, "ecn_all", KMIN, KMAX, PMAX_PCT)


def switch_with_queue_at(depth_bytes: int, wred_green_enable: bool = False, seed: int = 1):
    """A switch whose eth2 queue 3 holds depth_bytes and whose PG can take far more, so
    only WRED decides. The filler is non-ECT (never marked), or ECT where non-ECT would
    be dropped on the way up."""
    pg = lossless_pg_profile(static_th_bytes=8_000_000, xoff_bytes=1_000_000)
    switch = make_switch(lossless_profile(pg, wred(wred_green_enable)), seed=seed)
    filler = roce("eth1", "eth2", FILLER_BYTES, ecn=ECT0 if wred_green_enable else NOT_ECT)
    for _ in range(depth_bytes // FILLER_BYTES):
        switch.receive("eth1", filler, 0.0)
    return switch


def probes_out(switch, n: int, ecn: int) -> list[IP]:
    """Send n probes into the standing queue (nothing drains meanwhile), then drain: the
    probes that came out, as scapy IP layers."""
    probe = roce("eth1", "eth2", PROBE_BYTES, ecn=ecn)
    for _ in range(n):
        switch.receive("eth1", probe, 0.0)
    return [Ether(f)[IP] for _t, p, f in run(switch, 0.0, 10.0)
            if p == "eth2" and len(f) == PROBE_BYTES]


def wred_line(depth_bytes: float) -> float:
    """The configured marking probability: 0 below Kmin, linear to Pmax at Kmax, 1 above."""
    if depth_bytes < KMIN:
        return 0.0
    if depth_bytes > KMAX:
        return 1.0
    return (depth_bytes - KMIN) / (KMAX - KMIN) * PMAX_PCT / 100


@pytest.mark.parametrize("step", range(1, 6))
def test_mark_fraction_follows_wred_line(step):
    depth = KMIN + step * (KMAX - KMIN) // 6
    depth -= depth % FILLER_BYTES
    n = 1000
    switch = switch_with_queue_at(depth, seed=step)
    probes = probes_out(switch, n, ECT0)
    assert len(probes) == n
    marked = sum(1 for ip in probes if ip.tos & 3 == CE) / n
    # each probe sees the queue as the probes before it left it
    expected = sum(wred_line(depth + i * PROBE_BYTES) for i in range(n)) / n
    assert marked == pytest.approx(expected, abs=0.05)


def test_no_marks_below_kmin():
    switch = switch_with_queue_at(KMIN - 100 * FILLER_BYTES)
    probes = probes_out(switch, 500, ECT0)
    assert len(probes) == 500 and all(ip.tos & 3 == ECT0 for ip in probes)
    queue = switch.counters(10.0)["ports"]["eth2"]["queues"][3]
    assert queue["ecn_marked_packets"] == 0


@pytest.mark.parametrize("ecn", [ECT0, ECT1])
def test_every_ect_packet_marked_above_kmax(ecn):
    switch = switch_with_queue_at(KMAX + FILLER_BYTES)
    probes = probes_out(switch, 200, ecn)
    assert len(probes) == 200 and all(ip.tos & 3 == CE for ip in probes)
    assert switch.counters(10.0)["ports"]["eth2"]["queues"][3]["ecn_marked_packets"] == 200


@pytest.mark.parametrize("ecn", [ECT0, ECT1])
def test_ce_marking_keeps_a_valid_checksum_and_decrements_ttl(ecn):
    (ip,) = probes_out(switch_with_queue_at(KMAX + FILLER_BYTES), 1, ecn)
    assert ip.tos & 3 == CE and ip.ttl == 63
    stated = ip.chksum
    del ip.chksum  # scapy recomputes it from the header as sent
    assert IP(bytes(ip)).chksum == stated


def test_non_ect_above_kmax_dropped_only_if_wred_green_enable():
    kept = switch_with_queue_at(KMAX + FILLER_BYTES, wred_green_enable=False)
    assert len(probes_out(kept, 100, NOT_ECT)) == 100
    dropping = switch_with_queue_at(KMAX + FILLER_BYTES, wred_green_enable=True)
    assert probes_out(dropping, 100, NOT_ECT) == []
    queue = dropping.counters(10.0)["ports"]["eth2"]["queues"][3]
    assert queue["drops"]["wred_drop"]["packets"] == 100
