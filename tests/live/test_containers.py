"""rocelab's images and the container engines, live: the images hold this checkout's rocelab;
two switch containers and two host containers in a line, routed by the image's FRR running in
each switch container, carry RDMA writes, with PFC frames on the wire where the line narrows; `down` leaves no container, namespace or veth, also after a
failed `up`; and `invoke images` without debootstrap says what is missing.

Needs Docker Engine (`.ci/run` installs Debian's docker.io and starts it); skips, saying so,
only where its daemon does not answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from pyroute2 import IPRoute
from scapy.utils import rdpcap

import rocelab.probes.layers  # noqa: F401  binds RETH after BTH for the pcap check
from conftest import unique_lab_name
from rocelab.runtime import calibration
from rocelab.kernel import control
from rocelab.engines import dockercli
from rocelab.engines import images
from rocelab import paths
from rocelab.engines import state as lab_state
from rocelab.engines.clabfile import HOST_IMAGE, SWITCH_IMAGE, container_name
from rocelab.engines import builtin_engines
from rocelab.kernel.netns import NETNS_DIR
from rocelab.errors import InputError
from rocelab.model.lab import load_lab
from rocelab.probes import Probe
from rocelab.traffic.job import run_job
from rocelab.traffic.spec import JobSpec

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]
LINE = ROOT / "tests" / "data" / "containers-line.yml"
PROFILE = ROOT / "profiles" / "roce-lossless.json"
CLI = [sys.executable, "-m", "rocelab"]
MAC_CONTROL = 0x8808
PFC_OPCODE = b"\x01\x01"
ROCE_PRIORITY = 3  # roce-lossless: DSCP 26 → TC 3, the lossless priority


@pytest.fixture(scope="module")
def docker_engine():
    try:
        dockercli.require_docker("the container tests")
    except InputError as exc:
        pytest.skip(f"Docker Engine is not reachable here: {exc}")
    images.ensure_images()
    return builtin_engines().get("docker")


def host_veths() -> set[str]:
    with IPRoute() as ipr:
        return {link.get("ifname") for link in ipr.get_links() if link.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) == "veth"}


def traces(name: str) -> dict[str, list[str]]:
    """Whatever of a lab exists on this machine."""
    containers = dockercli.docker("ps", "--all", "--filter", f"label=containerlab={name}", "--format", "{{.Names}}")
    return {"containers": containers.split(),
            "namespaces": sorted(ns.name for ns in NETNS_DIR.glob(f"{name}.*")),
            "state": [str(p) for p in (lab_state.state_file(name), paths.STATE_DIR / name) if p.exists()]}


NOTHING = {"containers": [], "namespaces": [], "state": []}


@pytest.fixture(scope="module")
def line(docker_engine):
    # PFC alone (no DCQCN to slow the sender first); the leaves route with FRR from the image
    spec = replace(load_lab(str(LINE)), name=unique_lab_name("line"), nic="emulated", profile=PROFILE,
                   roce={"cc_algorithm": "none"}, routing="bgp")
    record = calibration.up(docker_engine, spec)
    yield spec, record
    docker_engine.down(record)
    assert traces(spec.name) == NOTHING


def test_images_hold_this_checkouts_rocelab(docker_engine):
    digest = images.source_digest(images.checkout())
    for tag in (SWITCH_IMAGE, HOST_IMAGE):
        found = dockercli.image(tag)
        assert found["Config"]["Labels"][images.SOURCE_LABEL] == digest
    ran = dockercli.docker("run", "--rm", "--network", "none", "--pull", "never", SWITCH_IMAGE,
                           "python", "-c", "import rocelab.switch.agent, rocelab.roce.agent; print(rocelab.__file__)")
    assert ran.strip() == f"{images.VENV}/lib/python3.11/site-packages/rocelab/__init__.py"


def test_agents_run_inside_the_nodes_containers(line):
    spec, record = line
    assert sorted(p["what"] for p in record.processes) == ["nicd", "nicd", "switchd", "switchd"]
    for process in record.processes:
        pids = dockercli.docker("top", container_name(spec.name, process["node"]), "-eo", "pid").split()[1:]
        assert str(process["pid"]) in pids, process


def test_frr_runs_inside_the_switch_containers_and_routes_the_line(line):
    spec, record = line
    for node in ("leaf1", "leaf2"):
        container = dockercli.container_pid(container_name(spec.name, node))
        daemons = [d for d in record.routing["daemons"] if d["node"] == node]
        assert sorted(d["what"] for d in daemons) == ["bfdd", "bgpd", "zebra"]
        for daemon in daemons:  # the image's FRR, in the container's filesystem, as the image's frr user
            assert os.readlink(f"/proc/{daemon['pid']}/ns/mnt") == os.readlink(f"/proc/{container}/ns/mnt")
            assert os.readlink(f"/proc/{daemon['pid']}/exe") == f"/usr/lib/frr/{daemon['what']}"
        frr_uid = dockercli.docker("exec", container_name(spec.name, node), "id", "-u", "frr").strip()
        assert all(Path(f"/proc/{d['pid']}/status").read_text().split("Uid:")[1].split()[0] == frr_uid
                   for d in daemons)
    # vtysh typed in leaf1 (its container's own) finds its daemons; the session to leaf2 is up
    summary = subprocess.run([*CLI, "exec", "leaf1", "--lab", spec.name, "--", "vtysh", "-c", "show ip bgp summary"],
                             capture_output=True, text=True, check=True).stdout
    row = next(line.split() for line in summary.splitlines() if line.startswith("198.18."))
    assert row[9].isdigit(), summary  # State/PfxRcd: a prefix count once Established
    h2_subnet = str(spec.fabric.node("h2").ports[0].address.network)
    routes = subprocess.run(["ip", "-n", record.node("leaf1").netns, "route", "show", h2_subnet, "proto", "bgp"],
                            capture_output=True, text=True, check=True).stdout
    assert routes.startswith(h2_subnet), routes


def test_rdma_writes_cross_two_switch_containers_with_pfc_frames_on_the_wire(line, tmp_path):
    spec, record = line
    for process in record.processes:
        control.request(control.socket_path(spec.name, process["node"]), "clear")
    pcap = tmp_path / "leaf1-eth1.pcap"
    probe = Probe(record.node("leaf1").netns, "eth1", pcap=pcap).start()
    size = 4_000_000
    report, _ = run_job(record, JobSpec("elephant", hosts=("h1", "h2"), size_bytes=size, iterations=1, qps=2,
                                        verb="write"))
    time.sleep(0.3)  # the last XON, still on the dilated cable
    leaf1 = control.request(control.socket_path(spec.name, "leaf1"), "counters")["counters"]["ports"]
    seen = probe.stop().to_json()
    assert report["ranks"]["h2"]["bytes_received"] == size
    assert report["total"]["counters"]["retransmitted_bytes"] == 0  # lossless: PFC, not drops
    pfc_sent = leaf1["eth1"]["pfc_tx_frames"][ROCE_PRIORITY]
    assert pfc_sent > 0
    frames = rdpcap(str(pcap))
    pfc = [f for f in frames if f.type == MAC_CONTROL and bytes(f.payload)[:2] == PFC_OPCODE]
    writes = [f for f in frames if f.haslayer("RETH")]
    assert len(pfc) == pfc_sent == sum(r["xoff_frames"] + r["xon_frames"] for r in seen["pfc"])
    assert writes and all(f["BTH"].opcode in (rocelab.probes.layers.RC_RDMA_WRITE_FIRST, rocelab.probes.layers.RC_RDMA_WRITE_ONLY)
                          for f in writes)


def test_status_show_and_exec_work_on_the_docker_engine(line):
    spec, record = line
    status = json.loads(subprocess.run([*CLI, "status", "--json"], capture_output=True, text=True, check=True).stdout)
    mine = next(lab for lab in status["labs"] if lab["name"] == spec.name)
    assert mine["engine"] == "docker" and mine["status"] == "up"
    assert all(node["running"] for node in mine["nodes"])
    shown = subprocess.run([*CLI, "show", "counters", "leaf2", "--lab", spec.name, "--json"],
                           capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout)["nodes"]["leaf2"]["agent"] == "switchd"
    h2 = str(spec.fabric.host_address("h2"))
    ping = subprocess.run([*CLI, "exec", "h1", "--lab", spec.name, "--", "ping", "-c2", "-i0.2", "-W2", h2],
                          capture_output=True, text=True)
    assert ping.returncode == 0 and "2 received" in ping.stdout, ping.stdout + ping.stderr


def test_down_leaves_no_container_namespace_or_veth(docker_engine):
    veths = host_veths()
    spec = replace(load_lab(str(LINE)), name=unique_lab_name("down"), dataplane="kernel")
    record = calibration.up(docker_engine, spec)
    made = traces(spec.name)
    assert len(made["containers"]) == len(made["namespaces"]) == 4
    docker_engine.down(record)
    assert traces(spec.name) == NOTHING
    assert host_veths() == veths


def test_a_failed_up_leaves_nothing_behind(docker_engine, tmp_path):
    topology = tmp_path / "line-missing-image.yml"
    text = LINE.read_text().replace("h2: {role: host}", "h2: {role: host, image: 'rocelab/absent:0'}")
    topology.write_text(text)
    spec = replace(load_lab(str(topology)), name=unique_lab_name("failed"), dataplane="kernel")
    with pytest.raises(dockercli.DockerFailed, match="rocelab/absent:0"):
        calibration.up(docker_engine, spec)
    assert traces(spec.name) == NOTHING


def test_images_without_debootstrap_exit_2_naming_it_and_keep_the_images(docker_engine, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("docker", "dpkg"):  # Docker and dpkg, but no debootstrap
        (tools / tool).symlink_to(shutil.which(tool))
    before = dockercli.image(SWITCH_IMAGE)["Id"]
    result = subprocess.run([*CLI, "images", "--force"], capture_output=True, text=True,
                            env={"PATH": str(tools), "ROCELAB_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 2, result.stderr
    assert "needs debootstrap" in result.stderr and "apt-get install debootstrap" in result.stderr
    assert dockercli.image(SWITCH_IMAGE)["Id"] == before
