"""What the docker and clab engines share: rocelab's nodes as containers, deployed from the
lab's generated `<lab>.clab.yml`, and everything after deployment done by NetnsEngine's own
code (sysctls, addresses, static neighbours, ECMP routes, offloads, agents).

The two differ only in deploy and destroy. Each container's network namespace is attached
at /run/netns/<lab>.<node>, the name the netns engine gives its namespaces, so the CLI,
probes and tests reach a node the same way on every engine. Agents run inside the
containers (`docker exec`) with the lab's state folder bind-mounted at the same path: their
sockets, configuration files and logs are where status/show/probe/run look for them.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from pyroute2 import netns as pyroute2_netns

from rocelab.kernel import control

from rocelab.engines import dockercli

from rocelab.engines import frr, images

from rocelab import paths
from rocelab.engines.clabfile import container_name, write_clab
from rocelab.engines.netns import (COMMON_SYSCTLS, NetnsEngine, require_root,
                                   write_agent_config)
from rocelab.kernel.netns import exists, pids_in, zombie
from rocelab.model.lab import Lab
from rocelab.model.tdf import TdfChoice
from rocelab.engines.state import LabState
from rocelab.model.topology import Node

AGENT_FOUND_TIMEOUT_S = 5.0
AGENT_CAPABILITIES = ("NET_RAW", "NET_ADMIN", "SYS_NICE")


def binds(lab: Lab) -> list[str]:
    """The lab's state folder (read-write) and the folders its profiles live in (read-only),
    each at its own path: agent configurations and `invoke run`'s profile reloads name them."""
    state = (paths.STATE_DIR / lab.name).resolve()
    root = paths.project_root()
    profiles = (lab.profile, *lab.node_profiles.values())
    shared = {root} | {p.resolve().parent for p in profiles if p and not p.resolve().is_relative_to(root)}
    return [f"{state}:{state}", *(f"{d}:{d}:ro" for d in sorted(shared))]


def linux_kind(lab: Lab | None = None) -> dict:
    """What rocelab's own nodes need, set once on containerlab's `linux` kind: the netns engine's
    sysctls (IPv6 off before any interface exists) and the capabilities the agents use (raw
    sockets; NET_ADMIN for their large receive buffers; SYS_NICE for their priority). Not
    `privileged`: a machine whose own bounding set lacks a capability (as this project's CI
    lacks CAP_SYS_RESOURCE) cannot start one. Given the lab, also what deploying it on this
    machine needs: the binds above, and no pulling (rocelab's images exist only where
    `invoke images` built them)."""
    linux = {"sysctls": {key.replace("/", "."): value for key, value in COMMON_SYSCTLS.items()},
             "cap-add": list(AGENT_CAPABILITIES)}
    if lab is not None:
        linux = {"binds": binds(lab), **linux, "image-pull-policy": "Never"}
    return linux


def write_deployment(lab: Lab, workdir: Path) -> Path:
    """The lab's .clab.yml (rocelab.engines.clabfile) as this machine deploys it."""
    return write_clab(lab, workdir, kinds={"linux": linux_kind(lab)})


def topology_file(record: LabState) -> Path | None:
    return next((paths.STATE_DIR / record.name).glob("*.clab.yml"), None)


class ContainerAgent:
    """An agent started with `docker exec --detach`: found by its command line among the
    processes of the node's namespace, with Popen's `pid` and `poll()` (pid -1: it was gone
    before it was seen; its exit status says why)."""

    def __init__(self, pid: int, exit_file: Path):
        self.pid, self.exit_file = pid, exit_file

    @classmethod
    def find(cls, ns: str, argv: list[str], exit_file: Path) -> "ContainerAgent":
        deadline = time.monotonic() + AGENT_FOUND_TIMEOUT_S
        while time.monotonic() < deadline:
            for pid in pids_in([ns]):
                try:
                    if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]:
                        return cls(pid, exit_file)
                except OSError:
                    continue
            if exit_file.exists():
                break
            time.sleep(0.02)
        return cls(-1, exit_file)

    def poll(self) -> int | None:
        """None while it runs; its exit status once the shell that started it wrote it down."""
        if self.pid > 0 and Path(f"/proc/{self.pid}").exists() and not zombie(self.pid):
            return None
        try:
            return int(self.exit_file.read_text())
        except (OSError, ValueError):
            return None  # not written yet: the engine's start timeout bounds the wait


def exec_detached(lab: str, node: str, ns: str, argv: list[str], log: Path) -> ContainerAgent:
    """argv started inside the node's container (`docker exec --detach`), its output to `log` and
    its exit status beside it (log.exit), both in the lab's bind-mounted state folder."""
    exit_file = log.with_suffix(".exit")
    exit_file.unlink(missing_ok=True)
    script = f"{shlex.join(argv)} >{shlex.quote(str(log))} 2>&1; echo $? >{shlex.quote(str(exit_file))}"
    dockercli.docker("exec", "--detach", container_name(lab, node), "sh", "-c", script)
    return ContainerAgent.find(ns, argv, exit_file)


class ContainerDaemons:
    """The switch image's FRR inside the switch's container, as SONiC runs it in its bgp
    container: its files in the lab's state folder (bind-mounted at the same path), so this
    machine's vtysh reaches the daemons by their sockets as on the netns engine."""

    on_this_machine = False

    @staticmethod
    def prepare_frr(lab: str, node: str) -> tuple[int, int]:
        # FRR's own socket folder is the switch's: `vtysh` typed in the container finds its daemons.
        ids = dockercli.docker("exec", container_name(lab, node), "sh", "-c",
                               f"rm -rf /run/frr && ln -s {shlex.quote(str(frr.folder(lab, node)))} /run/frr && "
                               f"id -u {frr.FRR_USER} && id -g {frr.FRR_USER}").split()
        return int(ids[0]), int(ids[1])

    @staticmethod
    def launch_frr(lab: str, node: str, ns: str, argv: list[str], out: Path) -> ContainerAgent:
        return exec_detached(lab, node, ns, argv, out)


class ContainerEngine(NetnsEngine):
    """Subclasses say how to check their prerequisites, deploy a .clab.yml and destroy it."""

    shares_agents = False  # each node's agent runs in its own container
    frr_daemons = ContainerDaemons()

    def _require(self, lab: Lab) -> None:
        raise NotImplementedError

    def _deploy(self, lab: Lab, topology: Path) -> None:
        raise NotImplementedError

    def _destroy(self, record: LabState) -> None:
        raise NotImplementedError

    def up(self, lab: Lab, tdf_choice: TdfChoice | None = None) -> LabState:
        # Every prerequisite before the lab is recorded: a missing tool leaves nothing behind.
        self._require(lab)
        require_root("invoke up")
        images.ensure_images()
        return super().up(lab, tdf_choice)

    def _make_nodes(self, lab: Lab, record: LabState) -> None:
        self._deploy(lab, write_deployment(lab, paths.STATE_DIR / lab.name))
        for node in record.nodes:
            pyroute2_netns.attach(node.netns, dockercli.container_pid(container_name(lab.name, node.name)))

    def spawn_agent(self, lab: Lab, node: Node, ns: str, module: str) -> ContainerAgent:
        config = write_agent_config(lab, node)
        return exec_detached(lab.name, node.name, ns, ["python", "-m", module, str(config)],
                             control.log_path(lab.name, node.name))

    def down(self, record: LabState) -> None:
        """The containers first (their processes go with them), then the namespace entries,
        the state folder and the record, as on the netns engine."""
        dockercli.require_docker(f"invoke down {record.name}")
        self._destroy(record)
        super().down(record)

    def exec(self, record: LabState, node: str, argv: list[str]) -> int:
        tty = ["--tty"] if sys.stdin.isatty() else []
        return subprocess.call(["docker", "exec", "--interactive", *tty, container_name(record.name, node), *argv])

    def alive(self, record: LabState) -> dict[str, bool]:
        up = dockercli.running(self.containers(record))
        return {n.name: container_name(record.name, n.name) in up and exists(n.netns)
                for n in record.nodes}

    @staticmethod
    def containers(record: LabState) -> list[str]:
        return [container_name(record.name, n.name) for n in record.nodes]
