"""RoCEv2 invariant CRC (ICRC), as Linux `rxe_icrc.c` and REFERENCE.md define it.

CRC-32 (zlib's) over: 8 bytes of 0xFF standing in for the InfiniBand LRH, the IPv4
header with TOS, TTL and header checksum set to all ones, the UDP header with its
checksum all ones, the BTH with its FECN/BECN/reserved byte all ones, then everything
after the BTH up to the ICRC. The fields masked are the ones a switch may rewrite
(ECN bits, TTL, FECN/BECN), so the ICRC survives forwarding and CE marking.
The result travels little-endian (ICRC.pack).
"""

from __future__ import annotations

import struct
import zlib

ICRC = struct.Struct("<I")
ICRC_BYTES = 4

LRH_CRC = zlib.crc32(b"\xff" * 8)  # the CRC of the LRH's stand-in, where every ICRC starts

# Offsets of the variant fields inside IPv4 (20 B, no options) + UDP (8 B) + BTH (12 B).
_IP_TOS, _IP_TTL, _IP_CHECKSUM = 1, 8, 10
_UDP_CHECKSUM = 6
_BTH_FECN_BYTE = 4


def mask_variant_fields(ip_udp_bth: bytes | memoryview, ip_header_bytes: int) -> bytearray:
    """A copy of IPv4 + UDP + BTH headers with the fields the ICRC skips set to ones."""
    masked = bytearray(ip_udp_bth)
    masked[_IP_TOS] = 0xFF
    masked[_IP_TTL] = 0xFF
    masked[_IP_CHECKSUM] = masked[_IP_CHECKSUM + 1] = 0xFF
    udp = ip_header_bytes
    masked[udp + _UDP_CHECKSUM] = masked[udp + _UDP_CHECKSUM + 1] = 0xFF
    masked[udp + 8 + _BTH_FECN_BYTE] = 0xFF
    return masked
