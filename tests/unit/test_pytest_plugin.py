"""The pytest plugin, run as users run it (`pytest --fabric DIR`), inside pytester."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FULL_CONFIG_DB = ROOT / "tests" / "data" / "sonic" / "config_db_full.json"
SWITCH_CHECKS = ("buffer-pool", "cnp-strict", "dscp-maps", "ecn-before-pfc", "headroom", "mtu",
                 "pfc-watchdog", "roce-lossless")
HOST_CHECKS = ("nic-cnp", "nic-dcqcn", "nic-headroom", "nic-mtu", "nic-pfc", "nic-trust")
# Not applicable on the examples here: their files give no BGP (test_bgplint.py: examples/fabric-bgp)
BGP_CHECKS = ("bgp-asn", "bgp-bfd", "bgp-maximum-paths", "bgp-multipath")
CHECKS = tuple(sorted(SWITCH_CHECKS + HOST_CHECKS + BGP_CHECKS))
SWITCHES = ("spine1", "spine2", "leaf1", "leaf2")
LEAVES = ("leaf1", "leaf2")  # the switches cabled to hosts: the host checks apply to them alone
PASSING = len(SWITCH_CHECKS) * len(SWITCHES) + len(HOST_CHECKS) * len(LEAVES)
NOT_APPLICABLE = len(HOST_CHECKS) * (len(SWITCHES) - len(LEAVES)) + len(BGP_CHECKS) * len(SWITCHES)


@pytest.fixture
def fabrics(pytester: pytest.Pytester) -> Path:
    """fabric-good and fabric-broken, copied into pytester's folder."""
    for name in ("fabric-good", "fabric-broken"):
        shutil.copytree(EXAMPLES / name, pytester.path / name)
    return pytester.path


def _failed(result: pytest.RunResult) -> set[str]:
    return {line.split()[1] for line in result.outlines if line.startswith("FAILED ")}


def test_good_fabric_passes(pytester: pytest.Pytester, fabrics: Path) -> None:
    result = pytester.runpytest("--fabric", "fabric-good", "-m", "rocelab_static", "-v")
    result.assert_outcomes(passed=PASSING, skipped=NOT_APPLICABLE)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "rocelab fabric: fabric-good from fabric-good/fabric.yml: spine1 (eos), spine2 (sonic), "
        "leaf1 (sonic), leaf2 (sonic)",
        "collecting ... collected 80 items / 8 deselected / 72 selected",
    ])
    assert "fabric-good/fabric.yml::buffer-pool[spine1] PASSED" in result.stdout.str()
    assert "fabric-good/fabric.yml::nic-trust[leaf1] PASSED" in result.stdout.str()
    assert "fabric-good/fabric.yml::nic-trust[spine1] SKIPPED" in result.stdout.str()


BROKEN = {
    "dscp-maps[leaf2]": [
        "leaf2 Ethernet0 (eth1) priority 1: this port's map puts RoCE (DSCP 26) in TC 1, which is "
        "lossy here: configured DSCP 26 → TC 1 → queue 1; required DSCP 26 → a pfc_enable TC ({3})",
        'fabric-broken/leaf2/config_db.json: DSCP_TO_TC_MAP.ROCE."26"'],
    "roce-lossless[leaf2]": [
        "leaf2 Ethernet0 (eth1) priority 1: RoCE (DSCP 26, TC 1) is lossy here",
        "configured pfc_enable {3}, DSCP 26 → TC 1; required TC 1 in pfc_enable",
        "fabric-broken/leaf2/config_db.json: PORT_QOS_MAP.Ethernet0.pfc_enable"],
    "cnp-strict[spine2]": [
        "spine2 Ethernet0 (eth1) priority 6: CNPs (DSCP 48, TC 6) leave through a lossy queue "
        "that is not strict priority",
        "configured queue 6 DWRR weight 40; required queue 6 STRICT (toward leaf1:Ethernet12)",
        "fabric-broken/spine2/config_db.json: SCHEDULER.scheduler.lossy (QUEUE Ethernet0 queue 6)"],
    "ecn-before-pfc[spine2]": [
        "spine2 Ethernet0 (eth1) priority 3: queue 3 starts marking ECN only after PFC has fired",
        "configured Kmin 409,600 B; required Kmin < 370,085 B, the PFC trigger of PG 3",
        "fabric-broken/spine2/config_db.json: WRED_PROFILE.AZURE_LOSSLESS.green_min_threshold"],
    "headroom[leaf1]": [
        "leaf1 Ethernet8 (eth3) priority 3: PG 3 has too little headroom for what arrives after "
        "XOFF: configured xoff 45,056 B; required xoff ≥ 46,315 B for the link to "
        "spine1:Ethernet1 (100 Gb/s, 100 m, RoCE MTU 4096",
        "fabric-broken/leaf1/config_db.json: BUFFER_PROFILE.pg_lossless_100000_40m_profile.xoff"],
    "mtu[spine1]": [
        "spine1 Ethernet2 (eth2): RoCE packets of MTU 4096 do not fit the link to "
        "leaf2:Ethernet8: configured IP MTU 1500; required IP MTU ≥ 4156",
        "from fabric-broken/spine1.cfg line 56"],
    "buffer-pool[leaf1]": [
        "leaf1: ingress pool ingress_lossless_pool is oversubscribed by the reservations drawing "
        "from it: configured size 12,582,912 B; required size ≥ 12,943,360 B reserved",
        "fabric-broken/leaf1/config_db.json: BUFFER_POOL.ingress_lossless_pool.size"],
    "pfc-watchdog[leaf2]": [
        "leaf2 Ethernet0 (eth1) priority 3: a PFC storm on this port would stop its lossless "
        "traffic indefinitely: configured no PFC watchdog",
        "fabric-broken/leaf2/config_db.json: PFC_WD has no entry for Ethernet0"],
    "nic-trust[leaf1]": [
        "h1 eth1 priority 0: the NIC trusts PCP, but leaf1 Ethernet0 (eth1) classifies RoCE by "
        "DSCP and sends it routed, untagged",
        "configured Priority trust state pcp; leaf1 Ethernet0 (eth1): DSCP 26 → TC 3; required "
        "Priority trust state dscp",
        "from fabric-broken/hosts/h1.mlnx_qos.txt line 2 (Priority trust state); "
        'fabric-broken/leaf1/config_db.json: DSCP_TO_TC_MAP.ROCE."26"'],
    "nic-trust[leaf2]": [
        "h3 eth1 priority 3: the NIC puts RoCE (DSCP 26) on priority 3, leaf2 Ethernet0 (eth1) "
        "on priority 1",
        "from fabric-broken/hosts/h3.mlnx_qos.txt line 7 (dscp2prio prio:3)"],
    "nic-headroom[leaf1]": [
        "h1 eth1: the NIC sizes its PFC headroom for a 1 m cable, shorter than the link to leaf1 "
        "Ethernet0 (eth1): configured Cable len 1; required Cable len ≥ 3",
        "from fabric-broken/hosts/h1.mlnx_qos.txt line 14 (Cable len)"],
    "nic-pfc[leaf1]": [
        "h2 eth1 priority 4: the NIC's PFC priorities differ from leaf1 Ethernet4 (eth2)'s "
        "pfc_enable",
        "configured PFC enabled on {3, 4}; required PFC enabled on {3}",
        "from fabric-broken/hosts/h2.mlnx_qos.txt line 17 (PFC configuration enabled); "
        "fabric-broken/leaf1/config_db.json: PORT_QOS_MAP.Ethernet4.pfc_enable"],
    "nic-cnp[leaf1]": [
        "h2 eth1 priority 0: CNPs leave with DSCP 46",
        "configured cnp_dscp 46; required cnp_dscp 48 (hosts.cnp_dscp)",
        "required queue 0 STRICT (toward spine1:Ethernet1)",
        "from fabric-broken/hosts/h2.sysfs.txt line 2 (roce_np/cnp_dscp)"],
    "nic-dcqcn[leaf2]": [
        "h3 eth1 priority 3: DCQCN's roce_rp is off on RoCE's priority 3",
        "configured roce_rp/enable/3 0 (enabled on none); required roce_rp/enable/3 1",
        "from fabric-broken/hosts/h3.sysfs.txt line 31 (roce_rp/enable/3)"],
    "nic-mtu[leaf2]": [
        "h4 eth1: the netdev MTU gives RoCE an MTU of 2048, below hosts.roce_mtu 4096",
        "configured MTU 4096; required MTU ≥ 4192",
        "from fabric-broken/hosts/h4.sysfs.txt line 37 (ip link ens1f0np0 mtu)"],
}


def test_broken_fabric_fails_exactly_the_seeded_checks(pytester: pytest.Pytester,
                                                       fabrics: Path) -> None:
    result = pytester.runpytest("--fabric", "fabric-broken", "-m", "rocelab_static")
    result.assert_outcomes(failed=len(BROKEN), passed=PASSING - len(BROKEN), skipped=NOT_APPLICABLE)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert _failed(result) == {f"fabric-broken/fabric.yml::{item}" for item in BROKEN}
    output = result.stdout.str()
    assert "Traceback" not in output and "lint.py" not in output  # findings, not stack frames


@pytest.mark.parametrize("item", sorted(BROKEN))
def test_each_seeded_defect_fails_with_its_message(pytester: pytest.Pytester, fabrics: Path,
                                                   item: str) -> None:
    # -k matches substrings: headroom[leaf1] would select nic-headroom[leaf1] too
    select = item if item.startswith("nic-") else f"{item} and not nic-{item}"
    result = pytester.runpytest("--fabric", "fabric-broken", "-m", "rocelab_static", "-k", select)
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    for fragment in BROKEN[item]:
        assert fragment in output


def test_eos_and_sonic_devices_cross_check_their_maps(pytester: pytest.Pytester,
                                                      fabrics: Path) -> None:
    spine1 = pytester.path / "fabric-good" / "spine1.cfg"
    spine1.write_text(spine1.read_text().replace("qos map dscp 26 to traffic-class 3",
                                                 "qos map dscp 26 to traffic-class 4"))
    result = pytester.runpytest("--fabric", "fabric-good", "-m", "rocelab_static")
    # One wrong map on the EOS spine: it puts RoCE in a lossy TC, so RoCE is lossy through it.
    assert _failed(result) == {"fabric-good/fabric.yml::dscp-maps[spine1]",
                               "fabric-good/fabric.yml::roce-lossless[spine1]"}
    result.stdout.fnmatch_lines([
        "spine1 Ethernet1 (eth1) priority 4: this port's map puts RoCE (DSCP 26) in TC 4, which is "
        "lossy here: configured DSCP 26 → TC 4 → queue 4; required DSCP 26 → a pfc_enable TC ({3}) "
        "(hop leaf1:Ethernet8 → spine1 → leaf2:Ethernet8)",
        "    from fabric-good/spine1.cfg line 19; fabric-good/spine1.cfg: no `qos map "
        "traffic-class 4 to tx-queue` (EOS's default: the tx-queue of the same number)",
    ])


def test_a_whole_config_db_with_unrelated_tables_loads(pytester: pytest.Pytester) -> None:
    shutil.copy(FULL_CONFIG_DB, pytester.path / "leaf1.json")
    pytester.makefile(".yml", fabric="""\
        name: one-leaf
        topology:
          defaults: {rate: 100G, mtu: 9100}
          nodes:
            leaf1: {role: leaf}
            h1: {role: host}
            h2: {role: host}
          links:
            - {endpoints: ["h1:eth1", "leaf1:eth1"], cable: 5}
            - {endpoints: ["h2:eth1", "leaf1:eth2"], cable: 5}
        devices:
          leaf1: {sonic: leaf1.json}
        hosts: {roce_dscp: 3, roce_priority: 3, cnp_dscp: 48, roce_mtu: 4096}
        """)
    result = pytester.runpytest("--fabric", "fabric.yml", "-m", "rocelab_static")
    # SONiC's AZURE defaults, as exported: lossless and watchdogged as they should be, but
    # CNPs (DSCP 48 → TC 6) share a DWRR queue, and Kmin (1 MiB) sits above the PFC trigger
    # of its dynamic_th −3 PGs once the switch is busy. Its BGP_NEIGHBOR names a spine this
    # one-leaf topology does not have.
    assert _failed(result) == {"fabric.yml::cnp-strict[leaf1]",
                               "fabric.yml::ecn-before-pfc[leaf1]", "fabric.yml::bgp-asn[leaf1]"}
    result.assert_outcomes(failed=3, passed=6 + len(BGP_CHECKS) - 1, skipped=len(HOST_CHECKS))  # no hosts.nics
    result.stdout.fnmatch_lines(["*configured Kmin 1,048,576 B; required Kmin < 875,061 B*"])
    result.stdout.fnmatch_lines(["leaf1: neighbor 10.0.0.0 is the address of no switch cabled to leaf1*"])


def _corrupt(path: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        target = root / "fabric-good" / path
        text = target.read_text()
        assert old in text
        target.write_text(text.replace(old, new, 1))
    return edit


def _binary(root: Path) -> None:
    target = root / "fabric-good" / "spine1.cfg"
    target.write_bytes(target.read_bytes() + b"\xff\xfe\n")


@pytest.mark.parametrize("edit,expected", [
    (_corrupt("leaf1/config_db.json", '"BUFFER_PG": {', '"BUFFER_PG" {'),
     "fabric-good/leaf1/config_db.json: line 2 column 17: invalid JSON: Expecting ':' delimiter"),
    (_corrupt("spine1.cfg", "priority-flow-control priority 3 no-drop",
              "priority-flow-control priority 3 nodrop"),
     "fabric-good/spine1.cfg: line 25: `priority-flow-control priority 3 nodrop`: is not a "
     "priority-flow-control statement rocelab reads"),
    (_corrupt("fabric.yml", "  roce_mtu: 4096", "  roce_mtu: [4096"),
     "fabric-good/fabric.yml: line 24, column 7: is not valid YAML: expected ',' or ']'"),
    (_corrupt("fabric.yml", "leaf2: {sonic: leaf2/config_db.json}",
              "leaf2: {sonic: leaf2/config.json}"),
     "fabric-good/fabric.yml: devices.leaf2.sonic (line 7): 'leaf2/config.json' is not a file"),
    (_binary, "fabric-good/spine1.cfg: is not UTF-8 text: invalid start byte"),
], ids=["json", "eos", "yaml", "missing-file", "binary"])
def test_malformed_files_are_a_usage_error_naming_file_and_place(
        pytester: pytest.Pytester, fabrics: Path, edit: Callable[[Path], None],
        expected: str) -> None:
    edit(fabrics)
    result = pytester.runpytest("--fabric", "fabric-good", "-m", "rocelab_static")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # 4
    result.stderr.fnmatch_lines(["ERROR: --fabric fabric-good: the fabric description has "
                                 "problems:", f"{expected}*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_missing_description_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fabric", "nowhere", "-m", "rocelab_static")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*nowhere: cannot be read: No such file or directory*"])


def test_junit_xml_carries_every_item(pytester: pytest.Pytester, fabrics: Path) -> None:
    pytester.runpytest("--fabric", "fabric-broken", "-m", "rocelab_static", "--junitxml=qos.xml")
    suite = ET.parse(pytester.path / "qos.xml").getroot().find("testsuite")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == {f"{check}[{switch}]" for check in CHECKS for switch in SWITCHES}
    assert {case.get("classname") for case in cases.values()} == {"fabric-broken.fabric.yml"}
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        str(len(CHECKS) * len(SWITCHES)), str(len(BROKEN)), "0", str(NOT_APPLICABLE))
    failure = cases["headroom[leaf1]"].find("failure")
    assert failure.get("message").startswith("headroom on leaf1")
    assert "required xoff ≥ 46,315 B" in failure.text
    properties = {p.get("name"): p.get("value") for p in cases["headroom[leaf1]"].iter("property")}
    assert properties == {"check": "headroom", "device": "leaf1"}
    assert cases["mtu[leaf1]"].find("failure") is None


def test_markers_select_static_checks(pytester: pytest.Pytester, fabrics: Path) -> None:
    result = pytester.runpytest("--fabric", "fabric-good", "-m", "rocelab_static")
    result.assert_outcomes(passed=PASSING, skipped=NOT_APPLICABLE, deselected=8)
    result = pytester.runpytest("--fabric", "fabric-good", "-m", "rocelab_dynamic", "--collect-only", "-q")
    assert [line for line in result.outlines if "::" in line] == [
        f"fabric-good/fabric.yml::{name}" for name in
        ("pfc-threshold[spine1:p3]", "pfc-threshold[spine2:p3]", "pfc-threshold[leaf1:p3]",
         "pfc-threshold[leaf2:p3]", "incast-lossless", "ecn-before-pfc", "allreduce-budget", "ecmp-width")]
    result = pytester.runpytest("--fabric", "fabric-good", "-m", "rocelab_static", "-k", "headroom")
    # headroom[SWITCH] and nic-headroom[SWITCH], the latter not applicable on the spines
    result.assert_outcomes(passed=6, skipped=2, deselected=72)
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.rocelab_static:*", "@pytest.mark.rocelab_dynamic:*"])


def test_collect_only_lists_a_check_per_switch(pytester: pytest.Pytester, fabrics: Path) -> None:
    result = pytester.runpytest("--fabric", "fabric-good", "-m", "rocelab_static", "--collect-only", "-q")
    assert [line for line in result.outlines if "::" in line] == [
        f"fabric-good/fabric.yml::{check}[{switch}]" for check in CHECKS for switch in SWITCHES]


def test_fabric_spec_fixture_for_users_tests(pytester: pytest.Pytester, fabrics: Path) -> None:
    pytester.makepyfile(test_mine="""
        def test_hosts_mark_roce_26(fabric_spec):
            assert fabric_spec.name == "fabric-good"
            assert fabric_spec.hosts.roce_dscp == 26
            assert fabric_spec.devices["spine1"].format == "eos"
        """)
    result = pytester.runpytest("--fabric", "fabric-good", "-m", "not rocelab_dynamic", "test_mine.py", "-rs")
    result.assert_outcomes(passed=PASSING + 1, skipped=NOT_APPLICABLE)
    result = pytester.runpytest("test_mine.py", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no fabric description: run pytest with --fabric DIR|FILE*"])


def test_loading_the_plugin_imports_no_rocelab_module() -> None:
    # pytest loads entry-point plugins before conftest.py files, and rocelab.paths reads
    # ROCELAB_STATE_DIR on first import (tests/conftest.py sets it for the suite).
    import subprocess
    import sys

    code = ("import sys, rocelab.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith('rocelab.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['rocelab.pytest_plugin']"


def test_readers_notes_are_printed_beside_the_verdict(pytester: pytest.Pytester, fabrics: Path) -> None:
    """What a reader warned about (here an EOS `service-profile` naming no qos profile) is
    shown per device at the end of the run, where the gate's reader looks."""
    spine1 = pytester.path / "fabric-good" / "spine1.cfg"
    text = spine1.read_text()
    spine1.write_text(text.replace("   service-profile ROCE\n", "   service-profile ROCE-NEXT\n", 1))
    result = pytester.runpytest("--fabric", "fabric-good", "-m", "rocelab_static")
    result.stdout.fnmatch_lines(["*rocelab: what the configurations' readers derived, warned about or left unchecked*",
                                 "spine1: *`service-profile ROCE-NEXT`: names no qos profile*"])
    spine1.write_text(text)  # the example as shipped: nothing to say
    assert "rocelab: what the configurations' readers" not in pytester.runpytest(
        "--fabric", "fabric-good", "-m", "rocelab_static").stdout.str()


# --- Cumulus leaves (NVUE), SONiC spines

CUMULUS_BROKEN = {  # each seeded defect of examples/fabric-cumulus-broken: its statement, named
    "cnp-strict[leaf1]": "fabric-cumulus-broken/leaf1/nv-config.yml: "
                         "set.qos.egress-scheduler.default-global.traffic-class.6.mode (line 42)",
    "ecn-before-pfc[leaf1]": "set.qos.congestion-control.default-global.traffic-class.3.min-threshold "
                             "(line 48): `qos congestion-control default-global traffic-class 3 "
                             "min-threshold 600000`",
    "mtu[leaf1]": "set.interface.swp3.link.mtu (line 21): `interface swp3 link mtu 1500`",
    "dscp-maps[leaf2]": "fabric-cumulus-broken/leaf2.nvue: line 8: "
                        "`nv set qos mapping default-global dscp 26 switch-priority 1`",
    "roce-lossless[leaf2]": "configured pfc_enable {3}, DSCP 26 → TC 1; required TC 1 in pfc_enable",
    "headroom[leaf2]": "fabric-cumulus-broken/leaf2.nvue: line 9: "
                       "`nv set qos pfc default-global cable-length 20`",
    "pfc-watchdog[leaf2]": "fabric-cumulus-broken/leaf2.nvue: no `interface swp1 qos pfc-watchdog`",
    "nic-trust[leaf2]": "the NIC puts RoCE (DSCP 26) on priority 3, leaf2 swp1 (eth1) on priority 1",
}


def test_cumulus_fabric_passes_and_its_broken_copy_fails_exactly_its_defects(
        pytester: pytest.Pytester) -> None:
    for name in ("fabric-cumulus", "fabric-cumulus-broken"):
        shutil.copytree(EXAMPLES / name, pytester.path / name)
    good = pytester.runpytest("--fabric", "fabric-cumulus", "-m", "rocelab_static")
    good.assert_outcomes(passed=PASSING, skipped=NOT_APPLICABLE)
    good.stdout.fnmatch_lines(["rocelab fabric: fabric-cumulus from fabric-cumulus/fabric.yml: "
                               "spine1 (sonic), spine2 (sonic), leaf1 (cumulus), leaf2 (cumulus)"])
    broken = pytester.runpytest("--fabric", "fabric-cumulus-broken", "-m", "rocelab_static")
    assert _failed(broken) == {f"fabric-cumulus-broken/fabric.yml::{item}" for item in CUMULUS_BROKEN}
    output = broken.stdout.str()
    for fragment in CUMULUS_BROKEN.values():
        assert fragment in output
