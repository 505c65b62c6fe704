"""config_db → FRR: the BGP reader, the rendering in SONiC's shape, and the generated design."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from rocelab import paths
from rocelab.engines import frr
from rocelab.errors import InputError
from rocelab.model.lab import load_lab
from rocelab.model.topology import load_topology
from rocelab.reporting.status import routing_lines
from rocelab.routing import design
from rocelab.routing.design import lab_bgp
from rocelab.routing.bgp import Bfd, has_bgp, read_bgp, read_constants
from rocelab.routing.frr import PEER_GROUP, render, render_bgpd, runs_bfd
from rocelab.engines.netns import fib_routes_per_s
from rocelab.switch.fib import SONIC_FIB_ROUTES_PER_S, Fib, FibProgramming, NextHop, changed_routes

DOC = {
    "DEVICE_METADATA": {"localhost": {"hostname": "leaf1", "bgp_asn": "65001", "type": "ToRRouter"}},
    "LOOPBACK_INTERFACE": {"Loopback0": {}, "Loopback0|10.1.0.1/32": {}, "Loopback0|fc00:1::32/128": {}},
    "INTERFACE": {"Ethernet0": {}, "Ethernet0|10.0.0.0/31": {}, "Ethernet4|10.0.0.2/31": {},
                  "Ethernet8|192.168.1.1/24": {}},
    "BGP_NEIGHBOR": {
        "10.0.0.1": {"asn": "65100", "name": "spine1", "local_addr": "10.0.0.0", "holdtime": "9", "keepalive": "3",
                     "bfd": "true"},
        "default|10.0.0.3": {"asn": "65200", "name": "spine2", "local_addr": "10.0.0.2", "admin_status": "down",
                             "bfd": "true", "bfd_detect_multiplier": "5", "bfd_min_rx": "300", "bfd_min_tx": "300"},
        "fc00::2": {"asn": "65100", "name": "spine1-v6"},
    },
}


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("!")]


def block(text: str, first: str) -> list[str]:
    """The lines of one neighbor's stanza, from its remote-as to its exit-address-family."""
    rows = lines(text)
    start = rows.index(first)
    return rows[start:rows.index("exit-address-family", start) + 1]


def test_a_neighbor_renders_as_sonics_general_instance_template():
    # The shape of sonic-bgpcfgd's own sample (tests/data/general/instance.conf, bfd_timers):
    # remote-as, description, connect timer, bfd with its three timers, then the IPv4 family.
    doc = {"DEVICE_METADATA": {"localhost": {"bgp_asn": "65500"}},
           "BGP_NEIGHBOR": {"10.10.10.10": {"asn": "555", "name": "remote_peer", "bfd": "true",
                                            "bfd_detect_multiplier": "5", "bfd_min_rx": "300", "bfd_min_tx": "300"}}}
    assert block(render_bgpd(read_bgp(doc, "t.json")), "neighbor 10.10.10.10 remote-as 555") == [
        "neighbor 10.10.10.10 remote-as 555",
        "neighbor 10.10.10.10 description remote_peer",
        "neighbor 10.10.10.10 timers connect 10",
        "neighbor 10.10.10.10 bfd 5 300 300",
        "address-family ipv4",
        "neighbor 10.10.10.10 peer-group PEER_V4",
        "neighbor 10.10.10.10 activate",
        "exit-address-family",
    ]


def test_an_unnumbered_session_renders_as_frr_s_interface_neighbor():
    from rocelab.routing.nvue import read_nvue_bgp

    text = "\n".join(["nv set interface lo ip address 10.10.10.9/32",
                      "nv set router bgp autonomous-system 65109",
                      "nv set vrf default router bgp neighbor swp3 peer-group spines",
                      "nv set vrf default router bgp neighbor swp3 type unnumbered",
                      "nv set vrf default router bgp peer-group spines remote-as external",
                      "nv set vrf default router bgp peer-group spines bfd enable on"])
    config = read_nvue_bgp(text, "leaf9.nvue", "leaf9")
    bgpd = render_bgpd(config)
    assert block(bgpd, "neighbor swp3 interface remote-as external") == [
        "neighbor swp3 interface remote-as external",
        "neighbor swp3 timers 3 9",  # Cumulus's datacenter timers, explicit: the file is rendered `traditional`
        "neighbor swp3 timers connect 10",
        "neighbor swp3 bfd",
        "address-family ipv4",
        "neighbor swp3 peer-group PEER_V4",
        "neighbor swp3 activate",
        "exit-address-family",
    ]
    # the loopback NVUE puts on lo is the router-id and the loopback's prefix-list
    assert "bgp router-id 10.10.10.9" in lines(bgpd)
    assert "ip prefix-list PL_LoopbackV4 permit 10.10.10.9/32" in lines(bgpd)


def test_router_bgp_carries_sonics_init_block_and_constants():
    text = render_bgpd(read_bgp(DOC, "leaf1.json"))
    rows = lines(text)
    assert rows[rows.index("router bgp 65001") + 1:][:6] == [
        "bgp log-neighbor-changes", "bgp suppress-fib-pending", "no bgp default ipv4-unicast",
        "no bgp ebgp-requires-policy", "bgp bestpath as-path multipath-relax", "bgp router-id 10.1.0.1"]
    # Loopback0 and the subnet with no BGP neighbor in it (the servers'), never the /31s.
    assert [r for r in rows if r.startswith("network ")] == ["network 10.1.0.1/32", "network 192.168.1.0/24"]
    # constants.yml's 514, as wide as Debian's FRR takes.
    assert "maximum-paths 256" in rows
    assert "hostname leaf1" in rows


def test_neighbor_fields_timers_bfd_and_admin_status():
    config = read_bgp(DOC, "leaf1.json")
    by = {n.address: n for n in config.neighbors}
    assert set(by) == {"10.0.0.1", "10.0.0.3"}  # the IPv6 neighbor is noted, not rendered
    assert by["10.0.0.1"].bfd == Bfd() and by["10.0.0.3"].bfd == Bfd(5, 300, 300)
    text = render_bgpd(config)
    assert block(text, "neighbor 10.0.0.1 remote-as 65100")[2] == "neighbor 10.0.0.1 timers 3 9"
    spine2 = block(text, "neighbor 10.0.0.3 remote-as 65200")
    assert "neighbor 10.0.0.3 shutdown" in spine2 and not any("timers 60" in r for r in spine2)
    assert runs_bfd(config)


def test_what_is_not_rendered_is_said():
    notes = "\n".join(read_bgp(DOC, "leaf1.json").notes)
    assert "fc00::2" in notes and "IPv6" in notes
    assert "Loopback0|fc00:1::32/128" in notes
    assert "DEVICE_METADATA.localhost.type" in notes


def test_default_bgp_status_down_shuts_neighbors_without_their_own_status():
    doc = copy.deepcopy(DOC)
    doc["DEVICE_METADATA"]["localhost"]["default_bgp_status"] = "down"
    doc["BGP_NEIGHBOR"]["default|10.0.0.3"]["admin_status"] = "up"
    by = {n.address: n.shutdown for n in read_bgp(doc, "leaf1.json").neighbors}
    assert by == {"10.0.0.1": True, "10.0.0.3": False}


def test_constants_without_multipath_relax_leave_it_out():
    text = render_bgpd(read_bgp(DOC, "leaf1.json", constants={"multipath_relax": False, "maximum_paths": 1}))
    assert "bgp bestpath as-path multipath-relax" not in lines(text)
    assert "maximum-paths 1" in lines(text)


def test_peer_range_renders_as_the_dynamic_template():
    doc = copy.deepcopy(DOC)
    doc["BGP_PEER_RANGE"] = {"BGPSLBPassive": {"name": "BGPSLBPassive", "ip_range": ["10.255.0.0/25", "10.255.1.0/25"],
                                               "peer_asn": "65432", "src_address": "10.1.0.1"}}
    rows = lines(render_bgpd(read_bgp(doc, "leaf1.json")))
    for row in ("neighbor BGPSLBPassive peer-group", "neighbor BGPSLBPassive passive",
                "neighbor BGPSLBPassive remote-as 65432", "bgp listen range 10.255.0.0/25 peer-group BGPSLBPassive",
                "bgp listen range 10.255.1.0/25 peer-group BGPSLBPassive",
                "neighbor BGPSLBPassive update-source 10.1.0.1", "route-map FROM_BGP_SPEAKER permit 100"):
        assert row in rows


@pytest.mark.parametrize("change, where, expected", [
    (lambda d: d["DEVICE_METADATA"]["localhost"].update(bgp_asn="sixty"), "DEVICE_METADATA.localhost.bgp_asn",
     "is not an AS number"),
    (lambda d: d["BGP_NEIGHBOR"]["10.0.0.1"].pop("asn"), 'BGP_NEIGHBOR."10.0.0.1"', "has no asn"),
    (lambda d: d["BGP_NEIGHBOR"]["10.0.0.1"].update(holdtime="nine"), 'BGP_NEIGHBOR."10.0.0.1".holdtime',
     "is not a number of seconds"),
    (lambda d: d["BGP_NEIGHBOR"].update({"10.0.0.x": {"asn": "1"}}), 'BGP_NEIGHBOR."10.0.0.x"', "is not an IP address"),
    (lambda d: d["DEVICE_METADATA"]["localhost"].update(bgp_router_id="r1"), "DEVICE_METADATA.localhost.bgp_router_id",
     "is not an IPv4 address"),
])
def test_bad_fields_are_input_errors_naming_file_and_field(change, where, expected):
    doc = copy.deepcopy(DOC)
    change(doc)
    with pytest.raises(InputError) as caught:
        read_bgp(doc, "leaf1.json")
    assert any(p.file == "leaf1.json" and p.path == where and expected in p.message for p in caught.value.problems)


def test_a_config_db_without_bgp_asn_has_no_bgp():
    assert not has_bgp({"DEVICE_METADATA": {"localhost": {"bgp_asn": "None"}}})
    assert not has_bgp({})
    assert has_bgp(DOC)


def test_generated_design_on_a_two_by_two():
    fabric = load_topology(paths.topologies_dir() / "leaf-spine-2x2.yml")
    configs = {n.name: read_bgp(design.generated(fabric, n), "generated", n.name) for n in fabric.switches}
    leaves = [configs["leaf1"], configs["leaf2"]]
    spines = [configs["spine1"], configs["spine2"]]
    # A private ASN per leaf, one for the spine tier.
    assert leaves[0].asn != leaves[1].asn and spines[0].asn == spines[1].asn
    assert all(64512 <= c.asn <= 65534 for c in configs.values())
    # eBGP on every fabric /31, BFD on every session, 3/9 timers.
    for name, config in configs.items():
        peers = {n.name for n in config.neighbors}
        assert peers == ({"spine1", "spine2"} if name.startswith("leaf") else {"leaf1", "leaf2"})
        assert all(n.bfd and (n.keepalive_s, n.holdtime_s) == (3, 9) for n in config.neighbors)
        assert config.multipath_relax and config.maximum_paths >= 2
    # Each leaf advertises its loopback and its hosts' subnets; a spine only its loopback.
    assert configs["leaf1"].networks[1:] == ("198.19.1.0/24", "198.19.2.0/24")
    assert len(spines[0].networks) == 1 and spines[0].networks[0].startswith("198.19.0.")
    assert len({c.router_id for c in configs.values()}) == 4
    # Every neighbor's address is its peer's end of the /31.
    leaf1 = fabric.node("leaf1")
    assert {n.address for n in configs["leaf1"].neighbors} == {
        str(fabric.peer(p).address.ip) for p in leaf1.ports if fabric.peer(p).node.startswith("spine")}
    files = render(configs["leaf1"])
    assert set(files) == {"zebra.conf", "bgpd.conf", "bgpd.boot.conf", "bfdd.conf"}
    assert all("hostname leaf1" in text for text in files.values())
    # bgpd starts with no coalesce time (FRR's 1 s would hold each hop's first advertisement at
    # `up`); FINISH_BOOT, typed once converged, makes it bgpd.conf's: the files differ in that line.
    rendered, boot = files["bgpd.conf"].split("\n"), files["bgpd.boot.conf"].split("\n")
    assert [line for line in boot if line != "  coalesce-time 0"] == rendered
    assert boot.index("  coalesce-time 0") < boot.index("  neighbor PEER_V4 peer-group")  # router bgp's own


# --- the lab's choice, the front door, the engine's prerequisites


def test_a_lab_chooses_static_or_bgp_and_nothing_else(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\n")
    assert (load_lab("l1").routing, load_lab("l1").routing_how) == ("bgp", "default")
    assert (load_lab("leaf-spine-2x2").routing, load_lab("leaf-spine-2x2").routing_how) == ("bgp", "default")
    lab_home.write_text("topology: leaf-spine-2x2\nrouting: static\n")
    assert (load_lab("l1").routing, load_lab("l1").routing_how) == ("static", "lab")
    lab_home.write_text("topology: leaf-spine-2x2\nrouting: bgp\n")
    assert (load_lab("l1").routing, load_lab("l1").routing_how) == ("bgp", "lab")
    lab_home.write_text("topology: leaf-spine-2x2\nrouting: ospf\n")
    with pytest.raises(InputError) as caught:
        load_lab("l1")
    (problem,) = caught.value.problems
    assert problem.file.endswith("lab.yml") and problem.path == "routing" and "'ospf' is not a routing mode" in problem.message


def test_a_fabric_with_nos_switches_runs_static_routes_and_refuses_bgp(lab_home):
    # the BGP rocelab renders for SONiC-VS and cEOS peers only among them: FRR beside them would wait alone
    assert (load_lab("leaf-spine-2x2-nos").routing, load_lab("leaf-spine-2x2-nos").routing_how) == ("static", "default")
    lab_home.write_text("topology: leaf-spine-2x2-nos\n")
    assert load_lab("l1").routing == "static"
    lab_home.write_text("topology: leaf-spine-2x2-nos\nrouting: bgp\n")
    with pytest.raises(InputError) as caught:
        load_lab("l1")
    (problem,) = caught.value.problems
    assert problem.path == "routing" and "the topology has NOS switches" in problem.message
    assert problem.hint == "routing: static"
    # A BGP design there, the lab's or a case's, is refused the same way, with no `routing: bgp` to try.
    for text, where in (("bgp: {spine_asn: per-spine}\n", "bgp (line 2)"),
                        ("scenario:\n  - {case: a, traffic: elephant, bgp: {multipath_relax: false}}\n",
                         "scenario[0].bgp (line 3)")):
        lab_home.write_text("topology: leaf-spine-2x2-nos\n" + text)
        with pytest.raises(InputError) as caught:
            load_lab("l1")
        (problem,) = caught.value.problems
        assert problem.path == where and "the topology has NOS switches" in problem.message and not problem.hint


def test_fib_programming_is_sonics_on_bgp_at_once_on_static_unless_the_lab_says(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\nrouting: bgp\n")
    assert fib_routes_per_s(load_lab("l1")) == SONIC_FIB_ROUTES_PER_S
    lab_home.write_text("topology: leaf-spine-2x2\nrouting: static\n")
    assert fib_routes_per_s(load_lab("l1")) is None
    lab_home.write_text("topology: leaf-spine-2x2\nrouting: bgp\nfib_routes_per_s: 0\n")
    assert fib_routes_per_s(load_lab("l1")) is None
    lab_home.write_text("topology: leaf-spine-2x2\nfib_routes_per_s: 500\n")
    assert fib_routes_per_s(load_lab("l1")) == 500
    lab_home.write_text("topology: leaf-spine-2x2\nfib_routes_per_s: fast\n")
    with pytest.raises(InputError) as caught:
        load_lab("l1")
    assert caught.value.problems[0].path == "fib_routes_per_s"


def test_a_labs_bgp_design_numbers_each_spine_and_a_case_takes_multipath_relax_away(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\nrouting: bgp\nbgp: {spine_asn: per-spine}\n"
                        "scenario:\n  - {case: a, traffic: elephant}\n"
                        "  - {case: b, traffic: elephant, bgp: {multipath_relax: false, maximum_paths: 4}}\n")
    lab = load_lab("l1")
    configs = {name: config for name, (config, _) in lab_bgp(lab).items()}
    assert {how for _, how in lab_bgp(lab).values()} == {design.description(per_spine=True)}
    assert "one per spine" in design.description(per_spine=True)
    assert configs["spine1"].asn != configs["spine2"].asn
    assert {configs["spine1"].asn, configs["spine2"].asn}.isdisjoint({configs["leaf1"].asn, configs["leaf2"].asn})
    # each leaf's sessions name each spine's own AS
    assert {n.name: n.asn for n in configs["leaf1"].neighbors} == {"spine1": configs["spine1"].asn,
                                                                   "spine2": configs["spine2"].asn}
    assert all(c.multipath_relax for c in configs.values())
    case = {name: pair for name, pair in lab_bgp(lab, lab.scenario.cases[1].bgp).items()}
    assert all(not c.multipath_relax and c.maximum_paths == 4 for c, _ in case.values())
    assert case["spine1"][0].asn == configs["spine1"].asn  # the lab's numbering under the case's change
    assert "multipath-relax" not in render_bgpd(case["leaf1"][0]) and "maximum-paths 4" in render_bgpd(case["leaf1"][0])
    assert "multipath_relax false" in case["leaf1"][1]


@pytest.mark.parametrize("text, where, expected", [
    ("routing: bgp\nbgp: {spine_asn: each}\n", "bgp.spine_asn (line 3)", "'each' is not a spine numbering"),
    ("routing: bgp\nbgp: {multipath_relax: maybe}\n", "bgp.multipath_relax (line 3)", "'maybe' is not true or false"),
    ("routing: bgp\nbgp: {maximum_paths: 0}\n", "bgp.maximum_paths (line 3)", "0 is not a number of paths"),
    ("routing: bgp\nbgp: {paths: 2}\n", "bgp.paths (line 3)", "unknown key 'paths'"),
    ("routing: bgp\nbgp: per-spine\n", "bgp (line 3)", "is not a mapping of BGP design settings"),
    ("routing: static\nbgp: {spine_asn: per-spine}\n", "bgp (line 3)", "sets the BGP design of a lab without BGP"),
    ("routing: static\nscenario:\n  - {case: a, traffic: elephant, bgp: {multipath_relax: false}}\n",
     "scenario[0].bgp (line 4)", "sets the BGP design of a case in a lab without BGP"),
    ("routing: bgp\nscenario:\n  - {case: a, traffic: elephant, bgp: {multipath_relax: 2}}\n",
     "scenario[0].bgp.multipath_relax (line 4)", "2 is not true or false"),
])
def test_a_bad_bgp_design_is_an_input_error_naming_its_key(lab_home, text, where, expected):
    lab_home.write_text("topology: leaf-spine-2x2\n" + text)
    with pytest.raises(InputError) as caught:
        load_lab("l1")
    (problem,) = caught.value.problems
    assert problem.file.endswith("lab.yml") and problem.path == where and expected in problem.message


def test_a_switch_whose_profile_sets_bgp_asn_is_rendered_from_it_the_others_get_the_design(lab_home):
    profile = copy.deepcopy(DOC)
    (lab_home.parent / "mine.json").write_text(json.dumps(profile))
    lab_home.write_text("topology: leaf-spine-2x2\nrouting: bgp\nprofile: mine\n")
    configs = lab_bgp(load_lab("l1"))
    assert all(how.startswith("from ") and how.endswith("mine.json") for _, how in configs.values())
    assert configs["spine1"][0].asn == 65001  # as the profile says, for every switch that uses it
    profile["DEVICE_METADATA"]["localhost"]["bgp_asn"] = "none"
    (lab_home.parent / "mine.json").write_text(json.dumps(profile))
    configs = lab_bgp(load_lab("l1"))
    assert {how for _, how in configs.values()} == {design.description(per_spine=False)}
    # An AS number and no session: the design, said so.
    (lab_home.parent / "mine.json").write_text(json.dumps({**profile, "DEVICE_METADATA": DOC["DEVICE_METADATA"],
                                                           "BGP_NEIGHBOR": {}}))
    configs = lab_bgp(load_lab("l1"))
    assert all(how.startswith(design.description(per_spine=False)) and "sets bgp_asn but no BGP_NEIGHBOR" in how
               for _, how in configs.values())
    profile["DEVICE_METADATA"]["localhost"]["bgp_asn"] = "65x"
    (lab_home.parent / "mine.json").write_text(json.dumps(profile))
    with pytest.raises(InputError) as caught:
        lab_bgp(load_lab("l1"))
    assert caught.value.problems[0].file.endswith("mine.json")


def test_a_cumulus_leaf_in_profiles_runs_its_own_unnumbered_bgp_and_the_spines_meet_it(lab_home):
    from pathlib import Path

    nv_config = Path(__file__).resolve().parents[2] / "examples" / "fabric-bgp-cumulus" / "leaf1" / "nv-config.yml"
    (lab_home.parent / "leaf1.yml").write_text(nv_config.read_text())
    lab_home.write_text("topology: leaf-spine-2x2\nrouting: bgp\nprofiles:\n  leaf1:\n    cumulus: leaf1.yml\n"
                        "    buffer: {pool_size_bytes: 12MiB, dynamic_th: -5, xoff_bytes: 56KiB}\n")
    configs = lab_bgp(load_lab("l1"))
    leaf1, how = configs["leaf1"]
    assert how.endswith("leaf1.yml") and leaf1.asn == 65101
    assert [(n.address, n.unnumbered, n.asn) for n in leaf1.neighbors] == [("eth3", True, "external"),
                                                                             ("eth4", True, "external")]
    # each spine peers with leaf1 on its own port to it, unnumbered, expecting leaf1's AS; with
    # leaf2 as the design has it
    spine1, how = configs["spine1"]
    assert [(n.address, n.unnumbered, n.asn) for n in spine1.neighbors] == [
        ("eth1", True, 65101), ("198.18.0.4", False, configs["leaf2"][0].asn)]
    assert how.endswith("toward leaf1: their AS, their kind of session")
    assert configs["leaf2"][1] == design.description(per_spine=False)  # no session to leaf1: as generated

    # a session on a port leaf-spine-2x2 does not give leaf1
    (lab_home.parent / "leaf1.yml").write_text(nv_config.read_text().replace("swp4:", "swp9:"))
    with pytest.raises(InputError) as caught:
        lab_bgp(load_lab("l1"))
    (problem,) = caught.value.problems
    assert problem.file.endswith("lab.yml") and problem.path == "profiles.leaf1"
    assert problem.message.endswith("l1/leaf1.yml: leaf1's unnumbered sessions on swp9: no port of the switch in the "
                                    "topology, so FRR has no interface to peer on")


def test_without_frr_up_is_an_input_error_naming_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(frr, "FRR_DAEMONS_DIR", tmp_path)
    with pytest.raises(InputError) as caught:
        frr.require_frr("labs/l1/lab.yml", frr.missing())
    (problem,) = caught.value.problems
    assert "zebra, bgpd, bfdd" in problem.message and "apt-get install frr" in problem.hint


def test_every_daemon_has_its_own_sockets_and_files_in_the_switchs_folder(tmp_path):
    for daemon, config in (("zebra", "zebra.conf"), ("bgpd", "bgpd.boot.conf"), ("bfdd", "bfdd.conf")):
        words = frr.argv(daemon, tmp_path)
        paths_given = [w for w in words if w.startswith(str(tmp_path))]
        assert {f"{tmp_path}/{config}", f"{tmp_path}/{daemon}.pid", str(tmp_path),
                f"{tmp_path}/zserv.api"} <= set(paths_given)
        assert words[words.index("-P") + 1] == "0"  # no TCP vty
    assert "--bfdctl" in frr.argv("bfdd", tmp_path)


def test_the_words_after_double_dash_reach_the_task_as_the_shell_gave_them():
    from rocelab.frontdoor import remainder_argv

    argv = ["invoke", "exec", "leaf1", "--", "vtysh", "-c", "show ip bgp summary"]
    # invoke's own remainder is the words joined with spaces: "-c"'s argument would split in four.
    assert remainder_argv("vtysh -c show ip bgp summary", argv) == ["vtysh", "-c", "show ip bgp summary"]
    assert remainder_argv("ip -br 'a b'", ["rocelab", "exec", "h1"]) == ["ip", "-br", "a b"]


def test_status_says_how_each_switch_routes():
    assert routing_lines({"mode": "static", "switches": {}}) == ["routing: static (rocelab's ECMP routes)"]
    lines_ = routing_lines({"mode": "bgp", "switches": {
        "leaf1": {"how": "generated", "notes": []}, "leaf2": {"how": "generated", "notes": []},
        "spine1": {"how": "from p.json", "notes": ["BGP_NEIGHBOR.\"fc00::2\": ignored (IPv6)"]}}})
    assert lines_ == ["routing: bgp (FRR) on leaf1, leaf2: generated", "routing: bgp (FRR) on spine1: from p.json",
                      'spine1: BGP_NEIGHBOR."fc00::2": ignored (IPv6)']
    assert routing_lines({"mode": "static", "switches": {}, "fib_routes_per_s": 10500.0})[1] == \
        "FIB changes programmed at 10,500 routes/s of production time"
    narrower = routing_lines({"mode": "bgp", "switches": {"leaf1": {"how": "from leaf1.json", "notes": []}},
                              "narrower": ["leaf1 198.19.3.0/24 (1 of 2 next hops)"]})
    assert narrower[1] == ("BGP settled on fewer next hops than the fabric's equal-cost paths: "
                           "leaf1 198.19.3.0/24 (1 of 2 next hops)")


# --- the ASIC's FIB programming time, in emulated time


def fib(**routes: list[str]) -> Fib:
    return Fib({prefix.replace("_", "."): tuple(NextHop(p, "02:00:00:00:00:01") for p in ports)
                for prefix, ports in routes.items()})


def test_changed_routes_counts_added_removed_and_rerouted():
    old = fib(**{"10_0_1_0/24": ["eth3", "eth4"], "10_0_2_0/24": ["eth3", "eth4"], "10_0_3_0/24": ["eth4"]})
    new = fib(**{"10_0_1_0/24": ["eth4", "eth3"], "10_0_2_0/24": ["eth4"], "10_0_4_0/24": ["eth4"]})
    assert changed_routes(old, new) == 3  # .2 rerouted, .3 removed, .4 added; .1 the same set
    assert changed_routes(new, new) == 0


def test_a_fib_change_is_programmed_after_its_routes_time_dilated_and_in_order():
    start = fib(**{"10_0_1_0/24": ["eth3", "eth4"], "10_0_2_0/24": ["eth3", "eth4"]})
    programming = FibProgramming(routes_per_s=1000.0, tdf=100.0, programmed=start)
    shrunk = fib(**{"10_0_1_0/24": ["eth4"], "10_0_2_0/24": ["eth4"]})
    # 2 routes at 1000 a second: 2 ms of production time, 0.2 s at TDF 100.
    assert programming.submit(shrunk, now=10.0) == pytest.approx(10.2)
    back = start
    assert programming.submit(back, now=10.1) == pytest.approx(10.4)  # behind the first
    assert programming.due(10.19) is None and programming.programmed == start
    assert programming.due(10.2) == shrunk and programming.programmed == shrunk
    assert programming.due(10.5) == back and not programming.pending
    # A change that changes no route takes no time.
    assert programming.submit(back, now=11.0) == 11.0


def test_a_dark_far_end_is_seen_down_after_the_detection_time_and_a_port_shut_here_at_once():
    from rocelab.switch.fib import SignalLoss

    signal = SignalLoss(detect_s=2.0)  # 2 ms of production time at TDF 1000
    signal.update(frozenset({"eth1", "eth3"}), shut=frozenset({"eth3"}), now=10.0)  # eth1's far end went dark
    assert signal.held(10.0) == {"eth3"} and signal.dark(10.0) == {"eth1"} and signal.next_due(10.0) == 12.0
    signal.update(frozenset({"eth1", "eth3"}), shut=frozenset({"eth3"}), now=11.0)  # another event: the clock runs on
    assert signal.held(11.99) == {"eth3"} and signal.next_due(11.99) == 12.0
    assert signal.held(12.0) == {"eth1", "eth3"} and signal.dark(12.0) == set() and signal.next_due(12.0) is None
    signal.update(frozenset(), shut=frozenset(), now=13.0)  # both back: nothing held, nothing pending
    assert signal.held(13.0) == set() and signal.next_due(13.0) is None
    signal.update(frozenset({"eth1"}), shut=frozenset(), now=14.0)  # dark again: a new detection
    assert signal.dark(15.0) == {"eth1"} and signal.held(16.0) == {"eth1"}
    assert SignalLoss(0.0).held(0.0) == set()
    at_once = SignalLoss(0.0)
    at_once.update(frozenset({"eth1"}), shut=frozenset(), now=5.0)
    assert at_once.held(5.0) == {"eth1"} and at_once.next_due(5.0) is None


def test_a_down_link_leaves_every_route_and_ecmp_group_at_once():
    from rocelab.switch.fib import without_ports

    spine1, spine2 = NextHop("eth3", "02:00:00:00:00:01"), NextHop("eth4", "02:00:00:00:00:02")
    fib = Fib({"198.19.3.0/24": [spine1, spine2], "198.18.0.1/32": [spine1]}, frozenset({"198.18.0.0"}))
    pruned = without_ports(fib, frozenset({"eth3"}))
    assert pruned.routes == {"198.19.3.0/24": [spine2]} and pruned.local == fib.local
    assert without_ports(fib, frozenset()) is fib


def test_a_vlan_is_advertised_as_sonic_writes_it_unless_it_is_in_a_vnet():
    doc = {"DEVICE_METADATA": {"localhost": {"bgp_asn": "65001"}},
           "VLAN_INTERFACE": {"Vlan10|10.10.10.1/24": {}, "Vlan20": {"vnet_name": "Vnet1"}, "Vlan20|20.20.20.1/24": {}},
           "BGP_DEVICE_GLOBAL": {"CONFED": {"asn": "65000", "peers": "65001;65002"}}}
    config = read_bgp(doc, "t.json")
    assert config.networks == ("10.10.10.1/24",)  # bgpd masks it: its running configuration shows 10.10.10.0/24
    assert 'VLAN_INTERFACE."Vlan20|20.20.20.1/24": not advertised (Vlan20 is in VNET Vnet1, as SONiC leaves it)' \
        in config.notes
    assert "BGP_DEVICE_GLOBAL.CONFED: ignored (rocelab renders no BGP confederation)" in config.notes


# --- against SONiC's own renderings: sonic-bgpcfgd's template tests (src/sonic-bgpcfgd/tests/data
# of a sonic-buildimage checkout), each an input and the file SONiC renders from it

BGPCFGD_DATA = os.environ.get("ROCELAB_SONIC_BGPCFGD_DATA") or next(
    (str(p) for p in [Path(c).parents[3] / "src" / "sonic-bgpcfgd" / "tests" / "data"
                      for c in [os.environ.get("ROCELAB_SONIC_CORPUS")] if c and len(Path(c).parents) > 3]
     if p.is_dir()), None)
NO_BGPCFGD_DATA = ("set ROCELAB_SONIC_BGPCFGD_DATA to a copy of sonic-buildimage's src/sonic-bgpcfgd/tests/data "
                   "(or ROCELAB_SONIC_CORPUS to the sample outputs of a checkout that has it)")
# What rocelab renders from DEVICE_METADATA alone, as a single-ASIC switch: a chassis or
# multi-ASIC device names its router from Loopback4096, which rocelab leaves out and says so.
CHASSIS = {"switch_type": ("voq", "chassis-packet"), "sub_role": ("BackEnd",)}


def pairs(folder: Path, inputs: str, rendered: str) -> list[tuple[Path, Path]]:
    found = [(i, i.with_name(rendered.format(i.stem.removeprefix("param_")))) for i in sorted(folder.glob(inputs))]
    return [(i, r) for i, r in found if r.is_file()]


@pytest.mark.skipif(not BGPCFGD_DATA, reason=NO_BGPCFGD_DATA)
def test_every_neighbor_sample_renders_as_sonic_renders_it_or_says_what_it_leaves_out():
    samples = pairs(Path(BGPCFGD_DATA) / "general" / "instance.conf", "param_*.json", "result_{}.conf")
    assert samples, f"{BGPCFGD_DATA} holds no general/instance.conf samples"
    same = []
    for param, result in samples:
        given = json.loads(param.read_text())
        localhost = {**given.get("CONFIG_DB__DEVICE_METADATA", {}).get("localhost", {}), "bgp_asn": "65500"}
        address = given["neighbor_addr"]
        config = read_bgp({"DEVICE_METADATA": {"localhost": localhost},
                           "BGP_NEIGHBOR": {address: given["bgp_session"]}}, param.name)
        theirs = lines(result.read_text())
        rendered = render_bgpd(config)
        first = next((row for row in lines(rendered) if row.startswith(f"neighbor {address} ") and "remote-as" in row),
                     None)
        mine = block(rendered, first) if first else []
        if mine == theirs:
            same.append(param.name)
        else:  # left out, and said: IPv6 sessions, other address families
            assert config.notes and theirs[:len(mine)] == mine, (param.name, mine, theirs, config.notes)
    assert same, "no sample rendered as SONiC renders it"


@pytest.mark.skipif(not BGPCFGD_DATA, reason=NO_BGPCFGD_DATA)
def test_every_router_bgp_sample_holds_what_rocelab_renders_in_sonics_order():
    samples = pairs(Path(BGPCFGD_DATA) / "sonic-cfggen" / "bgpd.main.conf.j2", "*.json", "{}.conf")
    assert samples, f"{BGPCFGD_DATA} holds no sonic-cfggen/bgpd.main.conf.j2 samples"
    for given_file, rendered in samples:
        given = json.loads(given_file.read_text())
        config = read_bgp(given, given_file.name, constants=read_constants(given, given_file.name))
        ours = lines(render_bgpd(config))
        ours = ours[ours.index(f"router bgp {config.asn}"):ours.index(f"neighbor {PEER_GROUP} peer-group")]
        localhost = given["DEVICE_METADATA"]["localhost"]
        if any(localhost.get(key) in values for key, values in CHASSIS.items()):
            assert any("switch_type" in n or "sub_role" in n for n in config.notes)
            ours = [row for row in ours if not row.startswith("bgp router-id")]
        theirs = iter(lines(rendered.read_text()))
        assert all(row in theirs for row in ours), (given_file.name, ours, lines(rendered.read_text()))
