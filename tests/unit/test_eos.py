"""Arista EOS running-config ⇄ QosProfile: what parses, what renders and round-trips, and
what a user is told (file and line) when a statement is wrong."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.qos import load_config_db, port_qos
from rocelab.qos.eos import (
    EOS_DEFAULT_DSCP_TO_TC,
    eos_to_lab,
    lab_to_eos,
    load_eos,
    parse_eos,
    parse_eos_config,
    render_eos,
)
from rocelab.qos.model import PfcWatchdog, PortQos, QosProfile, Scheduler

ROOT = Path(__file__).resolve().parents[2]
ERRORS = ROOT / "tests" / "errors"
SPINE1 = ROOT / "examples" / "fabric-good" / "spine1.cfg"

# REFERENCE.md's statements, as a running-config holds them, with the unrelated lines a
# real one has around them.
REFERENCE = """\
! Command: show running-config
hostname leaf9
!
qos map dscp 26 to traffic-class 3
!
qos profile ROCE
   qos trust dscp
   !
   tx-queue 3
      bandwidth percent 50
      random-detect ecn minimum-threshold 150 kbytes maximum-threshold 1500 kbytes max-mark-probability 20
!
interface Ethernet1
   description gpu1
   mtu 9214
   no switchport
   ip address 198.19.1.1/24
   service-profile ROCE
   priority-flow-control on
   priority-flow-control priority 3 no-drop
   !
   tx-queue 3
      random-detect ecn count
!
interface Management1
   ip address 192.168.0.9/24
!
router bgp 65101
   neighbor 198.18.0.1 remote-as 65100
!
priority-flow-control pause watchdog default timeout 0.05
priority-flow-control pause watchdog action drop
!
end
"""


def test_reference_statements_parse_into_the_profile() -> None:
    config = parse_eos_config(REFERENCE, "leaf9.cfg")
    assert list(config.profile.ports) == ["Ethernet0"]  # EOS Ethernet1 = eth1 = SONiC Ethernet0
    port = config.profile.ports["Ethernet0"]
    assert port.dscp_to_tc[26] == 3
    assert port.pfc_enable == {3}
    queue = port.queues[3]
    assert queue.scheduler == Scheduler("eos_dwrr_50", "DWRR", 50)
    # 150 kbytes = 150 × 1,024 B; 1500 kbytes = 1,536,000 B
    assert (queue.wred.green_min_threshold_bytes, queue.wred.green_max_threshold_bytes,
            queue.wred.green_drop_probability_pct) == (153_600, 1_536_000, 20)
    assert queue.wred.marks_green and not queue.wred.wred_green_enable
    assert port.pfc_wd == PfcWatchdog("drop", detection_time_ms=50, restoration_time_ms=0)
    assert config.mtu_bytes == {"Ethernet0": 9214}
    assert config.profile.pools == {} and port.pgs == {}  # EOS has no buffer model
    assert config.line("dscp", 26) == 4
    assert config.line("ecn", "Ethernet0", 3) == 11  # in the qos profile
    assert config.line("pfc", "Ethernet0", 3) == 20
    assert config.line("mtu", "Ethernet0") == 15


def test_port_names_eos_lab_sonic() -> None:
    assert eos_to_lab("Ethernet1") == "eth1" and lab_to_eos("eth12") == "Ethernet12"
    for bad in ("Ethernet0", "Ethernet1/1", "Management1"):
        with pytest.raises(ValueError):
            eos_to_lab(bad)
    profile = parse_eos("interface Ethernet3\n   priority-flow-control on\n", "x")
    assert list(profile.ports) == ["Ethernet8"]  # eth3 is SONiC's third port


def test_default_dscp_map_is_eos_and_maps_override_it() -> None:
    config = parse_eos_config("qos map dscp 24 25 to traffic-class 0\ninterface Ethernet1\n", "x")
    port = config.profile.ports["Ethernet0"]
    assert port.dscp_to_tc[24] == port.dscp_to_tc[25] == 0
    assert port.dscp_to_tc[26] == 3  # EOS's default: DSCP 24-31 → TC 3
    assert port.dscp_to_tc[0] == 1 and port.dscp_to_tc[8] == 0  # the low-end inversion
    assert config.default_port.dscp_to_tc == port.dscp_to_tc
    assert EOS_DEFAULT_DSCP_TO_TC[48] == 6


def test_interface_overrides_its_service_profile() -> None:
    text = """\
qos profile ROCE
   priority-flow-control on
   priority-flow-control priority 3 no-drop
   tx-queue 6
      priority strict
interface Ethernet1
   service-profile ROCE
   priority-flow-control priority 4 no-drop
   tx-queue 6
      no priority
      bandwidth percent 10
interface Ethernet2
   service-profile ROCE
   no priority-flow-control
"""
    ports = parse_eos(text, "x").ports
    assert ports["Ethernet0"].pfc_enable == {3, 4}
    assert ports["Ethernet0"].queues[6].scheduler == Scheduler("eos_dwrr_10", "DWRR", 10)
    assert ports["Ethernet4"].pfc_enable == frozenset()
    assert ports["Ethernet4"].queues[6].scheduler.type == "STRICT"


def test_untrusted_port_puts_every_dscp_in_tc_1() -> None:
    text = "qos map dscp 26 to traffic-class 3\ninterface Ethernet1\n   qos trust cos\n" \
           "interface Ethernet2\n   no qos trust\ninterface Ethernet3\n"
    ports = parse_eos(text, "x").ports
    assert set(ports["Ethernet0"].dscp_to_tc) == set(ports["Ethernet4"].dscp_to_tc) == {1}
    assert ports["Ethernet8"].dscp_to_tc[26] == 3


@pytest.mark.parametrize("threshold,expected_bytes", [
    ("100 bytes", 100),
    ("2 mbytes", 2 * 1024 * 1024),
    ("1000 segments", 1000 * 208),  # segment_bytes given: 208 B
])
def test_threshold_units(threshold: str, expected_bytes: int) -> None:
    text = f"interface Ethernet1\n   uc-tx-queue 3\n      random-detect ecn minimum-threshold " \
           f"{threshold} maximum-threshold {threshold}\n"
    wred = parse_eos(text, "x", segment_bytes=208).ports["Ethernet0"].queues[3].wred
    assert wred.green_min_threshold_bytes == expected_bytes
    assert wred.green_drop_probability_pct == 100  # EOS marks every packet at Kmax unless told


def test_segment_size_is_the_platforms() -> None:
    text = "interface Ethernet1\n   tx-queue 3\n      random-detect ecn minimum-threshold " \
           "10 segments maximum-threshold 20 segments\n"
    wred = parse_eos(text, "x", segment_bytes=256).ports["Ethernet0"].queues[3].wred
    assert (wred.green_min_threshold_bytes, wred.green_max_threshold_bytes) == (2560, 5120)


def test_pfc_watchdog_needs_a_timeout_and_can_be_switched_off_per_port() -> None:
    pfc = "   priority-flow-control on\n   priority-flow-control priority 3 no-drop\n"
    no_timeout = parse_eos("interface Ethernet1\n" + pfc, "x").ports["Ethernet0"]
    assert no_timeout.pfc_wd is None
    text = ("priority-flow-control pause watchdog default timeout 0.2\n"
            "priority-flow-control pause watchdog default recovery-time 0.4\n"
            "priority-flow-control pause watchdog action no-drop\n"
            "interface Ethernet1\n" + pfc +
            "interface Ethernet2\n" + pfc + "   no priority-flow-control pause watchdog\n"
            "interface Ethernet3\n" + pfc +
            "   priority-flow-control pause watchdog port action drop\n"
            "   priority-flow-control pause watchdog port timer timeout 0.1 polling-interval auto"
            " recovery-time 1.5 forced\n"
            "interface Ethernet4\n")
    ports = parse_eos(text, "x").ports
    assert ports["Ethernet0"].pfc_wd == PfcWatchdog("forward", 200, 400)
    assert ports["Ethernet4"].pfc_wd is None
    assert ports["Ethernet8"].pfc_wd == PfcWatchdog("drop", 100, 1500)
    assert ports["Ethernet12"].pfc_wd is None  # no PFC, nothing to guard


def test_pfc_all_off_wins() -> None:
    text = "priority-flow-control all off\ninterface Ethernet1\n   priority-flow-control on\n" \
           "   priority-flow-control priority 3 no-drop\n"
    assert parse_eos(text, "x").ports["Ethernet0"].pfc_enable == frozenset()


# --- rendering


@pytest.mark.parametrize("text", [REFERENCE, SPINE1.read_text()], ids=["reference", "spine1"])
def test_render_round_trips_what_eos_parses(text: str) -> None:
    config = parse_eos_config(text, "a.cfg")
    rendered = render_eos(config.profile, mtu_bytes=config.mtu_bytes)
    assert rendered == render_eos(config.profile, mtu_bytes=config.mtu_bytes)  # deterministic
    again = parse_eos_config(rendered, "a.cfg")
    assert again.profile == config.profile
    assert again.mtu_bytes == config.mtu_bytes


def test_render_uc_tx_queue_keyword() -> None:
    profile = parse_eos(REFERENCE, "x")
    rendered = render_eos(profile, queue_keyword="uc-tx-queue")
    assert "   uc-tx-queue 3\n" in rendered and "   tx-queue" not in rendered
    assert parse_eos(rendered, "x") == profile


def test_render_of_a_sonic_profile_keeps_what_eos_can_say() -> None:
    sonic = load_config_db(ROOT / "profiles" / "roce-lossless.json")
    eos = parse_eos(render_eos(sonic), "x")
    assert list(eos.ports) == list(sonic.ports)
    for name, theirs in sonic.ports.items():
        ours = eos.ports[name]
        assert ours.dscp_to_tc == theirs.dscp_to_tc
        assert ours.tc_to_queue == theirs.tc_to_queue
        assert ours.pfc_enable == theirs.pfc_enable
        assert ours.pfc_wd == theirs.pfc_wd
        for q, queue in theirs.queues.items():
            if queue.scheduler:
                assert (ours.queues[q].scheduler.type, ours.queues[q].scheduler.weight) == (
                    queue.scheduler.type, queue.scheduler.weight)
        wred = theirs.queues[3].wred
        assert (ours.queues[3].wred.green_min_threshold_bytes,
                ours.queues[3].wred.green_max_threshold_bytes,
                ours.queues[3].wred.green_drop_probability_pct) == (
            wred.green_min_threshold_bytes, wred.green_max_threshold_bytes,
            wred.green_drop_probability_pct)
        # What EOS cannot say: buffers, TC → PG.
        assert ours.pgs == {} and ours.tc_to_pg[:8] == tuple(range(8))


def test_render_refuses_what_eos_cannot_say() -> None:
    one = PortQos(port="Ethernet0", dscp_to_tc=(3,) * 64)
    two = PortQos(port="Ethernet4", dscp_to_tc=(4,) * 64)
    with pytest.raises(ValueError, match="one DSCP map per switch"):
        render_eos(QosProfile("x", {}, {"Ethernet0": one, "Ethernet4": two}))
    alert = PortQos(port="Ethernet0", pfc_enable=frozenset({3}),
                    pfc_wd=PfcWatchdog("alert", 200, 200))
    with pytest.raises(ValueError, match="no 'alert' action"):
        render_eos(QosProfile("x", {}, {"Ethernet0": alert}))


def test_unlisted_port_is_the_default_port() -> None:
    profile = parse_eos(REFERENCE, "x")
    assert port_qos(profile, "eth1").pfc_enable == {3}


# --- errors


CASES = sorted(p.stem for p in ERRORS.glob("eos-*.cfg"))


@pytest.mark.parametrize("case", CASES)
def test_bad_running_config_names_file_and_line(case: str) -> None:
    expected = [line for line in (ERRORS / f"{case}.txt").read_text().splitlines() if line]
    with pytest.raises(InputError) as info:
        load_eos(ERRORS / f"{case}.cfg")
    text = str(info.value)
    for line in expected:
        assert line in text
    assert len(info.value.problems) == len(expected)


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the file"):
        load_eos(tmp_path / "missing.cfg")
    binary = tmp_path / "binary.cfg"
    binary.write_bytes(b"interface Ethernet1\n\xff\xfe\n")
    with pytest.raises(InputError, match="binary.cfg: is not UTF-8 text"):
        load_eos(binary)


# --- classification: maps, trust, policy-maps


def test_dscp_map_ranges_and_drop_precedence() -> None:
    text = "qos map dscp 24-25,27 to traffic-class 5 drop-precedence 1\ninterface Ethernet1\n"
    port = parse_eos(text, "x").ports["Ethernet0"]
    assert [port.dscp_to_tc[d] for d in (24, 25, 26, 27)] == [5, 5, 3, 5]
    assert port.dot1p_to_tc is None  # trusts DSCP


def test_trust_cos_classifies_by_pcp_and_the_default_cos() -> None:
    text = """\
qos map cos 3 to traffic-class 3
qos map cos 0 1 to traffic-class 2
interface Ethernet1
   qos trust cos
interface Ethernet2
   qos trust cos
   qos cos 3
interface Ethernet3
   no qos trust
   qos cos 1
"""
    config = parse_eos_config(text, "x")
    cos, cos3, untrusted = (config.profile.ports[p] for p in ("Ethernet0", "Ethernet4", "Ethernet8"))
    # Tagged frames by their PCP through the cos map; untagged ones get the default CoS 0.
    assert cos.dot1p_to_tc == (2, 2, 2, 3, 4, 5, 6, 7)
    assert set(cos.dscp_to_tc) == {2}
    assert set(cos3.dscp_to_tc) == {3}  # untagged RoCE takes `qos cos 3`: TC 3 whatever its DSCP
    assert set(untrusted.dscp_to_tc) == {2} and untrusted.dot1p_to_tc is None
    assert config.line("trust", "Ethernet4") == 6 and config.line("cos", 3) == 1


POLICY = """\
class-map type qos match-any ROCE
   match dscp 26
class-map type qos match-any BULK
   match dscp 10,12
policy-map type quality-of-service FABRIC
   class ROCE
      set traffic-class 5
   class BULK
      set drop-precedence 1
   class class-default
      set traffic-class 0
"""


def test_policy_map_decides_before_the_dscp_map() -> None:
    text = POLICY + "qos map dscp 12 to traffic-class 4\ninterface Ethernet1\n" \
                    "   service-policy type qos input FABRIC\ninterface Ethernet2\n"
    config = parse_eos_config(text, "x")
    port = config.profile.ports["Ethernet0"]
    assert port.dscp_to_tc[26] == 5  # class ROCE
    assert port.dscp_to_tc[12] == 4 and port.dscp_to_tc[10] == 0  # BULK sets no TC: the map
    assert port.dscp_to_tc[48] == 0  # class-default
    assert config.profile.ports["Ethernet4"].dscp_to_tc[26] == 3  # no policy: EOS's map
    assert config.line("class", "Ethernet0", 26) == 7  # set traffic-class 5
    assert config.line("policy", "Ethernet0") == 14
    assert config.warnings == () and config.uncertain == {}


def test_policy_in_a_qos_profile_and_on_a_cos_trusting_port() -> None:
    text = POLICY + "qos profile P\n   qos trust cos\n   service-policy type qos input FABRIC\n" \
                    "interface Ethernet1\n   service-profile P\n"
    port = parse_eos(text, "x").ports["Ethernet0"]
    assert port.dscp_to_tc[26] == 5 and port.dscp_to_tc[27] == 0


def test_acl_match_is_warned_and_its_dscps_are_uncertain() -> None:
    text = """\
class-map type qos match-any ROCE-ACL
   match ip access-group ROCE-UDP
class-map type qos match-any CNP
   match dscp 48
policy-map type quality-of-service FABRIC
   class CNP
      set traffic-class 6
   class ROCE-ACL
      set traffic-class 3
interface Ethernet1
   service-policy type qos input FABRIC
"""
    config = parse_eos_config(text, "leaf.cfg")
    assert config.warnings[0].startswith(
        "leaf.cfg line 2: `match ip access-group ROCE-UDP`: rocelab cannot tell which packets")
    doubts = config.uncertain["Ethernet0"]
    # DSCP 48 is decided before the ACL class; DSCP 26 is in TC 3 either way (EOS's map);
    # DSCP 10 would move from TC 0 to TC 3 if the ACL matched it.
    assert 48 not in doubts and 26 not in doubts
    assert "leaf.cfg line 8: `class ROCE-ACL`" in doubts[10] and "TC 3 instead of TC 0" in doubts[10]
    assert config.profile.ports["Ethernet0"].dscp_to_tc[10] == 0  # what rocelab can prove


def test_set_dscp_and_rewrite_make_the_next_hops_class_uncertain() -> None:
    text = """\
class-map type qos match-any ROCE
   match dscp 26
policy-map type quality-of-service REMARK
   class ROCE
      set dscp 24
qos rewrite dscp
qos map traffic-class 6 to dscp 46
interface Ethernet1
   service-policy type qos input REMARK
"""
    config = parse_eos_config(text, "x")
    doubts = config.uncertain["Ethernet0"]
    assert "rewrites DSCP 26 to 24" in doubts[26]
    assert "sends DSCP 48 (TC 6) on as DSCP 46" in doubts[48]
    assert 46 not in doubts


def test_undefined_policy_and_class_map_are_warned_and_apply_nothing() -> None:
    text = "policy-map type quality-of-service P\n   class NOPE\n      set traffic-class 5\n" \
           "interface Ethernet1\n   service-policy type qos input P\n" \
           "interface Ethernet2\n   service-policy type qos input MISSING\n"
    config = parse_eos_config(text, "x")
    assert config.profile.ports["Ethernet0"].dscp_to_tc == EOS_DEFAULT_DSCP_TO_TC
    assert config.profile.ports["Ethernet4"].dscp_to_tc == EOS_DEFAULT_DSCP_TO_TC
    assert any(w.startswith("x line 2: `class NOPE`: names no class-map") for w in config.warnings)
    assert any(w.startswith("x line 7: `service-policy type qos input MISSING`") for w in
               config.warnings)


# --- interfaces: port-channels, names, profiles


def test_port_channel_qos_applies_to_its_members() -> None:
    text = """\
interface Port-Channel10
   mtu 9214
   no switchport
   priority-flow-control on
   priority-flow-control priority 3 no-drop
   qos trust cos
interface Ethernet1
   channel-group 10 mode active
interface Ethernet2
   channel-group 10 mode active
   qos trust dscp
interface Ethernet3
"""
    config = parse_eos_config(text, "x")
    ports = config.profile.ports
    assert ports["Ethernet0"].pfc_enable == ports["Ethernet4"].pfc_enable == {3}
    assert ports["Ethernet0"].dot1p_to_tc is not None  # trust cos from the port-channel
    assert ports["Ethernet4"].dot1p_to_tc is None  # its own trust wins
    assert ports["Ethernet8"].pfc_enable == frozenset()
    assert config.mtu_bytes == {"Ethernet0": 9214, "Ethernet4": 9214}
    assert config.line("mtu", "Ethernet0") == 2


def test_modular_port_names_number_in_natural_order() -> None:
    text = "interface Ethernet3/2/1\n   priority-flow-control on\n" \
           "interface Ethernet3/1/1\ninterface Ethernet10/1/1\n"
    config = parse_eos_config(text, "x")
    # Ethernet3/1/1 is eth1 (SONiC Ethernet0), Ethernet3/2/1 eth2, Ethernet10/1/1 eth3.
    assert config.eos_names == {"Ethernet0": "Ethernet3/1/1", "Ethernet4": "Ethernet3/2/1",
                                "Ethernet8": "Ethernet10/1/1"}
    assert config.line("pfc", "Ethernet4") == 2


def test_undefined_service_profile_loads_applies_nothing_and_warns() -> None:
    text = "qos profile ROCE\n   priority-flow-control on\n!\ninterface Ethernet1\n" \
           "   service-profile ROCEV2\n"
    config = parse_eos_config(text, "leaf.cfg")
    assert config.profile.ports["Ethernet0"] == replace(config.default_port, port="Ethernet0")
    assert config.warnings == (
        "leaf.cfg line 5: `service-profile ROCEV2`: names no qos profile (EOS accepts it and "
        "applies nothing until one exists; defined: ROCE)",)
    assert config.warnings[0] in config.profile.notes


def test_unknown_qos_statements_are_warned_with_file_and_line() -> None:
    text = "qos map exp 1 to traffic-class 2\nqos frobnicate\ninterface Ethernet1\n" \
           "   qos policer 3\n   description qos is not a keyword here\n"
    config = parse_eos_config(text, "a.cfg")
    assert config.warnings == ("a.cfg line 2: `qos frobnicate`: a QoS statement rocelab does not read",
                               "a.cfg line 4: `qos policer 3`: a QoS statement rocelab does not read")


def test_statements_read_and_left_alone_say_nothing() -> None:
    text = """\
qos rewrite dscp
qos random-detect ecn allow non-ect
qos map traffic-class 1 to cos 7
interface Ethernet1
   mc-tx-queue 2
      bandwidth percent 10
   tx-queue 3
      bandwidth guaranteed percent 10
      random-detect ecn count
"""
    config = parse_eos_config(text, "x")
    assert config.uncertain == {} and config.profile.ports["Ethernet0"].queues == {}
    # Only the rewrite is said: EOS's own TC → DSCP map is not known to rocelab.
    assert config.warnings == (
        "x line 1: `qos rewrite dscp`: packets of TC 0, 1, 2, 3, 4, 5, 6, 7 leave with the DSCP "
        "EOS's default TC → DSCP map gives, which rocelab does not know: it assumes they keep "
        "theirs",)


# --- queues: ECN, WRED drop, shapers


ECN_LATENCY = "      random-detect ecn minimum-threshold 100 microseconds maximum-threshold " \
              "1 milliseconds max-mark-probability 10\n"


def test_latency_thresholds_are_bytes_at_the_ports_speed() -> None:
    text = "interface Ethernet1\n   speed forced 100gfull\n   tx-queue 3\n" + ECN_LATENCY + \
           "interface Ethernet2\n   tx-queue 3\n" + ECN_LATENCY
    config = parse_eos_config(text, "x", port_speeds_bps={"eth2": 25 * 10**9})
    fast = config.profile.ports["Ethernet0"].queues[3].wred
    # 100 µs at 100 Gb/s = 1e-4 × 1e11 / 8 = 1,250,000 B; 1 ms = 12,500,000 B.
    assert (fast.green_min_threshold_bytes, fast.green_max_threshold_bytes) == (1_250_000, 12_500_000)
    assert fast.green_drop_probability_pct == 10 and fast.ecn == "ecn_all"
    slow = config.profile.ports["Ethernet4"].queues[3].wred
    assert slow.green_min_threshold_bytes == 312_500  # 100 µs at 25 Gb/s, the link's rate
    notes = "\n".join(config.profile.notes)
    assert "x line 4: `random-detect ecn minimum-threshold 100 microseconds" in notes
    assert "100 microseconds at 100Gb/s (the interface's `speed`) = 1,250,000 B" in notes
    assert "100 microseconds at 25Gb/s (the fabric's link rate; no `speed` here) = 312,500 B" in notes


def test_latency_threshold_without_a_speed_is_a_warning_where_used() -> None:
    profile = "qos profile ROCE\n   tx-queue 3\n" + ECN_LATENCY
    assert parse_eos_config(profile + "interface Ethernet1\n", "x").warnings == ()  # unused
    config = parse_eos_config(profile + "interface Ethernet1\n   service-profile ROCE\n", "x")
    assert config.warnings == (
        "x line 3: `random-detect ecn minimum-threshold 100 microseconds maximum-threshold 1 "
        "milliseconds max-mark-probability 10`: Ethernet1 tx-queue 3: a latency threshold needs "
        "the port's speed, and the interface has no `speed` and the fabric no link for it: no "
        "ECN recorded",)
    assert config.profile.ports["Ethernet0"].queues == {}


def test_wred_drop_and_shapers() -> None:
    text = """\
interface Ethernet1
   shape rate 40 gbps
   tx-queue 1
      random-detect drop minimum-threshold 10 kbytes maximum-threshold 20 kbytes drop-probability 5
      shape rate 1000000
   tx-queue 3
      random-detect ecn minimum-threshold 100 kbytes maximum-threshold 300 kbytes
      random-detect drop minimum-threshold 100 kbytes maximum-threshold 300 kbytes
"""
    port = parse_eos(text, "x").ports["Ethernet0"]
    drop = port.queues[1].wred
    assert drop.wred_green_enable and drop.ecn == "ecn_none" and not drop.marks_green
    assert (drop.green_min_threshold_bytes, drop.green_drop_probability_pct) == (10_240, 5)
    assert port.queues[1].shape_bps == 1_000_000_000  # kbps unless told
    assert port.shape_bps == 40 * 10**9
    both = port.queues[3].wred
    assert both.marks_green and both.wred_green_enable


def test_segments_use_the_platform_table_or_the_description() -> None:
    body = "interface Ethernet1\n   tx-queue 3\n      random-detect ecn minimum-threshold 10 " \
           "segments maximum-threshold 20 segments\n"
    known = "! device: leaf1 (DCS-7160-32CQ, EOS-4.30.1F)\n" + body
    assert parse_eos(known, "x").ports["Ethernet0"].queues[3].wred.green_min_threshold_bytes == 2560
    assert parse_eos(known, "x", segment_bytes=100).ports["Ethernet0"].queues[
        3].wred.green_min_threshold_bytes == 1000  # the description's figure wins
    unknown = "! device: leaf1 (DCS-7050CX3-32S, EOS-4.32.2F)\n" + body
    with pytest.raises(InputError, match="platform DCS-7050CX3-32S is not in rocelab's table"):
        parse_eos(unknown, "x")


# --- MTU


def test_mtu_routed_switched_and_defaults() -> None:
    text = """\
interface defaults
   mtu 9214
l2 mtu 9000
interface Ethernet1
   no switchport
interface Ethernet2
   no switchport
   mtu 4200
interface Ethernet3
   switchport
interface Ethernet4
   switchport
   l2 mtu 5000
"""
    config = parse_eos_config(text, "x")
    assert config.default_mtu_bytes == 9214
    # Switched ports: the L2 MTU less the 14-byte Ethernet header.
    assert config.mtu_bytes == {"Ethernet4": 4200, "Ethernet8": 8986, "Ethernet12": 4986}
    assert config.line("default-mtu") == 2


def test_render_round_trips_trust() -> None:
    text = "interface Ethernet1\n   qos trust cos\ninterface Ethernet2\n   no qos trust\n" \
           "interface Ethernet3\n"
    profile = parse_eos(text, "x")
    assert parse_eos(render_eos(profile), "x") == profile
