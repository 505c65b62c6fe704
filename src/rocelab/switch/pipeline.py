"""The emulated switch ASIC's packet pipeline, pure: no sockets, no sleeps, no threads.

    ingress → classify → route → admit → mark → [egress queue] → schedule + shape → link

switchd (the shell) owns the sockets and the clock. It hands every received frame to
`Switch.receive(port, frame, now)`, sends whatever `Switch.poll(now)` returns, and sleeps
until `Switch.next_event(now)`. Time is float seconds from the caller; randomness comes
from the injected `random.Random`, so a run under a simulated clock is reproducible.

Forwarding decisions (classification, route, ECMP member) are cached per ingress port and
flow (TOS, protocol, addresses, L4 ports); `set_fib` empties the caches. Under a load-balancing
mode other than hash (rocelab.switch.balance) the cache holds the flow's group, and the group
picks the member per frame.

A frame's `now` is when the shell read it; `arrival_s`, when the kernel received it (the
receive ring's timestamp). They differ when the shell ran late, and only PFC's XOFF looks at
the difference: a lossless PG's XOFF is due at the arrival of the frame that filled the PG past
its threshold and leaves at that frame's `now`. A frame the peer sent after an XOFF sent when
due would have stopped it (it arrives later than the due time plus the pause's reach: the cable
both ways, the frame the peer was sending, the PFC frame), and before the one that left late
could stop it, exists only because the emulation ran late: when the headroom is full it is held
past the headroom (the PG's `held_packets`, `held_bytes`), not dropped. A PG whose headroom is
too small for the link still drops what was legitimately in flight, and a peer that ignores the
pause still drops once the late XOFF has had time to reach it.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from rocelab.qos.model import PRIORITIES, QosProfile, port_qos
from rocelab.registry import Registry
from rocelab.switch.counters import (
    BAD_IPV4_CHECKSUM, BAD_IPV4_HEADER, FLOW_CONTROL_DISABLED, IMPAIRMENT_LOSS, MAC_CONTROL_UNSUPPORTED, NO_ROUTE,
    HEADROOM_EXCEEDED, NOT_FOR_US, NOT_IPV4, OVERSIZED, PFCWD_DROP, TO_SELF, TRUNCATED, TTL_EXPIRED, WRED_DROP,
    TAIL_DROP, HOLDERS_PER_PORT, count_drop,
)
from rocelab.switch import counters
from rocelab.switch.balance import Balance, EcmpGroup, Member
from rocelab.switch.fib import Fib, RouteTable, ecmp_hash
from rocelab.ethernet import (ECN_CE, ECN_MASK, ETH_P_8021Q, ETH_P_IPV4, ETH_P_MAC_CONTROL, IPPROTO_TCP, IPPROTO_UDP,
                              MIN_FRAME_BYTES, PauseTimers, mac_bytes, mac_control, pause_duration_s)
from rocelab.switch.frames import (
    ETH_HEADER_BYTES, IPV4, IPV4_FRAGMENT_MASK, IPV4_HEADER_BYTES, IPV4_L4, L4_PORTS, L4_PORTS_BYTES, MAX_FRAME_BYTES, PFC_XOFF_QUANTA, TTL_DECREMENT_DELTA, VLAN_TAG_BYTES, build_pfc,
)
from rocelab.switch.mmu import DEFAULT_LOSSY_PROFILE, PgBuffer, Pool, QueueBuffer
from rocelab.switch.pfc import STORM_DETECTED, STORM_RESTORED, QueueWatchdog
from rocelab.switch.scheduler import PortScheduler, scheduler_registry
from rocelab.switch.shaper import DEFAULT_BURST_BYTES, Link, TokenBucket
from rocelab.switch.wred import DROP, MARK, Wred

INF = float("inf")
TRAP_QUEUE_MAX = 64
# A cache this large is flushed rather than grown: a scan of random flows must not eat memory.
FLOW_CACHE_MAX = 1 << 16
# The shortest untagged frame the fast path takes: Ethernet + a 20-byte IPv4 header.
_MIN_IPV4_FRAME = ETH_HEADER_BYTES + IPV4_HEADER_BYTES
_IP = ETH_HEADER_BYTES  # offset of the IPv4 header in an untagged frame
_IP_TOS, _IP_TTL, _IP_CHECKSUM = _IP + 1, _IP + 8, _IP + 10
# What an XOFF's reach adds to the cable both ways: the longest frame the peer may be sending
# when the pause reaches it, and the PFC frame itself.
PAUSE_REACH_BYTES = MAX_FRAME_BYTES + MIN_FRAME_BYTES


@dataclass(frozen=True)
class PortSpec:
    """A front-panel port as the shell sees it. `rate_bps` is the emulated (dilated) rate;
    delay, jitter and loss impair the link out of this port. `global_flow_control_rx`:
    honour 802.3x PAUSE (SAI_PORT_ATTR_GLOBAL_FLOW_CONTROL_MODE rx; SAI's default and
    SONiC's only setting is disabled)."""

    name: str
    mac: str
    rate_bps: float
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss_pct: float = 0.0
    burst_bytes: int = DEFAULT_BURST_BYTES
    global_flow_control_rx: bool = False


class _Pg(PgBuffer):
    """An ingress PG: the MMU's accounting plus what PFC generation needs."""

    __slots__ = ("index", "port", "lossless", "priorities", "xoff_frame", "xon_frame",
                 "refresh_at_s", "xoff_due_s", "xoff_left_s", "rx_packets", "rx_bytes", "held_packets",
                 "held_bytes", "drops")

    def __init__(self, index, port, profile, pool, priorities):
        super().__init__(profile, pool)
        self.index = index
        self.port = port
        self.lossless = profile.lossless and bool(priorities)
        self.priorities = priorities  # PFC priorities this PG pauses: its TCs in pfc_enable
        self.xoff_frame = build_pfc(port.mac, {p: PFC_XOFF_QUANTA for p in priorities})
        self.xon_frame = build_pfc(port.mac, {p: 0 for p in priorities})
        self.refresh_at_s = INF
        # the last XOFF that paused the peer: when it was due (its cause's arrival), when it left
        self.xoff_due_s = self.xoff_left_s = 0.0
        self.rx_packets = self.rx_bytes = 0
        self.held_packets = self.held_bytes = 0  # past the headroom, owed to a late XOFF (module docstring)
        self.drops: dict[str, list[int]] = {}


class _Queue(QueueBuffer):
    """An egress queue: buffer accounting, its packets, scheduling and pause state."""

    __slots__ = ("index", "port", "items", "paused_until_s", "priorities", "scheduler_type",
                 "weight", "quantum_bytes", "deficit_bytes", "discipline", "wred", "watchdog",
                 "dropping", "tx_packets", "tx_bytes", "ecn_marked_packets", "ecn_marked_bytes",
                 "drops")

    def __init__(self, index, port, queue_qos, buffer_profile, pool, watchdog):
        super().__init__(buffer_profile, pool)
        scheduler = queue_qos and queue_qos.scheduler
        self.index = index
        self.port = port
        # each entry: (frame to send, size_bytes, ingress _Pg to release on dequeue)
        self.items: deque[tuple[bytearray, int, _Pg]] = deque()
        self.paused_until_s = 0.0
        self.priorities: list[int] = []  # PFC priorities that pause this queue
        self.scheduler_type = scheduler.type if scheduler else "DWRR"
        self.weight = scheduler.weight if scheduler else 1
        self.quantum_bytes = self.deficit_bytes = 0
        self.discipline = None  # set by the port's PortScheduler
        self.wred = Wred(queue_qos.wred) if queue_qos and queue_qos.wred else None
        self.watchdog = watchdog
        self.dropping = False  # stormed with action drop
        self.tx_packets = self.tx_bytes = 0
        self.ecn_marked_packets = self.ecn_marked_bytes = 0
        self.drops: dict[str, list[int]] = {}


class _Port:
    """A port both ways: its ingress PGs and PFC receiver, its egress queues and link.
    PGs and queues without a buffer profile use the MMU's built-in lossy default."""

    __slots__ = ("name", "mac", "rate_bps", "qos", "pfc_enable", "pgs", "queues", "scheduler",
                 "bucket", "link", "backlog_packets", "next_tx_s", "flows", "pause",
                 "global_flow_control_rx", "link_paused_until_s", "pfc_refresh_s", "pfc_rx_frames",
                 "pfc_tx_frames", "pause_rx_frames", "rx_packets", "rx_bytes", "drops")

    def __init__(self, spec: PortSpec, profile: QosProfile, pools: dict[str, Pool],
                 schedulers: Registry, rng: random.Random):
        self.name = spec.name
        self.mac = mac_bytes(spec.mac)
        self.rate_bps = spec.rate_bps
        self.qos = qos = port_qos(profile, spec.name)
        if qos.dynamic_pgs:
            raise ValueError(f"{spec.name} ({qos.port}): PG {', '.join(map(str, sorted(qos.dynamic_pgs)))} has profile "
                             "NULL, which SONiC's buffer manager computes at run time; give the emulated switch "
                             "the profile it computed (`show buffer profile` on the switch)")
        self.pfc_enable = frozenset(qos.pfc_enable)
        self.bucket = TokenBucket(spec.rate_bps, spec.burst_bytes)
        self.link = Link(spec.delay_s, spec.jitter_s, spec.loss_pct, rng)
        self.pgs = []
        for pg in range(PRIORITIES):
            buffer_profile = qos.pgs.get(pg, DEFAULT_LOSSY_PROFILE)
            priorities = tuple(tc for tc in range(PRIORITIES)
                               if qos.tc_to_pg[tc] == pg and tc in self.pfc_enable)
            self.pgs.append(_Pg(pg, self, buffer_profile, _pool(pools, buffer_profile),
                                priorities if buffer_profile.lossless else ()))
        self.queues = []
        for q in range(PRIORITIES):
            queue_qos = qos.queues.get(q)
            buffer_profile = (queue_qos and queue_qos.buffer) or DEFAULT_LOSSY_PROFILE
            watchdog = QueueWatchdog(qos.pfc_wd) if qos.pfc_wd else None
            self.queues.append(_Queue(q, self, queue_qos, buffer_profile,
                                      _pool(pools, buffer_profile), watchdog))
        for priority in sorted(self.pfc_enable):
            self.queues[qos.pfc_priority_to_queue[priority]].priorities.append(priority)
        self.scheduler = PortScheduler(self.queues, schedulers)
        self.backlog_packets = 0
        self.next_tx_s = INF  # earliest time the port may have something to send
        self.flows: dict[tuple, tuple] = {}
        self.pause = PauseTimers()
        self.global_flow_control_rx = spec.global_flow_control_rx
        self.link_paused_until_s = 0.0  # an honoured 802.3x PAUSE holds every queue until then
        # Refresh our XOFF at half the pause it asks for, so the peer's never runs out.
        self.pfc_refresh_s = pause_duration_s(PFC_XOFF_QUANTA, spec.rate_bps) / 2
        self.pfc_rx_frames = [0] * PRIORITIES
        self.pfc_tx_frames = [0] * PRIORITIES
        self.pause_rx_frames = 0  # SAI_PORT_STAT_PAUSE_RX_PKTS: honoured or not
        self.rx_packets = self.rx_bytes = 0
        self.drops: dict[str, list[int]] = {}


class _Steer:
    """A flow through an adaptive ECMP group (a `Balance` mode other than hash): its hash and,
    per member, where its frames go (egress port, queue, next-hop and egress MACs)."""

    __slots__ = ("group", "flow_hash", "tc", "choices", "queues")

    def __init__(self, group: EcmpGroup, flow_hash: int, tc: int, macs: list[bytes]):
        self.group = group
        self.flow_hash = flow_hash
        self.tc = tc
        self.choices = [(m.port, m.port.queues[m.port.qos.tc_to_queue[tc]], mac)
                        for m, mac in zip(group.members, macs)]
        self.queues = [queue for _port, queue, _mac in self.choices]

    def pick(self, size: int, now: float) -> tuple:
        index = self.group.pick(self.flow_hash, self.queues, now)
        member = self.group.members[index]
        member.frames += 1
        member.bytes += size
        return self.choices[index]


def _pool(pools: dict[str, Pool], profile) -> Pool | None:
    if not profile.pool:
        return None
    try:
        return pools[profile.pool]
    except KeyError:
        raise ValueError(f"buffer profile {profile.name!r} names pool {profile.pool!r}, "
                         f"which the profile lacks ({', '.join(sorted(pools))})") from None


class Switch:
    """One emulated switch. See the module docstring for how a shell drives it."""

    implementation = "python"  # rocelab.switch.fastpath.FastSwitch is the C one

    def __init__(self, name: str, ports: Sequence[PortSpec], profile: QosProfile, fib: Fib,
                 rng: random.Random, schedulers: Registry | None = None, balance: Balance | None = None):
        names = [p.name for p in ports]
        if len(set(names)) != len(names):
            raise ValueError(f"switch {name}: port names repeat: {names}")
        self.name = name
        self._rng = rng
        self._pools = {pool_name: Pool(pool) for pool_name, pool in profile.pools.items()}
        schedulers = schedulers or scheduler_registry()
        self._ports = [_Port(spec, profile, self._pools, schedulers, rng) for spec in ports]
        self._port_by_name = {p.name: p for p in self._ports}
        # TTL-expired packets trapped to the CPU, as an ASIC does, so the shell can answer
        # with ICMP time exceeded (traceroute); bounded like a CoPP-policed trap queue.
        self.trapped: deque[tuple[str, bytes]] = deque()
        self._xoff_pgs: set[_Pg] = set()  # PGs that have paused their peer
        self._watched: set[_Queue] = set()  # queues whose PFC watchdog has a timer running
        self._next_timer_s = INF
        self._pfc_sent = False  # during poll: a PFC frame was queued on some link
        self.balance = balance or Balance()  # already dilated (rocelab.switch.balance.dilate)
        self._groups: dict[tuple, EcmpGroup] = {}  # next hops → group, under a mode other than hash
        self.set_fib(fib)

    def set_fib(self, fib: Fib) -> None:
        """Replace the forwarding table (switchd follows the kernel's route changes). A group
        whose next hops stay keeps its flowset table and counters."""
        self._routes = RouteTable(fib, self._port_by_name)
        for port in self._ports:
            port.flows.clear()
        if self.balance.mode != "hash":
            prefixes: dict[tuple, list[str]] = {}
            for prefix, hops in self._routes.routes():
                if len(hops) > 1:
                    prefixes.setdefault(hops, []).append(prefix)
            groups = {}
            for hops, names in prefixes.items():
                group = groups[hops] = self._groups.get(hops) or EcmpGroup(
                    [Member(self._port_by_name[p], p) for p, _mac in hops], self.balance,
                    f"{self.name}:{','.join(p for p, _mac in hops)}")
                group.prefixes = names
            self._groups = groups

    def set_impairment(self, port_name: str, delay_s: float, jitter_s: float, loss_pct: float,
                       rate_bps: float | None = None) -> None:
        """Change the link impairments out of a port while the switch runs (a lab step), and
        its rate where given (a degraded link: a lane down, a renegotiated speed)."""
        port = self._port_by_name[port_name]
        port.link.impair(delay_s, jitter_s, loss_pct)
        if rate_bps is not None and rate_bps != port.rate_bps:
            port.rate_bps = rate_bps
            port.bucket.burst_s *= 8 / rate_bps / port.bucket.s_per_byte
            port.bucket.s_per_byte = 8 / rate_bps

    # ---- ingress ---------------------------------------------------------------------

    # The shells pass receive's arrival_s: each frame's kernel receive time (rocelab.kernel.ring).
    takes_arrival_time = True

    def receive(self, port_name: str, frame: bytes | bytearray | memoryview,
                now: float, arrival_s: float | None = None) -> None:
        """Take one frame received on `port_name` (the frame is copied if queued, so the
        caller may reuse its buffer) at `now`, having arrived at `arrival_s` (≤ now; `now` when
        not given: module docstring). Never raises on the frame's content: whatever is not
        forwarded is counted under a drop reason. An unknown port is a KeyError."""
        port = self._port_by_name[port_name]
        size = len(frame)
        port.rx_packets += 1
        port.rx_bytes += size
        if arrival_s is None:
            arrival_s = now
        if _MIN_IPV4_FRAME <= size <= MAX_FRAME_BYTES and frame[12] == 8 and frame[13] == 0:
            self._ipv4(port, frame, size, now, arrival_s)
        else:
            self._not_plain_ipv4(port, frame, size, now, arrival_s)

    def _not_plain_ipv4(self, port: _Port, frame, size: int, now: float, arrival_s: float) -> None:
        if size > MAX_FRAME_BYTES:
            return count_drop(port.drops, OVERSIZED, size)
        if size < ETH_HEADER_BYTES:
            return count_drop(port.drops, TRUNCATED, size)
        ethertype = frame[12] << 8 | frame[13]
        if ethertype == ETH_P_MAC_CONTROL:
            return self._receive_mac_control(port, frame, size, now)
        if ethertype == ETH_P_8021Q:
            if size < ETH_HEADER_BYTES + VLAN_TAG_BYTES:
                return count_drop(port.drops, TRUNCATED, size)
            if frame[16] << 8 | frame[17] != ETH_P_IPV4:
                return count_drop(port.drops, NOT_IPV4, size)
            # A routed port sends untagged: drop the tag here, once, off the fast path.
            untagged = bytes(frame[:12]) + bytes(frame[16:])
            if len(untagged) < _MIN_IPV4_FRAME:
                return count_drop(port.drops, TRUNCATED, size)
            return self._ipv4(port, untagged, len(untagged), now, arrival_s)
        if ethertype == ETH_P_IPV4:
            return count_drop(port.drops, TRUNCATED, size)
        count_drop(port.drops, NOT_IPV4, size)

    def _ipv4(self, port: _Port, frame, size: int, now: float, arrival_s: float) -> None:
        """Validate, classify, route, admit, mark and enqueue an untagged IPv4 frame."""
        if frame[0:6] != port.mac and not frame[0] & 1:
            return count_drop(port.drops, NOT_FOR_US, size)
        if frame[_IP] == 0x45 and size >= _MIN_IPV4_FRAME + L4_PORTS_BYTES:
            ihl = IPV4_HEADER_BYTES
            tos, total_len, frag, ttl, proto, src, dst, sport, dport = \
                IPV4_L4.unpack_from(frame, _IP)
        else:
            fields = _unusual_ipv4(frame, size)
            if isinstance(fields, str):
                return count_drop(port.drops, fields, size)
            ihl, tos, total_len, frag, ttl, proto, src, dst, sport, dport = fields
        if total_len > size - ETH_HEADER_BYTES:
            return count_drop(port.drops, TRUNCATED, size)
        if total_len < ihl:
            return count_drop(port.drops, BAD_IPV4_HEADER, size)
        # 2^16 ≡ 1 (mod 0xFFFF): the header read as one integer is congruent to the sum of
        # its 16-bit words, and a valid header's one's complement sum is 0xFFFF ≡ 0.
        if int.from_bytes(frame[_IP:_IP + ihl], "big") % 0xFFFF:
            return count_drop(port.drops, BAD_IPV4_CHECKSUM, size)
        if (proto != IPPROTO_UDP and proto != IPPROTO_TCP) or frag & IPV4_FRAGMENT_MASK \
                or total_len < ihl + L4_PORTS_BYTES:
            sport = dport = 0  # no L4 header to hash on (or a fragment: keep pieces together)

        key = (tos, proto, src, dst, sport, dport)
        entry = port.flows.get(key)
        if entry is None:
            entry = self._resolve(port, key)
        egress, queue, pg, macs, lossless = entry
        if egress is None:
            return count_drop(port.drops, queue, size)  # `queue` holds the reason
        if ttl <= 1:
            if len(self.trapped) < TRAP_QUEUE_MAX:
                self.trapped.append((port.name, bytes(frame[:size])))
            return count_drop(port.drops, TTL_EXPIRED, size)
        if egress.__class__ is _Steer:
            egress, queue, macs = egress.pick(size, now)
        if queue.dropping:
            return count_drop(queue.drops, PFCWD_DROP, size)

        # mark: WRED on the queue's depth as this packet arrives
        wred = queue.wred
        verdict = 0
        if wred is not None and queue.depth_bytes >= wred.min_bytes:
            verdict = wred.decide(queue.depth_bytes, tos & ECN_MASK, self._rng)
            if verdict == DROP:
                return count_drop(queue.drops, WRED_DROP, size)
        # admit: egress queue limit (lossy only), then the ingress PG
        if not lossless and not queue.fits(size):
            return count_drop(queue.drops, TAIL_DROP, size)
        reason = pg.admit(size, lossless)
        if reason is not None:
            if reason != HEADROOM_EXCEEDED or not _owed_to_late_xoff(pg, arrival_s):
                return count_drop(pg.drops, reason, size)
            pg.hold(size)
            pg.held_packets += 1
            pg.held_bytes += size
        queue.add(size)
        pg.rx_packets += 1
        pg.rx_bytes += size

        out = bytearray(frame)
        out[0:12] = macs
        out[_IP_TTL] = ttl - 1
        delta = TTL_DECREMENT_DELTA
        if verdict == MARK:
            out[_IP_TOS] = tos | ECN_CE
            delta += ECN_CE - (tos & ECN_MASK)
            queue.ecn_marked_packets += 1
            queue.ecn_marked_bytes += size
        # RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), where ~m + m' sums to `delta`
        x = (~(frame[_IP_CHECKSUM] << 8 | frame[_IP_CHECKSUM + 1]) & 0xFFFF) + delta
        x = (x & 0xFFFF) + (x >> 16)
        x = ~((x & 0xFFFF) + (x >> 16)) & 0xFFFF
        out[_IP_CHECKSUM] = x >> 8
        out[_IP_CHECKSUM + 1] = x & 0xFF
        if not queue.items:
            queue.discipline.activate(queue)
        queue.items.append((out, size, pg))
        egress.backlog_packets += 1

        if lossless and pg.should_pause():
            self._send_xoff(pg, now, arrival_s)
        if egress.next_tx_s > now:  # the port may have been idle or blocked: wake it
            start = egress.bucket.busy_until_s
            if start < now:
                start = now
            if start < egress.next_tx_s:
                egress.next_tx_s = start

    def _resolve(self, port: _Port, key: tuple) -> tuple:
        """Classify and route a flow the cache has not seen; cache the answer."""
        if len(port.flows) >= FLOW_CACHE_MAX:
            port.flows.clear()
        entry = port.flows[key] = self._route(port, key)
        return entry

    def _route(self, port: _Port, key: tuple) -> tuple:
        """(egress port, queue, ingress PG, next-hop and egress MACs, lossless) for a flow
        (TOS, protocol, addresses, L4 ports) entering `port`; through an adaptive ECMP group,
        (its _Steer, None, ingress PG, b"", lossless), the member picked per frame; (None, drop
        reason, None, b"", False) when it is not forwarded."""
        tos, proto, src, dst, sport, dport = key
        if self._routes.is_local(dst):
            return (None, TO_SELF, None, b"", False)
        hops = self._routes.lookup(dst)
        if not hops:
            return (None, NO_ROUTE, None, b"", False)
        flow_hash = ecmp_hash(src, dst, proto, sport, dport)
        qos = port.qos
        tc = qos.dscp_to_tc[tos >> 2]
        pg = port.pgs[qos.tc_to_pg[tc]]
        group = self._groups.get(hops)
        if group is not None:
            macs = [mac + self._port_by_name[p].mac for p, mac in hops]
            return (_Steer(group, flow_hash, tc, macs), None, pg, b"", pg.lossless and tc in port.pfc_enable)
        hop_port, hop_mac = hops[flow_hash % len(hops)]
        egress = self._port_by_name[hop_port]
        queue = egress.queues[egress.qos.tc_to_queue[tc]]
        return (egress, queue, pg, hop_mac + egress.mac, pg.lossless and tc in port.pfc_enable)

    # ---- PFC -------------------------------------------------------------------------

    def _receive_mac_control(self, port: _Port, frame, size: int, now: float) -> None:
        """A MAC Control frame is the MAC's own, never forwarded: PFC or 802.3x PAUSE is
        counted and honoured where the port is set to; any other opcode is dropped."""
        _, asked = mac_control(frame, ETH_HEADER_BYTES)
        if isinstance(asked, dict):  # PFC
            return self._receive_pfc(port, asked, now)
        if asked is None:
            return count_drop(port.drops, MAC_CONTROL_UNSUPPORTED, size)
        pause_quanta = asked
        port.pause_rx_frames += 1
        if not port.global_flow_control_rx:
            return count_drop(port.drops, FLOW_CONTROL_DISABLED, size)
        # 802.3x holds the whole transmitter, every queue alike, until the time runs out
        # or an XON (pause_time 0) arrives.
        port.link_paused_until_s = now + pause_duration_s(pause_quanta, port.rate_bps)
        if port.backlog_packets:
            port.next_tx_s = now  # _transmit waits out the pause, or resumes after an XON

    def _receive_pfc(self, port: _Port, quanta: dict[int, int], now: float) -> None:
        """Honour a peer's PFC frame on this port's egress queues. Frames for priorities
        outside the port's pfc_enable are counted, not honoured."""
        watch = False
        for priority, q in quanta.items():
            port.pfc_rx_frames[priority] += 1
            if priority not in port.pfc_enable:
                continue
            queue = port.queues[port.qos.pfc_priority_to_queue[priority]]
            watchdog = queue.watchdog
            if watchdog is not None:
                if q:
                    watchdog.on_pause(now, queue.paused_until_s > now)
                else:
                    watchdog.on_resume()
                self._watched.add(queue)
                watch = True
                if watchdog.ignores_pause:
                    continue
            port.pause.pause(priority, now, pause_duration_s(q, port.rate_bps))
            queue.paused_until_s = max(port.pause.until_s[p] for p in queue.priorities)
        if port.backlog_packets:
            port.next_tx_s = now  # an XON may have unblocked a queue: look again
        if watch:
            self._reschedule_timers()

    def _send_pfc(self, port: _Port, frame: bytes, priorities: tuple[int, ...],
                  now: float) -> None:
        for p in priorities:
            port.pfc_tx_frames[p] += 1
        self._pfc_sent = True
        if not port.link.send(frame, now):
            count_drop(port.drops, IMPAIRMENT_LOSS, len(frame))

    def _send_xoff(self, pg: _Pg, now: float, due_s: float) -> None:
        """Pause the PG's peer: due when `due_s`'s frame arrived, leaving at `now`."""
        pg.xoff_active = True
        pg.xoff_due_s, pg.xoff_left_s = due_s, now
        pg.refresh_at_s = now + pg.port.pfc_refresh_s
        self._xoff_pgs.add(pg)
        self._send_pfc(pg.port, pg.xoff_frame, pg.priorities, now)
        self._reschedule_timers()

    def _send_xon(self, pg: _Pg, now: float) -> None:
        pg.xoff_active = False
        pg.refresh_at_s = INF
        self._xoff_pgs.discard(pg)
        self._send_pfc(pg.port, pg.xon_frame, pg.priorities, now)
        self._reschedule_timers()

    def _reschedule_timers(self) -> None:
        t = INF
        for pg in self._xoff_pgs:
            if pg.refresh_at_s < t:
                t = pg.refresh_at_s
        for queue in self._watched:
            due = queue.watchdog.due_s()
            if due is not None and due < t:
                t = due
        self._next_timer_s = t

    def _run_timers(self, now: float) -> None:
        """Refresh XOFFs about to run out (or resume, if the PG has drained meanwhile) and
        step the PFC watchdogs."""
        for pg in [pg for pg in self._xoff_pgs if pg.refresh_at_s <= now]:
            if pg.should_resume():
                self._send_xon(pg, now)
            else:
                pg.refresh_at_s = now + pg.port.pfc_refresh_s
                self._send_pfc(pg.port, pg.xoff_frame, pg.priorities, now)
        for queue in list(self._watched):
            watchdog = queue.watchdog
            due = watchdog.due_s()
            if due is None:
                self._watched.discard(queue)
            elif due <= now:
                transition = watchdog.evaluate(now, queue.paused_until_s)
                if transition == STORM_DETECTED and watchdog.ignores_pause:
                    self._ignore_pause(queue, now)
                elif transition == STORM_RESTORED:
                    queue.dropping = False
                if watchdog.due_s() is None:
                    self._watched.discard(queue)
        self._reschedule_timers()

    def _ignore_pause(self, queue: _Queue, now: float) -> None:
        """A stormed queue (action drop or forward) stops honouring its pause; with drop
        it also discards what it holds and whatever arrives for it."""
        port = queue.port
        for p in queue.priorities:
            port.pause.pause(p, now, 0.0)
        queue.paused_until_s = now
        if queue.watchdog.drops:
            queue.dropping = True
            while queue.items:
                _frame, size, pg = queue.items.popleft()
                port.backlog_packets -= 1
                self._release(queue, size, pg, now)
                count_drop(queue.drops, PFCWD_DROP, size)
        if port.backlog_packets:
            port.next_tx_s = now

    # ---- egress ----------------------------------------------------------------------

    def _release(self, queue: _Queue, size: int, pg: _Pg, now: float) -> None:
        """A packet has left `queue`: free its buffer, and resume its PG's peer if due."""
        queue.release(size)
        pg.release(size)
        if pg.xoff_active and pg.should_resume():
            self._send_xon(pg, now)

    def poll(self, now: float) -> list[tuple[str, bytes | bytearray]]:
        """Frames whose time has come, as (egress port name, frame), in send order: data
        paced to each port's rate and delayed by its link, and PFC frames."""
        out: list[tuple[str, bytes | bytearray]] = []
        self._pfc_sent = False
        if self._next_timer_s <= now:
            self._run_timers(now)
        for port in self._ports:
            link = port.link
            if link.frames and link.frames[0][0] <= now:  # PFC first: it preempts data
                link.deliver(now, port.name, out)
            if port.next_tx_s <= now:
                self._transmit(port, now, out)
                if link.frames and link.frames[0][0] <= now:
                    link.deliver(now, port.name, out)
        if self._pfc_sent:  # an XON freed by a dequeue on a port already visited
            for port in self._ports:
                link = port.link
                if link.frames and link.frames[0][0] <= now:
                    link.deliver(now, port.name, out)
        return out

    def _transmit(self, port: _Port, now: float, out: list) -> None:
        """Send from the port's queues while its token bucket allows."""
        if port.link_paused_until_s > now:  # 802.3x PAUSE: the whole port waits
            port.next_tx_s = port.link_paused_until_s
            return
        bucket = port.bucket
        start = bucket.start_s(now, port.next_tx_s)
        s_per_byte = bucket.s_per_byte
        pick = port.scheduler.pick
        link = port.link
        impaired = link.impaired
        name = port.name
        release = self._release
        while start <= now and port.backlog_packets:
            queue = pick(now)
            if queue is None:
                break
            frame, size, pg = queue.items.popleft()
            port.backlog_packets -= 1
            release(queue, size, pg, now)
            queue.tx_packets += 1
            queue.tx_bytes += size
            start += size * s_per_byte
            if not impaired:
                out.append((name, frame))
            elif not link.send(frame, now):
                count_drop(port.drops, IMPAIRMENT_LOSS, size)
        bucket.busy_until_s = start
        if not port.backlog_packets:
            port.next_tx_s = INF
        elif start > now:
            port.next_tx_s = start
        else:  # every queue with packets is paused: wake when the first pause runs out
            port.next_tx_s = min(q.paused_until_s for q in port.queues if q.items)

    def next_event(self, now: float) -> float | None:
        """The earliest time `poll` has something to do (≥ now), or None if nothing is
        pending at all. The shell may sleep until then unless a frame arrives first."""
        t = self._next_timer_s
        for port in self._ports:
            if port.next_tx_s < t:
                t = port.next_tx_s
            frames = port.link.frames
            if frames and frames[0][0] < t:
                t = frames[0][0]
        if t == INF:
            return None
        return t if t > now else now

    # ---- counters --------------------------------------------------------------------

    def counter_values(self, now: float) -> tuple[list, list]:
        """Every counter packed (rocelab.switch.counters.pack), read from the objects."""
        values: list = []
        drops: list = []
        for index, port in enumerate(self._ports):
            values += [port.rx_packets, port.rx_bytes, sum(q.tx_packets for q in port.queues),
                       sum(q.tx_bytes for q in port.queues), port.pause_rx_frames, *port.pfc_rx_frames,
                       *port.pfc_tx_frames, *(port.pause.paused_time_s(p, now) for p in range(PRIORITIES))]
            for q in port.queues:
                wd = q.watchdog
                values += [q.tx_packets, q.tx_bytes, q.ecn_marked_packets, q.ecn_marked_bytes, q.depth_bytes,
                           q.watermark_bytes, q.shared_watermark_bytes, int(wd is not None),
                           int(bool(wd and wd.stormed)), wd.storms_detected if wd else 0,
                           wd.storms_restored if wd else 0]
            for pg in port.pgs:
                values += [pg.rx_packets, pg.rx_bytes, int(pg.lossless), int(pg.xoff_active), pg.reserved_used_bytes,
                           pg.shared_used_bytes, pg.headroom_used_bytes, pg.shared_watermark_bytes,
                           pg.headroom_watermark_bytes, pg.held_packets, pg.held_bytes]
            for offset, holder in enumerate([port, *port.queues, *port.pgs]):
                drops += [[index * HOLDERS_PER_PORT + offset, reason, n, b] for reason, (n, b) in holder.drops.items()]
        return values, drops

    def packed_counters(self, now: float) -> dict:
        return counters.pack(self.name, now, [p.name for p in self._ports], *self.counter_values(now))

    def counters(self, now: float) -> dict:
        """Every counter as plain JSON-able data (layout: `rocelab.switch` docstring)."""
        return counters.expand(self.packed_counters(now))

    def group_counters(self) -> dict:
        """Per adaptive ECMP group (named by its members, "eth5,eth6"): its mode, prefixes,
        frames and bytes steered to each member, flowlet re-assignments and flowset collisions.
        Empty under hash, where the ports' tx counters tell the members' shares. Kept beside
        the packed counters, whose layout the C core produces."""
        return {",".join(m.name for m in g.members): g.counters() for g in self._groups.values()}

    def clear_counters(self, now: float) -> None:
        """Zero every counter and restart watermarks from the current occupancy."""
        for port in self._ports:
            port.rx_packets = port.rx_bytes = 0
            port.drops.clear()
            port.pfc_rx_frames = [0] * PRIORITIES
            port.pfc_tx_frames = [0] * PRIORITIES
            port.pause_rx_frames = 0
            port.pause.clear(now)
            for q in port.queues:
                q.tx_packets = q.tx_bytes = q.ecn_marked_packets = q.ecn_marked_bytes = 0
                q.drops.clear()
                q.reset_watermarks()
                if q.watchdog is not None:
                    q.watchdog.storms_detected = q.watchdog.storms_restored = 0
            for pg in port.pgs:
                pg.rx_packets = pg.rx_bytes = pg.held_packets = pg.held_bytes = 0
                pg.drops.clear()
                pg.reset_watermarks()
        for group in self._groups.values():
            group.clear_counters()


def _owed_to_late_xoff(pg: _Pg, arrival_s: float) -> bool:
    """Did this frame, refused for headroom, reach a paused PG only because its XOFF left late?
    (module docstring)"""
    if not pg.xoff_active:
        return False
    port = pg.port
    reach_s = 2 * (port.link.delay_s + port.link.jitter_s) + PAUSE_REACH_BYTES * 8 / port.rate_bps
    return pg.xoff_due_s + reach_s < arrival_s < pg.xoff_left_s + reach_s


def _unusual_ipv4(frame, size: int) -> tuple | str:
    """Parse an IPv4 header the fast path does not take (options, or too short for the
    L4 ports): its fields, or the drop reason."""
    vihl = frame[_IP]
    ihl = (vihl & 0x0F) * 4
    if vihl >> 4 != 4 or ihl < IPV4_HEADER_BYTES:
        return BAD_IPV4_HEADER
    if size < _IP + ihl:
        return TRUNCATED
    tos, total_len, frag, ttl, proto, src, dst = IPV4.unpack_from(frame, _IP)
    if size >= _IP + ihl + L4_PORTS_BYTES:
        sport, dport = L4_PORTS.unpack_from(frame, _IP + ihl)
    else:
        sport = dport = 0
    return ihl, tos, total_len, frag, ttl, proto, src, dst, sport, dport


