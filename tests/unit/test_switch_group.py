"""switchd's SwitchGroup: the loop's one core for every switch a switchd serves (the netns
engine runs one switchd for all of a lab's switches). Real pipelines behind their CPU ports."""

from __future__ import annotations

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rocelab.engines import builtin_engines
from rocelab.engines.netns import SHARED_MAX_NODES
from rocelab.model.kinds import NICD, SWITCHD, VERBS
from rocelab.model.lab import load_lab
from rocelab.switch import Fib, NextHop, PortSpec, Switch, fastpath
from rocelab.switch.agent import UNCONFIGURED, CpuPort, SwitchGroup

LEAF_MACS = {"eth1": "02:52:4c:00:01:01", "eth2": "02:52:4c:00:01:02"}
SPINE_MACS = {"eth1": "02:52:4c:00:02:01", "eth2": "02:52:4c:00:02:02"}
HOST_MAC = "02:52:4c:00:03:01"


def cpu(kind, name: str, macs: dict[str, str], next_hop: str) -> CpuPort:
    ports = [PortSpec(port, mac, 1e9) for port, mac in macs.items()]
    fib = Fib(routes={"198.18.2.0/24": [NextHop("eth2", next_hop)]}, local=frozenset())
    switch = kind(name, ports, UNCONFIGURED, fib, random.Random(1))
    return CpuPort(switch, [{"name": port, "mac": mac, "address": f"198.18.{i}.1/24"}
                            for i, (port, mac) in enumerate(macs.items(), start=10)])


def keyed(node: str):
    return lambda port: f"{node}/{port}"


def group(kind=Switch) -> SwitchGroup:
    return SwitchGroup([(keyed("leaf1"), cpu(kind, "leaf1", LEAF_MACS, SPINE_MACS["eth1"])),
                        (keyed("spine1"), cpu(kind, "spine1", SPINE_MACS, HOST_MAC))])


def frame(dst_mac: str, n: int) -> bytes:
    return bytes(Ether(dst=dst_mac, src=HOST_MAC) / IP(src="198.18.1.2", dst="198.18.2.2")
                 / UDP(sport=1000 + n, dport=4791) / bytes(500))


def run(g: SwitchGroup, now: float) -> list[tuple[str, bytes]]:
    """Every frame the group sends until nothing is due, what leaves leaf1/eth2 received by spine1/eth1
    (the veth between them)."""
    out, due = [], now
    while due is not None:
        for port, f in g.poll(due):
            out.append((port, bytes(f)))
            if port == "leaf1/eth2":
                g.receive("spine1/eth1", bytes(f), due)
        due = g.next_event(due)
    return out


def test_the_loop_knows_every_switchs_ports_by_node_and_name_in_pipeline_order():
    assert group().port_names == ["leaf1/eth1", "leaf1/eth2", "spine1/eth1", "spine1/eth2"]


def test_a_frame_received_by_key_reaches_that_switch_and_leaves_by_its_ports_keyed():
    g = group()
    for n in range(5):
        g.receive("leaf1/eth1", frame(LEAF_MACS["eth1"], n), 0.0)
    out = run(g, 0.0)
    assert [p for p, _ in out].count("leaf1/eth2") == 5 and [p for p, _ in out].count("spine1/eth2") == 5
    leaving = [Ether(f) for p, f in out if p == "spine1/eth2"]
    assert [e[UDP].sport for e in leaving] == [1000 + n for n in range(5)] and {e.dst for e in leaving} == {HOST_MAC}
    leaf, spine = (c for _, c in g.members)
    assert leaf.switch.counters(1.0)["ports"]["eth1"]["rx_packets"] == 5
    assert spine.switch.counters(1.0)["ports"]["eth1"]["rx_packets"] == 5
    assert spine.switch.counters(1.0)["ports"]["eth2"]["tx_packets"] == 5


def test_the_next_event_is_the_earliest_of_any_switch():
    g = group()
    assert g.next_event(0.0) is None
    g.receive("spine1/eth1", frame(SPINE_MACS["eth1"], 0), 0.0)
    leaf, spine = (c for _, c in g.members)
    assert g.next_event(0.0) == spine.next_event(0.0) is not None and leaf.next_event(0.0) is None


def test_python_pipelines_are_served_through_the_group_not_the_c_loop():
    assert group(Switch).serve is None


@pytest.mark.skipif(fastpath.Asic is None, reason="the C fast path is not built here (no C compiler)")
def test_the_c_loop_serves_the_group_while_every_switch_runs_c_and_not_once_one_runs_python():
    g = group(fastpath.FastSwitch)
    assert g.serve is not None
    _, spine = g.members[1]
    spine.use(Switch("spine1", [PortSpec(p, m, 1e9) for p, m in SPINE_MACS.items()], UNCONFIGURED,
                     Fib(routes={}, local=frozenset()), random.Random(1)))  # a reload onto the Python pipeline
    assert g.serve is None


def test_one_switch_keeps_its_ports_own_names():
    g = SwitchGroup([(str, cpu(Switch, "leaf1", LEAF_MACS, SPINE_MACS["eth1"]))])
    g.receive("eth1", frame(LEAF_MACS["eth1"], 0), 0.0)
    assert g.port_names == ["eth1", "eth2"] and {p for p, _ in run(g, 0.0)} == {"eth2"}


def test_the_netns_engine_runs_one_switchd_and_one_nicd_for_up_to_shared_max_nodes_each():
    engine = builtin_engines().get("netns")
    fabric = load_lab("lab-placement").fabric  # six switches, 24 hosts
    (switches, agent), = engine._agents(list(fabric.switches), SWITCHD)
    assert agent is SWITCHD and [n.name for n in switches] == [n.name for n in fabric.switches]
    many = list(fabric.hosts) * 3  # 72 host nodes: three processes, none over the cap
    assert [len(nodes) for nodes, _ in engine._agents(many, NICD)] == [SHARED_MAX_NODES, SHARED_MAX_NODES, 8]
    assert all(len(nodes) == 1 for nodes, _ in engine._agents(list(fabric.hosts), VERBS))  # serves one node each
