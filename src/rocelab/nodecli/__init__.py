"""The commands of a node's own CLI (SONiC's on a switch), run by `invoke exec NODE -- CMD`,
`invoke config NODE -- …`, `invoke shell NODE` and a lab.yml case's `commands:`.

    run(node, argv) → exit status       the command argv[0] with its arguments, on a node
    live_switch(record, name, command)  a running lab's switch node
"""

from __future__ import annotations

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
from rocelab.nodecli.node import SwitchNode
from rocelab.nodecli.sonic import COMMANDS as SWITCH_COMMANDS


def live_switch(record: LabState, name: str, command: str) -> SwitchNode:
    sock = control.socket_path(record.name, name)
    config = json.loads(sock.with_suffix(".json").read_text())
    return SwitchNode(paths.STATE_DIR / record.name, name,
                      lambda op, **fields: control.request(sock, op, **fields),
                      {p["name"]: int(round(p["rate_bps"] * record.tdf)) for p in config["ports"]}, record.tdf,
                      command)


def commands_of(record: LabState, name: str) -> dict[str, click.Command]:
    """The node's own commands: SONiC's on a switch that runs switchd, none elsewhere (yet)."""
    runs = {p["node"]: p["what"] for p in record.processes}
    return SWITCH_COMMANDS if runs.get(name) == "switchd" else {}


def run(record: LabState, name: str, argv: list[str]) -> int:
    """Run one of the node's commands as a user typed it; its exit status (click's: 0, 1
    for an error, 2 for a usage error)."""
    command = commands_of(record, name)[argv[0]]
    node = live_switch(record, name, shlex.join(argv))
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
