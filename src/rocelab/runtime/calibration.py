"""What the lab's agents cost this machine, measured once and kept; `up` with the TDF that
this machine can hold (`up --tdf auto`, rocelab.model.tdf).

The measurement is of the agents themselves, in a small lab of their own: one switchd
between four nicd hosts, h1 and h2 on 100G ports, h3 and h4 on 20G ports, at TDF 1000. An
elephant flow h1 → h2, then one h3 → h4, each alone: switchd forwards, and two NICs send and
receive, at two frame rates five times apart. For each kind of agent the CPU time it spent
(/proc/PID/schedstat, nanoseconds) against the data frames it handled gives, by a straight
line through the two points, a cost per frame and a cost of being busy at all (wake-ups,
timers, control: what does not shrink with the traffic). CPU time is counted, not wall time,
so what else the machine runs changes the figures little; the fidelity report
(rocelab.runtime.fidelity) says when the machine could not give the agents that time.

The result is kept under paths.cache_dir() per rocelab version and sources, CPU model and
core count: changed agents are measured again. Calibrating takes a few seconds, once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import tempfile
from dataclasses import replace
from pathlib import Path

import rocelab
from rocelab import paths
from rocelab.engines import Engine, builtin_engines
from rocelab.engines.state import LabState
from rocelab.model.lab import Lab
from rocelab.model.tdf import AgentCosts, TdfChoice, choose_tdf, pinned
from rocelab.model.topology import load_topology
from rocelab.roce.config import roce_config
from rocelab.switch.fastpath import switchd_pipeline
from rocelab.traffic.job import run_job
from rocelab.traffic.spec import JobSpec

CALIBRATION_TDF = 1000
# h1 and h2 on 100G ports, h3 and h4 on 20G: the same flow at two frame rates, 5× apart.
TOPOLOGY = """\
name: calibration
topology:
  defaults: {rate: 100G, cable: 5}
  nodes:
    leaf1: {role: leaf}
    h1: {role: host}
    h2: {role: host}
    h3: {role: host}
    h4: {role: host}
  links:
    - {endpoints: ["h1:eth1", "leaf1:eth1"]}
    - {endpoints: ["h2:eth1", "leaf1:eth2"]}
    - {endpoints: ["h3:eth1", "leaf1:eth3"], rate: 20G}
    - {endpoints: ["h4:eth1", "leaf1:eth4"], rate: 20G}
"""
FLOWS = (("h1", "h2", 8_000_000), ("h3", "h4", 2_000_000))  # ~0.7 s each at TDF 1000


def _cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(seconds per frame, cores when busy at all) of the line through two (frames/s, cores) points."""
    (x1, y1), (x2, y2) = points
    per_frame = max((y2 - y1) / (x2 - x1), 0.0)
    return per_frame, max(y1 - per_frame * x1, 0.0)


def measure(name: str) -> AgentCosts:
    """Bring up the calibration lab as `name` (netns engine: the agents' cost is what is
    measured, and containers run the same agents), run the two flows, take it down."""
    engine = builtin_engines().get("netns")
    with tempfile.TemporaryDirectory(prefix="rocelab-calibration-") as folder:
        topology = Path(folder) / "calibration.yml"
        topology.write_text(TOPOLOGY)
        fabric = load_topology(topology)
    lab = Lab(name, "calibration", fabric, "switchd", CALIBRATION_TDF, paths.profiles_dir() / "roce-lossless.json",
              "emulated")
    record = engine.up(lab, TdfChoice(CALIBRATION_TDF, "calibration", 0.0, "measuring this machine's agents"))
    try:
        return _measure_flows(record, lab)
    finally:
        engine.down(record)


def _measure_flows(record: LabState, lab: Lab) -> AgentCosts:
    pid = {p["node"]: p["pid"] for p in record.processes}
    pmtu = roce_config(lab.roce).pmtu_bytes
    switch_points, nic_points = [], []
    for src, dst, size in FLOWS:
        before = {node: _cpu_ns(p) for node, p in pid.items()}
        report, _ = run_job(record, JobSpec("elephant", hosts=(src, dst), size_bytes=size, iterations=1))
        spent = {node: (_cpu_ns(p) - before[node]) / 1e9 for node, p in pid.items()}
        wall_s = report["total"]["time_s"]["emulated"]
        frames_per_s = size / pmtu / wall_s  # data frames; their ACKs are part of each frame's cost
        switch_points.append((frames_per_s, spent["leaf1"] / wall_s))
        nic_points.append((frames_per_s, (spent[src] + spent[dst]) / 2 / wall_s))
    switch_frame_s, switch_busy = _fit(switch_points)
    nic_frame_s, nic_busy = _fit(nic_points)
    return AgentCosts(switch_frame_s, nic_frame_s, os.cpu_count() or 1, switch_busy, nic_busy)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cache_key() -> str:
    """rocelab's version and sources, which pipeline switchd runs (its C fast path or the Python
    one), the CPU and the core count: what the figures depend on."""
    digest = hashlib.sha256(switchd_pipeline().encode())
    for path in sorted(p for p in Path(rocelab.__file__).parent.rglob("*") if p.suffix in (".py", ".c")):
        digest.update(path.read_bytes())
    cpu = hashlib.sha256(_cpu_model().encode()).hexdigest()[:8]
    return f"{rocelab.__version__}-{digest.hexdigest()[:12]}-{cpu}-{os.cpu_count()}"


def costs(lab_name: str) -> AgentCosts:
    """This machine's agent costs: from the cache when it holds them for these sources and CPU,
    else measured now in a calibration lab named after the lab being brought up."""
    key = cache_key()
    cache = paths.cache_dir() / "calibration.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        kept = json.loads(cache.read_text())
        if kept["key"] == key:
            return AgentCosts(**kept["costs"])
    measured = measure(f"{lab_name[:19]}-calibration")
    with contextlib.suppress(OSError):  # a read-only cache only costs the next `up` a measurement
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "cpu": _cpu_model(), "costs": measured.__dict__}, indent=1))
        os.replace(tmp, cache)
    return measured


def resolve_tdf(lab: Lab) -> tuple[Lab, TdfChoice]:
    """The lab with a TDF, and why that one: the lab's or the user's, or the one this machine
    holds for the lab's peak (lab.tdf None)."""
    here = costs(lab.name)
    pmtu = roce_config(lab.roce).pmtu_bytes
    if lab.tdf is None:
        choice = choose_tdf(lab.fabric, lab.scenario, pmtu, here, floor=lab.tdf_floor)
        return replace(lab, tdf=choice.tdf), choice
    return lab, pinned(lab.fabric, lab.scenario, pmtu, here, lab.tdf, lab.tdf_how)


def up(engine: Engine, lab: Lab) -> LabState:
    """`up` as users mean it: the TDF chosen (rocelab.model.tdf), then the engine builds."""
    lab, choice = resolve_tdf(lab)
    return engine.up(lab, choice)
