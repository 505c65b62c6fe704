"""Every agent of a lab asked for its counters at once: what metrics, time series, run
reports and the dashboard read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rocelab.engines import state as lab_state
from rocelab.engines.state import LabState
from rocelab.kernel import control
from rocelab.roce.nic import expand_qps
from rocelab.switch.counters import expand


@dataclass(frozen=True)
class AgentReading:
    node: str
    agent: str  # "switchd" | "nicd"
    reply: dict | None  # the agent's answer to "counters"; None when it did not answer
    error: str | None = None


@dataclass(frozen=True)
class LabReading:
    lab: str
    tdf: int
    agents: tuple[AgentReading, ...]


def read_counters(path: Path, timeout_s: float = 5.0, connections: control.Connections | None = None) -> dict:
    """An agent's `counters` reply, asked for packed: switchd answers in microseconds and nicd
    with a list per QP, and this reader builds the nested view. `connections`: kept open between
    requests (a sampler's), else one for this request."""
    ask = control.request if connections is None else connections.request
    reply = ask(path, "counters", timeout_s, packed=True)
    if "packed_counters" in reply:
        reply["counters"] = expand(reply.pop("packed_counters"))
    if reply.pop("packed_qps", False):
        reply["counters"] = expand_qps(reply["counters"])
    return reply


def read_lab(record: LabState, timeout_s: float = 2.0, connections: control.Connections | None = None) -> LabReading:
    """Ask every agent of a lab for its counters; one that does not answer reads as down."""
    agents = []
    for proc in record.processes:
        try:
            reply = read_counters(control.socket_path(record.name, proc["node"]), timeout_s, connections)
            agents.append(AgentReading(proc["node"], proc["what"], reply))
        except (control.AgentUnreachable, RuntimeError) as exc:
            agents.append(AgentReading(proc["node"], proc["what"], None, str(exc)))
    return LabReading(record.name, record.tdf, tuple(agents))


def lab_reader(lab: str | None) -> Callable[[], list[LabReading]]:
    """A reader for the collector: the named lab, or every lab up at the time of each call."""

    def read() -> list[LabReading]:
        records = lab_state.all_labs() if lab is None else [r for r in [lab_state.load(lab)] if r]
        return [read_lab(r) for r in records]

    return read
