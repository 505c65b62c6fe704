"""The static BGP checks on EOS and Cumulus devices: examples/fabric-bgp-eos and
examples/fabric-bgp-cumulus (every check passes), their -broken copies (one seeded defect per
check), and the two readers (rocelab.routing.eos, rocelab.routing.nvue) on edited copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.fabric.bgplint import BGP_CHECKS
from rocelab.fabric.spec import load_fabric_spec
from rocelab.routing.eos import read_eos_bgp
from rocelab.routing.nvue import read_nvue_bgp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SWITCHES = ("spine1", "spine2", "leaf1", "leaf2")


@pytest.fixture
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Copy an example into tmp_path; files are named as the user types them (NAME/…)."""
    monkeypatch.chdir(tmp_path)

    def make(name: str) -> Path:
        shutil.copytree(EXAMPLES / name, tmp_path / name)
        return tmp_path / name

    return make


def findings(fabric: Path) -> dict[str, list[str]]:
    """check[switch] → its findings as the plugin prints them; not-applicable checks are absent."""
    spec = load_fabric_spec(Path(fabric.name))
    return {f"{check.name}[{device.name}]": [str(f) for f in check.run(spec, device)]
            for check in BGP_CHECKS for device in spec.devices.values()
            if check.not_applicable(spec, device) is None}


def failing(fabric: Path) -> dict[str, list[str]]:
    return {name: found for name, found in findings(fabric).items() if found}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("name", ["fabric-bgp-eos", "fabric-bgp-cumulus"])
def test_the_good_examples_pass_every_bgp_check_on_every_switch(copy, name: str):
    fabric = copy(name)
    assert set(findings(fabric)) == {f"{c.name}[{s}]" for c in BGP_CHECKS for s in SWITCHES}
    assert failing(fabric) == {}


# Each seeded defect: check[switch] → where its (first) finding says the value comes from.
BROKEN = {
    "fabric-bgp-eos-broken": {
        "bgp-multipath[spine1]": "fabric-bgp-eos-broken/spine1.cfg: line 87: `no bgp bestpath as-path multipath-relax`",
        "bgp-maximum-paths[spine2]": "fabric-bgp-eos-broken/spine2.cfg: `router bgp 65202` (line 84) has no "
                                     "`maximum-paths` (EOS's default: 1)",
        "bgp-bfd[spine1]": "fabric-bgp-eos-broken/spine1.cfg: line 94: no `neighbor 198.18.0.4 bfd` nor "
                           "`neighbor LEAVES bfd`",
        "bgp-asn[spine2]": "fabric-bgp-eos-broken/spine2.cfg: line 90: `neighbor 198.18.0.6 remote-as 65101`; "
                           "fabric-bgp-eos-broken/leaf2/config_db.json: DEVICE_METADATA.localhost.bgp_asn"},
    "fabric-bgp-cumulus-broken": {
        "bgp-multipath[leaf1]": "fabric-bgp-cumulus-broken/leaf1/nv-config.yml: no `vrf default router bgp "
                                "path-selection multipath aspath-ignore` (Cumulus's default: off)",
        "bgp-maximum-paths[spine2]": "fabric-bgp-cumulus-broken/spine2.nvue: line 18: "
                                     "`nv set vrf default router bgp address-family ipv4-unicast multipaths ebgp 1`",
        "bgp-bfd[leaf2]": "fabric-bgp-cumulus-broken/leaf2.nvue: line 28: neighbor swp4 has no `bfd enable on`, "
                          "nor its peer group spines",
        # spine1 put in leaf1's AS: both unnumbered `remote-as external` sessions of that link fail
        "bgp-asn[leaf1]": "fabric-bgp-cumulus-broken/leaf1/nv-config.yml: set.vrf.default.router.bgp.peer-group."
                          "spines.remote-as (line 81): `vrf default router bgp peer-group spines remote-as external`; "
                          "fabric-bgp-cumulus-broken/spine1/nv-config.yml: set.router.bgp.autonomous-system "
                          "(line 40): `router bgp autonomous-system 65101`",
        "bgp-asn[spine1]": "fabric-bgp-cumulus-broken/spine1/nv-config.yml: set.vrf.default.router.bgp.peer-group."
                           "leaves.remote-as (line 71): `vrf default router bgp peer-group leaves remote-as external`; "
                           "fabric-bgp-cumulus-broken/leaf1/nv-config.yml: set.router.bgp.autonomous-system "
                           "(line 53): `router bgp autonomous-system 65101`"}}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_seeded_defect_fails_its_check_naming_file_line_and_statement(copy, name: str):
    found = failing(copy(name))
    assert {check: [f.partition("\n    from ")[2] for f in fs] for check, fs in found.items()} == {
        check: [source] for check, source in BROKEN[name].items()}


def test_the_findings_say_what_is_wrong_in_the_file_s_own_words(copy):
    eos, cumulus = failing(copy("fabric-bgp-eos-broken")), failing(copy("fabric-bgp-cumulus-broken"))
    assert eos["bgp-maximum-paths[spine2]"][0].startswith(
        "spine2: fewer next hops per route than there are spines: traffic leaves on a subset of the uplinks: "
        "configured maximum-paths 1; required maximum-paths ≥ 2 (the spines: spine1, spine2)")
    assert eos["bgp-bfd[spine1]"][0].startswith(
        "spine1 Ethernet2 (eth2): the session to leaf2 has no BFD: a silent failure (frames lost, link up) goes "
        "unnoticed until its 9 s hold timer expires: configured bfd off; required `neighbor 198.18.0.4 bfd` "
        "(or on its peer group)")
    assert eos["bgp-asn[spine2]"][0].startswith(
        "spine2 Ethernet2 (eth2): the session to leaf2 expects AS 65101, but leaf2 is AS 65102: the session never "
        "comes up: configured remote-as 65101; required asn 65102 (leaf2's bgp_asn)")
    assert cumulus["bgp-bfd[leaf2]"][0].startswith(
        "leaf2 swp4 (eth4): the session to spine2 has no BFD")
    assert "required `bfd enable on` on the neighbor or its peer group" in cumulus["bgp-bfd[leaf2]"][0]
    assert cumulus["bgp-asn[leaf1]"][0].startswith(
        "leaf1 swp3 (eth3): the session to spine1 is `remote-as external`, but spine1 is in this switch's AS 65101: "
        "the session never comes up: configured remote-as external; required spine1 in an AS other than 65101")
    assert "configured `aspath-ignore` off; required `vrf default router bgp path-selection multipath aspath-ignore on`" \
        in cumulus["bgp-multipath[leaf1]"][0]


def test_unnumbered_sessions_are_matched_by_port_a_missing_or_misplaced_one_is_named(copy):
    fabric = copy("fabric-bgp-cumulus")
    # leaf2's session to spine2 moved from its uplink swp4 to swp2, a server port
    edit(fabric / "leaf2.nvue", "neighbor swp4 peer-group spines\nnv set vrf default router bgp neighbor swp4",
         "neighbor swp2 peer-group spines\nnv set vrf default router bgp neighbor swp2")
    found = failing(fabric)
    assert set(found) == {"bgp-asn[leaf2]"}
    assert [f.split(":")[0] for f in found["bgp-asn[leaf2]"]] == ["leaf2 swp4 (eth4)", "leaf2"]
    assert "no BGP session to spine2 over this link" in found["bgp-asn[leaf2]"][0]
    assert "required a neighbor 198.18.0.7 (the far end's address) or swp4 (unnumbered)" in found["bgp-asn[leaf2]"][0]
    assert "neighbor swp2 is no port of leaf2 cabled to a switch" in found["bgp-asn[leaf2]"][1]


def test_a_link_unnumbered_at_one_end_and_numbered_at_the_other_is_named_at_both(copy):
    fabric = copy("fabric-bgp-cumulus")
    # spine1 peers with leaf1 on leaf1's address (198.18.0.0, eth3's /31) while leaf1 stays unnumbered
    edit(fabric / "spine1" / "nv-config.yml", "              swp1:\n                peer-group: leaves\n"
         "                type: unnumbered\n", "              198.18.0.0:\n                peer-group: leaves\n"
         "                type: numbered\n")
    found = failing(fabric)
    assert set(found) == {"bgp-asn[leaf1]", "bgp-asn[spine1]"}
    assert found["bgp-asn[leaf1]"] == [
        "leaf1 swp3 (eth3): the session to spine1 is unnumbered (on the port's IPv6 link-local address) here and "
        "numbered (on an IPv4 address) on spine1: the two ends never meet: configured neighbor swp3; required the "
        "same kind of session as spine1's neighbor 198.18.0.0\n    from fabric-bgp-cumulus/leaf1/nv-config.yml: "
        "set.vrf.default.router.bgp.neighbor.swp3.peer-group (line 72); fabric-bgp-cumulus/spine1/nv-config.yml: "
        "set.vrf.default.router.bgp.neighbor.198.18.0.0.peer-group (line 59)"]
    assert found["bgp-asn[spine1]"][0].startswith(
        "spine1 swp1 (eth1): the session to leaf1 is numbered (on an IPv4 address) here and unnumbered")


def test_the_yaml_and_commands_forms_read_alike_and_defaults_are_cumulus_s():
    yaml_text = (EXAMPLES / "fabric-bgp-cumulus" / "leaf1" / "nv-config.yml").read_text()
    commands = "\n".join([
        "nv set router bgp autonomous-system 65101", "nv set router bgp router-id 10.10.10.1",
        "nv set vrf default router bgp address-family ipv4-unicast network 10.10.10.1/32",
        "nv set vrf default router bgp address-family ipv4-unicast network 198.19.1.0/24",
        "nv set vrf default router bgp address-family ipv4-unicast network 198.19.2.0/24",
        "nv set vrf default router bgp neighbor swp3 peer-group spines",
        "nv set vrf default router bgp neighbor swp3 type unnumbered",
        "nv set vrf default router bgp neighbor swp4 peer-group spines",
        "nv set vrf default router bgp neighbor swp4 type unnumbered",
        "nv set vrf default router bgp path-selection multipath aspath-ignore enabled",  # 5.15's word
        "nv set vrf default router bgp peer-group spines bfd state enabled",
        "nv set vrf default router bgp peer-group spines remote-as external"])
    from_yaml, from_commands = read_nvue_bgp(yaml_text, "a.yml", "leaf1"), read_nvue_bgp(commands, "b.nvue", "leaf1")
    fields = ("asn", "router_id", "networks", "neighbors", "multipath_relax", "maximum_paths")
    assert [getattr(from_yaml, f) for f in fields] == [getattr(from_commands, f) for f in fields]
    assert (from_yaml.maximum_paths, from_yaml.neighbors[0].keepalive_s, from_yaml.neighbors[0].holdtime_s) == (64, 3, 9)
    assert from_yaml.neighbors[0].unnumbered and from_yaml.neighbors[0].asn == "external"


def test_nvue_bad_values_are_input_errors_naming_file_line_and_statement():
    text = "\n".join(["nv set vrf default router bgp neighbor swp3 remote-as outside",
                      "nv set vrf default router bgp neighbor swp4 peer-group nobody",
                      "nv set vrf default router bgp address-family ipv4-unicast multipaths ebgp 0",
                      "nv set router bgp autonomous-system 65101"])
    with pytest.raises(InputError) as e:
        read_nvue_bgp(text, "leaf1.nvue", "leaf1")
    message = str(e.value)
    assert ("leaf1.nvue: line 1: `nv set vrf default router bgp neighbor swp3 remote-as outside`: 'outside' is not a "
            "remote AS") in message
    assert "leaf1.nvue: line 3: `nv set vrf default router bgp address-family ipv4-unicast multipaths ebgp 0`" in message
    assert "leaf1.nvue: line 2: peer group 'nobody' is not configured" in message
    with pytest.raises(InputError) as e:
        read_nvue_bgp("nv set vrf default router bgp neighbor swp3 remote-as external\n", "leaf1.nvue", "leaf1")
    assert "leaf1.nvue: line 1: BGP is configured but `router bgp autonomous-system` is not set" in str(e.value)


EOS = """hostname spine1
!
interface Ethernet1
   no switchport
   ip address 198.18.0.1/31
!
router bgp 65201
   maximum-paths 8 ecmp 16
   neighbor FABRIC peer-group
   neighbor FABRIC remote-as 65101
   neighbor FABRIC bfd
   neighbor 198.18.0.0 peer-group FABRIC
   neighbor 198.18.0.4 remote-as 65102
   neighbor 198.18.0.4 route-map IN in
   neighbor interface Et3-4 peer-group FABRIC remote-as 65103
   redistribute connected
   !
   vrf TENANT
      neighbor 10.9.9.9 remote-as 1
!
end
"""


def test_eos_peer_group_inheritance_old_syntax_and_what_is_ignored():
    bgp = read_eos_bgp(EOS, "spine1.cfg", "spine1")
    # EOS's defaults: multipath-relax on (a running-config shows `no bgp bestpath as-path multipath-relax`)
    assert (bgp.asn, bgp.maximum_paths, bgp.multipath_relax, bgp.networks) == (65201, 8, True, ("198.18.0.0/31",))
    assert bgp.where[("multipath",)].endswith("(EOS's default: on)")
    assert read_eos_bgp(EOS.replace("   maximum-paths 8 ecmp 16\n", "   no bgp bestpath as-path multipath-relax\n"),
                        "spine1.cfg", "spine1").maximum_paths == 1
    first, second = bgp.neighbors
    assert (first.address, first.asn, first.bfd is not None) == ("198.18.0.0", 65101, True)
    assert (second.address, second.asn, second.bfd, second.holdtime_s) == ("198.18.0.4", 65102, None, 180)
    assert bgp.where[("neighbor", "198.18.0.0", "asn")] == "spine1.cfg: line 10: `neighbor FABRIC remote-as 65101`"
    assert bgp.where[("maximum-paths",)] == "spine1.cfg: line 8: `maximum-paths 8 ecmp 16`"
    assert bgp.notes == ("spine1.cfg: line 14: `neighbor 198.18.0.4 route-map IN in`: ignored",
                         "spine1.cfg: line 15: `neighbor interface Et3-4 peer-group FABRIC remote-as 65103`: ignored "
                         "(EOS's interface peering is not read: give each neighbor's address)",
                         "spine1.cfg: line 18: `vrf TENANT`: ignored (rocelab reads the default VRF's IPv4 unicast)")


def test_eos_bad_lines_are_input_errors_naming_each_line():
    text = EOS.replace("remote-as 65102", "remote-as 99999999999").replace(
        "peer-group FABRIC\n   neighbor 198.18.0.4", "peer-group FABRICS\n   neighbor 198.18.0.4")
    with pytest.raises(InputError) as e:
        read_eos_bgp(text + "router bgp 65999\n", "spine1.cfg", "spine1")
    message = str(e.value)
    assert "spine1.cfg: line 13: `neighbor 198.18.0.4 remote-as 99999999999`: '99999999999' is not an AS number" in message
    assert "spine1.cfg: line 12: peer group 'FABRICS' is not defined" in message
    assert "spine1.cfg: line 22: `router bgp 65999`: a second `router bgp`" in message


def test_frr_runs_sonic_eos_and_cumulus_bgp_unnumbered_sessions_on_the_lab_s_ports(copy, tmp_path: Path):
    from rocelab.fabric.lab import lab_from_spec, without_bgp

    spec = load_fabric_spec(Path(copy("fabric-bgp-eos").name))
    lab = lab_from_spec(spec, "fab1", tmp_path / "work")
    assert lab.routing == "bgp" and without_bgp(spec) is None
    assert {name: config.asn for name, config in lab.node_bgp.items()} == {
        "spine1": 65201, "spine2": 65202, "leaf1": 65101, "leaf2": 65102}
    # an EOS neighbor peered by interface is not in the model: its sessions would be missing on FRR
    spine1 = Path("fabric-bgp-eos/spine1.cfg")
    spine1.write_text(spine1.read_text().replace("router bgp 65201\n", "router bgp 65201\n   neighbor interface Et3 peer-group LEAVES\n"))
    spec = load_fabric_spec(Path("fabric-bgp-eos"))
    assert lab_from_spec(spec, "fab2", tmp_path / "work2").routing == "static"
    assert without_bgp(spec) == ("fabric-bgp-eos/spine1.cfg: spine1's EOS interface peering is not read, so its "
                                 "sessions would be missing on FRR; its BGP is checked statically")

    # Cumulus's unnumbered sessions run on FRR, on the interfaces the lab names eth3 and eth4
    spec = load_fabric_spec(Path(copy("fabric-bgp-cumulus").name))
    lab = lab_from_spec(spec, "fab3", tmp_path / "work3")
    assert lab.routing == "bgp" and without_bgp(spec) is None
    leaf1 = lab.node_bgp["leaf1"]
    assert [(n.address, n.unnumbered, n.asn) for n in leaf1.neighbors] == [("eth3", True, "external"),
                                                                             ("eth4", True, "external")]
    assert (leaf1.loopback, leaf1.router_id) == ("10.10.10.1/32", "10.10.10.1")
    # a session on a port the topology does not have: no interface for FRR to peer on
    leaf2 = Path("fabric-bgp-cumulus/leaf2.nvue")
    leaf2.write_text(leaf2.read_text() + "nv set vrf default router bgp neighbor swp9 peer-group spines\n")
    spec = load_fabric_spec(Path("fabric-bgp-cumulus"))
    assert lab_from_spec(spec, "fab4", tmp_path / "work4").routing == "static"
    assert without_bgp(spec) == ("fabric-bgp-cumulus/leaf2.nvue: leaf2's unnumbered sessions on swp9: no port of "
                                 "the switch in the topology, so FRR has no interface to peer on; its BGP is checked "
                                 "statically")


def test_what_the_bgp_readers_ignored_is_printed_beside_the_verdict(copy):
    from rocelab.pytest_plugin import reader_notes

    fabric = copy("fabric-bgp-eos")
    edit(fabric / "spine1.cfg", "   network 10.1.0.11/32\n", "   network 10.1.0.11/32\n   graceful-restart\n")
    notes = reader_notes(load_fabric_spec(Path(fabric.name)))
    assert ("spine1", "fabric-bgp-eos/spine1.cfg: line 97: `graceful-restart`: ignored") in notes
