"""The Cumulus Linux (NVUE) reader: its three forms, `qos roce` as NVIDIA documents it,
explicit statements over it, port groups, names and ranges, and its errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.fabric.lint import lint
from rocelab.fabric.spec import load_fabric_spec
from rocelab.qos.cumulus import (
    CUMULUS_RELEASE,
    cumulus_lab_names,
    detect_form,
    interface_list,
    load_cumulus,
    parse_cumulus,
)
from rocelab.qos.eos import parse_eos

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "cumulus"
ERRORS = ROOT / "tests" / "errors"
EXAMPLE = ROOT / "examples" / "fabric-cumulus"
FORMS = {"nv config show": DATA / "roce.nvue.yml",
         "nv config show -o commands": DATA / "roce.nvue",
         "qos_features.conf": DATA / "roce-rendered"}


def _commands(*lines: str) -> str:
    return "\n".join(f"nv set {line}" for line in ("interface swp1-4 type swp", *lines)) + "\n"


def _port(text: str, port: str = "Ethernet0"):
    return parse_cumulus(text, "leaf.nvue").profile.ports[port]


# --- qos roce, three forms, one profile


@pytest.mark.parametrize("form", FORMS)
def test_each_form_is_recognised(form: str) -> None:
    assert load_cumulus(FORMS[form]).form == form


def test_the_roce_default_gives_one_profile_from_all_three_forms() -> None:
    configs = [load_cumulus(path) for path in FORMS.values()]
    first = configs[0]
    assert set(first.profile.ports) == {"Ethernet0", "Ethernet4", "Ethernet8", "Ethernet12"}
    for other in configs[1:]:
        assert other.profile.ports == first.profile.ports
        assert other.default_port == first.default_port
        assert other.cable_m == first.cable_m


def test_the_roce_default_is_nvidias_published_table() -> None:
    """Cumulus Linux 5.14, "RDMA over Converged Ethernet - RoCE", Default RoCE Configuration
    and `nv show qos roce`: trust pcp,dscp; switch priority 3 → TC 3 (RoCE), 6 → 6 (CNP),
    others → 0; ETS TC 6 strict, TC 3 and TC 0 WRR 50 %; ECN 150,000–1,500,000 B on TCs 0
    and 3 at probability 100; PFC on switch priority 3 (lossless), cable length 100."""
    assert CUMULUS_RELEASE == "5.14"
    config = load_cumulus(FORMS["nv config show -o commands"])
    port = config.profile.ports["Ethernet0"]
    # DSCP groups of eight → switch priority (the profile's TC); the port trusts DSCP for IP
    assert port.dscp_to_tc == tuple(d // 8 for d in range(64))
    assert port.dot1p_to_tc is None
    assert port.tc_to_queue[:8] == (0, 0, 0, 3, 0, 0, 6, 0)
    assert port.pfc_enable == {3} and port.tc_to_pg[3] == 3
    assert config.cable_m["Ethernet0"] == 100
    assert port.queues[6].scheduler.type == "STRICT"
    for tc in (0, 3):
        assert (port.queues[tc].scheduler.type, port.queues[tc].scheduler.weight) == ("DWRR", 50)
        wred = port.queues[tc].wred
        assert (wred.green_min_threshold_bytes, wred.green_max_threshold_bytes,
                wred.green_drop_probability_pct, wred.ecn, wred.wred_green_enable) == \
            (150_000, 1_500_000, 100, "ecn_all", False)
    assert port.queues[6].wred is None
    assert {q for q, qos in port.queues.items() if qos.scheduler} == {0, 3, 6}
    # the watchdog the file turns on: 3 polling intervals of 100 ms, back after one
    assert (port.pfc_wd.action, port.pfc_wd.detection_time_ms, port.pfc_wd.restoration_time_ms) == \
        ("drop", 300, 100)
    assert "Cumulus Linux 5.14's RoCE lossless default" in config.at("pfc", "Ethernet0")


def test_roce_lossy_has_the_maps_without_pfc() -> None:
    port = _port(_commands("qos roce mode lossy"))
    assert port.pfc_enable == frozenset() and port.dscp_to_tc[26] == 3
    assert port.queues[3].wred.green_min_threshold_bytes == 150_000


def test_qos_roce_without_a_mode_keeps_lossy_and_unset_removes_it() -> None:
    assert _port(_commands("qos roce mode lossy", "qos roce")).pfc_enable == frozenset()
    text = _commands("qos roce") + "nv unset qos roce\n"
    port = _port(text)
    assert port.pfc_enable == frozenset() and port.dscp_to_tc[26] == 0  # back to trust l2


@pytest.mark.parametrize("mode", ["lossless-single-ipool", "lossy-multi-tc"])
def test_newer_modes_are_warned_about(mode: str) -> None:
    config = parse_cumulus(_commands(f"qos roce mode {mode}"), "leaf.nvue")
    assert any("is not emulated" in w and f"mode {mode}" in w for w in config.warnings)
    assert (config.profile.ports["Ethernet0"].pfc_enable == {3}) == (mode == "lossless-single-ipool")


# --- explicit statements over the default


def test_moving_roce_to_priority_2_as_nvidias_example_does() -> None:
    port = _port(_commands("qos roce",
                           "qos pfc default-global switch-priority 2",
                           "qos egress-queue-mapping default-global switch-priority 2 traffic-class 3",
                           "qos egress-queue-mapping default-global switch-priority 3 traffic-class 0",
                           "qos mapping default-global trust both",
                           "qos mapping default-global dscp 26 switch-priority 2"))
    assert port.pfc_enable == {2} and port.dscp_to_tc[26] == 2 and port.tc_to_queue[2] == 3
    assert port.tc_to_queue[3] == 0 and port.dscp_to_tc[27] == 3


def test_explicit_ecn_and_scheduler_override_field_by_field() -> None:
    config = parse_cumulus(_commands(
        "qos roce",
        "qos congestion-control default-global traffic-class 3 min-threshold 40000",
        "qos egress-scheduler default-global traffic-class 3 bw-percent 70"), "leaf.nvue")
    queue = config.profile.ports["Ethernet0"].queues[3]
    assert (queue.wred.green_min_threshold_bytes, queue.wred.green_max_threshold_bytes) == (40_000, 1_500_000)
    assert queue.scheduler.weight == 70
    assert config.at("ecn", "Ethernet0", 3).startswith("leaf.nvue: line 3: `nv set qos congestion-control")


def test_port_profiles_apply_to_their_ports_only() -> None:
    config = parse_cumulus(_commands(
        "qos roce",
        "qos pfc spine-ports switch-priority 3",
        "qos pfc spine-ports cable-length 300",
        "interface swp3-4 qos pfc profile spine-ports",
        "qos mapping hosts trust l3",
        "qos mapping hosts dscp af31 switch-priority 4",
        "interface swp1,swp2 qos mapping profile hosts"), "leaf.nvue")
    assert config.cable_m == {"Ethernet0": 100, "Ethernet4": 100, "Ethernet8": 300, "Ethernet12": 300,
                              "": 100}
    ports = config.profile.ports
    assert ports["Ethernet0"].dscp_to_tc[26] == 4 and ports["Ethernet8"].dscp_to_tc[26] == 3


def test_no_roce_is_cumulus_defaults_trust_l2() -> None:
    config = parse_cumulus(_commands("interface swp1 link mtu 9000"), "leaf.nvue")
    port = config.profile.ports["Ethernet0"]
    assert port.dscp_to_tc == (0,) * 64 and port.dot1p_to_tc == tuple(range(8))
    assert port.pfc_enable == frozenset() and port.queues[0].scheduler.weight == 12
    assert config.mtu_bytes == {"Ethernet0": 9000}


# --- the rendered files


def test_rendered_port_groups_and_given_pfc_sizes() -> None:
    features = """\
traffic.packet_priority_source_set = [dscp]
pfc.port_group_list = [my_pfc_ports]
pfc.my_pfc_ports.cos_list = [3]
pfc.my_pfc_ports.port_set = swp1-swp2,swp4
pfc.my_pfc_ports.port_buffer_bytes = 60000
pfc.my_pfc_ports.xoff_size = 10000
pfc.my_pfc_ports.xon_delta = 2000
pfc.my_pfc_ports.cable_length = 50
ecn_red.port_group_list = [my-red-profile]
my-red-profile.egress_queue_list = [3]
my-red-profile.port_set = swp1,swp2
my-red-profile.ecn_enable = true
my-red-profile.red_enable = true
my-red-profile.min_threshold_bytes = 40000
my-red-profile.max_threshold_bytes = 200000
my-red-profile.probability = 10
egress_sched.port_group_list = [list1]
egress_sched.list1.port_set = swp3
egress_sched.list1.egr_queue_3.bw_percent = 0
link_pause.port_group_list = [pause]
"""
    config = parse_cumulus(features, "qos_features.conf")
    ports = config.profile.ports
    assert set(ports) == {"Ethernet0", "Ethernet4", "Ethernet8", "Ethernet12"}
    assert ports["Ethernet0"].pfc_enable == {3} and ports["Ethernet8"].pfc_enable == frozenset()
    wred = ports["Ethernet4"].queues[3].wred
    assert (wred.green_min_threshold_bytes, wred.green_drop_probability_pct, wred.wred_green_enable) == \
        (40_000, 10, True)
    assert ports["Ethernet8"].queues[3].scheduler.type == "STRICT"
    sizes = config.pfc_sizes["Ethernet12"]
    assert (sizes.port_buffer_bytes, sizes.xoff_bytes, sizes.xon_bytes) == (60_000, 10_000, 2_000)
    assert config.cable_m["Ethernet12"] == 50
    assert any("`link_pause` is not emulated" in w for w in config.warnings)


# --- names, ranges, lists


@pytest.mark.parametrize("text, swps, others", [
    ("swp1-4,swp6", ["swp1", "swp2", "swp3", "swp4", "swp6"], []),
    ("eth0,swp19-22", ["swp19", "swp20", "swp21", "swp22"], ["eth0"]),
    ("swp1-swp3", ["swp1", "swp2", "swp3"], []),
    ("[swp1,swp3,swp18]", ["swp1", "swp3", "swp18"], []),
    ("swp1s0-3", ["swp1s0", "swp1s1", "swp1s2", "swp1s3"], []),
    ("lo", [], ["lo"]),
])
def test_interface_ranges_and_lists(text: str, swps: list[str], others: list[str]) -> None:
    assert interface_list(text) == (swps, others)


@pytest.mark.parametrize("text", ["swp4-2", "swp1s0-swp2s3", "swpx"])
def test_malformed_interface_keys(text: str) -> None:
    with pytest.raises(ValueError):
        interface_list(text)


def test_breakouts_number_the_lab_ports_in_natural_order() -> None:
    assert cumulus_lab_names(["swp2", "swp1s1", "swp1s0"]) == {"swp1s0": "eth1", "swp1s1": "eth2", "swp2": "eth3"}
    assert cumulus_lab_names(["swp10", "swp2"]) == {"swp2": "eth2", "swp10": "eth10"}


def test_yaml_interface_keys_and_dscp_names() -> None:
    text = """\
- header: {version: Cumulus Linux 5.14.0}
- set:
    interface:
      eth0,swp1-2: {type: swp}
    qos:
      mapping:
        default-global:
          trust: l3
          dscp:
            af31,cs6:
              switch-priority: 5
"""
    config = parse_cumulus(text, "leaf.yml")
    port = config.profile.ports["Ethernet4"]
    assert set(config.profile.ports) == {"Ethernet0", "Ethernet4"}
    assert port.dscp_to_tc[26] == 5 and port.dscp_to_tc[48] == 5 and port.dscp_to_tc[24] == 3
    assert config.at("dscp", "Ethernet4", 26) == \
        "leaf.yml: set.qos.mapping.default-global.dscp.af31,cs6.switch-priority (line 11): " \
        "`qos mapping default-global dscp af31,cs6 switch-priority 5`"


def test_eos_takes_dscp_names_too() -> None:
    profile = parse_eos("qos map dscp af31 ef to traffic-class 5\ninterface Ethernet1\n", "a.cfg")
    port = profile.ports["Ethernet0"]
    assert port.dscp_to_tc[26] == 5 and port.dscp_to_tc[46] == 5


# --- what the reader does not know: warned, never a crash


def test_unknown_statements_are_warned_and_the_rest_is_read() -> None:
    config = parse_cumulus(_commands("qos roce", "qos frobnicate on", "qos remark default-global rewrite l3",
                                     "interface swp1 qos frobnicate on", "router bgp autonomous-system 65001",
                                     "interface bond1 qos pfc profile x"), "leaf.nvue")
    warnings = "\n".join(config.warnings)
    assert "line 3: `nv set qos frobnicate on`: a QoS statement rocelab does not know" in warnings
    assert "`qos remark` is not emulated" in warnings
    assert "line 5: `nv set interface swp1 qos frobnicate on`" in warnings
    assert "not a swp port" in warnings and "bgp" not in warnings
    assert config.profile.ports["Ethernet0"].pfc_enable == {3}


def test_detect_form_refuses_other_text() -> None:
    assert detect_form("interface Ethernet1\n   mtu 9214\n") is None
    assert detect_form("") is None


# --- errors: file, line or YAML path, what was expected


CASES = sorted(p.name for p in ERRORS.glob("cumulus-*") if p.suffix != ".txt")


@pytest.mark.parametrize("case", CASES)
def test_bad_cumulus_config_names_file_line_and_expectation(case: str) -> None:
    expected = [line for line in (ERRORS / f"{Path(case).stem}.txt").read_text().splitlines() if line]
    with pytest.raises(InputError) as info:
        load_cumulus(ERRORS / case)
    text = str(info.value)
    for line in expected:
        assert line in text
    assert len(info.value.problems) == len(expected)


# --- in a fabric description: Cumulus leaves, SONiC spines


def test_mixed_fabric_passes_and_names_cumulus_ports() -> None:
    spec = load_fabric_spec(EXAMPLE)
    assert lint(spec) == []
    leaf1 = spec.devices["leaf1"]
    assert (leaf1.format, leaf1.label("eth3"), spec.devices["spine1"].format) == \
        ("cumulus", "swp3 (eth3)", "sonic")
    assert leaf1.port("eth1").pgs[3].xoff_bytes == 56 * 1024


def test_pure_qos_roce_against_a_spine_keeping_dscp_26_alone(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "f")
    commands = tmp_path / "f" / "leaf2.nvue"
    commands.write_text(commands.read_text().replace(
        "nv set qos mapping default-global dscp 24-25,27-31 switch-priority 0\n", ""))
    findings = lint(load_fabric_spec(tmp_path / "f"))
    assert {(f.check, f.device) for f in findings} == {("dscp-maps", "leaf2")}
    assert "leaf2.nvue: line 7: `nv set qos roce mode lossless`" in findings[0].source


def test_without_buffer_figures_the_cable_length_is_still_checked(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "f")
    fabric = tmp_path / "f" / "fabric.yml"
    text = fabric.read_text().replace("    buffer: *spectrum\n", "")
    fabric.write_text(text)
    commands = tmp_path / "f" / "leaf2.nvue"
    commands.write_text(commands.read_text() + "nv set qos pfc default-global cable-length 35\n")
    spec = load_fabric_spec(tmp_path / "f")
    findings = [f for f in lint(spec) if f.device == "leaf2"]
    assert [(f.check, f.port) for f in findings] == [("headroom", "swp3 (eth3)")]
    assert spec.devices["leaf2"].unsized_pgs.startswith("Cumulus Linux derives the lossless PGs' headroom")


def test_unsetting_a_newer_mode_goes_back_to_lossless() -> None:
    text = _commands("qos roce mode lossy-multi-tc") + "nv unset qos roce mode lossy-multi-tc\n"
    assert _port(text).pfc_enable == {3}


def test_cabled_ports_the_file_does_not_list_get_the_global_cable_length(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "f")
    commands = tmp_path / "f" / "leaf2.nvue"
    commands.write_text("nv set qos roce\nnv set qos pfc default-global cable-length 35\n"
                        "nv set qos mapping default-global dscp 24-25,27-31 switch-priority 0\n")
    spec = load_fabric_spec(tmp_path / "f")
    leaf2 = spec.devices["leaf2"]
    assert leaf2.origin.config.profile.ports == {}  # the file lists no interface
    assert {p.pfc_enable for p in leaf2.profile.ports.values()} == {frozenset({3})}  # switchd gets them
    headroom = [f for f in lint(spec) if f.device == "leaf2" and f.check == "headroom"]
    assert [f.port for f in headroom] == ["swp3 (eth3)"]  # the 40 m fibre; 30 m and 3 m fit
    assert "leaf2.nvue: line 2: `nv set qos pfc default-global cable-length 35`" in headroom[0].source
