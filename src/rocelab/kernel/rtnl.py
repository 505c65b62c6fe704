"""rtnetlink dumps and change events read with `struct`, for the one place they are hot:
switchd reading its namespace's FIB whenever a route, neighbour, link or address changes.

pyroute2 parses every message into objects over its asyncio core: its dumps of a leaf's links,
neighbours, addresses and routes took 19-50 ms of CPU here, this module's reading with the FIB
built 0.7-2.8 ms (benchmarks/bench_fib_read.py), and switchd forwarded nothing meanwhile. This
module asks the kernel the same dumps and reads only the fields a FIB needs (rtnetlink(7),
linux/rtnetlink.h, linux/if_link.h, linux/neighbour.h). Everything else keeps pyroute2.
"""

from __future__ import annotations

import errno
import itertools
import socket
import struct
from dataclasses import dataclass
from typing import Iterator

NETLINK_ROUTE = 0
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE, RTM_GETNEIGH = 18, 22, 26, 30
IFLA_MTU, IFLA_IFNAME, IFLA_OPERSTATE = 4, 3, 16
IFF_UP = 0x1
IF_OPER_UP = 6
IFA_ADDRESS = 1
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_MULTIPATH, RTA_TABLE = 1, 4, 5, 9, 15
NDA_DST, NDA_LLADDR = 1, 2
# Multicast groups (the RTMGRP_* bits): links, neighbours, IPv4 addresses, IPv4 routes.
GROUPS = 0x1 | 0x4 | 0x10 | 0x40

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
RTATTR = struct.Struct("=HH")  # len, type
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
NDMSG = struct.Struct("=BxxxiHBB")  # family, ifindex, state, flags, type
RTNEXTHOP = struct.Struct("=HBBi")  # len, flags, hops, ifindex
RECV_BYTES = 1 << 20
LINK_ATTRS = frozenset({IFLA_IFNAME, IFLA_OPERSTATE, IFLA_MTU})
NEIGH_ATTRS = frozenset({NDA_DST, NDA_LLADDR})
ADDR_ATTRS = frozenset({IFA_ADDRESS})
ROUTE_ATTRS = frozenset({RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_MULTIPATH, RTA_TABLE})
LEG_ATTRS = frozenset({RTA_GATEWAY})


def attrs(data: bytes, offset: int, end: int, wanted: frozenset[int]) -> dict[int, bytes]:
    """The wanted attributes (type → payload) from offset to end, each padded to 4 bytes."""
    found = {}
    unpack = RTATTR.unpack_from
    while offset + 4 <= end:
        length, kind = unpack(data, offset)
        if length < 4:
            break
        kind &= 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
        if kind in wanted:
            found[kind] = data[offset + 4:offset + length]
        offset += (length + 3) & ~3
    return found


def _mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    up: bool  # operational state UP
    admin_up: bool  # IFF_UP: not shut
    mtu: int


@dataclass(frozen=True)
class Route:
    dst: str  # "a.b.c.d/len"
    table: int
    type: int  # RTN_*
    protocol: int  # RTPROT_*: who installed it (2 the kernel, for a connected subnet; 186 zebra's BGP)
    hops: tuple[tuple[int, str | None], ...]  # (ifindex, gateway or None), one per leg


class Rtnl:
    """A NETLINK_ROUTE socket for dumps, in the namespace it was opened in."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.seq = itertools.count(1)

    def close(self) -> None:
        self.sock.close()

    def dump(self, kind: int, header: bytes) -> Iterator[tuple[bytes, int, int]]:
        """Each message of a dump, as (buffer, offset of its payload, end)."""
        seq = next(self.seq)
        self.sock.send(NLMSGHDR.pack(NLMSGHDR.size + len(header), kind, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + header)
        while True:
            data = self.sock.recv(RECV_BYTES)
            offset = 0
            while offset + NLMSGHDR.size <= len(data):
                length, kind_, _, seq_, _ = NLMSGHDR.unpack_from(data, offset)
                if length < NLMSGHDR.size:
                    raise OSError(errno.EPROTO, "rtnetlink: a message shorter than its header")
                end, start, offset = offset + length, offset + NLMSGHDR.size, offset + ((length + 3) & ~3)
                if seq_ != seq:
                    continue
                if kind_ == NLMSG_DONE:
                    return
                if kind_ == NLMSG_ERROR:
                    code = struct.unpack_from("=i", data, start)[0]
                    if code:
                        raise OSError(-code, f"rtnetlink dump {kind}: {errno.errorcode.get(-code, code)}")
                    continue
                yield data, start, end

    def links(self) -> list[Link]:
        found = []
        for data, start, end in self.dump(RTM_GETLINK, IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
            _, _, index, flags, _ = IFINFOMSG.unpack_from(data, start)
            a = attrs(data, start + IFINFOMSG.size, end, LINK_ATTRS)
            name = a.get(IFLA_IFNAME, b"").split(b"\0", 1)[0].decode()
            mtu = struct.unpack("=I", a[IFLA_MTU])[0] if IFLA_MTU in a else 0
            found.append(Link(index, name, a.get(IFLA_OPERSTATE, b"\0")[0] == IF_OPER_UP, bool(flags & IFF_UP), mtu))
        return found

    def neighbours(self) -> list[tuple[int, str, str]]:
        """(ifindex, IPv4 address, MAC) of every IPv4 neighbour that has a MAC."""
        found = []
        for data, start, end in self.dump(RTM_GETNEIGH, NDMSG.pack(socket.AF_INET, 0, 0, 0, 0)):
            ifindex = NDMSG.unpack_from(data, start)[1]
            a = attrs(data, start + NDMSG.size, end, NEIGH_ATTRS)
            if NDA_LLADDR in a and NDA_DST in a:
                found.append((ifindex, socket.inet_ntoa(a[NDA_DST]), _mac(a[NDA_LLADDR])))
        return found

    def addresses(self) -> list[tuple[int, str]]:
        """(ifindex, IPv4 address) of every IPv4 address."""
        found = []
        for data, start, end in self.dump(RTM_GETADDR, IFADDRMSG.pack(socket.AF_INET, 0, 0, 0, 0)):
            index = IFADDRMSG.unpack_from(data, start)[4]
            a = attrs(data, start + IFADDRMSG.size, end, ADDR_ATTRS)
            if IFA_ADDRESS in a:
                found.append((index, socket.inet_ntoa(a[IFA_ADDRESS])))
        return found

    def routes(self) -> list[Route]:
        """Every IPv4 route of every table; a multipath route's legs each with its own
        interface and gateway."""
        found = []
        for data, start, end in self.dump(RTM_GETROUTE, RTMSG.pack(socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)):
            _, dst_len, _, _, table, protocol, _, kind, _ = RTMSG.unpack_from(data, start)
            a = attrs(data, start + RTMSG.size, end, ROUTE_ATTRS)
            if RTA_TABLE in a:
                table = struct.unpack("=I", a[RTA_TABLE])[0]
            dst = f"{socket.inet_ntoa(a[RTA_DST]) if RTA_DST in a else '0.0.0.0'}/{dst_len}"
            if RTA_MULTIPATH in a:
                hops, raw, offset = [], a[RTA_MULTIPATH], 0
                while offset + RTNEXTHOP.size <= len(raw):
                    length, _, _, ifindex = RTNEXTHOP.unpack_from(raw, offset)
                    if length < RTNEXTHOP.size:
                        break
                    gateway = attrs(raw, offset + RTNEXTHOP.size, offset + length, LEG_ATTRS).get(RTA_GATEWAY)
                    hops.append((ifindex, socket.inet_ntoa(gateway) if gateway else None))
                    offset += (length + 3) & ~3
            else:
                oif = struct.unpack("=i", a[RTA_OIF])[0] if RTA_OIF in a else 0
                hops = [(oif, socket.inet_ntoa(a[RTA_GATEWAY]) if RTA_GATEWAY in a else None)]
            found.append(Route(dst, table, kind, protocol, tuple(hops)))
        return found


class Events:
    """A netlink socket that becomes readable when links, neighbours, IPv4 addresses or routes
    change. What changed is not read: a reader dumps the state again."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.bind((0, GROUPS))
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def drain(self) -> None:
        """Read every pending event. A full socket (ENOBUFS: events were lost) is a change too."""
        while True:
            try:
                self.sock.recv(RECV_BYTES)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise

    def close(self) -> None:
        self.sock.close()
