"""Wire formats the switch core reads and writes: Ethernet, 802.1Q, IPv4, 802.1Qbb PFC,
802.3x PAUSE.

One precompiled `struct.Struct` per header (STYLE.md rule 9); tests check each against
scapy's layer. Everything here works on bytes, bytearray and memoryview alike.
"""

from __future__ import annotations

import struct
from typing import Mapping

from rocelab.ethernet import ETH_P_MAC_CONTROL, MAC_CONTROL_PAUSE, MAC_CONTROL_PFC, MIN_FRAME_BYTES, mac_control
from rocelab.qos.model import PRIORITIES


ETH_HEADER_BYTES = 14
VLAN_TAG_BYTES = 4
IPV4_HEADER_BYTES = 20  # without options
L4_PORTS_BYTES = 4  # UDP/TCP source and destination port
# A jumbo MTU of 9216 plus Ethernet and one VLAN tag; anything longer is not a frame a
# port would accept.
MAX_FRAME_BYTES = 9216 + ETH_HEADER_BYTES + VLAN_TAG_BYTES

PFC_DST_MAC = bytes.fromhex("0180c2000001")
PFC_XOFF_QUANTA = 0xFFFF  # the longest pause one frame can ask for


# IPv4 header after its version/IHL byte: TOS, total length, flags/fragment offset, TTL,
# protocol, source, destination (identification and checksum skipped).
IPV4 = struct.Struct("!xBH2xHBB2xII")
# The same, followed by the L4 source and destination ports of an option-less header.
IPV4_L4 = struct.Struct("!xBH2xHBB2xIIHH")
L4_PORTS = struct.Struct("!HH")
# dst MAC, src MAC, EtherType, opcode, class-enable vector, 8 pause times (priority 0 first)
PFC = struct.Struct("!6s6sHHH8H")

# IPv4 flags/fragment-offset field: more-fragments flag and offset. Any fragment is hashed
# on its addresses alone, so all pieces of a datagram take one path.
IPV4_FRAGMENT_MASK = 0x3FFF


# RFC 1624 incremental checksum update: a TTL decrement changes the word TTL|protocol by
# −0x0100, so ~m + m' = 0xFEFF. Setting CE on an ECT(0)/ECT(1) packet adds 1 or 2 to the
# word version|IHL|TOS, adding as much to ~m + m'.
TTL_DECREMENT_DELTA = 0xFEFF


def build_pfc(src_mac: bytes, quanta: Mapping[int, int]) -> bytes:
    """A 60-byte 802.1Qbb frame asking the peer to pause each priority for its quanta
    (0 = XON: resume now). Priorities not in `quanta` are left disabled."""
    times = [0] * PRIORITIES
    enable = 0
    for priority, q in quanta.items():
        if not 0 <= priority < PRIORITIES or not 0 <= q <= 0xFFFF:
            raise ValueError(f"PFC priority {priority} quanta {q} out of range")
        enable |= 1 << priority
        times[priority] = q
    frame = PFC.pack(PFC_DST_MAC, src_mac, ETH_P_MAC_CONTROL, MAC_CONTROL_PFC, enable, *times)
    return frame + bytes(MIN_FRAME_BYTES - len(frame))


def _untagged_mac_control(frame: bytes | bytearray | memoryview) -> tuple[int | None, dict[int, int] | int | None]:
    if (len(frame) < ETH_HEADER_BYTES
            or (frame[ETH_HEADER_BYTES - 2] << 8 | frame[ETH_HEADER_BYTES - 1]) != ETH_P_MAC_CONTROL):
        return None, None
    return mac_control(frame, ETH_HEADER_BYTES)


def parse_pfc(frame: bytes | bytearray | memoryview) -> dict[int, int] | None:
    """{priority: quanta} for each enabled class of an untagged PFC frame, or None when
    the frame is not one (another EtherType or MAC Control opcode). A short frame is read
    padded: a missing pause time is 0, an XON for its priority if that class is enabled."""
    opcode, asked = _untagged_mac_control(frame)
    return asked if opcode == MAC_CONTROL_PFC and isinstance(asked, dict) else None


def parse_pause(frame: bytes | bytearray | memoryview) -> int | None:
    """The pause_time (quanta) of an untagged 802.3x PAUSE frame, read padded like
    `parse_pfc`, or None when the frame is not one."""
    opcode, asked = _untagged_mac_control(frame)
    return asked if opcode == MAC_CONTROL_PAUSE and isinstance(asked, int) else None
