"""PFC buffer arithmetic: the headroom a lossless PG needs, and when its XOFF fires.

Headroom (REFERENCE.md, "PFC headroom and the SONiC buffer model"). Once a switch decides to
pause its peer, bytes keep arriving until the peer has stopped sending; the lossless PG's
xoff must hold all of them:

    headroom = response + cable + frames + pfc_frame                (rounded up to a byte)

    response  = quanta × 512 bit / 8       the peer's PFC response time; IEEE 802.3 allows
                                           394 quanta at 100G and 905 at 400G
    cable     = 2 × L / 1.98e8 m/s × R / 8 bytes on a cable of L metres at R bit/s, both
                                           ways: the PFC frame going out, data still coming in
    frames    = 2 × (F + 20)               one maximum RoCE frame in flight each side (the one
                                           the switch is sending when it wants to send the PFC
                                           frame, the one the peer is sending when it arrives),
                                           each with 8 B preamble/SFD and a 12 B gap
    pfc_frame = 64 + 20                    the PFC frame itself on the wire

    F = RoCE MTU + 78                      Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16
                                           + ICRC 4 + FCS 4 around the RDMA payload

Worked example, profiles/README.md's roce-lossless (100 Gb/s, 40 m, RoCE MTU 4096):
25,216 (394 × 64) + 5,051 (2 × 40 / 1.98e8 × 100e9 / 8 = 5,050.5) + 8,388 (2 × 4,194)
+ 84 = 38,739 B; the profile's xoff of 45,056 B leaves 6,317 B for MAC/PHY latency, which
this formula does not count. SONiC's `buffer_headroom_mellanox.lua` is one vendor's full
formula: it adds that latency and rounds to the ASIC's buffer cells.

Peer response time by port speed: IEEE 802.3 gives 394 quanta at 100 Gb/s and 905 at
400 Gb/s. rocelab uses 394 up to 100 Gb/s (more than slower ports need) and 905 above that
up to 400 Gb/s (more than 200 Gb/s needs); faster ports need `response_quanta` given.

The frames term counts RoCE frames, not the link's MTU: only RoCE traffic lands in the
lossless PG. A jumbo lossy frame ahead of the switch's PFC frame delays it by up to
(link MTU − F) / R more; profiles/README.md's margin covers that too.

XOFF trigger (SONiC's dynamic threshold, as `rocelab.switch.mmu` admits bytes). A lossless
PG sends XOFF when its occupancy passes its reserved `size` plus

    T = 2^dynamic_th × (pool size − pool bytes in use)     dynamic_th profiles
    T = static_th                                          static_th profiles

With n lossless PGs of one pool congested together, each at its threshold, the pool holds
n·T, so T = α·S / (1 + n·α) (α = 2^dynamic_th, S = pool size). n = 0 is the threshold on an
empty buffer, α·S (profiles/README.md's 384 KiB); profiles/README.md's 4:1 incast is n = 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocelab.qos.model import BufferProfile, PortQos, QosProfile
from rocelab.units import PROPAGATION_M_PER_S

BITS_PER_BYTE = 8
QUANTUM_BITS = 512  # one PFC pause quantum, in bit times at the port's speed

# Response time of the peer in quanta, by the fastest port speed it applies to.
IEEE_RESPONSE_QUANTA = ((100e9, 394), (400e9, 905))

# Headers around a RoCEv2 RDMA WRITE FIRST/ONLY payload: the largest RoCE packet per MTU.
ETHERNET_HEADER_BYTES = 14
ROCE_IP_OVERHEAD_BYTES = 20 + 8 + 12 + 16 + 4  # IPv4, UDP, BTH, RETH, ICRC
FCS_BYTES = 4
WIRE_OVERHEAD_BYTES = 8 + 12  # preamble + SFD, inter-frame gap
PFC_FRAME_BYTES = 64


def roce_frame_bytes(roce_mtu_bytes: int) -> int:
    """The largest Ethernet frame (with FCS) of a RoCE connection with this MTU."""
    return ETHERNET_HEADER_BYTES + ROCE_IP_OVERHEAD_BYTES + roce_mtu_bytes + FCS_BYTES


def response_quanta_for(rate_bps: float) -> int:
    """IEEE 802.3's peer response time for a port speed (module docstring). ValueError above
    400 Gb/s, where rocelab knows no value."""
    for fastest_bps, quanta in IEEE_RESPONSE_QUANTA:
        if rate_bps <= fastest_bps:
            return quanta
    raise ValueError(f"no IEEE 802.3 PFC response time known for {rate_bps / 1e9:g} Gb/s "
                     "(rocelab knows 394 quanta up to 100G, 905 up to 400G)")


@dataclass(frozen=True)
class Headroom:
    """The terms of the headroom formula, in bytes, and their sum rounded up."""

    rate_bps: float
    cable_m: float
    roce_mtu_bytes: int
    response_quanta: int
    response_bytes: int
    cable_bytes: float
    frames_bytes: int
    pfc_frame_bytes: int

    @property
    def total_bytes(self) -> int:
        return math.ceil(self.response_bytes + self.cable_bytes + self.frames_bytes
                         + self.pfc_frame_bytes)

    def explain(self) -> str:
        return (f"{self.rate_bps / 1e9:g} Gb/s, {self.cable_m:g} m, RoCE MTU "
                f"{self.roce_mtu_bytes}: {self.response_quanta} quanta {self.response_bytes:,}"
                f" + cable {math.ceil(self.cable_bytes):,} + 2 frames {self.frames_bytes:,}"
                f" + PFC frame {self.pfc_frame_bytes}")


def headroom(rate_bps: float, cable_m: float, mtu_bytes: int,
             response_quanta: int | None = None) -> Headroom:
    """The headroom terms for one port (module docstring); `mtu_bytes` is the RoCE MTU."""
    quanta = response_quanta_for(rate_bps) if response_quanta is None else response_quanta
    return Headroom(
        rate_bps=rate_bps,
        cable_m=cable_m,
        roce_mtu_bytes=mtu_bytes,
        response_quanta=quanta,
        response_bytes=quanta * QUANTUM_BITS // BITS_PER_BYTE,
        cable_bytes=2 * cable_m / PROPAGATION_M_PER_S * rate_bps / BITS_PER_BYTE,
        frames_bytes=2 * (roce_frame_bytes(mtu_bytes) + WIRE_OVERHEAD_BYTES),
        pfc_frame_bytes=PFC_FRAME_BYTES + WIRE_OVERHEAD_BYTES,
    )


def required_headroom_bytes(rate_bps: float, cable_m: float, mtu_bytes: int,
                            response_quanta: int | None = None) -> int:
    """The xoff a lossless PG needs on a port of this speed and cable length, for RoCE
    packets of `mtu_bytes` payload (the RoCE MTU). ValueError above 400 Gb/s unless
    `response_quanta` is given."""
    return headroom(rate_bps, cable_m, mtu_bytes, response_quanta).total_bytes


def xoff_trigger_bytes(profile: BufferProfile, pool_size_bytes: int,
                       congested_pgs: int = 0) -> int:
    """PG occupancy past which XOFF is sent, with `congested_pgs` lossless PGs of the pool
    (this one included) at their thresholds at once; 0: on an empty buffer."""
    if profile.dynamic_th is not None:
        alpha = 2.0**profile.dynamic_th
        shared = alpha * pool_size_bytes / (1 + congested_pgs * alpha)
    else:
        # A static threshold does not shrink, but n PGs cannot share more than the pool.
        shared = profile.static_th_bytes or 0
        if congested_pgs:
            shared = min(shared, pool_size_bytes / congested_pgs)
    return profile.size_bytes + math.floor(shared)


def pg_trigger_bytes(profile: QosProfile, qos: PortQos, pg: int, congested_pgs: int = 0) -> int:
    """xoff_trigger_bytes of PG `pg` of a port of `profile`, in the pool its buffer profile names."""
    buffer = qos.pgs[pg]
    return xoff_trigger_bytes(buffer, profile.pools[buffer.pool].size_bytes, congested_pgs)
