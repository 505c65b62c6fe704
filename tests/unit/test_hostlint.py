"""The host checks (rocelab.fabric.hostlint): one NIC defect at a time in a copy of
fabric-good, each found on the leaf the host is cabled to and named on both sides."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import pytest

from rocelab.fabric.hostlint import HOST_CHECKS
from rocelab.fabric.lint import Finding, builtin_checks, lint
from rocelab.fabric.spec import FabricSpec, load_fabric_spec

ROOT = Path(__file__).resolve().parents[2]
GOOD = ROOT / "examples" / "fabric-good"
HOST_CHECK_NAMES = [c.name for c in HOST_CHECKS]


def _variant(tmp_path: Path, host_file: str, old: str, new: str) -> FabricSpec:
    copy = tmp_path / "fabric"
    shutil.copytree(GOOD, copy)
    path = copy / "hosts" / host_file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return load_fabric_spec(copy)


def _host_findings(spec: FabricSpec) -> list[Finding]:
    return [f for f in lint(spec) if f.check in HOST_CHECK_NAMES]


def _one(spec: FabricSpec, check: str, host: str) -> Finding:
    findings = _host_findings(spec)
    assert {(f.check, f.device) for f in findings} == {(check, host)}, [str(f) for f in findings]
    (finding,) = findings
    return finding


def test_the_good_fabric_passes_every_host_check() -> None:
    spec = load_fabric_spec(GOOD)
    assert sorted(spec.hosts.nics) == ["h1", "h2", "h3", "h4"]
    assert spec.hosts.nics["h1"].mlnx_qos.endswith("fabric-good/hosts/h1.mlnx_qos.txt")
    assert lint(spec) == []
    checks = builtin_checks()
    for name in HOST_CHECK_NAMES:
        check = checks.get(name)
        assert check.not_applicable(spec, spec.devices["spine1"]) == "no host is cabled to spine1"
        assert check.not_applicable(spec, spec.devices["leaf1"]) is None


def test_nic_trusting_pcp_while_the_switch_classifies_by_dscp(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h1.mlnx_qos.txt", "Priority trust state: dscp",
                    "Priority trust state: pcp")
    finding = _one(spec, "nic-trust", "h1")
    assert (finding.port, finding.priority) == ("eth1", 0)
    assert "the NIC trusts PCP, but leaf1 Ethernet0 (eth1) classifies RoCE by DSCP" in finding.what
    # Both sides: the NIC's trust state and the switch port's classification.
    assert finding.configured == ("Priority trust state pcp; leaf1 Ethernet0 (eth1): "
                                  "DSCP 26 → TC 3")
    assert finding.required.startswith("Priority trust state dscp, with DSCP 26 on priority 3")
    assert finding.source.endswith('hosts/h1.mlnx_qos.txt line 2 (Priority trust state); '
                                   f'{tmp_path}/fabric/leaf1/config_db.json: '
                                   'DSCP_TO_TC_MAP.ROCE."26"')


def test_nic_putting_roce_on_another_priority_than_the_switch(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h2.mlnx_qos.txt", "prio:3 dscp:31,30,29,28,27,26,25,24,",
                    "prio:3 dscp:31,30,29,28,27,25,24,26,")
    assert lint(spec) == []  # the order of a prio line's DSCPs means nothing
    spec = _variant(tmp_path / "b", "h2.mlnx_qos.txt", "prio:3 dscp:31,30,29,28,27,26,25,24,\n"
                    "        prio:4 dscp:39,", "prio:3 dscp:31,30,29,28,27,25,24,\n"
                    "        prio:4 dscp:26,39,")
    findings = _host_findings(spec)
    # The NIC now sends and pauses RoCE on priority 4, where DCQCN is off too and whose
    # receive buffer 0 (20,016 B) is no lossless headroom.
    assert {(f.check, f.device, f.priority) for f in findings} == {
        ("nic-trust", "h2", 4), ("nic-dcqcn", "h2", 4), ("nic-headroom", "h2", 4)}
    trust = next(f for f in findings if f.check == "nic-trust")
    assert trust.what.startswith("the NIC puts RoCE (DSCP 26) on priority 4, leaf1 Ethernet4 "
                                 "(eth2) on priority 3")
    assert trust.configured == "dscp2prio DSCP 26 → priority 4"
    assert "hosts/h2.mlnx_qos.txt line 8 (dscp2prio prio:4)" in trust.source


def test_roce_tos_never_set(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h3.sysfs.txt", "default_roce_tos=106", "default_roce_tos=")
    findings = _host_findings(spec)
    # RoCE really rides DSCP 0, so the NIC's priority 0: no DCQCN there, no lossless buffer.
    assert {(f.check, f.priority) for f in findings} == {
        ("nic-trust", None), ("nic-dcqcn", 0), ("nic-dcqcn", 0), ("nic-headroom", 0)}
    assert {f.device for f in findings} == {"h3"}
    finding = next(f for f in findings if f.check == "nic-trust")
    assert finding.what.startswith("RoCE leaves with ToS 0 (DSCP 0, which leaf2 Ethernet0 (eth1) "
                                   "puts in TC 0): cma_roce_tos never set RoCE's DSCP")
    assert (finding.configured, finding.required) == (
        "default_roce_tos 0", "default_roce_tos 106 (DSCP 26 with ECT(0); hosts.roce_dscp)")
    assert "hosts/h3.sysfs.txt line 36 (rdma_cm/mlx5_0 default_roce_tos, not set)" in finding.source


def test_roce_dscp_other_than_the_fabric_expects(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h3.sysfs.txt", "default_roce_tos=106", "default_roce_tos=114")
    finding, priority = _host_findings(spec)
    # h3's dscp2prio puts DSCP 28 on priority 3, leaf2 on 0.
    assert priority.what.startswith("the NIC puts RoCE (DSCP 28) on priority 3, leaf2 Ethernet0 "
                                    "(eth1) on priority 0")
    assert finding.what == ("RoCE leaves with DSCP 28, which leaf2 Ethernet0 (eth1) puts in lossy "
                            "TC 0; the fabric's checks follow hosts.roce_dscp 26")
    assert (finding.configured, finding.required) == (
        "default_roce_tos 114 (DSCP 28)", "a ToS with DSCP 26, like 106")


def test_pfc_priorities_differ_from_the_switch_port(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h3.mlnx_qos.txt", "enabled     0   0   0   1",
                    "enabled     0   0   0   0")
    finding = _one(spec, "nic-pfc", "h3")
    assert (finding.priority, finding.configured, finding.required) == (
        3, "PFC enabled on none", "PFC enabled on {3}, as leaf2 Ethernet0 (eth1)")
    assert finding.source.endswith("hosts/h3.mlnx_qos.txt line 17 (PFC configuration enabled); "
                                   f"{tmp_path}/fabric/leaf2/config_db.json: "
                                   "PORT_QOS_MAP.Ethernet0.pfc_enable")


def test_cnps_with_a_dscp_that_lands_in_a_non_strict_queue(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h4.sysfs.txt", "roce_np/cnp_dscp=48", "roce_np/cnp_dscp=10")
    findings = _host_findings(spec)
    assert {(f.check, f.device) for f in findings} == {("nic-cnp", "h4")}
    dscp, *queues, prio = findings
    assert dscp.configured == "cnp_dscp 10" and dscp.required == "cnp_dscp 48 (hosts.cnp_dscp)"
    # h4's CNPs leave leaf2 toward h3 and both spines through DWRR queue 0.
    assert [(f.what.split(" through")[0], f.configured) for f in queues] == [
        ("CNPs (DSCP 10, TC 0) leave leaf2 Ethernet0 (eth1)", "queue 0 DWRR weight 40"),
        ("CNPs (DSCP 10, TC 0) leave leaf2 Ethernet8 (eth3)", "queue 0 DWRR weight 40"),
        ("CNPs (DSCP 10, TC 0) leave leaf2 Ethernet12 (eth4)", "queue 0 DWRR weight 40")]
    assert queues[0].required == "queue 0 STRICT (toward h3:eth1)"
    assert "SCHEDULER.scheduler.lossy (QUEUE Ethernet0 queue 0)" in queues[0].source
    assert (prio.configured, prio.required) == (
        "cnp_802p_prio 6", "cnp_802p_prio 0, the TC of DSCP 10 on leaf2 Ethernet4 (eth2)")


def test_cnp_priority_other_than_the_switch_class(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h4.sysfs.txt", "cnp_802p_prio=6", "cnp_802p_prio=5")
    finding = _one(spec, "nic-cnp", "h4")
    assert (finding.priority, finding.configured) == (5, "cnp_802p_prio 5")
    assert finding.required == "cnp_802p_prio 6, the TC of DSCP 48 on leaf2 Ethernet4 (eth2)"


@pytest.mark.parametrize("point,line", [("roce_np", 23), ("roce_rp", 31)])
def test_dcqcn_off_on_the_roce_priority(tmp_path: Path, point: str, line: int) -> None:
    spec = _variant(tmp_path, "h1.sysfs.txt", f"{point}/enable/3=1", f"{point}/enable/3=0")
    finding = _one(spec, "nic-dcqcn", "h1")
    assert finding.what.startswith(f"DCQCN's {point} is off on RoCE's priority 3")
    assert finding.configured == f"{point}/enable/3 0 (enabled on none)"
    # The switch marks ECN on RoCE's queue: marks the NIC would ignore or never answer.
    assert finding.required == (f"{point}/enable/3 1; leaf1 Ethernet0 (eth1) marks ECN on "
                                "RoCE's queue 3")
    assert f"hosts/h1.sysfs.txt line {line} ({point}/enable/3)" in finding.source


def test_mtu_too_small_for_the_roce_mtu(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h2.sysfs.txt", "mtu 9000", "mtu 4096")
    finding = _one(spec, "nic-mtu", "h2")
    assert finding.what.startswith("the netdev MTU gives RoCE an MTU of 2048, below hosts.roce_mtu "
                                   "4096")
    assert (finding.configured, finding.required) == ("MTU 4096", "MTU ≥ 4192")


def test_mtu_larger_than_the_switch_port(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h2.sysfs.txt", "mtu 9000", "mtu 9216")
    finding = _one(spec, "nic-mtu", "h2")
    assert (finding.configured, finding.required) == (
        "MTU 9216", "MTU ≤ 9100, as leaf1 Ethernet4 (eth2)")
    assert finding.source.endswith("leaf1/config_db.json: PORT.Ethernet4.mtu")


def test_nic_headroom_shorter_cable_and_small_buffer(tmp_path: Path) -> None:
    spec = _variant(tmp_path, "h4.mlnx_qos.txt", "Cable len: 7", "Cable len: 2")
    finding = _one(spec, "nic-headroom", "h4")
    assert (finding.configured, finding.required) == (
        "Cable len 2", "Cable len ≥ 3 (the link to leaf2 Ethernet4 (eth2))")
    spec = _variant(tmp_path / "b", "h4.mlnx_qos.txt", "20016,156096,", "20016,30000,")
    finding = _one(spec, "nic-headroom", "h4")
    # 100 Gb/s, 3 m, RoCE MTU 4096: 25,216 + 2 × 3 / 1.98e8 × 100e9 / 8 (378.8) + 8,388 + 84
    assert (finding.priority, finding.configured) == (3, "buffer 1 30,000 B")
    assert finding.required.startswith("buffer ≥ 34,067 B, the headroom for 100 Gb/s, 3 m")


def _nics(tmp_path: Path, nics: str) -> FabricSpec:
    copy = tmp_path / "fabric"
    shutil.copytree(GOOD, copy)
    fabric = copy / "fabric.yml"
    old = '    "h*": {mlnx_qos: "hosts/{host}.mlnx_qos.txt", sysfs: "hosts/{host}.sysfs.txt"}\n'
    text = fabric.read_text()
    assert old in text
    fabric.write_text(text.replace(old, nics))
    return load_fabric_spec(copy)


def test_without_nic_configs_the_host_checks_do_not_apply(tmp_path: Path) -> None:
    spec = _nics(tmp_path, '    h3: {mlnx_qos: hosts/h3.mlnx_qos.txt}\n')
    checks = builtin_checks()
    assert lint(spec) == []
    reasons = {name: checks.get(name).not_applicable(spec, spec.devices["leaf1"])
               for name in HOST_CHECK_NAMES}
    assert set(reasons.values()) == {"no host cabled to leaf1 (h1, h2) has a NIC config "
                                     "(hosts.nics in the description)"}
    # h3 gives its mlnx_qos only: no sysfs values to check DCQCN, CNPs or the MTU with.
    reasons = {name: checks.get(name).not_applicable(spec, spec.devices["leaf2"])
               for name in HOST_CHECK_NAMES}
    assert reasons == {
        "nic-trust": None, "nic-pfc": None, "nic-headroom": None,
        "nic-cnp": "no NIC config of h3 gives roce_np values",
        "nic-dcqcn": "no NIC config of h3 gives roce_rp or roce_np enable values",
        "nic-mtu": "no NIC config of h3 gives an ip link MTU"}


def test_a_host_name_beats_a_glob(tmp_path: Path) -> None:
    spec = _nics(tmp_path, '    "h*": {mlnx_qos: "hosts/{host}.mlnx_qos.txt"}\n'
                           '    h2: {mlnx_qos: hosts/h1.mlnx_qos.txt, sysfs: hosts/h2.sysfs.txt}\n')
    assert spec.hosts.nics["h2"].mlnx_qos.endswith("hosts/h1.mlnx_qos.txt")
    assert spec.hosts.nics["h2"].sysfs.endswith("hosts/h2.sysfs.txt")
    assert spec.hosts.nics["h3"].mlnx_qos.endswith("hosts/h3.mlnx_qos.txt")
    assert spec.hosts.nics["h3"].sysfs is None


def test_a_nic_files_errors_name_its_line(tmp_path: Path) -> None:
    from rocelab.errors import InputError

    with pytest.raises(InputError) as info:
        _variant(tmp_path, "h2.sysfs.txt", "rpg_gd=11", "rpg_gd=eleven")
    (problem,) = info.value.problems
    assert problem.file.endswith("hosts/h2.sysfs.txt")
    assert problem.path == "line 13 (roce_rp/rpg_gd)"


def test_each_host_check_has_its_own_name() -> None:
    names = list(builtin_checks().names())
    assert all(name in names for name in HOST_CHECK_NAMES)
    assert len(set(names)) == len(names)
