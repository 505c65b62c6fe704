"""What one frame costs this machine's agents, measured once and kept (`up --tdf auto`).

Three measurements, each of the code the agents run, not of a model of it:
- the switch core: RoCEv2 frames through rocelab.switch.Switch with the shipped
  roce-lossless profile, driven as switchd drives it (receive, poll, next_event);
- the NIC core: an elephant flow between two rocelab.roce.Nic cores (rocelab.traffic.sim),
  per data frame sent or received, ACKs included;
- the packet sockets: AF_PACKET send and receive of the same frames over a veth pair in a
  namespace of its own, made for the measurement and removed after it.

A switch pays the core plus one receive and one send per frame; a NIC its core plus one
send or one receive. CPU time (user + system of this process) is counted, not wall time, so
what else the machine runs does not change the figures. The result is kept under
paths.cache_dir() per rocelab version, sources and CPU: a changed agent is measured again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import random
import time
from dataclasses import replace
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2 import netns as pyroute2_netns

import rocelab
from rocelab import paths
from rocelab.ethernet import ETH, ETH_P_IPV4, IPPROTO_UDP, ROCE_UDP_PORT, ipv4_header, mac_bytes
from rocelab.kernel.loop import RCVBUF_BYTES
from rocelab.kernel.netns import packet_socket
from rocelab.model.lab import Lab
from rocelab.model.tdf import ROCE_FRAME_OVERHEAD_BYTES, AgentCosts, TdfChoice, choose_tdf, pinned
from rocelab.qos.sonic import load_config_db
from rocelab.roce.config import roce_config
from rocelab.switch import Fib, NextHop, PortSpec, Switch
from rocelab.traffic.patterns import builtin_patterns
from rocelab.traffic.sim import run_in_sim

FRAME_PAYLOAD_BYTES = 4096
SWITCH_FRAMES = 20_000
SOCKET_FRAMES = 20_000
NIC_BYTES = 8 << 20
SOCKET_BATCH = 64  # frames sent before they are read back: well inside the receive buffer
ROCE_DSCP = 26  # the shipped profiles' lossless RoCE class: the path with PFC and ECN accounting
EMULATED_RATE_BPS = 100e6  # 100G at TDF 1000; the cost per frame does not depend on it
CARRIER_TIMEOUT_S = 5.0


def _frame(dscp: int, dst_ip: bytes, sport: int) -> bytes:
    total = FRAME_PAYLOAD_BYTES + ROCE_FRAME_OVERHEAD_BYTES - 14
    ip = ipv4_header(tos=dscp << 2 | 2, total_bytes=total, ttl=64, protocol=IPPROTO_UDP,
                     src=bytes([198, 19, 1, 2]), dst=dst_ip)
    udp = sport.to_bytes(2, "big") + ROCE_UDP_PORT.to_bytes(2, "big") + (total - 20).to_bytes(2, "big") + b"\0\0"
    return ETH.pack(mac_bytes("02:52:4c:00:00:01"), mac_bytes("02:52:4c:01:00:01"), ETH_P_IPV4) + ip + udp + \
        bytes(total - 28)


def _cpu_s() -> float:
    return time.process_time()


def switch_core_frame_s(frames: int = SWITCH_FRAMES) -> float:
    """CPU seconds the switch pipeline spends per forwarded frame (no socket)."""
    profile = load_config_db(paths.profiles_dir() / "roce-lossless.json")
    ports = [PortSpec(f"eth{i}", f"02:52:4c:00:00:0{i}", EMULATED_RATE_BPS) for i in (1, 2)]
    fib = Fib({"198.19.2.0/24": [NextHop("eth2", "02:52:4c:02:00:01")]})
    switch = Switch("calibration", ports, profile, fib, random.Random(1))
    batch = [_frame(ROCE_DSCP, bytes([198, 19, 2, 2]), 49152 + i) for i in range(16)]
    gap_s = len(batch[0]) * 8 / EMULATED_RATE_BPS  # offered at line rate: queues stay short
    now, sent = 0.0, 0
    start = _cpu_s()
    for i in range(frames):
        switch.receive("eth1", batch[i % len(batch)], now)
        sent += len(switch.poll(now))
        switch.next_event(now)
        now += gap_s
    spent = _cpu_s() - start
    if sent < frames * 0.9:  # the measurement is of forwarding: it must have forwarded
        raise RuntimeError(f"calibration: the switch core forwarded {sent} of {frames} frames")
    return spent / frames


def nic_core_frame_s(size_bytes: int = NIC_BYTES) -> float:
    """CPU seconds a NIC core spends per data frame it sends or receives (ACKs included)."""
    plan = builtin_patterns().get("elephant").plan(("a", "b"), size_bytes)
    start = _cpu_s()
    report, _, _ = run_in_sim(plan, message_bytes=1 << 20, rate_bps=EMULATED_RATE_BPS)
    spent = _cpu_s() - start
    frames = size_bytes / FRAME_PAYLOAD_BYTES
    return spent / (2 * frames)  # each data frame is sent by one NIC and received by another


def socket_frame_s(frames: int = SOCKET_FRAMES) -> float:
    """CPU seconds one AF_PACKET send plus one receive cost per frame, over a veth pair."""
    ns = f"rocelab-calibration-{os.getpid()}"
    pyroute2_netns.create(ns)
    try:
        with IPRoute(netns=ns) as ipr:
            ipr.link("add", ifname="c0", kind="veth", peer="c1")
            for name in ("c0", "c1"):
                ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up", mtu=9100)
            # The carrier comes up a moment later: frames sent before it are dropped.
            deadline = time.monotonic() + CARRIER_TIMEOUT_S
            while any(link.get_attr("IFLA_OPERSTATE") != "UP" for link in ipr.get_links()
                      if link.get_attr("IFLA_IFNAME") in ("c0", "c1")):
                if time.monotonic() > deadline:
                    raise RuntimeError("calibration: the veth pair's carrier did not come up")
                time.sleep(0.01)
        with contextlib.closing(packet_socket("c0", ns, protocol=0)) as tx, \
                contextlib.closing(packet_socket("c1", ns, rcvbuf_bytes=RCVBUF_BYTES)) as rx:  # as agents' ports
            rx.settimeout(1.0)
            frame = _frame(ROCE_DSCP, bytes([198, 19, 2, 2]), 49152)
            start = _cpu_s()
            done = 0
            while done < frames:
                for _ in range(SOCKET_BATCH):
                    tx.send(frame)
                for _ in range(SOCKET_BATCH):
                    rx.recv(65536)
                done += SOCKET_BATCH
            return (_cpu_s() - start) / done
    finally:
        pyroute2_netns.remove(ns)


def measure() -> AgentCosts:
    sock = socket_frame_s()
    return AgentCosts(switch_frame_s=switch_core_frame_s() + sock, nic_frame_s=nic_core_frame_s() + sock / 2,
                      cores=os.cpu_count() or 1)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cache_key() -> str:
    """rocelab's version and sources, the CPU and the core count: what the figures depend on."""
    digest = hashlib.sha256()
    package = Path(rocelab.__file__).parent
    for path in sorted(package.rglob("*.py")):
        digest.update(path.read_bytes())
    return f"{rocelab.__version__}-{digest.hexdigest()[:12]}-{hashlib.sha256(_cpu_model().encode()).hexdigest()[:8]}" \
           f"-{os.cpu_count()}"


def costs() -> AgentCosts:
    """This machine's per-frame costs: from the cache when it holds them for these sources and CPU."""
    key = cache_key()
    cache = paths.cache_dir() / "calibration.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        kept = json.loads(cache.read_text())
        if kept["key"] == key:
            return AgentCosts(**kept["costs"])
    measured = measure()
    with contextlib.suppress(OSError):  # a read-only cache only costs the next run a measurement
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "cpu": _cpu_model(), "costs": measured.__dict__}, indent=1))
        os.replace(tmp, cache)
    return measured


def resolve_tdf(lab: Lab) -> tuple[Lab, TdfChoice]:
    """The lab with a TDF, and why that one: the lab's or the user's, or the one this machine
    holds for the lab's peak (lab.tdf None)."""
    here = costs()
    pmtu = roce_config(lab.roce).pmtu_bytes
    if lab.tdf is None:
        choice = choose_tdf(lab.fabric, lab.scenario, pmtu, here, floor=lab.tdf_floor)
        return replace(lab, tdf=choice.tdf), choice
    return lab, pinned(lab.fabric, lab.scenario, pmtu, here, lab.tdf, lab.tdf_how)
