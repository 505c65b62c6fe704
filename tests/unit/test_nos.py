"""NOS startup configurations from a lab's topology and QoS profile: SONiC's config_db.json
round-trips to the lab's profile, cEOS's startup-config renders deterministically and parses
back to the profile EOS can express, ports, addresses and routes follow rocelab's plan, and
the eBGP sessions agree at both ends of every NOS–NOS link."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.model.lab import Lab, load_lab
from rocelab.engines.nos import (
    LOOPBACKS,
    SONIC_VS_FIRST_LANES,
    eos_startup_config,
    loopback,
    node_profile,
    sonic_config_db,
    startup_configs,
    switch_asn,
)
from rocelab.qos import load_config_db, profile_from_config_db
from rocelab.qos.eos import parse_eos, parse_eos_config, render_eos
from rocelab.qos.ports import lab_to_sonic

ROOT = Path(__file__).resolve().parents[2]
NOS = ROOT / "topologies" / "leaf-spine-2x2-nos.yml"
PROFILES = sorted([*(ROOT / "profiles").glob("*.json"), *(ROOT / "labs").glob("*/*.json")])


def nos_lab(profile: Path | None = None) -> Lab:
    lab = load_lab(str(NOS))
    return lab if profile is None else dataclasses.replace(lab, profile=profile)


def all_nos_lab(tmp_path: Path) -> Lab:
    """The same fabric with every switch a NOS: leaf1 SONiC, leaf2 cEOS."""
    text = NOS.read_text().replace("leaf1: {role: leaf}", "leaf1: {role: leaf, kind: sonic-vs}")
    text = text.replace("leaf2: {role: leaf}", "leaf2: {role: leaf, kind: arista_ceos}")
    (tmp_path / "all-nos.yml").write_text(text)
    return load_lab(str(tmp_path / "all-nos.yml"))


def written(lab: Lab, tmp_path: Path) -> dict[str, Path]:
    """Each NOS switch's rendered file, written as the clab engine writes it."""
    files = {}
    for config in startup_configs(lab):
        files[config.node] = tmp_path / config.filename
        files[config.node].write_text(config.text)
    return files


# ---------------------------------------------------------------- SONiC


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_sonic_config_db_round_trips_to_the_labs_profile(profile, tmp_path) -> None:
    lab = nos_lab(profile)
    spine1 = lab.fabric.node("spine1")
    path = written(lab, tmp_path)["spine1"]
    expected = node_profile(lab, spine1)
    assert profile_from_config_db(sonic_config_db(lab, spine1), expected.source) == expected
    assert dataclasses.replace(load_config_db(path), source=expected.source) == expected
    # The switch's ports carry exactly the lab profile's settings for them.
    full = load_config_db(profile)
    assert dict(expected.ports) == {lab_to_sonic(p.name): full.ports[lab_to_sonic(p.name)] for p in spine1.ports}
    assert expected.pools == full.pools


def test_sonic_ports_addresses_and_routes_follow_the_topology() -> None:
    lab = nos_lab()
    fabric, spine1 = lab.fabric, lab.fabric.node("spine1")
    doc = sonic_config_db(lab, spine1)
    assert doc["DEVICE_METADATA"]["localhost"] == {
        "hostname": "spine1", "hwsku": "Force10-S6000", "platform": "x86_64-kvm_x86_64-r0",
        "type": "SpineRouter", "bgp_asn": "65101"}
    assert doc["PORT"] == {
        "Ethernet0": {"lanes": "25,26,27,28", "alias": "fortyGigE0/0", "index": "0", "speed": "100000",
                      "mtu": "9100", "admin_status": "up", "description": "leaf1:eth3"},
        "Ethernet4": {"lanes": "29,30,31,32", "alias": "fortyGigE0/4", "index": "1", "speed": "100000",
                      "mtu": "9100", "admin_status": "up", "description": "leaf2:eth3"}}
    assert doc["INTERFACE"] == {"Ethernet0": {"mac_addr": "02:52:4c:00:01:01"}, "Ethernet0|198.18.0.1/31": {},
                                "Ethernet4": {"mac_addr": "02:52:4c:00:01:02"}, "Ethernet4|198.18.0.5/31": {}}
    assert doc["LOOPBACK_INTERFACE"] == {"Loopback0": {}, "Loopback0|198.19.0.1/32": {}}
    assert doc["NEIGH"] == {
        f"{lab_to_sonic(p.name)}|{fabric.peer(p).address.ip}": {"neigh": fabric.peer(p).mac, "family": "IPv4"}
        for p in spine1.ports}
    assert doc["STATIC_ROUTE"]["198.19.3.0/24"] == {"nexthop": "198.18.0.4", "ifname": "Ethernet4"}
    assert set(doc["STATIC_ROUTE"]) == {str(r.dst) for r in spine1.routes}
    assert "BGP_NEIGHBOR" not in doc  # its neighbours are rocelab's leaves, which speak no BGP


def test_sonic_vs_lanes_use_each_of_the_128_lanes_once() -> None:
    lanes = [lane for first in SONIC_VS_FIRST_LANES for lane in range(first, first + 4)]
    assert sorted(lanes) == list(range(1, 129))


def test_sonic_ecmp_routes_list_every_next_hop(tmp_path) -> None:
    lab = all_nos_lab(tmp_path)
    doc = sonic_config_db(lab, lab.fabric.node("leaf1"))
    assert doc["STATIC_ROUTE"]["198.19.3.0/24"] == {"nexthop": "198.18.0.1,198.18.0.3",
                                                    "ifname": "Ethernet8,Ethernet12"}


def test_a_switchs_own_profile_wins(tmp_path) -> None:
    azure = ROOT / "profiles" / "azure-lossless.json"
    lab = dataclasses.replace(nos_lab(), node_profiles={"spine1": azure})
    files = written(lab, tmp_path)
    assert json.loads(files["spine1"].read_text())["PORT_QOS_MAP"]["Ethernet0"]["dscp_to_tc_map"] == "AZURE"
    assert parse_eos(files["spine2"].read_text(), "x").ports["Ethernet0"].pfc_enable == {3}


def test_a_lab_without_profile_renders_no_qos() -> None:
    lab = dataclasses.replace(nos_lab(), profile=None)
    assert set(sonic_config_db(lab, lab.fabric.node("spine1"))) == {
        "DEVICE_METADATA", "PORT", "INTERFACE", "LOOPBACK_INTERFACE", "NEIGH", "STATIC_ROUTE"}
    text = eos_startup_config(lab, lab.fabric.node("spine2"))
    assert "priority-flow-control" not in text and "random-detect" not in text
    assert "   ip address 198.18.0.3/31" in text


def test_sonic_vs_refuses_ports_beyond_its_hwsku(tmp_path) -> None:
    text = NOS.read_text().replace('"spine1:eth2"', '"spine1:eth33"')
    (tmp_path / "t.yml").write_text(text)
    with pytest.raises(InputError) as info:
        startup_configs(load_lab(str(tmp_path / "t.yml")))
    assert "topology.nodes.spine1: is sonic-vs with port(s) eth33; SONiC-VS's Force10-S6000 has 32" in str(info.value)


# ---------------------------------------------------------------- cEOS


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_eos_startup_config_is_deterministic_and_parses_back(profile) -> None:
    lab = nos_lab(profile)
    spine2 = lab.fabric.node("spine2")
    text = eos_startup_config(lab, spine2)
    assert text == eos_startup_config(lab, spine2)
    parsed = parse_eos_config(text, "spine2.cfg")
    # The routing statements beside the QoS change nothing EOS reads as QoS...
    qos = node_profile(lab, spine2)
    assert parsed.profile == parse_eos(render_eos(qos), "spine2.cfg")
    assert parsed.mtu_bytes == {lab_to_sonic(p.name): lab.fabric.links[p.link].mtu for p in spine2.ports}
    # ...and that QoS is the lab profile's, wherever EOS can say it.
    for name, theirs in qos.ports.items():
        ours = parsed.profile.ports[name]
        assert (ours.dscp_to_tc, ours.tc_to_queue, ours.pfc_enable, ours.pfc_wd) == (
            theirs.dscp_to_tc, theirs.tc_to_queue, theirs.pfc_enable, theirs.pfc_wd)
        for q, queue in theirs.queues.items():
            if queue.scheduler:
                assert (ours.queues[q].scheduler.type, ours.queues[q].scheduler.weight) == (
                    queue.scheduler.type, queue.scheduler.weight)
            if queue.wred and queue.wred.ecn == "ecn_all":
                assert (ours.queues[q].wred.green_min_threshold_bytes, ours.queues[q].wred.green_max_threshold_bytes) \
                    == (queue.wred.green_min_threshold_bytes, queue.wred.green_max_threshold_bytes)


def test_eos_routing_follows_the_topology() -> None:
    lab = nos_lab()
    text = eos_startup_config(lab, lab.fabric.node("spine2"))
    interface = text[text.index("interface Ethernet1\n"):text.index("interface Ethernet2\n")]
    for line in ("   description leaf1:eth4", "   no switchport", "   mac-address 0252.4c00.0201",
                 "   ip address 198.18.0.3/31", "   mtu 9100", "   priority-flow-control priority 3 no-drop"):
        assert f"\n{line}\n" in interface
    assert text.count("interface Ethernet1\n") == 1  # one block: a second would replace the first
    assert "arp 198.18.0.2 0252.4c00.0304 arpa\n" in text
    assert "ip route 198.19.3.0/24 198.18.0.6\n" in text
    assert "router bgp 65102\n   router-id 198.19.0.2\n" in text
    assert "neighbor" not in text
    assert text.endswith("!\nend\n")


def test_eos_ecmp_routes_are_one_line_per_next_hop(tmp_path) -> None:
    lab = all_nos_lab(tmp_path)
    text = eos_startup_config(lab, lab.fabric.node("leaf2"))
    assert re.findall(r"^ip route 198\.19\.1\.0/24 (\S+)$", text, re.M) == ["198.18.0.5", "198.18.0.7"]


def test_a_profile_eos_cannot_express_is_a_clear_error(tmp_path) -> None:
    doc = json.loads((ROOT / "profiles" / "roce-lossless.json").read_text())
    for entry in doc["PFC_WD"].values():
        entry["action"] = "alert"
    path = tmp_path / "alert.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as info:
        startup_configs(nos_lab(path))
    assert "cannot configure arista_ceos switch spine2: EOS's PFC watchdog has no 'alert' action" in str(info.value)
    assert "hint: make spine2 kind sonic-vs" in str(info.value)


# ---------------------------------------------------------------- eBGP


def _sessions(lab: Lab, tmp_path: Path) -> dict[str, tuple[int, dict[str, int]]]:
    """Per NOS switch, from its rendered file: (its ASN, {peer address: peer ASN})."""
    out = {}
    for node, path in written(lab, tmp_path).items():
        text = path.read_text()
        if path.suffix == ".json":
            doc = json.loads(text)
            out[node] = (int(doc["DEVICE_METADATA"]["localhost"]["bgp_asn"]),
                         {peer: int(n["asn"]) for peer, n in doc.get("BGP_NEIGHBOR", {}).items()})
        else:
            neighbors = re.findall(r"^   neighbor (\S+) remote-as (\d+)$", text, re.M)
            out[node] = (int(re.search(r"^router bgp (\d+)$", text, re.M).group(1)),
                         {peer: int(asn) for peer, asn in neighbors})
    return out


def test_bgp_neighbours_agree_on_both_ends_of_every_nos_link(tmp_path) -> None:
    lab = all_nos_lab(tmp_path)
    fabric = lab.fabric
    sessions = _sessions(lab, tmp_path)
    assert set(sessions) == {"spine1", "spine2", "leaf1", "leaf2"}
    switch_links = [link for link in fabric.links if link.kind == "fabric"]
    assert len(switch_links) == 4
    for link in switch_links:
        (asn_a, peers_a), (asn_b, peers_b) = sessions[link.a.node], sessions[link.b.node]
        assert peers_a[str(link.b.address.ip)] == asn_b
        assert peers_b[str(link.a.address.ip)] == asn_a
    assert sum(len(peers) for _, peers in sessions.values()) == 2 * len(switch_links)
    asns = [asn for asn, _ in sessions.values()]
    assert len(set(asns)) == len(asns) and all(64512 <= asn <= 65534 for asn in asns)
    spine1 = json.loads((tmp_path / "spine1.config_db.json").read_text())["BGP_NEIGHBOR"]
    assert spine1["198.18.0.0"]["local_addr"] == "198.18.0.1" and spine1["198.18.0.0"]["name"] == "leaf1"


def test_asns_and_loopbacks_are_deterministic_and_clash_with_nothing(tmp_path) -> None:
    fabric = all_nos_lab(tmp_path).fabric
    assert [switch_asn(fabric, n.name) for n in fabric.switches] == [65101, 65102, 65103, 65104]
    loopbacks = [loopback(fabric, n.name) for n in fabric.switches]
    assert [str(lo) for lo in loopbacks] == ["198.19.0.1/32", "198.19.0.2/32", "198.19.0.3/32", "198.19.0.4/32"]
    subnets = {p.address.network for n in fabric.nodes for p in n.ports}
    assert all(lo.ip in LOOPBACKS and not any(lo.ip in net for net in subnets) for lo in loopbacks)
    assert all(lo.ip in ipaddress.IPv4Network("198.18.0.0/15") for lo in loopbacks)
