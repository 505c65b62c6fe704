"""The clab engine: `containerlab deploy` of the lab's `.clab.yml`, then the same node
configuration and agents as every engine; `down` is `containerlab destroy --cleanup`.

    invoke up LAB --engine clab

containerlab creates the containers and their veth pairs; rocelab then gives each veth end
the MAC and MTU of its topology (the static neighbours name those MACs). Network OS nodes
(sonic-vs, arista_ceos) start from the configurations rocelab.engines.nos rendered beside the file.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pyroute2 import IPRoute

from rocelab.engines import dockercli
from rocelab.engines.containers import ContainerEngine, topology_file
from rocelab.errors import InputError, Problem
from rocelab.model.lab import Lab
from rocelab.engines.state import LabState
from rocelab.model.topology import Fabric

INSTALL_HINT = ('install containerlab (bash -c "$(curl -sL https://get.containerlab.dev)", or a release '
                "package from github.com/srl-labs/containerlab), or bring the lab up with --engine docker "
                "(the same .clab.yml on Docker directly) or --engine netns")


class ContainerlabFailed(RuntimeError):
    pass


def containerlab(*args: str) -> None:
    done = subprocess.run(["containerlab", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ContainerlabFailed(f"containerlab {args[0]} failed (exit {done.returncode}):\n"
                                 f"{(done.stderr or done.stdout).strip()[-2000:]}")


class ClabEngine(ContainerEngine):
    name = "clab"
    runs_nos = True

    def _require(self, lab: Lab) -> None:
        if shutil.which("containerlab") is None:
            raise InputError([Problem("--engine clab", "", "needs containerlab, which is not installed", INSTALL_HINT)])
        dockercli.require_docker("--engine clab", also="or bring the lab up with --engine netns")

    def _deploy(self, lab: Lab, topology: Path) -> None:
        containerlab("deploy", "--topo", str(topology))

    def _make_links(self, fabric: Fabric, handles: dict[str, IPRoute], ns_of: dict[str, str]) -> None:
        for link in fabric.links:
            for port in (link.a, link.b):
                ipr = handles[port.node]
                ipr.link("set", index=ipr.link_lookup(ifname=port.name)[0], address=port.mac, mtu=link.mtu)

    def _destroy(self, record: LabState) -> None:
        topology = topology_file(record)
        if topology is not None and shutil.which("containerlab") is not None:
            containerlab("destroy", "--cleanup", "--topo", str(topology))
        dockercli.remove(self.containers(record))  # what a deploy stopped half-way left
