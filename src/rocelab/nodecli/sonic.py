"""SONiC's commands on a switch node, as click trees shaped like sonic-utilities' own
(`show/main.py`, `config/main.py`, `scripts/ecnconfig`, `pfcwd/main.py`, `clear/main.py`).

Every command is a small function over the node (rocelab.nodecli.node.SwitchNode, passed
as click's `obj`): a `show` reads and prints (rocelab.reporting.sonic_cli), a `config`
builds a new document with rocelab.qos.configdb and commits it. An error prints
"Error: …" and exits 1, a usage error exits 2, and in both cases nothing changed.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import click

from rocelab.nodecli.node import SwitchNode
from rocelab.qos import configdb
from rocelab.reporting import sonic_cli

pass_node = click.make_pass_decorator(SwitchNode)
PRIORITY = click.IntRange(0, 7)


def report_commit(commit, *args) -> None:
    """Run a node's commit and print what changed on the switch; its ConfigError is click's
    error (exit 1, nothing changed)."""
    try:
        lines = commit(*args)
    except configdb.ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    for line in lines:
        click.echo(line)


def _commit(node: SwitchNode, new: dict) -> None:
    report_commit(node.commit, new)


def _edit(node: SwitchNode, edit, *args, **kwargs) -> None:
    """Apply one configdb edit to the running config and commit it."""
    try:
        new = edit(node.running(), *args, **kwargs)
    except configdb.ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    _commit(node, new)


def _port(node: SwitchNode, name: str) -> str:
    try:
        configdb.require_port(node.running(), name)
    except configdb.ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    return name


# --- show


@click.group(name="show")
def show():
    """SONiC's show commands"""


@show.group()
def interfaces():
    """Show details of the network interfaces"""


@interfaces.command(name="counters")
@click.option("-p", "--period", type=click.FloatRange(0.1, 60), help="rates over this many seconds")
@pass_node
def interfaces_counters(node: SwitchNode, period):
    """Show interface counters"""
    before = node.counters("counters") if period else None
    if period:
        time.sleep(period)
    rates = {lab: rate / node.tdf for lab, rate in node.interfaces.items()}
    click.echo(sonic_cli.interfaces_counters(node.counters("counters"), node.names(), node.links(), before,
                                             period or 1.0, rates, node.tdf))


@interfaces.command(name="status")
@pass_node
def interfaces_status(node: SwitchNode):
    """Show interface status information"""
    click.echo(sonic_cli.interfaces_status(node.running(), node.links()))


@show.group()
def queue():
    """Show details of the queues"""


def _queue_command(name: str, what: str, render):
    @queue.command(name=name, help=f"Show queue {what}")
    @click.argument("interfacename", required=False)
    @pass_node
    def show_queue(node: SwitchNode, interfacename):
        only = _port(node, interfacename) if interfacename else None
        click.echo(render(node.counters("queuecounters"), node.names(), only))
    return show_queue


_queue_command("counters", "counters", sonic_cli.queue_counters)
_queue_command("wredcounters", "WRED drops and ECN marks", sonic_cli.queue_wred_counters)


@queue.group(name="watermark")
def queue_watermark():
    """Show queue user WM"""


@queue_watermark.command(name="unicast")
@pass_node
def queue_watermark_unicast(node: SwitchNode):
    """Show user WM for unicast queues"""
    click.echo(sonic_cli.queue_watermark(node.counters("watermarks"), node.names()))


@show.group()
def pfc():
    """Show details of the priority-flow-control (pfc)"""


@pfc.command(name="counters")
@pass_node
def pfc_counters(node: SwitchNode):
    """Show pfc counters"""
    click.echo(sonic_cli.pfc_counters(node.counters("pfccounters"), node.names()))


@pfc.command(name="priority")
@pass_node
def pfc_priority(node: SwitchNode):
    """Show pfc lossless priorities"""
    click.echo(sonic_cli.pfc_priority(node.running()))


@show.group(name="priority-group")
def priority_group():
    """Show details of the PGs"""


@priority_group.command(name="watermark")
@click.argument("kind", type=click.Choice(["shared", "headroom"]))
@pass_node
def pg_watermark(node: SwitchNode, kind):
    """Show user WM for PGs: shared or headroom"""
    click.echo(sonic_cli.pg_watermark(node.counters("watermarks"), node.names(), kind))


@show.group(name="pfcwd")
def show_pfcwd():
    """Show details of the pfc watchdog"""


@show_pfcwd.command(name="config")
@pass_node
def show_pfcwd_config(node: SwitchNode):
    """Show pfc watchdog configuration"""
    click.echo(sonic_cli.pfcwd_config(node.running()))


@show_pfcwd.command(name="stats")
@pass_node
def show_pfcwd_stats(node: SwitchNode):
    """Show pfc watchdog stats"""
    click.echo(sonic_cli.pfcwd_stats(node.counters("pfcwdcounters"), node.names(), node.running()))


@show.group(name="runningconfiguration")
def runningconfiguration():
    """Show current running configuration information"""


@runningconfiguration.command(name="all")
@pass_node
def running_all(node: SwitchNode):
    """Show full running configuration (config_db as JSON)"""
    click.echo(json.dumps(node.running(), indent=4, sort_keys=True))


@show.group()
def ip():
    """Show IP (IPv4) commands"""


@ip.command(name="route", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1)
@pass_node
def ip_route(node: SwitchNode, args: tuple[str, ...]):
    """Show IP (IPv4) routing table"""
    fib, names = node.fib(), node.names()
    if node.vtysh is None:  # rocelab's static routes: the kernel's table, in FRR's shape
        usage = click.UsageError(f"{' '.join(args)}: with rocelab's static routes (no FRR on this switch) "
                                 "`show ip route` takes at most an address or a prefix (A.B.C.D[/M])")
        if len(args) > 1:
            raise usage
        try:
            click.echo(sonic_cli.ip_route(fib, names, args[0] if args else None))
        except ValueError:  # not an address or a prefix
            raise usage from None
        return
    # As SONiC's show does: FRR's own `show ip route`, with SONiC's names for the ports.
    shown = node.vtysh(" ".join(("show", "ip", "route", *args)))
    click.echo(sonic_cli.sonic_names(shown.stdout, names), nl=False)
    click.echo(sonic_cli.sonic_names(shown.stderr, names), err=True, nl=False)
    if fib["pending"]:
        click.echo(f"(the ASIC has {fib['pending']} FIB change(s) still to program: switchd forwards on the "
                   "routes before them)")
    if shown.returncode:
        raise SystemExit(shown.returncode)


# --- sonic-clear


@click.group(name="sonic-clear")
def sonic_clear():
    """SONiC command line - 'Clear' command"""


def _clear_command(view: str, what: str):
    @sonic_clear.command(name=view, help=f"Clear {what}")
    @pass_node
    def clear(node: SwitchNode):
        node.clear(view)
        click.echo(f"Cleared {what}")
    return clear


for _view, _what in (("counters", "counters"), ("queuecounters", "queue counters"),
                     ("pfccounters", "PFC counters"), ("watermarks", "watermarks")):
    _clear_command(_view, _what)


# --- config


@click.group(name="config")
def config():
    """SONiC command line - 'config' command"""


@config.group(name="interface")
def interface():
    """Interface-related configuration tasks"""


@interface.command()
@click.argument("interface_name")
@pass_node
def shutdown(node: SwitchNode, interface_name):
    """Shut down interface"""
    _edit(node, configdb.set_port, interface_name, admin_status="down")


@interface.command()
@click.argument("interface_name")
@pass_node
def startup(node: SwitchNode, interface_name):
    """Start up interface"""
    _edit(node, configdb.set_port, interface_name, admin_status="up")


@interface.command()
@click.argument("interface_name")
@click.argument("interface_mtu", type=click.IntRange(68, 9216))
@pass_node
def mtu(node: SwitchNode, interface_name, interface_mtu):
    """Set interface mtu"""
    _edit(node, configdb.set_port, interface_name, mtu=str(interface_mtu))


@interface.group(name="pfc")
def interface_pfc():
    """Set PFC configuration."""


@interface_pfc.command(name="priority")
@click.argument("interface_name")
@click.argument("priority", type=PRIORITY)
@click.argument("status", type=click.Choice(["on", "off"]))
@pass_node
def pfc_priority_set(node: SwitchNode, interface_name, priority, status):
    """Set PFC priority configuration."""
    _edit(node, configdb.set_pfc_priority, interface_name, priority, status == "on")


@interface_pfc.command(name="asymmetric")
@click.argument("interface_name")
@click.argument("status", type=click.Choice(["on", "off"]))
@pass_node
def pfc_asymmetric(node: SwitchNode, interface_name, status):
    """Set asymmetric PFC configuration."""
    _edit(node, configdb.set_port, interface_name, pfc_asym=status)


@interface.group(name="buffer")
def interface_buffer():
    """Set or clear buffer configuration"""


@interface_buffer.group(name="priority-group")
def interface_buffer_pg():
    """Set or clear buffer configuration"""


@interface_buffer_pg.group(name="lossless")
def lossless():
    """Set or clear lossless PGs"""


@lossless.command(name="add")
@click.argument("interface_name")
@click.argument("pg_map")
@click.argument("override_profile", required=False)
@pass_node
def lossless_add(node: SwitchNode, interface_name, pg_map, override_profile):
    """Set lossless PGs for the interface"""
    _edit(node, configdb.set_pg_lossless, interface_name, pg_map, override_profile, True)


@lossless.command(name="remove")
@click.argument("interface_name")
@click.argument("pg_map")
@pass_node
def lossless_remove(node: SwitchNode, interface_name, pg_map):
    """Clear lossless PGs for the interface"""
    _edit(node, configdb.set_pg_lossless, interface_name, pg_map, None, False)


@config.group(name="buffer")
def buffer():
    """Configure buffer_profile"""


@buffer.group(name="profile")
def buffer_profile():
    """Configure buffer profile"""


def _profile_command(verb: str, add: bool):
    @buffer_profile.command(name=verb, help=f"{verb.capitalize()} a buffer profile")
    @click.argument("profile")
    @click.option("--xon")
    @click.option("--xoff")
    @click.option("--size")
    @click.option("--dynamic_th")
    @click.option("--pool")
    @pass_node
    def profile_command(node: SwitchNode, profile, **options):
        fields = {name: str(value) for name, value in options.items() if value is not None}
        _edit(node, configdb.set_buffer_profile, profile, fields, add)
    return profile_command


_profile_command("add", True)
_profile_command("set", False)


@config.group(name="qos")
def qos():
    """QoS-related configuration tasks"""


@qos.command(name="reload")
@pass_node
def qos_reload(node: SwitchNode):
    """Reload QoS configuration"""
    _edit(node, configdb.qos_reloaded, node.template())


@qos.command(name="clear")
@pass_node
def qos_clear(node: SwitchNode):
    """Clear QoS configuration"""
    _edit(node, configdb.qos_cleared)


@config.command(name="apply-patch")
@click.argument("patch_file_path", type=click.Path(exists=True, dir_okay=False))
@click.option("-d", "--dry-run", is_flag=True, help="test out the command without affecting config state")
@pass_node
def apply_patch(node: SwitchNode, patch_file_path, dry_run):
    """Apply given patch of updates to Config. Patch file is a JSON Patch (RFC 6902)."""
    click.echo("Patch Applier: applying the patch")
    try:
        new = configdb.patched(node.running(), configdb.parse_patch(Path(patch_file_path).read_text(), patch_file_path))
        configdb.check(new, patch_file_path)
    except configdb.ConfigError as exc:
        raise click.ClickException(f"Failed to apply patch due to: {exc}") from None
    if not dry_run:
        _commit(node, new)
    click.echo("Patch applied successfully.")


@config.command(name="replace")
@click.argument("target_file_path", type=click.Path(exists=True, dir_okay=False))
@pass_node
def replace(node: SwitchNode, target_file_path):
    """Replace the whole config with the specified config_db JSON file."""
    try:
        new = node.read_file(Path(target_file_path))
        configdb.check(new, target_file_path)
    except configdb.ConfigError as exc:
        raise click.ClickException(f"Failed to replace config due to: {exc}") from None
    _commit(node, new)
    click.echo("Config replaced successfully.")


@config.command(name="checkpoint")
@click.argument("checkpoint_name")
@pass_node
def checkpoint(node: SwitchNode, checkpoint_name):
    """Take a checkpoint of the whole current config with the specified checkpoint name."""
    path = node.checkpoint_path(checkpoint_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(node.running(), indent=1))
    click.echo("Checkpoint created successfully.")


def _existing_checkpoint(node: SwitchNode, name: str, what: str) -> Path:
    path = node.checkpoint_path(name)
    if not path.exists():
        raise click.ClickException(f"Failed to {what} due to: checkpoint {name!r} does not exist; checkpoints: "
                                   f"{', '.join(node.checkpoints()) or 'none'}")
    return path


@config.command(name="rollback")
@click.argument("checkpoint_name")
@pass_node
def rollback(node: SwitchNode, checkpoint_name):
    """Rollback the whole config to the specified checkpoint."""
    _commit(node, node.read_file(_existing_checkpoint(node, checkpoint_name, "rollback config")))
    click.echo("Config rolled back successfully.")


@config.command(name="list-checkpoints")
@pass_node
def list_checkpoints(node: SwitchNode):
    """List the config checkpoints available."""
    click.echo(json.dumps(node.checkpoints(), indent=4))


@config.command(name="delete-checkpoint")
@click.argument("checkpoint_name")
@pass_node
def delete_checkpoint(node: SwitchNode, checkpoint_name):
    """Delete a checkpoint with the specified checkpoint name."""
    _existing_checkpoint(node, checkpoint_name, "delete checkpoint").unlink()
    click.echo("Checkpoint deleted successfully.")


@config.command(name="save")
@click.option("-y", "--yes", is_flag=True, help="no confirmation")
@pass_node
def save(node: SwitchNode, yes):
    """Export current config DB to the node's config_db.json in the lab's state folder"""
    node.running()
    target = node.home / "config_db.json"
    shutil.copyfile(node.running_path, target)
    click.echo(f"Running command: config save: wrote {target}")


# --- ecnconfig (sonic-utilities scripts/ecnconfig)


def _ecn_options(fn):
    for option, field in reversed(configdb.ECN_FIELDS.items()):
        fn = click.option(f"-{option}", type=click.IntRange(0, 100 if option.endswith("drop") else None),
                          help=f"set {field}")(fn)
    return fn


@click.command(name="ecnconfig")
@click.option("-l", "--list", "show_list", is_flag=True, help="show ECN WRED configuration")
@click.option("-p", "--profile", help="specify WRED profile name")
@_ecn_options
@click.option("-v", "--verbose", is_flag=True, help="verbose output")
@pass_node
def ecnconfig(node: SwitchNode, show_list, profile, verbose, **thresholds):
    """Show and change: ECN WRED configuration"""
    fields = {configdb.ECN_FIELDS[option]: value for option, value in thresholds.items() if value is not None}
    if show_list:
        if profile or fields:
            raise click.UsageError("-l/--list takes no other option")
        click.echo(sonic_cli.ecn_list(node.running()))
        return
    if not profile or not fields:
        raise click.UsageError("give -l, or -p PROFILE with at least one of "
                               + ", ".join(f"-{o}" for o in configdb.ECN_FIELDS))
    _edit(node, configdb.set_wred, profile, fields)
    if verbose:
        for name, value in fields.items():
            click.echo(f"Setting {name} value to {value}")


# --- pfcwd (sonic-utilities pfcwd/main.py)


@click.group(name="pfcwd")
def pfcwd():
    """SONiC PFC Watchdog"""


@pfcwd.command(name="start")
@click.option("--action", "-a", type=click.Choice(["drop", "forward", "alert"]), default="drop")
@click.option("--restoration-time", "-r", type=click.IntRange(100, 60000), default=None)
@click.argument("ports", nargs=-1)
@click.argument("detection_time", type=click.IntRange(100, 5000))
@pass_node
def pfcwd_start(node: SwitchNode, action, restoration_time, ports, detection_time):
    """Start PFC watchdog on port(s). To config all ports, use all as input.

    Example: pfcwd start --action drop ports all detection-time 400 --restoration-time 400"""
    chosen = _wd_ports(node, ports)
    _edit(node, configdb.pfcwd_start, chosen, action, detection_time, restoration_time or 2 * detection_time)


@pfcwd.command(name="stop")
@click.argument("ports", nargs=-1)
@pass_node
def pfcwd_stop(node: SwitchNode, ports):
    """Stop PFC watchdog on port(s) (all when none is named)"""
    _edit(node, configdb.pfcwd_stop, _wd_ports(node, ports or ("all",)))


def _wd_ports(node: SwitchNode, words: tuple[str, ...]) -> list[str]:
    """The ports a pfcwd command names ("ports" and "detection-time" are words of its syntax)."""
    named = [w for w in words if w not in ("ports", "detection-time")]
    every = configdb.ports(node.running())
    return every if "all" in named or not named else [_port(node, p) for p in named]


COMMANDS = {"show": show, "config": config, "ecnconfig": ecnconfig, "pfcwd": pfcwd, "sonic-clear": sonic_clear}
