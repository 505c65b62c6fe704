"""Counters over time: a Sampler polls every agent of a lab while a job runs.

    with Sampler(lab_state, interval_s=0.05) as sampler:
        ...run traffic...
    series = sampler.series          # a TimeSeries; series.to_json() is plain JSON

Each poll turns the agents' counters into one observation (`observe`): cumulative
counters and gauges under a key (kind, labels). `build` turns consecutive observations
into series: gauges as read, counters as per-interval deltas, byte counters as rates and
pause time as the share of each interval spent paused. Both are pure functions, so
series come the same from a live lab and from a core driven in a test.

Kinds (labels):
    queue_depth_bytes      switch egress queue occupancy       (node, port, queue)
    pg_xoff                1 while an ingress PG pauses its peer (node, port, pg)
    pfc_tx_frames          PFC frames sent per interval          (node, port, priority)
    pfc_rx_frames          PFC frames received per interval      (node, port, priority) / NIC (node, priority)
    paused_fraction        share of the interval held paused     (node, port, priority) / NIC (node, priority)
    ecn_marked_packets     CE marks per interval                 (node, port, queue)
    drops                  packets dropped per interval          (node, port, where, reason) / NIC (node, reason)
    port_tx_bps            switch port's send rate from tx bytes (node, port)
    qp_rate_bps            congestion control's current rate     (node, qpn)
    qp_tx_bps              measured send rate from tx bytes      (node, qpn)
    cnps_received, cnps_sent, retransmitted_packets, ooo_received   per interval (node, qpn)
    reorder_distance_max   farthest a packet arrived ahead of the expected PSN, since the clear (node)
    uplink_share           derived by the run report, not sampled: a leaf's busiest uplink ÷ its
                           uplinks' mean, in tx bytes per interval (node)

Times are emulated seconds since the sampler started; production-equivalent time is
emulated / TDF. Rates are emulated bits per second (× TDF for production-equivalent).
Memory is bounded: past `max_samples` the sampler halves its resolution (drops every
other observation, doubles its interval), so a long run keeps its whole span.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Sequence


from rocelab.kernel.control import Connections
from rocelab.runtime.readings import AgentReading, read_lab
from rocelab.engines.state import LabState

DEFAULT_INTERVAL_S = 0.05
DEFAULT_MAX_SAMPLES = 4096
# A poll asks every agent, and each answers between its due events: the sampler waits at least
# this many times as long as its last poll took before the next, so what it costs the agents and
# the cores stays bounded as a lab grows. In lab-placement (six switches, 24 NICs in one nicd) a
# poll cost the agents ~10 ms of CPU and its reader as much, and polling every 50 ms took ~45% of
# the agents' CPU in a case (2026-11-27, README "What a frame costs").
POLL_SPACING = 10

Key = tuple[str, tuple[tuple[str, str], ...]]  # (kind, ((label, value), ...))
Observation = dict[Key, float]

GAUGE, DELTA, RATE_BPS, FRACTION = "gauge", "delta", "rate_bps", "fraction"
KINDS = {
    "queue_depth_bytes": GAUGE,
    "pg_xoff": GAUGE,
    "pfc_tx_frames": DELTA,
    "pfc_rx_frames": DELTA,
    "paused_fraction": FRACTION,
    "ecn_marked_packets": DELTA,
    "drops": DELTA,
    "port_tx_bps": RATE_BPS,
    "qp_rate_bps": GAUGE,
    "qp_tx_bps": RATE_BPS,
    "cnps_received": DELTA,
    "cnps_sent": DELTA,
    "retransmitted_packets": DELTA,
    "ooo_received": DELTA,
    "reorder_distance_max": GAUGE,
    "uplink_share": GAUGE,
}
_QP_DELTAS = ("cnps_received", "cnps_sent", "retransmitted_packets", "ooo_received")
_LABEL_PREFIX = {"queue": "q", "priority": "p", "pg": "pg", "qpn": "qp"}


@dataclass
class Series:
    kind: str
    labels: dict[str, str]
    values: list[float]

    @property
    def title(self) -> str:
        """'leaf1 eth2 q3': the labels as a legend entry."""
        return " ".join(f"{_LABEL_PREFIX.get(k, '')}{v}" for k, v in self.labels.items())


@dataclass
class TimeSeries:
    lab: str
    tdf: int
    interval_s: float  # spacing of the points (the requested interval, doubled per halving)
    t_s: list[float]  # emulated seconds since the sampler started
    series: list[Series] = field(default_factory=list)
    missed_polls: dict[str, int] = field(default_factory=dict)  # node → polls it did not answer

    @property
    def t_production_s(self) -> list[float]:
        return [t / self.tdf for t in self.t_s]

    def of(self, kind: str, **labels: str) -> list[Series]:
        """The series of `kind` whose labels include `labels`."""
        return [s for s in self.series if s.kind == kind and all(s.labels.get(k) == v for k, v in labels.items())]

    def to_json(self) -> dict:
        doc = asdict(self)
        doc["t_production_s"] = self.t_production_s
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> "TimeSeries":
        return cls(doc["lab"], doc["tdf"], doc["interval_s"], list(doc["t_s"]),
                   [Series(s["kind"], dict(s["labels"]), list(s["values"])) for s in doc["series"]],
                   dict(doc.get("missed_polls", {})))


def _key(kind: str, **labels: object) -> Key:
    return kind, tuple((k, str(v)) for k, v in labels.items())


def _put(obs: Observation, key: Key, value: float) -> None:
    if value:  # sparse: a key that is absent reads 0
        obs[key] = float(value)


def observe_switch(node: str, counters: dict) -> Observation:
    obs: Observation = {}
    for port_name, port in counters["ports"].items():
        at = {"node": node, "port": port_name}
        _put(obs, _key("port_tx_bps", **at), port["tx_bytes"])
        for p in range(len(port["pfc_tx_frames"])):
            _put(obs, _key("pfc_tx_frames", **at, priority=p), port["pfc_tx_frames"][p])
            _put(obs, _key("pfc_rx_frames", **at, priority=p), port["pfc_rx_frames"][p])
            _put(obs, _key("paused_fraction", **at, priority=p), port["paused_time_s"][p])
        places = [("port", port["drops"])]
        for q, queue in enumerate(port["queues"]):
            _put(obs, _key("queue_depth_bytes", **at, queue=q), queue["depth_bytes"])
            _put(obs, _key("ecn_marked_packets", **at, queue=q), queue["ecn_marked_packets"])
            places.append((f"queue{q}", queue["drops"]))
        for p, pg in enumerate(port["pgs"]):
            _put(obs, _key("pg_xoff", **at, pg=p), pg["xoff"])
            places.append((f"pg{p}", pg["drops"]))
        for where, drops in places:
            for reason, d in drops.items():
                _put(obs, _key("drops", **at, where=where, reason=reason), d["packets"])
    return obs


def observe_nic(node: str, counters: dict) -> Observation:
    obs: Observation = {}
    pfc = counters.get("pfc") or {}
    frames = [a + b for a, b in zip(pfc.get("rx_pause_frames", ()), pfc.get("rx_xon_frames", ()))]
    for p, n in enumerate(frames):
        _put(obs, _key("pfc_rx_frames", node=node, priority=p), n)
    for p, s in enumerate(pfc.get("paused_time_s", ())):
        _put(obs, _key("paused_fraction", node=node, priority=p), s)
    for reason, n in (counters.get("drops") or {}).items():
        _put(obs, _key("drops", node=node, reason=reason), n)
    _put(obs, _key("reorder_distance_max", node=node), (counters.get("reorder_distance") or {}).get("max", 0))
    for qpn, qp in (counters.get("qps") or {}).items():
        at = {"node": node, "qpn": qpn}
        rate_bps = (qp.get("cc") or {}).get("rate_bps")
        if rate_bps is not None:
            _put(obs, _key("qp_rate_bps", **at), rate_bps)
        _put(obs, _key("qp_tx_bps", **at), qp.get("tx_bytes", 0))
        for kind in _QP_DELTAS:
            _put(obs, _key(kind, **at), qp.get(kind, 0))
    return obs


def observe(agents: Iterable[AgentReading]) -> Observation:
    """One observation of every agent that answered."""
    obs: Observation = {}
    for agent in agents:
        if agent.reply is not None:
            read = observe_switch if agent.agent == "switchd" else observe_nic
            obs.update(read(agent.node, agent.reply["counters"]))
    return obs


def _transform(how: str, times: Sequence[float], raw: Sequence[float]) -> list[float]:
    if how == GAUGE:
        return list(raw)
    out = [0.0]  # nothing to compare the first observation with
    for i in range(1, len(raw)):
        delta = raw[i] - raw[i - 1]
        if delta < 0:  # the counters were cleared or the agent restarted: count from zero
            delta = raw[i]
        dt = times[i] - times[i - 1]
        if how == DELTA:
            out.append(delta)
        elif dt <= 0:
            out.append(0.0)
        elif how == RATE_BPS:
            out.append(delta * 8 / dt)
        else:  # FRACTION; the agents' clocks and ours differ by the poll's latency
            out.append(min(1.0, delta / dt))
    return out


def build(lab: str, tdf: int, interval_s: float, times: Sequence[float], observations: Sequence[Observation],
          missed_polls: dict[str, int] | None = None) -> TimeSeries:
    """Consecutive observations taken at `times` (emulated seconds) → a TimeSeries."""
    if len(times) != len(observations):
        raise ValueError(f"{len(times)} times for {len(observations)} observations")
    series = []
    for key in sorted(set().union(*observations)):
        kind, labels = key
        raw = [o.get(key, 0.0) for o in observations]
        series.append(Series(kind, dict(labels), _transform(KINDS[kind], times, raw)))
    return TimeSeries(lab, tdf, interval_s, list(times), series, dict(missed_polls or {}))


class Sampler:
    """Polls a lab's agents every `interval_s` from a background thread until stop(), or every
    POLL_SPACING times as long as a poll takes where that is longer; the series' interval_s is
    the median spacing of its points."""

    def __init__(self, record: LabState, interval_s: float = DEFAULT_INTERVAL_S,
                 max_samples: int = DEFAULT_MAX_SAMPLES,
                 read: Callable[[], Sequence[AgentReading]] | None = None):
        if interval_s <= 0:
            raise ValueError(f"interval_s={interval_s} must be positive")
        if max_samples < 2:
            raise ValueError(f"max_samples={max_samples} must be at least 2")
        self._record = record
        self._interval_s = interval_s
        self._max_samples = max_samples
        # its thread's connections to the agents, kept between polls (rocelab.kernel.control.Connections)
        self._connections = Connections()
        self._read = read or (lambda: read_lab(record, connections=self._connections).agents)
        self._times: list[float] = []
        self._observations: list[Observation] = []
        self._last: dict[str, Observation] = {}  # node → its last observation, for polls it misses
        self._missed: dict[str, int] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: Exception | None = None
        self._start_s = 0.0
        self.series: TimeSeries | None = None

    def start(self) -> "Sampler":
        if self._thread is not None:
            raise RuntimeError("a Sampler starts once")
        self._start_s = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"sampler-{self._record.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> TimeSeries:
        """Take a last sample, stop the thread and return the series (again on later calls)."""
        if self.series is None:
            if self._thread is None:
                raise RuntimeError("the Sampler was never started")
            self._stopping.set()
            self._thread.join()
            if self._error is not None:
                raise RuntimeError(f"sampling {self._record.name} failed: {self._error!r}") from self._error
            spacing = sorted(b - a for a, b in zip(self._times, self._times[1:]))
            interval_s = max(self._interval_s, spacing[len(spacing) // 2]) if spacing else self._interval_s
            self.series = build(self._record.name, self._record.tdf, interval_s, self._times,
                                self._observations, self._missed)
        return self.series

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            due = time.monotonic()
            while not self._stopping.is_set():
                began = time.monotonic()
                self._sample()
                took = time.monotonic() - began
                # a slow poll skips, never bursts
                due = max(due + max(self._interval_s, POLL_SPACING * took), time.monotonic())
                self._stopping.wait(due - time.monotonic())
            self._sample()  # the last sample closes the job's span
        except Exception as exc:  # handed to stop(), which raises it in the caller's thread
            self._error = exc
        finally:
            self._connections.close()

    def _sample(self) -> None:
        before = time.monotonic()
        agents = self._read()
        at = (before + time.monotonic()) / 2 - self._start_s
        obs: Observation = {}
        for agent in agents:
            if agent.reply is None:
                self._missed[agent.node] = self._missed.get(agent.node, 0) + 1
                obs.update(self._last.get(agent.node, {}))  # unchanged: its deltas land in the next poll
            else:
                part = observe([agent])
                self._last[agent.node] = part
                obs.update(part)
        if len(self._times) >= self._max_samples:
            self._times = self._times[::2]
            self._observations = self._observations[::2]
            self._interval_s *= 2
        self._times.append(at)
        self._observations.append(obs)
