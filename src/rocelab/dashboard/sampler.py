"""The dashboard's sampler: polls the lab's agents from a thread and keeps the frames.

It reads with `runtime.readings.read_lab` (what Prometheus scrapes and the run report's Sampler
polls) and turns readings into frames with the pure rocelab.dashboard.model. A lab that
goes down, or was never up, gives "no lab up" frames; a lab that comes up again (or a
different one) starts afresh: new topology, new thresholds, new history.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from pathlib import Path

from rocelab import paths
from rocelab.kernel import control
from rocelab.nodecli.node import read_events

from rocelab.runtime.readings import read_lab
from rocelab.engines import state as lab_state
from rocelab.dashboard import model, serving
from rocelab.errors import InputError
from rocelab.qos.sonic import load_config_db
from rocelab.engines.state import LabState

DEFAULT_INTERVAL_S = 0.2  # 5 frames a second
HISTORY_S = 300.0  # the time slider's span


def _line_rates(record: LabState) -> dict[str, float]:
    """'leaf1:eth1' → the port's (dilated) line rate from the agent's configuration file."""
    rates = {}
    for proc in record.processes:
        try:
            config = json.loads(control.socket_path(record.name, proc["node"]).with_suffix(".json").read_text())
        except (OSError, ValueError):
            continue
        rates.update({f"{proc['node']}:{p['name']}": p["rate_bps"] for p in config.get("ports", [])})
    return rates


class DashboardSampler:
    """Frames of the lab named (None: the only lab up), every `interval_s`, from a daemon thread."""

    def __init__(self, lab: str | None, interval_s: float = DEFAULT_INTERVAL_S, history_s: float = HISTORY_S):
        self.lab = lab
        self.interval_s = interval_s
        self.frames: deque[dict] = deque(maxlen=max(2, int(history_s / interval_s)))
        self.seq = 0  # frames made so far: a reader waits for it to move
        self._start = time.monotonic()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dashboard-sampler", daemon=True)
        self._identity: tuple | None = None  # (lab, agent pids): a change is a new lab
        self._before: model.Reading | None = None
        self.line_rates: dict[str, float] = {}
        self._marks: dict[str, dict[int, dict]] = {}
        self._profiles: dict[str, object] = {}  # profile path → QosProfile | None (unreadable)
        self._totals: dict[tuple[str, str, str], int] = {}
        self.record_now: LabState | None = None
        # kept open between frames, as the run's sampler keeps its own (rocelab.kernel.control.Connections)
        self._connections = control.Connections()
        self.last_readings: tuple[model.Reading | None, model.Reading | None] = (None, None)

    def start(self) -> "DashboardSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._connections.close()

    @property
    def latest(self) -> dict:
        return self.frames[-1] if self.frames else model.empty(0.0)

    def _record(self) -> LabState | None:
        if self.lab:
            record = lab_state.load(self.lab)
        else:
            labs = lab_state.all_labs()
            record = labs[0] if len(labs) == 1 else None
        return record if record is not None and record.status == "up" else None

    def _profile_marks(self, agents) -> None:
        for agent in agents:
            if agent.reply is None or agent.agent != "switchd" or not agent.reply.get("profile"):
                continue
            path = agent.reply["profile"]
            if path not in self._profiles:
                try:
                    self._profiles[path] = load_config_db(path) if Path(path).is_file() else None
                except InputError:
                    self._profiles[path] = None
            profile = self._profiles[path]
            for port in agent.reply["counters"]["ports"]:
                self._marks[f"{agent.node}:{port}"] = model.thresholds(profile, port) if profile else {}

    def sample(self) -> dict:
        """One frame now (the thread calls this; a test may too)."""
        t_s = time.monotonic() - self._start
        record = self.record_now = self._record()
        if record is None:
            self._identity = self._before = None
            return model.empty(t_s, model.NO_LAB if self.lab is None else f"no lab up ({self.lab} is not up)",
                               self.lab)
        identity = (record.name, tuple(p["pid"] for p in record.processes))
        if identity != self._identity:
            self._connections.close()  # another lab's, or agents that went away
            self._identity, self._before, self._totals = identity, None, {}
            self.line_rates = _line_rates(record)
            self.frames.clear()
        reading = model.Reading(t_s, read_lab(record, connections=self._connections).agents)
        self._profile_marks(reading.agents)
        before, self._before = self._before, reading
        self.last_readings = (before, reading)
        if before is None:
            return model.empty(t_s, f"{record.name}: reading the agents", record.name)
        f = model.frame(record, before, reading, self.line_rates, self._marks, self._totals, t_s,
                        serving.read_job(record.name))
        model.add_drops(self._totals, f)
        f["changes"] = model.changes(read_events(paths.STATE_DIR / record.name), t_s, time.time())
        return f

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stopping.is_set():
            try:
                f = self.sample()
            except Exception as exc:  # the page says what went wrong; the server carries on
                f = model.empty(time.monotonic() - self._start, f"cannot read the lab: {exc}", self.lab)
            self.frames.append(f)
            self.seq += 1
            due = max(due + self.interval_s, time.monotonic())
            self._stopping.wait(due - time.monotonic())
