"""The static checks over an EOS switch whose running-config decides classes with more than
`qos map dscp`: policy-maps, CoS trust, latency ECN thresholds, interface defaults. Each test
edits spine1.cfg of a copy of examples/fabric-good (every check passes there) by hand."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.fabric.lint import lint
from rocelab.fabric.spec import FabricSpec, load_fabric_spec

GOOD = Path(__file__).resolve().parents[2] / "examples" / "fabric-good"

# Classes for RoCE (DSCP 26) and CNPs (DSCP 48), stated by a policy instead of the map.
CLASSES = """\
class-map type qos match-any ROCE
   match dscp 26
class-map type qos match-any CNP
   match dscp 48
policy-map type quality-of-service FABRIC
   class ROCE
      set traffic-class {roce_tc}
   class CNP
      set traffic-class 6
!
"""


def _spine1(tmp_path: Path, *edits: tuple[str, str], prepend: str = "") -> FabricSpec:
    copy = tmp_path / "fabric"
    shutil.copytree(GOOD, copy)
    cfg = copy / "spine1.cfg"
    text = cfg.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    cfg.write_text(prepend + text)
    return load_fabric_spec(copy)


IN_PROFILE = ("qos profile ROCE\n   qos trust dscp\n",
              "qos profile ROCE\n   qos trust dscp\n   service-policy type qos input FABRIC\n")


def test_policy_keeping_roce_lossless_passes(tmp_path: Path) -> None:
    spec = _spine1(tmp_path, IN_PROFILE, prepend=CLASSES.format(roce_tc=3))
    assert lint(spec) == []
    assert spec.devices["spine1"].port("eth1").dscp_to_tc[26] == 3


def test_policy_moving_roce_to_a_lossy_tc_is_flagged(tmp_path: Path) -> None:
    spec = _spine1(tmp_path, IN_PROFILE, prepend=CLASSES.format(roce_tc=4))
    findings = lint(spec)
    lossy = [f for f in findings if f.check == "roce-lossless"]
    assert {f.device for f in lossy} == {"spine1"}
    assert lossy[0].configured == "pfc_enable {3}, DSCP 26 → TC 4"
    # The source names the policy's `set traffic-class 4` (line 7) and where it is applied.
    assert "spine1.cfg line 7 (policy-map, " in lossy[0].source
    assert lossy[0].source.endswith("spine1.cfg line 34)")  # service-policy, in qos profile ROCE
    maps = [f for f in findings if f.check == "dscp-maps"]
    assert {(f.device, f.configured) for f in maps} == {("spine1", "DSCP 26 → TC 4 → queue 4")}


def test_trusting_cos_sends_untagged_roce_to_the_default_cos_class(tmp_path: Path) -> None:
    spec = _spine1(tmp_path, ("qos profile ROCE\n   qos trust dscp\n",
                              "qos profile ROCE\n   qos trust cos\n"))
    findings = [f for f in lint(spec) if f.check == "roce-lossless"]
    assert {f.device for f in findings} == {"spine1"}
    assert findings[0].configured == "pfc_enable {3}, DSCP 26 → TC 1"  # CoS 0 → TC 1
    assert "(the port does not trust DSCP)" in findings[0].source


def test_trusting_cos_with_a_lossless_default_cos_passes_roce(tmp_path: Path) -> None:
    spec = _spine1(tmp_path, ("qos profile ROCE\n   qos trust dscp\n",
                              "qos profile ROCE\n   qos trust cos\n   qos cos 3\n"))
    findings = lint(spec)
    assert not [f for f in findings if f.check == "roce-lossless"]
    # CNPs are untagged too, so they share TC 3 there, which the fabric's other switches do not.
    assert {f.check for f in findings} == {"dscp-maps", "cnp-strict"}


def test_acl_deciding_roces_class_is_refused_with_file_and_line(tmp_path: Path) -> None:
    acl = """\
class-map type qos match-any ROCE
   match ip access-group ROCE-UDP-4791
policy-map type quality-of-service FABRIC
   class ROCE
      set traffic-class 4
!
"""
    with pytest.raises(InputError) as info:
        _spine1(tmp_path, IN_PROFILE, prepend=acl)
    text = str(info.value)
    assert "spine1.cfg: Ethernet1 (eth1): the class of RoCE (DSCP 26) is not known" in text
    assert "line 4: `class ROCE` of policy-map FABRIC may give DSCP 26 TC 4 instead of TC 3" in text


def test_acl_class_after_roce_and_cnp_are_decided_loads_with_a_warning(tmp_path: Path) -> None:
    acl = CLASSES.format(roce_tc=3).replace("!\n", """\
   class SCAVENGER
      set traffic-class 1
class-map type qos match-any SCAVENGER
   match ip access-group SCAVENGER
!
""")
    spec = _spine1(tmp_path, IN_PROFILE, prepend=acl)
    assert lint(spec) == []
    assert any("`match ip access-group SCAVENGER`: rocelab cannot tell" in note
               for note in spec.devices["spine1"].profile.notes)


@pytest.mark.parametrize("kmin,flagged", [("20 microseconds", False), ("80 microseconds", True)])
def test_latency_ecn_is_checked_in_bytes_at_the_link_rate(tmp_path: Path, kmin: str,
                                                          flagged: bool) -> None:
    spec = _spine1(tmp_path, ("minimum-threshold 100 kbytes maximum-threshold 300 kbytes",
                              f"minimum-threshold {kmin} maximum-threshold 240 microseconds"))
    wred = spec.devices["spine1"].port("eth1").queues[3].wred
    # 20 µs at 100 Gb/s (the topology's rate) = 2e-5 × 1e11 / 8 = 250,000 B; 80 µs = 1,000,000 B,
    # above the PFC trigger (2^-5 × 12 MiB / (1 + 2/32) = 370,086 B).
    assert wred.green_min_threshold_bytes == (1_000_000 if flagged else 250_000)
    findings = [f for f in lint(spec) if f.check == "ecn-before-pfc"]
    assert bool(findings) == flagged


def test_interface_defaults_mtu_reaches_the_mtu_check(tmp_path: Path) -> None:
    no_mtu = ("   mtu 9100\n", "")
    assert [f.check for f in lint(_spine1(tmp_path / "a", no_mtu))] == ["mtu", "mtu"]  # EOS's 1500
    spec = _spine1(tmp_path / "b", no_mtu, prepend="interface defaults\n   mtu 9214\n!\n")
    assert lint(spec) == []
    assert spec.devices["spine1"].mtu_bytes("eth1") == 9214


def test_undefined_service_profile_on_an_unused_port_loads_with_a_warning(tmp_path: Path) -> None:
    spec = _spine1(tmp_path, ("interface Ethernet3\n   mtu 9100\n   no switchport\n"
                              "   service-profile ROCE\n",
                              "interface Ethernet3\n   mtu 9100\n   no switchport\n"
                              "   service-profile ROCE-NEXT\n"))
    assert lint(spec) == []
    assert any("`service-profile ROCE-NEXT`: names no qos profile" in note
               for note in spec.devices["spine1"].profile.notes)


def test_modular_names_reach_the_findings(tmp_path: Path) -> None:
    renames = [(f"interface Ethernet{n}\n", f"interface Ethernet{n}/1\n") for n in (1, 2, 3, 4)]
    spec = _spine1(tmp_path, *renames, ("mtu 9100\n   no switchport\n   ip address 198.18.0.5/31",
                                        "mtu 4000\n   no switchport\n   ip address 198.18.0.5/31"))
    findings = lint(spec)
    assert [(f.check, f.port) for f in findings] == [("mtu", "Ethernet2/1 (eth2)")]
    assert "interface Ethernet2/1" not in findings[0].source  # it sets an mtu: its line is named
    assert findings[0].source.endswith("spine1.cfg line 56")


def test_port_channel_carries_the_members_qos(tmp_path: Path) -> None:
    member = ("   ip address 198.18.0.1/31\n   service-profile ROCE\n",
              "   ip address 198.18.0.1/31\n   channel-group 1 mode active\n")
    assert {f.device for f in lint(_spine1(tmp_path / "a", member))} == {"spine1"}
    spec = _spine1(tmp_path / "b", member,
                   prepend="interface Port-Channel1\n   service-profile ROCE\n!\n")
    assert lint(spec) == []
    assert spec.devices["spine1"].port("eth1").pfc_enable == {3}
