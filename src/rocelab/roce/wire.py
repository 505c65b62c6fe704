"""RoCEv2 and 802.1Qbb frames on the wire, packed and parsed with precompiled structs.

This is the NIC's hot path, so it does not use scapy; `rocelab.probes.layers` holds the scapy
view of the same headers and tests check one against the other. Layout
(REFERENCE.md, "RoCEv2"): Ethernet [802.1Q] / IPv4 / UDP 4791 / BTH / [RETH | AETH |
16 reserved bytes of a CNP] / payload / pad to 4 bytes / ICRC.

`parse_frame` never raises anything but `MalformedFrame` (with a counter reason) or
`NotRoce` (a frame the NIC ignores, such as ARP), whatever the bytes.
"""

from __future__ import annotations

import ipaddress
import struct
from enum import IntEnum

from rocelab.ethernet import (ECN_CE, ECN_MASK, ETH, ETH_P_8021Q, ETH_P_IPV4, ETH_P_MAC_CONTROL, IPPROTO_UDP, IPV4,
                              IPV4_DONT_FRAGMENT, MIN_FRAME_BYTES, ROCE_UDP_PORT,
                              PRIORITIES, ipv4_checksum, mac_control, padded)
from zlib import crc32

from rocelab.roce.icrc import ICRC, ICRC_BYTES, LRH_CRC, mask_variant_fields




ECN_ECT0 = 0x02

PSN_MASK = 0xFFFFFF
QPN_MASK = 0xFFFFFF
DEFAULT_PKEY = 0xFFFF
_PKEY_BASE_MASK = 0x7FFF  # the top bit is membership (full/limited), not the key

VLAN_TAG = struct.Struct("!HH")  # TCI, inner EtherType (after the 0x8100 TPID)
IPV4_WORDS = struct.Struct("!10H")
UDP = struct.Struct("!HHHH")
BTH = struct.Struct("!BBHII")
RETH = struct.Struct("!QII")
AETH = struct.Struct("!I")
CNP_RESERVED = bytes(16)

# IPv4 (no options) / UDP / BTH in one struct: parse_frame reads them at once and packs the
# ICRC's masked view of them at once.
IPV4_UDP_BTH = struct.Struct("!BBHHHBBH4s4s" "HHHH" "BBHII")
# FlowHeaders' two packs a packet, the runs of bytes fixed per flow passed whole. As sent, behind
# [Ethernet, version/IHL, TOS]: total length, [id, flags, TTL, protocol], checksum, [addresses,
# UDP ports], UDP length, UDP checksum, opcode+flags, P_Key, QPN word, PSN word ...
_SENT_TAIL = "H6sH12sHHHHII"
# ... and the ICRC's masked view behind its first two bytes (0x45 0xFF): total length, [id ...
# UDP ports], UDP length, 0xFFFF, opcode+flags, P_Key, QPN word, PSN word.
_MASKED_TAIL = struct.Struct("!H20sHHHHII")
_MASKED_CRC = crc32(b"\x45\xff", LRH_CRC)  # every ICRC's value after those two bytes
IPV4_HEADER_BYTES = IPV4.size
_ETH_BYTES = ETH.size
_VLAN_TAG_BYTES = VLAN_TAG.size
_UDP_BYTES = UDP.size
BTH_BYTES = BTH.size
RETH_BYTES = RETH.size
AETH_BYTES = AETH.size
_IPV4_FRAGMENT_BITS = 0x3FFF  # MF flag + fragment offset
_BTH_BECN = 0x40000000
_BTH_ACKREQ = 0x80000000
_BTH_PADCNT_SHIFT = 4
_BTH_TVER_MASK = 0x0F
_PAD = (b"", b"\x00", b"\x00\x00", b"\x00\x00\x00")
_IPV4_UDP_BTH_BYTES = IPV4_UDP_BTH.size
_UDP_BTH_ICRC_BYTES = _UDP_BYTES + BTH_BYTES + ICRC_BYTES  # a RoCEv2 datagram less extension and payload
_from_bytes = int.from_bytes  # bound once: parse_frame reads every IPv4 header with it


class Opcode(IntEnum):
    """BTH opcodes of the RC transport this NIC speaks, plus the RoCEv2 CNP."""

    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_ONLY = 0x04
    RDMA_WRITE_FIRST = 0x06
    RDMA_WRITE_MIDDLE = 0x07
    RDMA_WRITE_LAST = 0x08
    RDMA_WRITE_ONLY = 0x0A
    RDMA_READ_REQUEST = 0x0C
    RDMA_READ_RESPONSE_FIRST = 0x0D
    RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RDMA_READ_RESPONSE_LAST = 0x0F
    RDMA_READ_RESPONSE_ONLY = 0x10
    ACKNOWLEDGE = 0x11
    CNP = 0x81


# Bytes between BTH and payload for each opcode the NIC accepts.
EXTENSION_BYTES = {
    Opcode.SEND_FIRST: 0,
    Opcode.SEND_MIDDLE: 0,
    Opcode.SEND_LAST: 0,
    Opcode.SEND_ONLY: 0,
    Opcode.RDMA_WRITE_FIRST: RETH_BYTES,
    Opcode.RDMA_WRITE_MIDDLE: 0,
    Opcode.RDMA_WRITE_LAST: 0,
    Opcode.RDMA_WRITE_ONLY: RETH_BYTES,
    Opcode.RDMA_READ_REQUEST: RETH_BYTES,
    Opcode.RDMA_READ_RESPONSE_FIRST: AETH_BYTES,
    Opcode.RDMA_READ_RESPONSE_MIDDLE: 0,
    Opcode.RDMA_READ_RESPONSE_LAST: AETH_BYTES,
    Opcode.RDMA_READ_RESPONSE_ONLY: AETH_BYTES,
    Opcode.ACKNOWLEDGE: AETH_BYTES,
    Opcode.CNP: len(CNP_RESERVED),
}
_EXTENSION_BY_INT = {int(op): n for op, n in EXTENSION_BYTES.items()}
# Opcodes as plain ints for the per-packet paths: reading a member off an enum class goes through
# the metaclass's __getattr__ hook (~10× a global's cost), and an int matches an int faster than
# an IntEnum.
OP_ACKNOWLEDGE = int(Opcode.ACKNOWLEDGE)
OP_CNP = int(Opcode.CNP)
_WITH_RETH = frozenset(map(int, (Opcode.RDMA_WRITE_FIRST, Opcode.RDMA_WRITE_ONLY, Opcode.RDMA_READ_REQUEST)))
_WITH_AETH = frozenset(map(int, (Opcode.ACKNOWLEDGE, Opcode.RDMA_READ_RESPONSE_FIRST, Opcode.RDMA_READ_RESPONSE_LAST,
                                 Opcode.RDMA_READ_RESPONSE_ONLY)))


class Syndrome(IntEnum):
    """AETH syndromes (bits 7:5 select ACK / RNR NAK / NAK; the rest is a code)."""

    ACK = 0x1F  # ACK with "unlimited" credit count
    RNR_NAK = 0x20  # timer field 0: the requester uses its own configured delay
    NAK_PSN_SEQUENCE_ERROR = 0x60
    NAK_INVALID_REQUEST = 0x61
    NAK_REMOTE_ACCESS_ERROR = 0x62
    NAK_REMOTE_OPERATIONAL_ERROR = 0x63


SYNDROME_KIND_MASK = 0xE0
SYNDROME_KIND_ACK = 0x00
SYNDROME_KIND_RNR_NAK = 0x20
SYNDROME_KIND_NAK = 0x60


class MalformedFrame(ValueError):
    """A frame the NIC drops; `reason` is the counter it increments."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class NotRoce(ValueError):
    """A well-formed frame that is not RoCEv2 or MAC Control (ARP, IPv6, other UDP)."""


def ip_to_bytes(ip: str | bytes) -> bytes:
    """'198.18.0.1' or 4 bytes → 4 bytes. Raises ValueError."""
    if isinstance(ip, bytes):
        if len(ip) != 4:
            raise ValueError(f"{ip!r} is not a 4-byte IPv4 address")
        return ip
    return ipaddress.IPv4Address(ip).packed


class FlowHeaders:
    """The headers of one direction of one QP, precomputed so a packet costs a few packs.

    Everything but IPv4 total length and checksum, UDP length and the BTH is fixed per
    QP: MACs, optional 802.1Q tag, addresses, DSCP/ECN, TTL, UDP source port (the ECMP
    entropy). IPv4 identification is 0 with Don't Fragment set (RFC 6864 atomic datagrams).
    """

    __slots__ = ("dscp", "udp_sport", "_pkey", "_csum_base", "_sent", "_sent_head", "_sent_id_ttl", "_sent_addrs",
                 "_masked_id_ports")

    def __init__(self, src_mac: bytes, dst_mac: bytes, src_ip: bytes, dst_ip: bytes, *,
                 dscp: int, ecn: int, ttl: int, udp_sport: int, pkey: int = DEFAULT_PKEY,
                 vlan_tci: int | None = None):
        if vlan_tci is None:
            eth = ETH.pack(dst_mac, src_mac, ETH_P_IPV4)
        else:
            eth = ETH.pack(dst_mac, src_mac, ETH_P_8021Q) + VLAN_TAG.pack(vlan_tci, ETH_P_IPV4)
        self.dscp = dscp
        self.udp_sport = udp_sport
        tos = (dscp << 2) | ecn
        self._pkey = pkey
        # The runs of bytes no packet changes, packed once.
        self._sent = struct.Struct(f"!{len(eth) + 2}s{_SENT_TAIL}")
        self._sent_head = eth + bytes((0x45, tos))
        self._sent_id_ttl = struct.pack("!HHBB", 0, IPV4_DONT_FRAGMENT, ttl, IPPROTO_UDP)
        self._sent_addrs = src_ip + dst_ip + struct.pack("!HH", udp_sport, ROCE_UDP_PORT)
        self._masked_id_ports = (struct.pack("!HHBBH", 0, IPV4_DONT_FRAGMENT, 0xFF, IPPROTO_UDP, 0xFFFF)
                                 + self._sent_addrs)
        # Checksum of every IPv4 word except total length, folded, so a packet adds one word and
        # folds once.
        fixed = IPV4.pack(0x45, tos, 0, 0, IPV4_DONT_FRAGMENT, ttl, IPPROTO_UDP, 0, src_ip, dst_ip)
        base = sum(IPV4_WORDS.unpack(fixed))
        base = (base & 0xFFFF) + (base >> 16)
        self._csum_base = (base & 0xFFFF) + (base >> 16)

    def frame(self, opcode: int, dest_qpn: int, psn: int, *, ackreq: bool = False,
              becn: bool = False, extension: bytes = b"",
              payload: bytes | memoryview = b"") -> bytes:
        """One RoCEv2 frame with correct lengths, IPv4 checksum, pad count and ICRC."""
        # The NIC's hottest function: one pack for the headers as sent and one for the ICRC's
        # masked view of them (TOS, TTL, checksums and the FECN/BECN byte all ones).
        size = len(payload)
        pad = -size & 3
        udp_bytes = _UDP_BTH_ICRC_BYTES + len(extension) + size + pad
        total = IPV4_HEADER_BYTES + udp_bytes
        # The one's complement sum of the fixed words (folded, ≤ 0xFFFF) and the total length
        # is below 0x20000: one fold.
        csum = self._csum_base + total
        csum = ~((csum & 0xFFFF) + (csum >> 16)) & 0xFFFF
        opcode_flags = (opcode << 8) | (pad << _BTH_PADCNT_SHIFT)
        psn_word = (_BTH_ACKREQ | psn & PSN_MASK) if ackreq else psn & PSN_MASK
        pkey = self._pkey
        crc = crc32(_MASKED_TAIL.pack(total, self._masked_id_ports, udp_bytes, 0xFFFF, opcode_flags, pkey,
                                      0xFF000000 | dest_qpn, psn_word), _MASKED_CRC)
        if extension:
            crc = crc32(extension, crc)
        crc = crc32(payload, crc)
        if pad:
            crc = crc32(_PAD[pad], crc)
        headers = self._sent.pack(self._sent_head, total, self._sent_id_ttl, csum, self._sent_addrs, udp_bytes, 0,
                                  opcode_flags, pkey, (_BTH_BECN | dest_qpn) if becn else dest_qpn, psn_word)
        frame = b"".join((headers, extension, payload, _PAD[pad], ICRC.pack(crc)))
        # Only an empty SEND_ONLY, untagged, is shorter than the Ethernet minimum.
        return frame if len(frame) >= MIN_FRAME_BYTES else padded(frame)


def reth(va: int, r_key: int, dma_length: int) -> bytes:
    return RETH.pack(va, r_key, dma_length)


def aeth(syndrome: int, msn: int) -> bytes:
    return AETH.pack((syndrome << 24) | (msn & 0xFFFFFF))


class RocePacket:
    """A parsed, ICRC-checked RoCEv2 packet. `payload` is a view into the frame, pad removed.

    RETH fields are set on RDMA_WRITE_FIRST/ONLY and RDMA_READ_REQUEST, AETH fields on ACKNOWLEDGE and
    RDMA_READ_RESPONSE_FIRST/LAST/ONLY (else 0).
    """

    __slots__ = ("src_ip", "dst_ip", "ecn", "dscp", "opcode", "becn", "dest_qpn", "ackreq",
                 "psn", "va", "r_key", "dma_length", "syndrome", "msn", "payload", "frame_bytes")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__
                           if name != "payload")
        return f"RocePacket({fields}, payload=<{len(self.payload)} bytes>)"


class PauseFrame:
    """A MAC Control pause: `quanta[p]` is the pause time of priority p, None if not enabled.

    An 802.3x global pause (opcode 0x0001) enables all eight priorities with one time.
    """

    __slots__ = ("quanta",)

    def __init__(self, quanta: tuple[int | None, ...]):
        self.quanta = quanta


def parse_frame(frame: bytes) -> RocePacket | PauseFrame:
    """Parse and validate one Ethernet frame (no FCS). Raises MalformedFrame or NotRoce."""
    n = len(frame)
    if n < _ETH_BYTES:
        raise MalformedFrame("truncated")
    ethertype = (frame[12] << 8) | frame[13]
    off = _ETH_BYTES
    if ethertype == ETH_P_8021Q:
        if n < off + _VLAN_TAG_BYTES:
            raise MalformedFrame("truncated")
        ethertype = (frame[16] << 8) | frame[17]
        off += _VLAN_TAG_BYTES
    if ethertype == ETH_P_MAC_CONTROL:
        return _parse_mac_control(frame, off)
    if ethertype != ETH_P_IPV4:
        raise NotRoce("not IPv4")
    if n < off + IPV4_HEADER_BYTES:
        raise MalformedFrame("truncated")
    # An IPv4 header without options (all RoCE sends) and room behind it: every header in one
    # read, checked below in the same order as when read one by one.
    at_once = frame[off] == 0x45 and n >= off + _IPV4_UDP_BTH_BYTES
    if at_once:
        (ver_ihl, tos, total, _ident, frag, _ttl, proto, _csum, src_ip, dst_ip, sport, dport, udp_bytes, _udp_csum,
         opcode, flags, pkey, qpn_word, psn_word) = IPV4_UDP_BTH.unpack_from(frame, off)
    else:
        ver_ihl, tos, total, _ident, frag, _ttl, proto, _csum, src_ip, dst_ip = IPV4.unpack_from(frame, off)
    ihl = (ver_ihl & 0x0F) * 4
    if ver_ihl >> 4 != 4 or ihl < IPV4_HEADER_BYTES or total < ihl:
        raise MalformedFrame("bad_ip_header")
    if proto != IPPROTO_UDP:
        raise NotRoce("not UDP")
    end = off + total
    if end > n or off + ihl + _UDP_BYTES > n:
        raise MalformedFrame("truncated")
    # A valid header's 16-bit words add up, folded, to 0xFFFF. Their sum is ≡ the header read as
    # one number (mod 0xFFFF, as 2^16 ≡ 1) and not 0 (version 4): the same test, no words unpacked.
    if _from_bytes(frame[off:off + ihl], "big") % 0xFFFF:
        raise MalformedFrame("bad_ip_checksum")
    udp = off + ihl
    if not at_once:
        sport, dport, udp_bytes, _udp_csum = UDP.unpack_from(frame, udp)
    if dport != ROCE_UDP_PORT:
        raise NotRoce("not UDP port 4791")
    if frag & _IPV4_FRAGMENT_BITS:
        raise MalformedFrame("ip_fragment")
    if udp_bytes != total - ihl:
        raise MalformedFrame("bad_udp_length")
    bth = udp + _UDP_BYTES
    if bth + BTH_BYTES + ICRC_BYTES > end:
        raise MalformedFrame("truncated")
    if not at_once:
        opcode, flags, pkey, qpn_word, psn_word = BTH.unpack_from(frame, bth)
    view = memoryview(frame)
    icrc_at = end - ICRC_BYTES
    if ihl == IPV4_HEADER_BYTES:  # the masked headers packed from what was read: no copy to patch
        masked = IPV4_UDP_BTH.pack(ver_ihl, 0xFF, total, _ident, frag, 0xFF, proto, 0xFFFF, src_ip, dst_ip,
                                   sport, dport, udp_bytes, 0xFFFF, opcode, flags, pkey, qpn_word | 0xFF000000, psn_word)
    else:
        masked = mask_variant_fields(view[off:bth + BTH_BYTES], ihl)
    if crc32(view[bth + BTH_BYTES:icrc_at], crc32(masked, LRH_CRC)) != ICRC.unpack_from(frame, icrc_at)[0]:
        raise MalformedFrame("bad_icrc")
    extension = _EXTENSION_BY_INT.get(opcode)
    if extension is None:
        raise MalformedFrame("bad_opcode")
    if flags & _BTH_TVER_MASK:
        raise MalformedFrame("bad_transport_version")
    if pkey & _PKEY_BASE_MASK != DEFAULT_PKEY & _PKEY_BASE_MASK:
        raise MalformedFrame("bad_pkey")  # only the default partition exists here
    data = bth + BTH_BYTES + extension
    pad = (flags >> _BTH_PADCNT_SHIFT) & 3
    if data + pad > icrc_at:
        raise MalformedFrame("truncated")
    pkt = RocePacket()
    pkt.src_ip = src_ip
    pkt.dst_ip = dst_ip
    pkt.ecn = tos & ECN_MASK
    pkt.dscp = tos >> 2
    pkt.opcode = opcode
    pkt.becn = (qpn_word & _BTH_BECN) != 0
    pkt.dest_qpn = qpn_word & QPN_MASK
    pkt.ackreq = (psn_word & _BTH_ACKREQ) != 0
    pkt.psn = psn_word & PSN_MASK
    pkt.va = pkt.r_key = pkt.dma_length = pkt.syndrome = pkt.msn = 0
    if opcode in _WITH_RETH:
        pkt.va, pkt.r_key, pkt.dma_length = RETH.unpack_from(frame, bth + BTH_BYTES)
    elif opcode in _WITH_AETH:
        word = AETH.unpack_from(frame, bth + BTH_BYTES)[0]
        pkt.syndrome = word >> 24
        pkt.msn = word & 0xFFFFFF
    pkt.payload = view[data:icrc_at - pad]
    pkt.frame_bytes = n
    return pkt


def _parse_mac_control(frame: bytes, off: int) -> PauseFrame:
    _, asked = mac_control(frame, off)
    if isinstance(asked, dict):  # PFC
        return PauseFrame(tuple(asked.get(p) for p in range(PRIORITIES)))
    if asked is None:
        raise MalformedFrame("unsupported_mac_control")
    return PauseFrame((asked,) * PRIORITIES)  # 802.3x: every priority, one time


def _ip_offset(frame: bytes | bytearray) -> int | None:
    """Where the IPv4 header starts, or None if the frame is not (tagged) IPv4."""
    if len(frame) < ETH.size + IPV4_HEADER_BYTES:
        return None
    ethertype = (frame[12] << 8) | frame[13]
    if ethertype == ETH_P_8021Q and len(frame) >= 18 + IPV4_HEADER_BYTES:
        return 18 if (frame[16] << 8) | frame[17] == ETH_P_IPV4 else None
    return ETH.size if ethertype == ETH_P_IPV4 else None


def mark_ce(frame: bytes) -> bytes | None:
    """The frame with IPv4 ECN set to CE and its checksum fixed (the ICRC skips TOS), or
    None if it is not ECN-capable IPv4 (what a switch must then drop or leave alone)."""
    off = _ip_offset(frame)
    if off is None or frame[off + 1] & ECN_MASK == 0:
        return None
    ihl = (frame[off] & 0x0F) * 4
    marked = bytearray(frame)
    marked[off + 1] |= ECN_CE
    struct.pack_into("!H", marked, off + 10, ipv4_checksum(marked[off:off + ihl]))
    return bytes(marked)
