"""The verbs backend: the same jobs over a real RDMA device (Soft-RoCE rxe) through pyverbs.

`nic: verbs` in lab.yml. For each job the orchestrator starts one verbs agent per host,
`python -m rocelab.roce.verbs CONFIG_JSON` (nicd's configuration file), inside the host's
namespace; the agent serves the
same control ops as nicd (ping, counters, the job ops of rocelab.traffic.host), so the
job, its plans, its runner and its report do not change. The agent drives the device
through `VerbsNic`, which offers the NIC core's verbs (create_qp, connect, post_send,
post_write, post_read, post_recv, poll_completions, register_mr, counters) on top of pyverbs.

Written against pyverbs' documented API (rdma-core Documentation/pyverbs.md and the
pyverbs sources: Context, PD, CQ, QP with QPInitAttr/QPCap/QPAttr and to_rts,
GlobalRoute/AHAttr, SendWR/RecvWR/SGE, MR). This project's CI machine has no RDMA
device and no pyverbs, so only the error paths run there: without pyverbs, without a
device, or without a device carrying the host's address, a clear message and exit 2.

What differs from the emulated NIC: payloads are scratch (the runner says so), so the
agent sends from and receives into registered scratch regions of the right length and
never copies Python buffers; counters come from the device's hw_counters in sysfs where
it has them (rxe has no CNP counters and no DCQCN); time is real, not dilated, so a verbs
lab wants `tdf: 1`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from rocelab.kernel import control
from rocelab.kernel.loop import Loop
from rocelab.errors import EXIT_USAGE, InputError, Problem
from rocelab.roce.config import NicConfig, roce_config
from rocelab.traffic.host import JOB_OPS, JobHost
from rocelab.traffic.runner import RECV_DEPTH, SEND_DEPTH

PORT = 1
CQ_ENTRIES = 8192
BUSY_POLL_S = 0.0005  # how often the CQ is polled while a job runs
INSTALL_HINT = ("install rdma-core's Python bindings (Debian/Ubuntu: apt install python3-pyverbs) "
                "into the interpreter rocelab runs in")
DEVICE_HINT = ("load Soft-RoCE and bind it to each host's port: modprobe rdma_rxe; "
               "ip netns exec LAB.HOST rdma link add rxe-HOST type rxe netdev eth1; "
               "or use `nic: emulated`")
# hw_counters (sysfs) → the job's counter names; rxe and mlx5 spell them differently.
HW_COUNTERS = {
    "cnps_sent": ("np_cnp_sent",),
    "cnps_received": ("rp_cnp_handled",),
    "ce_received": ("np_ecn_marked_roce_packets",),
    "timeouts": ("local_ack_timeout_err", "completer_retry_err"),
    "naks_received": ("packet_seq_err", "rcvd_seq_err"),
    "tx_packets": ("sent_pkts",),
    "rx_packets": ("rcvd_pkts",),
}
_MTU_ENUM = {256: "IBV_MTU_256", 512: "IBV_MTU_512", 1024: "IBV_MTU_1024", 2048: "IBV_MTU_2048",
             4096: "IBV_MTU_4096"}
_WC_OPCODES = ("SEND", "RDMA_WRITE", "RDMA_READ", "RECV")


def require_pyverbs() -> SimpleNamespace:
    """pyverbs' modules, imported now (never at rocelab's import); InputError without it."""
    try:
        import pyverbs.addr as addr
        import pyverbs.cq as cq
        import pyverbs.device as device
        import pyverbs.enums as enums
        import pyverbs.mr as mr
        import pyverbs.pd as pd
        import pyverbs.qp as qp
        import pyverbs.wr as wr
    except ImportError as exc:
        raise InputError([Problem("nic: verbs", "", f"needs pyverbs, which is not importable here ({exc})",
                                  INSTALL_HINT)]) from None
    return SimpleNamespace(addr=addr, cq=cq, device=device, enums=enums, mr=mr, pd=pd, qp=qp, wr=wr)


def require_device(pv: SimpleNamespace) -> list[str]:
    """Names of the RDMA devices the kernel offers; InputError if there are none."""
    names = [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in pv.device.get_device_list()]
    if not names:
        raise InputError([Problem("nic: verbs", "", "found no RDMA device (no rxe, no RoCE NIC)", DEVICE_HINT)])
    return names


def roce_v2_gid(ip: str) -> str:
    """The RoCEv2 GID of an IPv4 address (IPv4-mapped IPv6), in pyverbs' 8-word form."""
    return ipaddress.IPv6Address(f"::ffff:{ip}").exploded


@dataclass(frozen=True)
class _Qp:
    qpn: int
    initial_psn: int


@dataclass(frozen=True)
class _Region:
    va: int
    r_key: int


@dataclass(frozen=True)
class VerbsCompletion:
    wr_id: int
    qpn: int
    opcode: str
    status: str
    byte_len: int


class VerbsNic:
    """The NIC core's verbs over one pyverbs device port (RC QPs, RoCEv2 GIDs)."""

    def __init__(self, pv: SimpleNamespace, ip: str, *, pmtu_bytes: int, dscp: int, message_bytes: int = 1 << 20,
                 max_rd_atomic: int = NicConfig.max_rd_atomic):
        self._pv = pv
        e = pv.enums
        self._e = e
        self.device, self.gid_index = self._find_device(ip)
        self.ctx = pv.device.Context(name=self.device)
        self.pd = pv.pd.PD(self.ctx)
        self.cq = pv.cq.CQ(self.ctx, CQ_ENTRIES, None, None, 0)
        self._pmtu = getattr(e, _MTU_ENUM[pmtu_bytes])
        self._dscp = dscp
        self._max_rd_atomic = max_rd_atomic  # READs a QP keeps outstanding, and serves, unless a job says
        self._qps: dict[int, object] = {}
        self._psn: dict[int, int] = {}
        self._regions: dict[int, object] = {}
        self._scratch_bytes = 0
        self._grow_scratch(message_bytes)
        self._status = {getattr(e, n): n[len("IBV_WC_"):] for n in dir(e)
                        if n.startswith("IBV_WC_") and n.endswith(("_ERR", "SUCCESS"))}
        self._opcode = {getattr(e, f"IBV_WC_{n}"): n for n in _WC_OPCODES}

    def _find_device(self, ip: str) -> tuple[str, int]:
        """The device and GID index whose RoCEv2 GID is this host's address."""
        pv, wanted = self._pv, roce_v2_gid(ip)
        for name in require_device(pv):
            with pv.device.Context(name=name) as ctx:
                for index in range(ctx.query_port(PORT).gid_tbl_len):
                    try:
                        gid = str(ctx.query_gid(PORT, index))
                        kind = ctx.query_gid_type(PORT, index)
                    except Exception:  # an empty slot of the GID table
                        continue
                    if gid == wanted and kind == self._e.IBV_GID_TYPE_SYSFS_ROCE_V2:
                        return name, index
        raise InputError([Problem("nic: verbs", "", f"no RDMA device has a RoCEv2 GID for {ip}", DEVICE_HINT)])

    def _grow_scratch(self, nbytes: int) -> None:
        if nbytes <= self._scratch_bytes:
            return
        access = self._e.IBV_ACCESS_LOCAL_WRITE
        self._send_mr = self._pv.mr.MR(self.pd, nbytes, access)
        self._recv_mr = self._pv.mr.MR(self.pd, nbytes, access)
        self._scratch_bytes = nbytes

    def _sge(self, mr, nbytes: int):
        self._grow_scratch(nbytes)
        return self._pv.wr.SGE(mr.buf, nbytes, mr.lkey)

    # ---- the verbs the job host and the runner use ------------------------------------

    def create_qp(self) -> _Qp:
        pv, e = self._pv, self._e
        cap = pv.qp.QPCap(max_send_wr=2 * SEND_DEPTH + 2, max_recv_wr=RECV_DEPTH + 1, max_send_sge=1, max_recv_sge=1)
        init = pv.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        attr = pv.qp.QPAttr(port_num=PORT)
        attr.qp_access_flags = self._remote_access()
        qp = pv.qp.QP(self.pd, init, attr)  # an RC QP comes back in INIT
        self._qps[qp.qp_num] = qp
        self._psn[qp.qp_num] = random.getrandbits(24)
        return _Qp(qp.qp_num, self._psn[qp.qp_num])

    def connect(self, qpn: int, *, remote_qpn: int, remote_ip: str, remote_mac: str, remote_psn: int,
                max_rd_atomic: int | None = None) -> None:
        """INIT → RTR → RTS; the kernel resolves the next hop (remote_mac is the emulated NIC's)."""
        pv, e = self._pv, self._e
        attr = pv.qp.QPAttr(port_num=PORT, path_mtu=self._pmtu)
        attr.dest_qp_num = remote_qpn
        attr.rq_psn = remote_psn
        attr.sq_psn = self._psn[qpn]
        attr.max_rd_atomic = max_rd_atomic or self._max_rd_atomic
        attr.max_dest_rd_atomic = self._max_rd_atomic
        attr.min_rnr_timer = 12
        attr.timeout = 14
        attr.retry_cnt = attr.rnr_retry = 7
        attr.qp_access_flags = self._remote_access()
        route = pv.addr.GlobalRoute(dgid=pv.addr.GID(roce_v2_gid(remote_ip)), sgid_index=self.gid_index,
                                    hop_limit=64, traffic_class=self._dscp << 2)
        attr.ah_attr = pv.addr.AHAttr(gr=route, is_global=1, port_num=PORT)
        self._qps[qpn].to_rts(attr)

    def destroy_qp(self, qpn: int) -> None:
        self._qps.pop(qpn).close()
        self._psn.pop(qpn, None)

    def _remote_access(self) -> int:
        e = self._e
        return e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ

    def register_mr(self, buf: bytearray) -> _Region:
        """A region peers may write and read, as long as `buf` (the device allocates its own memory)."""
        mr = self._pv.mr.MR(self.pd, max(len(buf), 1), self._remote_access())
        self._regions[mr.rkey] = mr
        return _Region(mr.buf, mr.rkey)

    def deregister_mr(self, r_key: int) -> None:
        mr = self._regions.pop(r_key, None)
        if mr is not None:
            mr.close()

    def post_send(self, qpn: int, wr_id: int, data) -> None:
        sge = self._sge(self._send_mr, len(data))
        self._qps[qpn].post_send(self._pv.wr.SendWR(wr_id=wr_id, opcode=self._e.IBV_WR_SEND, num_sge=1, sg=[sge]))

    def post_write(self, qpn: int, wr_id: int, data, *, remote_va: int, r_key: int) -> None:
        wr = self._pv.wr.SendWR(wr_id=wr_id, opcode=self._e.IBV_WR_RDMA_WRITE, num_sge=1,
                                sg=[self._sge(self._send_mr, len(data))])
        wr.set_wr_rdma(r_key, remote_va)
        self._qps[qpn].post_send(wr)

    def post_read(self, qpn: int, wr_id: int, buf, *, remote_va: int, r_key: int) -> None:
        wr = self._pv.wr.SendWR(wr_id=wr_id, opcode=self._e.IBV_WR_RDMA_READ, num_sge=1,
                                sg=[self._sge(self._recv_mr, len(buf))])
        wr.set_wr_rdma(r_key, remote_va)
        self._qps[qpn].post_send(wr)

    def post_recv(self, qpn: int, wr_id: int, buf) -> None:
        sge = self._sge(self._recv_mr, len(buf))
        self._qps[qpn].post_recv(self._pv.wr.RecvWR(wr_id=wr_id, num_sge=1, sg=[sge]))

    def poll_completions(self) -> list[VerbsCompletion]:
        out = []
        while True:
            count, wcs = self.cq.poll(64)
            out += [VerbsCompletion(wc.wr_id, wc.qp_num, self._opcode.get(wc.opcode, str(wc.opcode)),
                                    self._status.get(wc.status, str(wc.status)), wc.byte_len) for wc in wcs]
            if count < 64:
                return out

    def counters(self) -> dict:
        """The device's hw_counters, and the job's names for those it has."""
        folder = Path(f"/sys/class/infiniband/{self.device}/ports/{PORT}/hw_counters")
        raw = {}
        for entry in folder.glob("*") if folder.is_dir() else ():
            with contextlib.suppress(OSError, ValueError):
                raw[entry.name] = int(entry.read_text())
        mapped = {key: next((raw[n] for n in names if n in raw), 0) for key, names in HW_COUNTERS.items()}
        return {**mapped, "hw_counters": raw}


# ---- the agent --------------------------------------------------------------------------

class CqPoller:
    """The agent loop's core for a verbs NIC. It has no port (the kernel's RDMA stack owns
    the wire) and the CQ has no file descriptor the loop waits on, so while a job runs the
    loop comes back every BUSY_POLL_S to poll it."""

    def __init__(self, jobs: JobHost):
        self.jobs = jobs

    def receive(self, port: str, frame: bytes, now: float) -> None:
        raise AssertionError("a verbs agent opens no port")

    def poll(self, now: float) -> list[tuple[str, bytes]]:
        self.jobs.advance(now)
        return []

    def next_event(self, now: float) -> float | None:
        status = self.jobs.status()
        if status is not None and status["state"] == "running":
            return now + BUSY_POLL_S
        return self.jobs.next_event(now)


class VerbsAgent:
    def __init__(self, config: dict):
        pv = require_pyverbs()  # first: the one problem this machine is likely to have
        roce = roce_config(config.get("roce") or {})
        port = config["ports"][0]
        ip = port["address"].split("/")[0]
        self.node = config["node"]
        self.rate_bps = float(port["rate_bps"])
        self.nic = VerbsNic(pv, ip, pmtu_bytes=roce.pmtu_bytes, dscp=roce.dscp, max_rd_atomic=roce.max_rd_atomic)
        self.jobs = JobHost(self.nic, ip=ip, port_rate_bps=self.rate_bps, next_hop_mac=port["peer_mac"],
                            clock=time.monotonic)
        self.control = control.ControlServer(Path(config["socket"]), self.handle)
        self.loop = Loop(CqPoller(self.jobs), {}, [self.control])

    def handle(self, req: dict) -> dict:
        op = req["op"]
        if op == "ping":
            return {"node": self.node, "backend": "verbs", "device": self.nic.device, "port_rate_bps": self.rate_bps,
                    "scheduling": self.loop.stats.scheduling}
        if op == "counters":
            return {"node": self.node, "counters": self.nic.counters(), "job": self.jobs.status()}
        if op in JOB_OPS:
            return self.jobs.handle(req)
        raise ValueError(f"unknown op {op!r}; ops: ping, counters, {', '.join(JOB_OPS)}")

    def run(self) -> None:
        try:
            self.loop.run()
        finally:
            self.control.close()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m rocelab.roce.verbs CONFIG_JSON", file=sys.stderr)
        return EXIT_USAGE
    try:
        VerbsAgent(json.loads(Path(argv[0]).read_text())).run()
    except InputError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
