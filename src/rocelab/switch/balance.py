"""How an ECMP group picks its member: the load-balancing modes, pure.

    hash     the 5-tuple's hash: one flow, one member, whatever the load (today's ECMP)
    flowlet  a flow keeps its member until it has been idle for the inactivity interval, then
             takes the member of best quality (SAI's ARS object in SAI_ARS_MODE_FLOWLET_QUALITY,
             SONiC's ARS_OBJECT assign_mode per_flowlet_quality, Broadcom/Arista/Juniper DLB)
    packet   every frame to the member of least queue grade: how long it would wait there (the
             bytes queued ahead of it for its traffic class and what the line is still sending,
             at the member's rate, so a degraded member's bytes weigh more), in grades of
             QUEUE_BAND_BYTES at the fastest member's rate, as an ASIC grades its queues; ties
             (an idle fabric's, and members within a grade of each other) by the hash
             (per-packet adaptive routing: Spectrum AR, SONiC per_packet_quality). A flow moves
             when its hash member's grade rises, and its next frames overtake those still
             queued there: per-packet routing reorders, by up to about a grade.
    spray    every frame to a random member (the UEC-style baseline), seeded so a run repeats

Flowlet state lives in a finite flowset table per group, indexed by the flow's hash: two flows
that share an entry while it is active share its member (a collision, counted), as in hardware.
A member's quality is its load band plus its queue band, each weighted: the load is an EWMA of
the member port's transmitted rate over sampling intervals, the queue its queued bytes; each
is quantised into QUALITY_BANDS bands, as ARS profiles band them.

Configuration (`Balance`): a lab's `load_balancing:` mapping (rocelab's key, every mode), or a
SONiC config_db's ARS_OBJECT (flowlet and packet, the two modes SONiC's YANG has). Times are
production times; `dilate` stretches them by the TDF like every other time.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Mapping

MODES = ("hash", "flowlet", "packet", "spray")
# SONiC's YANG (sonic-ars, ARS_OBJECT flowlet_idle_time): 2..2047 µs; 256 µs is what SONiC's
# orchagent (ARS_OBJECT_DEFAULT_FLOWLET_IDLE_TIME_US) and Juniper DLB ship.
IDLE_TIME_RANGE_US = (2, 2047)
DEFAULT_IDLE_TIME_US = 256
DEFAULT_MAX_FLOWS = 512  # orchagent's ARS_OBJECT_DEFAULT_MAX_FLOWS
MAX_FLOWS_RANGE = (1, 1 << 16)
DEFAULT_SAMPLING_INTERVAL_US = 16
QUALITY_BANDS = 8
QUEUE_BAND_BYTES = 8192  # queued bytes per quality band: 8 bands span 64 KiB
EWMA_WEIGHT = 0.25  # each sample moves the load EWMA a quarter of the way
KEYS = ("mode", "flowlet_idle_time_us", "max_flows", "sampling_interval_us", "load_weight", "queue_weight", "seed")
# SONiC ARS_OBJECT assign_mode → ours.
ARS_MODES = {"per_flowlet_quality": "flowlet", "per_packet_quality": "packet"}


@dataclass(frozen=True)
class Balance:
    """One switch's ECMP load balancing (every group alike). Times in seconds."""

    mode: str = "hash"
    flowlet_idle_time_s: float = DEFAULT_IDLE_TIME_US * 1e-6
    max_flows: int = DEFAULT_MAX_FLOWS
    sampling_interval_s: float = DEFAULT_SAMPLING_INTERVAL_US * 1e-6
    load_weight: int = 1
    queue_weight: int = 1
    seed: int = 0
    source: str = "default"  # where it was configured, for `status`


def balance_config(settings: Mapping, source: str = "lab.yml load_balancing") -> Balance:
    """The Balance of a `load_balancing:` mapping; ValueError naming the key and what it takes."""
    if not isinstance(settings, Mapping):
        raise ValueError(f"{settings!r} is not a mapping; expected keys: {', '.join(KEYS)}")
    unknown = sorted(str(k) for k in settings if k not in KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; expected: {', '.join(KEYS)}")
    mode = settings.get("mode", "hash")
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not a load-balancing mode; expected one of: {', '.join(MODES)}")
    idle = _whole(settings, "flowlet_idle_time_us", DEFAULT_IDLE_TIME_US, IDLE_TIME_RANGE_US,
                  "µs of inactivity that end a flowlet (SONiC's ARS range)")
    max_flows = _whole(settings, "max_flows", DEFAULT_MAX_FLOWS, MAX_FLOWS_RANGE, "flowset table entries per group")
    sampling = _whole(settings, "sampling_interval_us", DEFAULT_SAMPLING_INTERVAL_US, (1, 1_000_000),
                      "µs between load samples")
    load_weight = _whole(settings, "load_weight", 1, (0, 16), "weight of the load band in a member's quality")
    queue_weight = _whole(settings, "queue_weight", 1, (0, 16), "weight of the queue band in a member's quality")
    seed = _whole(settings, "seed", 0, (0, 1 << 32), "the spray's random seed")
    return Balance(mode, idle * 1e-6, max_flows, sampling * 1e-6, load_weight, queue_weight, seed, source)


def _whole(settings: Mapping, key: str, default: int, bounds: tuple[int, int], what: str) -> int:
    value = settings.get(key, default)
    low, high = bounds
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{key}: {value!r} is out of range; expected a whole number {low}..{high} ({what})")
    return value


def balance_from_config_db(doc: Mapping, source: str) -> Balance | None:
    """The Balance a SONiC config_db's ARS tables ask for (sonic-ars YANG: ARS_PROFILE,
    ARS_OBJECT), or None where it has none. One ARS object applies to every group: the one
    ARS_PROFILE's default_ars_object, else the only ARS_OBJECT. ValueError naming the table
    and field for what is not valid."""
    objects = doc.get("ARS_OBJECT") or {}
    if not objects:
        return None
    profile = next(iter((doc.get("ARS_PROFILE") or {}).values()), {})
    name = profile.get("default_ars_object") or (next(iter(objects)) if len(objects) == 1 else None)
    if name not in objects:
        raise ValueError(f"{source}: ARS_OBJECT has {', '.join(sorted(objects))}: name one in ARS_PROFILE's "
                         "default_ars_object")
    entry = objects[name]
    where = f"{source}: ARS_OBJECT|{name}"
    mode = ARS_MODES.get(entry.get("assign_mode", "per_flowlet_quality"))
    if mode is None:
        raise ValueError(f"{where}: assign_mode {entry['assign_mode']!r}; expected one of: {', '.join(ARS_MODES)}")
    settings: dict = {"mode": mode}
    for key, field in (("flowlet_idle_time", "flowlet_idle_time_us"), ("max_flows", "max_flows")):
        if key in entry:
            try:
                settings[field] = int(entry[key])
            except ValueError:
                raise ValueError(f"{where}: {key} {entry[key]!r} is not a whole number") from None
    if "sampling_interval" in profile:
        settings["sampling_interval_us"] = int(profile["sampling_interval"])
    try:
        return balance_config(settings, where)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def dilate(balance: Balance, tdf: float) -> Balance:
    """The balance for a lab running TDF times slower: its times × TDF."""
    return dataclasses.replace(balance, flowlet_idle_time_s=balance.flowlet_idle_time_s * tdf,
                               sampling_interval_s=balance.sampling_interval_s * tdf)


class Member:
    """One next hop of a group: where it leaves, what it carries, how loaded it is. `port`
    needs `rate_bps` and `queues` (each with `tx_bytes`, `depth_bytes`)."""

    __slots__ = ("port", "name", "frames", "bytes", "load", "sampled_s", "sampled_tx_bytes")

    def __init__(self, port, name: str):
        self.port = port
        self.name = name
        self.frames = self.bytes = 0
        self.load = 0.0  # EWMA of the fraction of the port's rate it transmitted
        self.sampled_s: float | None = None
        self.sampled_tx_bytes = 0

    def quality(self, now: float, balance: Balance) -> int:
        """Lower is better: the weighted load band plus the weighted queue band."""
        port = self.port
        tx = sum(q.tx_bytes for q in port.queues)
        if self.sampled_s is None or tx < self.sampled_tx_bytes:  # first look, or counters cleared
            self.sampled_s, self.sampled_tx_bytes = now, tx
        elif now - self.sampled_s >= balance.sampling_interval_s:
            sample = (tx - self.sampled_tx_bytes) * 8 / ((now - self.sampled_s) * port.rate_bps)
            self.load += (min(sample, 1.0) - self.load) * EWMA_WEIGHT
            self.sampled_s, self.sampled_tx_bytes = now, tx
        load_band = min(QUALITY_BANDS - 1, int(self.load * QUALITY_BANDS))
        queue_band = min(QUALITY_BANDS - 1, sum(q.depth_bytes for q in port.queues) // QUEUE_BAND_BYTES)
        return balance.load_weight * load_band + balance.queue_weight * queue_band


class EcmpGroup:
    """A next-hop group under a mode other than hash. `pick(flow_hash, queues, now)` answers
    a member index per frame; `queues`, per member, the queue the frame's TC waits in there
    (with `depth_bytes`, and `port.bucket`: the port's TokenBucket)."""

    def __init__(self, members: list[Member], balance: Balance, rng_key: str):
        self.members = members
        self.balance = balance
        self.prefixes: list[str] = []
        self.reassignments = 0  # flowlets that moved to another member
        self.collisions = 0  # frames that found their flowset entry active for another flow
        size = balance.max_flows
        # The flowset table: per entry, when it last saw a frame, its member, and the flow
        # that last used it (hardware keeps no flow identity; we keep one to count collisions).
        self._last_s = [float("-inf")] * size
        self._member = [0] * size
        self._flow = [-1] * size
        self._rng = random.Random(f"{balance.seed}:{rng_key}")
        self.pick = getattr(self, f"_{balance.mode}")

    def _flowlet(self, flow_hash: int, queues: list, now: float) -> int:
        slot = flow_hash % len(self._last_s)
        active = now - self._last_s[slot] < self.balance.flowlet_idle_time_s
        self._last_s[slot] = now
        if active:
            if self._flow[slot] != flow_hash:
                self.collisions += 1
                self._flow[slot] = flow_hash
            return self._member[slot]
        best = self._best(flow_hash, now)
        if self._flow[slot] != -1 and best != self._member[slot]:
            self.reassignments += 1
        self._member[slot], self._flow[slot] = best, flow_hash
        return best

    def _best(self, flow_hash: int, now: float) -> int:
        qualities = [m.quality(now, self.balance) for m in self.members]
        least = min(qualities)
        ties = [i for i, q in enumerate(qualities) if q == least]
        return ties[flow_hash % len(ties)]

    def _packet(self, flow_hash: int, queues: list, now: float) -> int:
        waits = []
        fastest_s_per_byte = float("inf")
        for q in queues:
            bucket = q.port.bucket
            line_s = bucket.busy_until_s - now
            waits.append(q.depth_bytes * bucket.s_per_byte + (line_s if line_s > 0 else 0.0))
            fastest_s_per_byte = min(fastest_s_per_byte, bucket.s_per_byte)
        grade_s = QUEUE_BAND_BYTES * fastest_s_per_byte
        grades = [int(w / grade_s) for w in waits]
        least = min(grades)
        ties = [i for i, g in enumerate(grades) if g == least]
        return ties[flow_hash % len(ties)]

    def _spray(self, flow_hash: int, queues: list, now: float) -> int:
        return self._rng.randrange(len(self.members))

    def counters(self) -> dict:
        return {"mode": self.balance.mode, "prefixes": sorted(self.prefixes),
                "members": {m.name: {"frames": m.frames, "bytes": m.bytes} for m in self.members},
                "reassignments": self.reassignments, "collisions": self.collisions}

    def clear_counters(self) -> None:
        self.reassignments = self.collisions = 0
        for m in self.members:
            m.frames = m.bytes = 0
