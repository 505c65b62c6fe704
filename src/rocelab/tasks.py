"""The task front door: `invoke <task>` in a checkout, or the installed `rocelab <task>`.

Every task turns bad input into one message on stderr and exit status 2 (DESIGN.md:
0 success, 1 verdict failed, 2 usage or input error). `--json` prints one JSON document
on stdout.
"""

from __future__ import annotations

import functools
import json as jsonlib
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from invoke import Exit, task
from rich.console import Console

from rocelab import calc as calc_mod
from rocelab import control, paths, report, views
from rocelab import state as lab_state
from rocelab.cli import TaskCollection
from rocelab.engines import builtin_engines
from rocelab.errors import EXIT_USAGE, InputError, Problem
from rocelab.lab import load_lab
from rocelab.registry import UnknownName

# Wide enough for SONiC's 14-column interface view when output goes to a file or pipe.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def _front_door(optional_positionals: tuple[str, ...] = ()):
    """Turn rocelab's input errors into exit status 2 with their message, no traceback."""

    def wrap(fn):
        @functools.wraps(fn)
        def body(c, *args, **kwargs):
            try:
                return fn(c, *args, **kwargs)
            except (InputError, UnknownName) as exc:
                err_console.print(f"[red]error:[/red] {exc}", highlight=False, markup=True, soft_wrap=True)
                raise Exit(code=EXIT_USAGE) from None

        body.optional_positionals = optional_positionals
        return body

    return wrap


def _running(lab: str | None, what: str) -> lab_state.LabState:
    """The lab a command is about: the one named, or the only one that is up."""
    labs = lab_state.all_labs()
    if lab:
        record = lab_state.load(lab)
        if record is None:
            raise InputError([Problem(lab, "", "is not up", f"labs up: {', '.join(l.name for l in labs) or 'none'}")])
        return record
    if len(labs) == 1:
        return labs[0]
    raise InputError([Problem(what, "", "needs a lab name" if labs else "found no lab up",
                              f"labs up: {', '.join(l.name for l in labs)}" if labs else "run `invoke up lab-pfc` first")])


@task(positional=["lab"], help={
    "lab": "a lab (folder under labs/) or a topology (file under topologies/, or a path)",
    "engine": "netns (embedded default)",
    "tdf": "time-dilation factor: links run at rate/TDF, delays × TDF (default: the lab's, else 1000)",
})
@_front_door()
def up(c, lab, engine="netns", tdf=0):
    """Bring up a lab's fabric and show its status."""
    engines = builtin_engines()
    chosen = engines.get(engine)
    spec = load_lab(lab)
    if tdf:
        if tdf < 1:
            raise InputError([Problem("--tdf", "", f"{tdf!r} is not a time-dilation factor", "a whole number ≥ 1")])
        spec = replace(spec, tdf=tdf)
    with console.status(f"bringing up {spec.name} on the {engine} engine"):
        record = chosen.up(spec)
    console.print(report.status_table(record, builtin_engines()))


@task(positional=["lab"], help={"lab": "the lab to tear down (default: every lab that is up)"})
@_front_door(optional_positionals=("lab",))
def down(c, lab=None):
    """Tear down a lab: its processes, namespaces and links. Safe to repeat."""
    engines = builtin_engines()
    records = [lab_state.load(lab)] if lab else lab_state.all_labs()
    if lab and records[0] is None:
        console.print(f"{lab} is not up: nothing to do")
        return
    for record in records:
        engines.get(record.engine).down(record)
        console.print(f"{record.name}: down")


@task(help={"json": "print one JSON document"})
@_front_door()
def status(c, json=False):
    """The labs that are up, their nodes and interfaces."""
    engines = builtin_engines()
    labs = lab_state.all_labs()
    if json:
        print(jsonlib.dumps({"labs": [report.status_json(r, engines) for r in labs]}, indent=1))
        return
    if not labs:
        console.print("no lab is up")
    for record in labs:
        console.print(report.status_table(record, engines))


@task(name="exec", positional=["node"], help={"node": "the node to run in (NODE, or LAB.NODE when several labs are up)",
                                               "lab": "the lab the node belongs to"})
@_front_door()
def exec_(c, node, lab=None):
    """Run a command inside a node: `invoke exec h1 -- ping 198.19.4.2`."""
    if "." in node and not lab:
        lab, node = node.split(".", 1)
    record = _running(lab, "exec")
    argv = shlex.split(c.remainder)
    if not argv:
        raise InputError([Problem("exec", "", "needs a command after --", "e.g. invoke exec h1 -- ip -br addr")])
    try:
        record.node(node)
    except KeyError:
        raise InputError([Problem(node, "", f"is not a node of {record.name}",
                                  f"nodes: {', '.join(n.name for n in record.nodes)}")]) from None
    raise Exit(code=builtin_engines().get(record.engine).exec(record, node, argv))


@task(positional=["lab"], help={"lab": "a lab or topology (default: the lab that is up)",
                                 "out": "PNG file to write (default: <lab>-graph.png)"})
@_front_door(optional_positionals=("lab",))
def graph(c, lab=None, out=None):
    """Draw the topology: roles, links and addresses, as text and as a PNG."""
    from rocelab import graph as graph_mod

    spec = load_lab(lab if lab else _running(None, "graph").name)
    console.print(graph_mod.text_tree(spec.fabric))
    target = Path(out) if out else Path(f"{spec.name}-graph.png")
    graph_mod.draw(spec.fabric, target)
    console.print(f"picture: {target}")


def _agents(record: lab_state.LabState, node: str | None) -> list[dict]:
    agents = [p for p in record.processes if node in (None, p["node"])]
    if node and not agents:
        with_agents = ", ".join(p["node"] for p in record.processes) or "none (a kernel data plane lab)"
        raise InputError([Problem(node, "", f"runs no agent in {record.name}", f"nodes with counters: {with_agents}")])
    return agents


@task(positional=["what", "node"], help={
    "what": "counters", "node": "one node (default: every node with an agent)", "lab": "the lab (default: the one up)",
    "view": f"only these switch views, comma-separated: {', '.join(views.VIEWS)}",
    "interval": "seconds between the two samples that give interface rates (default 1)",
    "json": "print one JSON document"})
@_front_door(optional_positionals=("node",))
def show(c, what, node=None, lab=None, view=None, interval=1.0, json=False):
    """SONiC-style counter views of switchd and nicd: `invoke show counters leaf1`."""
    if what != "counters":
        raise InputError([Problem(what, "", "is not something show knows", "try: invoke show counters [NODE]")])
    chosen = tuple(v.strip() for v in view.split(",")) if view else views.VIEWS
    unknown = [v for v in chosen if v not in views.VIEWS]
    if unknown:
        raise InputError([Problem("--view", "", f"{', '.join(unknown)} is not a view", f"views: {', '.join(views.VIEWS)}")])
    record = _running(lab, "show counters")
    agents = _agents(record, node)

    def sample() -> dict[str, dict]:
        return {a["node"]: control.request(control.socket_path(record.name, a["node"]), "counters")
                for a in agents}

    rates = {n.name: {i.name: 0.0 for i in n.interfaces} for n in record.nodes}
    for a in agents:
        config = jsonlib.loads((control.socket_path(record.name, a["node"]).with_suffix(".json")).read_text())
        rates[a["node"]] = {p["name"]: p["rate_bps"] for p in config["ports"]}
    before = None
    if not json and "interfaces" in chosen and any(a["what"] == "switchd" for a in agents):
        before = sample()
        time.sleep(interval)
    now = sample()
    if json:
        print(jsonlib.dumps({"lab": record.name, "tdf": record.tdf,
                             "nodes": {name: {"agent": next(a["what"] for a in agents if a["node"] == name),
                                              "counters": reply["counters"]} for name, reply in now.items()}},
                            indent=1))
        return
    for a in agents:
        reply = now[a["node"]]
        if a["what"] == "switchd":
            console.print(views.switch_views(a["node"], reply["counters"],
                                             before[a["node"]]["counters"] if before else None, interval,
                                             rates[a["node"]], record.tdf, chosen))
        else:
            console.print(views.nic_view(a["node"], reply["counters"], record.tdf))


@task(help={"params": "model parameters (e.g. 175B, 7e9)", "dtype": "fp32, bf16, fp16, fp8 or bytes per parameter",
            "gpus": "number of GPUs (ranks)", "nic_speed": "NIC line rate (e.g. 400G)",
            "usd_per_gpu_hour": "price of one GPU-hour", "gpus_per_server": "GPUs per server (default 8)",
            "nics_per_server": "NICs per server (default 8)", "sync_budget": "time allowed for one AllReduce (e.g. 500ms)",
            "stall": "a stall to price (e.g. 600 or 2s)", "json": "print one JSON document"})
@_front_door()
def calc(c, params=None, dtype=None, gpus=None, nic_speed=None, usd_per_gpu_hour=None,
         gpus_per_server="8", nics_per_server="8", sync_budget=None, stall=None, json=False):
    """The arithmetic before any lab: gradient size, ring AllReduce bytes and time, cost of idling."""
    inputs = calc_mod.CalcInputs.from_strings(
        params=params, dtype=dtype, gpus=gpus, nic_speed=nic_speed, usd_per_gpu_hour=usd_per_gpu_hour,
        gpus_per_server=gpus_per_server, nics_per_server=nics_per_server, sync_budget=sync_budget, stall=stall)
    result = calc_mod.calculate(inputs)
    if json:
        print(jsonlib.dumps(calc_mod.to_json(result), indent=1))
    else:
        console.print(calc_mod.render_table(result))


@task(help={"k": "only tests matching this expression", "unit": "only the tests that need no root"})
def test(c, k=None, unit=False):
    """Run rocelab's test suite (root tests skip with a reason when not root)."""
    argv = [sys.executable, "-m", "pytest", str(paths.project_root() / "tests")]
    if k:
        argv += ["-k", k]
    if unit:
        argv += ["-m", "not root"]
    raise Exit(code=subprocess.call(argv, cwd=paths.project_root()))


ns = TaskCollection(up, down, status, exec_, graph, show, calc, test)
