"""MAC Control frames as sonic-mgmt's pfc_gen.py writes them (short, unpadded) and 802.3x
PAUSE: read as the padded frame a real MAC would have put on the wire, counted as SAI
counts them, honoured where the port is set to."""

from __future__ import annotations

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.l2 import Ether

from pfc_gen_frames import TIME_FIELDS, TIME_FIELDS_BEFORE_7420, pfc_gen_pause, pfc_gen_pfc
from rocelab.ethernet import padded
from rocelab.switch.frames import parse_pause, parse_pfc
from test_switch_support import (
    LOSSLESS_TC, RATE_BPS, drive, lossless_profile, make_switch, port_specs, roce, run, with_port,
)

QUANTUM_S = 512 / RATE_BPS
PKT_BYTES = 1000


def scapy_pfc(frame: bytes) -> dict[int, int]:
    pfc = Ether(frame)[MACControlClassBasedFlowControl]
    return {p: getattr(pfc, f"c{p}_pause_time") for p in range(8) if getattr(pfc, f"c{p}_enabled")}


def data_sent(sent, port: str) -> list[float]:
    return [t for t, p, f in sent if p == port and f[12:14] == b"\x08\x00"]


@pytest.mark.parametrize("time_fields, size", [(TIME_FIELDS_BEFORE_7420, 32), (TIME_FIELDS, 34)])
def test_pfc_gen_frame_reads_as_its_padded_self(time_fields, size):
    frame = pfc_gen_pfc(1 << 3 | 1 << 7, 500, time_fields)
    assert len(frame) == size
    assert len(padded(frame)) == 60 and padded(frame)[size:] == bytes(60 - size)
    # Class 7's time is missing from the older 32-byte frame: padding reads it as 0, an XON.
    expected = {3: 500, 7: 500 if time_fields == 8 else 0}
    assert parse_pfc(frame) == scapy_pfc(padded(frame)) == expected


@pytest.mark.parametrize("cut", range(14, 35))
def test_a_pfc_frame_cut_anywhere_reads_its_missing_fields_as_zero(cut):
    whole = bytes(Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:00:09")
                  / MACControlClassBasedFlowControl(c0_enabled=1, c0_pause_time=7, c3_enabled=1, c3_pause_time=300,
                                                    c7_enabled=1, c7_pause_time=9))
    short = whole[:cut]
    expected = scapy_pfc(short + bytes(60 - cut)) if cut >= 16 else None  # no opcode: not PFC
    if expected is not None and cut < 18:
        expected = {}  # opcode but no class-enable vector: nothing enabled
    assert parse_pfc(short) == expected
    assert parse_pfc(memoryview(short)) == expected


def test_pfc_gen_global_pause_is_802_3x():
    frame = pfc_gen_pause(0xFFFF)
    assert len(frame) == 18
    assert parse_pause(frame) == Ether(padded(frame))[MACControlPause].pause_time == 0xFFFF
    assert parse_pfc(frame) is None
    assert parse_pause(pfc_gen_pfc(1 << 3, 0xFFFF)) is None
    assert parse_pause(bytes(Ether(dst="01:80:c2:00:00:01") / MACControlPause(pause_time=3))) == 3
    assert parse_pause(roce("eth1", "eth2")) is None


def test_short_pfc_gen_frame_pauses_its_priority():
    switch = make_switch(lossless_profile())
    quanta = 2_000
    switch.receive("eth2", pfc_gen_pfc(1 << LOSSLESS_TC, quanta, TIME_FIELDS_BEFORE_7420), 0.0)
    switch.receive("eth1", roce("eth1", "eth2", PKT_BYTES), 0.0)
    (t,) = data_sent(run(switch, 0.0, 1.0), "eth2")
    assert t == pytest.approx(quanta * QUANTUM_S)
    eth2 = switch.counters(1.0)["ports"]["eth2"]
    assert eth2["pfc_rx_frames"][LOSSLESS_TC] == 1
    assert eth2["paused_time_s"][LOSSLESS_TC] == pytest.approx(quanta * QUANTUM_S)
    assert eth2["drops"] == {}


def test_a_missing_time_field_is_an_xon():
    """A frame that enables the class but stops before its time field resumes it at once."""
    switch = make_switch(lossless_profile())
    switch.receive("eth2", pfc_gen_pfc(1 << LOSSLESS_TC, 0xFFFF), 0.0)
    switch.receive("eth1", roce("eth1", "eth2", PKT_BYTES), 0.0)
    cut_before_class_3 = pfc_gen_pfc(1 << LOSSLESS_TC, 0xFFFF)[:18 + 2 * LOSSLESS_TC]
    sent = drive(switch, [(0.002, "eth2", cut_before_class_3)], 0.0, 1.0)
    assert data_sent(sent, "eth2") == [pytest.approx(0.002)]
    assert switch.counters(1.0)["ports"]["eth2"]["pfc_rx_frames"][LOSSLESS_TC] == 2


def test_802_3x_pause_on_a_port_without_flow_control_is_counted_and_dropped():
    switch = make_switch(lossless_profile())
    frame = pfc_gen_pause(0xFFFF)
    switch.receive("eth2", frame, 0.0)
    switch.receive("eth1", roce("eth1", "eth2", PKT_BYTES), 0.0)
    assert data_sent(run(switch, 0.0, 1.0), "eth2") == [0.0]  # not held
    eth2 = switch.counters(1.0)["ports"]["eth2"]
    assert eth2["pause_rx_frames"] == 1
    assert eth2["drops"] == {"flow_control_disabled": {"packets": 1, "bytes": len(frame)}}
    assert eth2["pfc_rx_frames"] == [0] * 8 and eth2["paused_time_s"] == [0.0] * 8
    switch.clear_counters(1.0)
    assert switch.counters(1.0)["ports"]["eth2"]["pause_rx_frames"] == 0


def test_802_3x_pause_holds_every_queue_where_flow_control_is_on():
    switch = make_switch(lossless_profile(), with_port(port_specs(), "eth2", global_flow_control_rx=True))
    quanta = 2_000
    switch.receive("eth2", pfc_gen_pause(quanta), 0.0)
    switch.receive("eth1", roce("eth1", "eth2", PKT_BYTES), 0.0)  # lossless
    switch.receive("eth1", roce("eth1", "eth2", PKT_BYTES, dscp=0), 0.0)  # lossy
    switch.receive("eth1", roce("eth1", "eth3", PKT_BYTES), 0.0)  # another port: not held
    sent = run(switch, 0.0, 1.0)
    assert data_sent(sent, "eth3") == [0.0]
    held = data_sent(sent, "eth2")
    assert len(held) == 2 and held[0] == pytest.approx(quanta * QUANTUM_S)
    eth2 = switch.counters(1.0)["ports"]["eth2"]
    assert eth2["pause_rx_frames"] == 1 and eth2["drops"] == {}
    assert eth2["pfc_rx_frames"] == [0] * 8  # 802.3x is not PFC


def test_802_3x_xon_resumes_the_port_early():
    switch = make_switch(lossless_profile(), with_port(port_specs(), "eth2", global_flow_control_rx=True))
    switch.receive("eth2", pfc_gen_pause(0xFFFF), 0.0)
    switch.receive("eth1", roce("eth1", "eth2", PKT_BYTES), 0.0)
    sent = drive(switch, [(0.002, "eth2", pfc_gen_pause(0))], 0.0, 1.0)
    assert data_sent(sent, "eth2") == [pytest.approx(0.002)]
    assert switch.counters(1.0)["ports"]["eth2"]["pause_rx_frames"] == 2


def test_other_mac_control_opcodes_stay_unsupported():
    switch = make_switch(lossless_profile())
    gate = pfc_gen_pause(0)[:14] + b"\x00\x02"  # 802.3 MPCP GATE: not a pause
    switch.receive("eth2", gate, 0.0)
    eth2 = switch.counters(0.0)["ports"]["eth2"]
    assert eth2["drops"] == {"mac_control_unsupported": {"packets": 1, "bytes": 16}}
    assert eth2["pause_rx_frames"] == 0
