"""The probe's counting core over frames crafted with scapy's layers; no sockets, no root."""

from __future__ import annotations

import json
import socket

import pytest
from rich.console import Console
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.contrib.roce import AETH, BTH, cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from rocelab.errors import InputError
from rocelab.ethernet import mac_bytes
from rocelab.probes.layers import RETH
from rocelab.probes import Flow, ProbeReport, QpKey, Tally, decode_pcap
from rocelab.reporting.probe import render
from rocelab.probes.capture import (
    AUXDATA,
    PACKET_AUXDATA,
    SO_TIMESTAMPNS,
    SOL_PACKET,
    TIMESPEC,
    TP_STATUS_VLAN_TPID_VALID,
    TP_STATUS_VLAN_VALID,
    open_pcap,
    unpack_received,
)

OWN_MAC, PEER_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
PFC_MAC = "01:80:c2:00:00:01"
REQUESTER, RESPONDER = "198.18.0.1", "198.18.0.2"
DATA_QP, REQUESTER_QP = 0x11, 0x22
ROCE_SPORT = 49152
DSCP_ROCE = 26
NOT_ECT, ECT0, CE = 0, 2, 3
WRITE_FIRST, WRITE_MIDDLE, READ_REQUEST, SEND_ONLY = 0x06, 0x07, 0x0C, 0x04


def pfc(src: str, **pause_quanta: int) -> bytes:
    """pfc(src, c3=0xFFFF, c4=0): one frame, those priorities enabled with those quanta."""
    fields = {}
    for cls, quanta in pause_quanta.items():
        fields[f"{cls}_enabled"] = 1
        fields[f"{cls}_pause_time"] = quanta
    return bytes(Ether(src=src, dst=PFC_MAC) / MACControlClassBasedFlowControl(**fields))


def roce(bth, ecn: int = ECT0, src: str = REQUESTER, dst: str = RESPONDER, payload_bytes: int = 64) -> bytes:
    return bytes(Ether(src=PEER_MAC, dst=OWN_MAC) / IP(src=src, dst=dst, tos=DSCP_ROCE << 2 | ecn)
                 / UDP(sport=ROCE_SPORT, dport=4791) / bth / Raw(bytes(payload_bytes)))


def write(psn: int, ecn: int = ECT0) -> bytes:
    return roce(BTH(opcode=WRITE_MIDDLE, dqpn=DATA_QP, psn=psn), ecn)


def to_requester(bth) -> bytes:
    return bytes(Ether(src=OWN_MAC, dst=PEER_MAC) / IP(src=RESPONDER, dst=REQUESTER, tos=DSCP_ROCE << 2 | ECT0)
                 / UDP(sport=ROCE_SPORT, dport=4791) / bth)


SCENARIO = [
    pfc(PEER_MAC, c3=0xFFFF),  # rx XOFF priority 3
    pfc(PEER_MAC, c3=0xFFFF),
    pfc(PEER_MAC, c3=0),  # rx XON priority 3
    pfc(OWN_MAC, c3=100),  # tx XOFF priority 3
    pfc(OWN_MAC, c3=500, c4=0),  # tx: XOFF priority 3 and XON priority 4 in one frame
    roce(BTH(opcode=WRITE_FIRST, dqpn=DATA_QP, psn=0) / RETH(va=0x1000, r_key=0x42, dma_length=64 * 7)),
    write(1), write(2, CE),
    write(5, CE),  # gap: 3 and 4 never came
    write(3), write(4), write(5),  # go-back-N from 3: one rewind, three retransmitted
    write(6, CE),
    to_requester(BTH(opcode=0x11, dqpn=REQUESTER_QP, psn=2) / AETH(syndrome=0x1F, msn=1)),  # ACK
    to_requester(BTH(opcode=0x11, dqpn=REQUESTER_QP, psn=3) / AETH(syndrome=0x60, msn=1)),  # NAK PSN seq error
    to_requester(cnp(REQUESTER_QP)),
    to_requester(cnp(REQUESTER_QP)),
    roce(BTH(opcode=SEND_ONLY, dqpn=0x33, psn=9), NOT_ECT),  # another QP, not ECN-capable
]
START_S = 1_700_000_000


def stamps():
    """(seconds, nanoseconds, float seconds) per scenario frame, 1 ms apart."""
    for i, frame in enumerate(SCENARIO):
        sec, nsec = START_S + i // 1000, (i % 1000) * 1_000_000
        yield sec, nsec, sec + nsec * 1e-9, frame


def tally_of(frames, own_mac: str | None = OWN_MAC) -> Tally:
    tally = Tally(mac_bytes(own_mac) if own_mac else None)
    for i, frame in enumerate(frames):
        tally.count(START_S + i * 0.001, frame)
    return tally


@pytest.fixture
def report() -> ProbeReport:
    return tally_of(SCENARIO).report("test")


def test_pfc_counts_xoff_and_xon_apart_per_priority_and_direction(report):
    rx3, tx3, tx4 = report.pfc["rx", 3], report.pfc["tx", 3], report.pfc["tx", 4]
    assert (rx3.xoff_frames, rx3.xon_frames, rx3.pause_quanta) == (2, 1, 2 * 0xFFFF)
    assert (tx3.xoff_frames, tx3.xon_frames, tx3.pause_quanta) == (2, 0, 600)
    assert (tx4.xoff_frames, tx4.xon_frames, tx4.pause_quanta) == (0, 1, 0)
    assert set(report.pfc) == {("rx", 3), ("tx", 3), ("tx", 4)}
    assert (report.totals["pfc_frames"], report.totals["pfc_xoff"], report.totals["pfc_xon"]) == (5, 4, 2)
    assert rx3.first_s == {"xoff": START_S, "xon": START_S + 0.002}


def test_pfc_direction_is_unknown_without_the_interface_mac():
    report = tally_of(SCENARIO[:5], own_mac=None).report("test")
    assert report.pfc["unknown", 3].xoff_frames == 4


def test_psn_gap_and_go_back_n_rewind(report):
    qp = report.qps[QpKey(RESPONDER, DATA_QP)]
    assert (qp.packets, qp.requests, qp.highest_psn) == (8, 8, 6)
    assert (qp.psn_gaps, qp.psns_missing) == (1, 2)
    assert (qp.rewinds, qp.retransmitted_packets) == (1, 3)
    assert qp.first_s["psn_gap"] == pytest.approx(START_S + 0.008)
    assert qp.first_s["rewind"] == pytest.approx(START_S + 0.009)


def test_ce_marks_per_flow_and_ecn_totals(report):
    flow = report.flows[Flow(REQUESTER, RESPONDER, 17, ROCE_SPORT, 4791)]
    assert (flow.packets, flow.ce_packets) == (9, 3)  # 8 WRITEs and a SEND on one 5-tuple
    assert report.ecn == {"not_ect": 1, "ect0": 9, "ect1": 0, "ce": 3}
    assert report.totals["ce_packets"] == 3
    assert report.flows[Flow(RESPONDER, REQUESTER, 17, ROCE_SPORT, 4791)].ce_packets == 0


def test_cnps_acks_and_naks_per_qp(report):
    qp = report.qps[QpKey(REQUESTER, REQUESTER_QP)]
    assert (qp.cnps, qp.acks, qp.naks, qp.rnr_naks) == (2, 1, {"psn_sequence_error": 1}, 0)
    assert (qp.requests, qp.psn_gaps, qp.rewinds) == (0, 0, 0)  # ACKs and CNPs are not requests
    assert (report.totals["cnps"], report.totals["acks"], report.totals["naks"]) == (2, 1, 1)


def test_totals_and_opcodes(report):
    assert report.totals["frames"] == len(SCENARIO)
    assert report.totals["bytes"] == sum(len(f) for f in SCENARIO)
    assert (report.totals["ipv4_packets"], report.totals["roce_packets"]) == (13, 13)
    assert report.roce_opcodes == {"RC_SEND_ONLY": 1, "RC_RDMA_WRITE_FIRST": 1, "RC_RDMA_WRITE_MIDDLE": 7,
                                   "RC_ACKNOWLEDGE": 2, "CNP": 2}


def test_psn_wraps_at_24_bits_and_a_read_reserves_psns():
    frames = [write(psn) for psn in (0xFFFFFE, 0xFFFFFF, 0, 1)]
    frames += [roce(BTH(opcode=READ_REQUEST, dqpn=DATA_QP, psn=2)), write(10)]  # READ of 8 packets
    qp = tally_of(frames).report("test").qps[QpKey(RESPONDER, DATA_QP)]
    assert (qp.psn_gaps, qp.rewinds, qp.retransmitted_packets, qp.highest_psn) == (0, 0, 0, 10)


def test_vlan_tagged_and_truncated_frames():
    tagged = bytes(Ether(src=PEER_MAC, dst=OWN_MAC) / Dot1Q(prio=3, vlan=100)
                   / IP(src=REQUESTER, dst=RESPONDER, tos=CE) / UDP(sport=1, dport=4791)
                   / BTH(opcode=WRITE_MIDDLE, dqpn=DATA_QP, psn=0))
    tagged_pfc = bytes(Ether(src=PEER_MAC, dst=PFC_MAC) / Dot1Q(prio=7)
                       / MACControlClassBasedFlowControl(c3_enabled=1, c3_pause_time=7))
    cut = bytes(Ether(src=PEER_MAC, dst=OWN_MAC, type=0x0800)) + b"\x45\x00"
    report = tally_of([tagged, tagged_pfc, cut]).report("test")
    assert report.flows[Flow(REQUESTER, RESPONDER, 17, 1, 4791)].ce_packets == 1
    assert report.qps[QpKey(RESPONDER, DATA_QP)].requests == 1
    assert report.pfc["rx", 3].pause_quanta == 7
    assert (report.totals["frames"], report.totals["truncated_frames"]) == (3, 1)


def test_report_is_a_snapshot():
    tally = tally_of(SCENARIO)
    before = tally.report("test")
    tally.count(START_S + 1, SCENARIO[0])
    assert before.pfc["rx", 3].xoff_frames == 2
    assert tally.report("test").pfc["rx", 3].xoff_frames == 3


def test_json_round_trip(report):
    doc = json.loads(json.dumps(report.to_json()))
    assert ProbeReport.from_json(doc) == report
    assert doc["pfc"][0] == {"direction": "rx", "priority": 3, "xoff_frames": 2, "xon_frames": 1,
                             "pause_quanta": 2 * 0xFFFF, "first_s": {"xoff": START_S, "xon": START_S + 0.002},
                             "last_s": {"xoff": START_S + 0.001, "xon": START_S + 0.002}}


def test_written_pcap_decodes_to_the_same_counts(tmp_path):
    path = tmp_path / "probe.pcap"
    tally = Tally(mac_bytes(OWN_MAC))
    writer = open_pcap(path)
    for sec, nsec, timestamp_s, frame in stamps():
        tally.count(timestamp_s, frame)
        writer.write_packet(frame, sec=sec, usec=nsec)
    writer.close()
    live, decoded = tally.report("live").to_json(), decode_pcap(path, OWN_MAC).to_json()
    assert decoded.pop("capture") == {"source": str(path), "mac": OWN_MAC, "first_frame_s": START_S,
                                      "last_frame_s": START_S + (len(SCENARIO) - 1) * 1e-3, "kernel_drops": None,
                                      "link_downs": None}
    live.pop("capture")
    assert decoded == live


def test_an_empty_capture_is_a_valid_pcap(tmp_path):
    path = tmp_path / "empty.pcap"
    open_pcap(path).close()
    assert decode_pcap(path).totals["frames"] == 0


def test_decode_pcap_names_a_file_that_is_not_a_capture(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a capture")
    with pytest.raises(InputError, match="notes.txt: is not a capture file"):
        decode_pcap(path)


def test_received_frame_gets_its_stripped_vlan_tag_and_kernel_time_back():
    untagged = write(0)
    aux = AUXDATA.pack(TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID, len(untagged), len(untagged), 0, 0,
                       3 << 13 | 100, 0x8100)
    sec, nsec, frame = unpack_received(untagged, [(SOL_PACKET, PACKET_AUXDATA, aux),
                                                  (socket.SOL_SOCKET, SO_TIMESTAMPNS, TIMESPEC.pack(12, 345))])
    assert (sec, nsec) == (12, 345)
    assert Ether(frame)[Dot1Q].prio == 3 and Ether(frame)[Dot1Q].vlan == 100
    assert bytes(Ether(frame)[IP]) == bytes(Ether(untagged)[IP])


def test_render_shows_pfc_per_priority_and_qps(report):
    console = Console(record=True, width=220)
    console.print(render(report))
    text = console.export_text()
    for expected in ("PFC3", "XOFF", "131,070", "NAKs: psn_sequence_error 1", "198.18.0.2/0x11", "RC_RDMA_WRITE_MIDDLE",
                     "198.18.0.1:49152 → 198.18.0.2:4791", "kernel drops"):
        assert expected in text


def test_a_short_pfc_frame_counts_as_its_padded_self():
    """pfc_gen.py's 32-byte PFC (7 time fields, no padding): the probe reads it as the switch
    and the NIC do, an XOFF on priority 3, not as a truncated frame."""
    from pfc_gen_frames import TIME_FIELDS_BEFORE_7420, pfc_gen_pfc

    report = tally_of([pfc_gen_pfc(1 << 3, 0xFFFF, TIME_FIELDS_BEFORE_7420)]).report("test")
    assert report.totals["truncated_frames"] == 0 and report.totals["pfc_frames"] == 1
    (record,) = report.pfc.values()
    assert (record.xoff_frames, record.pause_quanta) == (1, 0xFFFF)
