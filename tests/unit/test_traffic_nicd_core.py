"""nicd's loop core without sockets: the cable's delay line, jobs advanced by the loop,
and counters read as deltas after `clear`."""

from __future__ import annotations

import random

import pytest

from rocelab.roce.agent import NicPort, _subtract
from rocelab.roce import Nic, NicConfig, dilate
from rocelab.traffic.host import JobHost

RATE_BPS = 100e6
DELAY_S = 15e-6  # a 3 m cable at TDF 1000


def port_pair() -> tuple[NicPort, NicPort, dict]:
    rng = random.Random(3)
    config = dilate(NicConfig(), 1000)
    nics = [Nic(f"02:00:00:00:02:0{n}", f"198.18.2.{n}", RATE_BPS, config, rng=rng) for n in (1, 2)]
    clock = {"now": 0.0}
    ports = [NicPort(nic, "eth1", DELAY_S, JobHost(nic, ip=f"198.18.2.{n}", port_rate_bps=RATE_BPS,
                                                    next_hop_mac=nics[2 - n].mac.hex(":"), clock=lambda: clock["now"]))
             for n, nic in enumerate(nics, start=1)]
    return ports[0], ports[1], clock


def test_frames_leave_delay_s_after_the_nic_releases_them_and_in_order():
    a, b, _ = port_pair()
    qa, qb = a.nic.create_qp(), b.nic.create_qp()
    a.nic.connect(qa.qpn, remote_qpn=qb.qpn, remote_ip=b.nic.ip, remote_mac=b.nic.mac, remote_psn=qb.initial_psn)
    a.nic.post_send(qa.qpn, 1, bytes(3 * 4096))
    assert a.poll(0.0) == []  # released by the NIC at 0, still on the cable
    departures = []
    now = 0.0
    while len(departures) < 3:
        now = a.next_event(now)
        departures += [(now, frame) for port, frame in a.poll(now)]
    first, second, third = departures
    serialization_s = (len(first[1]) + 24) * 8 / RATE_BPS  # the NIC's port pacer, FCS+preamble+gap counted
    assert first[0] == DELAY_S
    assert second[0] - first[0] == pytest.approx(serialization_s) and third[0] - second[0] == pytest.approx(serialization_s)
    assert a.next_event(now) is not None  # the retransmit timer of the unacknowledged SEND


def test_counters_after_clear_are_deltas_leaf_by_leaf():
    before = {"tx": 10, "pfc": {"rx": [1, 2]}, "state": "RTS", "qps": {"17": {"tx": 3}}}
    after = {"tx": 15, "pfc": {"rx": [1, 5]}, "state": "RTS", "qps": {"17": {"tx": 4}, "18": {"tx": 2}}}
    assert _subtract(after, before) == {"tx": 5, "pfc": {"rx": [0, 3]}, "state": "RTS",
                                        "qps": {"17": {"tx": 1}, "18": {"tx": 2}}}
    assert _subtract(after, {}) == after
