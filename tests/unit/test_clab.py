"""Labs as containerlab topologies: valid against containerlab's schema for every shipped
topology and lab, NOS switches wired to their rendered configuration, rocelab's nodes on
rocelab's images without a management network, and only fabric addresses in what is written."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from rocelab import __version__
from rocelab.engines.clabfile import HOST_IMAGE, SWITCH_IMAGE, clab_document, container_name, write_clab
from rocelab.errors import InputError
from rocelab.model.lab import load_lab
from rocelab.model.topology import FABRIC_POOL, load_topology, refuse_nos_nodes

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "data" / "containerlab" / "clab.schema.json"
REFERENCE_SCHEMA = ROOT.parent / "shared" / "reference" / "clab.schema.json"
TOPOLOGIES = sorted(p.stem for p in (ROOT / "topologies").glob("*.yml"))
LABS = sorted(p.parent.name for p in (ROOT / "labs").glob("*/lab.yml"))
NOS = "leaf-spine-2x2-nos"
DOTTED_QUAD = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])")


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text())
    # A few of its patterns are ECMA regexes (\p{N}) Python cannot compile; they sit on fields
    # rocelab never writes (mgmt-ipv4), so check the schema's structure without its regexes.
    jsonschema.Draft7Validator.check_schema(schema, format_checker=None)
    return jsonschema.Draft7Validator(schema)


def test_vendored_schema_is_the_reference_copy() -> None:
    if not REFERENCE_SCHEMA.is_file():
        pytest.skip(f"no reference copy at {REFERENCE_SCHEMA} (a fresh clone has only the vendored one)")
    assert SCHEMA.read_bytes() == REFERENCE_SCHEMA.read_bytes()


@pytest.mark.parametrize("ref", TOPOLOGIES + LABS)
def test_every_topology_and_lab_validates_against_containerlabs_schema(ref, validator, tmp_path) -> None:
    lab = load_lab(ref)
    path = write_clab(lab, tmp_path)
    assert path == tmp_path / f"{lab.name}.clab.yml"
    doc = yaml.safe_load(path.read_text())
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    assert errors == []
    assert set(doc["topology"]["nodes"]) == {n.name for n in lab.fabric.nodes}
    ends = {tuple(link["endpoints"]) for link in doc["topology"]["links"]}
    assert ends == {(f"{l.a.node}:{l.a.name}", f"{l.b.node}:{l.b.name}") for l in lab.fabric.links}


def test_the_schema_catches_what_rocelab_must_not_write(validator) -> None:
    """rocelab's link keys (rate, cable) written where containerlab expects none fail the schema:
    the reason they live under `vars`."""
    doc = clab_document(load_lab("leaf-spine-2x2"), Path("/unused"))
    doc["topology"]["links"][0]["rate"] = "100G"
    assert any("rate" in e.message for e in validator.iter_errors(doc))


@pytest.mark.parametrize("ref", TOPOLOGIES + LABS)
def test_only_fabric_addresses_in_what_is_written(ref, tmp_path) -> None:
    write_clab(load_lab(ref), tmp_path)
    quads = {q for f in tmp_path.iterdir() for q in DOTTED_QUAD.findall(f.read_text())}
    assert all(ipaddress.IPv4Address(q) in FABRIC_POOL for q in quads), sorted(quads)


def test_rocelab_nodes_run_rocelabs_images_without_a_management_network() -> None:
    from dataclasses import replace
    doc = clab_document(replace(load_lab("leaf-spine-2x2"), routing="static"), Path("/unused"))
    nodes = doc["topology"]["nodes"]
    assert nodes["leaf1"] == {"kind": "linux", "image": f"rocelab/switch:{__version__}", "network-mode": "none",
                              "group": "leaf"}
    assert nodes["h1"]["image"] == HOST_IMAGE == f"rocelab/host:{__version__}"
    assert nodes["spine2"]["image"] == SWITCH_IMAGE
    assert "mgmt" not in doc  # containerlab's default management network, for NOS nodes only
    # a BGP lab's (the default's) switches run zebra, which asks for CAP_SYS_ADMIN; its hosts run no FRR
    nodes = clab_document(load_lab("leaf-spine-2x2"), Path("/unused"))["topology"]["nodes"]
    assert nodes["leaf1"]["cap-add"] == nodes["spine1"]["cap-add"] == ["SYS_ADMIN"] and "cap-add" not in nodes["h1"]


def test_link_facts_travel_in_vars() -> None:
    doc = clab_document(load_lab("incast-1x5-1km"), Path("/unused"))
    fabric = load_topology(ROOT / "topologies" / "incast-1x5-1km.yml")
    for link, written in zip(fabric.links, doc["topology"]["links"]):
        assert written["mtu"] == link.mtu
        assert written["vars"]["rate_bps"] == link.rate_bps
        assert written["vars"]["delay_s"] == pytest.approx(link.delay_s)
        assert written["vars"]["cable_m"] == link.cable_m
    assert max(link["vars"]["cable_m"] for link in doc["topology"]["links"]) == 1000


def test_a_nodes_own_image_wins(tmp_path) -> None:
    text = (ROOT / "topologies" / f"{NOS}.yml").read_text()
    text = text.replace("leaf1: {role: leaf}", "leaf1: {role: leaf, image: 'mine/switch:1'}")
    text = text.replace("spine2: {role: spine, kind: arista_ceos}",
                        "spine2: {role: spine, kind: arista_ceos, image: 'ceos:4.33.1F'}")
    (tmp_path / "t.yml").write_text(text)
    nodes = clab_document(load_lab(str(tmp_path / "t.yml")), tmp_path)["topology"]["nodes"]
    assert nodes["leaf1"]["image"] == "mine/switch:1"
    assert nodes["spine2"]["image"] == "ceos:4.33.1F"
    assert nodes["spine1"]["image"] == "docker-sonic-vs:latest"


def test_nos_switches_are_wired_to_their_rendered_files(tmp_path) -> None:
    path = write_clab(load_lab(NOS), tmp_path / "out")
    nodes = yaml.safe_load(path.read_text())["topology"]["nodes"]
    sonic, ceos = nodes["spine1"], nodes["spine2"]
    assert (sonic["kind"], ceos["kind"]) == ("sonic-vs", "arista_ceos")
    # containerlab's sonic-vs kind ignores startup-config; docker-sonic-vs loads this mount at start.
    (bind,) = sonic["binds"]
    source, target, mode = bind.split(":")
    assert (target, mode) == ("/var/sonic/config_db.json", "ro")
    assert json.loads(Path(source).read_text())["DEVICE_METADATA"]["localhost"]["hostname"] == "spine1"
    assert Path(ceos["startup-config"]).read_text().splitlines()[2] == "hostname spine2"
    assert "{{" not in Path(ceos["startup-config"]).read_text()  # containerlab renders it as a Go template
    assert sorted(p.name for p in path.parent.iterdir()) == [f"{NOS}.clab.yml", "spine1.config_db.json",
                                                              "spine2.cfg"]


def test_bad_nos_input_writes_nothing(tmp_path) -> None:
    text = (ROOT / "topologies" / f"{NOS}.yml").read_text().replace('"spine1:eth2"', '"spine1:eth40"')
    (tmp_path / "t.yml").write_text(text)
    with pytest.raises(InputError, match=r"topology.nodes.spine1: is sonic-vs with port\(s\) eth40"):
        write_clab(load_lab(str(tmp_path / "t.yml")), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_container_names_follow_containerlab() -> None:
    assert container_name("lab-pfc", "leaf1") == "clab-lab-pfc-leaf1"


def test_netns_engine_check_refuses_nos_nodes_pointing_to_clab() -> None:
    fabric = load_topology(ROOT / "topologies" / f"{NOS}.yml")
    with pytest.raises(InputError) as info:
        refuse_nos_nodes(fabric, "netns")
    assert [str(p) for p in info.value.problems] == [
        f"topologies/{NOS}.yml: topology.nodes.spine1.kind: 'sonic-vs' is a network OS container, which the "
        "netns engine cannot run (hint: bring the lab up with --engine clab)",
        f"topologies/{NOS}.yml: topology.nodes.spine2.kind: 'arista_ceos' is a network OS container, which the "
        "netns engine cannot run (hint: bring the lab up with --engine clab)",
    ]
    refuse_nos_nodes(load_topology(ROOT / "topologies" / "leaf-spine-2x2.yml"), "netns")  # no NOS node: fine
