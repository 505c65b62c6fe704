"""The pure parts of a training job: its spec as lab.yml writes it, the bytes a step
synchronises, the progress lines workers print, stall detection, and what a run observed.

Nothing here imports torch or touches a namespace, so unit tests run it as plain data.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from rocelab.errors import Problems
from rocelab.units import parse_delay

TRAIN_KEYS = ("hosts", "target_accuracy", "max_steps", "batch_size", "learning_rate", "seed", "stall_timeout",
              "start_timeout")
READY, STEP, DONE = "ready", "step", "done"


@dataclass(frozen=True)
class TrainSpec:
    """One data-parallel training job: a worker per host, DDP over gloo on the fabric."""

    hosts: tuple[str, ...] = ()  # empty: every host of the lab, in file order (= rank order)
    target_accuracy: float = 0.9  # on the held-out split; the job stops when it gets there
    max_steps: int = 100  # … or after this many steps
    batch_size: int = 32  # per worker: the global batch is batch_size × workers
    learning_rate: float = 1e-3
    seed: int = 0
    stall_timeout_s: float = 30.0  # wall time with no step completed → STALLED, every worker killed
    start_timeout_s: float = 120.0  # wall time for imports and rendezvous, until every worker is ready


def load_train_spec(raw: object, at: Callable[..., str], problems: Problems) -> TrainSpec | None:
    """A case's `train:` mapping (empty or null: the defaults). `at(*keys)` names where a key
    stands in the file; problems are added, not raised."""
    if raw is None:
        return TrainSpec()
    if not isinstance(raw, dict):
        problems.add(at(), f"`train` {raw!r} is not a mapping", f"keys: {', '.join(TRAIN_KEYS)}")
        return None
    values: dict = {}
    before = len(problems.items)
    for key, value in raw.items():
        here = at(key)
        if key == "hosts":
            if not isinstance(value, list) or len(value) < 2 or not all(isinstance(h, str) for h in value):
                problems.add(here, f"{value!r} is not a list of at least two hosts", "e.g. hosts: [h1, h2, h3, h4]")
            else:
                values["hosts"] = tuple(value)
        elif key == "target_accuracy":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                problems.add(here, f"{value!r} is not an accuracy", "a fraction in (0, 1], e.g. 0.95")
            else:
                values[key] = float(value)
        elif key in ("max_steps", "batch_size", "seed"):
            least = 0 if key == "seed" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                problems.add(here, f"{value!r} is not a whole number ≥ {least}")
            else:
                values[key] = value
        elif key == "learning_rate":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                problems.add(here, f"{value!r} is not a learning rate", "a positive number, e.g. 0.001")
            else:
                values[key] = float(value)
        elif key in ("stall_timeout", "start_timeout"):
            try:
                seconds = parse_delay(value)
                if seconds <= 0:
                    raise ValueError(f"{value!r} is not a positive time")
                values[f"{key}_s"] = seconds
            except ValueError as exc:
                problems.add(here, str(exc), "wall time like 30s")
        else:
            problems.add(here, f"unknown key {key!r}", f"expected one of: {', '.join(TRAIN_KEYS)}")
    return TrainSpec(**values) if len(problems.items) == before else None


# ---------------------------------------------------------------- bytes a step moves

def bucket_bytes(buckets: Iterable[tuple[int, int]]) -> int:
    """Bytes DDP hands to AllReduce for (elements, bytes per element) of each gradient
    bucket: the whole gradient, parameters × bytes per parameter, once per step."""
    return sum(elements * element_bytes for elements, element_bytes in buckets)


def sync_span_s(spans: Iterable[tuple[float, float]]) -> float:
    """How long a step's AllReduce took: from the first bucket handed to it to the last one
    reduced (buckets overlap, so this is their span, not their sum); 0 with no bucket."""
    spans = list(spans)
    return max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0.0


def ring_share_bytes(sync_bytes: float, workers: int) -> float:
    """What each worker sends (and receives) in a ring AllReduce of `sync_bytes`: 2(N−1)/N
    of it, in 2(N−1) steps of one N-th (nccl-tests' convention, gloo's ring)."""
    return 2 * (workers - 1) / workers * sync_bytes


# ---------------------------------------------------------------- progress lines

@dataclass(frozen=True)
class Ready:
    rank: int
    workers: int
    params: int
    bytes_per_param: int


@dataclass(frozen=True)
class Step:
    rank: int
    step: int  # 1, 2, …
    loss: float  # this worker's batch loss (cross entropy)
    accuracy: float  # on the held-out split, after the step's update
    step_time_s: float  # forward, backward with its AllReduce, optimizer step (wall)
    elapsed_s: float  # since training began, evaluation included (wall)
    sync_bytes: int  # what the gradient buckets handed to AllReduce this step
    ring_bytes: float  # this worker's ring share of it: 2(N−1)/N × sync_bytes
    sync_s: float = 0.0  # the step's AllReduce: first bucket handed over to last one reduced (wall)


@dataclass(frozen=True)
class Done:
    rank: int
    steps: int
    reached_target: bool


Event = Ready | Step | Done
_EVENTS: dict[str, type] = {READY: Ready, STEP: Step, DONE: Done}


def event_line(event: Event) -> str:
    """One JSON line, as a worker prints it on stdout."""
    kind = next(k for k, cls in _EVENTS.items() if isinstance(event, cls))
    return json.dumps({"event": kind, **asdict(event)})


def parse_line(line: str | bytes) -> Event | None:
    """A worker's stdout line → its event; None for anything else a library printed there."""
    try:
        data = json.loads(line)
        cls = _EVENTS[data.pop("event")]
        return cls(**data)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


# ---------------------------------------------------------------- stall detection

class StallWatch:
    """No progress for too long: `start_timeout_s` until the job is ready (imports,
    rendezvous), then `stall_timeout_s` between steps. The clock is injected."""

    def __init__(self, clock: Callable[[], float], start_timeout_s: float, stall_timeout_s: float):
        self._clock = clock
        self._start_timeout_s = start_timeout_s
        self._stall_timeout_s = stall_timeout_s
        self._last = clock()
        self._ready = False

    def ready(self) -> None:
        self._ready = True
        self._last = self._clock()

    def progress(self) -> None:
        self._last = self._clock()

    def remaining_s(self) -> float:
        limit = self._stall_timeout_s if self._ready else self._start_timeout_s
        return self._last + limit - self._clock()

    def stalled(self) -> bool:
        return self.remaining_s() < 0


# ---------------------------------------------------------------- what a run observed

@dataclass
class TrainResult:
    hosts: tuple[str, ...]
    spec: TrainSpec
    ready: dict[int, Ready] = field(default_factory=dict)
    steps: dict[int, list[Step]] = field(default_factory=dict)  # per rank, in order
    done: dict[int, Done] = field(default_factory=dict)
    wall_s: float = 0.0  # first worker started to last worker gone
    stalled: bool = False
    error: str | None = None

    def add(self, event: Event) -> None:
        if isinstance(event, Ready):
            self.ready[event.rank] = event
        elif isinstance(event, Step):
            self.steps.setdefault(event.rank, []).append(event)
        else:
            self.done[event.rank] = event

    @property
    def lead(self) -> list[Step]:
        """Rank 0's steps: what the job did (every rank's model is the same after each step)."""
        return self.steps.get(0, [])

    @property
    def train_time_s(self) -> float:
        """Training loop wall time: to the last step, or to the stall that ended it."""
        if self.stalled or not self.lead:
            return self.wall_s
        return self.lead[-1].elapsed_s

    @property
    def reached_target(self) -> bool:
        return bool(self.lead) and self.lead[-1].accuracy >= self.spec.target_accuracy

    def to_json(self) -> dict:
        return {"hosts": list(self.hosts), "spec": asdict(self.spec), "stalled": self.stalled, "error": self.error,
                "wall_s": self.wall_s, "train_time_s": self.train_time_s, "reached_target": self.reached_target,
                "ready": [asdict(r) for r in self.ready.values()],
                "steps": {str(rank): [asdict(s) for s in steps] for rank, steps in self.steps.items()}}


TRAINING_OBSERVATIONS = {
    "train_time_s": "training loop, first step to target (or to the stall): wall seconds on this machine",
    "steps": "training steps run",
    "final_accuracy": "held-out accuracy after the last step",
    "reached_target": "1 if the job reached its target accuracy",
    "step_time_s": "mean step (forward, backward + AllReduce, update): wall seconds",
    "sync_time_s": "the gradients' AllReduce over the whole run, what the fabric costs the job: emulated seconds "
                   "(÷ TDF for production time); unlike train_time_s, the machine's CPU load barely moves it",
    "sync_bytes_per_step": "bytes the gradient buckets hand to AllReduce per step (parameters × bytes per parameter)",
    "model_params": "the model's parameter count",
    "ring_bytes_per_worker": "what each worker's ring share adds up to over the run: steps × 2(N−1)/N × sync bytes",
    "worker_tx_bytes_min": "least any worker sent into the fabric (its ToR port's rx bytes), headers included",
    "worker_tx_bytes_max": "most any worker sent into the fabric",
    "spine_tx_bytes": "bytes every spine port sent: the traffic that crossed between racks",
}


# Shown for a lab whose every case trains, beside the observations its checks name.
TRAINING_HEADLINE = ("train_time_s", "sync_time_s", "steps", "final_accuracy", "step_time_s", "sync_bytes_per_step",
                     "worker_tx_bytes_max", "spine_tx_bytes", "drops", "stalled")


def training_observations(result: TrainResult, counters: Mapping[str, dict], fabric) -> dict[str, float]:
    """A training case's observations, from its result and every switch's counters since
    the case began: what each worker sent into the fabric is its ToR port's rx bytes."""
    lead = result.lead
    nan = float("nan")
    ready = result.ready.get(0)
    sent = {p.peer_node: counters[s.name]["ports"][p.name]["rx_bytes"]
            for s in fabric.switches for p in s.ports if p.peer_node in result.hosts}
    spine_tx = sum(port["tx_bytes"] for s in fabric.switches if s.role == "spine"
                   for port in counters[s.name]["ports"].values())
    return {
        "train_time_s": result.train_time_s,
        "steps": float(len(lead)),
        "final_accuracy": lead[-1].accuracy if lead else nan,
        "reached_target": float(result.reached_target),
        "step_time_s": sum(s.step_time_s for s in lead) / len(lead) if lead else nan,
        "sync_time_s": sum(s.sync_s for s in lead) if lead else nan,
        "sync_bytes_per_step": float(lead[-1].sync_bytes) if lead else nan,
        "model_params": float(ready.params) if ready else nan,
        "ring_bytes_per_worker": sum(s.ring_bytes for s in lead) if lead else nan,
        "worker_tx_bytes_min": float(min(sent.values(), default=nan)),
        "worker_tx_bytes_max": float(max(sent.values(), default=nan)),
        "spine_tx_bytes": float(spine_tx),
    }


def slowdown_rows(cases: Sequence[tuple[str, Mapping[str, float]]]) -> list[list[str]]:
    """The final table: per case, total training time, steps, accuracy and slowdown
    against the first case (the clean one)."""
    rows = []
    base = cases[0][1].get("train_time_s", math.nan) if cases else math.nan
    for title, obs in cases:
        time_s = obs.get("train_time_s", math.nan)
        status = "STALLED" if obs.get("stalled") else ("reached target" if obs.get("reached_target") else "max steps")
        rows.append([title, f"{time_s:.2f} s", f"{obs.get('steps', math.nan):.0f}",
                     f"{obs.get('final_accuracy', math.nan):.3f}", f"{obs.get('step_time_s', math.nan) * 1e3:.0f} ms",
                     f"{time_s / base:.2f}×" if base == base and base > 0 else "N/A", status])
    return rows


SLOWDOWN_COLUMNS = ("case", "training time", "steps", "accuracy", "mean step", "vs clean", "outcome")


def step_text(step: Step, workers: int) -> str:
    """One live line per step, as `invoke run` prints it."""
    return (f"step {step.step:3d}  loss {step.loss:6.3f}  accuracy {step.accuracy:5.3f}  "
            f"step {step.step_time_s * 1e3:6.0f} ms  synced {step.sync_bytes / 1e6:.2f} MB "
            f"(ring: {step.ring_bytes / 1e6:.2f} MB sent by each of {workers} workers)")
