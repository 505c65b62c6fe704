"""The wire's constants and the few helpers every data plane shares: EtherTypes, MAC
Control / PFC, IPv4 and its checksum, ECN bits, the RoCEv2 UDP port, MACs.

The switch pipeline, the NIC core, the probes and the fabric checks all speak these; one
definition keeps them agreeing (REFERENCE.md, 802.1Qbb PFC frame)."""

from __future__ import annotations

import struct

PRIORITIES = 8  # 802.1p priorities (and PFC's class-enable bits)
ETH_P_ALL = 0x0003  # a packet socket's "every protocol"
ETH_P_IPV4 = 0x0800
ETH_P_8021Q = 0x8100
ETH_P_MAC_CONTROL = 0x8808
MAC_CONTROL_PAUSE = 0x0001  # 802.3x: one pause time for the whole link
MAC_CONTROL_PFC = 0x0101  # 802.1Qbb: a pause time per priority
PFC_QUANTUM_BITS = 512  # one quantum = 512 bit times at the port's speed
MIN_FRAME_BYTES = 60  # Ethernet minimum without FCS
IPPROTO_ICMP = 1
IPPROTO_TCP = 6
IPPROTO_UDP = 17
ROCE_UDP_PORT = 4791  # RoCEv2 (IANA)
ETH = struct.Struct("!6s6sH")
MAC_CONTROL_OPCODE = struct.Struct("!H")
PFC_BODY = struct.Struct("!H8H")  # class-enable vector, pause time of priorities 0..7
PAUSE_TIME = struct.Struct("!H")  # 802.3x: one pause_time
IPV4 = struct.Struct("!BBHHHBBH4s4s")  # version/IHL, ToS, length, id, flags/fragment, TTL, protocol, checksum, addresses
IPV4_DONT_FRAGMENT = 0x4000
ECN_MASK = 0x03
ECN_CE = 0x03


class PauseTimers:
    """Until when each of a port's priorities is paused, and for how long in total: the
    receiving side of PFC, in a switch port and in a NIC alike.

    A pause frame's quanta become a deadline; the deadline, not a flag, is the state, so a
    pause that is never refreshed runs out by itself as it does on the wire."""

    __slots__ = ("until_s", "started_s", "closed_s")

    def __init__(self) -> None:
        self.until_s = [0.0] * PRIORITIES
        self.started_s = [0.0] * PRIORITIES
        self.closed_s = [0.0] * PRIORITIES  # paused time of intervals already accounted

    def pause(self, priority: int, now: float, duration_s: float) -> None:
        """Pause `priority` from now for `duration_s` (0 = XON: resume now)."""
        until = self.until_s[priority]
        elapsed_end = now if now < until else until
        if elapsed_end > self.started_s[priority]:
            self.closed_s[priority] += elapsed_end - self.started_s[priority]
        self.started_s[priority] = now
        self.until_s[priority] = now + duration_s

    def paused_time_s(self, priority: int, now: float) -> float:
        until = self.until_s[priority]
        open_end = now if now < until else until
        open_s = open_end - self.started_s[priority]
        return self.closed_s[priority] + (open_s if open_s > 0 else 0.0)

    def clear(self, now: float) -> None:
        for p in range(PRIORITIES):
            self.closed_s[p] = 0.0
            self.started_s[p] = min(now, self.until_s[p])


def mac_bytes(mac: str | bytes) -> bytes:
    """'02:00:00:00:00:01' (or 6 raw bytes) → 6 bytes. Raises ValueError."""
    raw = mac if isinstance(mac, bytes) else bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(raw) != 6:
        raise ValueError(f"{mac!r} is not a MAC address like 02:00:00:00:00:01")
    return raw


def padded(frame: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
    """The frame as it is on the wire: a sending MAC pads anything shorter than the
    Ethernet minimum with zeros (802.3's PAD field), so a field past what the sender
    wrote reads as 0. A veth carries a raw socket's short frame as written, so the
    receiving side pads it here instead (sonic-mgmt's pfc_gen.py writes 18 to 34 bytes)."""
    size = len(frame)
    return frame if size >= MIN_FRAME_BYTES else bytes(frame) + bytes(MIN_FRAME_BYTES - size)


def mac_control(frame: bytes | bytearray | memoryview, opcode_at: int) -> tuple[int, dict[int, int] | int | None]:
    """A MAC Control frame's opcode and what it asks, its opcode at `opcode_at` (after the
    EtherType, and a VLAN tag where there is one), read `padded`: PFC asks {priority: quanta}
    for each enabled class (0 = XON), 802.3x PAUSE its pause_time, any other opcode None.
    The switch, the NIC and the probes all read MAC Control through here."""
    frame = padded(frame)
    (opcode,) = MAC_CONTROL_OPCODE.unpack_from(frame, opcode_at)
    body = opcode_at + MAC_CONTROL_OPCODE.size
    if opcode == MAC_CONTROL_PFC:
        enable, *times = PFC_BODY.unpack_from(frame, body)
        return opcode, {p: times[p] for p in range(PRIORITIES) if enable >> p & 1}
    if opcode == MAC_CONTROL_PAUSE:
        return opcode, PAUSE_TIME.unpack_from(frame, body)[0]
    return opcode, None


def pause_duration_s(quanta: int, rate_bps: float) -> float:
    """How long `quanta` pauses a port of this speed: one quantum is 512 bit times."""
    return quanta * PFC_QUANTUM_BITS / rate_bps


def internet_checksum(data: bytes | bytearray | memoryview) -> int:
    """RFC 1071: the 16-bit one's complement of the one's complement sum (ICMP, IPv4)."""
    if len(data) % 2:
        data = bytes(data) + b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4_checksum(header: bytes | bytearray | memoryview) -> int:
    """The checksum an IPv4 header should carry: its own checksum field taken as zero."""
    return internet_checksum(bytes(header[:10]) + b"\x00\x00" + bytes(header[12:]))


def ipv4_header(*, tos: int, total_bytes: int, ttl: int, protocol: int, src: bytes, dst: bytes,
                flags_fragment: int = 0) -> bytes:
    """A 20-byte IPv4 header (identification 0) with its checksum."""
    header = IPV4.pack(0x45, tos, total_bytes, 0, flags_fragment, ttl, protocol, 0, src, dst)
    return header[:10] + struct.pack("!H", internet_checksum(header)) + header[12:]
