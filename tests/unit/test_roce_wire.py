"""RoCEv2 and PFC frames: hot-path structs against scapy, ICRC, IPv4 checksum, fuzzing."""

from __future__ import annotations

import random

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Padding, Raw, raw

from rocelab.probes.layers import RETH
from rocelab.roce import Nic, NicConfig
from rocelab.roce.sim import EcnMarking, FabricSim, connect_qps
from rocelab.ethernet import ECN_CE
from rocelab.roce.wire import (
    BTH as BTH_STRUCT, FlowHeaders, MalformedFrame, NotRoce, Opcode, PauseFrame, RocePacket, Syndrome, aeth, mark_ce, parse_frame, reth,
)

SRC_MAC = bytes.fromhex("020000000001")
DST_MAC = bytes.fromhex("020000000002")
SRC_IP = bytes([198, 18, 0, 1])
DST_IP = bytes([198, 18, 0, 2])


def flow(**overrides) -> FlowHeaders:
    options = dict(dscp=26, ecn=2, ttl=64, udp_sport=0xC123)
    options.update(overrides)
    return FlowHeaders(SRC_MAC, DST_MAC, SRC_IP, DST_IP, **options)


def assert_scapy_agrees(frame: bytes) -> Ether:
    """scapy decodes the frame as RoCEv2 and, asked to compute the IPv4 checksum and the
    ICRC itself, rebuilds exactly the same bytes."""
    pkt = Ether(frame)
    assert BTH in pkt, pkt.summary()
    rebuilt = pkt.copy()
    rebuilt[IP].chksum = None
    rebuilt[BTH].icrc = None
    if Padding in rebuilt:
        # Ethernet padding of a short frame: scapy would fold it into its ICRC; it is not
        # part of the IP packet, so take it off before asking scapy.
        rebuilt[Padding].underlayer.remove_payload()
    rebuilt_bytes = raw(rebuilt)
    assert rebuilt_bytes == frame[:len(rebuilt_bytes)], pkt.summary()
    assert frame[len(rebuilt_bytes):] == bytes(len(frame) - len(rebuilt_bytes))
    return pkt


def test_write_only_known_answer():
    frame = flow().frame(Opcode.RDMA_WRITE_ONLY, 0x000012, 0xFFFFFE, ackreq=True,
                         extension=reth(0x7F0000001000, 0xDEADBEEF, 13), payload=b"hello, world!")
    expected = (Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
                / IP(src="198.18.0.1", dst="198.18.0.2", tos=26 << 2 | 2, ttl=64, flags="DF", id=0)
                / UDP(sport=0xC123, dport=4791, chksum=0)
                / BTH(opcode=0x0A, padcount=3, pkey=0xFFFF, dqpn=0x12, ackreq=1, psn=0xFFFFFE)
                / RETH(va=0x7F0000001000, r_key=0xDEADBEEF, dma_length=13)
                / Raw(b"hello, world!\x00\x00\x00"))
    assert frame == raw(expected)
    pkt = Ether(frame)
    bth = pkt[BTH]
    assert (bth.opcode, bth.dqpn, bth.psn, bth.ackreq, bth.padcount) == (0x0A, 0x12, 0xFFFFFE, 1, 3)
    assert (pkt[RETH].va, pkt[RETH].r_key, pkt[RETH].dma_length) == (0x7F0000001000, 0xDEADBEEF, 13)
    assert bth.icrc == 0x57A36BB4  # scapy's value for these fixed fields
    parsed = parse_frame(frame)
    assert isinstance(parsed, RocePacket)
    assert bytes(parsed.payload) == b"hello, world!"
    assert (parsed.va, parsed.r_key, parsed.dma_length) == (0x7F0000001000, 0xDEADBEEF, 13)


def test_structs_match_scapy_layers():
    assert reth(0x1122334455667788, 0x99AABBCC, 4096) == raw(
        RETH(va=0x1122334455667788, r_key=0x99AABBCC, dma_length=4096))
    assert aeth(Syndrome.NAK_PSN_SEQUENCE_ERROR, 0x123456) == raw(AETH(syndrome=0x60, msn=0x123456))
    header = BTH_STRUCT.pack(0x06, 0x20, 0xFFFF, 0x40000000 | 0xABCDEF, 0x80000000 | 0x10203)
    scapy_bth = BTH(opcode=0x06, padcount=2, pkey=0xFFFF, becn=1, dqpn=0xABCDEF, ackreq=1,
                    psn=0x10203, icrc=0)
    assert header == raw(scapy_bth)[:12]


@pytest.mark.parametrize("opcode", [Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST,
                                    Opcode.SEND_ONLY, Opcode.RDMA_WRITE_FIRST,
                                    Opcode.RDMA_WRITE_MIDDLE, Opcode.RDMA_WRITE_LAST,
                                    Opcode.RDMA_WRITE_ONLY])
@pytest.mark.parametrize("size", [0, 1, 3, 4, 1024])
def test_every_opcode_and_pad_count_validates(opcode, size):
    extension = reth(0x1000, 7, size) if opcode in (Opcode.RDMA_WRITE_FIRST,
                                                    Opcode.RDMA_WRITE_ONLY) else b""
    payload = bytes(i * 7 & 0xFF for i in range(size))
    frame = flow().frame(opcode, 0x11, 5, extension=extension, payload=payload)
    assert len(frame) >= 60
    assert_scapy_agrees(frame)
    parsed = parse_frame(frame)
    assert parsed.opcode == opcode and len(parsed.payload) == size


def test_ack_cnp_and_vlan_frames_validate():
    ack = assert_scapy_agrees(flow().frame(Opcode.ACKNOWLEDGE, 0x11, 9, extension=aeth(0x1F, 3)))
    assert (ack[AETH].syndrome, ack[AETH].msn, ack[BTH].psn) == (0x1F, 3, 9)
    cnp = assert_scapy_agrees(flow(dscp=48, ecn=0).frame(Opcode.CNP, 0x11, 0, becn=True,
                                                       extension=bytes(16)))
    assert cnp[BTH].opcode == 0x81 and cnp[BTH].becn == 1 and CNPPadding in cnp
    assert cnp[IP].tos == 48 << 2
    tagged = flow(vlan_tci=3 << 13 | 100).frame(Opcode.SEND_ONLY, 0x11, 1, payload=b"x" * 100)
    pkt = assert_scapy_agrees(tagged)
    assert pkt[Dot1Q].prio == 3 and pkt[Dot1Q].vlan == 100
    assert isinstance(parse_frame(tagged), RocePacket)


def test_ce_marking_keeps_icrc_and_fixes_ip_checksum():
    frame = flow().frame(Opcode.RDMA_WRITE_MIDDLE, 0x11, 77, payload=bytes(1024))
    marked = mark_ce(frame)
    pkt = assert_scapy_agrees(marked)
    assert pkt[IP].tos & 3 == ECN_CE
    assert parse_frame(marked).ecn == ECN_CE
    assert mark_ce(flow(ecn=0).frame(Opcode.SEND_ONLY, 0x11, 1, payload=b"abcd")) is None


def test_every_frame_of_a_lossy_congested_transfer_validates_with_scapy():
    """WRITEs and SENDs of odd sizes over loss and CE marking: data, ACK, NAK, CNP."""
    rng = random.Random(7)
    config = NicConfig(pmtu_bytes=1024, ack_coalesce_packets=4)
    a = Nic("02:00:00:00:00:01", "198.18.0.1", 10e9, config, rng=rng)
    b = Nic("02:00:00:00:00:02", "198.18.0.2", 10e9, config, rng=rng)
    qa, qb = connect_qps(a, b)
    mr = b.register_mr(bytearray(64 * 1024))
    for wr_id, size in enumerate((0, 1, 1023, 1024, 1025, 5000, 20001)):
        a.post_write(qa, wr_id, rng.randbytes(size), remote_va=mr.va, r_key=mr.r_key)
        b.post_recv(qb, wr_id, bytearray(size))
        a.post_send(qa, 100 + wr_id, rng.randbytes(size))
    sim = FabricSim(random.Random(8))
    frames: list[bytes] = []
    sim.on_transmit = lambda nic, frame: frames.append(frame)
    sim.attach(a, delay_s=2e-6, loss=0.02)
    # Every frame queued at B's port is CE-marked.
    sim.attach(b, delay_s=2e-6, loss=0.02, ecn=EcnMarking(-1, 0, 1.0))
    assert sim.run(1.0, stop=lambda: a.qp(qa).counters.messages_sent == 14)
    seen = set()
    for frame in frames:
        pkt = assert_scapy_agrees(frame)
        seen.add(pkt[BTH].opcode if AETH not in pkt else ("ACK", pkt[AETH].syndrome))
    assert {0x00, 0x01, 0x02, 0x04, 0x06, 0x07, 0x08, 0x0A, 0x81} <= seen
    assert {("ACK", 0x1F), ("ACK", 0x60)} <= seen
    assert all(wc.status == "SUCCESS" for wc in a.poll_completions() + b.poll_completions())


def test_pfc_and_802_3x_pause_frames_parse():
    pfc = raw(Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:00:01")
              / MACControlClassBasedFlowControl(c3_enabled=1, c3_pause_time=0x1234,
                                                c6_enabled=1, c6_pause_time=0))
    parsed = parse_frame(pfc + bytes(60 - len(pfc)))
    assert isinstance(parsed, PauseFrame)
    assert parsed.quanta == (None, None, None, 0x1234, None, None, 0, None)
    tagged = raw(Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:00:01") / Dot1Q(prio=7)
                 / MACControlClassBasedFlowControl(c0_enabled=1, c0_pause_time=9))
    assert parse_frame(tagged).quanta[0] == 9
    global_pause = raw(Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:00:01")
                       / MACControlPause(pause_time=0x100))
    assert parse_frame(global_pause).quanta == (0x100,) * 8
    # Cut short (as sonic-mgmt's pfc_gen.py writes them): read as the MAC pads it, missing times 0.
    assert parse_frame(pfc[:20]).quanta == (None, None, None, 0, None, None, 0, None)


def _parse_outcome(frame: bytes) -> str:
    try:
        parse_frame(frame)
    except MalformedFrame as bad:
        return bad.reason
    except NotRoce:
        return "not_roce"
    return "ok"


def test_parse_never_raises_other_errors_on_garbage():
    rng = random.Random(3)
    valid = flow().frame(Opcode.RDMA_WRITE_FIRST, 0x11, 1, extension=reth(0, 1, 4096),
                         payload=rng.randbytes(1024))
    reasons = set()
    for cut in range(len(valid)):
        reasons.add(_parse_outcome(valid[:cut]))
    assert "truncated" in reasons
    for bit in range(len(valid) * 8):
        flipped = bytearray(valid)
        flipped[bit // 8] ^= 1 << bit % 8
        reasons.add(_parse_outcome(bytes(flipped)))
    assert {"bad_icrc", "bad_ip_checksum"} <= reasons
    for _ in range(2000):
        _parse_outcome(rng.randbytes(rng.randrange(0, 200)))
    # Random bytes behind valid Ethernet/IPv4/UDP 4791 headers reach the ICRC check.
    header = valid[:14 + 20 + 8]
    assert _parse_outcome(header + rng.randbytes(len(valid) - len(header))) == "bad_icrc"
