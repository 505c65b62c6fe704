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
TRAFFIC_CLASSES = 16  # SONiC's tc_type is 0..15; only 0..7 can be PFC priorities
DYNAMIC_TH_MIN, DYNAMIC_TH_MAX = -8, 7  # a dynamic_th exponent, as sonic-buffer-profile YANG bounds it

PoolType = Literal["ingress", "egress", "both"]
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
    size_bytes: int | None  # None: SONiC's dynamic buffer model sizes the pool at run time
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
    shape_bps: int | None = None  # a queue's rate limit (EOS `shape rate`); None: none


@dataclass(frozen=True)
class PfcWatchdog:
    """PFC_WD.<port>: a queue paused longer than detection_time is stormed; `action` applies
    until it has been pause-free for restoration_time."""

    action: PfcWdAction
    detection_time_ms: int
    restoration_time_ms: int


def _identity() -> tuple[int, ...]:
    return tuple(range(PRIORITIES))


def _tc_identity() -> tuple[int, ...]:
    # TC n → queue n for the eight queues; SONiC leaves TC 8–15 unmapped: queue 0 here.
    return tuple(range(PRIORITIES)) + (0,) * (TRAFFIC_CLASSES - PRIORITIES)


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

    `port` is the SONiC name (Ethernet0); `dscp_to_tc` has 64 entries, the TC-indexed maps
    16 (SONiC's traffic classes 0–15), `pfc_priority_to_queue` 8. `dynamic_pgs` are PGs whose
    profile SONiC's buffer manager computes at run time (BUFFER_PG profile "NULL"): lossless,
    sizes unknown to the file.
    """

    port: str
    dscp_to_tc: tuple[int, ...] = (0,) * DSCP_VALUES
    tc_to_queue: tuple[int, ...] = field(default_factory=_tc_identity)
    tc_to_pg: tuple[int, ...] = (0,) * TRAFFIC_CLASSES
    pfc_priority_to_queue: tuple[int, ...] = field(default_factory=_identity)
    pfc_enable: frozenset[int] = frozenset()
    pgs: Mapping[int, BufferProfile] = field(default_factory=dict)
    queues: Mapping[int, QueueQos] = field(default_factory=dict)
    pfc_wd: PfcWatchdog | None = None
    # None: PORT_QOS_MAP sets no pfcwd_sw_enable, so the watchdog covers pfc_enable.
    pfcwd_sw_enable: frozenset[int] | None = None
    map_names: QosMapNames = field(default_factory=QosMapNames, compare=False)
    dynamic_pgs: frozenset[int] = frozenset()
    # A port that classifies by 802.1p (EOS `qos trust cos`): the TC of a VLAN-tagged frame by
    # its PCP, 8 entries; `dscp_to_tc` then holds what an untagged packet gets (the port's
    # default PCP's TC, whatever its DSCP). None: the port classifies by DSCP.
    dot1p_to_tc: tuple[int, ...] | None = None
    shape_bps: int | None = None  # the port's egress rate limit (EOS `shape rate`); None: none

    def __post_init__(self) -> None:
        # A map written for eight TCs (EOS's, a hand-built one) leaves TCs 8–15 at SONiC's default.
        for name, default in (("tc_to_queue", _tc_identity()), ("tc_to_pg", (0,) * TRAFFIC_CLASSES)):
            values = getattr(self, name)
            if len(values) < TRAFFIC_CLASSES:
                object.__setattr__(self, name, tuple(values) + default[len(values):])

    @property
    def pfcwd_priorities(self) -> frozenset[int]:
        """The priorities the PFC watchdog guards on this port."""
        return self.pfc_enable if self.pfcwd_sw_enable is None else self.pfcwd_sw_enable

    def lossless_pg(self, pg: int) -> bool:
        profile = self.pgs.get(pg)
        return pg in self.dynamic_pgs or (profile is not None and profile.lossless)


@dataclass(frozen=True)
class QosProfile:
    """A whole device's QoS configuration. `source` names the file it came from."""

    source: str
    pools: Mapping[str, BufferPool]
    ports: Mapping[str, PortQos]
    # rocelab interface (eth1) → the device's port name (Ethernet0), in the device's own
    # port order (its PORT table); empty: the four-lane convention (rocelab.qos.ports).
    lab_ports: Mapping[str, str] = field(default_factory=dict)
    # What the file leaves to the switch or to other files, said once per kind.
    notes: tuple[str, ...] = ()

    def sonic_name(self, lab_port: str) -> str:
        return self.lab_ports.get(lab_port) or to_sonic(lab_port)


def port_qos(profile: QosProfile, name: str) -> PortQos:
    """The QoS of a port by SONiC or rocelab name. A port the profile does not list has
    SONiC's unconfigured behaviour: every DSCP in TC 0, lossy, no WRED."""
    sonic = name if name in profile.ports else profile.sonic_name(name)
    return profile.ports.get(sonic) or PortQos(port=sonic)
