"""The verbs backend's error paths (this machine has neither pyverbs nor an RDMA device),
and `nic: verbs` / `roce:` in lab files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocelab.roce import verbs
from rocelab.errors import EXIT_USAGE, InputError
from rocelab.model.lab import load_lab
from rocelab.engines.state import InterfaceState, LabState, NodeState
from rocelab.traffic.job import run_job
from rocelab.traffic.spec import JobSpec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_pyverbs(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyverbs", None)  # import pyverbs.* → ImportError


def fake_pyverbs(devices: list[str], gids: dict[int, tuple[str, int]] | None = None) -> SimpleNamespace:
    """Just enough of pyverbs' device module for device discovery."""

    class Context:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def query_port(self, port):
            return SimpleNamespace(gid_tbl_len=len(gids or {}))

        def query_gid(self, port, index):
            return gids[index][0]

        def query_gid_type(self, port, index):
            return gids[index][1]

    return SimpleNamespace(device=SimpleNamespace(get_device_list=lambda: [SimpleNamespace(name=d.encode()) for d in devices],
                                                  Context=Context),
                           enums=SimpleNamespace(IBV_GID_TYPE_SYSFS_ROCE_V2=1))


def test_without_pyverbs_the_backend_says_what_to_install(no_pyverbs):
    with pytest.raises(InputError) as exc:
        verbs.require_pyverbs()
    assert "needs pyverbs" in str(exc.value) and "python3-pyverbs" in str(exc.value)


def test_without_a_device_the_backend_says_how_to_make_one():
    with pytest.raises(InputError) as exc:
        verbs.require_device(fake_pyverbs([]))
    assert "no RDMA device" in str(exc.value) and "rdma link add" in str(exc.value)
    assert verbs.require_device(fake_pyverbs(["rxe0"])) == ["rxe0"]


def test_a_device_without_the_hosts_roce_v2_gid_is_refused():
    pv = fake_pyverbs(["rxe0"], {0: ("fe80:0000:0000:0000:0000:0000:0000:0001", 0),
                                 1: (verbs.roce_v2_gid("198.19.9.9"), 1)})
    with pytest.raises(InputError, match="no RDMA device has a RoCEv2 GID for 198.19.1.2"):
        verbs.VerbsNic(pv, "198.19.1.2", pmtu_bytes=1024, dscp=26)


def test_roce_v2_gid_is_the_ipv4_mapped_address():
    assert verbs.roce_v2_gid("198.19.1.2") == "0000:0000:0000:0000:0000:ffff:c613:0102"


def test_the_verbs_agent_exits_2_with_the_message(tmp_path):
    config = tmp_path / "h1-verbs.json"
    config.write_text(json.dumps({"node": "h1", "socket": str(tmp_path / "s"), "tdf": 1, "roce": {}, "ports": [
        {"name": "eth1", "address": "198.19.1.2/24", "peer_mac": "02:00:00:00:00:01", "rate_bps": 1e11}]}))
    result = subprocess.run([sys.executable, "-m", "rocelab.roce.verbs", str(config)], capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert result.returncode == EXIT_USAGE
    assert "needs pyverbs" in result.stderr and "Traceback" not in result.stderr


def test_a_job_on_a_verbs_lab_without_pyverbs_is_an_input_error(tmp_path, no_pyverbs):
    source = tmp_path / "labs" / "rxe" / "lab.yml"
    source.parent.mkdir(parents=True)
    source.write_text("topology: leaf-spine-2x2\nnic: verbs\n")
    nodes = [NodeState(h, "host", f"rxe.{h}", [InterfaceState("eth1", f"198.19.{n}.2/24", "leaf1:eth1", "02:00:00:00:00:01")])
             for n, h in enumerate(("h1", "h2"), start=1)]
    record = LabState("rxe", "netns", str(source), "kernel", 1000, "up", nodes, nic="verbs")
    with pytest.raises(InputError, match="needs pyverbs"):
        run_job(record, JobSpec("elephant"))


def test_lab_files_take_nic_verbs_and_roce_settings(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\nnic: verbs\nroce:\n  pmtu_bytes: 1024\n  cc_algorithm: none\n"
                    "  dcqcn: {g: 0.0625}\n  dscp_to_priority: {26: 3, 48: 6}\n")
    lab = load_lab("l1")
    assert lab.nic == "verbs"
    assert lab.roce["pmtu_bytes"] == 1024 and lab.roce["dcqcn"] == {"g": 0.0625}


def test_bad_roce_settings_name_the_key_and_what_is_expected(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\nnic: emulated\nroce:\n  pmtu_bytes: 1000\n  cc: dcqcn\n")
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    text = str(exc.value)
    assert "lab.yml: roce" in text and "unknown key(s) cc" in text and "pmtu_bytes" in text
    lab_home.write_text("topology: leaf-spine-2x2\nroce:\n  pmtu_bytes: 1000\n")
    with pytest.raises(InputError, match=r"pmtu_bytes=1000 must be one of \(256, 512, 1024, 2048, 4096\)"):
        load_lab("l1")
    lab_home.write_text("topology: leaf-spine-2x2\nroce:\n  cc_algorithm: cubic\n")
    with pytest.raises(InputError, match="unknown congestion control 'cubic'; valid: dcqcn, none"):
        load_lab("l1")


# ---- VerbsNic against a fake pyverbs: the adapter's calls, shapes and completion mapping ----

class _Bag:
    def __init__(self, *args, **kwargs):
        self.args = args
        self.__dict__.update(kwargs)


class _FakeFabric:
    """Two fake devices whose RC QPs deliver every posted WR at once, in order."""

    def __init__(self):
        self.qps = {}
        self.gids = {"rxe-a": verbs.roce_v2_gid("198.18.5.1"), "rxe-b": verbs.roce_v2_gid("198.18.5.2")}
        self.next_qpn = 0x40
        self.next_key = 0x1000

    def pyverbs(self) -> SimpleNamespace:
        fabric = self
        enums = SimpleNamespace(IBV_QPT_RC=2, IBV_ACCESS_LOCAL_WRITE=1, IBV_ACCESS_REMOTE_WRITE=2,
                                IBV_ACCESS_REMOTE_READ=4, IBV_WR_SEND=2, IBV_WR_RDMA_WRITE=0, IBV_WR_RDMA_READ=4,
                                IBV_WC_SEND=0, IBV_WC_RDMA_WRITE=1, IBV_WC_RDMA_READ=2, IBV_WC_RECV=128,
                                IBV_WC_SUCCESS=0, IBV_WC_WR_FLUSH_ERR=5, IBV_WC_RETRY_EXC_ERR=12, IBV_MTU_256=1,
                                IBV_MTU_512=2, IBV_MTU_1024=3, IBV_MTU_2048=4, IBV_MTU_4096=5,
                                IBV_GID_TYPE_SYSFS_ROCE_V2=1)

        class Context(_Bag):
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def query_port(self, port):
                return _Bag(gid_tbl_len=2)

            def query_gid(self, port, index):
                return fabric.gids[self.name] if index == 1 else "fe80:0000:0000:0000:0000:0000:0000:0001"

            def query_gid_type(self, port, index):
                return index

        class CQ:
            def __init__(self, ctx, entries, *rest):
                self.wcs = []

            def poll(self, n):
                out, self.wcs = self.wcs[:n], self.wcs[n:]
                return len(out), out

        class MR:
            def __init__(self, pd, length, access):
                fabric.next_key += 1
                self.buf, self.lkey, self.rkey, self.length = 0x7000_0000 + fabric.next_key * 0x10000, fabric.next_key, fabric.next_key, length

            def close(self):
                pass

        class QP:
            def __init__(self, pd, init, attr):
                fabric.next_qpn += 1
                self.qp_num, self.cq, self.recvs, self.peer = fabric.next_qpn, init.scq, [], None
                fabric.qps[self.qp_num] = self

            def to_rts(self, attr):
                self.peer = fabric.qps[attr.dest_qp_num]
                self.attr = attr

            def post_recv(self, wr):
                self.recvs.append(wr)

            def post_send(self, wr):
                length = wr.sg[0].length
                if wr.opcode == enums.IBV_WR_SEND:
                    recv = self.peer.recvs.pop(0)
                    assert recv.sg[0].length >= length
                    self.peer.cq.wcs.append(_Bag(wr_id=recv.wr_id, qp_num=self.peer.qp_num, opcode=enums.IBV_WC_RECV,
                                                 status=enums.IBV_WC_SUCCESS, byte_len=length))
                opcode = {enums.IBV_WR_SEND: enums.IBV_WC_SEND, enums.IBV_WR_RDMA_WRITE: enums.IBV_WC_RDMA_WRITE,
                          enums.IBV_WR_RDMA_READ: enums.IBV_WC_RDMA_READ}[wr.opcode]
                self.cq.wcs.append(_Bag(wr_id=wr.wr_id, qp_num=self.qp_num, opcode=opcode,
                                        status=enums.IBV_WC_SUCCESS, byte_len=length))

            def close(self):
                pass

        class SendWR(_Bag):
            def set_wr_rdma(self, rkey, addr):
                self.rdma = (rkey, addr)

        names = list(self.gids)
        return SimpleNamespace(
            enums=enums, cq=SimpleNamespace(CQ=CQ), mr=SimpleNamespace(MR=MR), pd=SimpleNamespace(PD=_Bag),
            device=SimpleNamespace(Context=Context, get_device_list=lambda: [SimpleNamespace(name=n.encode()) for n in names]),
            qp=SimpleNamespace(QPCap=_Bag, QPInitAttr=_Bag, QPAttr=_Bag, QP=QP),
            wr=SimpleNamespace(SGE=lambda addr, length, lkey: _Bag(addr=addr, length=length, lkey=lkey),
                               SendWR=SendWR, RecvWR=_Bag),
            addr=SimpleNamespace(GID=_Bag, GlobalRoute=_Bag, AHAttr=_Bag))


@pytest.mark.parametrize("verb", ["send", "write", "read"])
def test_a_job_runs_over_verbs_nics_on_a_fake_pyverbs(verb):
    from rocelab.traffic.host import JobHost
    from rocelab.traffic.patterns import builtin_patterns

    fabric = _FakeFabric()
    pv = fabric.pyverbs()
    ips = {"h1": "198.18.5.1", "h2": "198.18.5.2"}
    nics = {h: verbs.VerbsNic(pv, ip, pmtu_bytes=1024, dscp=26, message_bytes=4096) for h, ip in ips.items()}
    assert [n.device for n in nics.values()] == ["rxe-a", "rxe-b"] and nics["h1"].gid_index == 1
    clock = {"now": 0.0}
    hosts = {h: JobHost(nic, ip=ips[h], port_rate_bps=1e9, next_hop_mac="", clock=lambda: clock["now"])
             for h, nic in nics.items()}
    plan = builtin_patterns().get("elephant").plan(["h1", "h2"], 100_000, {"bidirectional": True})
    prepared = {h: hosts[h].handle({"op": "job_prepare", "job": "j", "steps": [s.to_json() for s in plan.steps[h]],
                                    "peers": {p: 2 for p in plan.peers(h)}, "iterations": 2, "compute_gap_s": 0,
                                    "message_bytes": 8192, "verb": verb}) for h in hosts}
    for h in hosts:
        hosts[h].handle({"op": "job_connect", "job": "j", "peers": {
            p: {"ip": ips[p], "qps": prepared[p]["qps"][h], "region": prepared[p]["region"]} for p in prepared[h]["qps"]}})
        hosts[h].handle({"op": "job_start", "job": "j", "start_at": 0.0})
    for _ in range(1000):
        clock["now"] += 1e-3
        for host in hosts.values():
            host.advance(clock["now"])
        if all(host.status()["state"] == "done" for host in hosts.values()):
            break
    for h, host in hosts.items():
        status = host.handle({"op": "job_result", "job": "j"})
        assert status["state"] == "done" and status["bytes_received"] == 200_000
        assert status["bytes_sent"] == (0 if verb == "read" else 200_000)  # a read's source does nothing
    some_qp = next(iter(fabric.qps.values()))
    assert some_qp.attr.rq_psn == some_qp.peer.attr.sq_psn  # PSNs exchanged out of band
    assert some_qp.attr.ah_attr.gr.traffic_class == 26 << 2
    assert some_qp.attr.max_rd_atomic == some_qp.attr.max_dest_rd_atomic == 16  # READs outstanding, as ConnectX
    for host in hosts.values():
        host.handle({"op": "job_end", "job": "j"})
