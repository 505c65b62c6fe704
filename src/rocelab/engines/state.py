"""What a running lab owns, recorded before it is made so that `down` removes exactly that.

One JSON file per lab under paths.STATE_DIR. `up` writes the plan (status "creating")
before it creates anything, then "up" when done; `down` reads it, removes what exists of
it, and deletes the file last. So a crash at any point of `up` leaves a record that
`down` can finish from (STYLE.md 10: delete only what the lab's state records).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rocelab import paths


@dataclass
class InterfaceState:
    name: str
    address: str
    peer: str  # "node:port"
    mac: str
    # Its link's production rate and cable (m): the physics the headroom judgement weighs drops
    # against (rocelab.runtime.fidelity); 0 in the state of a lab brought up before they were kept.
    rate_bps: float = 0.0
    cable_m: float = 0.0


@dataclass
class NodeState:
    name: str
    role: str
    netns: str
    interfaces: list[InterfaceState] = field(default_factory=list)


@dataclass
class LabState:
    name: str
    engine: str
    source: str
    dataplane: str
    tdf: int
    status: str  # creating | up
    nodes: list[NodeState] = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)  # {"node", "pid", "what"}
    nic: str = "none"  # the hosts' NIC backend (rocelab.model.kinds), so no one re-reads lab.yml
    tdf_choice: dict = field(default_factory=dict)  # rocelab.model.tdf.TdfChoice: how the TDF was chosen, and why
    # One MTU frame's time on the fastest emulated link: how late an agent may run an event
    # before the emulation stops being faithful (rocelab.runtime.fidelity).
    fidelity_bound_s: float = 0.0
    # {"mode": "static"}, or {"mode": "bgp", "switches": {name: {"how", "notes"}}, "daemons": [{"node", "pid",
    # "what"}]}: FRR's daemons are no agents (no control socket), so they are not in `processes`.
    routing: dict = field(default_factory=lambda: {"mode": "static"})
    awake: list[int] = field(default_factory=list)  # pids of rocelab.kernel.awake, one per CPU

    @property
    def routes_on_frr(self) -> bool:
        """FRR's BGP runs on the lab's switches (`routing: bgp`)."""
        return self.routing.get("mode") == "bgp"

    @property
    def namespaces(self) -> list[str]:
        return [n.netns for n in self.nodes]

    def node(self, name: str) -> NodeState:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "LabState":
        nodes = [NodeState(n["name"], n["role"], n["netns"], [InterfaceState(**i) for i in n["interfaces"]])
                 for n in data.get("nodes", [])]
        return cls(data["name"], data["engine"], data["source"], data["dataplane"], data["tdf"],
                   data["status"], nodes, list(data.get("processes", [])), data.get("nic", "none"),
                   dict(data.get("tdf_choice", {})), float(data.get("fidelity_bound_s", 0.0)),
                   dict(data.get("routing", {"mode": "static"})), list(data.get("awake", [])))


def state_file(lab: str) -> Path:
    return paths.STATE_DIR / f"{lab}.json"


def save(state: LabState) -> None:
    paths.STATE_DIR.mkdir(parents=True, exist_ok=True)
    target = state_file(state.name)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=1))
    os.replace(tmp, target)  # atomic: a reader never sees half a file


def load(lab: str) -> LabState | None:
    try:
        return LabState.from_json(json.loads(state_file(lab).read_text()))
    except FileNotFoundError:
        return None


def remove(lab: str) -> None:
    state_file(lab).unlink(missing_ok=True)


def all_labs() -> list[LabState]:
    if not paths.STATE_DIR.is_dir():
        return []
    labs = []
    for f in sorted(paths.STATE_DIR.glob("*.json")):
        try:
            labs.append(LabState.from_json(json.loads(f.read_text())))
        except (OSError, ValueError, KeyError):
            continue
    return labs
