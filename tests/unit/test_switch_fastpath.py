"""The C fast path (rocelab.switch.fastpath) decides exactly as the Python pipeline, its reference.

Recorded traces run through both from the same seed: every frame out (time, port, bytes, in
order) and every counter must be equal. The traces together touch each stage: an incast into
a lossless TC with WRED/ECN marking and dropping, XOFF/XON and their refresh, PFC and 802.3x
honoured (and refused), the PFC watchdog's storm and restoration under both actions, STRICT
and DWRR queues, lossy tail drops and headroom exhaustion in a pool with shared headroom,
lossy and jittered links, TTL traps, VLAN tags, IP options, fragments, bad checksums and
garbage; and the control calls between segments of a run (clear_counters, set_impairment,
set_fib). The switch tests also run on both (tests/unit/conftest.py).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from rocelab import ethernet
from rocelab.ethernet import MAC_CONTROL_PAUSE, ETH_P_MAC_CONTROL, mac_bytes
from rocelab.kernel import ring
from rocelab.qos.model import BufferProfile, PfcWatchdog, QueueQos, Scheduler, WredProfile
from rocelab.switch import Fib, NextHop, Switch, balance, counters, fastpath, features, mmu, pfc, pipeline
from rocelab.switch.balance import Balance
from rocelab.switch.fastpath import PURE_ENV, make_switch
from rocelab.switch.scheduler import scheduler_registry
from rocelab.switch.wred import Wred
from test_switch_support import (
    RATE_BPS, drive, every_port, fib, host_ip, host_mac, ingress_pool, lossless_pg_profile, lossless_profile,
    paced, pfc_from_peer, port_specs, qos_profile, roce, switch_mac, with_port,
)

try:
    from rocelab.switch import _fastpath
except ImportError:
    _fastpath = None

needs_c = pytest.mark.skipif(fastpath.Asic is None, reason="the C fast path is not built here (no C compiler)")


def test_the_c_pipeline_is_built_wherever_a_c_compiler_is():
    """An install that silently fell back to Python would skip everything below."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here: switchd runs the Python pipeline")
    assert fastpath.Asic is not None, "pip install found a C compiler but did not build rocelab.switch._fastpath"


def pause_802_3x(port: str, quanta: int) -> bytes:
    head = bytes.fromhex("0180c2000001") + mac_bytes(host_mac(port)) + ETH_P_MAC_CONTROL.to_bytes(2, "big")
    return head + MAC_CONTROL_PAUSE.to_bytes(2, "big") + quanta.to_bytes(2, "big") + bytes(42)


def odd_frames(port: str) -> list[bytes]:
    """Frames off the fast path, each counted or forwarded its own way."""
    good = roce(port, "eth3", 512)
    bad_checksum = bytearray(good)
    bad_checksum[24] ^= 0xFF
    with_options = bytes(Ether(src=host_mac(port), dst=switch_mac(port))
                         / IP(src=host_ip(port), dst=host_ip("eth3"), tos=3 << 2 | 2, options=b"\x01\x01\x01\x01")
                         / UDP(sport=1, dport=4791) / (b"x" * 200))
    fragment = bytes(Ether(src=host_mac(port), dst=switch_mac(port))
                     / IP(src=host_ip(port), dst=host_ip("eth3"), flags="MF", frag=0) / UDP(sport=7, dport=9)
                     / (b"y" * 300))
    tagged = bytes(Ether(src=host_mac(port), dst=switch_mac(port)) / Dot1Q(vlan=10, prio=3)
                   / IP(src=host_ip(port), dst=host_ip("eth4"), tos=3 << 2 | 2) / UDP(sport=3, dport=4791)
                   / (b"z" * 400))
    return [bytes(bad_checksum), with_options, fragment, tagged, good[:30], good[:12], b"\x00" * 20,
            good[:12] + b"\x86\xdd" + good[14:], roce(port, "eth3", 512, dst_mac="02:99:00:00:00:01"),
            roce(port, "eth3", 9300), roce(port, "eth3", 256, ttl=1), roce(port, "eth1", 256)[:14] + b"\x00" * 50,
            tagged[:16] + b"\x86\xdd" + tagged[18:], tagged[:20], pause_802_3x(port, 100),
            pfc_from_peer(port, {3: 50})[:14] + b"\x00\x05" + bytes(44)]  # MAC Control, neither PFC nor PAUSE


def scenario_incast(build):
    wred = WredProfile("ECN", True, "ecn_all", 20_000, 60_000, 50)
    switch = build(lossless_profile(pg=lossless_pg_profile(static_th_bytes=30_000), wred=wred), port_specs())
    arrivals = (paced("eth1", roce("eth1", "eth3", 4096), RATE_BPS * 0.8, 0.0, 0.05)
                + paced("eth2", roce("eth2", "eth3", 4096, sport=50000), RATE_BPS * 0.8, 0.0, 0.05)
                + paced("eth4", roce("eth4", "eth3", 1500, dscp=0), RATE_BPS * 3, 0.0, 0.05)
                + paced("eth4", roce("eth4", "eth3", 1000, dscp=3, ecn=0, sport=9), RATE_BPS * 0.2, 0.0, 0.05)
                + [(0.01, "eth3", pfc_from_peer("eth3", {3: 2000})), (0.011, "eth3", pfc_from_peer("eth3", {3: 0})),
                   (0.02, "eth1", roce("eth1", "eth2", ttl=1)), (0.03, "eth2", b"\x00" * 20),
                   (0.03, "eth2", roce("eth2", "eth1")[:30])]
                + [(0.04 + i * 1e-4, "eth2", f) for i, f in enumerate(odd_frames("eth2"))])
    return switch, [(arrivals, 0.0, 0.2)]


def scenario_scheduled_shared_headroom(build):
    pool = ingress_pool(size_bytes=200_000, xoff_bytes=30_000)
    pg = lossless_pg_profile(static_th_bytes=None, dynamic_th=-1, xoff_bytes=25_000)
    queues = {3: QueueQos(scheduler=Scheduler("s.1", "DWRR", 30)), 0: QueueQos(scheduler=Scheduler("s.0", "WRR", 10),
                                                                                buffer=BufferProfile(
                                                                                    "q_lossy", "ingress_lossless_pool",
                                                                                    2_000, dynamic_th=-2)),
              6: QueueQos(scheduler=Scheduler("s.cnp", "STRICT")), 5: QueueQos(scheduler=Scheduler("s.5", "STRICT"))}
    ports = every_port(pfc_enable=frozenset({3}), pgs={3: pg}, queues=queues)
    switch = build(qos_profile(ports, pool), port_specs())
    arrivals = []
    for src, dscp, share, size in (("eth1", 3, 0.7, 4096), ("eth2", 3, 0.7, 2048), ("eth4", 0, 0.8, 1500),
                                   ("eth1", 6, 0.05, 128), ("eth2", 5, 0.1, 700)):
        arrivals += paced(src, roce(src, "eth3", size, dscp=dscp, sport=1000 + dscp), RATE_BPS * share, 0.0, 0.04)
    return switch, [(arrivals, 0.0, 0.1)]


def scenario_watchdog(build, action):
    wd = PfcWatchdog(action=action, detection_time_ms=20, restoration_time_ms=20)
    switch = build(lossless_profile(pfc_wd=wd), with_port(port_specs(), "eth2", global_flow_control_rx=True))
    storm = [(i * 0.005, "eth2", pfc_from_peer("eth2", {3: 0xFFFF, 4: 100})) for i in range(10)]
    traffic = paced("eth1", roce("eth1", "eth2", 1024), RATE_BPS * 0.3, 0.001, 0.1)
    later = [(0.12, "eth2", pause_802_3x("eth2", 3000)), (0.125, "eth2", pause_802_3x("eth2", 0)),
             (0.13, "eth2", pfc_from_peer("eth2", {3: 500}))]
    more = paced("eth1", roce("eth1", "eth2", 1024, sport=4), RATE_BPS * 0.5, 0.115, 0.14)
    return switch, [(storm + traffic + later + more, 0.0, 0.2)]


def scenario_impaired_and_controlled(build):
    """Lossy, jittered links, and the control calls switchd makes between segments."""
    specs = with_port(port_specs(delay_s=1e-4), "eth3", jitter_s=3e-4, loss_pct=10.0)
    switch = build(lossless_profile(), specs)
    first = (paced("eth1", roce("eth1", "eth3", 2048), RATE_BPS * 0.6, 0.0, 0.03)
             + paced("eth2", roce("eth2", "eth3", 2048, sport=7), RATE_BPS * 0.6, 0.0, 0.03))
    second = paced("eth1", roce("eth1", "eth4", 3000), RATE_BPS * 0.9, 0.03, 0.06)
    third = paced("eth4", roce("eth4", "eth1", 1000, dscp=0), RATE_BPS * 0.5, 0.06, 0.08)
    moved = Fib(routes={**fib().routes, "198.18.1.0/24": [NextHop("eth2", host_mac("eth2")),
                                                           NextHop("eth1", host_mac("eth1"))]},
                local=fib().local)
    controls = {0.03: lambda s: (s.clear_counters(0.03), s.set_impairment("eth4", 2e-4, 1e-4, 5.0)),
                0.06: lambda s: s.set_fib(moved)}
    return switch, [(first, 0.0, 0.03), (second, 0.03, 0.06), (third, 0.06, 0.1)], controls


SCENARIOS = [scenario_incast, scenario_scheduled_shared_headroom, scenario_impaired_and_controlled,
             *(lambda build, a=a: scenario_watchdog(build, a) for a in ("drop", "forward", "alert"))]
NAMES = ["incast", "scheduled-shared-headroom", "impaired-and-controlled", "watchdog-drop", "watchdog-forward",
         "watchdog-alert"]


def trace(implementation, scenario) -> tuple[list, list]:
    def build(profile, specs):
        return implementation("leaf1", specs, profile, fib(), random.Random(11))

    switch, segments, *rest = scenario(build)
    controls = rest[0] if rest else {}
    sent, snapshots = [], []
    for arrivals, start_s, until_s in segments:
        if start_s in controls:
            controls[start_s](switch)
        sent += drive(switch, arrivals, start_s, until_s)
        snapshots.append(json.dumps(switch.counters(until_s), sort_keys=True))
    return sent, snapshots


@needs_c
@pytest.mark.parametrize("scenario", SCENARIOS, ids=NAMES)
def test_the_c_pipeline_sends_and_counts_exactly_as_the_python_one(scenario):
    sent_py, counters_py = trace(Switch, scenario)
    sent_c, counters_c = trace(fastpath.FastSwitch, scenario)
    assert len(sent_py) > 100
    assert len(sent_c) == len(sent_py)
    first_difference = next((i for i, (a, b) in enumerate(zip(sent_c, sent_py)) if a != b), None)
    assert first_difference is None, (first_difference, sent_c[first_difference][:2], sent_py[first_difference][:2])
    for c, py in zip(counters_c, counters_py):
        assert json.loads(c) == json.loads(py)


def test_the_traces_reach_what_they_claim_to():
    """The scenarios above are only as good as what they make happen: each stage they name
    must have acted in the reference's run."""
    by_name = {}
    for name, scenario in zip(NAMES, SCENARIOS):
        _, snapshots = trace(Switch, scenario)
        by_name[name] = [json.loads(s) for s in snapshots]
    incast = by_name["incast"][0]
    drops = incast["drops"]
    for reason in ("truncated", "oversized", "not_ipv4", "not_for_us", "bad_ipv4_checksum", "ttl_expired",
                   "mac_control_unsupported", "flow_control_disabled", "wred_drop", "tail_drop"):
        assert reason in drops, reason
    eth3 = incast["ports"]["eth3"]
    assert eth3["queues"][3]["ecn_marked_packets"] > 0 and sum(eth3["paused_time_s"]) > 0
    assert sum(p["pfc_tx_frames"][3] for p in incast["ports"].values()) > 2  # XOFF, refresh or XON
    shared = by_name["scheduled-shared-headroom"][0]
    assert "headroom_exceeded" in shared["drops"] or shared["ports"]["eth1"]["pgs"][3]["headroom_watermark_bytes"]
    assert all(shared["ports"]["eth3"]["queues"][q]["tx_packets"] for q in (0, 3, 5, 6))
    impaired = by_name["impaired-and-controlled"]
    assert "impairment_loss" in impaired[0]["drops"] and "impairment_loss" in impaired[1]["drops"]
    assert impaired[2]["ports"]["eth2"]["tx_packets"] > 0  # the moved route
    for action in ("drop", "forward", "alert"):
        queue = by_name[f"watchdog-{action}"][0]["ports"]["eth2"]["queues"][3]
        assert queue["pfcwd"]["storms_detected"] == 1 and queue["pfcwd"]["storms_restored"] == 1
    assert "pfcwd_drop" in by_name["watchdog-drop"][0]["drops"]


@needs_c
def test_switchd_runs_the_c_pipeline_unless_told_not_to(monkeypatch):
    args = ("leaf1", port_specs(), lossless_profile(), fib(), random.Random(1))
    switch, choice = make_switch(*args)
    assert type(switch) is fastpath.FastSwitch and choice.pipeline == "c"
    monkeypatch.setenv(PURE_ENV, "1")
    switch, choice = make_switch(*args)
    assert type(switch) is Switch and choice == fastpath.PipelineChoice("python", "ROCELAB_PURE_SWITCH=1")


@needs_c
def test_a_switch_needing_a_feature_the_c_core_lacks_runs_on_python_and_says_which(monkeypatch):
    """A feature lands in Python first: until C declares it, a switch that uses it runs on Python."""
    wd = PfcWatchdog(action="forward", detection_time_ms=20, restoration_time_ms=20)
    profile = lossless_profile(pfc_wd=wd)
    args = ("leaf1", with_port(port_specs(), "eth2", global_flow_control_rx=True), profile, fib(), random.Random(1))
    assert make_switch(*args)[1].pipeline == "c"
    monkeypatch.setattr(fastpath, "FEATURES", fastpath.FEATURES - {"pfcwd:forward", "pause_802_3x"})
    switch, choice = make_switch(*args)
    assert type(switch) is Switch
    assert choice.why == "the C core lacks pause_802_3x (eth2), pfcwd:forward (Ethernet0)"
    # a switch that uses neither still runs on C
    assert make_switch("leaf1", port_specs(), lossless_profile(), fib(), random.Random(1))[1].pipeline == "c"


def test_every_feature_a_profile_can_need_is_named_and_the_reference_implements_it():
    wd = PfcWatchdog(action="drop", detection_time_ms=20, restoration_time_ms=20)
    queues = {0: QueueQos(scheduler=Scheduler("s", "STRICT"), wred=WredProfile("w", True, "ecn_all", 1, 2, 3)),
              1: QueueQos(scheduler=Scheduler("s", "WRR", 2),
                          buffer=BufferProfile("q", "ingress_lossless_pool", 0, dynamic_th=0))}
    profile = qos_profile(every_port(pfc_enable=frozenset({3}), pgs={3: lossless_pg_profile()}, queues=queues,
                                     pfc_wd=wd), ingress_pool(xoff_bytes=1000))
    specs = port_specs(delay_s=1e-4, jitter_s=1e-5, loss_pct=1.0, global_flow_control_rx=True)
    ecmp = Fib(routes={**fib().routes, "10.0.0.0/8": [NextHop("eth1", host_mac("eth1")),
                                                       NextHop("eth2", host_mac("eth2"))]}, local=fib().local)
    used = features.needed(profile, specs, ecmp)
    assert set(used) == features.FEATURES - {"scheduler:DWRR", "pfcwd:forward", "pfcwd:alert", "ecmp:flowlet",
                                             "ecmp:packet", "ecmp:spray"}  # balance modes: test_switch_balance
    assert used["wred"] == "Ethernet0 queue 0" and used["ecmp:hash"] == "route 10.0.0.0/8"


@needs_c
def test_the_c_core_names_what_it_implements_in_the_python_sides_words():
    """Checked by name across the boundary: C's drop reasons, schedulers and features are the
    Python side's, and every attribute C reads or writes back is one the reference has. A
    drop reason misnamed (or its enum misordered against its name table) in C, a scheduler or
    a feature Python does not know, or an attribute renamed in Python fails here, not a frame
    later."""
    reasons = counters.DROP_REASONS
    assert set(_fastpath.REASONS) == reasons
    assert len(_fastpath.REASONS) == len(set(_fastpath.REASONS))
    assert set(_fastpath.SCHEDULERS) <= set(scheduler_registry().names())
    assert {f"scheduler:{s}" for s in _fastpath.SCHEDULERS} <= _fastpath.FEATURES <= features.FEATURES
    wd = PfcWatchdog(action="drop", detection_time_ms=20, restoration_time_ms=20)
    wred = WredProfile("w", True, "ecn_all", 1, 2, 3)
    ecmp = Fib(routes={**fib().routes, "10.0.0.0/8": [NextHop("eth1", host_mac("eth1")),
                                                       NextHop("eth2", host_mac("eth2"))]}, local=fib().local)
    reference = Switch("leaf1", port_specs(), lossless_profile(wred=wred, pfc_wd=wd), ecmp, random.Random(1),
                       balance=Balance("flowlet"))
    port = reference._ports[0]
    (group,) = reference._groups.values()
    objects = {"switch": reference, "rng": random.Random(1), "pool": next(iter(reference._pools.values())),
               "pg": port.pgs[3], "queue": port.queues[3], "port": port, "group": group,
               "member": group.members[0]}
    assert set(_fastpath.FIELDS) == set(objects)
    for kind, fields in _fastpath.FIELDS.items():
        for path, role in fields:
            assert role in ("structure", "config", "state")
            holder = objects[kind]
            for name in path.split("."):
                assert hasattr(holder, name), f"C reads {kind} {path}: the reference has no {name}"
                holder = getattr(holder, name)


@needs_c
def test_every_counter_the_reference_keeps_is_carried_by_the_c_core():
    """A counter (or any state) added to the reference's objects must be carried by C too, or
    be named here as held another way: else C would run without it and write back stale values."""
    held_otherwise = {  # what C keeps in its own structures (its port order, its queues, its flow cache)
        "port": {"scheduler", "flows"},
        "pg": {"index", "port"},
        "queue": {"index", "port", "items", "weight", "discipline"},
        "pool": set(),
        "member": {"port", "name"},
    }
    classes = {"port": pipeline._Port, "pg": pipeline._Pg, "queue": pipeline._Queue, "pool": mmu.Pool,
               "member": balance.Member}
    carried = {kind: {path.split(".")[0] for path, _ in _fastpath.FIELDS[kind]} for kind in classes}
    for kind, cls in classes.items():
        slots = {s for c in cls.__mro__ for s in getattr(c, "__slots__", ())}
        assert slots - carried[kind] - held_otherwise[kind] == set(), kind
    for sub, cls in (("watchdog", pfc.QueueWatchdog), ("wred", Wred)):
        assert set(cls.__slots__) == {path.split(".")[1] for path, _ in _fastpath.FIELDS["queue"]
                                      if path.startswith(sub + ".")}, sub


@needs_c
def test_an_unknown_port_is_a_key_error_as_in_the_reference():
    switch = fastpath.FastSwitch("leaf1", port_specs(), lossless_profile(), fib(), random.Random(1))
    with pytest.raises(KeyError):
        switch.receive("eth9", roce("eth1", "eth2"), 0.0)


def reference_switch() -> Switch:
    return Switch("leaf1", port_specs(), lossless_profile(), fib(), random.Random(1))


def build_c(reference: Switch):
    return _fastpath.Asic(reference, random.Random(1), 9216, 1024, 64)


@needs_c
def test_an_attribute_the_c_core_reads_is_checked_when_the_switch_is_built_and_named():
    """Every attribute C reads comes from its declared tables, all read when the switch is
    built: one the reference lacks (or holds the wrong kind of value in) fails then, with the
    kind and path, not a frame later."""
    reference = reference_switch()
    del reference._ports[1].pfc_enable
    with pytest.raises(AttributeError, match=r"reads port\.pfc_enable: .*pfc_enable"):
        build_c(reference)
    reference = reference_switch()
    reference._ports[0].queues[2].tx_packets = "many"
    with pytest.raises(TypeError, match=r"reads queue\.tx_packets"):
        build_c(reference)
    reference = reference_switch()
    del reference._ports[0].link.jitter_s
    with pytest.raises(AttributeError, match=r"reads port\.link\.jitter_s"):
        build_c(reference)


@needs_c
def test_the_c_core_refuses_priorities_and_queues_outside_its_eight():
    """A PG's or queue's priorities are copied into 8 slots and a priority's queue indexes 8
    queues: more priorities, or one outside 0..7, fail the build instead of writing past them."""
    reference = reference_switch()
    reference._ports[0].pgs[3].priorities = list(range(9))
    with pytest.raises(ValueError, match=r"reads pg\.priorities: 9 priorities: at most 8"):
        build_c(reference)
    reference = reference_switch()
    reference._ports[0].queues[3].priorities = [3, 8]
    with pytest.raises(ValueError, match=r"reads queue\.priorities: priority 8 is not one of 0\.\.7"):
        build_c(reference)
    reference = reference_switch()
    port = reference._ports[2]
    port.qos = dataclasses.replace(port.qos, pfc_priority_to_queue=(0, 1, 2, 9, 4, 5, 6, 7))
    with pytest.raises(ValueError, match=r"reads port\.qos\.pfc_priority_to_queue: queue 9 is not one of 0\.\.7"):
        build_c(reference)
    build_c(reference_switch())  # the reference as built passes


@needs_c
def test_the_collector_sees_every_object_the_c_core_holds():
    """tp_traverse visits the reference's ports, PGs, queues and pools the core keeps, so a
    cycle through them is collected."""
    switch = fastpath.FastSwitch("leaf1", port_specs(), lossless_profile(), fib(), random.Random(1))
    held = {id(o) for o in gc.get_referents(switch)}
    reference = switch.reference
    expected = [*reference._ports, *reference._pools.values(), *(p.name for p in reference._ports),
                *(pg for p in reference._ports for pg in p.pgs), *(q for p in reference._ports for q in p.queues)]
    assert all(id(o) in held for o in expected)


@needs_c
def test_the_c_cores_wire_constants_and_ring_layout_are_the_python_sides():
    """C takes EtherTypes and the TPACKET_V2 header from the kernel's headers and names the
    rest once (fastpath_core.h); WIRE says which it uses, in rocelab.ethernet's and
    rocelab.kernel.ring's words, and each must be the Python side's value."""
    modules = {"ethernet": ethernet, "ring": ring}
    for name, value in _fastpath.WIRE.items():
        where, _, attr = name.partition(".")
        if where in modules:
            assert getattr(modules[where], attr) == value, name
    header = bytearray(32)  # a slot's struct tpacket2_hdr written where C reads it, read by RxRing's structs
    for field, value, size in (("tp_snaplen", 1514, 4), ("tp_mac", 80, 2), ("tp_sec", 1_700_000_000, 4),
                               ("tp_nsec", 123, 4)):
        at = _fastpath.WIRE[f"tpacket2_hdr.{field}"]
        header[at:at + size] = value.to_bytes(size, sys.byteorder)
    assert ring.TPACKET2_FRAME.unpack_from(header) == (1514, 80)
    assert ring.TPACKET2_TIME.unpack_from(header) == (1_700_000_000, 123)


def test_the_c_core_compiles_alone_without_python():
    """fastpath_core.c includes no Python.h: it builds on its own, warnings as errors."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        pytest.skip("no C compiler here")
    core = Path(fastpath.__file__).with_name("fastpath_core.c")
    assert "Python.h" not in core.read_text() + core.with_suffix(".h").read_text()
    build = subprocess.run([compiler, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-c", str(core), "-o",
                            os.devnull], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
