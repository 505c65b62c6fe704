"""A whole job over the in-memory fabric (rocelab.roce.sim) under a simulated clock.

The same PlanRunner and report as a live job, with NIC cores on a simulated switch
instead of nicd processes on a namespace fabric: no root, no sockets, repeatable from a
seed. Used by the unit tests and for quick what-ifs (loss, ECN marking).
"""

from __future__ import annotations

import random
from typing import Mapping

from rocelab.roce import Nic, NicConfig, dilate
from rocelab.roce.sim import FabricSim
from rocelab.traffic.patterns import Plan
from rocelab.traffic.summary import build_report
from rocelab.traffic.runner import DONE, FAILED, REGION_HOLDS, PeerQps, PlanRunner, largest_message

START_S = 1e-3


def run_in_sim(plan: Plan, *, iterations: int = 1, qps: int = 1, message_bytes: int = 1 << 20,
               verb: str = "send", compute_gap_s: float = 0.0, rate_bps: float = 100e6, tdf: float = 1000,
               config: NicConfig | None = None, link: Mapping | None = None, seed: int = 1,
               limit_s: float = 600.0,
               max_rd_atomic: int | None = None) -> tuple[dict, dict[str, PlanRunner], FabricSim]:
    """Run `plan` on NICs of `rate_bps` (emulated) behind one simulated switch; `link` holds
    FabricSim.attach options (delay_s, loss, ecn, …). `config` is the production NIC config,
    dilated by `tdf` here; `max_rd_atomic` the QPs' outstanding READs (None: the config's).
    Returns (report, runners, sim)."""
    rng = random.Random(seed)
    config = dilate(config or NicConfig(), tdf)
    nics = {h: Nic(f"02:00:00:00:7f:{n + 1:02x}", f"198.18.127.{n + 1}", rate_bps, config, rng=rng)
            for n, h in enumerate(plan.hosts)}
    sim = FabricSim(random.Random(seed + 1))
    for nic in nics.values():
        sim.attach(nic, **{"delay_s": 1e-6, **(link or {})})
    qpns: dict[str, dict[str, list[int]]] = {h: {} for h in plan.hosts}
    for a, b in plan.pairs():
        for _ in range(qps):
            qa, qb = nics[a].create_qp(), nics[b].create_qp()
            nics[a].connect(qa.qpn, remote_qpn=qb.qpn, remote_ip=nics[b].ip, remote_mac=nics[b].mac,
                            remote_psn=qb.initial_psn, max_rd_atomic=max_rd_atomic)
            nics[b].connect(qb.qpn, remote_qpn=qa.qpn, remote_ip=nics[a].ip, remote_mac=nics[a].mac,
                            remote_psn=qa.initial_psn, max_rd_atomic=max_rd_atomic)
            qpns[a].setdefault(b, []).append(qa.qpn)
            qpns[b].setdefault(a, []).append(qb.qpn)
    regions = {}
    if verb in REGION_HOLDS:
        for h in plan.hosts:
            nqps = {p: qps for p in qpns[h]}
            regions[h] = nics[h].register_mr(bytearray(largest_message(plan.steps[h], nqps, message_bytes,
                                                                       REGION_HOLDS[verb])))
    runners = {}
    for h in plan.hosts:
        peers = {p: PeerQps(tuple(q), regions[p].va if regions else 0, regions[p].r_key if regions else 0)
                 for p, q in qpns[h].items()}
        runners[h] = PlanRunner(nics[h], plan.steps[h], peers, iterations=iterations,
                                compute_gap_s=compute_gap_s, message_bytes=message_bytes, verb=verb)
        runners[h].start(START_S)

    def advance() -> bool:
        for h, runner in runners.items():
            if runner.advance(sim.now):
                sim.wake(nics[h])
        return all(r.state in (DONE, FAILED) for r in runners.values())

    def earliest_timer() -> float:
        return min((t for t in (r.next_event(sim.now) for r in runners.values()) if t is not None), default=limit_s)

    while True:
        horizon = min(earliest_timer(), limit_s)
        # Stop early when a runner sets a timer (a compute gap) before the horizon.
        if (sim.run(horizon, stop=lambda: advance() or earliest_timer() < horizon)
                and all(r.state in (DONE, FAILED) for r in runners.values())):
            break
        if advance() or sim.now >= limit_s:
            break
    for runner in runners.values():
        if runner.state not in (DONE, FAILED):
            runner.fail(f"not finished after {limit_s} s of simulated time: {runner.status()['waiting_for']}")
    report = build_report(lab="sim", plan=plan, results={h: r.result() for h, r in runners.items()}, tdf=tdf,
                          line_rate_bps=rate_bps, iterations=iterations, qps=qps, verb=verb,
                          message_bytes=message_bytes, compute_gap_s=compute_gap_s)
    return report, runners, sim
