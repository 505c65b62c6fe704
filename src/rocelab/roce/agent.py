"""nicd: the emulated RoCE NICs of one or more hosts, `python -m rocelab.roce.agent CONFIG_JSON...`.

Each configuration is one host's: its port (MAC, address, the ToR's MAC as next hop, rate ÷
TDF, cable delay × TDF), the lab's TDF, its `roce:` settings, its control socket and, where
the process does not already live there, its network namespace. Per host it runs the pure NIC
core (rocelab.roce.Nic) on the host's port through the shared agent loop, and shapes only its
own direction of the cable: a frame leaves `delay_s` after the core releases it (the switch
models the other direction).

The netns engine starts one nicd for all of a lab's hosts: on a machine of few cores an agent
waits for its turn behind the others, and every process's sleep and wake-up costs tens of
microseconds of CPU, more than a frame's work; one process wakes once for every NIC with
something due (README, "What a frame costs"). Each host keeps its own control socket, its
counters and its jobs; what the loop measures (its lateness, its wake-ups) is the process's,
reported by every host it serves with the list of them (`members`). A container engine starts
one per host container, in the container's namespace.

It holds UDP port 4791 open, unread, so the host kernel, which sees the same frames,
never answers RoCE with ICMP port unreachable; once that socket's small buffer is full
the kernel drops the copies silently.

Its loop runs in C where rocelab.kernel._loop is built (its log's first line and `ping`'s "loop"
say which); the NIC core stays Python either way.

Control ops: ping, counters (with "packed": true each QP's report is a list, as the run's
sampler asks: rocelab.roce.nic.expand_qps), clear (later counters are deltas from here, as
sonic-clear does), set_cc (a case's congestion control), nic and set_nic (the `roce:`
settings the NIC runs, read and changed live by the host's own commands), and the job ops of
rocelab.traffic.host.
"""

from __future__ import annotations

import random
import socket
import sys
import time
from collections import deque
from pathlib import Path

from rocelab.kernel.loop import Loop, Port, agent_main, build_members, open_port, shell_note
from rocelab.kernel.control import ControlServer
from rocelab.roce.config import roce_config
from rocelab.roce import Nic, dilate
from rocelab.roce.nic import expand_qps
from rocelab.ethernet import ROCE_UDP_PORT
from rocelab.traffic.host import JOB_OPS, JobHost

UDP_GUARD_RCVBUF_BYTES = 4096


class NicPort:
    """One host's NIC on its port, its job, and the cable's delay line; `port` is the name the
    loop knows the port by."""

    def __init__(self, nic: Nic, port: str, delay_s: float, jobs: JobHost):
        self.nic = nic
        self.port = port
        self.delay_s = delay_s
        self.jobs = jobs
        self._line: deque[tuple[float, bytes]] = deque()  # (leaves at, frame)
        self.max_line_frames = 0

    def poll(self, now: float) -> list[tuple[str, bytes]]:
        self.jobs.advance(now)
        line = self._line
        leave = now + self.delay_s
        line.extend((leave, frame) for frame in self.nic.poll(now))
        self.max_line_frames = max(self.max_line_frames, len(line))
        out = []
        while line and line[0][0] <= now:
            out.append((self.port, line.popleft()[1]))
        return out

    def next_event(self, now: float) -> float | None:
        due = self.nic.next_event(now)
        job = self.jobs.next_event(now)
        if job is not None and (due is None or job < due):
            due = job
        if self._line and (due is None or self._line[0][0] < due):
            due = self._line[0][0]
        return due


def _subtract(value, base):
    """`value` minus `base`, leaf by leaf (numbers and lists of numbers); the rest as is."""
    if base is None:  # nothing to take away (a QP made since the clear): as is, not rebuilt
        return value
    if isinstance(value, dict):
        base = base if isinstance(base, dict) else {}
        return {k: _subtract(v, base.get(k)) for k, v in value.items()}
    if isinstance(value, list):
        base = base if isinstance(base, list) and len(base) == len(value) else [None] * len(value)
        return [_subtract(v, b) for v, b in zip(value, base)]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(base, (int, float)):
        return value - base
    return value


class NicGroup:
    """The agent loop's core: the NICs of every host one nicd serves, each on its own port.

    A wake-up touches only the NICs it concerns: one that received a frame, one whose next event
    is due, one a control request reached (`touch`); the others' next events are kept from when
    they last changed, so five idle NICs cost a wake-up nothing."""

    def __init__(self, members: list[NicPort]):
        self.by_port = {core.port: core for core in members}
        self.members = members
        self.due: dict[NicPort, float | None] = {core: None for core in members}
        self.touched: set[NicPort] = set(members)
        self.earliest: float | None = None  # of `due`, kept while no NIC is touched

    def touch(self, core: NicPort) -> None:
        self.touched.add(core)

    def receive(self, port: str, frame: bytes, now: float) -> None:
        # The loop polls after every round of frames it reads, at the same `now`: completions
        # these frames caused release the job's next step there, once per round, not per frame.
        core = self.by_port[port]
        core.nic.receive(frame, now)
        self.touched.add(core)

    def poll(self, now: float) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        due, touched = self.due, self.touched
        for core in self.members:
            t = due[core]
            if core in touched or (t is not None and t <= now):
                out += core.poll(now)
                touched.add(core)
        return out

    def next_event(self, now: float) -> float | None:
        if self.touched:
            due = self.due
            for core in self.touched:
                due[core] = core.next_event(now)
            self.touched.clear()
            earliest = None
            for t in due.values():
                if t is not None and (earliest is None or t < earliest):
                    earliest = t
            self.earliest = earliest
        return self.earliest


class Nicd:
    """One host's NIC, its jobs and its control socket. Build it inside the host's network
    namespace: its port and its UDP guard are opened there."""

    def __init__(self, config: dict, port_key: str, clock=time.monotonic):
        port = config["ports"][0]
        self.node = config["node"]
        self.tdf = config["tdf"]
        self.ip = port["address"].split("/")[0]
        self.roce = config.get("roce") or {}
        self.settings = self.roce  # what the NIC runs now: its own, or a case's set_cc, or a host command's
        nic_config = dilate(roce_config(self.roce), config["tdf"])
        self.nic = Nic(port["mac"], self.ip, port["rate_bps"], nic_config, rng=random.Random())
        self.jobs = JobHost(self.nic, ip=self.ip, port_rate_bps=port["rate_bps"], next_hop_mac=port["peer_mac"],
                            clock=clock)
        self.core = NicPort(self.nic, port_key, port["delay_s"], self.jobs)
        self._baseline: dict = {}
        self.port: Port = open_port(port["name"])
        self.guard = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.guard.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_GUARD_RCVBUF_BYTES)
        self.guard.bind(("0.0.0.0", ROCE_UDP_PORT))
        self.control = ControlServer(Path(config["socket"]), self.answer)
        self.loop: Loop | None = None  # set by serve(): the loop and the core it shares
        self.group: NicGroup | None = None

    def answer(self, req: dict) -> dict:
        """A control request, after which the loop looks at this NIC again (a job may have started)."""
        try:
            return self.handle(req)
        finally:
            self.group.touch(self.core)

    def handle(self, req: dict) -> dict:
        op = req["op"]
        if op == "ping":
            config = self.nic.config
            return {"node": self.node, "backend": "emulated", "port_rate_bps": self.nic.port_rate_bps,
                    "pmtu_bytes": config.pmtu_bytes, "cc_algorithm": config.cc_algorithm,
                    "scheduling": self.loop.stats.scheduling, "loop": self.loop.shell}
        if op == "counters":
            # The baseline is packed too: the difference is taken leaf by leaf, the same leaves either way.
            counters = _subtract(self.nic.counters(self.loop.now(), packed=True), self._baseline)
            packed = bool(req.get("packed"))
            return {"node": self.node, "counters": counters if packed else expand_qps(counters),
                    **({"packed_qps": True} if packed else {}), "loop": self.loop.read_drops().to_json(),
                    "tdf": self.tdf, "delay_line": {"max_frames": self.core.max_line_frames}, "job": self.jobs.status()}
        if op == "set_cc":
            # A lab case switches congestion control (DCQCN vs none) and DCQCN's parameter set for
            # the QPs it connects next; None: this NIC's own (the lab's, over its host's NIC files).
            chosen = {**self.roce, **({"dcqcn": req["dcqcn"]} if req.get("dcqcn") else {})}
            for key, field in (("algorithm", "cc_algorithm"), ("receive_order", "receive_order")):
                if req.get(key):
                    chosen[field] = req[key]
            self._apply(chosen)
            return {"cc_algorithm": self.nic.config.cc_algorithm, "dcqcn": req.get("dcqcn"),
                    "receive_order": self.nic.config.receive_order}
        if op == "nic":
            return {"settings": self.settings, "port_rate_bps": self.nic.port_rate_bps * self.tdf}
        if op == "set_nic":
            # A host's own commands (mlnx_qos, sysfs, cma_roce_tos) change the running NIC: the
            # settings join the NIC's own, so a later case's set_cc keeps them.
            self._apply({**self.settings, **req["settings"]})
            self.roce = {**self.roce, **req["settings"]}
            return {"settings": self.settings}
        if op == "clear":
            self.nic.clear_reorder_distances()
            self._baseline = self.nic.counters(self.loop.now(), packed=True)
            return {}
        if op == "job_prepare":  # with the NIC's (dilated) retransmission timeout: the job's stall rule waits for it
            return {**self.jobs.handle(req), "retransmit_timeout_s": self.nic.config.retransmit_timeout_s}
        if op in JOB_OPS:
            return self.jobs.handle(req)
        raise ValueError(f"unknown op {op!r}; ops: ping, counters, set_cc, nic, set_nic, clear, {', '.join(JOB_OPS)}")

    def _apply(self, settings: dict) -> None:
        """Run the NIC with these `roce:` settings (production units) from now on; ValueError,
        and nothing changes, when they make no NIC."""
        self.nic.reconfigure(dilate(roce_config(settings), self.tdf))
        self.settings = settings

    def close(self) -> None:
        self.control.close()
        self.guard.close()
        self.port.sock.close()


def serve(configs: list[dict], clock=time.monotonic) -> None:
    """Run the NICs of these hosts in one loop until SIGTERM. Each host's port is known to the
    loop as `node/port` when it serves several (two hosts' ports share a name, eth1)."""
    nicds: list[Nicd] = []
    try:
        build_members(configs, lambda config, key: Nicd(config, key(config["ports"][0]["name"]), clock), nicds)
        group = NicGroup([n.core for n in nicds])
        loop = Loop(group, {n.core.port: n.port for n in nicds}, [n.control for n in nicds], clock=clock,
                    early_s=configs[0].get("early_s", 0.0))
        if len(nicds) > 1:
            loop.stats.members = [n.node for n in nicds]
        for nicd in nicds:
            nicd.loop, nicd.group = loop, group
        print(f"nicd {', '.join(n.node for n in nicds)}: {shell_note(loop.shell)}", file=sys.stderr, flush=True)
        loop.run()
    finally:
        for nicd in nicds:
            nicd.close()


def main(argv: list[str]) -> int:
    return agent_main(argv, "rocelab.roce.agent", serve)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
