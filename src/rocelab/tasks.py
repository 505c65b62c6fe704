"""The task front door: `invoke <task>` in a checkout, or the installed `rocelab <task>`.

Every task turns bad input into one message on stderr and exit status 2 (DESIGN.md:
0 success, 1 verdict failed, 2 usage or input error). `--json` prints one JSON document
on stdout.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json as jsonlib
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from invoke import Collection, Exit, task
from rich.console import Console

from rocelab.traffic import calc as calc_mod
from rocelab.kernel import control
from rocelab import paths
from rocelab.reporting import status as report
from rocelab.reporting import views
from rocelab.engines import state as lab_state
from rocelab import frontdoor
from rocelab.dashboard import serving as dashboard_serving
from rocelab.engines import builtin_engines
from rocelab.errors import EXIT_USAGE, InputError, Problem
from rocelab.model.lab import NOS_ROUTING, ROUTING_MODES, default_routing, load_lab
from rocelab.runtime import calibration
from rocelab.runtime.fidelity import AgentTiming, distinct
from rocelab.registry import UnknownName

# Wide enough for SONiC's 14-column interface view when output goes to a file or pipe.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def _front_door():
    """Turn rocelab's input errors into exit status 2 with their message, no traceback."""

    def wrap(fn):
        @functools.wraps(fn)
        def body(c, *args, **kwargs):
            try:
                return fn(c, *args, **kwargs)
            except (InputError, UnknownName) as exc:
                err_console.print(f"[red]error:[/red] {exc}", highlight=False, markup=True, soft_wrap=True)
                raise Exit(code=EXIT_USAGE) from None

        return body

    return wrap


def _fidelity_line(fidelity: dict) -> None:
    """Every result says whether the emulation kept up (rocelab.runtime.fidelity)."""
    console.print(fidelity["line"], highlight=False, style=None if fidelity["kept_up"] else "yellow")


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
    "engine": "netns (embedded default); docker: the lab's .clab.yml as containers on Docker Engine; "
              "clab: the same through containerlab (both build rocelab's images first when missing)",
    "tdf": "time-dilation factor: links run at rate/TDF, delays × TDF; auto: the smallest this machine holds "
           "for the lab's peak (default: the lab's, else auto)",
    "routing": "static (rocelab's ECMP routes) or bgp (FRR on every switch, docs/routing.md); default: the lab's, "
               "else bgp (static where FRR is not installed)",
})
@_front_door()
def up(c, lab, engine="netns", tdf="", routing=""):
    """Bring up a lab's fabric and show its status."""
    engines = builtin_engines()
    chosen = engines.get(engine)
    spec = load_lab(lab)
    if tdf == "auto":
        spec = replace(spec, tdf=None)
    elif tdf:
        if not tdf.isdigit() or int(tdf) < 1:
            raise InputError([Problem("--tdf", "", f"{tdf!r} is not a time-dilation factor",
                                      "auto, or a whole number ≥ 1, e.g. 1000")])
        spec = replace(spec, tdf=int(tdf), tdf_how="option")
    if routing:
        if routing not in ROUTING_MODES:
            raise InputError([Problem("--routing", "", f"{routing!r} is not a routing mode",
                                      f"one of: {', '.join(ROUTING_MODES)}")])
        if routing == "bgp" and default_routing(spec.fabric) != "bgp":
            raise InputError([Problem("--routing", "", f"is bgp, and {spec.name} has NOS switches: {NOS_ROUTING}",
                                      "--routing static")])
        spec = replace(spec, routing=routing, routing_how="option")
    with console.status(f"bringing up {spec.name} on the {engine} engine"):
        try:
            record = calibration.up(chosen, spec)
        except RuntimeError as exc:  # an agent, Docker or containerlab failed; the engine removed what it made
            err_console.print(f"[red]up failed:[/red] {exc}", highlight=False, soft_wrap=True)
            raise Exit(code=1) from None
    console.print(report.status_table(record, builtin_engines()))
    for note in spec.host_notes:  # what the hosts' NIC files hold that nicd cannot carry
        err_console.print(f"note: {note}", highlight=False, soft_wrap=True)


@task(positional=["lab"], optional=["lab"], help={"lab": "the lab to tear down (default: every lab that is up)"})
@_front_door()
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


def _node_of(node: str, lab: str | None) -> tuple[lab_state.LabState, str]:
    """The running lab and node NODE (or LAB.NODE) names; exit 2 naming it when not up."""
    if "." in node and not lab:
        lab, node = node.split(".", 1)
    record = _running(lab, node)
    try:
        record.node(node)
    except KeyError:
        raise InputError([Problem(node, "", f"is not a node of {record.name}",
                                  f"nodes: {', '.join(n.name for n in record.nodes)}")]) from None
    return record, node


def _node_env(record: lab_state.LabState, node: str) -> None:
    """The node's own commands on PATH for what runs in it, and which lab and node it is."""
    from rocelab import nodecli

    os.environ.update(ROCELAB_LAB=record.name, ROCELAB_NODE=node,
                      PATH=f"{nodecli.write_path_dir(record, node)}:{os.environ.get('PATH', '')}")


@task(name="exec", positional=["node"], help={"node": "the node to run in (NODE, or LAB.NODE when several labs are up)",
                                               "lab": "the lab the node belongs to"})
@_front_door()
def exec_(c, node, lab=None):
    """Run a command inside a node: `invoke exec h1 -- ping 198.19.4.2`, `invoke exec leaf1 -- show pfc counters`.

    The node's own commands (SONiC's show, config, ecnconfig, pfcwd, sonic-clear on a switch) are on its PATH."""
    from rocelab import nodecli

    record, node = _node_of(node, lab)
    argv = frontdoor.remainder_argv(c.remainder)
    if not argv:
        raise InputError([Problem("exec", "", "needs a command after --", "e.g. invoke exec h1 -- ip -br addr")])
    if argv[0] in nodecli.commands_of(record, node):
        raise Exit(code=nodecli.run(record, node, argv))
    _node_env(record, node)
    raise Exit(code=builtin_engines().get(record.engine).exec(record, node, argv))


@task(positional=["node"], help={"node": "the node (NODE, or LAB.NODE when several labs are up)",
                                 "lab": "the lab the node belongs to"})
@_front_door()
def config(c, node, lab=None):
    """SONiC's `config` on a switch: `invoke config leaf1 -- apply-patch fix.json`, `-- interface shutdown Ethernet8`."""
    from rocelab import nodecli

    record, node = _node_of(node, lab)
    if "config" not in nodecli.commands_of(record, node):
        raise InputError([Problem(node, "", "has no SONiC config (only a switch running switchd has)",
                                  "invoke exec NODE -- CMD runs a command in any node")])
    raise Exit(code=nodecli.run(record, node, ["config", *frontdoor.remainder_argv(c.remainder)]))


@task(positional=["node"], help={"node": "the node (NODE, or LAB.NODE when several labs are up)",
                                 "lab": "the lab the node belongs to"})
@_front_door()
def shell(c, node, lab=None):
    """An interactive shell inside a node, its own commands on PATH (SONiC's on a switch); `exit` leaves."""
    record, node = _node_of(node, lab)
    _node_env(record, node)
    os.environ["PS1"] = f"{node}:\\w$ "
    raise Exit(code=builtin_engines().get(record.engine).exec(record, node, ["bash", "--norc", "-i"]))


CHALLENGE_ACTIONS = ("list", "start", "hint", "check", "give-up")


@task(positional=["action", "name"], optional=["name"], help={
    "action": "list | start NAME | hint | check | give-up", "name": "the challenge (start only; see list)",
    "tdf": "start: as up's --tdf (default: the lab's, else auto)"})
@_front_door()
def challenge(c, action, name=None, tdf=""):
    """Break-fix challenges: a lab with a seeded fault to find and fix, and a grader (labs/challenges/README.md)."""
    from rich.table import Table

    from rocelab import nodecli
    from rocelab.nodecli import challenge as challenges
    from rocelab.runtime import scenario as scenario_run

    if action not in CHALLENGE_ACTIONS:
        raise InputError([Problem(action, "", "is not a challenge action", f"actions: {', '.join(CHALLENGE_ACTIONS)}")])
    if (name is not None) != (action == "start"):
        raise InputError([Problem(f"challenge {action}", "", "takes a NAME" if action == "start" else "takes no NAME",
                                  "invoke challenge start NAME; the others act on the challenge running")])
    if action == "list":
        table = Table(title="challenges (invoke challenge start NAME)", title_justify="left")
        for column in ("name", "lab", "title"):
            table.add_column(column)
        for each in challenges.names():
            loaded = challenges.load(each)
            table.add_row(each, loaded.lab, loaded.title)
        console.print(table)
        return
    def findings(record: lab_state.LabState, lab) -> list:
        """The static checks over what every switch and host of the running lab runs."""
        running, nics = {}, {}
        for process in record.processes:
            if process["what"] == "switchd":
                switch = nodecli.live_switch(record, process["node"], "")
                switch.running()
                running[process["node"]] = switch.running_path
            elif process["what"] == "nicd":
                nics[process["node"]] = nodecli.live_host(record, process["node"], "").running()
        return challenges.static_findings(lab, paths.STATE_DIR / record.name / "challenge", running, nics)

    if action == "start":
        chosen = challenges.load(name)
        up(c, chosen.lab, tdf=tdf)
        lab = load_lab(chosen.lab)
        record = lab_state.load(lab.name)
        baseline = findings(record, lab)
        for node in chosen.fault:
            if nodecli.commands_of(record, node) is nodecli.HOST_COMMANDS:
                host = nodecli.live_host(record, node, "")
                host.commit(challenges.seeded_nic(host.running(), chosen, node), record=False)
            else:
                switch = nodecli.live_switch(record, node, "")
                switch.commit(challenges.seeded(switch.running(), chosen, node), record=False)
        challenges.mark_started(record, chosen, baseline)
        console.print(f"challenge {name}: {chosen.title}\n\n{chosen.symptom}\n\n"
                      "invoke shell NODE to look around; invoke challenge check when you think it is fixed", highlight=False)
        return
    chosen, record = challenges.running(lab_state.all_labs())
    if action == "hint":
        console.print(chosen.hint, highlight=False)
        return
    if action == "give-up":
        console.print(f"the fault: {chosen.answer}\n\nthe fix:", highlight=False)
        for fix in chosen.fix:
            console.print(f"  invoke exec {fix.node} -- {shlex.join(challenges.fix_argv(chosen, fix))}", highlight=False)
        return
    found = findings(record, load_lab(chosen.lab))
    symptoms, behind = [], False
    case = chosen.scenario.cases[0] if chosen.scenario else None
    if case is not None:
        err_console.print(f"running the symptom's scenario: {case.traffic.pattern}", highlight=False)
        result = scenario_run.run_case(record, case, None, load_lab(chosen.lab).fabric, reload=False)
        symptoms = challenges.symptom_results(chosen, result.observations)
        behind = result.fidelity is not None and not result.fidelity.kept_up
        if behind:
            console.print(result.fidelity.line(), highlight=False)
    solved, lines = challenges.verdict_lines(found, symptoms, challenges.baseline_of(record), behind)
    for line in lines:
        console.print(line, highlight=False)
    console.print(f"challenge {chosen.name}: " + ("[green]solved[/green]" if solved else "[red]not solved yet[/red]"))
    if not solved:
        raise Exit(code=1)


@task(positional=["lab"], optional=["lab"], help={"lab": "a lab or topology (default: the lab that is up)",
                                 "out": "PNG file to write (default: <lab>-graph.png)"})
@_front_door()
def graph(c, lab=None, out=None):
    """Draw the topology: roles, links and addresses, as text and as a PNG."""
    from rocelab.reporting import graph as graph_mod

    spec = load_lab(lab if lab else _running(None, "graph").name)
    console.print(graph_mod.text_tree(spec.fabric))
    target = Path(out) if out else Path(f"{spec.name}-graph.png")
    graph_mod.draw(spec.fabric, target)
    console.print(f"picture: {target}")


@task(positional=["lab"], help={
    "lab": "a lab (folder under labs/) or a topology (file under topologies/, or a path)",
    "engine": "clab: containerlab's topology file (the only export so far)",
    "out": "the folder to write into (created if missing)",
})
@_front_door()
def export(c, lab, engine="clab", out=None):
    """Write a lab's containerlab topology and every NOS startup configuration, without deploying."""
    from rocelab.engines.clabfile import write_clab
    from rocelab.engines.containers import linux_kind

    if engine != "clab":
        raise InputError([Problem("--engine", "", f"{engine!r} has no export",
                                  "--engine clab writes containerlab's .clab.yml")])
    if not out:
        raise InputError([Problem("--out", "", "is missing", "name a folder, e.g. --out export/")])
    spec = load_lab(lab)
    written: list[Path] = []
    write_clab(spec, Path(out), kinds={"linux": linux_kind()}, written=written)
    for path in written:
        console.print(f"wrote {path}", highlight=False)
    console.print("note: `containerlab deploy` of this file starts the containers and the NOS switches' "
                  "configurations; rocelab's own switches and hosts get their addresses, routes and agents "
                  "from `rocelab up LAB --engine clab` on the machine that deploys them "
                  "(README, \"Beyond one machine\")", highlight=False)


def _agents(record: lab_state.LabState, node: str | None) -> list[dict]:
    agents = [p for p in record.processes if node in (None, p["node"])]
    if node and not agents:
        with_agents = ", ".join(p["node"] for p in record.processes) or "none (a kernel data plane lab)"
        raise InputError([Problem(node, "", f"runs no agent in {record.name}", f"nodes with counters: {with_agents}")])
    return agents


@task(positional=["what", "node"], optional=["node"], help={
    "what": "counters", "node": "one node (default: every node with an agent)", "lab": "the lab (default: the one up)",
    "view": f"only these switch views, comma-separated: {', '.join(views.VIEWS)}",
    "interval": "seconds between the two samples that give interface rates (default 1)",
    "json": "print one JSON document"})
@_front_door()
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
                             "fidelity_bound_s": record.fidelity_bound_s,
                             "nodes": {name: {"agent": next(a["what"] for a in agents if a["node"] == name),
                                              "counters": reply["counters"], "loop": reply["loop"]}
                                       for name, reply in now.items()}},
                            indent=1))
        return
    for a in agents:
        reply = now[a["node"]]
        if a["what"] == "switchd":
            console.print(views.switch_views(a["node"], reply["counters"],
                                             before[a["node"]]["counters"] if before else None, interval,
                                             rates[a["node"]], record.tdf, chosen))
        elif chosen != ("fidelity",):
            console.print(views.nic_view(a["node"], reply["counters"], record.tdf))
    if "fidelity" in chosen:
        timings = list(distinct(AgentTiming.of(a["node"], a["what"], now[a["node"]]["loop"]) for a in agents).values())
        console.print(views.fidelity(timings, record.fidelity_bound_s, record.tdf))


@task(positional=["where"], help={
    "where": "NODE:IFACE, e.g. leaf1:eth1 (LAB.NODE:IFACE when several labs are up)",
    "lab": "the lab (default: the one up)", "duration": "seconds to capture (default: until Ctrl-C)",
    "pcap": "also write every frame to this pcap (opens in tshark/Wireshark)", "json": "print one JSON document"})
@_front_door()
def probe(c, where, lab=None, duration=0.0, pcap=None, json=False):
    """Watch one lab interface: ECN CE marks, CNPs, PFC frames and quanta, PSN gaps, go-back-N."""
    from rocelab.reporting import probe as probe_view

    node, sep, iface = where.partition(":")
    if not sep or not iface:
        raise InputError([Problem(where, "", "is not NODE:IFACE", "e.g. invoke probe leaf1:eth1 --duration 5")])
    if "." in node and not lab:
        lab, node = node.split(".", 1)
    record = _running(lab, "probe")
    try:
        state_node = record.node(node)
    except KeyError:
        raise InputError([Problem(node, "", f"is not a node of {record.name}",
                                  f"nodes: {', '.join(n.name for n in record.nodes)}")]) from None
    if iface not in {i.name for i in state_node.interfaces}:
        raise InputError([Problem(where, "", f"{node} has no interface {iface!r}",
                                  f"interfaces: {', '.join(i.name for i in state_node.interfaces)}")])
    _stop_on_ctrl_c()
    report = probe_view.live(state_node.netns, iface, duration or None, pcap, json, console=None if json else console)
    if json:
        print(jsonlib.dumps(report.to_json(), indent=1))
    elif pcap:
        console.print(f"pcap: {pcap}")


def _stop_on_ctrl_c() -> None:
    """For a command that runs until Ctrl-C: SIGINT or SIGTERM raises KeyboardInterrupt, even
    when it was started with SIGINT ignored (a background job of a non-interactive shell
    inherits that, and Python then never raises KeyboardInterrupt)."""
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, signal.default_int_handler)


@task(help={"lab": "one lab (default: every lab that is up, read again at each scrape)",
            "serve": "serve http://127.0.0.1:PORT/metrics until Ctrl-C (0: any free port); never other addresses",
            "out": "write the text to this file instead of stdout"})
@_front_door()
def metrics(c, lab=None, serve=None, out=None):
    """Every switchd and nicd counter in Prometheus text format: printed, written, or served.

    `invoke metrics --serve 9400` answers Prometheus scrapes on 127.0.0.1:9400 until Ctrl-C.
    """
    from rocelab.reporting import metrics as metrics_mod  # prometheus_client only for this task
    from rocelab.runtime.readings import lab_reader

    if serve is not None and out:
        raise InputError([Problem("--serve", "", "and --out do not go together", "serve, or write a file, not both")])
    if lab:
        _running(lab, "metrics")
    elif serve is None and not lab_state.all_labs():
        raise InputError([Problem("metrics", "", "found no lab up", "run `invoke up lab-pfc` first")])
    read = lab_reader(lab)
    if serve is None:
        readings = read()
        for agent in (a for r in readings for a in r.agents if a.reply is None):
            err_console.print(f"warning: {agent.node}: {agent.error} (rocelab_agent_up 0)",
                              markup=False, highlight=False, soft_wrap=True)
        text = metrics_mod.exposition(readings)
        if out:
            Path(out).write_bytes(text)
            console.print(f"metrics: {paths.display(Path(out))}")
        else:
            sys.stdout.write(text.decode())
        return
    try:
        port = int(serve)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        raise InputError([Problem("--serve", "", f"{serve!r} is not a TCP port", "0-65535, e.g. 9400")]) from None
    try:
        server, thread = metrics_mod.serve(read, port)
    except OSError as exc:
        raise InputError([Problem("--serve", "", f"cannot listen on 127.0.0.1:{port}: {exc.strerror}",
                                  "pick another port")]) from None
    _stop_on_ctrl_c()
    console.print(f"serving http://{metrics_mod.LOCALHOST}:{server.server_port}/metrics "
                  f"({lab or 'every lab up'}); Ctrl-C stops", highlight=False)
    try:
        thread.join()  # serves until Ctrl-C
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    console.print("stopped")


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


PYTEST_NOTHING_SELECTED = 5  # pytest's exit status when a step selects no test (a -k with no timing test)


@task(help={"k": "only tests matching this expression", "unit": "only the tests that need no root"})
def test(c, k=None, unit=False):
    """Run rocelab's test suite (root tests skip with a reason when not root): the unit tests
    over a worker process per core (they share no lab, and no wall-clock figure is theirs),
    then the live ones one at a time (their labs share the cores and the state folder), both
    without the `timing` tests, then those as a step of their own, so a wall-clock figure a busy
    machine missed is told apart from a broken behaviour. Fails if any step fails."""
    codes = []
    tests = paths.project_root() / "tests"
    workers = ["-n", str(os.cpu_count() or 1)] if importlib.util.find_spec("xdist") else []
    for where, step, spread in ((tests / "unit", "not timing", workers), (tests / "live", "not timing", []),
                                (tests, "timing", [])):
        argv = [sys.executable, "-m", "pytest", str(where), *spread,
                "-m", f"({step}) and not root" if unit else step]
        if k:
            argv += ["-k", k]
        code = subprocess.call(argv, cwd=paths.project_root())
        codes.append(0 if code == PYTEST_NOTHING_SELECTED else code)
    raise Exit(code=max(codes))


@contextlib.contextmanager
def _job_progress(title: str, lab: str | None = None):
    """A progress bar on a terminal; without one, a line per iteration (logs stay short).
    With `lab`, a serving dashboard shows the progress too, and its URL is printed."""
    if lab and dashboard_serving.url():
        err_console.print(f"dashboard: {dashboard_serving.url()}", highlight=False)
        report = dashboard_serving.JobReporter(lab)
        try:
            with _job_progress(title) as show:
                yield lambda p: (show(p), report(p))
        finally:
            dashboard_serving.end_job(lab)
        return
    if err_console.is_terminal:
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                   TextColumn("{task.fields[detail]}"), TimeElapsedColumn())
        with Progress(*columns, console=err_console, transient=True) as bar:
            task_id = bar.add_task(title, total=None, detail="")
            yield lambda p: bar.update(task_id, total=p.bytes_total, completed=p.bytes_done,
                                       detail=f"iteration {p.iterations_done}/{p.iterations}")
        return
    seen = set()

    def line(p) -> None:
        if p.iterations_done not in seen:
            seen.add(p.iterations_done)
            err_console.print(f"{title}: iteration {p.iterations_done}/{p.iterations} · "
                              f"{p.bytes_done / max(p.bytes_total, 1):.0%} of bytes · {p.elapsed_s:.1f} s",
                              highlight=False)

    yield line


@task(positional=["pattern"], help={
    "pattern": "a pattern file (traffic/NAME.yml or a path) or a pattern: ring-allreduce, halving-doubling, "
               "alltoall, incast, elephant",
    "lab": "the lab to run on (default: the only lab that is up)",
    "hosts": "comma-separated hosts (default: the file's, else every host of the lab)",
    "size": "nccl-tests size: per-rank buffer, per sender for incast/elephant (e.g. 4MB, 64MiB)",
    "iters": "iterations (training steps)",
    "qps": "QPs per peer (each its own UDP source port: ECMP entropy)",
    "json": "print the report as one JSON document",
    "report_dir": "where to write the run report (plots + HTML; default runs/<lab>-<time>/, `none`: no report)",
})
@_front_door()
def traffic(c, pattern, lab=None, hosts=None, size=None, iters=0, qps=0, json=False, report_dir=None):
    """Run a traffic pattern on a running lab; report time, algbw, busbw, FCT, retransmissions, CNPs, PFC."""
    from rocelab.reporting import run as runreport
    from rocelab.runtime.timeseries import Sampler
    from rocelab.reporting import traffic as traffic_report
    from rocelab.traffic.job import JobFailed, run_job
    from rocelab.traffic.patterns import builtin_patterns
    from rocelab.traffic.spec import resolve_spec, with_overrides

    spec = with_overrides(resolve_spec(pattern, builtin_patterns()), hosts=hosts, size=size,
                          iterations=iters or None, qps=qps or None)
    record = _running(lab, "traffic")
    sampler = Sampler(record).start() if report_dir != "none" else None
    try:
        with _job_progress(f"{spec.pattern} on {record.name}", record.name) as on_progress:
            dashboard_serving.publish_job(record.name, pattern=spec.pattern)
            report, _ = run_job(record, spec, on_progress=on_progress)
    except JobFailed as exc:
        err_console.print(f"[red]job failed:[/red] {exc}", highlight=False, soft_wrap=True)
        raise Exit(code=1) from None
    finally:
        series = sampler.stop() if sampler else None
    written = None
    if series is not None:
        total = report["total"]
        rows = [[k, jsonlib.dumps(v)] for k, v in total.items() if k != "counters"]
        rows += [[f"counters.{k}", jsonlib.dumps(v)] for k, v in total.get("counters", {}).items()]
        run_dir = Path(report_dir) if report_dir else runreport.default_run_dir(record.name)
        written = runreport.write_report(run_dir, record, series, [("Job totals", ["figure", "value"], rows)], None,
                                         f"{spec.pattern} on {record.name}",
                                         dashboard_serving.save_snapshot(run_dir / runreport.DASHBOARD_NAME))
    if json:
        print(jsonlib.dumps({**report, "report": str(written) if written else None}, indent=1))
    else:
        console.print(traffic_report.render_report(report))
        _fidelity_line(report["fidelity"])
        if written:
            console.print(f"run report: {written}")


@task(positional=["lab"], help={"lab": "the lab (a folder under labs/), brought up first with `invoke up LAB`",
                                 "json": "print one JSON document", "report": "write the run report (default on)",
                                 "case": "only these cases, comma-separated (checks on other cases are left out)"})
@_front_door()
def run(c, lab, json=False, report=True, case=None):
    """Run a lab's scenario: every case, observations side by side, checks, a verdict (exit 0/1)."""
    from rich.table import Table

    from rocelab.reporting import run as runreport

    from rocelab import nodecli
    from rocelab.model import scenario
    from rocelab.routing.design import lab_bgp
    from rocelab.runtime import scenario as scenario_run
    from rocelab.train import core as train
    from rocelab.train.runner import require_torch

    spec = load_lab(lab)
    if spec.scenario is None:
        raise InputError([Problem(spec.source, "scenario", "is missing: this lab has nothing to run",
                                  "add `scenario:` cases and `checks:` to its lab.yml")])
    chosen = spec.scenario if case is None else scenario.only_cases(spec.scenario, case.split(","), spec.source)
    record = lab_state.load(spec.name)
    if record is None:
        raise InputError([Problem(spec.name, "", "is not up", f"run `invoke up {spec.name}` first")])
    if any(k.traffic is not None for k in chosen.cases) and not any(p["what"] == "nicd" for p in record.processes):
        raise InputError([Problem(spec.source, "nic", "the scenario needs the emulated NIC on every host",
                                  "set `nic: emulated` in lab.yml, then `invoke down` and `invoke up` again")])
    if any(k.training is not None for k in chosen.cases):
        require_torch(spec.source)
    late = ", ".join(f"{node} ({how})" for node, how in scenario_run.agents_not_realtime(record).items())
    if late:
        err_console.print(f"note: {late} run without real-time scheduling: on a busy machine they can react "
                          "late, and a lossless class can drop (emulation lag, not PFC)", highlight=False)
    def on_case(started) -> None:
        err_console.print(f"case {started.name}: {started.title}", highlight=False)
        dashboard_serving.publish_job(spec.name, case=started.name, title=started.title,
                                      pattern=started.traffic.pattern if started.traffic else "training")

    def run_step(case, step) -> int:
        err_console.print(f"case {case.name} at {step.at_s * 1e3:g} ms ({step.at_s * record.tdf:g} s on the lab): "
                          + (step.text if step.impair else f"{step.node}$ {step.text}"), highlight=False)
        if step.impair:
            from rocelab.nodecli.node import record_event

            scenario_run.impair(record, step.impair)
            # on the lab's time line beside the commands typed, as the dashboard marks changes
            record_event(paths.STATE_DIR / record.name, step.node, step.text, [f"{step.node}:{step.impair.port}"])
            return 0
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the report's (--json)
            status = nodecli.run(record, step.node, list(step.argv))
        if status:
            err_console.print(f"[red]case {case.name}: `{step.text}` on {step.node} "
                              f"exited {status}[/red]", highlight=False)
        return status

    with _job_progress(spec.name, spec.name) as on_progress:
        result = scenario_run.run(record, chosen, spec.profile, spec.fabric,
                                  on_case=on_case, run_step=run_step,
                                  bgp=(lambda case: lab_bgp(spec, case.bgp)) if record.routes_on_frr
                                  else None,
                                  start_ports=lambda node, ports: nodecli.start_ports(record, node, ports),
                                  on_note=lambda text: err_console.print(f"  {text}", highlight=False),
                              on_progress=on_progress,
                              on_step=lambda step, workers: err_console.print(train.step_text(step, workers),
                                                                              highlight=False))
    verdict = result.verdict
    trained = [(c.case.title, c.observations) for c in result.cases if c.case.training is not None]
    slowdown = ("Training: total time and slowdown against the first case (wall-clock on this machine)",
                list(train.SLOWDOWN_COLUMNS), train.slowdown_rows(trained))
    report_path = None
    time_note = result.time_note(record)
    if report:
        run_dir = runreport.default_run_dir(spec.name)
        snapshot = dashboard_serving.save_snapshot(run_dir / runreport.DASHBOARD_NAME)
        tables = [("Observations", ["observation", *(c.case.name for c in result.cases)], result.rows()),
                  ("Checks", ["result", "check", "left", "right"], result.check_rows())] + ([slowdown] if trained else [])
        if result.step_rows():
            tables.append((scenario_run.STEPS_TITLE, list(scenario_run.STEP_COLUMNS), result.step_rows()))
        if time_note:
            tables.append(("Time", ["which figures run on which clock"], [[time_note]]))
        runreport.write_reports(run_dir, record, [(case.case.name, case.series,
                                                   f"{verdict} (case {case.case.name}: {case.case.title})",
                                                   f"{spec.name}: {case.case.title}") for case in result.cases],
                                tables, snapshot)
        (run_dir / "run.json").write_text(jsonlib.dumps({**result.to_json(), "time": time_note},
                                                        indent=1, default=str))
        report_path = run_dir
    if json:
        print(jsonlib.dumps({**result.to_json(), "time": time_note,
                             "run_dir": str(report_path) if report_path else None},
                            indent=1, default=str))
    else:
        # A training job's times are wall-clock: its compute and the hosts' TCP are not dilated.
        units = "times wall-clock on this machine" if len(trained) == len(result.cases) else "production-equivalent"
        table = Table(title=f"{spec.name}: observations ({units})", title_justify="left")
        table.add_column("observation")
        for case in result.cases:
            table.add_column(case.case.title, justify="right")
        for row in result.rows():
            table.add_row(*row)
        console.print(table)
        if trained:
            title, columns, rows = slowdown
            times = Table(title=title, title_justify="left")
            for column in columns:
                times.add_column(column, justify="left" if column == "case" else "right")
            for row in rows:
                times.add_row(*row)
            console.print(times)
        checks = Table(title="checks", title_justify="left")
        for column in ("result", "check", "left", "right"):
            checks.add_column(column)
        for row in result.check_rows():
            checks.add_row(*row, style={"pass": None, "inconclusive": "bold yellow"}.get(row[0], "bold red"))
        console.print(checks)
        for case in result.cases:
            if case.fidelity is not None:
                console.print(f"case {case.case.name}: {case.fidelity.line()}", highlight=False,
                              style=None if case.fidelity.kept_up else "yellow")
            if case.error and case.observations.get("stalled") and case.case.name in result.stall_checked():
                console.print(f"case {case.case.name} stalled, as its checks expect: {case.error}")
            elif case.error:
                console.print(f"[red]case {case.case.name} did not finish:[/red] {case.error}")
        if result.step_rows():
            steps = Table(title=scenario_run.STEPS_TITLE, title_justify="left")
            for column in scenario_run.STEP_COLUMNS:
                steps.add_column(column)
            for row in result.step_rows():
                steps.add_row(*row)
            console.print(steps)
        if time_note:
            console.print(time_note, highlight=False)
        if report_path:
            console.print(f"run report: {report_path}/<case>/report.html")
        console.print(f"verdict: [{ {'passed': 'green', 'inconclusive': 'yellow'}.get(verdict, 'red') }]{verdict}[/]")
    if not result.passed:
        raise Exit(code=1)


@task(positional=["src", "dst"], help={
    "src": "the sending host", "dst": "the receiving host",
    "lab": "the lab to run on (default: the only lab that is up)",
    "size": "message size (default 65536, as ib_write_bw)",
    "qps": "QPs (default 1)",
    "duration": "about how long to stream, in wall-clock (emulated) seconds (default 5)",
    "verb": "write (default: SRC writes to DST, as ib_write_bw) or read (DST reads SRC's memory, as ib_read_bw)",
    "json": "print one JSON document",
})
@_front_door()
def bw(c, src, dst, lab=None, size="65536", qps=1, duration=5.0, verb="write", json=False):
    """RDMA bandwidth from SRC to DST, as perftest's ib_write_bw (or ib_read_bw): BW peak/average, MsgRate."""
    from rocelab.reporting import traffic as traffic_report
    from rocelab.traffic.job import JobFailed, run_bw
    from rocelab.units import parse_bytes

    problems = []
    try:
        message_bytes = parse_bytes(size)
        if message_bytes < 1:
            problems.append(Problem("--size", "", f"{size!r} is too small", "at least 1 byte"))
    except ValueError as exc:
        problems.append(Problem("--size", "", str(exc), "a size like 65536 or 1MiB"))
    if not 1 <= qps <= 64:
        problems.append(Problem("--qps", "", f"{qps} is not a QP count", "1 to 64"))
    if not duration > 0:
        problems.append(Problem("--duration", "", f"{duration} is not a duration", "seconds, e.g. 5"))
    if verb not in ("write", "read"):
        problems.append(Problem("--verb", "", f"{verb!r} is not a verb bw measures", "write or read"))
    if problems:
        raise InputError(problems)
    record = _running(lab, "bw")
    try:
        with _job_progress(f"bw {src} → {dst}") as on_progress:
            summary = run_bw(record, src, dst, message_bytes=message_bytes, qps=qps, duration_s=float(duration),
                             on_progress=on_progress, verb=verb)
    except JobFailed as exc:
        err_console.print(f"[red]bw failed:[/red] {exc}", highlight=False, soft_wrap=True)
        raise Exit(code=1) from None
    if json:
        print(jsonlib.dumps(summary, indent=1))
    else:
        console.print(traffic_report.render_bw(summary))
        _fidelity_line(summary["fidelity"])


@task(help={"force": "rebuild even when the images already hold this checkout's rocelab"})
@_front_door()
def images(c, force=False):
    """Build rocelab's switch and host images locally (debootstrap + this checkout's wheel, no registry)."""
    from rocelab.engines import images as images_mod

    try:
        results = images_mod.ensure_images(force, on_step=lambda step: err_console.print(step, highlight=False))
    except RuntimeError as exc:  # a build step failed (debootstrap, pip, docker): its own words
        err_console.print(f"[red]images failed:[/red] {exc}", highlight=False, soft_wrap=True)
        raise Exit(code=1) from None
    console.print(images_mod.render_table(results))


@task(positional=["lab"], optional=["lab"], help={
    "lab": "the lab to watch (default: the only lab up, whichever it is at each sample)",
    "port": "TCP port (default 8080)",
    "bind": "address to listen on (default 127.0.0.1; anything else exposes the lab to the network)"})
@_front_door()
def dashboard(c, lab=None, port=8080, bind="127.0.0.1"):
    """A live browser view of the lab: link load, PFC pauses, queues, ECN, drops, the job; Ctrl-C stops."""
    from rocelab.dashboard import cli as dashboard_cli  # the web stack only for this task

    name = load_lab(lab).name if lab else None  # an unknown lab is an input error, not a page that waits
    dashboard_cli.serve(name, port, bind, console, err_console)


frontdoor.install()
ns = Collection(up, down, status, exec_, config, shell, challenge, graph, export, show, probe, metrics, run, traffic, bw, calc, images,
                dashboard, test)
