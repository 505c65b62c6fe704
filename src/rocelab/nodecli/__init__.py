"""The commands of a node's own CLI (SONiC's on a switch, NVIDIA's and perftest's on a host),
run by `invoke exec NODE -- CMD`, `invoke config NODE -- …`, `invoke shell NODE` and a lab.yml
case's `commands:`.

    run(node, argv) → exit status       the command argv[0] with its arguments, on a node
    live_switch(record, name, command)  a running lab's switch node (an EosNode where it runs EOS's config)
    live_host(record, name, command)    a running lab's host node (its nicd)
    start_ports(record, name, ports)    a switch's shut ports started again through its running config
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import sys

import click

from rocelab import paths
from rocelab.engines import frr
from rocelab.engines.state import LabState
from rocelab.kernel import control
from rocelab.model.lab import load_lab
from rocelab.nodecli.eos import COMMANDS as EOS_COMMANDS
from rocelab.nodecli.host import COMMANDS as HOST_COMMANDS
from rocelab.nodecli.node import EosNode, HostNode, SwitchNode
from rocelab.nodecli.sonic import COMMANDS as SWITCH_COMMANDS


def _agent_config(record: LabState, name: str) -> dict:
    return json.loads(control.socket_path(record.name, name).with_suffix(".json").read_text())


def live_switch(record: LabState, name: str, command: str) -> SwitchNode:
    sock = control.socket_path(record.name, name)
    config = _agent_config(record, name)
    args = (paths.STATE_DIR / record.name, name, lambda op, **fields: control.request(sock, op, **fields),
            {p["name"]: int(round(p["rate_bps"] * record.tdf)) for p in config["ports"]}, record.tdf, command)
    if config.get("nos") == "eos":  # its EOS running-config, read as `up` read it (the lab's profiles: entry)
        return EosNode(*args, load_lab(record.name).node_nos[name])
    # SONiC's `show ip route` is FRR's, where the switch runs it.
    runs_frr = name in record.routing.get("switches", {})
    return SwitchNode(*args, vtysh=functools.partial(frr.vtysh, record.name, name) if runs_frr else None)


def start_ports(record: LabState, name: str, ports: list[str]) -> None:
    """A switch's ports (eth3, …) admin up through its running config, as `config interface
    startup` would start them, off the lab's time line (a case starting from the lab as built)."""
    switch = live_switch(record, name, "")
    doc, names = switch.running(), switch.names()
    for port in ports:
        doc["PORT"][names[port]]["admin_status"] = "up"
    switch.commit(doc, record=False)


def live_host(record: LabState, name: str, command: str) -> HostNode:
    port = record.node(name).interfaces[0]
    hosts = {i.address.split("/")[0]: n.name for n in record.nodes if n.role == "host" for i in n.interfaces}
    return HostNode(paths.STATE_DIR / record.name, name,
                    lambda op, **fields: control.request(control.socket_path(record.name, name), op, **fields),
                    port.name, port.address, port.mac, command, record, hosts)


def _agent_of(record: LabState, name: str) -> str | None:
    return {p["node"]: p["what"] for p in record.processes}.get(name)


def commands_of(record: LabState, name: str) -> dict[str, click.Command]:
    """The node's own commands: on a switch that runs switchd, SONiC's (EOS's where its lab.yml
    entry is an EOS running-config), the NIC's on a host that runs nicd, none elsewhere (yet)."""
    agent = _agent_of(record, name)
    if agent == "switchd":
        return EOS_COMMANDS if _agent_config(record, name).get("nos") == "eos" else SWITCH_COMMANDS
    return HOST_COMMANDS if agent == "nicd" else {}


def run(record: LabState, name: str, argv: list[str]) -> int:
    """Run one of the node's commands as a user typed it; its exit status (click's: 0, 1
    for an error, 2 for a usage error)."""
    command = commands_of(record, name)[argv[0]]
    live = live_switch if _agent_of(record, name) == "switchd" else live_host
    node = live(record, name, shlex.join(argv))
    try:
        command.main(argv[1:], prog_name=argv[0], obj=node, standalone_mode=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (control.AgentUnreachable, RuntimeError) as exc:  # switchd is gone or refused
        click.echo(f"Error: {exc}", err=True)
        return 1
    return 0


def write_path_dir(record: LabState, name: str) -> str:
    """A folder of the node's commands for a shell's PATH: one small script each, running
    this Python with this rocelab (its PYTHONPATH included)."""
    folder = paths.STATE_DIR / record.name / name / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    pythonpath = os.environ.get("PYTHONPATH")
    env = f"PYTHONPATH={shlex.quote(pythonpath)} " if pythonpath else ""
    scripts = {command: f'exec env {env}{shlex.quote(sys.executable)} -m rocelab.nodecli {command} "$@"'
               for command in commands_of(record, name)}
    # The real vtysh: never this folder's own (PATH holds it once a node's shell has run).
    vtysh = shutil.which("vtysh", path=os.pathsep.join(
        p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p != str(folder)))
    if name in record.routing.get("switches", {}) and vtysh:
        # FRR's shell, reaching this switch's daemons by their sockets in the lab's state folder.
        scripts["vtysh"] = f'exec {shlex.quote(vtysh)} --vty_socket {shlex.quote(str(frr.folder(record.name, name)))} "$@"'
    for command, line in scripts.items():
        script = folder / command
        script.write_text(f"#!/bin/sh\n{line}\n")
        script.chmod(0o755)
    return str(folder)
