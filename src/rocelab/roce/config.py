"""Configuration of the emulated RoCE NIC, with its time-dilation rule.

Defaults are production values: the NIC core runs whatever periods and rates it is
given. Under time dilation the shell calls `dilate(config, tdf)` (periods × TDF, rates
÷ TDF, bytes unchanged) and passes the port rate ÷ TDF to `Nic`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

from rocelab.roce.cc import CcConfig, DcqcnConfig, builtin_cc_registry
from rocelab.roce.dcqcn import DCQCN_SETS

PMTU_VALUES_BYTES = (256, 512, 1024, 2048, 4096)  # InfiniBand path MTUs
PSN_HALF_SPACE = 1 << 23
# What a responder does with a PSN ahead of the one it expects (rocelab.roce.qp): gbn drops and
# NAKs it (go-back-N); place keeps it (ConnectX-5+ out-of-order data placement).
RECEIVE_ORDERS = ("gbn", "place")
TRUSTS = ("pcp", "dscp")  # what a ConnectX classifies received frames by (mlnx_qos --trust)


def _default_dscp_to_priority() -> dict[int, int]:
    # NVIDIA's RoCE defaults (REFERENCE.md): data on DSCP 26 → priority 3, CNPs on 48 → 6.
    return {26: 3, 48: 6}


@dataclass(frozen=True)
class NicConfig:
    """Everything about a NIC except its addresses and port rate.

    pmtu_bytes, dscp: defaults for QPs that do not set their own.
    dscp_to_priority: the PFC priority a frame waits on; unlisted DSCPs use priority 0.
    trust: "dscp" (the map above decides a frame's priority) or "pcp" (mlnx_qos --trust pcp:
        an untagged frame, which is all a DSCP fabric sends, is on priority 0, and so is RoCE's
        own traffic, which sets no PCP).
    pfc_priorities: the priorities whose PFC the NIC honours (mlnx_qos --pfc); None: RoCE's
        priority under the DSCP map, as NVIDIA's RoCE configuration enables. A pause for
        another priority is counted and ignored.
    vlan_id: None sends untagged frames (DSCP-trust fabrics); else 802.1Q with PCP = priority.
    max_inflight_packets: requester window (sent, not yet acknowledged packets).
    max_rd_atomic: RDMA READs a QP keeps outstanding at most (ibv_qp_attr.max_rd_atomic; 16 is
        what ConnectX offers and what perftest asks for); a later READ waits at the send cursor.
    psn_window_packets: responder accepts PSNs this far ahead (NAK) or behind (duplicate);
        anything farther is dropped as psn_out_of_window. Must cover the peer's window.
    ack_coalesce_packets: responder ACKs after this many in-order packets, and always on
        AckReq (set on a message's last packet and every ack_req_interval_packets).
    retransmit_timeout_s: first retransmission timeout; doubles on each retry, resets on
        progress; after retry_limit timeouts in a row the QP goes to ERROR.
    rnr_retry_delay_s, rnr_retry_limit: wait after an RNR NAK (no receive posted), and how
        many RNR NAKs in a row before ERROR.
    cnp_interval_s: notification point sends at most one CNP per QP per interval.
    cc_algorithm: name in the congestion-control registry ("dcqcn", "none").
    frame_overhead_bytes: wire bytes beyond the frame (FCS 4 + preamble 8 + gap 12), which
        the port and QP pacers count.
    pacing_burst_bytes: how far a pacer may catch up when polled late.
    receive_order: "gbn" (a PSN ahead of the expected one is dropped and NAKed: the requester
        goes back N) or "place" (kept and placed; completion once the message is contiguous;
        rocelab.roce.qp says how a real loss is still recovered).
    place_nak_distance_packets: under place, a hole is taken for a loss (one NAK, sequence
        error at the hole) once a packet arrives this many PSNs past it.
    """

    pmtu_bytes: int = 4096
    dscp: int = 26
    cnp_dscp: int = 48
    dscp_to_priority: Mapping[int, int] = field(default_factory=_default_dscp_to_priority)
    trust: str = "dscp"
    pfc_priorities: frozenset[int] | None = None
    vlan_id: int | None = None
    ttl: int = 64
    max_inflight_packets: int = 1024
    max_rd_atomic: int = 16
    psn_window_packets: int = 1 << 16
    ack_coalesce_packets: int = 16
    ack_req_interval_packets: int = 64
    retransmit_timeout_s: float = 1e-3
    retry_limit: int = 7
    rnr_retry_delay_s: float = 1e-3
    rnr_retry_limit: int = 7
    cnp_interval_s: float = 50e-6
    cc_algorithm: str = "dcqcn"
    cc: CcConfig = field(default_factory=CcConfig)
    frame_overhead_bytes: int = 24
    pacing_burst_bytes: int = 9000
    receive_order: str = "gbn"
    place_nak_distance_packets: int = 128

    def __post_init__(self) -> None:
        problems = []
        if self.pmtu_bytes not in PMTU_VALUES_BYTES:
            problems.append(f"pmtu_bytes={self.pmtu_bytes} must be one of {PMTU_VALUES_BYTES}")
        for name in ("dscp", "cnp_dscp"):
            if not 0 <= getattr(self, name) < 64:
                problems.append(f"{name}={getattr(self, name)} must be 0..63")
        for dscp, priority in self.dscp_to_priority.items():
            if not 0 <= dscp < 64 or not 0 <= priority < 8:
                problems.append(f"dscp_to_priority[{dscp}]={priority}: DSCP 0..63 → 0..7")
        if self.trust not in TRUSTS:
            problems.append(f"trust={self.trust!r} must be one of {', '.join(TRUSTS)}")
        if self.pfc_priorities is not None and not all(0 <= p < 8 for p in self.pfc_priorities):
            problems.append(f"pfc_priorities={sorted(self.pfc_priorities)} must be priorities 0..7")
        if self.vlan_id is not None and not 0 <= self.vlan_id < 4095:
            problems.append(f"vlan_id={self.vlan_id} must be 0..4094")
        if not 1 <= self.ttl <= 255:
            problems.append(f"ttl={self.ttl} must be 1..255")
        for name in ("max_inflight_packets", "max_rd_atomic", "ack_coalesce_packets", "ack_req_interval_packets",
                     "retransmit_timeout_s", "rnr_retry_delay_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name}={getattr(self, name)} must be positive")
        for name in ("retry_limit", "rnr_retry_limit", "cnp_interval_s", "frame_overhead_bytes",
                     "pacing_burst_bytes"):
            if getattr(self, name) < 0:
                problems.append(f"{name}={getattr(self, name)} must be ≥ 0")
        if self.receive_order not in RECEIVE_ORDERS:
            problems.append(f"receive_order={self.receive_order!r} must be one of {', '.join(RECEIVE_ORDERS)}")
        if not 1 <= self.place_nak_distance_packets <= self.psn_window_packets:
            problems.append(f"place_nak_distance_packets={self.place_nak_distance_packets} must be 1.."
                            "psn_window_packets")
        if not self.max_inflight_packets <= self.psn_window_packets < PSN_HALF_SPACE:
            problems.append(f"psn_window_packets={self.psn_window_packets} must be at least "
                            f"max_inflight_packets and below 2^23")
        if problems:
            raise ValueError("NicConfig: " + "; ".join(problems))

    def priority_of(self, dscp: int) -> int:
        return self.dscp_to_priority.get(dscp, 0) if self.trust == "dscp" else 0

    def pfc_enabled(self) -> frozenset[int]:
        if self.pfc_priorities is not None:
            return self.pfc_priorities
        return frozenset({self.dscp_to_priority.get(self.dscp, 0)})


def dilate(config: NicConfig, tdf: float) -> NicConfig:
    """The config for a lab running at rate ÷ tdf: periods × tdf, explicit rates ÷ tdf."""
    dcqcn = config.cc.dcqcn

    def slower(rate_bps: float | None) -> float | None:
        return None if rate_bps is None else rate_bps / tdf

    return dataclasses.replace(
        config,
        retransmit_timeout_s=config.retransmit_timeout_s * tdf,
        rnr_retry_delay_s=config.rnr_retry_delay_s * tdf,
        cnp_interval_s=config.cnp_interval_s * tdf,
        cc=dataclasses.replace(config.cc, dcqcn=dataclasses.replace(
            dcqcn,
            alpha_period_s=dcqcn.alpha_period_s * tdf,
            rate_increase_period_s=dcqcn.rate_increase_period_s * tdf,
            rate_reduce_period_s=dcqcn.rate_reduce_period_s * tdf,
            rate_ai_bps=slower(dcqcn.rate_ai_bps),
            rate_hai_bps=slower(dcqcn.rate_hai_bps),
            min_rate_bps=slower(dcqcn.min_rate_bps),
            rate_on_first_cnp_bps=slower(dcqcn.rate_on_first_cnp_bps))))


# A lab's `roce:` keys: NicConfig's fields, with DCQCN's parameters under `dcqcn:`: a parameter
# set's name (`dcqcn: connectx`), or `parameters: NAME` and the parameters that differ from it.
DCQCN_SET_KEY = "parameters"
DEFAULT_DCQCN_SET = "connectx"  # what the NICs people own run; `paper` on request
ROCE_KEYS = tuple(f.name for f in dataclasses.fields(NicConfig) if f.name != "cc") + ("dcqcn",)


def roce_config(settings: Mapping) -> NicConfig:
    """The NicConfig of a lab's `roce:` mapping (or its JSON copy, whose keys are strings).
    Raises ValueError naming what is wrong."""
    unknown = sorted(str(k) for k in settings if k not in ROCE_KEYS)
    dcqcn = settings.get("dcqcn") or {}
    if isinstance(dcqcn, str):  # a parameter set by name
        dcqcn = {DCQCN_SET_KEY: dcqcn}
    dcqcn_keys = [DCQCN_SET_KEY, *(f.name for f in dataclasses.fields(DcqcnConfig))]
    if not isinstance(dcqcn, Mapping):
        raise ValueError(f"dcqcn: {dcqcn!r} is neither a parameter set ({', '.join(DCQCN_SETS)}) nor a "
                         f"mapping of DCQCN parameters ({', '.join(dcqcn_keys)})")
    unknown += [f"dcqcn.{k}" for k in dcqcn if k not in dcqcn_keys]
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; expected: {', '.join(ROCE_KEYS)}; "
                         f"under dcqcn: {', '.join(dcqcn_keys)}")
    chosen = DCQCN_SETS.get(str(dcqcn.get(DCQCN_SET_KEY, DEFAULT_DCQCN_SET)))
    if chosen is None:
        raise ValueError(f"dcqcn.{DCQCN_SET_KEY}: {dcqcn[DCQCN_SET_KEY]!r} is not a DCQCN parameter set; "
                         f"expected one of: {', '.join(DCQCN_SETS)}")
    values = {k: v for k, v in settings.items() if k != "dcqcn"}
    values.setdefault("cnp_interval_s", chosen.min_time_between_cnps_s)  # the set's NP side
    if "dscp_to_priority" in values:
        values["dscp_to_priority"] = {int(d): int(p) for d, p in dict(values["dscp_to_priority"]).items()}
    if values.get("pfc_priorities") is not None:
        values["pfc_priorities"] = frozenset(int(p) for p in values["pfc_priorities"])
    rp = {k: v for k, v in dcqcn.items() if k != DCQCN_SET_KEY}
    try:
        config = NicConfig(**values, cc=CcConfig(dcqcn=dataclasses.replace(chosen.rp, **rp)))
    except TypeError as exc:  # a string where a number belongs
        raise ValueError(f"a value has the wrong type: {exc}") from None
    builtin_cc_registry().check(config.cc_algorithm)
    return config
