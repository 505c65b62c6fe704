"""Which PFC threshold probes a fabric description gets: one per switch and lossless priority,
leaves through their own hosts, spines through two leaves that pause them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rocelab.fabric.lab import threshold_probes
from rocelab.fabric.spec import load_fabric_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def with_second_lossless_priority(spec):
    """Every port of every switch: DSCP 4 → TC 4 → PG 4, lossless like PG 3, PFC on 3 and 4."""
    def widen(qos):
        dscp_to_tc = list(qos.dscp_to_tc)
        dscp_to_tc[4] = 4
        tc_to_pg = list(qos.tc_to_pg)
        tc_to_pg[4] = 4
        return replace(qos, dscp_to_tc=tuple(dscp_to_tc), tc_to_pg=tuple(tc_to_pg),
                       pgs={**qos.pgs, 4: qos.pgs[3]}, pfc_enable=qos.pfc_enable | {4})

    devices = {name: replace(d, profile=replace(d.profile, ports={p: widen(q) for p, q in d.profile.ports.items()}),
                             unlisted=widen(d.unlisted) if 3 in d.unlisted.pgs else d.unlisted)
               for name, d in spec.devices.items()}
    return replace(spec, devices=devices)


def names(spec) -> list[str]:
    return [p.name for p in threshold_probes(spec)]


def test_every_switch_is_probed_on_the_hosts_roce_priority():
    spec = load_fabric_spec(EXAMPLES / "fabric-good")
    probes = {p.name: p for p in threshold_probes(spec)}
    assert set(probes) == {"pfc-threshold[spine1:p3]", "pfc-threshold[spine2:p3]",
                           "pfc-threshold[leaf1:p3]", "pfc-threshold[leaf2:p3]"}
    leaf1 = probes["pfc-threshold[leaf1:p3]"]
    assert (leaf1.dscp, leaf1.port.node, leaf1.sender.node, leaf1.receiver.node) == (26, "leaf1", "h1", "h2")
    spine1 = probes["pfc-threshold[spine1:p3]"]
    # The spine's PG faces the sender's leaf; the receiver sits behind the other leaf.
    assert spine1.port.node == "spine1" and spine1.port.peer_node == spine1.sender.peer_node
    assert spine1.sender.peer_node != spine1.receiver.peer_node


def test_each_lossless_priority_gets_its_own_probe_with_a_dscp_of_its_own():
    spec = with_second_lossless_priority(load_fabric_spec(EXAMPLES / "fabric-good"))
    probes = {p.name: p for p in threshold_probes(spec)}
    for switch in ("spine1", "spine2", "leaf1", "leaf2"):
        assert probes[f"pfc-threshold[{switch}:p3]"].dscp == 26  # the hosts' RoCE DSCP
        assert probes[f"pfc-threshold[{switch}:p4]"].dscp == 4  # the only DSCP in TC 4


def test_a_spine_is_probed_through_a_leaf_that_pauses_it():
    # fabric-broken's leaf2 maps DSCP 26 to a lossy TC: it would never pause a spine, so
    # the spines are probed with the receiver behind leaf1; leaf2's own probe still runs.
    spec = load_fabric_spec(EXAMPLES / "fabric-broken")
    probes = {p.name: p for p in threshold_probes(spec)}
    for spine in ("spine1", "spine2"):
        probe = probes[f"pfc-threshold[{spine}:p3]"]
        assert (probe.sender.peer_node, probe.receiver.peer_node) == ("leaf2", "leaf1")
    assert "pfc-threshold[leaf2:p3]" in probes
