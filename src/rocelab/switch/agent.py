"""switchd: the emulated switch ASICs of one or more switches, `python -m rocelab.switch.agent CONFIG_JSON...`
(started by the engine, never by hand).

The netns engine starts one switchd for all of a lab's switches, as it does nicd for its hosts:
one process sleeps once for every switch with something due, and a frame one switch sends
another is read in the same wake-up (a veth delivers it before send() returns) instead of
waking another process; on a machine of few cores an agent also waits for its turn behind the
others. Each switch keeps its own ports, namespace, FIB, profile, control socket and counters;
what the loop measures (its lateness, its wake-ups) is the process's, reported by every switch
it serves with the list of them (`members`). A container engine starts one per switch
container. Each configuration names the switch's namespace where the process does not live there.

The thin shell around rocelab.switch.pipeline.Switch (its C fast path where built,
rocelab.switch.fastpath): AF_PACKET ports, the FIB read from the namespace's kernel (and
re-read whenever netlink says routes, neighbours, links or addresses changed), the QoS
profile from a SONiC config_db.json, and a control socket:

    ping                                   → {"node", "scheduling", "pipeline": "c" | "python", "pipeline_why"}
    counters                               → {"counters": …, "loop": …, "tdf": N, "profile": PATH,
                                              "reloads": N (how many so far), "pipeline", "pipeline_why",
                                              "load_balancing": {"mode", "source"},
                                              "ecmp_groups": Switch.group_counters()}
    counters {"packed": true}              → {"packed_counters": …, …}: flat, for frequent readers
                                             (rocelab.switch.counters.expand); the nested view
                                             where a reload's counts are carried since the last clear
    clear                                  → zero every counter
    reload {"profile": PATH, "load_balancing": {…}}  → a new profile (and ECMP load balancing:
                                             rocelab.switch.balance; absent, the lab's): the pipeline
                                             restarts (frames in its buffers are lost; the pipeline is
                                             chosen again), its counters carry on
    port {"port", "admin": "up"|"down", "mtu": N}  → the port's link as the kernel holds it:
                                             a shut port neither sends nor receives, and its
                                             peer loses carrier
    links                                  → every port's admin and oper state and MTU
    impair {"port", "delay_s", "jitter_s", "loss_pct", "rate_pct", "silent"}  → link impairment
                                             out of a port, on top of the cable's own (dilated)
                                             delay, and its rate as a share of the link's (default
                                             100); silent: the port's transmitter dies under the
                                             ASIC, its link up (rocelab.kernel.deadlink)
    fib {"kernel": bool}                   → the forwarding table as programmed, how many kernel FIB
                                             changes are still being programmed, the ports it has
                                             seen go down (in no route) and those whose far end went
                                             dark that it has not seen yet; with "kernel", the
                                             kernel's routes through the ports too (who installed each)
    fib_programming {"routes_per_s": N|null} → from now on, program kernel FIB changes at N
                                             production routes a second; null: at once

A port whose link goes down leaves every route and ECMP group, as an ASIC takes a dead link's
next hops out of its groups in hardware: at once where it was shut here, and where its far end's
carrier was lost once the ASIC detects the loss of signal, the lab's `link_down_detect_ms` later
in emulated time (0 by default: at once; rocelab.switch.fib.SignalLoss); any other
change of the kernel's FIB (FRR's routes, a link coming back) reaches the forwarding table after the
ASIC's programming time in emulated time, once the engine has asked for it (`fib_programming`,
after the lab's routing has converged: a switch's boot-time FIB load is not what a lab studies;
rocelab.switch.fib.FibProgramming); until then, at once.

Kernel IP forwarding stays off in the namespace, so no packet bypasses the pipeline.
"""

from __future__ import annotations

import ipaddress
import os
import random
import signal
import struct
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from pyroute2 import IPRoute

from rocelab.kernel import deadlink
from rocelab.switch import counters, kernel_fib
from rocelab.kernel.loop import Loop, agent_main, build_members, open_port
from rocelab.kernel.rtnl import Events, Rtnl
from rocelab.kernel.control import ControlServer
from rocelab.ethernet import ETH, ETH_P_8021Q, ETH_P_IPV4, IPPROTO_ICMP, internet_checksum, ipv4_header, mac_bytes
from rocelab.qos.model import QosProfile
from rocelab.qos.sonic import QOS_TABLES, profile_from_config_db, read_config_db
from rocelab.switch.balance import Balance, balance_config, balance_from_config_db, dilate
from rocelab.switch.counters import carry_counters
from rocelab.switch.fib import Fib, FibProgramming, SignalLoss, without_ports
from rocelab.switch.fastpath import choose_pipeline, make_switch
from rocelab.switch.pipeline import PortSpec, Switch

ICMP_TIME_EXCEEDED = 11
ICMP_QUOTED_PAYLOAD_BYTES = 8  # RFC 792: the original IP header plus 64 bits of its data
_ICMP = struct.Struct("!BBHI")


def icmp_time_exceeded(frame: bytes, port_mac: bytes, port_ip: bytes) -> bytes | None:
    """The ICMP time-exceeded reply a router's CPU sends for a TTL-expired packet, out of
    the port it came in on (so traceroute shows every switch); None for what cannot be
    answered (too short, not IPv4, or itself an ICMP error, per RFC 1812)."""
    if len(frame) < 34:
        return None
    dst_mac, src_mac, ethertype = ETH.unpack_from(frame)
    ip = 14
    if ethertype == ETH_P_8021Q and len(frame) >= 38:
        ethertype, ip = struct.unpack_from("!H", frame, 16)[0], 18
    if ethertype != ETH_P_IPV4 or frame[ip] >> 4 != 4:
        return None
    ihl = (frame[ip] & 0x0F) * 4
    if frame[ip + 9] == IPPROTO_ICMP and len(frame) > ip + ihl and frame[ip + ihl] in (3, 4, 5, 11, 12):
        return None
    quoted = frame[ip:ip + ihl + ICMP_QUOTED_PAYLOAD_BYTES]
    icmp = _ICMP.pack(ICMP_TIME_EXCEEDED, 0, 0, 0) + quoted
    icmp = icmp[:2] + struct.pack("!H", internet_checksum(icmp)) + icmp[4:]
    header = ipv4_header(tos=48 << 2, total_bytes=20 + len(icmp), ttl=64, protocol=IPPROTO_ICMP, src=port_ip,
                         dst=frame[ip + 12:ip + 16])
    return ETH.pack(src_mac, port_mac, ETH_P_IPV4) + header + icmp


class CpuPort:
    """What the ASIC traps to the CPU, answered the way a router's kernel would. Wraps the
    pipeline so the loop sees one core; replies leave by the port the packet came in on."""

    def __init__(self, switch: Switch, ports: list[dict]):
        self.addresses = {p["name"]: (mac_bytes(p["mac"]), ipaddress.IPv4Interface(p["address"]).ip.packed)
                          for p in ports}
        self.use(switch)

    def use(self, switch: Switch) -> None:
        """Wrap this switch from now on (a reload builds a new one)."""
        self.switch = switch
        self.receive = switch.receive  # every frame: no call of our own in between
        self.takes_arrival_time = switch.takes_arrival_time
        # The C pipeline reads the rings and runs the loop itself (rocelab.kernel.loop).
        self.serve = getattr(switch, "serve", None)
        self.take_loop_counts = getattr(switch, "take_loop_counts", None)
        self.port_names = [port.name for port in switch._ports]

    def poll(self, now: float) -> list:
        out = self.switch.poll(now)
        trapped = self.switch.trapped
        while trapped:
            port, frame = trapped.popleft()
            reply = icmp_time_exceeded(frame, *self.addresses[port])
            if reply is not None:
                out.append((port, reply))
        return out

    def next_event(self, now: float) -> float | None:
        return 0.0 if self.switch.trapped else self.switch.next_event(now)


UNCONFIGURED = QosProfile("built-in: no QoS profile (every DSCP lossy in TC 0)", {}, {})


def load_profile(path: str | None, tdf: int) -> QosProfile:
    """The profile with its times dilated: a PFC watchdog's 200 ms detection time is 200 ms
    of production time, so 200 ms × TDF on the emulated clock (the lab's pfc_wd_tdf, which
    is its TDF unless the lab says otherwise). Bytes stay as written."""
    doc = read_config_db(path) if path else {}
    # A config_db without QoS tables (`config qos clear`) runs as a switch with none.
    profile = profile_from_config_db(doc, path) if any(t in doc for t in QOS_TABLES) else \
        replace(UNCONFIGURED, source=path or UNCONFIGURED.source)
    ports = {
        name: replace(port, pfc_wd=replace(port.pfc_wd, detection_time_ms=port.pfc_wd.detection_time_ms * tdf,
                                           restoration_time_ms=port.pfc_wd.restoration_time_ms * tdf))
        if port.pfc_wd else port
        for name, port in profile.ports.items()
    }
    return replace(profile, ports=ports)


def load_balance(path: str | None, settings: dict | None, tdf: int) -> Balance:
    """A switch's ECMP load balancing, its times dilated: the lab's (or the case's)
    `load_balancing:` where given, else the profile's SONiC ARS tables, else hash."""
    if settings:
        balance = balance_config(settings)
    else:
        balance = (balance_from_config_db(read_config_db(path), path) if path else None) or Balance()
    return dilate(balance, tdf)


class Switchd:
    """One switch: its pipeline, ports, FIB and control socket. Build it inside the switch's
    network namespace: its ports and netlink sockets are opened there. `key` names a port as
    the loop knows it."""

    def __init__(self, config: dict, key: Callable[[str], str] = str):
        self.config = config
        # A port's "global_flow_control_rx" (lab.yml's flow_control_rx; default false, as SONiC
        # leaves it) makes it honour 802.3x PAUSE.
        self.specs = [PortSpec(p["name"], p["mac"], p["rate_bps"], p["delay_s"],
                               global_flow_control_rx=bool(p.get("global_flow_control_rx", False)))
                      for p in config["ports"]]
        self.cable_delay_s = {p["name"]: p["delay_s"] for p in config["ports"]}
        self.link_rate_bps = {p["name"]: p["rate_bps"] for p in config["ports"]}
        self.names = [p.name for p in self.specs]
        self.key = key
        self.ipr = IPRoute()
        self.rtnl = Rtnl()
        # Listen before the first dump: a route FRR installs between the two (BGP converges while
        # the agents start) would otherwise reach the forwarding table only with the next change.
        self.events = Events()
        self.fib: Fib = kernel_fib.read_fib(self.rtnl, self.names, self.rtnl.links())
        self.pfc_wd_tdf = config.get("pfc_wd_tdf", config["tdf"])
        self.profile = load_profile(config["profile"], self.pfc_wd_tdf)
        self.rng = random.Random(config.get("seed", 0))
        self.balance = load_balance(config["profile"], config.get("load_balancing"), config["tdf"])
        self.switch, self.pipeline = make_switch(config["node"], self.specs, self.profile, self.fib, self.rng,
                                                 self.balance)
        self.carried: dict | None = None  # what the pipelines a reload replaced had counted
        self.reloads = 0
        # A shut port's neighbours and routes, which the kernel drops with the link, for startup.
        self.parked: dict[str, kernel_fib.PortState] = {}
        self.down: frozenset[str] = frozenset()  # ports the ASIC holds down: in no route
        # how long the ASIC takes to see a link's far end go dark (the lab's link_down_detect_ms, dilated)
        self.signal = SignalLoss(float(config.get("link_down_detect_s", 0.0)) * config["tdf"])
        self.programming: FibProgramming | None = None
        self.cpu = CpuPort(self.switch, config["ports"])
        self.ports = {key(name): open_port(name) for name in self.names}
        self.control = ControlServer(Path(config["socket"]), self.handle)
        self.loop: Loop | None = None  # set by serve(): the loop every switch of the process shares
        self.timer: FibTimer | None = None

    def refresh_fib(self) -> None:
        """The kernel's links or routes changed: a link that went down leaves every route at once
        (its far end's once the loss of signal is detected: SignalLoss); the routes reach the
        forwarding table at once, or after the ASIC's programming time once the engine asked for
        it (fib_programming)."""
        self.events.drain()
        links = self.rtnl.links()
        now = time.monotonic()
        self.signal.update(kernel_fib.down_ports(links, self.names), kernel_fib.shut_ports(links, self.names), now)
        self.hold_down(now)
        fib = kernel_fib.read_fib(self.rtnl, self.names, links)
        if self.programming is None:
            self.install_fib(fib)
        else:
            self.programming.submit(fib, now)
        self.timer.arm()

    def next_due(self, now: float) -> float | None:
        """When the next FIB change or dark port is due."""
        due = [t for t in (self.programming.pending[0][0] if self.programming and self.programming.pending else None,
                           self.signal.next_due(now)) if t is not None]
        return min(due) if due else None

    def hold_down(self, now: float) -> None:
        """The ports the ASIC holds down at `now`: one newly down leaves every route at once."""
        down = self.signal.held(now)
        if down - self.down:
            self.down = down
            self.install_fib(self.fib)
        self.down = down

    def on_timer(self) -> None:
        """Dark ports seen down and FIB changes programmed by now, into the forwarding table."""
        now = time.monotonic()
        self.hold_down(now)
        if self.programming is None:
            return
        fib = self.programming.due(now)
        if fib is not None:
            self.install_fib(fib)

    def install_fib(self, fib: Fib) -> None:
        """A FIB that needs a feature the running pipeline lacks (an ECMP group under a mode the
        C core does not declare, on a switch that had none), or no longer needs one, rebuilds
        the pipeline; otherwise the running one takes it. No route leaves by a port whose link is down."""
        fib = without_ports(fib, self.down)
        self.fib = fib
        if choose_pipeline(self.profile, self.specs, fib, self.balance).pipeline != self.pipeline.pipeline:
            self.rebuild(time.monotonic())
        else:
            self.switch.set_fib(fib)

    def rebuild(self, now: float) -> None:
        """A new pipeline for the current profile, balance and FIB, chosen again: frames in the
        old one's buffers are lost, its counters carry on."""
        self.carried = carry_counters(self.carried, self.switch.counters(now))
        self.switch, self.pipeline = make_switch(self.config["node"], self.specs, self.profile, self.fib, self.rng,
                                                 self.balance)
        self.cpu.use(self.switch)

    def handle(self, req: dict) -> dict:
        op = req["op"]
        now = time.monotonic()
        if op == "ping":
            return {"node": self.config["node"], "scheduling": self.loop.stats.scheduling,
                    "pipeline": self.pipeline.pipeline, "pipeline_why": self.pipeline.why,
                    "load_balancing": self.balancing()}
        if op == "counters":
            packed = self.switch.packed_counters(now)
            body = {"packed_counters": packed} if req.get("packed") and self.carried is None else \
                {"counters": carry_counters(self.carried, counters.expand(packed))}
            return {**body, "tdf": self.config["tdf"], "pfc_wd_tdf": self.pfc_wd_tdf,
                    "profile": self.profile.source, "reloads": self.reloads, "loop": self.loop.read_drops().to_json(),
                    "pipeline": self.pipeline.pipeline, "pipeline_why": self.pipeline.why,
                    "load_balancing": self.balancing(),
                    "ecmp_groups": self.switch.group_counters()}
        if op == "clear":
            self.switch.clear_counters(now)
            self.carried = None
            return {}
        if op == "reload":
            self.profile = load_profile(req.get("profile"), self.pfc_wd_tdf)
            self.balance = load_balance(req.get("profile"), req.get("load_balancing") or
                                        self.config.get("load_balancing"), self.config["tdf"])
            self.reloads += 1
            self.rebuild(now)
            return {"profile": self.profile.source}
        if op == "impair":
            port = req["port"]
            if port not in self.cable_delay_s:
                raise ValueError(f"no port {port!r}; ports: {', '.join(self.names)}")
            delay_s = self.cable_delay_s[port] + float(req.get("delay_s", 0.0))
            rate_pct = float(req.get("rate_pct", 100.0))
            if not 0 < rate_pct <= 100:
                raise ValueError(f"rate_pct {rate_pct}: a share of the link's rate, above 0 and at most 100")
            self.switch.set_impairment(port, delay_s=delay_s, jitter_s=float(req.get("jitter_s", 0.0)),
                                       loss_pct=float(req.get("loss_pct", 0.0)),
                                       rate_bps=self.link_rate_bps[port] * rate_pct / 100)
            if req.get("silent"):
                deadlink.kill_here(self.ipr, port)
            self.specs = [replace(s, delay_s=delay_s, jitter_s=float(req.get("jitter_s", 0.0)),
                                  loss_pct=float(req.get("loss_pct", 0.0)),
                                  rate_bps=self.link_rate_bps[port] * rate_pct / 100) if s.name == port else s
                          for s in self.specs]
            return {}
        if op == "port":
            if req["port"] not in self.cable_delay_s:
                raise ValueError(f"no port {req['port']!r}; ports: {', '.join(self.names)}")
            index = self.ipr.link_lookup(ifname=req["port"])[0]
            if req.get("admin") == "down" and req["port"] not in self.parked:
                self.parked[req["port"]] = kernel_fib.port_state(self.ipr, index)
            change = {k: v for k, v in (("state", req.get("admin")), ("mtu", req.get("mtu"))) if v is not None}
            if change:
                self.ipr.link("set", index=index, **change)
            if req.get("admin") == "up" and req["port"] in self.parked:
                kernel_fib.restore_port_state(self.ipr, index, self.parked.pop(req["port"]))
            return {}
        if op == "fib_programming":
            rate = req.get("routes_per_s")
            if self.programming is not None and self.programming.pending:  # what was queued, at once
                self.fib = self.programming.pending[-1][1]
                self.switch.set_fib(self.fib)
            self.programming = FibProgramming(float(rate), self.config["tdf"], self.fib) if rate else None
            self.timer.arm()
            return {}
        if op == "links":
            dark = self.signal.dark(time.monotonic())  # not seen down by the ASIC yet: up, as it shows
            return {"links": {link.name: {"admin": "up" if link.admin_up else "down",
                                          "oper": "up" if link.up or link.name in dark else "down",
                                          "mtu": link.mtu} for link in self.rtnl.links()
                              if link.name in self.cable_delay_s}}
        if op == "fib":
            return {"routes": {prefix: [[h.port, h.mac] for h in hops] for prefix, hops in self.fib.routes.items()},
                    "local": sorted(self.fib.local),
                    # `show ip route`'s: a dump of the kernel's table, only when asked
                    **({"kernel": kernel_fib.kernel_routes(self.rtnl, self.names, self.rtnl.links())}
                       if req.get("kernel") else {}),
                    "pending": len(self.programming.pending) if self.programming else 0,
                    "down": sorted(self.down), "dark": sorted(self.signal.dark(time.monotonic()))}
        raise ValueError(f"unknown op {op!r}; ops: ping, counters, clear, reload, impair, port, links, fib, "
                         "fib_programming")

    def balancing(self) -> dict:
        return {"mode": self.balance.mode, "source": self.balance.source}

    def close(self) -> None:
        self.control.close()
        for port in self.ports.values():
            port.sock.close()


class FibTimer:
    """The interval timer set for the next FIB change or dark port due on any switch the process
    serves: its SIGALRM is written to a pipe by the interpreter's C handler at once
    (set_wakeup_fd), the loop wakes and programs the change. Not a timer thread: an ordinary
    thread the loop waits for (its start, the GIL it takes) stalls the real-time loop whenever
    another process has the CPU."""

    def __init__(self, switches: list[Switchd]):
        self.switches = switches
        self.fired, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        signal.signal(signal.SIGALRM, lambda *_: None)

    def arm(self) -> None:
        """Set for the earliest change due, or cleared when none is."""
        now = time.monotonic()
        due = [t for t in (s.next_due(now) for s in self.switches) if t is not None]
        # setitimer takes no zero for "now": zero clears it
        signal.setitimer(signal.ITIMER_REAL, max(min(due) - now, 1e-6) if due else 0.0)

    def program(self) -> None:
        os.read(self.fired, 4096)  # SIGALRM, or a SIGTERM that stops the loop: nothing due then
        for switch in self.switches:
            switch.on_timer()
        self.arm()


class SwitchGroup:
    """The agent loop's core: the pipelines of every switch one switchd serves (each its CPU's
    port and the name the loop knows each of its ports by), each on its own ports. Where every
    one runs in C, the C core runs the loop for all of them (`serve`, its `also`); where one runs
    the Python pipeline, the loop calls each through this."""

    def __init__(self, members: list[tuple[Callable[[str], str], CpuPort]]):
        self.members = members
        self.by_key = {key(name): (cpu, name) for key, cpu in members for name in cpu.port_names}
        self.single = len(members) == 1 and all(k == n for k, (_, n) in self.by_key.items())

    @property
    def port_names(self) -> list[str]:
        """Every switch's ports in its pipeline's order, as the loop knows them."""
        return [key(name) for key, cpu in self.members for name in cpu.port_names]

    @property
    def takes_arrival_time(self) -> bool:
        return all(cpu.takes_arrival_time for _, cpu in self.members)

    @property
    def serve(self):
        """The C loop over every switch, or None where one runs the Python pipeline (looked up
        at every turn: a reload may change a pipeline)."""
        (_, first), *rest = self.members
        if first.serve is None or any(cpu.serve is None for _, cpu in rest):
            return None
        also = tuple(cpu.switch for _, cpu in rest)
        return lambda *args: first.serve(*args, also)

    def take_loop_counts(self) -> tuple:
        return self.members[0][1].take_loop_counts()  # the C loop counts in its first core

    def receive(self, port: str, frame: bytes, now: float, arrival_s: float | None = None) -> None:
        cpu, name = self.by_key[port]
        cpu.receive(name, frame, now, arrival_s)

    def poll(self, now: float) -> list:
        if self.single:
            return self.members[0][1].poll(now)
        return [(key(port), frame) for key, cpu in self.members for port, frame in cpu.poll(now)]

    def next_event(self, now: float) -> float | None:
        due = [t for t in (cpu.next_event(now) for _, cpu in self.members) if t is not None]
        return min(due) if due else None


def serve(configs: list[dict]) -> None:
    """Run these switches in one loop until SIGTERM. Each switch's port is known to the loop as
    `node/port` when it serves several (two switches' ports share a name, eth1)."""
    switches: list[Switchd] = []
    try:
        build_members(configs, Switchd, switches)
        timer = FibTimer(switches)
        watchers = {s.events.fileno(): s.refresh_fib for s in switches} | {timer.fired: timer.program}
        loop = Loop(SwitchGroup([(s.key, s.cpu) for s in switches]), {k: p for s in switches for k, p in s.ports.items()},
                    [s.control for s in switches], watchers=watchers, early_s=configs[0].get("early_s", 0.0))
        if len(switches) > 1:
            loop.stats.members = [s.config["node"] for s in switches]
        for switch in switches:
            switch.loop, switch.timer = loop, timer
        loop.run()
    finally:
        for switch in switches:
            switch.close()


def main(argv: list[str]) -> int:
    return agent_main(argv, "rocelab.switch.agent", serve)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
