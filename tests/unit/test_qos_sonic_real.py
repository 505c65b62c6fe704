"""What SONiC accepts, rocelab loads: small hand-written reproductions of constructs found in
the configurations SONiC's own build renders for real platforms (sonic-buildimage's
sonic-config-engine sample outputs), and, where a copy of those is at hand, all of them."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from rocelab.errors import InputError, Problem, describe
from rocelab.qos.model import port_qos
from rocelab.qos.derived import derive_lossless_pgs, parse_pg_profile_lookup
from rocelab.qos.sonic import load_config_db, profile_from_config_db, switch_facts

LOSSLESS = {"pool": "ingress_lossless_pool", "size": "0", "xon": "18432", "xoff": "38816", "dynamic_th": "-3"}
BASE = {
    "BUFFER_POOL": {"ingress_lossless_pool": {"type": "ingress", "mode": "dynamic", "size": "12766208"},
                    "egress_lossy_pool": {"type": "egress", "mode": "dynamic", "size": "7326924"}},
    "BUFFER_PROFILE": {"pg_lossless": LOSSLESS,
                       "egress_lossy": {"pool": "egress_lossy_pool", "size": "0", "dynamic_th": "3"}},
    "DSCP_TO_TC_MAP": {"AZURE": {"26": "3", "48": "6"}},
}


def doc(**tables) -> dict:
    out = copy.deepcopy(BASE)
    out.update(tables)
    return out


def test_one_number_per_port_maps_to_interfaces_in_the_port_tables_order():
    # S6100-style numbering (Ethernet0, 1, 2, …) and a PORT table listing the front panel.
    port = {f"Ethernet{n}": {"index": str(n), "lanes": str(n * 4)} for n in (0, 1, 2, 3)}
    profile = profile_from_config_db(doc(PORT=port, BUFFER_PG={"Ethernet1|3": {"profile": "pg_lossless"}}), "s6100")
    assert profile.lab_ports == {"eth1": "Ethernet0", "eth2": "Ethernet1", "eth3": "Ethernet2", "eth4": "Ethernet3"}
    assert port_qos(profile, "eth2").pgs[3].xoff_bytes == 38816


def test_split_ports_keep_the_front_panel_order_of_their_index_and_lanes():
    # A 4600C-style split: Ethernet0 and Ethernet2 share front-panel index 1, lanes decide.
    port = {"Ethernet2": {"index": "1", "lanes": "2,3"}, "Ethernet0": {"index": "1", "lanes": "0,1"},
            "Ethernet8": {"index": "2", "lanes": "8,9,10,11"}}
    profile = profile_from_config_db(doc(PORT=port, BUFFER_PG={"Ethernet2|3": {"profile": "pg_lossless"}}), "split")
    assert profile.lab_ports == {"eth1": "Ethernet0", "eth2": "Ethernet2", "eth3": "Ethernet8"}
    assert port_qos(profile, "eth2").lossless_pg(3)


def test_large_indexes_load_and_without_a_port_table_the_names_order_decides():
    profile = profile_from_config_db(doc(BUFFER_PG={"Ethernet513|3": {"profile": "pg_lossless"},
                                                    "Ethernet2|3": {"profile": "pg_lossless"}}), "big")
    assert profile.lab_ports == {"eth1": "Ethernet2", "eth2": "Ethernet513"}
    # The four-lane convention still holds where every name fits it.
    plain = profile_from_config_db(doc(BUFFER_PG={"Ethernet8|3": {"profile": "pg_lossless"}}), "plain")
    assert plain.lab_ports == {} and port_qos(plain, "eth3").lossless_pg(3)


def test_voq_keys_of_this_line_card_are_read_and_the_others_left_to_theirs():
    queue = {"lc1|asic0|Ethernet0|3": {"scheduler": "s1"}, "lc2|asic0|Ethernet0|3": {"scheduler": "s2"}}
    tables = doc(DEVICE_METADATA={"localhost": {"hostname": "lc1", "asic_name": "asic0"}},
                 SCHEDULER={"s1": {"type": "DWRR", "weight": "50"}, "s2": {"type": "STRICT"}}, QUEUE=queue)
    profile = profile_from_config_db(tables, "voq")
    assert profile.ports["Ethernet0"].queues[3].scheduler.name == "s1"
    assert any("other line cards" in n for n in profile.notes)


def test_pools_of_type_both_and_traffic_classes_up_to_15():
    tables = doc(BUFFER_POOL={**BASE["BUFFER_POOL"], "shared": {"type": "both", "mode": "dynamic", "size": "1000000"}},
                 DSCP_TO_TC_MAP={"AZURE": {"26": "3", "8": "8", "9": "15"}},
                 TC_TO_QUEUE_MAP={"AZURE": {"3": "3", "8": "0", "15": "1"}},
                 PORT_QOS_MAP={"Ethernet0": {"dscp_to_tc_map": "AZURE", "tc_to_queue_map": "AZURE", "pfc_enable": "3"}})
    profile = profile_from_config_db(tables, "tc16")
    port = profile.ports["Ethernet0"]
    assert profile.pools["shared"].type == "both"
    assert (port.dscp_to_tc[8], port.dscp_to_tc[9], port.tc_to_queue[15]) == (8, 15, 1)


def test_the_dynamic_buffer_model_loads_with_what_buffermgrd_computes_left_unchecked():
    tables = doc(BUFFER_POOL={"ingress_lossless_pool": {"type": "ingress", "mode": "dynamic"}},
                 BUFFER_PROFILE={},
                 BUFFER_PG={"Ethernet0|3-4": {"profile": "NULL"}})
    profile = profile_from_config_db(tables, "dynamic")
    assert profile.pools["ingress_lossless_pool"].size_bytes is None
    assert profile.ports["Ethernet0"].dynamic_pgs == {3, 4}
    assert any("buffermgrd" in n for n in profile.notes) and any("dynamic buffer model" in n for n in profile.notes)


def test_a_file_that_is_one_part_of_a_config_db_leaves_references_into_the_other_unchecked():
    # sonic-cfggen renders qos and buffers apart: QUEUE names schedulers the qos part defines.
    tables = doc(QUEUE={"Ethernet0|3": {"scheduler": "scheduler.1"}})
    profile = profile_from_config_db(tables, "buffers-part")
    assert profile.ports["Ethernet0"].queues[3].scheduler is None
    assert any("SCHEDULER, which this file does not hold" in n for n in profile.notes)
    # Where the table is there, a dangling name is still an error.
    with pytest.raises(InputError, match="names no SCHEDULER entry"):
        profile_from_config_db(doc(SCHEDULER={"s0": {"type": "STRICT"}}, **{"QUEUE": {"Ethernet0|3": {
            "scheduler": "scheduler.1"}}}), "dangling")


def test_thousands_of_one_problem_read_as_one_line_with_a_count():
    problems = [Problem("f.json", f'BUFFER_PG."Ethernet{n}|3".profile', f"'x{n}' names no BUFFER_PROFILE entry")
                for n in range(2000)] + [Problem("f.json", "PORT_QOS_MAP", "another kind")]
    text = describe(problems)
    assert len(text.splitlines()) == 2
    assert "2000 alike" in text and "and 1997 more" in text and 'BUFFER_PG."Ethernet0|3".profile' in text


CORPUS = os.environ.get("ROCELAB_SONIC_CORPUS")
# What SONiC would reject too: none of the sample outputs (they are SONiC's own renderings).
SONIC_ALSO_REJECTS: tuple[str, ...] = ()


@pytest.mark.skipif(not CORPUS, reason="set ROCELAB_SONIC_CORPUS to a copy of sonic-buildimage's "
                                       "src/sonic-config-engine/tests/sample_output to load every file")
def test_every_qos_and_buffers_file_of_the_corpus_loads_or_is_rejected_for_sonics_reasons():
    files = sorted(p for p in Path(CORPUS).rglob("*.json") if p.name.startswith(("qos-", "buffers-")))
    assert files, f"{CORPUS} holds no qos-*.json or buffers-*.json"
    rejected = {}
    for path in files:
        try:
            load_config_db(path)
        except InputError as exc:  # anything else is a traceback, and fails the test
            rejected[path.name] = [p.message for p in exc.problems
                                   if not any(reason in p.message for reason in SONIC_ALSO_REJECTS)]
    assert not {name: why for name, why in rejected.items() if why}, rejected


# sonic-buildimage's device/ folder (the platforms' pg_profile_lookup.ini): ROCELAB_SONIC_DEVICES,
# else beside the sample outputs' src/ in the same checkout.
DEVICES = os.environ.get("ROCELAB_SONIC_DEVICES") or (
    str(Path(CORPUS).parents[3] / "device") if CORPUS and (Path(CORPUS).parents[3] / "device").is_dir() else None)
NO_DEVICES = ("set ROCELAB_SONIC_DEVICES to a copy of sonic-buildimage's device/ folder (or ROCELAB_SONIC_CORPUS "
              "inside such a checkout) to read every platform's pg_profile_lookup.ini")


def load_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _lookup_text(path: Path) -> str | None:
    """The file's rows; a symlink stored as text ("BALANCED/pg_profile_lookup.ini") is followed,
    None where its target is not in the copy."""
    for _ in range(5):
        text = path.read_text(encoding="utf-8", errors="replace")
        if len(text.split()) != 1:
            return text
        path = path.parent / text.strip()
        if not path.is_file():
            return None
    return None


@pytest.mark.skipif(not DEVICES, reason=NO_DEVICES)
def test_every_platforms_pg_profile_lookup_parses():
    files = sorted(Path(DEVICES).rglob("pg_profile_lookup.ini"))
    assert files, f"{DEVICES} holds no pg_profile_lookup.ini"
    rejected, rows = {}, 0
    for path in files:
        text = _lookup_text(path)
        if text is None:
            continue
        try:
            rows += len(parse_pg_profile_lookup(text, str(path)))  # some platforms' hold only comments
        except InputError as exc:
            rejected[str(path)] = [str(p) for p in exc.problems]
    assert rows and not rejected, rejected


@pytest.mark.skipif(not (CORPUS and DEVICES), reason=NO_DEVICES)
def test_buffermgrd_derives_the_lossless_pgs_a_dual_tor_rendering_leaves_out():
    # Arista-7050CX3-32S-D48C8: buffers and qos rendered apart, no PORT table. Its ports are
    # 50G and 100G, whose rows are the same; 100000 stands for both.
    sample = Path(CORPUS)
    buffers = next(sample.rglob("buffer-arista7050cx3-dualtor.json"), None)
    qos = next(sample.rglob("qos-arista7050cx3-dualtor.json"), None)
    ini = Path(DEVICES) / "arista" / "x86_64-arista_7050cx3_32s" / "Arista-7050CX3-32S-D48C8" / "pg_profile_lookup.ini"
    if buffers is None or qos is None or not ini.is_file() or _lookup_text(ini) is None:
        pytest.skip("the dual-ToR sample outputs or Arista-7050CX3-32S-D48C8's pg_profile_lookup.ini are not in the copy")
    doc = {**load_json(buffers), **load_json(qos)}
    cables = doc["CABLE_LENGTH"]["AZURE"]
    doc["PORT"] = {port: {"speed": "100000"} for port in cables}
    profile = profile_from_config_db(doc, "dualtor")
    assert not any(port.lossless_pg(3) for port in profile.ports.values())  # the rendering has none
    lookup = parse_pg_profile_lookup(_lookup_text(ini), str(ini))
    result = derive_lossless_pgs(profile, switch_facts(doc, "dualtor"), lookup, str(ini), "dualtor")
    lossless = {name: port for name, port in result.profile.ports.items() if port.pfc_enable}
    assert lossless
    for name, port in lossless.items():
        for pg in port.pfc_enable:
            assert port.pgs[pg].name == f"pg_lossless_100000_{cables[name]}_profile"
            assert port.pgs[pg].xoff_bytes == lookup[("100000", cables[name])].xoff_bytes
    # The uplinks' AZURE_UPLINK classes (2 and 6) are lossless PGs too.
    assert any({2, 6} <= set(port.pgs) for port in lossless.values())
