"""An EOS switch's commands, for a switch whose lab.yml `profiles:` entry is an EOS
running-config: `show qos interfaces [IFACE]`, `show priority-flow-control [counters
[detail]]`, `show running-config`, and `configure [session NAME]`, which takes EOS
configuration lines on its input until `commit` (or, outside a session, the end of input)
and commits them live (rocelab.nodecli.node.EosNode).

Lines are read in EOS's modes: `interface …`, `qos profile …`, `policy-map …` and `class-map …`
open a mode, `tx-queue N` (and `uc-tx-queue`, `mc-tx-queue`) and a policy-map's `class …` a
mode within it, `exit` leaves one, `qos map …` is global from any mode; indentation as typed
does not matter. The committed lines are kept at the end of the running-config, after the
lines they override (EOS would merge them into their blocks; what the switch runs is the
same). What the EOS reader does not model is refused by the reader's own errors, or carried
as its warnings say (docs/plugin-eos.md).
"""

from __future__ import annotations

import sys

import click

from rocelab.nodecli.node import EosNode
from rocelab.nodecli.sonic import report_commit
from rocelab.reporting import eos_cli

pass_node = click.make_pass_decorator(EosNode)
MODES = ("interface ", "qos profile ", "policy-map ", "class-map ")
SUBMODES = ("tx-queue ", "uc-tx-queue ", "mc-tx-queue ", "class ")
GLOBAL = ("qos map ",)


@click.group(name="show")
def show():
    """EOS's show commands"""


@show.group(name="qos")
def qos():
    """QoS state"""


@qos.command(name="interfaces")
@click.argument("interface", required=False)
@pass_node
def qos_interfaces(node: EosNode, interface):
    """Each interface's trust mode and tx-queues"""
    if interface and interface not in node.eos_names().values():
        raise click.ClickException(f"Invalid input: {interface} (interfaces: {', '.join(node.eos_names().values())})")
    click.echo(eos_cli.qos_interfaces(node.profile(), node.eos_names(), interface))


@show.group(name="priority-flow-control", invoke_without_command=True)
@click.pass_context
def pfc(ctx):
    """PFC state per interface"""
    if ctx.invoked_subcommand is None:
        node = ctx.find_object(EosNode)
        click.echo(eos_cli.priority_flow_control(node.profile(), node.eos_names()))


@pfc.command(name="counters")
@click.argument("detail", required=False, type=click.Choice(["detail"]))
@pass_node
def pfc_counters(node: EosNode, detail):
    """PFC frames received and sent"""
    click.echo(eos_cli.pfc_counters(node.counters("pfccounters"), node.eos_names(), detail is not None))


@show.command(name="running-config")
@pass_node
def running_config(node: EosNode):
    """The running-config"""
    click.echo(node.eos_text(), nl=False)


def indented(lines: list[str]) -> list[str]:
    """Lines typed in EOS's configuration modes, indented as a running-config holds them."""
    out: list[str] = []
    depth = 0
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("!"):
            continue
        if line == "exit":
            depth = max(depth - 1, 0)
            continue
        if line.startswith(MODES) or line.startswith(GLOBAL):
            depth = 0
        elif line.startswith(SUBMODES) and depth:
            depth = 1
        out.append("   " * depth + line)
        if line.startswith(MODES):
            depth = 1
        elif line.startswith(SUBMODES) and depth == 1:
            depth = 2
    return out


@click.command(name="configure")
@click.argument("session", nargs=-1)
@pass_node
def configure(node: EosNode, session):
    """Configuration lines on the input, committed live: `configure session NAME` … `commit`
    (`abort` discards), or `configure` … end of input."""
    if session and (len(session) != 2 or session[0] != "session"):
        raise click.UsageError("configure [session NAME]")
    name = session[1] if session else None
    prompt = f"{node.name}(config-s-{name[:6]})#" if name else f"{node.name}(config)#"
    typed: list[str] = []
    ending = None
    while True:
        if sys.stdin.isatty():
            click.echo(prompt + " ", nl=False, err=True)
        line = sys.stdin.readline()
        if not line:
            break
        if line.strip() in ("commit", "abort", "end"):
            ending = line.strip()
            break
        typed.append(line)
    if ending == "abort" or (name and ending != "commit"):
        click.echo(f"{f'session {name}: ' if name else ''}not committed; nothing changed", err=True)
        return
    added = indented(typed)
    if not added:
        click.echo("no change", err=True)
        return
    text = node.eos_text().rstrip("\n") + "\n!\n" + "\n".join(added) + "\n"
    report_commit(node.commit_eos, text)


COMMANDS = {"show": show, "configure": configure}
