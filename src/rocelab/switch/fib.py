"""The forwarding table as plain data, and longest-prefix match with ECMP over it.

switchd fills a `Fib` from the kernel's routing table (pyroute2) and hands a new one to
`Switch.set_fib` whenever the kernel's routes change; the core never reads the kernel.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from rocelab.ethernet import mac_bytes


@dataclass(frozen=True)
class NextHop:
    """Where a route sends a packet: out of `port` (a PortSpec name) to the neighbour `mac`."""

    port: str
    mac: str


@dataclass(frozen=True)
class Fib:
    """`routes`: prefix ("198.18.0.0/24") → next hops; more than one is an ECMP group.
    `local`: the switch's own addresses; packets to them are counted `to_self`."""

    routes: Mapping[str, Sequence[NextHop]]
    local: frozenset[str] = field(default_factory=frozenset)


def without_ports(fib: Fib, ports: frozenset[str]) -> Fib:
    """The FIB with no next hop out of `ports` (links that are down), and no route left without one."""
    if not ports:
        return fib
    routes = {prefix: [h for h in hops if h.port not in ports] for prefix, hops in fib.routes.items()}
    return Fib({prefix: hops for prefix, hops in routes.items() if hops}, fib.local)


# src, dst, protocol, source port, destination port: RoCE's entropy is the UDP source port.
_FIVE_TUPLE = struct.Struct("!IIBHH")


def ecmp_hash(src: int, dst: int, proto: int, sport: int, dport: int) -> int:
    """A fast deterministic hash of the 5-tuple, so one flow always takes one path."""
    return zlib.crc32(_FIVE_TUPLE.pack(src, dst, proto, sport, dport))


class RouteTable:
    """A compiled `Fib`: one dict per prefix length, searched longest first.

    Next hops come out as (port name, next-hop MAC bytes) pairs. Raises ValueError for a
    prefix or address that does not parse, or a next hop out of a port the switch lacks.
    """

    def __init__(self, fib: Fib, port_names: Iterable[str]):
        ports = set(port_names)
        by_length: dict[int, dict[int, tuple[tuple[str, bytes], ...]]] = {}
        for prefix, next_hops in fib.routes.items():
            net = ipaddress.IPv4Network(prefix, strict=False)
            hops = []
            for hop in next_hops:
                if hop.port not in ports:
                    raise ValueError(f"route {prefix} leaves by {hop.port!r}, which is not "
                                     f"a port of this switch ({', '.join(sorted(ports))})")
                hops.append((hop.port, mac_bytes(hop.mac)))
            by_length.setdefault(net.prefixlen, {})[int(net.network_address)] = tuple(hops)
        self._tables = [(_mask(length), by_length[length])
                        for length in sorted(by_length, reverse=True)]
        self._local = frozenset(int(ipaddress.IPv4Address(a)) for a in fib.local)

    def routes(self) -> list[tuple[str, tuple[tuple[str, bytes], ...]]]:
        """Every (prefix, next hops), as compiled."""
        return [(f"{ipaddress.IPv4Address(network)}/{_length(mask)}", hops)
                for mask, table in self._tables for network, hops in table.items()]

    def is_local(self, dst: int) -> bool:
        return dst in self._local

    def lookup(self, dst: int) -> tuple[tuple[str, bytes], ...]:
        """The next hops of the longest prefix holding `dst`; empty when none does."""
        for mask, table in self._tables:
            hops = table.get(dst & mask)
            if hops is not None:
                return hops
        return ()


def _length(mask: int) -> int:
    return bin(mask).count("1")


def _mask(prefix_length: int) -> int:
    return (0xFFFFFFFF << (32 - prefix_length)) & 0xFFFFFFFF


# SONiC's route pipeline programs about 10,500 routes a second into the ASIC, orchagent being its
# slowest stage (sonic-net/SONiC doc/orchagent_zmq/Improve_route_performance_with_zmq.md, 2024:
# zebra/fpmsyncd 17K routes/s, orchagent 10.5K before that change). A route change reaches the
# forwarding table that much later than the kernel holds it.
SONIC_FIB_ROUTES_PER_S = 10_500.0


def changed_routes(old: Fib, new: Fib) -> int:
    """How many routes a switch must program to go from `old` to `new`: added, removed, or with
    other next hops."""
    prefixes = set(old.routes) | set(new.routes)
    return sum(1 for p in prefixes if set(old.routes.get(p, ())) != set(new.routes.get(p, ())))


@dataclass
class FibProgramming:
    """The ASIC's FIB programming, in emulated time: a new kernel FIB reaches the forwarding
    table after its changed routes' programming time (production seconds, dilated by `tdf`),
    queued behind the changes still being programmed, in order. Time is the caller's clock."""

    routes_per_s: float
    tdf: float
    programmed: Fib  # what the forwarding table holds
    pending: list[tuple[float, Fib]] = field(default_factory=list)  # (due, FIB), due ascending

    def submit(self, fib: Fib, now: float) -> float:
        """Queue a FIB the kernel now holds; when it will be programmed."""
        last_due, last = self.pending[-1] if self.pending else (now, self.programmed)
        due = max(now, last_due) + changed_routes(last, fib) / self.routes_per_s * self.tdf
        self.pending.append((due, fib))
        return due

    def due(self, now: float) -> Fib | None:
        """The newest FIB programmed by `now`, or None when none came due since the last call."""
        ready = None
        while self.pending and self.pending[0][0] <= now:
            ready = self.pending.pop(0)[1]
        if ready is not None:
            self.programmed = ready
        return ready


class SignalLoss:
    """Which ports' links the ASIC holds down: one shut on this switch at once (it turned its
    own laser off), one whose far end went dark (the kernel's carrier lost, the port still
    admin up) once the loss of signal is detected, `detect_s` later (wall seconds: the lab's
    production time, dilated). Until then the ASIC hashes flows onto the dark port as before,
    and what it sends there is lost. Time is the caller's clock."""

    def __init__(self, detect_s: float):
        self.detect_s = detect_s
        self.since: dict[str, float] = {}  # dark port → when it went dark
        self.shut: frozenset[str] = frozenset()

    def update(self, down: frozenset[str], shut: frozenset[str], now: float) -> None:
        """The ports whose link is down now (`shut`: of those, the ones shut here)."""
        self.shut = shut
        self.since = {port: self.since.get(port, now) for port in down - shut}

    def held(self, now: float) -> frozenset[str]:
        """The ports the ASIC holds down at `now`: in no route."""
        return self.shut | {port for port, t in self.since.items() if now >= t + self.detect_s}

    def dark(self, now: float) -> frozenset[str]:
        """The ports whose far end went dark and the ASIC has not seen it yet."""
        return frozenset(self.since) - self.held(now)

    def next_due(self, now: float) -> float | None:
        """When the next dark port is seen down, if any is still to be."""
        due = [t + self.detect_s for t in self.since.values() if t + self.detect_s > now]
        return min(due) if due else None
