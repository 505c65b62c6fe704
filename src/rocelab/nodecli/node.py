"""A node as its commands see it: a switch's running config_db and its switchd, a host's
running NIC and its nicd, and the lab's time line both write to.

The running config_db lives in the lab's state folder (`<state>/<lab>/<node>/running.json`)
and is what switchd runs: every change is checked whole (rocelab.qos.configdb.check), written,
then handed to switchd (a reload for QoS tables, a `port` request for a link's admin state
and MTU), and recorded as an event on the lab's time line (`<state>/<lab>/events.jsonl`,
which the dashboard marks). `config save` writes `<node>/config_db.json`; checkpoints are
`<node>/checkpoints/NAME.cp.json`, as SONiC keeps them under /etc/sonic/checkpoints.

A host's running NIC (`<node>/nic.json`) is what its ConnectX tools would show
(rocelab.qos.nic.HostNicConfig), kept beside the nicd settings it was made from: a change is
turned into nicd's settings (rocelab.model.hostnics.nicd_roce), checked, handed to nicd
(`set_nic`), which reconfigures the NIC at once, and recorded on the time line.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from rocelab.errors import InputError
from rocelab.fabric.spec import Device
from rocelab.model.hostnics import HostNic, nic_view, nicd_roce
from rocelab.qos.nic import HostNicConfig, nic_from_json, nic_to_json
from rocelab.roce.config import roce_config
from rocelab.qos import configdb
from rocelab.qos.eos import EosConfig, lab_to_eos
from rocelab.qos.model import QosProfile
from rocelab.qos.ports import lab_to_sonic
from rocelab.qos.sonic import dump_config_db, read_config_db
from rocelab.switch.counters import counters_since

Agent = Callable[..., dict]  # agent(op, **fields) → the reply (rocelab.kernel.control.request)
EVENTS = "events.jsonl"


def record_event(folder: Path, node: str, command: str, changed: list[str]) -> None:
    """One change on the lab's time line: when, who, on which node, what was typed, what it touched."""
    event = {"time": time.time(), "who": os.environ.get("SUDO_USER") or getpass.getuser(), "node": node,
             "command": command, "changed": changed}
    with (folder / EVENTS).open("a") as f:
        f.write(json.dumps(event) + "\n")


def read_events(folder: Path) -> list[dict]:
    try:
        lines = (folder / EVENTS).read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


class SwitchNode:
    """`folder` is the lab's state folder, `agent` asks switchd, `interfaces` are the node's
    ports with their production rates (eth1 → b/s), `tdf` the lab's."""

    def __init__(self, folder: Path, name: str, agent: Agent, interfaces: dict[str, int], tdf: int,
                 command: str = "", vtysh: Callable[[str], subprocess.CompletedProcess] | None = None):
        self.folder, self.name, self.agent, self.interfaces, self.tdf = folder, name, agent, interfaces, tdf
        self.vtysh = vtysh  # the switch's FRR (a vtysh command → its output), where it runs FRR
        self.command = command  # what the user typed: the time line's label for a change
        self.home = folder / name
        self.running_path = self.home / "running.json"
        self.started_path = self.home / "started.json"

    # --- the running config

    def running(self) -> dict:
        """What switchd runs now. A profile loaded behind the shell's back (a scenario case's
        `profile:`) becomes the running config, as `config reload` would make it; the links keep
        their state (PORT)."""
        reply = self.agent("counters")
        runs, source = reply["profile"], {"profile": reply["profile"], "reloads": reply.get("reloads", 0)}
        source_path = self.home / "source.json"
        current = self.running_path.exists() and (
            runs == str(self.running_path) or json.loads(source_path.read_text()) == source)
        if not current:
            doc = read_config_db(runs) if runs and Path(runs).exists() else {}
            if self.running_path.exists():
                doc["PORT"] = json.loads(self.running_path.read_text()).get("PORT", {})
            self.home.mkdir(parents=True, exist_ok=True)
            if not self.started_path.exists():
                self.started_path.write_text(json.dumps(doc, indent=1))
            # Same QoS as switchd runs: no reload (it would restart the pipeline mid-job).
            self._write(configdb.with_ports(doc, self.interfaces))
            source_path.write_text(json.dumps(source))
        return json.loads(self.running_path.read_text())

    def template(self) -> dict:
        """The QoS tables `config qos reload` restores: those the switch came up with."""
        self.running()
        return json.loads(self.started_path.read_text())

    def _write(self, doc: dict) -> None:
        tmp = self.running_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.running_path)

    def commit(self, new: dict, record: bool = True) -> list[str]:
        """Check `new` whole, then make it the running config: what changed on the switch, in words.
        Raises ConfigError and changes nothing when the document is not valid. `record=False`
        keeps it off the time line (a challenge's seeded fault)."""
        old = self.running()
        configdb.check(new, f"{self.name} running config")
        step = configdb.plan(old, new)
        changed = configdb.changed_paths(old, new)
        if not changed:
            return ["no change"]
        self._write(new)
        if step.reload:
            self.agent("reload", profile=str(self.running_path))
        for port, change in step.links.items():
            lab = next(alias for alias, sonic in self.names().items() if sonic == port)
            self.agent("port", port=lab, **change)
        if record:
            record_event(self.folder, self.name, self.command, changed)
        return step.describe()

    def names(self) -> dict[str, str]:
        """eth1 → Ethernet0: the running PORT table's aliases."""
        return {fields["alias"]: port for port, fields in self.running().get("PORT", {}).items() if "alias" in fields}

    # --- checkpoints and the saved config

    def checkpoint_path(self, name: str) -> Path:
        return self.home / "checkpoints" / f"{name}.cp.json"

    def checkpoints(self) -> list[str]:
        return sorted(p.name.removesuffix(".cp.json") for p in (self.home / "checkpoints").glob("*.cp.json"))

    def read_file(self, path: Path) -> Any:
        try:
            return read_config_db(path)
        except InputError as exc:
            raise configdb.ConfigError(str(exc)) from None

    # --- counters, links, routes

    def counters(self, view: str) -> dict:
        """switchd's counters less the snapshot `sonic-clear VIEW` took."""
        snapshot = self.home / f"cleared-{view}.json"
        now = self.agent("counters")["counters"]
        return counters_since(json.loads(snapshot.read_text()) if snapshot.exists() else None, now)

    def clear(self, view: str) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / f"cleared-{view}.json").write_text(json.dumps(self.agent("counters")["counters"]))

    def links(self) -> dict:
        return self.agent("links")["links"]

    def fib(self) -> dict:
        """switchd's forwarding table, with the kernel's routes it was compiled from."""
        return self.agent("fib", kernel=True)


class NicError(Exception):
    """A change the running NIC cannot take; nothing changed."""


class HostNode:
    """`agent` asks nicd; `iface`, `address`, `mac`: the host's RoCE port."""

    def __init__(self, folder: Path, name: str, agent: Agent, iface: str, address: str, mac: str,
                 command: str = "", record: Any = None, hosts: dict[str, str] | None = None):
        self.folder, self.name, self.agent = folder, name, agent
        self.iface, self.address, self.mac, self.command = iface, address, mac, command
        self.record = record  # the running lab (rocelab.engines.state.LabState): where perftest runs its job
        self.hosts = hosts or {}  # the lab's hosts by address
        self.home = folder / name
        self.nic_path = self.home / "nic.json"

    def _settings(self) -> dict:
        return self.agent("nic")

    def pmtu_bytes(self) -> int:
        return roce_config(self._settings()["settings"]).pmtu_bytes

    def port_rate_bps(self) -> int:
        """The port's production rate."""
        return int(self._settings()["port_rate_bps"])

    def runs_dcqcn(self) -> bool:
        return roce_config(self._settings()["settings"]).cc_algorithm == "dcqcn"

    def counters(self) -> dict:
        """nicd's `counters` reply: the NIC's counters (emulated time) and the lab's TDF."""
        return self.agent("counters")

    def host_at(self, address: str) -> str | None:
        return self.hosts.get(address)

    def running(self) -> HostNicConfig:
        """The NIC as its tools show it. Settings changed behind the shell's back (a case's
        congestion control) make it again from what nicd runs."""
        reply = self._settings()
        if self.nic_path.exists():
            doc = json.loads(self.nic_path.read_text())
            if doc["settings"] == reply["settings"]:
                return nic_from_json(doc["nic"])
        view = nic_view(reply["settings"], reply["port_rate_bps"])
        self._write(reply["settings"], view)
        return view

    def _write(self, settings: dict, nic: HostNicConfig) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.nic_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"settings": settings, "nic": nic_to_json(nic)}, indent=1))
        os.replace(tmp, self.nic_path)

    def commit(self, new: HostNicConfig, record: bool = True) -> list[str]:
        """Make `new` the running NIC: the nicd settings that differ are checked whole, then set
        live; what changed, in words. NicError, and nothing changes, when they make no NIC."""
        old = self.running()
        settings = self._settings()["settings"]
        before, _ = nicd_roce(HostNic(self.name, None, None, old), {})
        try:
            after, _ = nicd_roce(HostNic(self.name, None, None, new), {})
            changes = {k: v for k, v in after.items() if before.get(k) != v}
            roce_config({**settings, **changes})
        except ValueError as exc:
            raise NicError(str(exc)) from None
        changed = [name for name, value in nic_to_json(new).items() if nic_to_json(old).get(name) != value]
        if not changed:
            return ["no change"]
        if changes:
            settings = self.agent("set_nic", settings=json.loads(json.dumps(changes)))["settings"]
        self._write(settings, new)
        if record:
            record_event(self.folder, self.name, self.command, changed)
        if not changes:
            return [f"{self.name}: {', '.join(changed)} recorded; what the NIC runs is unchanged"]
        return [f"{self.name}: the NIC now runs the new {', '.join(sorted(changes))}: PFC and the priority of "
                "connected QPs at once; DSCP, ToS and DCQCN for QPs connected from now on (the next job)"]


class EosNode(SwitchNode):
    """A switch whose lab.yml `profiles:` entry is an EOS running-config (`device`). Its
    running-config text (`<node>/running-config`, first the file's) is what its commands edit:
    a commit is read as `up` reads it (rocelab.fabric.spec.EosOptions) into the config_db
    switchd runs, then committed as a SONiC node's change is (checked whole, reloaded, on the
    time line); the links keep their state."""

    def __init__(self, folder: Path, name: str, agent: Agent, interfaces: dict[str, int], tdf: int,
                 command: str, device: Device):
        super().__init__(folder, name, agent, interfaces, tdf, command)
        self.device = device
        self.config_path = self.home / "running-config"

    def eos_text(self) -> str:
        if not self.config_path.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            self.config_path.write_text(Path(self.device.file).read_text())
        return self.config_path.read_text()

    def profile(self) -> QosProfile:
        return self._read(self.eos_text())

    def _read(self, text: str) -> QosProfile:
        return self._config(text)[1]

    def _config(self, text: str) -> tuple[EosConfig, QosProfile]:
        try:
            return self.device.eos.profile(text, f"{self.name} running-config")
        except InputError as exc:
            raise configdb.ConfigError(str(exc)) from None

    def eos_names(self) -> dict[str, str]:
        """eth1 → Ethernet1: the config's own interface names."""
        return {lab: self.device.port_names.get(lab_to_sonic(lab)) or lab_to_eos(lab) for lab in self.interfaces}

    def commit_eos(self, text: str) -> list[str]:
        """Make `text` the running-config; what changed on the switch, in words. ConfigError, and
        nothing changes, when it does not read or makes no valid switch."""
        config, profile = self._config(text)
        doc = json.loads(dump_config_db(profile))
        # The ports keep their running state except what the text sets: an interface's `mtu`,
        # `shutdown` and `no shutdown` (the last such line of the interface wins).
        doc["PORT"] = self.running().get("PORT", {})
        for port, fields in doc["PORT"].items():
            if port in config.mtu_bytes:
                fields["mtu"] = str(config.mtu_bytes[port])
            if port in config.admin_up:
                fields["admin_status"] = "up" if config.admin_up[port] else "down"
        lines = self.commit(doc)
        self.config_path.write_text(text)
        return lines
