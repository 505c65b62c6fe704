"""The netns engine for real: namespaces, veths, addresses, ECMP routes, and clean teardown."""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pyroute2 import IPRoute

from rocelab.engines import state as lab_state
from rocelab.kernel import awake
from rocelab.kernel.netns import NETNS_DIR, entering, pids_in, run_in, zombie
from rocelab.switch.fastpath import switchd_pipeline

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "rocelab"]


def lab_namespaces(lab: str) -> list[str]:
    return sorted(p.name for p in NETNS_DIR.glob(f"{lab}.*")) if NETNS_DIR.is_dir() else []


def root_links() -> set[str]:
    with IPRoute() as ipr:
        return {link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}


def ping(ns: str, address: str) -> bool:
    return run_in(ns, ["ping", "-c1", "-W2", "-q", address], capture_output=True).returncode == 0


@pytest.mark.parametrize("dataplane", ["kernel", "switchd"])
@pytest.mark.parametrize("topology", ["leaf-spine-2x2", "leaf-spine-4x4"])
def test_every_host_reaches_every_other_host(bring_up, topology, dataplane):
    spec, record = bring_up(topology, dataplane=dataplane)
    hosts = spec.fabric.hosts
    unreachable = [(a.name, b.name) for a, b in itertools.permutations(hosts, 2)
                   if not ping(record.node(a.name).netns, str(spec.fabric.host_address(b.name)))]
    assert unreachable == []


@pytest.mark.parametrize("dataplane", ["kernel", "switchd"])
def test_cross_leaf_path_is_host_leaf_spine_leaf_host(bring_up, dataplane):
    spec, record = bring_up("leaf-spine-2x2", dataplane=dataplane)
    fabric = spec.fabric
    owner = {str(p.address.ip): n.name for n in fabric.nodes for p in n.ports}
    # The first address that answered at each hop. On a busy machine a probe may go
    # unanswered, rarely all three of one hop: then trace again (three traces at most).
    for _ in range(3):
        out = run_in(record.node("h1").netns, ["traceroute", "-n", "-q3", "-w2", str(fabric.host_address("h4"))],
                     capture_output=True, text=True).stdout
        hops = [next((word for word in line.split()[1:] if word[0].isdigit() and word.count(".") == 3), None)
                for line in out.splitlines()[1:]]
        if None not in hops:
            break
    assert None not in hops, f"a hop never answered in three traces:\n{out}"
    roles = [fabric.node(owner[h]).role for h in hops]
    assert [owner[hops[0]], roles[1], owner[hops[2]], owner[hops[3]]] == ["leaf1", "spine", "leaf2", "h4"], out


@pytest.mark.parametrize("topology,spines", [("leaf-spine-2x2", 2), ("leaf-spine-4x4", 4)])
def test_leaf_kernel_has_one_equal_cost_next_hop_per_spine(bring_up, topology, spines):
    spec, record = bring_up(topology)
    fabric = spec.fabric
    remote = fabric.host_address(fabric.hosts[-1].name)
    with IPRoute(netns=record.node("leaf1").netns) as ipr:
        (route,) = [r for r in ipr.get_routes(family=2) if r.get_attr("RTA_DST") == str(ipaddress.IPv4Network(f"{remote}/24", strict=False).network_address)]
        hops = route.get_attr("RTA_MULTIPATH")
    gateways = {h.get_attr("RTA_GATEWAY") for h in hops}
    spine_addresses = {str(p.address.ip) for n in fabric.nodes if n.role == "spine" for p in n.ports}
    assert len(hops) == spines and gateways <= spine_addresses


def test_under_switchd_only_switchd_forwards(bring_up):
    # The initial namespace of a container host forwards IPv4, and new namespaces inherit
    # that: a switch kernel forwarding beside switchd would deliver every packet twice.
    spec, record = bring_up("leaf-spine-2x2")
    out = run_in(record.node("h1").netns, ["ping", "-c3", "-i0.2", "-W2", str(spec.fabric.host_address("h4"))],
                 capture_output=True, text=True).stdout
    assert "3 received" in out and "duplicates" not in out, out
    for switch in spec.fabric.switches:
        forwarding = run_in(record.node(switch.name).netns, ["cat", "/proc/sys/net/ipv4/ip_forward"],
                            capture_output=True, text=True).stdout.strip()
        assert forwarding == "0", f"{switch.name}: kernel IPv4 forwarding is {forwarding}"


def test_down_leaves_no_namespace_veth_or_process(bring_up):
    from rocelab.engines import builtin_engines

    before = root_links()
    spec, record = bring_up("leaf-spine-2x2")
    sleeper = subprocess.Popen(["sleep", "300"], preexec_fn=entering(record.node("h2").netns))
    assert len(lab_namespaces(spec.name)) == 8
    assert record.awake and all(Path(f"/proc/{pid}").exists() for pid in record.awake)
    builtin_engines().get("netns").down(record)
    assert sleeper.wait(timeout=5) is not None
    assert not [pid for pid in record.awake if not zombie(pid)]  # zombie(): a process gone counts too
    assert lab_namespaces(spec.name) == []
    assert root_links() == before
    assert lab_state.load(spec.name) is None


def autogroup_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])  # "/autogroup-578 nice 19"


def halts() -> int:
    """How often the CPUs entered a cpuidle state deeper than polling (0 where there is no cpuidle)."""
    return sum(int(state.joinpath("usage").read_text())
               for state in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpuidle/state[1-9]*"))


def lab_status(name: str) -> tuple[dict, str]:
    status = json.loads(subprocess.run([*CLI, "status", "--json"], capture_output=True, text=True).stdout)
    shown = subprocess.run([*CLI, "status"], capture_output=True, text=True).stdout
    return next(lab for lab in status["labs"] if lab["name"] == name), " ".join(shown.split())


def _costs_kept_for_other_keep_awake_settings(monkeypatch, tmp_path: Path) -> None:
    """A cache of this test's own, holding this setting's agent costs under the spinners' key
    and the no-keep-awake key too: what this test checks is which processes keep the CPUs
    awake, and `up` under each setting would otherwise spend ~7 s calibrating for it."""
    from rocelab.runtime import calibration

    here = calibration.costs("keep-awake")
    monkeypatch.setenv("ROCELAB_CACHE_DIR", str(tmp_path))
    for setting in ("spin", "0"):
        monkeypatch.setenv(awake.KEEP_AWAKE_ENV, setting)
        calibration.keep(calibration.cache_key(), here)


def test_the_cpus_are_kept_awake_by_a_pm_qos_request_or_idle_priority_spinners_unless_told_not_to(bring_up,
                                                                                                    monkeypatch,
                                                                                                    tmp_path):
    from rocelab.engines import builtin_engines

    if awake.how() == awake.PM_QOS_MODE:
        spec, record = bring_up("incast-1x5")
        [holder] = record.awake
        assert awake.PM_QOS in [os.readlink(fd) for fd in Path(f"/proc/{holder}/fd").iterdir()]
        before = halts()
        time.sleep(1)  # this test sleeps, the lab is idle: the CPUs poll and never halt
        assert halts() == before
        assert set(record.awake) <= set(pids_in(record.namespaces))  # `down` stops it with the agents
        shown, text = lab_status(spec.name)
        assert shown["awake"] == {"how": "pm-qos", "processes": 1} and f"PM QoS request of 0 µs on {awake.PM_QOS}" in text
        builtin_engines().get("netns").down(record)
        time.sleep(0.2)  # the request goes with its holder: halting resumes
        assert halts() > before or not before
    _costs_kept_for_other_keep_awake_settings(monkeypatch, tmp_path)
    monkeypatch.setenv(awake.KEEP_AWAKE_ENV, "spin")
    spec, record = bring_up("leaf-spine-2x2")
    cpus = sorted(os.sched_getaffinity(0))
    assert len(record.awake) == len(cpus)
    assert sorted(next(iter(os.sched_getaffinity(pid))) for pid in record.awake) == cpus
    assert all(os.sched_getscheduler(pid) == os.SCHED_IDLE for pid in record.awake)
    if Path(awake.AUTOGROUP).exists():  # and their sessions' groups yield to every other session's
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(autogroup_nice(pid) == awake.AUTOGROUP_NICE
                                                      for pid in record.awake):
            time.sleep(0.05)
        assert [autogroup_nice(pid) for pid in record.awake] == [awake.AUTOGROUP_NICE] * len(cpus)
    assert set(record.awake) <= set(pids_in(record.namespaces))
    shown, text = lab_status(spec.name)
    assert shown["awake"] == {"how": "spinners", "processes": len(cpus)} and f"CPUs kept awake: {len(cpus)}" in text
    monkeypatch.setenv(awake.KEEP_AWAKE_ENV, "0")
    _, bare = bring_up("leaf-spine-4x2")
    assert bare.awake == []


def _topology_copy(tmp_path: Path, source: str, name: str) -> Path:
    doc = yaml.safe_load((ROOT / "topologies" / f"{source}.yml").read_text())
    doc["name"] = name
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_up_of_a_name_up_under_another_state_folder_exits_2_and_leaves_that_lab_alone(tmp_path):
    """A lab's namespaces are named after it, its record kept in the state folder: an up of the same
    name from another folder (another ROCELAB_STATE_DIR, as the test suite uses) must refuse, not
    make half a lab and tear the other one's namespaces down with it."""
    topology = _topology_copy(tmp_path, "incast-1x5", f"t{os.getpid() % 10000}-twice")
    other = {**os.environ, "ROCELAB_STATE_DIR": str(tmp_path / "other-state")}
    try:
        assert subprocess.run([*CLI, "up", str(topology)], capture_output=True).returncode == 0
        made = lab_namespaces(topology.stem)
        again = subprocess.run([*CLI, "up", str(topology)], capture_output=True, text=True, env=other)
        assert again.returncode == 2 and "is already up" in again.stderr and f"{topology.stem}.h1" in again.stderr
        assert "Traceback" not in again.stderr and not (tmp_path / "other-state" / f"{topology.stem}.json").exists()
        assert lab_namespaces(topology.stem) == made and ping(f"{topology.stem}.h1", "198.19.5.2")
    finally:
        subprocess.run([*CLI, "down", topology.stem], capture_output=True)
    assert lab_namespaces(topology.stem) == []


def test_down_cleans_up_after_up_is_killed_halfway(tmp_path):
    name = f"t{os.getpid() % 10000}-killed"
    topo = _topology_copy(tmp_path, "leaf-spine-4x4", name)
    before = root_links()
    proc = subprocess.Popen([*CLI, "up", str(topo)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(lab_namespaces(name)) < 4:
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    record = lab_state.load(name)
    assert record is not None and record.status == "creating", "up finished before it could be killed halfway"
    assert 0 < len(lab_namespaces(name)) < 24
    down = subprocess.run([*CLI, "down", name], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    time.sleep(1.0)  # anything the killed `up` left running would have finished by now
    assert lab_namespaces(name) == []
    assert root_links() == before
    assert lab_state.load(name) is None


def test_up_of_a_lab_that_is_up_exits_2_and_two_labs_coexist(tmp_path):
    first = _topology_copy(tmp_path, "leaf-spine-2x2", f"t{os.getpid() % 10000}-one")
    second = _topology_copy(tmp_path, "incast-1x5", f"t{os.getpid() % 10000}-two")
    try:
        assert subprocess.run([*CLI, "up", str(first)], capture_output=True).returncode == 0
        again = subprocess.run([*CLI, "up", str(first)], capture_output=True, text=True)
        assert again.returncode == 2 and "is already up" in again.stderr
        assert subprocess.run([*CLI, "up", str(second)], capture_output=True).returncode == 0
        status = json.loads(subprocess.run([*CLI, "status", "--json"], capture_output=True, text=True).stdout)
        names = {lab["name"] for lab in status["labs"]}
        assert {first.stem, second.stem} <= names
        one = next(lab for lab in status["labs"] if lab["name"] == first.stem)
        assert one["engine"] == "netns"
        h1 = next(n for n in one["nodes"] if n["name"] == "h1")
        assert h1["role"] == "host" and h1["netns"] == f"{first.stem}.h1"
        assert h1["interfaces"] == [{"name": "eth1", "address": "198.19.1.2/24", "peer": "leaf1:eth1",
                                     "mac": h1["interfaces"][0]["mac"]}]
        # each switch says which pipeline it runs and why; a host runs none
        leaf1 = next(n for n in one["nodes"] if n["name"] == "leaf1")
        assert leaf1["pipeline"]["pipeline"] == switchd_pipeline() and leaf1["pipeline"]["why"]
        assert h1["pipeline"] is None
        # exec runs inside the node: the host sees its own fabric address.
        out = subprocess.run([*CLI, "exec", "h1", "--lab", second.stem, "--", "ip", "-br", "addr"],
                             capture_output=True, text=True).stdout
        assert "198.19.1.2/24" in out
        assert subprocess.run([*CLI, "down", first.stem], capture_output=True).returncode == 0
        assert lab_namespaces(first.stem) == [] and len(lab_namespaces(second.stem)) == 6
        assert ping(f"{second.stem}.h1", "198.19.5.2")
    finally:
        subprocess.run([*CLI, "down", first.stem], capture_output=True)
        subprocess.run([*CLI, "down", second.stem], capture_output=True)
