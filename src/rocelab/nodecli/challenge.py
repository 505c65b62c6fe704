"""Break-fix challenges: a lab brought up with a fault it does not name, and a grader.

A challenge is a file `labs/challenges/NAME.yml`:

    title: …                      # what `challenge list` shows (never the fault)
    lab: lab-pfc                  # the lab it runs on
    symptom: …                    # what the student sees
    hint: …                       # `challenge hint`
    fault: {leaf1: [JSON Patch]}  # seeded at start into a switch's running config_db, or a host's
                                  # running NIC (its JSON: /trust, /pfc_priorities, /dscp_to_priority/26 …)
    answer: …                     # `challenge give-up`: the fault, in words …
    fix: [{node: leaf1, run: "config …"}]   # … and the commands that fix it (paths relative to the file)
    run: {traffic: incast-4to1, with: {size: 3MB, iterations: 1}, checks: ["drops == 0"]}   # the symptom's
        # scenario: a lab.yml case's traffic, with, background and storm, and its checks

`check` grades the running lab: the static checks (rocelab.fabric.lint) over every switch's
running config_db and every host's running NIC (its `mlnx_qos` and sysfs output, as a user
would save them), then the symptom's scenario with its checks; it says what still fails
by check and count, never the fault. A finding the lab had before its fault was seeded
(lab-pfc's NICs run without DCQCN by design) is the lab's, not the challenge's: `start` keeps
those, and `check` leaves them out.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from rocelab import paths
from rocelab.engines.state import LabState
from rocelab.errors import InputError, Problem, Problems
from rocelab.fabric.lint import lint
from rocelab.fabric.spec import load_fabric_spec
from rocelab.model.lab import Lab, load_lab
from rocelab.model.scenario import Scenario, evaluate, load_scenario
from rocelab.qos import configdb
from rocelab.qos.nic import HostNicConfig, nic_from_json, nic_to_json
from rocelab.reporting import nic_cli
from rocelab.yamlfile import YamlDoc, load_yaml

KEYS = ("title", "lab", "symptom", "hint", "fault", "answer", "fix", "run")
RUN_KEYS = ("traffic", "with", "background", "storm", "checks")
# The hosts' side of the static checks: NVIDIA's defaults, which every lab's NICs use.
HOSTS = {"roce_dscp": 26, "roce_priority": 3, "cnp_dscp": 48, "roce_mtu": 4096}


@dataclass(frozen=True)
class Fix:
    node: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Challenge:
    name: str
    folder: Path
    title: str
    lab: str
    symptom: str
    hint: str
    fault: dict[str, list[dict]]
    answer: str
    fix: tuple[Fix, ...]
    scenario: Scenario | None  # the symptom's: one case, "symptom", and its checks


def challenges_dir() -> Path:
    return paths.labs_dir() / "challenges"


def names() -> list[str]:
    return sorted(p.stem for p in challenges_dir().glob("*.yml"))


def load(name: str) -> Challenge:
    path = challenges_dir() / f"{name}.yml"
    if not path.is_file():
        raise InputError([Problem(name, "", "is not a challenge", f"challenges: {', '.join(names())}")])
    doc = load_yaml(path)
    data, problems = doc.data, Problems(str(path))
    if not isinstance(data, dict):
        problems.add("", "is not a mapping", f"keys: {', '.join(KEYS)}")
        problems.raise_if_any()
    for key in set(KEYS) - set(data) - {"run"}:
        problems.add(key, "is missing")
    for key in set(data) - set(KEYS):
        problems.add(key, f"unknown key {key!r}", f"keys: {', '.join(KEYS)}")
    fault = data.get("fault")
    if not isinstance(fault, dict) or not all(isinstance(p, list) for p in fault.values()):
        problems.add("fault", "is not a JSON Patch per switch", "fault: {leaf1: [{op: replace, path: …, value: …}]}")
    fixes = []
    for i, item in enumerate(data.get("fix") or []):
        if not isinstance(item, dict) or set(item) != {"node", "run"}:
            problems.add(f"fix[{i}]", f"{item!r} is not a command", 'write {node: leaf1, run: "config …"}')
        else:
            fixes.append(Fix(item["node"], tuple(shlex.split(str(item["run"])))))
    run = data.get("run")
    if run is not None and (not isinstance(run, dict) or set(run) - set(RUN_KEYS) or "traffic" not in run
                            or not isinstance(run.get("checks", []), list)):
        problems.add("run", f"{run!r} is not a symptom scenario",
                     f"keys: {', '.join(RUN_KEYS)}, as a lab.yml case's; checks like \"drops == 0\"")
    problems.raise_if_any()
    return Challenge(name, path.parent, str(data["title"]), str(data["lab"]), str(data["symptom"]).strip(),
                     str(data["hint"]).strip(), fault, str(data["answer"]).strip(), tuple(fixes),
                     None if run is None else _scenario(doc.name, str(data["lab"]), str(data["title"]), run))


def _scenario(file: str, lab_name: str, title: str, run: dict) -> Scenario:
    """The symptom's scenario: `run` read as one case of the challenge's lab, by the lab's own
    scenario reader (its problems name the challenge's file)."""
    lab = load_lab(lab_name)
    fabric = lab.fabric
    case = {"case": "symptom", "title": title, **{k: v for k, v in run.items() if k != "checks"}}
    doc = YamlDoc(file, {"scenario": [case], "checks": [f"symptom: {c}" for c in run.get("checks", [])]}, None)
    return load_scenario(doc, paths.labs_dir() / lab_name, {h.name for h in fabric.hosts},
                         {(n.name, p.name) for n in fabric.switches for p in n.ports},
                         {(n.name, p.name) for n in fabric.nodes for p in n.ports})


def seeded(doc: dict, challenge: Challenge, node: str) -> dict:
    """A switch's running config with the challenge's fault in it."""
    return configdb.patched(doc, challenge.fault.get(node, []))


def seeded_nic(nic: HostNicConfig, challenge: Challenge, node: str) -> HostNicConfig:
    """A host's running NIC with the challenge's fault in it."""
    return nic_from_json(configdb.patched(nic_to_json(nic), challenge.fault.get(node, [])))


def fix_argv(challenge: Challenge, fix: Fix) -> list[str]:
    """A fix's command with its files found beside the challenge (as a user would type their path)."""
    return [str(challenge.folder / word) if (challenge.folder / word).is_file() else word for word in fix.argv]


# --- the running lab's state


def _state(lab: str) -> Path:
    return paths.STATE_DIR / lab / "challenge.json"


def running(records: list[LabState]) -> tuple[Challenge, LabState]:
    for record in records:
        if _state(record.name).is_file():
            return load(json.loads(_state(record.name).read_text())["name"]), record
    raise InputError([Problem("challenge", "", "none is running", "invoke challenge start NAME (invoke challenge list)")])


def mark_started(record: LabState, challenge: Challenge, baseline: list) -> None:
    """`baseline`: the static findings of the lab before the fault was seeded."""
    _state(record.name).write_text(json.dumps({"name": challenge.name,
                                               "baseline": sorted({(f.check, f.device) for f in baseline})}))


def baseline_of(record: LabState) -> set[tuple[str, str]]:
    return {tuple(item) for item in json.loads(_state(record.name).read_text()).get("baseline", [])}


# --- grading


def static_findings(lab: Lab, folder: Path, running_config: dict[str, Path],
                    nics: dict[str, HostNicConfig] | None = None, iface: str = "eth1") -> list:
    """The static checks over every switch's running config_db and every host's running NIC
    (`nics`, written as its tools print it), as `pytest --fabric` runs them (the fabric
    description written into `folder`)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for host, nic in (nics or {}).items():
        files[host] = {"mlnx_qos": str(folder / f"{host}.mlnx_qos.txt"), "sysfs": str(folder / f"{host}.sysfs.txt")}
        Path(files[host]["mlnx_qos"]).write_text(nic_cli.mlnx_qos(nic) + "\n")
        Path(files[host]["sysfs"]).write_text(
            "".join(f"{p}={v}\n" for p, v in nic_cli.sysfs_files(nic, iface).items()))
    fabric = {"name": "challenge", "topology": str(Path(lab.fabric.source).resolve()),
              "devices": {name: {"sonic": str(path)} for name, path in running_config.items()},
              "hosts": {**HOSTS, **({"nics": files} if files else {})}}
    (folder / "fabric.yml").write_text(json.dumps(fabric, indent=1))
    return lint(load_fabric_spec(folder / "fabric.yml"))


def symptom_results(challenge: Challenge, observations: dict[str, float]) -> list[tuple[str, bool, float]]:
    """(check, passed, observed value) for each of the symptom scenario's checks."""
    return [(r.check.text.removeprefix("symptom: "), r.passed, r.left)
            for r in evaluate(challenge.scenario.checks, {"symptom": observations})]


def verdict_lines(findings: list, symptoms: list[tuple[str, bool, float]],
                  baseline: set[tuple[str, str]] = frozenset(), behind: bool = False) -> tuple[bool, list[str]]:
    """Solved, and what still fails: a check's name and how many places, never the finding
    itself (findings the lab had before its fault, `baseline`, are left out). A symptom check that
    failed while the emulation fell behind (`behind`) is inconclusive, not failed: not solved yet,
    but the student's fix is not what it blames."""
    by_check: dict[str, set[str]] = {}
    for finding in findings:
        if (finding.check, finding.device) in baseline:
            continue
        by_check.setdefault(finding.check, set()).add(finding.device)
    lines = [f"static check {name}: fails on {', '.join(sorted(devices))}" for name, devices in sorted(by_check.items())]
    failing = "inconclusive: the emulation fell behind, check again" if behind else "fails"
    lines += [f"symptom: {text}: {'passes' if ok else failing} (observed {value:g})" for text, ok, value in symptoms]
    solved = not by_check and all(ok for _, ok, _ in symptoms)
    return solved, lines
