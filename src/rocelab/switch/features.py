"""The switch core's features by name, and which of them a switch needs.

A feature lands in the Python pipeline (rocelab.switch.pipeline, the reference) first, and
its name here; the C core (fastpath_core.c) declares the ones it implements (FEATURES there), and
a switch runs on C only where everything it needs is declared (rocelab.switch.fastpath).
Base forwarding (parsing, classification, LPM, the MMU's static thresholds, lossy tail drop,
shaping, counters) is in both and not named.
"""

from __future__ import annotations

from typing import Sequence

from rocelab.qos.model import QosProfile, port_qos
from rocelab.switch.balance import Balance
from rocelab.switch.fib import Fib

FEATURES = frozenset({
    "scheduler:STRICT", "scheduler:DWRR", "scheduler:WRR",  # SCHEDULER types
    "wred",  # WRED_PROFILE on a queue: ECN marking and WRED drops
    "pfc",  # pfc_enable: XOFF/XON out, PFC honoured in
    "pfcwd:drop", "pfcwd:forward", "pfcwd:alert",  # PFC_WD by action
    "dynamic_threshold",  # a buffer profile's dynamic_th
    "shared_headroom",  # a pool's xoff (headroom shared by its PGs)
    "pause_802_3x",  # a port that honours 802.3x PAUSE (flow_control_rx)
    "link_delay", "link_jitter", "link_loss",  # a port's link impairments
    "ecmp:hash",  # an ECMP group, a member picked by the 5-tuple's hash
    # an ECMP group under another load-balancing mode (rocelab.switch.balance)
    "ecmp:flowlet", "ecmp:packet", "ecmp:spray",
})


def needed(profile: QosProfile, ports: Sequence, fib: Fib, balance: Balance | None = None) -> dict[str, str]:
    """Every named feature a switch with this profile, these ports (PortSpec), this FIB and
    this load balancing uses, each with the first place that uses it ("Ethernet0 queue 3")."""
    found: dict[str, str] = {}

    def need(feature: str, where: str) -> None:
        found.setdefault(feature, where)

    for pool in profile.pools.values():
        if pool.xoff_bytes:
            need("shared_headroom", f"pool {pool.name}")
    for spec in ports:
        qos = port_qos(profile, spec.name)
        if qos.pfc_enable:
            need("pfc", qos.port)
        if qos.pfc_wd:
            need(f"pfcwd:{qos.pfc_wd.action}", qos.port)
        for pg, buffer in sorted(qos.pgs.items()):
            if buffer.dynamic_th is not None:
                need("dynamic_threshold", f"{qos.port} PG {pg}")
        for q, queue in sorted(qos.queues.items()):
            if queue.scheduler:
                need(f"scheduler:{queue.scheduler.type}", f"{qos.port} queue {q}")
            if queue.wred:
                need("wred", f"{qos.port} queue {q}")
            if queue.buffer and queue.buffer.dynamic_th is not None:
                need("dynamic_threshold", f"{qos.port} queue {q}")
        for feature, used in (("pause_802_3x", spec.global_flow_control_rx), ("link_delay", spec.delay_s),
                              ("link_jitter", spec.jitter_s), ("link_loss", spec.loss_pct)):
            if used:
                need(feature, spec.name)
    for prefix, hops in fib.routes.items():
        if len(hops) > 1:
            need(f"ecmp:{balance.mode if balance else 'hash'}", f"route {prefix}")
    return found
