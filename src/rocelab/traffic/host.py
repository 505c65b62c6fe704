"""The job operations a NIC agent serves on its control socket (nicd, the verbs agent).

The orchestrator (rocelab.traffic.job) drives every host of a job through the same
sequence, exchanging what RC needs out of band as a real application does over TCP:

    job_prepare   this host's steps and peers → its QPNs, initial PSNs, region (VA, R_Key)
    job_connect   the peers' QPNs, PSNs, addresses and regions → QPs in RTS, plan loaded
    job_start     the CLOCK_MONOTONIC instant to begin (one clock for every namespace)
    job_status    progress, polled while it runs
    job_result    the runner's records, for the report
    job_end       QPs destroyed, region released

One job at a time per host. A job whose orchestrator has been silent for STALE_S (it
was killed) no longer blocks the next one.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from rocelab.traffic.patterns import Step
from rocelab.traffic.runner import REGION_HOLDS, VERBS, PeerQps, PlanRunner, Transport, largest_message

STALE_S = 60.0
JOB_OPS = ("job_prepare", "job_connect", "job_start", "job_status", "job_result", "job_end")


class Verbs(Transport, Protocol):
    """What a job needs of a NIC beyond the runner's calls: QPs and memory regions."""

    def create_qp(self) -> Any: ...  # has .qpn and .initial_psn

    def connect(self, qpn: int, *, remote_qpn: int, remote_ip: str, remote_mac: str, remote_psn: int,
                max_rd_atomic: int | None = None) -> None: ...

    def destroy_qp(self, qpn: int) -> None: ...

    def register_mr(self, buf: bytearray) -> Any: ...  # has .va and .r_key

    def deregister_mr(self, r_key: int) -> None: ...


class _Job:
    def __init__(self, job_id: str, steps: list[Step], nqps: dict[str, int], options: dict, now: float):
        self.id = job_id
        self.steps = steps
        self.nqps = nqps
        self.options = options
        self.qpns: dict[str, list[int]] = {}
        self.region: Any = None
        self.max_rd_atomic: int | None = None  # verb read: the QPs' outstanding READs; None: the NIC's
        self.runner: PlanRunner | None = None
        self.last_contact = now


class JobHost:
    """Serves JOB_OPS for one NIC; the agent's loop calls `advance` and `next_event`."""

    def __init__(self, nic: Verbs, *, ip: str, port_rate_bps: float, next_hop_mac: str,
                 clock: Callable[[], float]):
        self._nic = nic
        self._ip = ip
        self._rate_bps = port_rate_bps
        self._next_hop_mac = next_hop_mac
        self._clock = clock
        self.job: _Job | None = None

    def advance(self, now: float) -> bool:
        runner = self.job.runner if self.job else None
        return runner.advance(now) if runner else False

    def next_event(self, now: float) -> float | None:
        runner = self.job.runner if self.job else None
        return runner.next_event(now) if runner else None

    def status(self) -> dict | None:
        return self.job.runner.status() if self.job and self.job.runner else None

    def handle(self, req: dict) -> dict:
        op = req["op"]
        now = self._clock()
        if op == "job_prepare":
            return self._prepare(req, now)
        job = self._job(req)
        job.last_contact = now
        if op == "job_connect":
            return self._connect(job, req)
        if op == "job_end":
            self._end()
            return {}
        runner = job.runner
        if runner is None:
            raise ValueError(f"job {job.id} is not connected yet")
        if op == "job_start":
            runner.start(float(req["start_at"]))
            return {"now": now}
        if op == "job_status":
            return {"now": now, **runner.status()}
        if op == "job_result":
            return runner.result()
        raise ValueError(f"unknown op {op!r}")

    def _job(self, req: dict) -> _Job:
        if self.job is None or self.job.id != req.get("job"):
            raise ValueError(f"no job {req.get('job')!r} here")
        return self.job

    def _prepare(self, req: dict, now: float) -> dict:
        if self.job is not None:
            if now - self.job.last_contact < STALE_S:
                raise ValueError(f"busy with job {self.job.id}; try again when it ends")
            self._end()
        verb = req.get("verb", "send")
        if verb not in VERBS:
            raise ValueError(f"verb {verb!r}: expected one of {VERBS}")
        outstanding = req.get("max_rd_atomic")
        if outstanding is not None and (not isinstance(outstanding, int) or outstanding < 1):
            raise ValueError(f"max_rd_atomic {outstanding!r}: expected a whole number ≥ 1")
        steps = [Step.from_json(s) for s in req["steps"]]
        nqps = {str(p): int(n) for p, n in req["peers"].items()}
        job = _Job(str(req["job"]), steps, nqps, {
            "iterations": int(req["iterations"]), "compute_gap_s": float(req["compute_gap_s"]),
            "message_bytes": int(req["message_bytes"]), "verb": verb,
            "record_messages": bool(req.get("record_messages", False))}, now)
        job.max_rd_atomic = outstanding
        self.job = job
        qps = {}
        for peer, n in nqps.items():
            made = [self._nic.create_qp() for _ in range(n)]
            job.qpns[peer] = [qp.qpn for qp in made]
            qps[peer] = [{"qpn": qp.qpn, "psn": qp.initial_psn} for qp in made]
        region = None
        if verb in REGION_HOLDS:  # write: where the peers' WRITEs land; read: what the peers read
            size = largest_message(steps, nqps, job.options["message_bytes"], REGION_HOLDS[verb])
            job.region = self._nic.register_mr(bytearray(size))
            region = {"va": job.region.va, "r_key": job.region.r_key}
        return {"ip": self._ip, "port_rate_bps": self._rate_bps, "qps": qps, "region": region}

    def _connect(self, job: _Job, req: dict) -> dict:
        if job.runner is not None:
            raise ValueError(f"job {job.id} is already connected")
        peers = {}
        for peer, remote in req["peers"].items():
            mine = job.qpns.get(peer)
            if mine is None or len(remote["qps"]) != len(mine):
                raise ValueError(f"peer {peer}: expected {len(mine or ())} QPs, got {len(remote['qps'])}")
            for qpn, theirs in zip(mine, remote["qps"]):
                self._nic.connect(qpn, remote_qpn=int(theirs["qpn"]), remote_ip=str(remote["ip"]),
                                  remote_mac=self._next_hop_mac, remote_psn=int(theirs["psn"]),
                                  max_rd_atomic=job.max_rd_atomic)
            region = remote.get("region") or {}
            peers[peer] = PeerQps(tuple(mine), int(region.get("va", 0)), int(region.get("r_key", 0)))
        job.runner = PlanRunner(self._nic, job.steps, peers, **job.options)
        return {}

    def _end(self) -> None:
        job, self.job = self.job, None
        for qpns in job.qpns.values():
            for qpn in qpns:
                self._nic.destroy_qp(qpn)
        if job.region is not None:
            self._nic.deregister_mr(job.region.r_key)
        self._nic.poll_completions()  # the flushed work of the destroyed QPs: not the next job's
