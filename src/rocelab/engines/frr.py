"""FRR in a switch namespace: its files under the lab's state folder, its daemons, its convergence.

Each switch runs zebra, bgpd and (where a session asks for BFD) bfdd from Debian's `frr`
package, inside its namespace, every path explicit so that no two switches share a socket and
nothing lands in /etc/frr or /var/run/frr: `<state>/<lab>/<switch>/frr/` holds the daemons'
files (rendered by rocelab.routing.frr), pid files, vty sockets, zebra's zserv socket, bfdd's
control socket and logs. The daemons drop to the `frr` user, as the package runs them, so the
folder is theirs. TCP vty ports are off (`-P 0`): vtysh reaches a daemon by its socket.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping, Protocol

from rocelab import paths
from rocelab.errors import InputError, Problem
from rocelab.kernel.netns import popen_in, stop
from rocelab.routing.bgp import BgpConfig
from rocelab.routing.frr import FINISH_BOOT, render, runs_bfd

FRR_DAEMONS_DIR = Path("/usr/lib/frr")
FRR_USER = "frr"
FRR_PACKAGE = "install Debian's frr package (apt-get install frr)"
FRR_PACKAGE_HINT = f"{FRR_PACKAGE}, or run the lab with --routing static"
ZEBRA_START_TIMEOUT_S = 10.0
LOG_TAIL_CHARS = 2000
VTYSH_TIMEOUT_S = 10.0
DAEMON_STOP_TIMEOUT_S = 10.0  # SIGTERM, then SIGKILL


class FrrFailed(RuntimeError):
    pass


def missing(daemons_here: bool = True) -> list[str]:
    """What of FRR this machine lacks: its daemons (where they run on this machine) and vtysh
    (which reads every engine's sessions)."""
    lacks = [] if shutil.which("vtysh") else ["vtysh"]
    if daemons_here:
        lacks += [d for d in ("zebra", "bgpd", "bfdd") if not os.access(FRR_DAEMONS_DIR / d, os.X_OK)]
        try:
            pwd.getpwnam(FRR_USER)
        except KeyError:
            lacks.append(f"the {FRR_USER} user")
    return lacks


def require_frr(what: str, lacks: list[str]) -> None:
    """An InputError (exit 2) naming the package when FRR lacks something (`missing`'s list)."""
    if lacks:
        raise InputError([Problem(what, "routing: bgp", f"needs FRR, and this machine lacks {', '.join(lacks)}",
                                  FRR_PACKAGE_HINT)])


def folder(lab: str, node: str) -> Path:
    return paths.STATE_DIR / lab / node / "frr"


def write_files(lab: str, node: str, config: BgpConfig, owner: tuple[int, int]) -> Path:
    """The daemons' configuration files, in a folder the frr user (uid, gid `owner`) owns."""
    where = folder(lab, node)
    where.mkdir(parents=True, exist_ok=True)
    # The frr user must pass through the state folders to reach its own (a private STATE_DIR,
    # as the tests make, is 0700): search permission only, never a listing.
    for parent in (paths.STATE_DIR, paths.STATE_DIR / lab, where.parent):
        parent.chmod(parent.stat().st_mode | stat.S_IXOTH)
    os.chown(where, *owner)
    for name, text in render(config).items():
        (where / name).write_text(text)
    return where


class Daemons(Protocol):
    """Where a switch's daemons run: this machine's FRR in the switch's namespace (the netns
    engine), or the image's inside the switch's container (docker, clab)."""

    on_this_machine: bool  # this machine's frr package runs them (so it must be installed)

    def prepare_frr(self, lab: str, node: str) -> tuple[int, int]:
        """Ready the node for its daemons; the uid and gid they drop to there."""

    def launch_frr(self, lab: str, node: str, ns: str, argv: list[str], out: Path) -> Any:
        """Start one daemon; something with `pid` and `poll()`."""


class HostDaemons:
    """This machine's FRR, started inside the switch's namespace."""

    on_this_machine = True

    @staticmethod
    def prepare_frr(lab: str, node: str) -> tuple[int, int]:
        user = pwd.getpwnam(FRR_USER)
        return user.pw_uid, user.pw_gid

    @staticmethod
    def launch_frr(lab: str, node: str, ns: str, argv: list[str], out: Path) -> subprocess.Popen:
        with out.open("wb") as log:
            return popen_in(ns, argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True)


def daemons(config: BgpConfig) -> list[str]:
    return ["zebra", "bgpd"] + (["bfdd"] if runs_bfd(config) else [])


def argv(daemon: str, where: Path) -> list[str]:
    config = "bgpd.boot.conf" if daemon == "bgpd" else f"{daemon}.conf"  # bgpd.conf's once converged: FINISH_BOOT
    args = [str(FRR_DAEMONS_DIR / daemon), "-f", str(where / config), "-i", str(where / f"{daemon}.pid"),
            "--vty_socket", str(where), "-P", "0", "--log", f"file:{where / f'{daemon}.log'}"]
    if daemon in ("zebra", "bgpd", "bfdd"):
        args += ["-z", str(where / "zserv.api")]
    if daemon == "bfdd":
        args += ["--bfdctl", str(where / "bfdd.sock")]
    return args


def start(lab: str, node: str, ns: str, config: BgpConfig, runner: Daemons) -> list[tuple[str, Any]]:
    """Start the switch's daemons: zebra first, the others once its zserv socket is there (a
    client that finds none retries only after seconds)."""
    where = write_files(lab, node, config, runner.prepare_frr(lab, node))
    started = []
    for daemon in daemons(config):
        proc = _launch(runner, lab, node, ns, daemon, where)
        started.append((daemon, proc))
        if daemon == "zebra":
            _wait_for(where / "zserv.api", proc, node)
    return started


def restart_bgpd(lab: str, configs: Mapping[str, tuple[str, BgpConfig]], runner: Daemons) -> dict[str, Any]:
    """bgpd restarted on every switch (name → its namespace and configuration) whose configuration
    renders another bgpd.conf than the one it runs: its sessions close with a Cease and come back,
    as after a restart of SONiC's bgp container; zebra, bfdd and the kernel's other routes stay.
    All of them stop before any starts, so that every new bgpd meets new peers only (restarted one
    at a time or all at once, lab-link-failure's four converged in the same 9–10 s). The new bgpds."""
    changed = {node: pair for node, pair in configs.items()
               if (folder(lab, node) / "bgpd.conf").read_text() != render(pair[1])["bgpd.conf"]}
    stop([int((folder(lab, node) / "bgpd.pid").read_text()) for node in changed], grace_s=DAEMON_STOP_TIMEOUT_S)
    started = {}
    for node, (ns, config) in changed.items():
        running = folder(lab, node).stat()  # prepared at `up`: owned by the daemons' user already
        where = write_files(lab, node, config, (running.st_uid, running.st_gid))
        started[node] = _launch(runner, lab, node, ns, "bgpd", where)
    return started


def _launch(runner: Daemons, lab: str, node: str, ns: str, daemon: str, where: Path) -> Any:
    return runner.launch_frr(lab, node, ns, argv(daemon, where), where / f"{daemon}.out")


def _wait_for(sock: Path, proc: subprocess.Popen, node: str) -> None:
    deadline = time.monotonic() + ZEBRA_START_TIMEOUT_S
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise FrrFailed(f"zebra on {node} did not start (exit {proc.poll()}); its log:\n{log_tail(sock.parent)}")
        time.sleep(0.01)


def _vtysh_argv(lab: str, node: str, commands: tuple[str, ...]) -> list[str]:
    return ["vtysh", "--vty_socket", str(folder(lab, node))] + [arg for c in commands for arg in ("-c", c)]


def vtysh(lab: str, node: str, *commands: str) -> subprocess.CompletedProcess:
    """vtysh commands against the switch's daemons, in one session, its output captured."""
    return subprocess.run(_vtysh_argv(lab, node, commands), capture_output=True, text=True, timeout=VTYSH_TIMEOUT_S)


def finish_config(lab: str, configs: Mapping[str, BgpConfig]) -> None:
    """What makes every switch's (name → configuration) running bgpd, started from bgpd.boot.conf,
    run bgpd.conf's configuration (rocelab.routing.frr.FINISH_BOOT), typed into them all at once
    once the fabric has converged; FrrFailed naming the switch whose bgpd refused it."""
    typed = {node: subprocess.Popen(
        _vtysh_argv(lab, node, ("configure terminal", f"router bgp {config.asn}", *FINISH_BOOT)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for node, config in configs.items()}
    for node, proc in typed.items():
        said, _ = proc.communicate(timeout=VTYSH_TIMEOUT_S)
        if proc.returncode != 0 or said.strip():
            raise FrrFailed(f"bgpd on {node} refused {', '.join(FINISH_BOOT)}: {said.strip() or proc.returncode}")


def sessions_not_established(lab: str, node: str) -> list[str]:
    """The switch's BGP peers whose session is not Established, as bgpd reports them."""
    shown = vtysh(lab, node, "show bgp summary json")
    try:
        peers = json.loads(shown.stdout).get("ipv4Unicast", {}).get("peers", {})
    except json.JSONDecodeError:
        return [f"{node}: bgpd does not answer ({shown.stderr.strip() or shown.stdout.strip()})"]
    return [f"{node} → {address} ({peer.get('state')})" for address, peer in peers.items()
            if peer.get("state") != "Established"]


def log_tail(where: Path) -> str:
    text = ""
    for log in sorted(where.glob("*.log")) + sorted(where.glob("*.out")):
        text += f"--- {log.name}\n{log.read_text(errors='replace')[-LOG_TAIL_CHARS:]}"
    return text
