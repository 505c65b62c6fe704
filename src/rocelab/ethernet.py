"""Ethernet-level facts every data plane shares: MAC Control / PFC, ECN bits, MACs.

The switch pipeline, the NIC core and the probes all speak these; one definition keeps
them agreeing (REFERENCE.md, 802.1Qbb PFC frame)."""

from __future__ import annotations

import struct

ETH_P_MAC_CONTROL = 0x8808
MAC_CONTROL_PAUSE = 0x0001  # 802.3x: one pause time for the whole link
MAC_CONTROL_PFC = 0x0101  # 802.1Qbb: a pause time per priority
PFC_QUANTUM_BITS = 512  # one quantum = 512 bit times at the port's speed
MIN_FRAME_BYTES = 60  # Ethernet minimum without FCS
IPPROTO_UDP = 17
ECN_MASK = 0x03
ECN_CE = 0x03


def mac_bytes(mac: str | bytes) -> bytes:
    """'02:00:00:00:00:01' (or 6 raw bytes) → 6 bytes. Raises ValueError."""
    raw = mac if isinstance(mac, bytes) else bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(raw) != 6:
        raise ValueError(f"{mac!r} is not a MAC address like 02:00:00:00:00:01")
    return raw


def pause_duration_s(quanta: int, rate_bps: float) -> float:
    """How long `quanta` pauses a port of this speed: one quantum is 512 bit times."""
    return quanta * PFC_QUANTUM_BITS / rate_bps


def internet_checksum(data: bytes) -> int:
    """RFC 1071: the 16-bit one's complement of the one's complement sum (ICMP, IPv4)."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
