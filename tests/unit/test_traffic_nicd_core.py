"""nicd's loop core without sockets: the cable's delay line, jobs advanced by the loop,
and counters read as deltas after `clear`."""

from __future__ import annotations

import random

import pytest

from rocelab.roce.agent import NicGroup, NicPort, _subtract
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


def test_one_group_serves_several_hosts_each_on_its_own_port():
    """One nicd serving two hosts: frames leave on the port of the NIC that sent them, arrive at
    the NIC whose port they came in on, and the group's next event is the earliest of its NICs'."""
    a, b, _ = port_pair()
    a.port, b.port = "h1/eth1", "h2/eth1"
    group = NicGroup([a, b])
    qa, qb = a.nic.create_qp(), b.nic.create_qp()
    a.nic.connect(qa.qpn, remote_qpn=qb.qpn, remote_ip=b.nic.ip, remote_mac=b.nic.mac, remote_psn=qb.initial_psn)
    b.nic.connect(qb.qpn, remote_qpn=qa.qpn, remote_ip=a.nic.ip, remote_mac=a.nic.mac, remote_psn=qa.initial_psn)
    received = bytearray(2 * 4096)
    b.nic.post_recv(qb.qpn, 7, received)
    a.nic.post_send(qa.qpn, 1, bytes(range(256)) * 32)
    other = {"h1/eth1": "h2/eth1", "h2/eth1": "h1/eth1"}
    now, sent_on, done = 0.0, set(), []
    while len(done) < 2 and now < 1.0:  # the receive's completion, then the send's (its ACK back)
        assert group.next_event(now) == min(t for t in (a.next_event(now), b.next_event(now)) if t is not None)
        now = group.next_event(now)
        for port, frame in group.poll(now):
            sent_on.add(port)
            group.receive(other[port], frame, now)
        done += b.nic.poll_completions() + a.nic.poll_completions()
    assert bytes(received[:8192]) == bytes(range(256)) * 32
    assert sent_on == {"h1/eth1", "h2/eth1"}  # the data on h1's port, the ACK on h2's
