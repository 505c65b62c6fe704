"""The typed QoS profile: SONiC config_db's QoS tables after validation.

Names follow SONiC's tables and fields (REFERENCE.md, "the SONiC buffer model"); sizes
and thresholds are bytes, as config_db holds them. Every object is frozen plain data so
the switch pipeline can read it without copying and tests can build it by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

from rocelab.ethernet import PRIORITIES  # 802.1p priorities, and TCs, PGs and queues per port
from rocelab.qos.ports import to_sonic

DSCP_VALUES = 64

PoolType = Literal["ingress", "egress"]
PoolMode = Literal["static", "dynamic"]
SchedulerType = Literal["STRICT", "DWRR", "WRR"]
EcnMode = Literal["ecn_none", "ecn_green", "ecn_yellow", "ecn_red", "ecn_green_yellow",
                  "ecn_green_red", "ecn_yellow_red", "ecn_all"]
PfcWdAction = Literal["drop", "forward", "alert"]


@dataclass(frozen=True)
class BufferPool:
    """BUFFER_POOL.<name>; `xoff_bytes` is a shared headroom pool (0: none)."""

    name: str
    type: PoolType
    mode: PoolMode
    size_bytes: int
    xoff_bytes: int = 0


@dataclass(frozen=True)
class BufferProfile:
    """BUFFER_PROFILE.<name>.

    A profile with `xoff_bytes` set is lossless: its PG sends XOFF when its shared use
    passes the threshold and may then absorb `xoff_bytes` more of headroom. Exactly one
    of dynamic_th (2^dynamic_th × free shared buffer) or static_th_bytes bounds shared use.
    """

    name: str
    pool: str
    size_bytes: int
    dynamic_th: int | None = None
    static_th_bytes: int | None = None
    xon_bytes: int | None = None
    xoff_bytes: int | None = None
    xon_offset_bytes: int | None = None

    @property
    def lossless(self) -> bool:
        return self.xoff_bytes is not None


@dataclass(frozen=True)
class WredProfile:
    """WRED_PROFILE.<name>: green thresholds in bytes, drop/mark probability in percent."""

    name: str
    wred_green_enable: bool
    ecn: EcnMode
    green_min_threshold_bytes: int
    green_max_threshold_bytes: int
    green_drop_probability_pct: int

    @property
    def marks_green(self) -> bool:
        return self.ecn in ("ecn_green", "ecn_green_yellow", "ecn_green_red", "ecn_all")


@dataclass(frozen=True)
class Scheduler:
    """SCHEDULER.<name>."""

    name: str
    type: SchedulerType
    weight: int = 1


@dataclass(frozen=True)
class QueueQos:
    """QUEUE."<port>|<q>" and BUFFER_QUEUE."<port>|<q>" for one egress queue."""

    scheduler: Scheduler | None = None
    wred: WredProfile | None = None
    buffer: BufferProfile | None = None


@dataclass(frozen=True)
class PfcWatchdog:
    """PFC_WD.<port>: a queue paused longer than detection_time is stormed; `action` applies
    until it has been pause-free for restoration_time."""

    action: PfcWdAction
    detection_time_ms: int
    restoration_time_ms: int


def _identity() -> tuple[int, ...]:
    return tuple(range(PRIORITIES))


@dataclass(frozen=True)
class QosMapNames:
    """The config_db names of the maps a port's PORT_QOS_MAP entry references (None: none).

    Kept only so a rendered config_db names maps as the user did ("AZURE"); two ports
    whose maps hold the same entries behave the same whatever the maps are called.
    """

    dscp_to_tc_map: str | None = None
    tc_to_queue_map: str | None = None
    tc_to_pg_map: str | None = None
    pfc_to_queue_map: str | None = None


@dataclass(frozen=True)
class PortQos:
    """Everything config_db says about one port, maps resolved to lookup tables.

    `port` is the SONiC name (Ethernet0); `dscp_to_tc` has 64 entries, the other maps 8.
    """

    port: str
    dscp_to_tc: tuple[int, ...] = (0,) * DSCP_VALUES
    tc_to_queue: tuple[int, ...] = field(default_factory=_identity)
    tc_to_pg: tuple[int, ...] = (0,) * PRIORITIES
    pfc_priority_to_queue: tuple[int, ...] = field(default_factory=_identity)
    pfc_enable: frozenset[int] = frozenset()
    pgs: Mapping[int, BufferProfile] = field(default_factory=dict)
    queues: Mapping[int, QueueQos] = field(default_factory=dict)
    pfc_wd: PfcWatchdog | None = None
    # None: PORT_QOS_MAP sets no pfcwd_sw_enable, so the watchdog covers pfc_enable.
    pfcwd_sw_enable: frozenset[int] | None = None
    map_names: QosMapNames = field(default_factory=QosMapNames, compare=False)

    @property
    def pfcwd_priorities(self) -> frozenset[int]:
        """The priorities the PFC watchdog guards on this port."""
        return self.pfc_enable if self.pfcwd_sw_enable is None else self.pfcwd_sw_enable

    def lossless_pg(self, pg: int) -> bool:
        profile = self.pgs.get(pg)
        return profile is not None and profile.lossless


@dataclass(frozen=True)
class QosProfile:
    """A whole device's QoS configuration. `source` names the file it came from."""

    source: str
    pools: Mapping[str, BufferPool]
    ports: Mapping[str, PortQos]


def port_qos(profile: QosProfile, name: str) -> PortQos:
    """The QoS of a port by SONiC or rocelab name. A port the profile does not list has
    SONiC's unconfigured behaviour: every DSCP in TC 0, lossy, no WRED."""
    sonic = to_sonic(name)
    return profile.ports.get(sonic) or PortQos(port=sonic)
