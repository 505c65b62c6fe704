"""Arista EOS running-config ⇄ QosProfile: what parses, what renders and round-trips, and
what a user is told (file and line) when a statement is wrong."""

from __future__ import annotations

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
