"""nicd: the emulated RoCE NIC of one host, `python -m rocelab.roce.agent CONFIG_JSON`.

The netns engine starts it inside the host's namespace with the host's port (MAC,
address, the ToR's MAC as next hop, rate ÷ TDF, cable delay × TDF), the lab's TDF and
its `roce:` settings. It runs the pure NIC core (rocelab.roce.Nic) on eth1 through the
shared agent loop, and shapes only its own direction of the cable: a frame leaves
`delay_s` after the core releases it (the switch models the other direction).

It holds UDP port 4791 open, unread, so the host kernel, which sees the same frames,
never answers RoCE with ICMP port unreachable; once that socket's small buffer is full
the kernel drops the copies silently.

Control ops: ping, counters, clear (later counters are deltas from here, as
sonic-clear does), set_cc (a case's congestion control), nic and set_nic (the `roce:`
settings the NIC runs, read and changed live by the host's own commands), and the job ops of
rocelab.traffic.host.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import time
from collections import deque
from dataclasses import asdict
from pathlib import Path

from rocelab.kernel.loop import Loop, open_port
from rocelab.kernel.control import ControlServer
from rocelab.roce.config import roce_config
from rocelab.roce import Nic, dilate
from rocelab.ethernet import ROCE_UDP_PORT
from rocelab.traffic.host import JOB_OPS, JobHost

UDP_GUARD_RCVBUF_BYTES = 4096


class NicPort:
    """The agent loop's core: the NIC on one port, its job, and the cable's delay line."""

    def __init__(self, nic: Nic, port: str, delay_s: float, jobs: JobHost):
        self.nic = nic
        self.port = port
        self.delay_s = delay_s
        self.jobs = jobs
        self._line: deque[tuple[float, bytes]] = deque()  # (leaves at, frame)
        self.max_line_frames = 0

    def receive(self, port: str, frame: bytes, now: float) -> None:
        # The loop polls after every round of frames it reads, at the same `now`: completions
        # these frames caused release the job's next step there, once per round, not per frame.
        self.nic.receive(frame, now)

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
        due = [t for t in (self.nic.next_event(now), self.jobs.next_event(now)) if t is not None]
        if self._line:
            due.append(self._line[0][0])
        return min(due) if due else None


def _subtract(value, base):
    """`value` minus `base`, leaf by leaf (numbers and lists of numbers); the rest as is."""
    if isinstance(value, dict):
        base = base if isinstance(base, dict) else {}
        return {k: _subtract(v, base.get(k)) for k, v in value.items()}
    if isinstance(value, list):
        base = base if isinstance(base, list) and len(base) == len(value) else [None] * len(value)
        return [_subtract(v, b) for v, b in zip(value, base)]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(base, (int, float)):
        return value - base
    return value


class Nicd:
    def __init__(self, config: dict, clock=time.monotonic):
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
        self.core = NicPort(self.nic, port["name"], port["delay_s"], self.jobs)
        self._baseline: dict = {}
        self.guard = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.guard.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_GUARD_RCVBUF_BYTES)
        self.guard.bind(("0.0.0.0", ROCE_UDP_PORT))
        self.control = ControlServer(Path(config["socket"]), self.handle)
        self.loop = Loop(self.core, {port["name"]: open_port(port["name"])}, self.control, clock=clock,
                         early_s=config.get("early_s", 0.0))

    def handle(self, req: dict) -> dict:
        op = req["op"]
        if op == "ping":
            config = self.nic.config
            return {"node": self.node, "backend": "emulated", "port_rate_bps": self.nic.port_rate_bps,
                    "pmtu_bytes": config.pmtu_bytes, "cc_algorithm": config.cc_algorithm,
                    "scheduling": self.loop.stats.scheduling}
        if op == "counters":
            return {"node": self.node, "counters": _subtract(self.nic.counters(), self._baseline),
                    "loop": asdict(self.loop.read_drops()), "tdf": self.tdf, "delay_line": {"max_frames": self.core.max_line_frames},
                    "job": self.jobs.status()}
        if op == "set_cc":
            # A lab case switches congestion control (DCQCN vs none) and DCQCN's parameter set for
            # the QPs it connects next; None: this NIC's own (the lab's, over its host's NIC files).
            chosen = {**self.roce, **({"dcqcn": req["dcqcn"]} if req.get("dcqcn") else {})}
            if req.get("algorithm"):
                chosen["cc_algorithm"] = req["algorithm"]
            self._apply(chosen)
            return {"cc_algorithm": self.nic.config.cc_algorithm, "dcqcn": req.get("dcqcn")}
        if op == "nic":
            return {"settings": self.settings, "port_rate_bps": self.nic.port_rate_bps * self.tdf}
        if op == "set_nic":
            # A host's own commands (mlnx_qos, sysfs, cma_roce_tos) change the running NIC: the
            # settings join the NIC's own, so a later case's set_cc keeps them.
            self._apply({**self.settings, **req["settings"]})
            self.roce = {**self.roce, **req["settings"]}
            return {"settings": self.settings}
        if op == "clear":
            self._baseline = self.nic.counters()
            return {}
        if op in JOB_OPS:
            return self.jobs.handle(req)
        raise ValueError(f"unknown op {op!r}; ops: ping, counters, set_cc, nic, set_nic, clear, {', '.join(JOB_OPS)}")

    def _apply(self, settings: dict) -> None:
        """Run the NIC with these `roce:` settings (production units) from now on; ValueError,
        and nothing changes, when they make no NIC."""
        self.nic.reconfigure(dilate(roce_config(settings), self.tdf))
        self.settings = settings

    def run(self) -> None:
        try:
            self.loop.run()
        finally:
            self.control.close()
            self.guard.close()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m rocelab.roce.agent CONFIG_JSON", file=sys.stderr)
        return 2
    Nicd(json.loads(Path(argv[0]).read_text())).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
