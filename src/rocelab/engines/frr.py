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
from typing import Mapping

from rocelab import paths
from rocelab.errors import InputError, Problem
from rocelab.kernel.netns import popen_in, stop
from rocelab.routing.bgp import BgpConfig
from rocelab.routing.frr import render, runs_bfd

FRR_DAEMONS_DIR = Path("/usr/lib/frr")
FRR_USER = "frr"
FRR_PACKAGE_HINT = "install Debian's frr package (apt-get install frr), or run the lab with --routing static"
ZEBRA_START_TIMEOUT_S = 10.0
LOG_TAIL_CHARS = 2000
VTYSH_TIMEOUT_S = 10.0
DAEMON_STOP_TIMEOUT_S = 10.0  # SIGTERM, then SIGKILL


class FrrFailed(RuntimeError):
    pass


def require_frr(what: str) -> None:
    """An InputError (exit 2) naming the package when FRR's daemons or vtysh are missing."""
    missing = [d for d in ("zebra", "bgpd", "bfdd") if not os.access(FRR_DAEMONS_DIR / d, os.X_OK)]
    missing += [] if shutil.which("vtysh") else ["vtysh"]
    try:
        pwd.getpwnam(FRR_USER)
    except KeyError:
        missing.append(f"the {FRR_USER} user")
    if missing:
        raise InputError([Problem(what, "routing: bgp", f"needs FRR, and this machine lacks {', '.join(missing)}",
                                  FRR_PACKAGE_HINT)])


def folder(lab: str, node: str) -> Path:
    return paths.STATE_DIR / lab / node / "frr"


def write_files(lab: str, node: str, config: BgpConfig) -> Path:
    """The daemons' configuration files, in a folder the frr user owns."""
    where = folder(lab, node)
    where.mkdir(parents=True, exist_ok=True)
    # The frr user must pass through the state folders to reach its own (a private STATE_DIR,
    # as the tests make, is 0700): search permission only, never a listing.
    for parent in (paths.STATE_DIR, paths.STATE_DIR / lab, where.parent):
        parent.chmod(parent.stat().st_mode | stat.S_IXOTH)
    user = pwd.getpwnam(FRR_USER)
    os.chown(where, user.pw_uid, user.pw_gid)
    for name, text in render(config).items():
        (where / name).write_text(text)
    return where


def daemons(config: BgpConfig) -> list[str]:
    return ["zebra", "bgpd"] + (["bfdd"] if runs_bfd(config) else [])


def argv(daemon: str, where: Path) -> list[str]:
    args = [str(FRR_DAEMONS_DIR / daemon), "-f", str(where / f"{daemon}.conf"), "-i", str(where / f"{daemon}.pid"),
            "--vty_socket", str(where), "-P", "0", "--log", f"file:{where / f'{daemon}.log'}"]
    if daemon in ("zebra", "bgpd", "bfdd"):
        args += ["-z", str(where / "zserv.api")]
    if daemon == "bfdd":
        args += ["--bfdctl", str(where / "bfdd.sock")]
    return args


def start(lab: str, node: str, ns: str, config: BgpConfig) -> list[tuple[str, subprocess.Popen]]:
    """Start the switch's daemons inside its namespace: zebra first, the others once its zserv
    socket is there (a client that finds none retries only after seconds)."""
    where = write_files(lab, node, config)
    started = []
    for daemon in daemons(config):
        proc = _spawn(daemon, where, ns)
        started.append((daemon, proc))
        if daemon == "zebra":
            _wait_for(where / "zserv.api", proc, node)
    return started


def _spawn(daemon: str, where: Path, ns: str) -> subprocess.Popen:
    with (where / f"{daemon}.out").open("wb") as out:
        return popen_in(ns, argv(daemon, where), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                        close_fds=True)


def restart_bgpd(lab: str, configs: Mapping[str, tuple[str, BgpConfig]]) -> dict[str, subprocess.Popen]:
    """bgpd restarted on every switch (name → its namespace and configuration) whose configuration
    renders another bgpd.conf than the one it runs: its sessions close with a Cease and come back,
    as after a restart of SONiC's bgp container; zebra, bfdd and the kernel's other routes stay.
    All of them stop before any starts, so that every new bgpd meets new peers only (restarted one
    at a time or all at once, lab-link-failure's four converged in the same 9–10 s). The new bgpds."""
    changed = {node: pair for node, pair in configs.items()
               if (folder(lab, node) / "bgpd.conf").read_text() != render(pair[1])["bgpd.conf"]}
    stop([int((folder(lab, node) / "bgpd.pid").read_text()) for node in changed], grace_s=DAEMON_STOP_TIMEOUT_S)
    return {node: _spawn("bgpd", write_files(lab, node, config), ns) for node, (ns, config) in changed.items()}


def _wait_for(sock: Path, proc: subprocess.Popen, node: str) -> None:
    deadline = time.monotonic() + ZEBRA_START_TIMEOUT_S
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise FrrFailed(f"zebra on {node} did not start (exit {proc.poll()}); its log:\n{log_tail(sock.parent)}")
        time.sleep(0.01)


def sessions_not_established(lab: str, node: str) -> list[str]:
    """The switch's BGP peers whose session is not Established, as bgpd reports them."""
    shown = subprocess.run(["vtysh", "--vty_socket", str(folder(lab, node)), "-c", "show bgp summary json"],
                           capture_output=True, text=True, timeout=VTYSH_TIMEOUT_S)
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
