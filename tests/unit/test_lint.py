"""Static checks and the arithmetic under them: headroom and XOFF trigger figures worked by
hand, each check tripped by one defect in an otherwise good fabric, and the fabric
description's own errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Callable

import pytest

from rocelab.errors import InputError
from rocelab.fabric.spec import FabricSpec, load_fabric_spec
from rocelab.qos.headroom import headroom, required_headroom_bytes, xoff_trigger_bytes
from rocelab.fabric.bgplint import BGP_CHECKS
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
                   ("buffer-pool", "leaf1"), ("pfc-watchdog", "leaf2"),
                   # host findings name the host: h1 trusts PCP and sizes its headroom for 1 m,
                   # h2 enables PFC on 4 too and sends CNPs with DSCP 46, h3's reaction point is
                   # off, h4's MTU is too small; h3 and h4 put RoCE on priority 3, which leaf2's
                   # broken DSCP map puts on 1
                   ("nic-trust", "h1"), ("nic-headroom", "h1"), ("nic-pfc", "h2"), ("nic-cnp", "h2"),
                   ("nic-dcqcn", "h3"), ("nic-trust", "h3"), ("nic-mtu", "h4"), ("nic-trust", "h4")}


def test_broken_fabric_fails_exactly_its_seeded_checks() -> None:
    findings = lint(load_fabric_spec(BROKEN))
    assert {(f.check, f.device) for f in findings} == BROKEN_FAILURES
    # every check but BGP's (fabric-broken's files give no BGP: test_bgplint.py breaks fabric-bgp)
    assert {f.check for f in findings} == set(builtin_checks().names()) - {c.name for c in BGP_CHECKS}


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
    # h1's NIC, at MTU 9000, now sends packets the link does not carry either.
    finding, host = sorted(lint(spec), key=lambda f: f.check)
    assert (host.check, host.device, host.configured) == ("nic-mtu", "h1", "MTU 9000")
    assert host.required == "MTU ≤ 1500, as leaf1 Ethernet0 (eth1)"
    assert "hosts/h1.sysfs.txt line 37 (ip link ens1f0np0 mtu); " in host.source
    assert host.source.endswith("topology.yml: topology.links[4].mtu")
    assert finding.check == "mtu"
    # RoCE MTU 4096 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4 = 4,156 B of IP packet.
    assert (finding.port, finding.configured) == ("Ethernet0 (eth1)", "IP MTU 1500")
    assert finding.required.startswith("IP MTU ≥ 4156")
    assert finding.source.endswith("topology.yml: topology.links[4].mtu")

    def small(doc: dict) -> None:
        doc["PORT"]["Ethernet4"]["mtu"] = "4000"
    spec = _variant(tmp_path / "b", lambda d: _config_db(d / "leaf2" / "config_db.json", small))
    finding, host = sorted(lint(spec), key=lambda f: f.check)
    assert (finding.check, host.check, host.device, host.required) == (
        "mtu", "nic-mtu", "h4", "MTU ≤ 4000, as leaf2 Ethernet4 (eth2)")
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


# --- SONiC switches as they run: a hand-written template-style fabric (two leaves, a spine)

MINI_TOPOLOGY = {
    "defaults": {"rate": "100G", "mtu": 9100},
    "nodes": {"spine1": {"role": "spine"}, "leaf1": {"role": "leaf"}, "leaf2": {"role": "leaf"},
              "h1": {"role": "host"}, "h2": {"role": "host"}},
    "links": [{"endpoints": ["leaf1:eth2", "spine1:eth1"], "cable": 30},
              {"endpoints": ["leaf2:eth2", "spine1:eth2"], "cable": 30},
              {"endpoints": ["h1:eth1", "leaf1:eth1"], "cable": 3},
              {"endpoints": ["h2:eth1", "leaf2:eth1"], "cable": 3}],
}
LOOKUP_INI = """\
# speed cable size xon xoff threshold xon_offset
100000  5m    0    18432 38912 -3 2496
100000  40m   0    18432 45056 -3 2496
"""
AZURE = {"26": "3", "48": "6", "2": "1", "6": "1"}
AZURE_UPLINK = {"26": "3", "48": "6", "2": "2", "6": "6"}


def _template(maps: dict[str, dict[str, str]] | None = None, cable: str = "40m") -> dict:
    """A switch's config_db as sonic-cfggen renders it: PFC on 3 and 4, lossy PG 0, and no
    lossless BUFFER_PG (buffermgrd writes those), default PFC watchdog on."""
    maps = maps or {"Ethernet0": "AZURE", "Ethernet4": "AZURE"}
    qos_map = {port: {"dscp_to_tc_map": name, "tc_to_queue_map": "AZURE", "tc_to_pg_map": "AZURE",
                      "pfc_to_queue_map": "AZURE", "pfc_enable": "3,4"} for port, name in maps.items()}
    queues = {}
    for port in maps:
        queues[f"{port}|3-4"] = {"scheduler": "scheduler.1", "wred_profile": "AZURE_LOSSLESS"}
        queues[f"{port}|6"] = {"scheduler": "scheduler.0"}
    return {
        "DEVICE_METADATA": {"localhost": {"default_pfcwd_status": "enable"}},
        "PORT": {port: {"speed": "100000", "mtu": "9100", "admin_status": "up"} for port in maps},
        "CABLE_LENGTH": {"AZURE": {port: cable for port in maps}},
        "BUFFER_POOL": {"ingress_lossless_pool": {"type": "ingress", "mode": "dynamic", "size": "12582912"}},
        "BUFFER_PROFILE": {"ingress_lossy_profile": {"pool": "ingress_lossless_pool", "size": "0", "dynamic_th": "3"}},
        "BUFFER_PG": {f"{port}|0": {"profile": "ingress_lossy_profile"} for port in maps},
        "DSCP_TO_TC_MAP": {"AZURE": AZURE, "AZURE_UPLINK": AZURE_UPLINK},
        "TC_TO_QUEUE_MAP": {"AZURE": {str(i): str(i) for i in range(8)}},
        "TC_TO_PRIORITY_GROUP_MAP": {"AZURE": {str(i): str(i) for i in range(8)}},
        "MAP_PFC_PRIORITY_TO_QUEUE": {"AZURE": {str(i): str(i) for i in range(8)}},
        "PORT_QOS_MAP": qos_map,
        "SCHEDULER": {"scheduler.0": {"type": "STRICT"}, "scheduler.1": {"type": "DWRR", "weight": "60"}},
        "WRED_PROFILE": {"AZURE_LOSSLESS": {"wred_green_enable": "true", "ecn": "ecn_all", "green_min_threshold": "100000",
                                            "green_max_threshold": "300000", "green_drop_probability": "5"}},
        "QUEUE": queues,
    }


def _mini(tmp_path: Path, configs: dict[str, dict] | None = None, topology: dict | None = None,
          **device: dict) -> FabricSpec:
    """The mini fabric in tmp_path: every switch a _template() unless `configs` says otherwise;
    `device` adds fabric.yml keys per switch (e.g. leaf1={"pg_profile_lookup": "lookup.ini"})."""
    import yaml

    (tmp_path / "lookup.ini").write_text(LOOKUP_INI)
    devices = {}
    for name in ("spine1", "leaf1", "leaf2"):
        (tmp_path / f"{name}.json").write_text(json.dumps((configs or {}).get(name) or _template()))
        devices[name] = {"sonic": f"{name}.json", **device.get(name, {})}
    (tmp_path / "fabric.yml").write_text(yaml.safe_dump({
        "name": "mini", "topology": topology or MINI_TOPOLOGY, "devices": devices,
        "hosts": {"roce_dscp": 26, "roce_priority": 3, "cnp_dscp": 48, "roce_mtu": 4096}}))
    return load_fabric_spec(tmp_path)


def _with_lookup(**more: dict) -> dict[str, dict]:
    return {name: {"pg_profile_lookup": "lookup.ini", **more.get(name, {})} for name in ("spine1", "leaf1", "leaf2")}


def test_a_template_config_without_its_lookup_file_says_why_headroom_does_not_apply(tmp_path: Path) -> None:
    spec = _mini(tmp_path)
    assert lint(spec) == []  # the PGs buffermgrd creates are not reported missing
    headroom = builtin_checks().get("headroom")
    reason = headroom.not_applicable(spec, spec.devices["leaf1"])
    assert reason == ("leaf1 has no lossless PG in its file: buffermgrd creates the lossless PGs at run time from "
                      "the platform's pg_profile_lookup.ini and CABLE_LENGTH: name it in devices.leaf1.pg_profile_lookup")


def test_the_lookup_file_gives_the_pgs_buffermgrd_creates_and_headroom_checks_them(tmp_path: Path) -> None:
    spec = _mini(tmp_path, **_with_lookup())
    leaf1 = spec.devices["leaf1"]
    assert builtin_checks().get("headroom").not_applicable(spec, leaf1) is None
    assert lint(spec) == []
    pg = leaf1.port("eth1").pgs[4]
    assert (pg.name, pg.xoff_bytes) == ("pg_lossless_100000_40m_profile", 45056)
    # 30 m at 100G, RoCE MTU 4096: 25,216 + 2 × 30 / 1.98e8 × 100e9 / 8 (3,787.9) + 8,388 + 84
    #   = 37,475.9 → 37,476 B. A 40m row with less xoff than that fails.
    (tmp_path / "lookup-small").mkdir()
    spec = _mini(tmp_path / "lookup-small", **_with_lookup())
    (tmp_path / "lookup-small" / "lookup.ini").write_text(LOOKUP_INI.replace("45056", "36864"))
    findings = [f for f in lint(load_fabric_spec(tmp_path / "lookup-small")) if f.device == "spine1"]
    assert {(f.check, f.port, f.priority) for f in findings} == {
        ("headroom", "Ethernet0 (eth1)", 3), ("headroom", "Ethernet0 (eth1)", 4),
        ("headroom", "Ethernet4 (eth2)", 3), ("headroom", "Ethernet4 (eth2)", 4)}
    assert findings[0].configured == "xoff 36,864 B" and findings[0].required.startswith("xoff ≥ 37,476 B")
    assert findings[0].source.startswith(
        f"{tmp_path}/lookup-small/lookup.ini: line 3 (speed 100000, cable 40m): xoff of BUFFER_PROFILE."
        "pg_lossless_100000_40m_profile, which buffermgrd creates for BUFFER_PG Ethernet0 PG 3")


def test_a_lookup_file_without_the_ports_row_names_the_file_and_both_values(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        _mini(tmp_path, configs={"leaf2": _template(cable="300m")}, **_with_lookup())
    assert [p.file for p in info.value.problems] == [f"{tmp_path}/lookup.ini"] * 2
    assert "has no row for speed 100000 and cable 300m, which Ethernet0 has" in str(info.value)
    assert "leaf2.json: PORT.Ethernet0.speed, CABLE_LENGTH.AZURE.Ethernet0" in str(info.value)


def test_a_cable_length_shorter_than_the_cable_fails_headroom(tmp_path: Path) -> None:
    long_run = json.loads(json.dumps(MINI_TOPOLOGY))
    long_run["links"][0]["cable"] = 300
    spec = _mini(tmp_path, configs={"spine1": _template(cable="5m")}, topology=long_run)
    findings = lint(spec)
    # leaf1's uplink says 40m, spine1's downlink 5m: both shorter than the 300 m fibre. spine1's
    # 5m is short for its 30 m link to leaf2 too; leaf2's 40m covers that link.
    assert {(f.check, f.device, f.port) for f in findings} == {
        ("headroom", "leaf1", "Ethernet4 (eth2)"), ("headroom", "spine1", "Ethernet0 (eth1)"),
        ("headroom", "spine1", "Ethernet4 (eth2)")}
    spine = next(f for f in findings if f.device == "spine1")
    assert (spine.configured, spine.required) == ("CABLE_LENGTH 5m", "CABLE_LENGTH ≥ 300m (the cable's length)")
    assert "sized for a 5 m cable, but the link to leaf1:Ethernet4 is 300 m" in spine.what
    assert spine.source == f"{tmp_path}/spine1.json: CABLE_LENGTH.AZURE.Ethernet0; {tmp_path}/fabric.yml: topology.links[0]"


def test_default_pfcwd_guards_what_the_switch_will_run_and_fabric_yml_overrides_it(tmp_path: Path) -> None:
    spec = _mini(tmp_path)
    assert lint(spec) == []  # no PFC_WD in any file: pfcwd start_default writes them
    port = spec.devices["leaf1"].port("eth1")
    assert port.pfc_wd is not None and port.pfc_wd.detection_time_ms == 200
    (tmp_path / "off").mkdir()
    off = {name: {"default_pfcwd_status": "disable"} for name in ("spine1", "leaf1", "leaf2")}
    findings = lint(_mini(tmp_path / "off", **off))
    assert {(f.check, f.device) for f in findings} == {("pfc-watchdog", d) for d in ("spine1", "leaf1", "leaf2")}
    assert findings[0].configured == "no PFC watchdog"


def test_a_port_map_in_fabric_yml_overrides_the_port_tables_order(tmp_path: Path) -> None:
    # leaf1's file names its ports Ethernet1 and Ethernet2 (one number each); eth1 is cabled
    # to the host, eth2 to the spine, the other way round from the PORT table's order.
    leaf1 = _template({"Ethernet1": "AZURE", "Ethernet2": "AZURE"})
    spec = _mini(tmp_path, configs={"leaf1": leaf1}, leaf1={"ports": {"Ethernet2": "eth1", "Ethernet1": "eth2"}})
    device = spec.devices["leaf1"]
    assert (device.port("eth1").port, device.label("eth2")) == ("Ethernet2", "Ethernet1 (eth2)")
    assert lint(spec) == []


@pytest.mark.parametrize("ports,expected", [
    ({"Ethernet0": "eth1", "Ethernet8": "eth2"},
     "devices.leaf1.ports.Ethernet8 (line {line}): 'Ethernet8' is not a port of"),
    ({"Ethernet0": "eth1", "Ethernet4": "eth1"},
     "devices.leaf1.ports.Ethernet4 (line {line}): eth1 is already Ethernet0's"),
    ({"Ethernet0": "eth1", "Ethernet4": "port2"},
     "devices.leaf1.ports.Ethernet4 (line {line}): 'port2' is not a rocelab interface"),
    ({"Ethernet0": "eth1"}, "devices.leaf1.ports (line {line}): maps no port to eth2, which the topology cables to leaf1"),
])
def test_a_bad_port_map_names_fabric_yml_and_the_field(tmp_path: Path, ports: dict, expected: str) -> None:
    with pytest.raises(InputError) as info:
        _mini(tmp_path, leaf1={"ports": ports})
    assert re.search(re.escape(f"{tmp_path}/fabric.yml: " + expected).replace(re.escape("{line}"), r"\d+"),
                     str(info.value))


def test_voq_host_in_fabric_yml_must_be_a_line_card_of_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"devices\.leaf1\.voq_host \(line \d+\): 'lc9\|asic0' is not a line card "
                                         r".*\(hint: its QUEUE and BUFFER_QUEUE keys name: none\)"):
        _mini(tmp_path, leaf1={"voq_host": "lc9|asic0"})


def test_dscp_maps_pass_azure_and_azure_uplink_and_catch_a_real_inconsistency(tmp_path: Path) -> None:
    # Dual-ToR style: host ports AZURE, uplinks AZURE_UPLINK (DSCP 2 and 6 to lossless TCs 2 and
    # 6 there, to TC 1 on host ports). RoCE (26) and CNPs (48) keep their class on every hop.
    leaf = _template({"Ethernet0": "AZURE", "Ethernet4": "AZURE_UPLINK"})
    leaf["PORT_QOS_MAP"]["Ethernet4"]["pfc_enable"] = "2,3,4,6"
    spec = _mini(tmp_path, configs={"leaf1": leaf, "leaf2": leaf})
    assert [f for f in lint(spec) if f.check == "dscp-maps"] == []
    # The spine puts RoCE in TC 4: lossless there too, but a pause from the spine stops
    # priority 4 on the leaf, where RoCE is in TC 3, and the leaf's pause stops 3 on the spine.
    spine = _template()
    spine["DSCP_TO_TC_MAP"]["AZURE"] = {**AZURE, "26": "4"}
    (tmp_path / "bad").mkdir()
    findings = [f for f in lint(_mini(tmp_path / "bad", configs={"leaf1": leaf, "leaf2": leaf, "spine1": spine}))
                if f.check == "dscp-maps"]
    assert {(f.device, f.port) for f in findings} == {
        ("spine1", "Ethernet0 (eth1)"), ("spine1", "Ethernet4 (eth2)"),
        ("leaf1", "Ethernet4 (eth2)"), ("leaf2", "Ethernet4 (eth2)")}
    first = next(f for f in findings if f.device == "spine1")
    assert first.what.startswith("RoCE (DSCP 26) is TC 4 here but TC 3 on leaf1")
    assert (first.configured, first.required) == (
        "DSCP 26 → TC 4 → queue 4",
        "DSCP 26 → TC 3 → queue 3, as on leaf1 Ethernet0 (eth1), the hop before (leaf1:Ethernet4)")


def test_dscp_maps_catch_a_cnp_moved_to_a_queue_that_is_not_strict(tmp_path: Path) -> None:
    spine = _template()
    spine["DSCP_TO_TC_MAP"]["AZURE"] = {**AZURE, "48": "5"}
    findings = [f for f in lint(_mini(tmp_path, configs={"spine1": spine})) if f.check == "dscp-maps"]
    assert {(f.device, f.port) for f in findings} == {("spine1", "Ethernet0 (eth1)"), ("spine1", "Ethernet4 (eth2)")}
    assert findings[0].what == ("this port's map moves CNPs (DSCP 48) from TC 6 to TC 5, whose queue is not "
                                "strict priority here")


@pytest.mark.parametrize("leaf1,expected", [
    ({"pg_profile_lookup": "nowhere.ini"}, "devices.leaf1.pg_profile_lookup (line {line}): 'nowhere.ini' is not a file"),
    ({"default_pfcwd_status": "on"}, "devices.leaf1.default_pfcwd_status (line {line}): 'on' is not valid "
                                     "(expected enable or disable)"),
    ({"voq_host": "lc1"}, "devices.leaf1.voq_host (line {line}): 'lc1' is not a line card"),
])
def test_bad_sonic_settings_name_fabric_yml_and_the_field(tmp_path: Path, leaf1: dict, expected: str) -> None:
    with pytest.raises(InputError) as info:
        _mini(tmp_path, leaf1=leaf1)
    assert re.search(re.escape(f"{tmp_path}/fabric.yml: " + expected).replace(re.escape("{line}"), r"\d+"),
                     str(info.value))


def test_pg_profile_lookup_under_the_dynamic_buffer_model_is_an_error(tmp_path: Path) -> None:
    dynamic = _template()
    dynamic["DEVICE_METADATA"]["localhost"]["buffer_model"] = "dynamic"
    with pytest.raises(InputError, match=r"devices\.leaf1\.pg_profile_lookup \(line \d+\): .*leaf1\.json uses the "
                                         r"dynamic buffer model"):
        _mini(tmp_path, configs={"leaf1": dynamic}, leaf1={"pg_profile_lookup": "lookup.ini"})


def test_a_malformed_lookup_file_named_in_fabric_yml_is_reported_by_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "bad.ini").write_text("100000 40m 0 18432 lots -3\n")
    with pytest.raises(InputError) as info:
        _mini(tmp_path, leaf1={"pg_profile_lookup": "bad.ini"})
    (problem,) = info.value.problems
    assert (problem.file, problem.path) == (f"{tmp_path}/bad.ini", "line 1 column 20")


def test_default_pfcwd_leaves_ports_without_a_neighbour_unguarded_and_says_so(tmp_path: Path) -> None:
    leaf1 = _template()
    leaf1["DEVICE_NEIGHBOR"] = {"Ethernet0": {"name": "h1", "port": "eth1"}}  # the uplink is not listed
    (finding,) = lint(_mini(tmp_path, configs={"leaf1": leaf1}))
    assert (finding.check, finding.device, finding.port) == ("pfc-watchdog", "leaf1", "Ethernet4 (eth2)")
    assert finding.source.endswith(
        "leaf1.json: PFC_WD has no entry for Ethernet4, and pfcwd start_default (" + f"{tmp_path}/leaf1.json: "
        "DEVICE_METADATA.localhost.default_pfcwd_status enable: action drop, detection 200 ms, restoration 200 ms) "
        "guards only DEVICE_NEIGHBOR ports")


def test_sonic_settings_on_an_eos_device_are_an_error(tmp_path: Path) -> None:
    spec_dir = tmp_path / "fabric"
    shutil.copytree(GOOD, spec_dir)
    _replace(spec_dir / "fabric.yml", "    eos: spine1.cfg\n", "    eos: spine1.cfg\n    default_pfcwd_status: enable\n")
    with pytest.raises(InputError, match=r"devices\.spine1 \(line \d+\): sets `default_pfcwd_status`, which SONiC devices take"):
        load_fabric_spec(spec_dir)
