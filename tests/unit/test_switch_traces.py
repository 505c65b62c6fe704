"""Generated traces: the C fast path sends and counts exactly as the Python pipeline, its reference.

hypothesis draws a switch (2–6 ports at mixed rates, impaired links, 802.3x honoured or not), QoS
profiles (every DSCP mapped to any of the 16 TCs, TC → PG/queue and PFC priority → queue maps,
lossless and lossy PGs under static or dynamic thresholds in a pool with or without shared
headroom, STRICT/DWRR/WRR queues, WRED/ECN in every mode, the PFC watchdog under each action),
forwarding tables (per-host routes, a default route or none, ECMP groups of 2–16 next hops, a
more specific route inside a group, the switch's own addresses), the groups' load balancing
(hash; flowlet and per-packet adaptive with any inactivity interval, flowset table size, sampling
interval and quality weights; spray under any of a few seeds) and a timed sequence of events:
frames (valid IPv4 with any DSCP, ECN and TTL, IP options, fragments, VLAN tags; PFC and 802.3x
frames with any class-enable vector and quanta; other MAC Control; corrupted and truncated frames;
random bytes), alone or in bursts, control calls (clear, impair, fib, reload) and bare polls.
Each trace runs through both pipelines from the same seed, polled either exactly when
next_event asks or late, on a coarse clock (a busy switchd: frames are read late, with their
arrival times, so a late XOFF holds frames past the headroom); every frame out (time, port,
bytes, in order), every trapped frame and the counters (the adaptive groups' too) before each
control call and at the end must be equal.

The CI profile (tests/unit/conftest.py) runs 2,000 examples; HYPOTHESIS_PROFILE=dev runs 200.

How it was checked that a changed C decision fails it (generation only, two seeds each, 2,000
examples at most, the generator as committed then): WRED's `depth <= q->wred_min` in fastpath_core.c's
wred_decide changed to `<` failed at the 62nd and the 126th example (a frame's departure time);
PFC honoured on a priority outside pfc_enable (receive_pfc's check dropped) at the 11th in both
(paused_time_s); a frame held past the headroom whenever it came before the late XOFF could reach
its sender (the lower end of the hold's window in owed_to_late_xoff dropped, 2026-11-28) failed
in both of two runs (a frame's departure time). With an earlier version of these strategies,
STRICT queues served lowest index first failed at the 1,456th example in one run and not at all in the other: two busy STRICT
queues on one port at once are rare in these traces.
Adaptive ECMP (2026-12-07, one run each): a flowlet ending at exactly its inactivity interval
(`<` as `<=` in group_pick) failed after 106 s; ties always to the first member, a collision not
counted and the port's waiting line left out of packet mode's grades failed at once; the load
EWMA's weight 0.5 for 0.25 failed after 200 s. A load sample taken only after more than the
sampling interval (`>=` as `>`) passed all 2,000: the exact equality of two float times is rare.
Spray's member one past the one drawn failed at the first example.
"""

from __future__ import annotations

import math
import random
import struct
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocelab.ethernet import (ETH_P_8021Q, ETH_P_IPV4, ETH_P_MAC_CONTROL, IPPROTO_TCP, IPPROTO_UDP,
                              MAC_CONTROL_PAUSE, internet_checksum, mac_bytes)
from rocelab.qos.model import (DSCP_VALUES, PRIORITIES, TRAFFIC_CLASSES, BufferPool, BufferProfile, PfcWatchdog,
                               PortQos, QosProfile, QueueQos, Scheduler, WredProfile)
from rocelab.qos.ports import to_sonic
from rocelab.switch import Fib, NextHop, PortSpec, Switch, counters, fastpath
from rocelab.switch.balance import Balance
from rocelab.switch.frames import build_pfc
from test_switch_support import host_ip, host_mac, switch_mac

needs_c = pytest.mark.skipif(fastpath.FastSwitch is None, reason="the C fast path is not built here (no C compiler)")

INGRESS_POOL, EGRESS_POOL = "ingress_lossless_pool", "egress_lossy_pool"
RATES_BPS = (10e6, 40e6, 100e6)  # 10G, 40G, 100G at TDF 1000
ECN_MODES = ("ecn_none", "ecn_green", "ecn_yellow", "ecn_all", "ecn_green_red")
UNROUTED = "192.0.2.9"


@dataclass(frozen=True)
class Trace:
    """A switch, what it may be reloaded with, and what happens to it.

    events: (time µs, op, args), in time order; op is "frame" (port, frame, copies, gap µs),
    "clear", "impair" (port, delay_s, jitter_s, loss_pct), "fib" (index into fibs), "reload"
    (index into profiles) or "poll". tick_s: None polls when next_event says; else the clock
    only moves in steps of tick_s, so frames are taken and sent late."""

    specs: tuple[PortSpec, ...]
    profiles: tuple[QosProfile, ...]
    fibs: tuple[Fib, ...]
    events: tuple[tuple[int, str, tuple], ...]
    tick_s: float | None = None
    seed: int = 0
    tail_s: float = 0.05
    balance: Balance = Balance()


# ---- frames ---------------------------------------------------------------------------------

def ipv4_frame(dst_mac: str, src_mac: str, src: str, dst: str, *, size: int = 128, tos: int = 0, ttl: int = 64,
               proto: int = IPPROTO_UDP, sport: int = 49152, dport: int = 4791, frag: int = 0x4000,
               options: bytes = b"", vlan: int | None = None) -> bytes:
    """An Ethernet/IPv4 frame of at least `size` bytes with a valid header checksum, the L4
    ports after the header; `vlan` is a PCP|VID tag."""
    ihl = 20 + len(options)
    head = 14 + ihl + 8
    total = max(size, head) - 14
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl // 4, tos, total, 0, frag, ttl, proto, 0,
                         bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))) + options
    header = header[:10] + struct.pack("!H", internet_checksum(header)) + header[12:]
    l4 = struct.pack("!HHHH", sport, dport, total - ihl, 0)
    ether = mac_bytes(dst_mac) + mac_bytes(src_mac)
    if vlan is not None:
        ether += struct.pack("!HH", ETH_P_8021Q, vlan)
    return ether + struct.pack("!H", ETH_P_IPV4) + header + l4 + bytes(total - ihl - 8)


def mac_control_frame(src_mac: str, opcode: int, body: bytes) -> bytes:
    frame = bytes.fromhex("0180c2000001") + mac_bytes(src_mac) + struct.pack("!HH", ETH_P_MAC_CONTROL, opcode) + body
    return frame + bytes(max(0, 60 - len(frame)))


# Strategies are built once, here: one built inside a draw is validated again at every draw,
# which cost more than running the trace through both pipelines.
PORT = st.integers(0, 5)  # an index, taken modulo the switch's port count
GROUP = st.integers(0, 2)
BOOL = st.booleans()
BYTE = st.integers(0, 255)
U16 = st.integers(0, 0xFFFF)
PRIORITY = st.integers(0, PRIORITIES - 1)
PRIORITY_SETS = {n: st.frozensets(PRIORITY, max_size=n) for n in (2, 3)}
PFC_ENABLE = st.frozensets(PRIORITY, min_size=1, max_size=3)  # lossy-only traffic comes from the other TCs
DESTINATION = st.sampled_from(("host", "host", "ecmp", "ecmp", "local", "unrouted"))
DST_MAC = st.sampled_from(("port",) * 10 + ("ff:ff:ff:ff:ff:ff", "02:99:00:00:00:01"))
SIZE = st.sampled_from((64, 128, 512, 1024, 1500, 4096, 9000, 9300)) | st.integers(40, 9300)
DSCP = st.integers(0, DSCP_VALUES - 1)
ECN = st.integers(0, 3)
TTL = st.sampled_from((64,) * 6 + (2, 1, 0))
PROTO = st.sampled_from((IPPROTO_UDP, IPPROTO_UDP, IPPROTO_TCP, 1, 47))
DPORT = st.sampled_from((4791, 4791, 80))
FRAG = st.sampled_from((0x4000, 0x4000, 0, 0x2000, 0x0010))  # DF, none, MF, an offset
OPTIONS = st.sampled_from((b"", b"", b"", b"\x01\x01\x01\x01", b"\x94\x04\x00\x00" * 10))
VLAN = st.none() | st.none() | U16  # PCP|DEI|VID
FRAME_KIND = st.sampled_from(("routed",) * 6 + ("ip",) * 3 + ("pfc",) * 2 + ("corrupted",) * 2
                             + ("pause", "mac_control", "bytes"))
ROUTED = st.sampled_from(("host", "ecmp"))
QUANTA = st.sampled_from((0, 0xFFFF, 1)) | U16
PFC_QUANTA = st.dictionaries(PRIORITY, QUANTA, max_size=PRIORITIES)
PFC_LENGTH = st.sampled_from((60, 60, 18, 30))  # a short PFC frame is read padded
BODY = st.binary(max_size=46)
GARBAGE = st.binary(max_size=120)
CORRUPTIONS = st.integers(0, 3)
HEADER_OFFSET = st.sampled_from((12, 13, 14, 16, 17, 22, 23, 24)) | st.integers(0, 40)  # EtherType, IPv4
CUT = st.integers(0, 9300)


@st.composite
def destinations(draw, nports: int, ngroups: int, routed: bool) -> str:
    kind = draw(ROUTED if routed else DESTINATION)
    if kind == "host":
        return host_ip(f"eth{draw(PORT) % nports + 1}")
    if kind == "ecmp" and ngroups:
        return f"10.{draw(GROUP) % ngroups}.{draw(BYTE) % 4}.{draw(BYTE)}"
    if kind == "local":
        return f"198.18.{draw(PORT) % nports + 1}.1"
    return UNROUTED


@dataclass(frozen=True)
class Lossless:
    """What makes a frame lossless on a port under the trace's first profile: the DSCPs whose
    TC is in pfc_enable, and the PFC priorities. Frames lean on them half the time: a DSCP
    drawn from 64 rarely meets a lossless TC, and PFC rarely a priority the port honours."""

    dscps: tuple[int, ...]
    priorities: tuple[int, ...]

    @classmethod
    def of(cls, profile: QosProfile, port: str) -> Lossless:
        qos = profile.ports[to_sonic(port)]
        return cls(tuple(d for d in range(DSCP_VALUES) if qos.dscp_to_tc[d] in qos.pfc_enable),
                   tuple(sorted(qos.pfc_enable)))


@st.composite
def ip_frames(draw, port: str, nports: int, ngroups: int, lossless: Lossless, routed: bool = False) -> bytes:
    """An IPv4 frame: `routed`, one the switch forwards if its buffers let it (RoCE-like, to a
    host or an ECMP group), else anything IPv4 (any MAC, TTL, protocol, fragment, options, tag)."""
    dscp = draw(DSCP)
    if lossless.dscps and draw(BOOL):
        dscp = lossless.dscps[dscp % len(lossless.dscps)]
    src = "198.18.200.7" if draw(BOOL) else host_ip(port)
    dst = draw(destinations(nports, ngroups, routed))
    size, tos, sport = draw(SIZE), dscp << 2 | draw(ECN), draw(U16)
    if routed:
        return ipv4_frame(switch_mac(port), host_mac(port), src, dst, size=min(size, 9000), tos=tos, sport=sport)
    dst_mac = draw(DST_MAC)
    return ipv4_frame(switch_mac(port) if dst_mac == "port" else dst_mac, host_mac(port), src, dst, size=size,
                      tos=tos, ttl=draw(TTL), proto=draw(PROTO), sport=sport, dport=draw(DPORT), frag=draw(FRAG),
                      options=draw(OPTIONS), vlan=draw(VLAN))


@st.composite
def frames(draw, port: str, nports: int, ngroups: int, lossless: Lossless) -> bytes:
    """Any frame a host might send: mostly IPv4, also PFC, 802.3x, other MAC Control, a
    corrupted IPv4 frame (a few header bytes overwritten, perhaps cut short), random bytes."""
    kind = draw(FRAME_KIND)
    if kind in ("ip", "routed"):
        return draw(ip_frames(port, nports, ngroups, lossless, routed=kind == "routed"))
    if kind == "pfc":
        quanta = draw(PFC_QUANTA)
        if draw(BOOL):  # a storm's frame: every lossless priority held for as long as one frame can
            quanta = {p: 0xFFFF for p in lossless.priorities}
        return build_pfc(mac_bytes(host_mac(port)), quanta)[:draw(PFC_LENGTH)]
    if kind == "pause":
        return mac_control_frame(host_mac(port), MAC_CONTROL_PAUSE, struct.pack("!H", draw(QUANTA)))
    if kind == "mac_control":
        return mac_control_frame(host_mac(port), draw(U16), draw(BODY))
    if kind == "corrupted":
        out = bytearray(draw(ip_frames(port, nports, ngroups, lossless)))
        for _ in range(draw(CORRUPTIONS)):
            out[draw(HEADER_OFFSET)] = draw(BYTE)
        return bytes(out[:draw(CUT)] if draw(BOOL) else out)
    return draw(GARBAGE)


# ---- the switch -------------------------------------------------------------------------------

PORT_COUNT = st.integers(2, 6)
RATE = st.sampled_from(RATES_BPS)
DELAY = st.sampled_from((0.0, 0.0, 0.0, 1e-5, 3e-4))
JITTER = st.sampled_from((0.0, 0.0, 0.0, 0.0, 2e-4))
LOSS = st.sampled_from((0.0,) * 6 + (10.0, 100.0))
BURST = st.sampled_from((4 * 9234, 4 * 9234, 1500))
# Buffer profiles, schedulers and WRED profiles are drawn whole from every combination of
# their fields (one draw each: drawing field by field doubled the test's time).
THRESHOLDS = [{"dynamic_th": d} for d in range(-4, 4)] + [{"static_th_bytes": b} for b in (0, 3000, 20_000, 200_000)]
XON = (None, 0, 2000, 20_000)
LOSSLESS_PG = st.sampled_from([
    BufferProfile("pg_lossless", INGRESS_POOL, reserved, **th, xoff_bytes=xoff, xon_bytes=xon, xon_offset_bytes=offset)
    for reserved in (0, 1500, 10_000) for th in THRESHOLDS for xoff in (0, 5000, 20_000, 100_000) for xon in XON
    for offset in XON])
LOSSY_PG = st.sampled_from([BufferProfile("pg_lossy", INGRESS_POOL, reserved, **th)
                            for reserved in (0, 1500, 10_000) for th in THRESHOLDS])
QUEUE_BUFFER = st.none() | st.sampled_from([BufferProfile("q_lossy", EGRESS_POOL, reserved, **th)
                                            for reserved in (0, 3000) for th in THRESHOLDS])
SCHEDULER = st.none() | st.sampled_from([Scheduler("s", kind, weight) for kind in ("STRICT", "DWRR", "WRR")
                                         for weight in (1, 3, 30, 100)])
WRED = st.none() | st.sampled_from([
    WredProfile("w", drops, mode, kmin, kmin + span, probability) for drops in (True, False) for mode in ECN_MODES
    for kmin in (0, 1000, 10_000, 50_000) for span in (0, 5000, 50_000) for probability in (0, 5, 50, 100)])
WATCHDOG = st.none() | st.builds(PfcWatchdog, st.sampled_from(("drop", "drop", "forward", "alert")),
                                 st.sampled_from((2, 5, 20)), st.sampled_from((10, 50, 200)))
MAP_SEED = st.integers(0, 2**32)
POOL_SIZE = st.sampled_from((20_000, 200_000, 10**7))
POOL_HEADROOM = st.sampled_from((0, 0, 8000, 50_000))
EGRESS_POOL_SIZE = st.sampled_from((10_000, 10**7))
MEMBERS = st.lists(PORT, min_size=2, max_size=16)
ROUTE_KEPT = st.integers(0, 5)


@st.composite
def specs(draw) -> tuple[PortSpec, ...]:
    return tuple(PortSpec(f"eth{i}", switch_mac(f"eth{i}"), draw(RATE), delay_s=draw(DELAY), jitter_s=draw(JITTER),
                          loss_pct=draw(LOSS), burst_bytes=draw(BURST), global_flow_control_rx=draw(BOOL))
                 for i in range(1, draw(PORT_COUNT) + 1))


def queue_qos(draw) -> QueueQos:
    return QueueQos(scheduler=draw(SCHEDULER), wred=draw(WRED), buffer=draw(QUEUE_BUFFER))


def maps(draw) -> dict:
    """A port's classification maps: the AZURE shape (DSCP d → TC d for d < 8, TC → PG and queue
    alike), or DSCP → any of the 16 TCs and TC → PG, TC → queue, PFC priority → queue at random
    (from one drawn seed: 104 draws per map would dominate the test's time)."""
    if draw(BOOL):
        return dict(dscp_to_tc=tuple(d if d < PRIORITIES else 0 for d in range(DSCP_VALUES)))
    rng = random.Random(draw(MAP_SEED))
    return dict(dscp_to_tc=tuple(rng.randrange(TRAFFIC_CLASSES) for _ in range(DSCP_VALUES)),
                tc_to_pg=tuple(rng.randrange(PRIORITIES) for _ in range(TRAFFIC_CLASSES)),
                tc_to_queue=tuple(rng.randrange(PRIORITIES) for _ in range(TRAFFIC_CLASSES)),
                pfc_priority_to_queue=tuple(rng.randrange(PRIORITIES) for _ in range(PRIORITIES)))


def port_qos(draw) -> dict:
    """One port's PORT_QOS_MAP, BUFFER_PG, QUEUE and PFC_WD entries (PortQos fields)."""
    fields = maps(draw)
    tc_to_pg = fields.get("tc_to_pg", tuple(range(PRIORITIES)))
    pfc_enable = draw(PFC_ENABLE)
    lossless_pgs = {tc_to_pg[tc] for tc in pfc_enable}
    pgs = {pg: draw(LOSSLESS_PG if pg in lossless_pgs else LOSSY_PG) for pg in lossless_pgs | draw(PRIORITY_SETS[2])}
    tc_to_queue = fields.get("tc_to_queue", tuple(range(PRIORITIES)))
    queues = {q: queue_qos(draw) for q in {tc_to_queue[tc] for tc in pfc_enable} | draw(PRIORITY_SETS[3])}
    return dict(fields, pfc_enable=pfc_enable, pgs=pgs, queues=queues, pfc_wd=draw(WATCHDOG))


def profile(draw, nports: int) -> QosProfile:
    """Pools, and one or two kinds of port (a fabric's ports are mostly alike)."""
    pools = {INGRESS_POOL: BufferPool(INGRESS_POOL, "ingress", "dynamic", draw(POOL_SIZE), draw(POOL_HEADROOM)),
             EGRESS_POOL: BufferPool(EGRESS_POOL, "egress", "dynamic", draw(EGRESS_POOL_SIZE))}
    kinds = [port_qos(draw) for _ in range(1 + draw(BOOL))]
    ports = {}
    for i in range(1, nports + 1):
        name = to_sonic(f"eth{i}")
        ports[name] = PortQos(port=name, **kinds[draw(BOOL) % len(kinds)])
    return QosProfile(source="generated", pools=pools, ports=ports)


def fib(draw, nports: int, ngroups: int) -> Fib:
    """Per-host routes (some missing), a default route or none, ECMP groups 10.G.0.0/16 of 2–16
    next hops (several behind one port: different neighbours) and perhaps a /24 inside one."""
    routes: dict[str, list[NextHop]] = {}
    for i in range(1, nports + 1):
        if draw(ROUTE_KEPT):
            routes[f"198.18.{i}.0/24"] = [NextHop(f"eth{i}", host_mac(f"eth{i}"))]
    if draw(BOOL):
        p = draw(PORT) % nports + 1
        routes["0.0.0.0/0"] = [NextHop(f"eth{p}", host_mac(f"eth{p}"))]
    for g in range(ngroups):
        members = [p % nports + 1 for p in draw(MEMBERS)]
        routes[f"10.{g}.0.0/16"] = [NextHop(f"eth{p}", f"02:aa:00:{g:02x}:{m:02x}:{p:02x}")
                                    for m, p in enumerate(members)]
        if draw(BOOL):
            p = draw(PORT) % nports + 1
            routes[f"10.{g}.1.0/24"] = [NextHop(f"eth{p}", host_mac(f"eth{p}"))]
    return Fib(routes=routes, local=frozenset(f"198.18.{i}.1" for i in range(1, nports + 1)))


EVENT_COUNT = st.integers(1, 24)
GAP_US = st.sampled_from((0, 0, 10, 100, 1000)) | st.integers(0, 20_000)
OP = st.sampled_from(("frame",) * 10 + ("clear", "impair", "fib", "reload", "poll"))
COPIES = st.sampled_from((1, 1, 5, 40, 40))
SPACING_US = st.sampled_from((0, 0, 10, 100, 300))
IMPAIR_DELAY = st.sampled_from((0.0, 1e-4))
IMPAIR_JITTER = st.sampled_from((0.0, 5e-5))
IMPAIR_LOSS = st.sampled_from((0.0, 0.0, 30.0))
TICK = st.sampled_from((None, None, 1e-4, 2e-3, 1e-2))
SEED = st.integers(0, 3)
TAIL = st.sampled_from((0.02, 0.2))
# Every mode, with times on the traces' scale: an inactivity interval from a frame's time to
# longer than most traces' gaps.
BALANCE = st.just(Balance()) | st.builds(
    Balance, st.sampled_from(("flowlet", "packet", "spray")), st.sampled_from((1e-4, 2e-3, 2e-2, 0.256)),
    st.sampled_from((1, 2, 7, 512)), st.sampled_from((1e-4, 1e-3, 1.6e-2)), st.integers(0, 2), st.integers(0, 2),
    st.integers(0, 3))


@st.composite
def traces(draw) -> Trace:
    ports = draw(specs())
    n = len(ports)
    ngroups = draw(GROUP) + draw(BOOL)  # 0 to 3
    profile_list = tuple(profile(draw, n) for _ in range(1 + draw(BOOL)))
    fib_list = tuple(fib(draw, n, ngroups) for _ in range(1 + draw(BOOL)))
    lossless = [Lossless.of(profile_list[0], p.name) for p in ports]
    events = []
    at_us = 0
    for _ in range(draw(EVENT_COUNT)):
        at_us += draw(GAP_US)
        op = draw(OP)
        args: tuple = ()
        if op == "frame":
            port = draw(PORT) % n + 1
            args = (f"eth{port}", draw(frames(f"eth{port}", n, ngroups, lossless[port - 1])), draw(COPIES),
                    draw(SPACING_US))
        elif op == "impair":
            args = (f"eth{draw(PORT) % n + 1}", draw(IMPAIR_DELAY), draw(IMPAIR_JITTER), draw(IMPAIR_LOSS))
        elif op == "fib":
            args = (draw(BOOL) % len(fib_list),)
        elif op == "reload":
            args = (draw(BOOL) % len(profile_list),)
        events.append((at_us, op, args))
    return Trace(ports, profile_list, fib_list, tuple(events), draw(TICK), draw(SEED), draw(TAIL), draw(BALANCE))


# ---- running a trace -------------------------------------------------------------------------

def run(implementation, trace: Trace) -> list[tuple]:
    """Drive one pipeline through a trace as switchd would (receive, poll, next_event, the
    control ops); what it did, in order: ("out", t, port, frame), ("trap", port, frame),
    ("counters", t, counters)."""
    rng = random.Random(trace.seed)
    ports = list(trace.specs)
    fib = trace.fibs[0]
    switch = implementation("leaf1", ports, trace.profiles[0], fib, rng, balance=trace.balance)
    arrivals: list[tuple[float, int, str, Any]] = []
    for order, (at_us, op, args) in enumerate(trace.events):
        if op == "frame":
            port, frame, copies, gap_us = args
            # in each buffer type a shell may hand over
            arrivals += [((at_us + k * gap_us) * 1e-6, order, op, (port, (bytes, bytearray, memoryview)[k % 3](frame)))
                         for k in range(copies)]
        else:
            arrivals.append((at_us * 1e-6, order, op, args))
    arrivals.sort(key=lambda a: (a[0], a[1]))
    until = (arrivals[-1][0] if arrivals else 0.0) + trace.tail_s
    log: list[tuple] = []
    now, i, polls_at_now = 0.0, 0, 0
    while True:
        while i < len(arrivals) and arrivals[i][0] <= now:
            at, _, op, args = arrivals[i]
            i += 1
            if op == "frame":  # read at `now`, received at `at`: late on a coarse clock
                switch.receive(args[0], args[1], now, at)
                continue
            if op == "poll":
                continue
            log.append(("counters", now, switch.counters(now), switch.group_counters()))
            if op == "clear":
                switch.clear_counters(now)
            elif op == "impair":
                name, delay_s, jitter_s, loss_pct = args
                switch.set_impairment(name, delay_s, jitter_s, loss_pct)
                ports = [replace(p, delay_s=delay_s, jitter_s=jitter_s, loss_pct=loss_pct) if p.name == name else p
                         for p in ports]
            elif op == "fib":
                fib = trace.fibs[args[0]]
                switch.set_fib(fib)
            else:  # reload: switchd builds a new switch on the same rng (rocelab.switch.agent)
                switch = implementation("leaf1", ports, trace.profiles[args[0]], fib, rng, balance=trace.balance)
        log += [("out", now, port, bytes(frame)) for port, frame in switch.poll(now)]
        while switch.trapped:
            log.append(("trap", *switch.trapped.popleft()))
        t = switch.next_event(now)
        if i < len(arrivals) and (t is None or arrivals[i][0] < t):
            t = arrivals[i][0]
        if t is not None and trace.tick_s:
            t = late(t, trace.tick_s)
        if t is None or t > until:
            break
        polls_at_now = polls_at_now + 1 if t == now else 0
        assert polls_at_now < 1000, f"next_event keeps answering {now}: the switch is stuck"
        now = t
    log.append(("counters", until, switch.counters(until), switch.group_counters()))
    return log


def late(t: float, tick_s: float) -> float:
    """The first tick of a coarse clock at or after `t`."""
    k = math.ceil(t / tick_s)
    while k * tick_s < t:  # t / tick_s rounded down by a hair
        k += 1
    return k * tick_s


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two logs (or counters) first differ, as a path, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            found = first_difference(a.get(key), b.get(key), f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for k, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{k}]")
            if found:
                return found
        return None
    if a != b:
        shown = [x[:3] if isinstance(x, tuple) and len(x) > 3 else x for x in (a, b)]
        return f"{path or '(log)'}: C {shown[0]!r} ≠ Python {shown[1]!r}"
    return None


def difference(log_c: list[tuple], log_py: list[tuple]) -> str | None:
    if log_c == log_py:
        return None
    for k, (c, py) in enumerate(zip(log_c, log_py)):
        found = first_difference(c, py, f"[{k}]")
        if found:
            return found
    return f"C's log has {len(log_c)} entries, Python's {len(log_py)}"


def what_happened(log: list[tuple]) -> set[str]:
    """The stages a trace exercised, read from its counters and frames out."""
    seen = set()
    for entry in log:
        if entry[0] == "trap":
            seen.add("trap")
        if entry[0] != "counters":
            continue
        seen.update(f"drop:{reason}" for reason in entry[2]["drops"])
        for group in entry[3].values():
            seen.update(f"{group['mode']}:{what}" for what in ("reassignments", "collisions") if group[what])
            if len([m for m in group["members"].values() if m["frames"]]) > 1:
                seen.add(f"{group['mode']}:spread")
        for port in entry[2]["ports"].values():
            if any(port["pfc_tx_frames"]):
                seen.add("pfc_tx")
            if any(port["paused_time_s"]):
                seen.add("paused")
            for queue in port["queues"]:
                if queue["ecn_marked_packets"]:
                    seen.add("ecn_marked")
                if (queue["pfcwd"] or {}).get("storms_detected"):
                    seen.add("storm")
            if any(pg["headroom_watermark_bytes"] for pg in port["pgs"]):
                seen.add("headroom")
            if any(pg["held_packets"] for pg in port["pgs"]):
                seen.add("held")
    return seen


# What the property's traces made happen in the reference, for the test after it.
REACHED: set[str] = set()
TRACES_RUN = [0]


# ---- the property ---------------------------------------------------------------------------

@needs_c
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None)
@given(traces())
def test_the_c_pipeline_sends_and_counts_as_the_python_one_on_any_trace(trace):
    log_c, log_py = run(fastpath.FastSwitch, trace), run(Switch, trace)
    REACHED.update(what_happened(log_py))
    TRACES_RUN[0] += 1
    found = difference(log_c, log_py)
    assert found is None, found


def test_the_generated_traces_reach_every_stage():
    """The property above is only as good as what its traces make happen: across them, the
    reference pipeline must have dropped for every reason, marked ECN, sent and honoured PFC,
    found a storm, used headroom, held a frame owed to a late XOFF past it, trapped a
    TTL-expired packet, and spread a group's frames over its members under flowlet and packet
    balancing and sprayed them, moved a flowlet and had two flows collide in a flowset entry. Read from the property's
    run (2,000 traces in CI); where fewer ran (the dev profile, no C core, -k), from 800 traces
    through the reference alone."""
    seen = set(REACHED)
    if TRACES_RUN[0] < 800:
        @settings(max_examples=800, derandomize=True, database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(traces())
        def collect(trace):
            seen.update(what_happened(run(Switch, trace)))

        collect()
    reasons = counters.DROP_REASONS
    expected = {f"drop:{r}" for r in reasons} | {"pfc_tx", "paused", "ecn_marked", "storm", "headroom", "held",
                                                  "trap", "flowlet:spread", "flowlet:reassignments",
                                                  "flowlet:collisions", "packet:spread", "spray:spread"}
    assert expected <= seen, sorted(expected - seen)
