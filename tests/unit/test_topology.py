"""Topology files → Fabric: addressing, ECMP routes, and the errors users see."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.model.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.yml"))
ERRORS = ROOT / "tests" / "errors"


@pytest.mark.parametrize("path", TOPOLOGIES, ids=lambda p: p.stem)
def test_shipped_topologies_load_with_fabric_addresses(path):
    fabric = load_topology(path)
    pool = ipaddress.IPv4Network("198.18.0.0/15")
    addresses = [p.address.ip for n in fabric.nodes for p in n.ports]
    assert addresses and all(a in pool for a in addresses)
    assert len(set(addresses)) == len(addresses)
    macs = [p.mac for n in fabric.nodes for p in n.ports]
    assert len(set(macs)) == len(macs)


def test_same_file_gives_same_addresses():
    path = ROOT / "topologies" / "leaf-spine-4x4.yml"
    first, second = load_topology(path), load_topology(path)
    assert first == second


@pytest.mark.parametrize("name,spines,leaves,hosts", [("leaf-spine-2x2", 2, 2, 4), ("leaf-spine-4x4", 4, 4, 16),
                                                      ("incast-1x5", 0, 1, 5)])
def test_shipped_shapes(name, spines, leaves, hosts):
    fabric = load_topology(ROOT / "topologies" / f"{name}.yml")
    roles = [n.role for n in fabric.nodes]
    assert (roles.count("spine"), roles.count("leaf"), roles.count("host")) == (spines, leaves, hosts)


def test_4x4_is_one_to_one_subscribed():
    fabric = load_topology(ROOT / "topologies" / "leaf-spine-4x4.yml")
    for leaf in (n for n in fabric.nodes if n.role == "leaf"):
        down = [p for p in leaf.ports if fabric.node(p.peer_node).role == "host"]
        up = [p for p in leaf.ports if fabric.node(p.peer_node).role == "spine"]
        rate = lambda ports: sum(fabric.links[p.link].rate_bps for p in ports)  # noqa: E731
        assert rate(down) == rate(up) == 4 * 100e9


def test_every_leaf_has_one_next_hop_per_spine_to_remote_hosts():
    fabric = load_topology(ROOT / "topologies" / "leaf-spine-4x4.yml")
    spines = {n.name for n in fabric.switches if n.role == "spine"}
    for leaf in (n for n in fabric.nodes if n.role == "leaf"):
        local = {p.address.network for p in leaf.ports}
        for host in fabric.hosts:
            net = host.ports[0].address.network
            if net in local:
                continue
            route = next(r for r in leaf.routes if r.dst == net)
            via = {leaf.name and fabric.peer(fabric.port(leaf.name, h.port)).node for h in route.nexthops}
            assert via == spines


def test_hosts_route_only_the_fabric_via_their_tor():
    fabric = load_topology(ROOT / "topologies" / "leaf-spine-2x2.yml")
    for host in fabric.hosts:
        (route,) = host.routes
        assert route.dst == ipaddress.IPv4Network("198.18.0.0/15")
        (hop,) = route.nexthops
        assert hop.gateway == fabric.tor(host.name).address.ip


def test_cable_length_sets_propagation_delay():
    fabric = load_topology(ROOT / "topologies" / "leaf-spine-2x2.yml")
    uplink = next(l for l in fabric.links if l.kind == "fabric")
    assert uplink.cable_m == 30
    assert uplink.delay_s == pytest.approx(30 / 1.98e8)
    assert uplink.mtu == 9100


CASES = sorted(p.stem for p in ERRORS.glob("*.yml"))


@pytest.mark.parametrize("case", CASES)
def test_bad_topology_names_the_problem(case):
    expected = [line for line in (ERRORS / f"{case}.txt").read_text().splitlines() if line]
    with pytest.raises(InputError) as info:
        load_topology(ERRORS / f"{case}.yml")
    text = str(info.value)
    for line in expected:
        assert line in text
