"""The core's wire formats against scapy's layers, and robustness against any byte string."""

from __future__ import annotations

import json
import random

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import fuzz

from rocelab.ethernet import mac_bytes
from rocelab.switch.frames import IPV4, IPV4_L4, build_pfc, parse_pfc
from test_switch_support import (
    PORTS, host_mac, lossless_profile, make_switch, pfc_from_peer, roce, run, switch_mac,
)


def test_pfc_frame_decodes_in_scapy():
    frame = build_pfc(mac_bytes("02:00:00:00:00:01"), {3: 0xFFFF, 4: 0})
    assert len(frame) == 60
    pkt = Ether(frame)
    assert pkt.dst == "01:80:c2:00:00:01" and pkt.src == "02:00:00:00:00:01"
    assert pkt.type == 0x8808
    pfc = pkt[MACControlClassBasedFlowControl]
    enabled = [p for p in range(8) if getattr(pfc, f"c{p}_enabled")]
    assert enabled == [3, 4]
    assert pfc.c3_pause_time == 0xFFFF and pfc.c4_pause_time == 0


def test_scapy_pfc_frame_parses():
    pkt = (Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:00:09")
           / MACControlClassBasedFlowControl(c0_enabled=1, c0_pause_time=7,
                                             c7_enabled=1, c7_pause_time=300))
    assert parse_pfc(bytes(pkt)) == {0: 7, 7: 300}


def test_other_mac_control_is_not_pfc():
    pause = bytes(Ether(dst="01:80:c2:00:00:01") / MACControlPause(pause_time=10))
    assert parse_pfc(pause) is None
    assert parse_pfc(b"\x01\x80") is None


@pytest.mark.parametrize("layer4", [UDP(sport=50123, dport=4791), TCP(sport=1, dport=2)])
def test_ipv4_struct_matches_scapy(layer4):
    ip = IP(src="198.18.1.2", dst="198.18.2.2", tos=0x6A, ttl=17, flags="DF") / layer4
    raw = bytes(ip)
    tos, total_len, frag, ttl, proto, src, dst, sport, dport = IPV4_L4.unpack_from(raw)
    parsed = IP(raw)
    assert (tos, total_len, ttl, proto) == (parsed.tos, parsed.len, parsed.ttl, parsed.proto)
    assert frag == int(parsed.flags) << 13 | parsed.frag
    assert (src, dst) == (int.from_bytes(raw[12:16], "big"), int.from_bytes(raw[16:20], "big"))
    assert (sport, dport) == (parsed.sport, parsed.dport)
    assert IPV4.unpack_from(raw) == (tos, total_len, frag, ttl, proto, src, dst)


def malformed_frames() -> list[tuple[str, bytes]]:
    good = roce("eth1", "eth2", 200)
    bad_checksum = bytearray(good)
    bad_checksum[24] ^= 0xFF
    frames = [("truncated", good[:n]) for n in range(0, len(good), 7)]
    frames += [
        ("oversized", good + bytes(10_000)),
        ("ipv4 total length past the frame", good[:60]),
        ("arp", bytes(Ether(dst="ff:ff:ff:ff:ff:ff", src=host_mac("eth1")) / ARP())),
        ("ipv6", bytes(Ether(dst=switch_mac("eth1")) / IPv6() / UDP())),
        ("bad checksum", bytes(bad_checksum)),
        ("version 6 in an IPv4 frame", good.replace(b"\x08\x00\x45", b"\x08\x00\x65", 1)),
        ("ihl 3", good.replace(b"\x08\x00\x45", b"\x08\x00\x43", 1)),
        ("ip options", bytes(Ether(dst=switch_mac("eth1"))
                             / IP(dst="198.18.2.2", options=b"\x94\x04\x00\x00") / UDP())),
        ("802.3x pause, flow control off", bytes(Ether(dst="01:80:c2:00:00:01") / MACControlPause())),
        ("unknown mac control opcode", bytes.fromhex("0180c2000001020000000101" "8808" "0002") + bytes(44)),
        ("pfc", pfc_from_peer("eth1", {3: 10})),
        ("tagged non-ip", bytes.fromhex("0200000000010200000001018100000308060001")),
    ]
    rng = random.Random(7)
    random.seed(7)  # scapy's fuzz() draws from the global random module
    for _ in range(300):
        frames.append(("fuzzed ip", bytes(fuzz(Ether(dst=switch_mac("eth1"), type=0x0800)
                                              / IP() / UDP()))))
        frames.append(("fuzzed ether", bytes(fuzz(Ether() / IP() / UDP()))))
        frames.append(("random bytes", rng.randbytes(rng.randrange(0, 200))))
    return frames


def test_any_byte_string_is_forwarded_or_counted(switch_implementation):
    switch = make_switch(lossless_profile())
    frames = malformed_frames()
    for i, (_what, frame) in enumerate(frames):
        # alternate the buffer types a shell may hand over
        switch.receive("eth1", memoryview(frame) if i % 2 else frame, 0.0)
    forwarded = len(run(switch, 0.0, 10.0))
    counters = switch.counters(10.0)
    eth1 = counters["ports"]["eth1"]
    assert eth1["rx_packets"] == len(frames)
    dropped = sum(d["packets"] for d in counters["drops"].values())
    pfc_consumed = 1
    pfc_out = sum(sum(p["pfc_tx_frames"]) for p in counters["ports"].values())
    assert dropped + forwarded - pfc_out + pfc_consumed == len(frames)
    reasons = set(counters["drops"])
    assert {"truncated", "oversized", "not_ipv4", "bad_ipv4_checksum", "bad_ipv4_header",
            "mac_control_unsupported", "flow_control_disabled"} <= reasons
    # and the switch still forwards
    switch.receive("eth1", roce("eth1", "eth3"), 11.0)
    assert [p for _t, p, _f in run(switch, 11.0, 12.0)] == ["eth3"]


def test_counters_are_json_and_clear(switch_implementation):
    switch = make_switch(lossless_profile())
    for src in PORTS:
        switch.receive(src, roce(src, "eth4" if src != "eth4" else "eth1"), 0.0)
    switch.receive("eth1", b"\x00" * 10, 0.0)
    run(switch, 0.0, 1.0)
    counters = json.loads(json.dumps(switch.counters(1.0)))
    eth1 = counters["ports"]["eth1"]
    assert eth1["rx_packets"] == 2 and eth1["drops"]["truncated"]["packets"] == 1
    assert counters["ports"]["eth4"]["tx_packets"] == 3
    assert counters["ports"]["eth4"]["queues"][3]["watermark_bytes"] > 0
    assert counters["ports"]["eth1"]["pgs"][3]["shared_watermark_bytes"] >= 0
    switch.clear_counters(1.0)
    cleared = switch.counters(1.0)
    assert cleared["drops"] == {}
    assert cleared["ports"]["eth1"]["rx_packets"] == 0
    assert cleared["ports"]["eth4"]["tx_packets"] == 0
    assert cleared["ports"]["eth4"]["queues"][3]["watermark_bytes"] == 0  # queue is empty
