"""Static checks and the arithmetic under them: headroom and XOFF trigger figures worked by
hand, each check tripped by one defect in an otherwise good fabric, and the fabric
description's own errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest

from rocelab.errors import InputError
from rocelab.fabric.spec import FabricSpec, load_fabric_spec
from rocelab.qos.headroom import headroom, required_headroom_bytes, xoff_trigger_bytes
from rocelab.fabric.lint import builtin_checks, lint
from rocelab.qos.model import BufferProfile

ROOT = Path(__file__).resolve().parents[2]
GOOD = ROOT / "examples" / "fabric-good"
BROKEN = ROOT / "examples" / "fabric-broken"
ERRORS = ROOT / "tests" / "errors"


# --- the arithmetic


def test_headroom_matches_profiles_readme_worked_example() -> None:
    # 100 Gb/s, 40 m cable, RoCE MTU 4096 (profiles/README.md, roce-lossless):
    #   peer response   394 quanta × 512 bit / 8               = 25,216 B
    #   cable           2 × 40 m / 1.98e8 m/s × 100e9 b/s / 8  =  5,050.5 B
    #   frames          2 × (4096 + 78 + 20)                   =  8,388 B
    #   PFC frame       64 + 20                                =     84 B
    #   total           38,738.5, rounded up                   = 38,739 B
    h = headroom(100e9, 40, 4096)
    assert (h.response_bytes, h.cable_bytes, h.frames_bytes, h.pfc_frame_bytes) == (
        25_216, pytest.approx(5_050.505, abs=0.001), 8_388, 84)
    assert required_headroom_bytes(100e9, 40, 4096) == 38_739


@pytest.mark.parametrize("rate_bps,cable_m,mtu,expected", [
    # 100 m at 100G: 25,216 + 2 × 100 / 1.98e8 × 100e9 / 8 (12,626.3) + 8,388 + 84 = 46,314.3
    (100e9, 100, 4096, 46_315),
    # 400G, 30 m: 905 × 64 (57,920) + 2 × 30 / 1.98e8 × 400e9 / 8 (15,151.5) + 8,388 + 84
    #   = 81,543.5
    (400e9, 30, 4096, 81_544),
    # 25G takes 100G's 394 quanta: 25,216 + 2 × 3 / 1.98e8 × 25e9 / 8 (94.7)
    #   + 2 × (1024 + 78 + 20) (2,244) + 84 = 27,638.7
    (25e9, 3, 1024, 27_639),
    # 200G takes 400G's 905 quanta: 57,920 + 2 × 5 / 1.98e8 × 200e9 / 8 (1,262.6) + 8,388 + 84
    #   = 67,654.6
    (200e9, 5, 4096, 67_655),
])
def test_headroom_by_speed_and_cable(rate_bps: float, cable_m: float, mtu: int,
                                     expected: int) -> None:
    assert required_headroom_bytes(rate_bps, cable_m, mtu) == expected


def test_headroom_above_400g_needs_the_response_time() -> None:
    with pytest.raises(ValueError, match="800 Gb/s"):
        required_headroom_bytes(800e9, 10, 4096)
    # 1,800 × 64 (115,200) + 2 × 10 / 1.98e8 × 800e9 / 8 (10,101.0) + 8,388 + 84 = 133,773.0
    assert required_headroom_bytes(800e9, 10, 4096, response_quanta=1800) == 133_774


def test_xoff_trigger_dynamic_and_static() -> None:
    pg = BufferProfile("pg", "pool", 0, dynamic_th=-5, xoff_bytes=45_056)
    pool_bytes = 12 * 1024 * 1024
    # α = 2^-5 = 1/32, S = 12,582,912 B.
    # Empty buffer: α·S = 393,216 B (profiles/README.md's 384 KiB).
    assert xoff_trigger_bytes(pg, pool_bytes) == 393_216
    # 4 PGs congested at once (README's 4:1 incast): α·S / (1 + 4α) = 393,216 / 1.125
    #   = 349,525.3 B, README's "341 KiB per ingress PG".
    assert xoff_trigger_bytes(pg, pool_bytes, congested_pgs=4) == 349_525
    static = BufferProfile("pg", "pool", 1_000, static_th_bytes=100_000, xoff_bytes=45_056)
    # Reserved size first, then static_th: 1,000 + 100,000.
    assert xoff_trigger_bytes(static, 10_000_000) == 101_000
    # 200 PGs cannot each hold 100,000 of a 10 MB pool: 1,000 + 10,000,000 / 200.
    assert xoff_trigger_bytes(static, 10_000_000, congested_pgs=200) == 51_000


# --- the example fabrics


@pytest.fixture(scope="module")
def good() -> FabricSpec:
    return load_fabric_spec(GOOD)


def test_good_fabric_passes_every_check(good: FabricSpec) -> None:
    assert lint(good) == []
    assert list(good.devices) == ["spine1", "spine2", "leaf1", "leaf2"]
    assert {d.name: d.format for d in good.devices.values()} == {
        "spine1": "eos", "spine2": "sonic", "leaf1": "sonic", "leaf2": "sonic"}
    assert good.budgets.allreduce_step_time_s == pytest.approx(0.02)


def test_eos_device_gets_the_platform_buffers(good: FabricSpec) -> None:
    spine1 = good.devices["spine1"]
    port = spine1.port("eth1")
    assert port.pfc_enable == {3}
    assert port.pgs[3].xoff_bytes == 56 * 1024 and port.pgs[3].dynamic_th == -5
    assert spine1.profile.pools["platform_ingress_pool"].size_bytes == 12 * 1024 * 1024
    assert spine1.label("eth1") == "Ethernet1 (eth1)"
    assert good.devices["leaf1"].label("eth3") == "Ethernet8 (eth3)"
    assert spine1.port("eth7").dscp_to_tc[26] == 3  # not in the file: global map, no PFC
    assert spine1.port("eth7").pfc_enable == frozenset()


BROKEN_FAILURES = {("dscp-maps", "leaf2"), ("roce-lossless", "leaf2"), ("cnp-strict", "spine2"),
                   ("ecn-before-pfc", "spine2"), ("headroom", "leaf1"), ("mtu", "spine1"),
                   ("buffer-pool", "leaf1"), ("pfc-watchdog", "leaf2")}


def test_broken_fabric_fails_exactly_its_seeded_checks() -> None:
    findings = lint(load_fabric_spec(BROKEN))
    assert {(f.check, f.device) for f in findings} == BROKEN_FAILURES
    assert {f.check for f in findings} == set(builtin_checks().names())


# --- one defect at a time in a copy of the good fabric


def _variant(tmp_path: Path, edit: Callable[[Path], None]) -> FabricSpec:
    copy = tmp_path / "fabric"
    shutil.copytree(GOOD, copy)
    edit(copy)
    return load_fabric_spec(copy)


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _config_db(path: Path, change: Callable[[dict], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=4))


def _only(spec: FabricSpec, check: str, device: str) -> list:
    findings = lint(spec)
    assert {(f.check, f.device) for f in findings} == {(check, device)}
    return findings


def test_dscp_maps_catch_eos_defaults_that_differ_from_sonic(tmp_path: Path) -> None:
    # Without its explicit map, spine1 keeps EOS's default: DSCP 24-31 → TC 3, RoCE's lossless
    # TC, on spine1 alone, while the SONiC leaves before it put them in TC 0. The leaves after
    # it take them out of RoCE's TC again: harmless to RoCE, so no finding there.
    def default_map(d: Path) -> None:
        text = (d / "spine1.cfg").read_text()
        full_map = next(line for line in text.splitlines(keepends=True)
                        if line.startswith("qos map dscp 0 1 2 "))
        _replace(d / "spine1.cfg", full_map, "")

    findings = _only(_variant(tmp_path, default_map), "dscp-maps", "spine1")
    dscp24 = [f for f in findings if f.configured.startswith("DSCP 24 ")]
    assert [f.port for f in dscp24] == ["Ethernet1 (eth1)", "Ethernet2 (eth2)"]
    assert dscp24[0].configured == "DSCP 24 → TC 3 → queue 3"
    assert dscp24[0].required == ("DSCP 24 → TC 0 → queue 0, as on leaf1 Ethernet0 (eth1), the hop "
                                  "before (leaf1:Ethernet8)")
    assert dscp24[0].what == "DSCP 24 joins RoCE's lossless TC 3 here though leaf1 keeps it apart: it shares RoCE's PG and pauses"
    assert "spine1.cfg: no `qos map dscp 24` (EOS's default)" in dscp24[0].source
    assert {f.configured.split(" →")[0] for f in findings} == {
        f"DSCP {d}" for d in (24, 25, 27, 28, 29, 30, 31)}


def test_roce_lossless_checks_the_nics_priority(tmp_path: Path) -> None:
    spec = _variant(tmp_path, lambda d: _replace(d / "fabric.yml", "roce_priority: 3",
                                                 "roce_priority: 4"))
    findings = lint(spec)
    assert {(f.check, f.device) for f in findings} == {("roce-lossless", "leaf1"),
                                                       ("roce-lossless", "leaf2")}
    assert [f.port for f in findings if f.device == "leaf1"] == [
        "Ethernet0 (eth1)", "Ethernet4 (eth2)"]  # the host-facing ports
    assert "NIC sends and pauses it on priority 4" in findings[0].what
    assert findings[0].required == "TC 4 (hosts.roce_priority)"


def test_roce_lossless_names_the_lossy_hop(tmp_path: Path) -> None:
    spec = _variant(tmp_path, lambda d: _replace(
        d / "spine1.cfg", "qos map dscp 26 to traffic-class 3", "qos map dscp 26 to traffic-class 4"))
    findings = [f for f in lint(spec) if f.check == "roce-lossless"]
    assert {f.device for f in findings} == {"spine1"}
    assert findings[0].configured == "pfc_enable {3}, DSCP 26 → TC 4"
    assert "spine1.cfg line 24" in findings[0].source  # priority-flow-control on, in the profile
    assert "spine1.cfg line 19" in findings[0].source  # qos map dscp 26


def test_roce_lossless_finds_a_pause_that_stops_the_wrong_queue(tmp_path: Path) -> None:
    # spine2 pauses queue 4 on priority 3 while TC 3 sits in queue 3: leaves' XOFF holds
    # nothing back there (the dynamic pfc-threshold[spine2:p3] probe sees the same defect).
    def wrong_queue(d: Path) -> None:
        _config_db(d / "spine2" / "config_db.json",
                   lambda doc: doc["MAP_PFC_PRIORITY_TO_QUEUE"]["ROCE"].update({"3": "4"}))

    findings = _only(_variant(tmp_path, wrong_queue), "roce-lossless", "spine2")
    assert [f.port for f in findings] == ["Ethernet0 (eth1)", "Ethernet4 (eth2)"]
    assert findings[0].configured == "priority 3 → queue 4, TC 3 → queue 3"
    assert findings[0].required == "priority 3 → queue 3 (toward leaf1:Ethernet12)"
    assert 'spine2/config_db.json: MAP_PFC_PRIORITY_TO_QUEUE.ROCE."3"' in findings[0].source
    assert 'spine2/config_db.json: TC_TO_QUEUE_MAP.ROCE."3"' in findings[0].source


def test_cnp_strict(tmp_path: Path) -> None:
    spec = _variant(tmp_path, lambda d: _replace(
        d / "spine1.cfg", "   tx-queue 6\n      priority strict", "   tx-queue 6\n      no priority"))
    findings = _only(spec, "cnp-strict", "spine1")
    assert [f.port for f in findings] == ["Ethernet1 (eth1)", "Ethernet2 (eth2)"]
    assert findings[0].configured == "queue 6 DWRR weight 1"
    assert findings[0].required == "queue 6 STRICT (toward leaf1:Ethernet8)"
    assert findings[0].source.endswith("spine1.cfg line 37")


def test_ecn_kmin_above_the_pfc_trigger(tmp_path: Path) -> None:
    spec = _variant(tmp_path, lambda d: _replace(
        d / "spine1.cfg", "minimum-threshold 100 kbytes maximum-threshold 300 kbytes",
        "minimum-threshold 400 kbytes maximum-threshold 600 kbytes"))
    findings = _only(spec, "ecn-before-pfc", "spine1")
    # Kmin 400 × 1,024 = 409,600 B. spine1's platform: dynamic_th −5 on 12 MiB, 2 cabled
    # lossless PGs: α·S / (1 + 2α) = 393,216 / 1.0625 = 370,085.6 → 370,085 B.
    assert findings[0].configured == "Kmin 409,600 B"
    assert findings[0].required.startswith("Kmin < 370,085 B, the PFC trigger of PG 3")
    assert "393,216 B on an empty buffer" in findings[0].required
    assert "fabric.yml: devices.spine1.buffer.dynamic_th (line" in findings[0].source


def test_ecn_missing_on_a_lossless_queue(tmp_path: Path) -> None:
    def no_wred(doc: dict) -> None:
        for key, fields in doc["QUEUE"].items():
            if key.startswith("Ethernet8|"):
                fields.pop("wred_profile", None)

    spec = _variant(tmp_path, lambda d: _config_db(d / "leaf1" / "config_db.json", no_wred))
    (finding,) = _only(spec, "ecn-before-pfc", "leaf1")
    assert (finding.port, finding.priority, finding.configured) == (
        "Ethernet8 (eth3)", 3, "ECN off")
    assert finding.source.endswith("QUEUE Ethernet8 queue 3 has no wred_profile")


def test_headroom_too_small_for_a_long_cable(tmp_path: Path) -> None:
    spec = _variant(tmp_path, lambda d: _replace(
        d / "topology.yml", '["leaf2:eth4", "spine2:eth2"], cable: 30',
        '["leaf2:eth4", "spine2:eth2"], cable: 60'))
    findings = lint(spec)
    # Both ends carry the 40 m profile (xoff 45,056 B); 60 m needs
    # 25,216 + 2 × 60 / 1.98e8 × 100e9 / 8 (7,575.8) + 8,388 + 84 = 41,263.8 → fits.
    assert findings == []
    spec = _variant(tmp_path / "b", lambda d: _replace(
        d / "topology.yml", '["leaf2:eth4", "spine2:eth2"], cable: 30',
        '["leaf2:eth4", "spine2:eth2"], cable: 120'))
    # 120 m: 25,216 + 15,151.5 + 8,388 + 84 = 48,839.5 → 48,840 B > 45,056 at both ends.
    findings = lint(spec)
    assert {(f.check, f.device, f.port) for f in findings} == {
        ("headroom", "leaf2", "Ethernet12 (eth4)"), ("headroom", "spine2", "Ethernet4 (eth2)")}
    leaf2 = next(f for f in findings if f.device == "leaf2")
    assert leaf2.configured == "xoff 45,056 B"
    assert leaf2.required.startswith("xoff ≥ 48,840 B for the link to spine2:Ethernet4 "
                                     "(100 Gb/s, 120 m, RoCE MTU 4096")
    assert "BUFFER_PROFILE.pg_lossless_100000_40m_profile.xoff (BUFFER_PG Ethernet12 PG 3)" in \
        leaf2.source


def test_headroom_of_an_eos_device_without_platform_buffers(tmp_path: Path) -> None:
    def drop_buffer(d: Path) -> None:
        text = (d / "fabric.yml").read_text()
        start = text.index("    # EOS running-configs")
        end = text.index("  spine2:")
        (d / "fabric.yml").write_text(text[:start] + text[end:])

    findings = _only(_variant(tmp_path, drop_buffer), "headroom", "spine1")
    assert findings[0].what == "PG 3 has no lossless buffer profile, so no headroom"
    assert "devices.spine1.buffer is not given" in findings[0].source


def test_mtu_from_the_topology_and_from_the_device(tmp_path: Path) -> None:
    spec = _variant(tmp_path, lambda d: _replace(
        d / "topology.yml", '["h1:eth1", "leaf1:eth1"], cable: 3', '["h1:eth1", "leaf1:eth1"], cable: 3, mtu: 1500'))
    (finding,) = _only(spec, "mtu", "leaf1")
    # RoCE MTU 4096 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4 = 4,156 B of IP packet.
    assert (finding.port, finding.configured) == ("Ethernet0 (eth1)", "IP MTU 1500")
    assert finding.required.startswith("IP MTU ≥ 4156")
    assert finding.source.endswith("topology.yml: topology.links[4].mtu")

    def small(doc: dict) -> None:
        doc["PORT"]["Ethernet4"]["mtu"] = "4000"
    spec = _variant(tmp_path / "b", lambda d: _config_db(d / "leaf2" / "config_db.json", small))
    (finding,) = _only(spec, "mtu", "leaf2")
    assert (finding.port, finding.configured) == ("Ethernet4 (eth2)", "IP MTU 4000")
    assert finding.source.endswith("leaf2/config_db.json: PORT.Ethernet4.mtu")


def test_buffer_pool_with_a_shared_headroom_pool(tmp_path: Path) -> None:
    def shared(xoff: str) -> Callable[[Path], None]:
        def edit(d: Path) -> None:
            _config_db(d / "leaf1" / "config_db.json",
                       lambda doc: doc["BUFFER_POOL"]["ingress_lossless_pool"].update(xoff=xoff))
        return edit

    # With a shared headroom pool, PGs' xoff come from it: Σ size (0 here) + 12,000,000 fits
    # 12,582,912 however many PGs' xoff there are.
    assert lint(_variant(tmp_path / "a", shared("12000000"))) == []
    (finding,) = _only(_variant(tmp_path / "b", shared("13000000")), "buffer-pool", "leaf1")
    assert finding.configured == "size 12,582,912 B"
    assert finding.required == ("size ≥ 13,000,000 B reserved: 1 × shared headroom pool xoff "
                                "13,000,000")
    assert finding.source.endswith("BUFFER_POOL.ingress_lossless_pool.size")


def test_buffer_pool_oversubscribed_by_reservations() -> None:
    (finding,) = [f for f in lint(load_fabric_spec(BROKEN)) if f.check == "buffer-pool"]
    # 8 ports × (ingress_lossy_profile size 1,572,864 + lossless xoff 45,056)
    #   = 8 × 1,617,920 = 12,943,360 B > 12,582,912 B
    assert finding.required == (
        "size ≥ 12,943,360 B reserved: 8 × ingress_lossy_profile size 1,572,864 + "
        "8 × pg_lossless_100000_40m_profile xoff 45,056")


def test_pfc_watchdog_on_every_lossless_priority(tmp_path: Path) -> None:
    spec = _variant(tmp_path, lambda d: _replace(
        d / "spine1.cfg", "priority-flow-control pause watchdog default timeout 0.2\n", ""))
    findings = _only(spec, "pfc-watchdog", "spine1")
    assert findings[0].configured == "no PFC watchdog"
    assert "no `priority-flow-control pause watchdog default timeout`" in findings[0].source

    def guard_nothing(doc: dict) -> None:
        doc["PORT_QOS_MAP"]["Ethernet0"]["pfcwd_sw_enable"] = ""
    spec = _variant(tmp_path / "b", lambda d: _config_db(d / "leaf1" / "config_db.json",
                                                         guard_nothing))
    (finding,) = _only(spec, "pfc-watchdog", "leaf1")
    assert (finding.port, finding.configured) == ("Ethernet0 (eth1)", "watchdog on priorities none")
    assert finding.source.endswith("PORT_QOS_MAP.Ethernet0.pfcwd_sw_enable")


def test_finding_reads_as_one_message() -> None:
    (finding,) = [f for f in lint(load_fabric_spec(BROKEN)) if f.check == "headroom"]
    assert str(finding).startswith(
        "leaf1 Ethernet8 (eth3) priority 3: PG 3 has too little headroom for what arrives after "
        "XOFF: configured xoff 45,056 B; required xoff ≥ 46,315 B")
    assert "\n    from " in str(finding)


# --- the fabric description's own errors


CASES = sorted(p.name for p in ERRORS.glob("fabric-*") if p.is_dir())


@pytest.mark.parametrize("case", CASES)
def test_bad_fabric_description_names_the_problem(case: str) -> None:
    expected = [line for line in (ERRORS / f"{case}.txt").read_text().splitlines() if line]
    with pytest.raises(InputError) as info:
        load_fabric_spec(ERRORS / case)
    text = str(info.value)
    for line in expected:
        assert line in text
    assert len(info.value.problems) == len(expected)


def test_a_directory_without_fabric_yml(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="holds no fabric.yml"):
        load_fabric_spec(tmp_path)


def test_a_single_yaml_file_is_a_description(tmp_path: Path) -> None:
    shutil.copytree(GOOD, tmp_path / "g")
    (tmp_path / "g" / "fabric.yml").rename(tmp_path / "g" / "qos-fabric.yaml")
    spec = load_fabric_spec(tmp_path / "g" / "qos-fabric.yaml")
    assert spec.name == "fabric-good" and lint(spec) == []
