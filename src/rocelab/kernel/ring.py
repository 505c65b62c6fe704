"""A packet socket's receive ring (PACKET_MMAP, TPACKET_V2): the kernel writes every frame
into a slot of a buffer the agent has mapped, with its receive time, so reading a frame costs
no system call, and its timestamp no ioctl.

TPACKET_V2 rather than V3: V3 hands frames over a block at a time, when the block fills or
its retire timer (≥ 1 ms) fires, which would hold a lone frame back for a millisecond; V2
hands over every frame as it lands, and select() says readable as soon as one has.

A slot is the agent's until it sets the slot's status back to TP_STATUS_KERNEL, which `read`
does as soon as the frame's receiver returns: the frame is a view into the ring, and whoever
keeps it copies it. Slots hold a 9216-byte jumbo frame with its Ethernet header and a VLAN
tag; a longer frame would arrive cut to its slot (tp_snaplen < tp_len), and the core would
count it as truncated.
"""

from __future__ import annotations

import mmap
import socket
import struct

from rocelab.kernel.netns import SOL_PACKET

# linux/if_packet.h
PACKET_RX_RING = 5
PACKET_VERSION = 10
TPACKET_V2 = 1
TP_STATUS_USER = 1  # the slot holds a frame for the agent (low bit of tp_status)
TPACKET_ALIGNMENT = 16
# struct tpacket2_hdr: tp_status, tp_len, tp_snaplen, tp_mac, tp_net, tp_sec, tp_nsec (then VLAN fields);
# read per frame: its length and where it starts; per batch: the receive time
TPACKET2_FRAME = struct.Struct("=8xIH")
TPACKET2_TIME = struct.Struct("=16xII")
TPACKET_REQ = struct.Struct("=IIII")  # block size, block count, frame size, frame count
# Where a SOCK_RAW frame starts in its slot: TPACKET_ALIGN(TPACKET2_HDRLEN) + 16 (af_packet.c).
FRAME_OFFSET = 80
JUMBO_FRAME_BYTES = 9216 + 14 + 4  # a 9216-byte MTU, its Ethernet header and one VLAN tag
SLOT_BYTES = -(-(FRAME_OFFSET + JUMBO_FRAME_BYTES) // TPACKET_ALIGNMENT) * TPACKET_ALIGNMENT
BLOCK_BYTES = 1 << 16  # 7 slots: a block holds whole slots and is a whole number of pages
SLOTS_PER_BLOCK = BLOCK_BYTES // SLOT_BYTES
RING_BLOCKS = 32  # 2 MiB and 224 frames a port: RSS counts every page of it from the start
_KERNEL = bytes(4)  # tp_status = TP_STATUS_KERNEL: the slot is the kernel's again


class RxRing:
    """The receive ring of one packet socket, read in order from `head`. Set up before the
    socket is bound to a protocol, or frames that arrive first wait outside the ring."""

    def __init__(self, sock: socket.socket, blocks: int = RING_BLOCKS):
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        sock.setsockopt(SOL_PACKET, PACKET_RX_RING,
                        TPACKET_REQ.pack(BLOCK_BYTES, blocks, SLOT_BYTES, blocks * SLOTS_PER_BLOCK))
        self.map = mmap.mmap(sock.fileno(), BLOCK_BYTES * blocks, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.view = memoryview(self.map)
        self.slots = [block * BLOCK_BYTES + i * SLOT_BYTES for block in range(blocks) for i in range(SLOTS_PER_BLOCK)]
        self.head = 0  # index of the next slot to read
        self.geometry = (BLOCK_BYTES, SLOTS_PER_BLOCK, SLOT_BYTES, len(self.slots))

    def read(self, port: str, receive, now: float, max_frames: int, max_bytes: int,
             wall: float | None = None) -> tuple[int, float, bool]:
        """Hand frames to receive(port, frame, now), oldest first, giving each slot back once
        it returns, until `max_frames` frames or at least `max_bytes` bytes are read or the
        ring is empty: (frames read, the first one's receive time in seconds since the epoch
        or 0.0 when none, whether the ring is empty). With `wall` (the epoch time at `now`),
        receive also takes each frame's arrival: `now` less how long it waited in the ring."""
        view, slots, head = self.view, self.slots, self.head
        offset = slots[head]
        if not view[offset] & TP_STATUS_USER:
            return 0, 0.0, True
        sec, nsec = TPACKET2_TIME.unpack_from(view, offset)
        first_s = sec + nsec * 1e-9
        frame_at = TPACKET2_FRAME.unpack_from
        n_slots = len(slots)
        n = nbytes = 0
        while True:
            snaplen, mac = frame_at(view, offset)
            start = offset + mac
            if wall is not None:
                sec, nsec = TPACKET2_TIME.unpack_from(view, offset)
                waited = wall - (sec + nsec * 1e-9)
                receive(port, view[start:start + snaplen], now, now - waited if waited > 0 else now)
            else:
                receive(port, view[start:start + snaplen], now)
            view[offset:offset + 4] = _KERNEL
            n += 1
            nbytes += snaplen
            head += 1
            if head == n_slots:
                head = 0
            offset = slots[head]
            if not view[offset] & TP_STATUS_USER:
                empty = True
                break
            if n == max_frames or nbytes >= max_bytes:
                empty = False
                break
        self.head = head
        return n, first_s, empty
