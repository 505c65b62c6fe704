"""A lab's own PFC-watchdog clock: `pfc_wd_tdf` in lab.yml, carried to switchd's profile; its links' loss-of-signal
detection, `link_down_detect_ms`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocelab import paths

from rocelab.errors import InputError
from rocelab.model.lab import load_lab
from rocelab.switch.agent import load_profile

ROOT = Path(__file__).resolve().parents[2]


def test_the_watchdog_runs_on_the_labs_tdf_unless_the_lab_gives_it_its_own(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\ntdf: 1000\n")
    assert load_lab("l1").pfc_wd_tdf is None
    lab_home.write_text("topology: leaf-spine-2x2\ntdf: 1000\npfc_wd_tdf: 10\n")
    assert load_lab("l1").pfc_wd_tdf == 10


@pytest.mark.parametrize("key, value, says, hint", [
    *[("pfc_wd_tdf", v, "is not a time-dilation factor", "whole number") for v in ("0", "2.5", "fast", "true")],
    *[("link_down_detect_ms", v, "is not a detection time", "milliseconds from 0")
      for v in ("-1", "20000", "soon", "true")],
    *[("tdf_floor", v, "is not a time-dilation factor", "the least TDF `up` picks") for v in ("0", "auto", "true")]])
def test_a_bad_lab_setting_names_the_key_and_what_is_expected(lab_home, key, value, says, hint):
    lab_home.write_text(f"topology: leaf-spine-2x2\n{key}: {value}\n")
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    (problem,) = exc.value.problems
    assert problem.file.endswith("lab.yml") and problem.path.startswith(key)
    assert says in problem.message and hint in problem.hint


def test_a_labs_link_down_detection_reaches_every_switchd_in_production_seconds(lab_home):
    from rocelab.engines.netns import write_agent_config

    lab_home.write_text("topology: leaf-spine-2x2\ntdf: 1000\n")
    assert load_lab("l1").link_down_detect_s == 0.0  # at once, as before the setting
    lab_home.write_text("topology: leaf-spine-2x2\ntdf: 1000\nlink_down_detect_ms: 2.5\n")
    lab = load_lab("l1")
    config = json.loads(write_agent_config(lab, lab.fabric.node("spine1")).read_text())
    assert config["link_down_detect_s"] == 0.0025 and config["tdf"] == 1000  # switchd dilates it


def test_a_labs_tdf_floor_is_the_least_auto_picks_and_not_beside_a_pinned_tdf(lab_home):
    from rocelab.model.tdf import AgentCosts, choose_tdf

    lab_home.write_text("topology: leaf-spine-2x2\ntdf_floor: 800\n")
    lab = load_lab("l1")
    fast = AgentCosts(switch=((12000, 0.01),), nic=((12000, 0.01),), cores=2)  # a machine that needs next to nothing
    assert lab.tdf is None and lab.tdf_floor == 800
    assert choose_tdf(lab.fabric, lab.scenario, 4096, fast, floor=lab.tdf_floor).tdf == 800
    lab_home.write_text("topology: leaf-spine-2x2\ntdf: 1000\ntdf_floor: 800\n")
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    (problem,) = exc.value.problems
    assert problem.path == "tdf_floor" and "drop one of tdf and tdf_floor" in problem.hint


def test_switchd_dilates_detection_and_restoration_by_the_watchdog_tdf():
    profile = load_profile(str(ROOT / "profiles" / "roce-lossless.json"), 10)
    wd = profile.ports["Ethernet0"].pfc_wd
    assert (wd.detection_time_ms, wd.restoration_time_ms, wd.action) == (2000, 2000, "drop")


# ---- `nics:` a lab's hosts run the NIC their own tools describe --------------------------------

NIC_FILES = ROOT / "examples" / "fabric-good" / "hosts"  # hand-written mlnx_qos and sysfs output


def _with_nic_files(lab_home: Path, **edits: str) -> None:
    """h1..h4's NIC files beside lab.yml; `edits`: host → (old, new) text swaps in its sysfs file."""
    for f in NIC_FILES.iterdir():
        text = f.read_text()
        for old, new in [edits[f.name.split(".")[0]]] if f.name.split(".")[0] in edits and "sysfs" in f.name else []:
            assert old in text
            text = text.replace(old, new)
        (lab_home.parent / f.name).write_text(text)


def test_a_labs_nics_set_each_hosts_emulated_nic(lab_home, tmp_path, monkeypatch):
    from rocelab.engines.netns import write_agent_config
    from rocelab.roce.config import roce_config
    from rocelab.roce.dcqcn import DCQCN_SETS

    _with_nic_files(lab_home, h2=("roce_rp/enable/3=1", "roce_rp/enable/3=0"))
    lab_home.write_text("topology: leaf-spine-2x2\ntdf: 1000\nnic: emulated\nroce: {pmtu_bytes: 1024}\n"
                        'nics:\n  "h*": {mlnx_qos: "{host}.mlnx_qos.txt", sysfs: "{host}.sysfs.txt"}\n')
    lab = load_lab("l1")
    h1 = roce_config(lab.roce_of("h1"))
    assert h1.cc.dcqcn == DCQCN_SETS["connectx"].rp  # the file holds NVIDIA's defaults
    assert (h1.dscp, h1.cnp_dscp, h1.cnp_interval_s) == (26, 48, 4e-6)  # ToS 106 = DSCP 26 | ECT(0); roce_np
    assert h1.priority_of(26) == 3 and h1.cc_algorithm == "dcqcn"
    assert h1.pmtu_bytes == 4096  # the NIC's MTU 9000 leaves RoCE 4096: over the lab's 1024
    assert roce_config(lab.roce_of("h2")).cc_algorithm == "none"  # DCQCN off on RoCE's priority
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    h2 = next(n for n in lab.fabric.hosts if n.name == "h2")
    assert json.loads(write_agent_config(lab, h2).read_text())["roce"]["cc_algorithm"] == "none"  # what nicd reads


def test_a_labs_nic_file_that_is_not_there_is_named(lab_home):
    lab_home.write_text('topology: leaf-spine-2x2\nnics:\n  h1: {sysfs: missing.txt}\n  h9: {sysfs: x.txt}\n')
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    said = [(p.file, p.path.split(" ")[0], p.message) for p in exc.value.problems]
    assert any(f.endswith("lab.yml") and w == "nics.h1.sysfs" and m.endswith("missing.txt' is not a file")
               for f, w, m in said), said
    assert any(w == "nics.h9" and m == "'h9' matches no host of the topology" for _, w, m in said), said


def test_flow_control_rx_names_switch_ports_of_the_lab(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\nflow_control_rx: [leaf1:eth1]\n")
    assert load_lab("l1").flow_control_rx == {"leaf1:eth1"}
    lab_home.write_text("topology: leaf-spine-2x2\nflow_control_rx: [h1:eth1]\n")  # a host's port
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    (problem,) = exc.value.problems
    assert problem.path.startswith("flow_control_rx") and "is not a list of this lab's switch ports" in problem.message


def test_nic_files_whose_values_make_no_nic_are_named(lab_home):
    _with_nic_files(lab_home, h1=("rpg_min_dec_fac=50", "rpg_min_dec_fac=150"))  # a cut to 150% of the rate
    lab_home.write_text('topology: leaf-spine-2x2\nnics:\n  h1: {sysfs: h1.sysfs.txt}\n')
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    (problem,) = exc.value.problems
    assert problem.path.startswith("nics") and problem.message.startswith("h1: what ")
    assert "h1.sysfs.txt says makes no NIC" in problem.message
    assert "min_decrease_factor=1.5 must be in [0, 1]" in problem.message


# ---- `profiles:` a switch runs its own NOS config: SONiC, EOS or Cumulus -------------------------

CUMULUS = ROOT / "examples" / "fabric-cumulus"


def test_a_labs_profiles_run_a_cumulus_leaf_as_nvue_derives_it(lab_home, tmp_path, monkeypatch):
    from rocelab.engines.netns import write_agent_config
    from rocelab.qos.sonic import load_config_db

    (lab_home.parent / "leaf1.nvue").write_text((CUMULUS / "leaf2.nvue").read_text())
    lab_home.write_text("topology: leaf-spine-2x2\ntdf: 1000\nprofiles:\n"
                        "  leaf1:\n    cumulus: leaf1.nvue\n"
                        "    buffer: {pool_size_bytes: 12MiB, dynamic_th: -5, xoff_bytes: 56KiB}\n")
    lab = load_lab("l1")
    assert set(lab.node_qos) == {"leaf1"}
    assert lab.node_qos["leaf1"].ports["Ethernet0"].pfc_enable == {3}
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    leaf1 = next(n for n in lab.fabric.switches if n.name == "leaf1")
    written = json.loads(write_agent_config(lab, leaf1).read_text())["profile"]
    ran = load_config_db(written)  # what switchd loads
    assert ran.ports == lab.node_qos["leaf1"].ports and ran.pools == lab.node_qos["leaf1"].pools
    spine1 = next(n for n in lab.fabric.switches if n.name == "spine1")
    assert json.loads(write_agent_config(lab, spine1).read_text())["profile"] is None  # no `profile:`


def test_a_bad_profiles_entry_names_lab_yml_and_the_nos_file(lab_home):
    (lab_home.parent / "leaf1.nvue").write_text("nv set qos roce mode turbo\n")
    lab_home.write_text("topology: leaf-spine-2x2\nprofiles:\n  leaf1: {cumulus: leaf1.nvue}\n"
                        "  h1: {sonic: nothere.json}\n")
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    said = [str(p) for p in exc.value.problems]
    assert any("leaf1.nvue: line 1: `nv set qos roce mode turbo`: 'turbo' is not a RoCE mode" in s for s in said), said
    assert any("lab.yml: profiles.h1 (line 4): 'h1' is not a switch of the topology" in s for s in said), said
    assert any("profiles.h1.sonic" in s and "'nothere.json' is not a file" in s for s in said), said


def test_up_with_a_bad_cumulus_profile_exits_2_and_builds_nothing(lab_home):
    import subprocess
    import sys

    (lab_home.parent / "leaf1.nvue").write_text("nv set qos pfc default-global switch-priority 9\n")
    lab_home.write_text("topology: leaf-spine-2x2\nprofiles:\n  leaf1: {cumulus: leaf1.nvue}\n")
    result = subprocess.run([sys.executable, "-m", "rocelab", "up", "l1"], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "l1/leaf1.nvue: line 1: `nv set qos pfc default-global switch-priority 9`: '9' is not within 0–7" \
        in result.stderr
    assert not (paths.STATE_DIR / "l1.json").exists()


def test_a_labs_load_balancing_reaches_switchd_and_a_case_may_change_it(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\nload_balancing: {mode: flowlet, flowlet_idle_time_us: 128}\n"
                        "scenario:\n  - {case: a, traffic: incast, load_balancing: {mode: spray}, "
                        "receive_order: place}\n")
    lab = load_lab("l1")
    assert lab.load_balancing == {"mode": "flowlet", "flowlet_idle_time_us": 128}
    (case,) = lab.scenario.cases
    assert (case.load_balancing, case.receive_order) == ({"mode": "spray"}, "place")


@pytest.mark.parametrize(("text", "path", "says"), [
    ("load_balancing: {mode: ecmp}\n", "load_balancing", "mode: 'ecmp' is not a load-balancing mode"),
    ("load_balancing: {mode: flowlet, flowlet_idle_time_us: 5000}\n", "load_balancing",
     "flowlet_idle_time_us: 5000 is out of range; expected a whole number 2..2047"),
    ("load_balancing: {mode: flowlet, max_flows: 0}\n", "load_balancing", "max_flows: 0 is out of range"),
    ("nic: verbs\nroce: {receive_order: place}\n", "roce.receive_order", "the verbs backend"),
    ("roce: {receive_order: sack}\n", "roce", "receive_order='sack' must be one of gbn, place"),
    ("nic: verbs\nscenario:\n  - {case: a, traffic: incast, receive_order: place}\n", "scenario[0].receive_order",
     "the verbs backend"),
    ("scenario:\n  - {case: a, traffic: incast, load_balancing: {mode: rr}}\n", "scenario[0].load_balancing",
     "mode: 'rr' is not a load-balancing mode"),
    ("scenario:\n  - {case: a, traffic: incast, receive_order: sack}\n", "scenario[0].receive_order",
     "'sack' is not a receive order"),
    ("scenario:\n  - {case: a, traffic: incast, impair: [{port: leaf1:eth1, rate: 0%}]}\n",
     "scenario[0].impair[0]", "rate '0%' is not a share of the link's rate"),
])
def test_bad_load_balancing_and_receive_order_name_the_file_and_key(lab_home, text, path, says):
    lab_home.write_text(f"topology: leaf-spine-2x2\n{text}")
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    (problem,) = exc.value.problems
    assert problem.file.endswith("lab.yml") and problem.path.startswith(path), problem
    assert says in problem.message, problem


def test_up_with_an_unknown_balancing_mode_exits_2_and_builds_nothing(lab_home):
    import subprocess
    import sys

    lab_home.write_text("topology: leaf-spine-2x2\nload_balancing: {mode: ecmp}\n")
    result = subprocess.run([sys.executable, "-m", "rocelab", "up", "l1"], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "lab.yml: load_balancing" in result.stderr and "'ecmp' is not a load-balancing mode" in result.stderr
    assert not (paths.STATE_DIR / "l1.json").exists()


def test_a_profiles_bad_ars_tables_are_named_before_anything_is_built(lab_home):
    (lab_home.parent / "ars.json").write_text(json.dumps(
        {"ARS_OBJECT": {"ars1": {"assign_mode": "per_flowlet_quality", "flowlet_idle_time": "5000"}}}))
    lab_home.write_text("topology: leaf-spine-2x2\nprofile: ars\n")
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    (problem,) = exc.value.problems
    assert problem.path == "profile" and "ars.json: ARS_OBJECT|ars1: flowlet_idle_time_us: 5000 is out of range" \
        in problem.message
    (lab_home.parent / "ars.json").write_text(json.dumps({"ARS_OBJECT": {"ars1": {"assign_mode": "per_packet_quality"}}}))
    assert load_lab("l1").profile.name == "ars.json"
