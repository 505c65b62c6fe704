"""Routing in the switch core: LPM, ECMP, MAC and TTL rewrite, counted refusals."""

from __future__ import annotations

import collections

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from rocelab.kernel.loop import ROUND_BYTES, ROUND_FRAMES
from rocelab.switch import Fib, NextHop
from test_switch_support import (
    PORTS, RATE_BPS, fib, host_ip, host_mac, make_switch, qos_profile, roce, run, switch_mac,
)

SPINE_MACS = {"eth2": "02:00:00:00:02:02", "eth3": "02:00:00:00:02:03",
              "eth4": "02:00:00:00:02:04"}
REMOTE = "198.18.100.7"  # behind three spines


def ecmp_fib() -> Fib:
    routes = dict(fib().routes)
    routes["198.18.100.0/24"] = [NextHop(p, mac) for p, mac in SPINE_MACS.items()]
    return Fib(routes, fib().local)


def to_remote(sport: int, ttl: int = 64) -> bytes:
    return bytes(Ether(src=host_mac("eth1"), dst=switch_mac("eth1"))
                 / IP(src=host_ip("eth1"), dst=REMOTE, tos=26 << 2 | 2, ttl=ttl)
                 / UDP(sport=sport, dport=4791) / bytes(100))


def forwarded(switch, frames, src: str = "eth1") -> list[tuple[str, Ether]]:
    for frame in frames:
        switch.receive(src, frame, 0.0)
    return [(p, Ether(f)) for _t, p, f in run(switch, 0.0, 10.0)]


def port_drops(switch, port: str = "eth1") -> dict[str, int]:
    drops = switch.counters(0.0)["ports"][port]["drops"]
    return {reason: d["packets"] for reason, d in drops.items()}


def test_forwarded_frame_has_new_macs_lower_ttl_and_valid_checksum():
    ((port, pkt),) = forwarded(make_switch(qos_profile({})), [roce("eth1", "eth3", ttl=7)])
    assert port == "eth3"
    assert pkt.src == switch_mac("eth3") and pkt.dst == host_mac("eth3")
    assert pkt[IP].ttl == 6
    stated = pkt[IP].chksum
    del pkt[IP].chksum  # scapy recomputes it from the header as sent
    assert IP(bytes(pkt[IP])).chksum == stated
    assert bytes(pkt[UDP].payload) == bytes(Ether(roce("eth1", "eth3", ttl=7))[UDP].payload)


def test_longest_prefix_wins():
    routes = dict(fib().routes)
    routes["198.18.0.0/16"] = [NextHop("eth4", host_mac("eth4"))]
    routes["198.18.3.2/32"] = [NextHop("eth2", host_mac("eth2"))]
    switch = make_switch(qos_profile({}), routes=Fib(routes))
    frames = [roce("eth1", "eth3"),  # /32 beats /24
              roce("eth1", "eth2"),  # /24 beats /16
              bytes(Ether(src=host_mac("eth1"), dst=switch_mac("eth1"))  # only the /16
                    / IP(src=host_ip("eth1"), dst="198.18.77.1") / UDP())]
    assert [[p for p, _pkt in forwarded(switch, [f])] for f in frames] == \
        [["eth2"], ["eth2"], ["eth4"]]


def test_ecmp_spreads_flows_over_every_next_hop_by_udp_source_port():
    switch = make_switch(qos_profile({}), routes=ecmp_fib())
    out = forwarded(switch, [to_remote(49152 + i) for i in range(300)])
    by_port = collections.Counter(p for p, _pkt in out)
    assert set(by_port) == set(SPINE_MACS)
    assert min(by_port.values()) > 300 / len(SPINE_MACS) / 2  # roughly even
    assert all(pkt.dst == SPINE_MACS[p] for p, pkt in out)


def test_one_flow_always_takes_one_path():
    switch = make_switch(qos_profile({}), routes=ecmp_fib())
    for sport in (49152, 50000, 61234):
        assert len({p for p, _pkt in forwarded(switch, [to_remote(sport)] * 20)}) == 1


def test_fib_replaced_at_runtime():
    switch = make_switch(qos_profile({}))
    assert [p for p, _ in forwarded(switch, [roce("eth1", "eth2")])] == ["eth2"]
    routes = dict(fib().routes)
    routes["198.18.2.0/24"] = [NextHop("eth4", "02:00:00:00:02:04")]
    switch.set_fib(Fib(routes))
    assert [p for p, _ in forwarded(switch, [roce("eth1", "eth2")])] == ["eth4"]


def test_fib_naming_a_missing_port_is_refused():
    with pytest.raises(ValueError, match="eth9"):
        make_switch(qos_profile({}),
                    routes=Fib({"10.0.0.0/8": [NextHop("eth9", "02:00:00:00:00:09")]}))


@pytest.mark.parametrize("frame, reason", [
    (to_remote(1), "no_route"),
    (roce("eth1", "eth2", ttl=1), "ttl_expired"),
    (bytes(Ether(src=host_mac("eth1"), dst=switch_mac("eth1"))
           / IP(src=host_ip("eth1"), dst="198.18.2.1") / UDP()), "to_self"),
    (roce("eth1", "eth2", dst_mac="02:aa:00:00:00:01"), "not_for_us"),
])
def test_refused_packets_are_counted_with_their_reason(frame, reason):
    switch = make_switch(qos_profile({}))
    assert forwarded(switch, [frame]) == []
    assert port_drops(switch) == {reason: 1}


def test_vlan_tagged_frame_is_routed_untagged():
    inner = Ether(roce("eth1", "eth2", ecn=0))
    tagged = bytes(Ether(src=inner.src, dst=inner.dst) / Dot1Q(vlan=0, prio=3) / inner[IP])
    ((port, pkt),) = forwarded(make_switch(qos_profile({})), [tagged])
    assert port == "eth2" and Dot1Q not in pkt and pkt[IP].ttl == 63
    assert pkt.type == 0x0800 and bytes(pkt[UDP]) == bytes(inner[UDP])


def test_every_port_forwards():
    switch = make_switch(qos_profile({}))
    frames = [(src, roce(src, dst)) for src in PORTS for dst in PORTS if src != dst]
    for src, frame in frames:
        switch.receive(src, frame, 0.0)
    out = run(switch, 0.0, 1.0)
    assert len(out) == len(frames)
    assert switch.counters(1.0)["drops"] == {}


def rounds_forwarded(switch, frame: bytes, per_round: int, rounds: int, round_s: float) -> int:
    """Drive the switch as the agents' loop does behind a flood: each round hands it
    `per_round` frames at the round's start and runs it once the round's reading is done,
    `round_s` later; frames sent by the end."""
    sent = 0
    for k in range(rounds):
        for _ in range(per_round):
            switch.receive("eth1", frame, k * round_s)
        sent += len(switch.poll((k + 1) * round_s))
    return sent


@pytest.mark.parametrize("size_bytes", [4096, 9000])
def test_a_loop_that_reads_a_round_then_runs_the_core_loses_nothing_the_line_could_carry(size_bytes):
    """However late each run of the core comes, its egress sends a bucket's worth (it does
    not catch up past its bucket); the loop reads at most that between runs
    (rocelab.kernel.loop.ROUND_BYTES), so a flood the line could carry is never tail-dropped."""
    frame = roce("eth1", "eth2", size_bytes=size_bytes, dscp=0)
    round_s = 20 * ROUND_BYTES * 8 / RATE_BPS  # the line could carry twenty rounds in one
    per_round = min(ROUND_FRAMES, -(-ROUND_BYTES // size_bytes))
    switch = make_switch(qos_profile({}))
    assert rounds_forwarded(switch, frame, per_round, 300, round_s) == 300 * per_round
    assert "tail_drop" not in switch.counters(1.0)["drops"]
    # Reading 64 frames a port between runs, as the loop once did (less than the line could
    # carry meanwhile), backs the queue up.
    switch = make_switch(qos_profile({}))
    rounds_forwarded(switch, frame, 64, 300, round_s)
    assert "tail_drop" in switch.counters(1.0)["drops"]
