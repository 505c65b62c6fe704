"""Builders shared by the switch-core tests (this module holds no tests).

A four-port switch at 100G / TDF 1000 = 100 Mb/s per port; host N sits behind ethN with
198.18.N.2. QoS profiles are built by hand, AZURE style: DSCP 3 → TC 3 → PG 3 → queue 3.
"""

from __future__ import annotations

import dataclasses
import random

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rocelab.qos.model import (
    BufferPool, BufferProfile, PfcWatchdog, PortQos, QosProfile, QueueQos, Scheduler,
    WredProfile,
)
from rocelab.switch import Fib, NextHop, PortSpec, Switch
from rocelab.ethernet import mac_bytes
from rocelab.switch.fastpath import FastSwitch
from rocelab.switch.frames import build_pfc


RATE_BPS = 100e6  # 100G dilated by 1000
PORTS = ("eth1", "eth2", "eth3", "eth4")
ROCE_UDP_PORT = 4791
LOSSLESS_TC = 3
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3


def switch_mac(port: str) -> str:
    return f"02:00:00:00:00:0{port[-1]}"


def host_mac(port: str) -> str:
    return f"02:00:00:00:01:0{port[-1]}"


def host_ip(port: str) -> str:
    return f"198.18.{port[-1]}.2"


def fib() -> Fib:
    return Fib(routes={f"198.18.{p[-1]}.0/24": [NextHop(p, host_mac(p))] for p in PORTS},
               local=frozenset(f"198.18.{p[-1]}.1" for p in PORTS))


def port_specs(**overrides) -> list[PortSpec]:
    return [PortSpec(p, switch_mac(p), RATE_BPS, **overrides) for p in PORTS]


# Which pipeline make_switch builds: the switch tests run once on each (tests/unit/conftest.py).
IMPLEMENTATIONS = {"python": Switch}
if FastSwitch is not None:
    IMPLEMENTATIONS["c"] = FastSwitch
implementation = "python"


def make_switch(profile: QosProfile, specs: list[PortSpec] | None = None,
                seed: int = 1, routes: Fib | None = None) -> Switch:
    return IMPLEMENTATIONS[implementation]("leaf1", specs or port_specs(), profile, routes or fib(),
                                           random.Random(seed))


def roce(src: str, dst: str, size_bytes: int = 1024, dscp: int = LOSSLESS_TC,
         ecn: int = ECT0, sport: int = 49152, ttl: int = 64, dst_mac: str | None = None
         ) -> bytes:
    """A RoCEv2-looking frame of exactly size_bytes from the host on `src` to the one on
    `dst`, addressed to the switch's port (or to `dst_mac`)."""
    head = (Ether(src=host_mac(src), dst=dst_mac or switch_mac(src))
            / IP(src=host_ip(src), dst=host_ip(dst), tos=dscp << 2 | ecn, ttl=ttl, flags="DF")
            / UDP(sport=sport, dport=ROCE_UDP_PORT))
    return bytes(head / (b"\x00" * (size_bytes - len(head))))


def pfc_from_peer(port: str, quanta: dict[int, int]) -> bytes:
    """A PFC frame the host on `port` sends the switch."""
    return build_pfc(mac_bytes(host_mac(port)), quanta)


def qos_profile(ports: dict[str, PortQos], pools: dict[str, BufferPool] | None = None
                ) -> QosProfile:
    return QosProfile(source="test", pools=pools or {}, ports=ports)


def azure_maps(**fields) -> dict:
    """PORT_QOS_MAP fields for DSCP d → TC d (d < 8, else 0), TC → PG/queue identity."""
    dscp_to_tc = tuple(d if d < 8 else 0 for d in range(64))
    base = dict(dscp_to_tc=dscp_to_tc, tc_to_queue=tuple(range(8)), tc_to_pg=tuple(range(8)))
    base.update(fields)
    return base


def every_port(**fields) -> dict[str, PortQos]:
    return {f"Ethernet{(int(p[-1]) - 1) * 4}": PortQos(port=f"Ethernet{(int(p[-1]) - 1) * 4}",
                                                         **azure_maps(**fields))
            for p in PORTS}


def lossless_pg_profile(**fields) -> BufferProfile:
    base = dict(name="pg_lossless", pool="ingress_lossless_pool", size_bytes=0,
                static_th_bytes=40_000, xoff_bytes=20_000, xon_bytes=8_000,
                xon_offset_bytes=10_000)
    base.update(fields)
    return BufferProfile(**base)


def ingress_pool(size_bytes: int = 10_000_000, xoff_bytes: int = 0) -> dict[str, BufferPool]:
    return {"ingress_lossless_pool": BufferPool("ingress_lossless_pool", "ingress", "dynamic",
                                                size_bytes, xoff_bytes)}


def lossless_profile(pg: BufferProfile | None = None, wred: WredProfile | None = None,
                     pfc_wd: PfcWatchdog | None = None,
                     pools: dict[str, BufferPool] | None = None) -> QosProfile:
    """TC 3 lossless on every port, with the given PG 3 profile and queue 3 WRED."""
    queues = {LOSSLESS_TC: QueueQos(wred=wred)} if wred else {}
    ports = every_port(pfc_enable=frozenset({LOSSLESS_TC}),
                       pgs={LOSSLESS_TC: pg or lossless_pg_profile()},
                       queues=queues, pfc_wd=pfc_wd)
    return qos_profile(ports, pools or ingress_pool())


def scheduled_profile(schedulers: dict[int, Scheduler]) -> QosProfile:
    return qos_profile(every_port(queues={q: QueueQos(scheduler=s)
                                          for q, s in schedulers.items()}))


def with_port(specs: list[PortSpec], name: str, **changes) -> list[PortSpec]:
    return [dataclasses.replace(s, **changes) if s.name == name else s for s in specs]


def paced(port: str, frame: bytes, rate_bps: float, start_s: float, until_s: float
          ) -> list[tuple[float, str, bytes]]:
    """`frame` offered on `port` back to back at rate_bps from start_s until until_s."""
    gap_s = len(frame) * 8 / rate_bps
    count = int((until_s - start_s) / gap_s)
    return [(start_s + i * gap_s, port, frame) for i in range(count)]


def drive(switch: Switch, arrivals: list[tuple[float, str, bytes]], start_s: float,
          until_s: float) -> list[tuple[float, str, bytes]]:
    """Run the switch as switchd would: hand it each arrival (time, port, frame) at its
    time, poll whenever next_event says, until until_s. Returns (time, port, frame) for
    everything the switch sent."""
    arrivals = sorted(arrivals, key=lambda a: a[0])
    sent = []
    now = start_s
    i = 0
    polls_at_now = 0
    while True:
        while i < len(arrivals) and arrivals[i][0] <= now:
            switch.receive(arrivals[i][1], arrivals[i][2], now)
            i += 1
        for port, frame in switch.poll(now):
            sent.append((now, port, bytes(frame)))
        t = switch.next_event(now)
        if i < len(arrivals) and (t is None or arrivals[i][0] < t):
            t = arrivals[i][0]
        if t is None or t > until_s:
            return sent
        assert t >= now, "next_event went back in time"
        polls_at_now = polls_at_now + 1 if t == now else 0
        assert polls_at_now < 1000, f"next_event keeps answering {now}: the switch is stuck"
        now = t


def run(switch: Switch, start_s: float, until_s: float) -> list[tuple[float, str, bytes]]:
    """Drive the switch's own events (nothing arriving) from start_s to until_s."""
    return drive(switch, [], start_s, until_s)
