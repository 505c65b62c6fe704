"""The plugin's static BGP checks on examples/fabric-bgp and broken copies of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.fabric.bgplint import BGP_CHECKS
from rocelab.fabric.spec import load_fabric_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fabric-bgp"


@pytest.fixture
def fabric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # files are named as the user types them: fabric-bgp/…
    shutil.copytree(EXAMPLE, tmp_path / "fabric-bgp")
    return tmp_path / "fabric-bgp"


def findings(fabric: Path) -> dict[str, list[str]]:
    """check[switch] → its findings as the plugin prints them; not-applicable checks are absent."""
    spec = load_fabric_spec(Path(fabric.name))
    out = {}
    for check in BGP_CHECKS:
        for device in spec.devices.values():
            if check.not_applicable(spec, device) is None:
                out[f"{check.name}[{device.name}]"] = [str(f) for f in check.run(spec, device)]
    return out


def failing(fabric: Path) -> dict[str, list[str]]:
    return {name: found for name, found in findings(fabric).items() if found}


def edit_config_db(fabric: Path, switch: str, change) -> None:
    path = fabric / switch / "config_db.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=4))


def test_the_shipped_fabric_passes_every_bgp_check_on_every_switch(fabric: Path):
    found = findings(fabric)
    assert len(found) == len(BGP_CHECKS) * 4  # applicable everywhere: every switch gives its BGP
    assert failing(fabric) == {}


def test_multipath_relax_removed_from_one_switchs_constants_names_switch_file_and_field(fabric: Path):
    text = (fabric / "constants.yml").read_text()
    (fabric / "leaf1.constants.yml").write_text(text.replace("    multipath_relax:\n      enabled: true\n", ""))
    fabric_yml = fabric / "fabric.yml"
    fabric_yml.write_text(fabric_yml.read_text().replace(
        "leaf1: {sonic: leaf1/config_db.json, constants: constants.yml}",
        "leaf1: {sonic: leaf1/config_db.json, constants: leaf1.constants.yml}"))
    assert failing(fabric) == {"bgp-multipath[leaf1]": [
        "leaf1: bgpd keeps one path where the paths through different spines differ in AS path: configured no "
        "`bgp bestpath as-path multipath-relax`; required `bgp bestpath as-path multipath-relax` (ECMP over 2 "
        "spines: spine1, spine2)\n    from fabric-bgp/leaf1.constants.yml: constants.bgp.multipath_relax.enabled"]}


def test_maximum_paths_below_the_spine_count_or_not_enabled(fabric: Path):
    constants = fabric / "constants.yml"
    constants.write_text(constants.read_text().replace("ipv4: 64", "ipv4: 1"))
    found = failing(fabric)
    assert set(found) == {f"bgp-maximum-paths[{s}]" for s in ("spine1", "spine2", "leaf1", "leaf2")}
    assert found["bgp-maximum-paths[leaf2]"] == [
        "leaf2: fewer next hops per route than there are spines: traffic leaves on a subset of the uplinks: "
        "configured maximum-paths 1; required maximum-paths ≥ 2 (the spines: spine1, spine2)\n"
        "    from fabric-bgp/constants.yml: constants.bgp.maximum_paths.ipv4"]
    constants.write_text(constants.read_text().replace("enabled: true\n      ipv4: 1", "enabled: false"))
    assert "no maximum-paths" in failing(fabric)["bgp-maximum-paths[leaf1]"][0]


def test_a_session_without_bfd_names_the_port_and_the_neighbor_field(fabric: Path):
    edit_config_db(fabric, "spine2", lambda doc: doc["BGP_NEIGHBOR"]["198.18.0.6"].pop("bfd"))
    assert failing(fabric) == {"bgp-bfd[spine2]": [
        "spine2 Ethernet4 (eth2): the session to leaf2 has no BFD: a silent failure (frames lost, link up) goes "
        "unnoticed until its 9 s hold timer expires: configured bfd off; required bfd true\n"
        '    from fabric-bgp/spine2/config_db.json: BGP_NEIGHBOR."198.18.0.6".bfd']}


def test_asn_design_a_wrong_peer_asn_a_shared_leaf_asn_and_a_missing_session(fabric: Path):
    edit_config_db(fabric, "leaf1", lambda doc: doc["BGP_NEIGHBOR"]["198.18.0.3"].update(asn="65201"))
    found = failing(fabric)
    assert found == {"bgp-asn[leaf1]": [
        "leaf1 Ethernet12 (eth4): the session to spine2 expects AS 65201, but spine2 is AS 65202: the session "
        "never comes up: configured asn 65201; required asn 65202 (spine2's bgp_asn)\n"
        '    from fabric-bgp/leaf1/config_db.json: BGP_NEIGHBOR."198.18.0.3".asn; '
        "fabric-bgp/spine2/config_db.json: DEVICE_METADATA.localhost.bgp_asn"]}

    edit_config_db(fabric, "leaf1", lambda doc: doc["BGP_NEIGHBOR"]["198.18.0.3"].update(asn="65202"))
    edit_config_db(fabric, "leaf2", lambda doc: doc["DEVICE_METADATA"]["localhost"].update(bgp_asn="65101"))
    for spine in ("spine1", "spine2"):  # the spines follow leaf2's new AS: only the design is wrong
        edit_config_db(fabric, spine, lambda doc: [n.update(asn="65101") for n in doc["BGP_NEIGHBOR"].values()
                                                    if n["name"] == "leaf2"])
    found = failing(fabric)
    assert set(found) == {"bgp-asn[leaf1]", "bgp-asn[leaf2]"}
    assert found["bgp-asn[leaf2]"][0].startswith(
        "leaf2: leaf1 is a leaf in the same AS 65101: each drops the other's routes")

    edit_config_db(fabric, "spine1", lambda doc: doc["BGP_NEIGHBOR"].pop("198.18.0.0"))
    assert ("spine1 Ethernet0 (eth1): no BGP session to leaf1 over this link"
            in failing(fabric)["bgp-asn[spine1]"][0])


def test_switches_without_bgp_are_not_applicable_with_the_reason(fabric: Path):
    edit_config_db(fabric, "spine1", lambda doc: doc.pop("BGP_NEIGHBOR"))
    spec = load_fabric_spec(Path("fabric-bgp"))
    reasons = {check.not_applicable(spec, spec.devices["spine1"]) for check in BGP_CHECKS}
    assert reasons == {"fabric-bgp/spine1/config_db.json gives no BGP (DEVICE_METADATA.localhost.bgp_asn "
                       "with BGP_NEIGHBOR or BGP_PEER_RANGE)"}


def test_a_bad_constants_file_is_an_input_error_naming_file_and_field(fabric: Path):
    constants = fabric / "constants.yml"
    constants.write_text(constants.read_text().replace("ipv4: 64", "ipv4: many"))
    with pytest.raises(InputError) as e:
        load_fabric_spec(Path("fabric-bgp"))
    assert "fabric-bgp/constants.yml: constants.bgp.maximum_paths.ipv4: 'many' is not a number of paths" in str(e.value)


def test_the_dynamic_checks_run_a_description_on_frr_only_where_every_switch_gives_its_bgp(fabric: Path, tmp_path: Path):
    from rocelab.fabric.lab import lab_from_spec, without_bgp
    from rocelab.routing.design import lab_bgp

    spec = load_fabric_spec(Path("fabric-bgp"))
    lab = lab_from_spec(spec, "fab1", tmp_path / "work")
    assert (lab.routing, without_bgp(spec)) == ("bgp", None)
    # FRR runs the description's own BGP, not rocelab's generated design
    assert {name: (config.asn, how) for name, (config, how) in lab_bgp(lab).items()} == {
        "spine1": (65201, "from fabric-bgp/spine1/config_db.json"),
        "spine2": (65202, "from fabric-bgp/spine2/config_db.json"),
        "leaf1": (65101, "from fabric-bgp/leaf1/config_db.json"),
        "leaf2": (65102, "from fabric-bgp/leaf2/config_db.json")}

    edit_config_db(fabric, "spine1", lambda doc: doc.pop("BGP_NEIGHBOR"))
    spec = load_fabric_spec(Path("fabric-bgp"))
    lab = lab_from_spec(spec, "fab1", tmp_path / "work")
    assert (lab.routing, lab.node_bgp) == ("static", {})
    assert without_bgp(spec) == ("fabric-bgp/spine1/config_db.json gives no BGP (DEVICE_METADATA.localhost.bgp_asn "
                                 "with BGP_NEIGHBOR or BGP_PEER_RANGE)")
