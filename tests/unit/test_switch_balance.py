"""ECMP load-balancing modes in the switch core (rocelab.switch.balance): flowlet, per-packet
adaptive, spray; their counters, configuration and which pipeline runs them. Each runs on both
pipelines (the C core declares them; tests/unit/test_switch_traces.py holds the two equal on
generated traces)."""

from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rocelab.switch import Fib, NextHop, Switch, features
from rocelab.switch.balance import QUEUE_BAND_BYTES, Balance, balance_config, balance_from_config_db, dilate
from rocelab.switch.fastpath import FastSwitch, choose_pipeline
from test_switch_support import (
    IMPLEMENTATIONS, RATE_BPS, drive, fib, host_ip, host_mac, port_specs, qos_profile, roce, switch_mac,
)

SPINES = ("eth2", "eth3", "eth4")
REMOTE = "198.18.100.7"
FRAME_BYTES = 1000
FRAME_S = FRAME_BYTES * 8 / RATE_BPS  # one frame's time on a member


def ecmp_fib() -> Fib:
    routes = dict(fib().routes)
    routes["198.18.100.0/24"] = [NextHop(p, f"02:00:00:00:02:0{p[-1]}") for p in SPINES]
    return Fib(routes, fib().local)


def to_remote(sport: int) -> bytes:
    head = (Ether(src=host_mac("eth1"), dst=switch_mac("eth1"))
            / IP(src=host_ip("eth1"), dst=REMOTE, tos=26 << 2 | 2) / UDP(sport=sport, dport=4791))
    return bytes(head / bytes(FRAME_BYTES - len(head)))


def switch(mode: str, pipeline=Switch, **settings) -> Switch:
    return pipeline("leaf1", port_specs(), qos_profile({}), ecmp_fib(), random.Random(1),
                    balance=balance_config({"mode": mode, **settings}))


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def pipeline(request):
    """Each pipeline built here: the reference, and the C core where it is built."""
    return IMPLEMENTATIONS[request.param]


def members(sent) -> collections.Counter:
    return collections.Counter(port for _t, port, _f in sent if port in SPINES)


def group(sw: Switch) -> dict:
    (counters,) = sw.group_counters().values()
    return counters


def test_packet_mode_sends_each_frame_to_the_least_queued_member(pipeline):
    """One flow (one 5-tuple) arriving faster than a member drains spreads over every member,
    evenly to within a queue grade."""
    sw = switch("packet", pipeline)
    sent = drive(sw, [(0.0, "eth1", to_remote(49152))] * 60, 0.0, 1.0)
    by_member = members(sent)
    assert set(by_member) == set(SPINES) and sum(by_member.values()) == 60
    assert max(by_member.values()) - min(by_member.values()) <= QUEUE_BAND_BYTES // FRAME_BYTES
    assert {m: c["frames"] for m, c in group(sw)["members"].items()} == by_member
    assert group(sw)["members"]["eth2"]["bytes"] == by_member["eth2"] * FRAME_BYTES


def test_packet_mode_moves_a_flow_when_its_member_grades_worse_and_so_reorders_it(pipeline):
    """Frames arriving at twice a member's rate: the hash member's queue grows a grade, the
    flow's next frames go to an emptier member and leave before frames queued earlier."""
    sw = switch("packet", pipeline)
    arrivals = [(i * FRAME_S / 2, "eth1", to_remote(49152) [:-4] + i.to_bytes(4, "big")) for i in range(200)]
    sent = drive(sw, arrivals, 0.0, 1.0)
    order = [int.from_bytes(f[-4:], "big") for _t, _p, f in sent]
    assert sorted(order) == list(range(200)) and order != sorted(order)


def test_packet_mode_breaks_ties_by_the_hash_so_an_idle_fabric_keeps_a_flow_on_one_path(pipeline):
    sw = switch("packet", pipeline)
    arrivals = [(i * 3 * FRAME_S, "eth1", to_remote(49152)) for i in range(20)]  # every queue empty on arrival
    assert len(members(drive(sw, arrivals, 0.0, 1.0))) == 1


def test_spray_is_random_per_frame_and_repeats_under_its_seed(pipeline):
    def sprayed(seed: int) -> list[str]:
        sw = switch("spray", pipeline, seed=seed)
        return [p for _t, p, _f in drive(sw, [(i * 3 * FRAME_S, "eth1", to_remote(49152)) for i in range(60)],
                                          0.0, 1.0)]

    first = sprayed(7)
    assert set(first) == set(SPINES)
    assert sprayed(7) == first
    assert sprayed(8) != first


def test_a_flowlet_keeps_its_member_while_it_never_idles_and_moves_after_a_gap(pipeline):
    """A flow paced at a member's line rate never idles the inactivity interval, so it never
    moves, though two members stand empty; after a gap it is placed again by quality, and
    its member, loaded by it, is the worst."""
    idle_s = 50 * FRAME_S
    sw = pipeline("leaf1", port_specs(), qos_profile({}), ecmp_fib(), random.Random(1),
                  balance=Balance("flowlet", flowlet_idle_time_s=idle_s, sampling_interval_s=FRAME_S))
    burst = [(i * FRAME_S, "eth1", to_remote(49152)) for i in range(400)]
    first = members(drive(sw, burst, 0.0, 400 * FRAME_S))
    assert len(first) == 1 and group(sw)["reassignments"] == 0
    (busy,) = first
    later = 400 * FRAME_S + 2 * idle_s
    second = members(drive(sw, [(later, "eth1", to_remote(49152))], later, later + 1.0))
    assert busy not in second and sum(second.values()) == 1
    assert group(sw)["reassignments"] == 1


def test_flowlet_gap_shorter_than_the_interval_does_not_move_the_flow(pipeline):
    idle_s = 50 * FRAME_S
    sw = pipeline("leaf1", port_specs(), qos_profile({}), ecmp_fib(), random.Random(1),
                  balance=Balance("flowlet", flowlet_idle_time_s=idle_s, sampling_interval_s=FRAME_S))
    arrivals = [(i * FRAME_S, "eth1", to_remote(49152)) for i in range(200)]
    arrivals += [(t + 200 * FRAME_S + idle_s / 2, p, f) for t, p, f in arrivals]  # a gap of half the interval
    assert len(members(drive(sw, arrivals, 0.0, 1.0))) == 1
    assert group(sw)["reassignments"] == 0


def test_two_flows_sharing_a_flowset_entry_collide_and_share_its_member(pipeline):
    sw = switch("flowlet", pipeline, max_flows=1)
    arrivals = [(i * FRAME_S, "eth1", to_remote(49152 + i % 2)) for i in range(40)]
    assert len(members(drive(sw, arrivals, 0.0, 1.0))) == 1
    assert group(sw)["collisions"] == 39  # every frame found the entry last used by the other flow


def test_flowlet_places_a_new_flow_on_the_member_of_best_quality(pipeline):
    """Two flows on separate flowset entries: the second, starting while the first's member is
    queued, takes another member."""
    sw = switch("flowlet", pipeline, max_flows=4096)
    arrivals = [(0.0, "eth1", to_remote(49152))] * 20 + [(FRAME_S / 2, "eth1", to_remote(49153))]
    sent = drive(sw, arrivals, 0.0, 1.0)
    by_flow = collections.defaultdict(set)
    for _t, port, frame in sent:
        by_flow[Ether(frame)[UDP].sport].add(port)
    assert len(by_flow[49152]) == 1 and len(by_flow[49153]) == 1
    assert by_flow[49152] != by_flow[49153]


@pytest.mark.parametrize("mode, on", [("spray", "python"), ("spray", "c"), ("flowlet", "python"), ("flowlet", "c"),
                                      ("packet", "c")])
def test_group_counters_clear_and_survive_a_fib_change_that_keeps_the_group(mode, on):
    if on not in IMPLEMENTATIONS:
        pytest.skip("the C fast path is not built here (no C compiler)")
    sw = switch(mode, IMPLEMENTATIONS[on])
    drive(sw, [(0.0, "eth1", to_remote(49152))] * 9, 0.0, 1.0)
    assert sum(c["frames"] for c in group(sw)["members"].values()) == 9
    routes = dict(ecmp_fib().routes)
    routes["10.0.0.0/8"] = routes["198.18.100.0/24"]
    sw.set_fib(Fib(routes, fib().local))
    assert group(sw)["prefixes"] == ["10.0.0.0/8", "198.18.100.0/24"]
    assert sum(c["frames"] for c in group(sw)["members"].values()) == 9
    sw.clear_counters(1.0)
    assert group(sw)["members"]["eth2"] == {"frames": 0, "bytes": 0}


def test_hash_mode_has_no_group_state():
    assert switch("hash").group_counters() == {}


def test_every_mode_runs_on_the_c_core_where_it_is_built():
    for mode in ("flowlet", "packet", "spray"):
        choice = choose_pipeline(qos_profile({}), port_specs(), ecmp_fib(), Balance(mode))
        assert choice.pipeline == ("c" if FastSwitch is not None else "python"), choice.why
    assert features.needed(qos_profile({}), port_specs(), ecmp_fib(), Balance("spray"))["ecmp:spray"] \
        == "route 198.18.100.0/24"
    assert "ecmp:spray" not in features.needed(qos_profile({}), port_specs(), fib(), Balance("spray"))


@pytest.mark.parametrize(("settings", "says"), [
    ({"mode": "round-robin"}, "mode: 'round-robin' is not a load-balancing mode; expected one of: hash, flowlet"),
    ({"mode": "flowlet", "flowlet_idle_time_us": 1}, "flowlet_idle_time_us: 1 is out of range; expected a whole "
                                                     "number 2..2047"),
    ({"mode": "flowlet", "max_flows": 0}, "max_flows: 0 is out of range"),
    ({"mode": "flowlet", "idle": 5}, "unknown key(s) idle; expected: mode, flowlet_idle_time_us"),
])
def test_bad_settings_name_the_key_and_what_it_takes(settings, says):
    with pytest.raises(ValueError) as err:
        balance_config(settings)
    assert says in str(err.value)


def test_sonic_ars_tables_configure_flowlet_or_per_packet_balancing():
    doc = {"ARS_PROFILE": {"default": {"default_ars_object": "ars1", "sampling_interval": "32"}},
           "ARS_OBJECT": {"ars1": {"assign_mode": "per_flowlet_quality", "flowlet_idle_time": "128",
                                   "max_flows": "1024"}}}
    balance = balance_from_config_db(doc, "leaf1.json")
    assert (balance.mode, balance.flowlet_idle_time_s, balance.max_flows, balance.sampling_interval_s) == \
        ("flowlet", pytest.approx(128e-6), 1024, pytest.approx(32e-6))
    assert balance.source == "leaf1.json: ARS_OBJECT|ars1"
    doc["ARS_OBJECT"]["ars1"]["assign_mode"] = "per_packet_quality"
    assert balance_from_config_db(doc, "leaf1.json").mode == "packet"
    assert balance_from_config_db({}, "leaf1.json") is None
    doc["ARS_OBJECT"]["ars1"]["flowlet_idle_time"] = "4096"
    with pytest.raises(ValueError, match=r"leaf1.json: ARS_OBJECT\|ars1: flowlet_idle_time_us: 4096 is out of range"):
        balance_from_config_db(doc, "leaf1.json")


def test_times_dilate_like_every_time():
    slow = dilate(balance_config({"mode": "flowlet"}), 1000)
    assert slow.flowlet_idle_time_s == pytest.approx(0.256) and slow.sampling_interval_s == pytest.approx(0.016)


def test_a_degraded_port_sends_at_its_share_of_the_rate_and_the_packet_mode_steers_around_it(pipeline):
    """impair rate: a port at a quarter of its rate drains a quarter as fast; per-packet
    adaptive routing sees its queue and sends it about a quarter of what an even port gets."""
    sw = switch("packet", pipeline)
    sw.set_impairment("eth2", 0.0, 0.0, 0.0, rate_bps=RATE_BPS / 4)
    arrivals = [(i * FRAME_S / 2, "eth1", to_remote(49152 + i % 7)) for i in range(3000)]  # below what they carry
    sent = drive(sw, arrivals, 0.0, 1.0)
    by_member = members(sent)
    assert sum(by_member.values()) == 3000
    assert 0.15 < by_member["eth2"] / by_member["eth3"] < 0.4
    eth2 = [t for t, p, _f in sent if p == "eth2"]
    assert min(b - a for a, b in zip(eth2, eth2[1:])) == pytest.approx(4 * FRAME_S, rel=0.01)


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_a_degraded_port_paces_at_its_new_rate_on_either_pipeline(implementation):
    sw = IMPLEMENTATIONS[implementation]("leaf1", port_specs(), qos_profile({}), fib(), random.Random(1))
    sw.set_impairment("eth2", 0.0, 0.0, 0.0, rate_bps=RATE_BPS / 4)
    sent = drive(sw, [(0.0, "eth1", roce("eth1", "eth2", FRAME_BYTES))] * 5, 0.0, 1.0)
    times = [t for t, p, _f in sent if p == "eth2"]
    assert len(times) == 5 and times[-1] - times[0] == pytest.approx(4 * 4 * FRAME_S, rel=0.01)


def test_switchd_takes_the_labs_setting_over_the_profiles_ars_tables_and_dilates_it(tmp_path):
    import json

    from rocelab.switch.agent import load_balance

    profile = tmp_path / "leaf1.json"
    profile.write_text(json.dumps({"ARS_OBJECT": {"ars1": {"assign_mode": "per_packet_quality"}}}))
    assert load_balance(str(profile), None, 1000).mode == "packet"
    chosen = load_balance(str(profile), {"mode": "flowlet"}, 1000)
    assert (chosen.mode, chosen.flowlet_idle_time_s) == ("flowlet", pytest.approx(0.256))
    assert load_balance(None, None, 1000).mode == "hash"


@settings(max_examples=60, deadline=None)
@given(mode=st.sampled_from(["flowlet", "packet", "spray"]),
       arrivals=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), min_size=1, max_size=80),  # dense: queues build
       max_flows=st.integers(1, 8))
def test_every_frame_leaves_by_a_member_and_the_group_counts_it_once(mode, arrivals, max_flows):
    """Any arrivals (time in frame times, flow) under any mode: each frame leaves by exactly one
    member, the members' frame counts sum to the frames sent, and under flowlet a flow whose
    frames are never the inactivity interval apart keeps one member, collisions or not."""
    sw = Switch("leaf1", port_specs(), qos_profile({}), ecmp_fib(), random.Random(1),
                balance=Balance(mode, flowlet_idle_time_s=1e6, max_flows=max_flows))  # no flowlet ever ends
    sent = drive(sw, [(t * FRAME_S, "eth1", to_remote(49152 + f)) for t, f in arrivals], 0.0, 10.0)
    assert sum(members(sent).values()) == len(arrivals) == len(sent)
    assert sum(c["frames"] for c in group(sw)["members"].values()) == len(arrivals)
    if mode == "flowlet":  # an entry never idles, so it keeps its first member: every flow on it too
        by_flow = collections.defaultdict(set)
        for _t, port, frame in sent:
            by_flow[Ether(frame)[UDP].sport].add(port)
        assert all(len(ports) == 1 for ports in by_flow.values())
        assert group(sw)["reassignments"] == 0
