"""Engines build a lab's nodes and links: `netns` (embedded default), `clab` (containerlab)
and `docker` (the same containers on Docker Engine directly, where containerlab is missing).

An engine is a small object with up / down / exec; it is chosen by name from ENGINES.
"""

from __future__ import annotations

from typing import Protocol

from rocelab.engines.clab import ClabEngine
from rocelab.engines.docker import DockerEngine
from rocelab.engines.frr import Daemons
from rocelab.engines.netns import NetnsEngine
from rocelab.model.lab import Lab
from rocelab.model.tdf import TdfChoice
from rocelab.model.topology import Node
from rocelab.registry import Registry
from rocelab.engines.state import LabState


class AgentProcess(Protocol):
    """A started agent: a subprocess.Popen on the netns engine, a `docker exec`ed one in a container."""

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class Engine(Protocol):
    name: str
    shares_agents: bool  # one agent process may serve several nodes (nicd: every host)
    frr_daemons: Daemons  # where a switch's FRR runs (routing: bgp)

    def up(self, lab: Lab, tdf_choice: TdfChoice | None = None) -> LabState: ...

    def down(self, state: LabState) -> None: ...

    def exec(self, state: LabState, node: str, argv: list[str]) -> int: ...

    def alive(self, state: LabState) -> dict[str, bool]: ...

    def spawn_agent(self, lab: Lab, node: Node, ns: str, module: str) -> AgentProcess:
        """Start an agent module in a node (its configuration written beside its socket)."""


def builtin_engines() -> Registry[Engine]:
    engines: Registry[Engine] = Registry("engine")
    engines.register("netns", NetnsEngine())
    engines.register("clab", ClabEngine())
    engines.register("docker", DockerEngine())
    return engines
