"""A switch's SONiC commands acting live on lab-pfc (one `up` for every test here), driven
through `rocelab exec NODE -- …` / `rocelab config NODE -- …` as a user types them, and once
through the interactive `rocelab shell` on a pseudo-terminal:

- `config apply-patch` moving DSCP 26 to the lossy TC 0 makes the 4:1 incast drop (`show queue
  counters`) with no PFC (`show pfc counters`); `config rollback` brings back zero drops;
- `ecnconfig` raising Kmin above any queue the incast builds stops the marking at once;
- `config interface shutdown`: `show interfaces status` says down, the host's NIC loses carrier,
  nothing crosses the port; `startup` brings it back;
- on a host, `mlnx_qos --trust pcp` puts h2's RoCE on priority 0, so leaf1's pauses on priority 3
  no longer hold it and leaf1 drops on its port; `--trust dscp` brings back zero drops; what
  `mlnx_qos` and `sysfs` print reads back through the readers of a real host's saved files;
- `ib_write_bw`, `ib_read_bw`, `ib_write_lat` and `ib_read_lat` with no address wait as perftest's
  server, and the client's run is printed on both;
- last, on a lab of its own: an EOS leaf (lab.yml `profiles:`) shows its QoS and PFC counters and
  takes a `configure session` live.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shlex
import shutil
import subprocess
import time

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.utils import rdpcap

from rocelab.engines import state
from rocelab.nodecli import challenge as challenges
from rocelab.probes import Probe, layers
from rocelab.probes.layers import RETH
from rocelab.qos.nic import read_mlnx_qos, read_nic_sysfs
from test_labs import CLI, ROOT, cli
from tests.unit.test_nodecli_eos import LEAF1 as LEAF1_EOS

pytestmark = pytest.mark.root
RECEIVER = "Ethernet16"  # leaf1:eth5 → h5, the incast's root on incast-1x5


@pytest.fixture(scope="module")
def lab_pfc():
    cli("down", check=False)
    cli("up", "lab-pfc")
    yield
    cli("down", check=False)


def on(node: str, command: str, check: bool = True):
    return cli("exec", node, "--", *command.split(), check=check)


def incast() -> None:
    cli("traffic", "incast-4to1", "--size", "3MB", "--iters", "1", "--report-dir", "none", timeout=300)


def queue_column(port: str, column: str) -> list[int]:
    """One column of `show queue counters PORT`, per queue UC0..UC7."""
    lines = on("leaf1", f"show queue counters {port}").stdout.splitlines()
    at = lines[0].split().index(column)
    return [int(line.split()[at].replace(",", "")) for line in lines[2:]]


def pfc_tx(priority: int) -> int:
    tx = on("leaf1", "show pfc counters").stdout.split("\n\n")[1].splitlines()[2:]
    return sum(int(line.split()[1 + priority].replace(",", "")) for line in tx)


def test_apply_patch_to_a_lossy_tc_drops_and_rollback_restores_lossless(lab_pfc, tmp_path):
    patch = tmp_path / "roce-to-tc0.json"
    patch.write_text(json.dumps([{"op": "replace", "path": "/DSCP_TO_TC_MAP/ROCE/26", "value": "0"}]))
    assert cli("config", "leaf1", "--", "checkpoint", "lossless").stdout == "Checkpoint created successfully.\n"
    applied = cli("config", "leaf1", "--", "apply-patch", str(patch)).stdout
    assert "restarted the ASIC pipeline" in applied and applied.endswith("Patch applied successfully.\n")
    on("leaf1", "sonic-clear queuecounters")
    on("leaf1", "sonic-clear pfccounters")
    incast()
    assert queue_column(RECEIVER, "Drop/pkts")[0] > 0 and pfc_tx(3) == 0
    assert "Config rolled back successfully." in cli("config", "leaf1", "--", "rollback", "lossless").stdout
    on("leaf1", "sonic-clear queuecounters")
    on("leaf1", "sonic-clear pfccounters")
    incast()
    assert sum(queue_column(RECEIVER, "Drop/pkts")) == 0 and pfc_tx(3) > 0
    # A patch that leaves an invalid config is refused whole, and nothing changed.
    before = on("leaf1", "show runningconfiguration all").stdout
    patch.write_text(json.dumps([{"op": "replace", "path": "/DSCP_TO_TC_MAP/ROCE/26", "value": "99"}]))
    refused = cli("config", "leaf1", "--", "apply-patch", str(patch), check=False)
    assert refused.returncode == 1 and "Failed to apply patch" in refused.stderr
    assert on("leaf1", "show runningconfiguration all").stdout == before


def ecn_marked(queue: int) -> int:
    lines = on("leaf1", f"show queue wredcounters {RECEIVER}").stdout.splitlines()
    return int(lines[2 + queue].split()[4].replace(",", ""))


def test_ecnconfig_changes_the_marking_live(lab_pfc):
    on("leaf1", "sonic-clear queuecounters")
    incast()
    assert ecn_marked(3) > 0
    on("leaf1", "ecnconfig -p AZURE_LOSSLESS -gmax 40000000 -gmin 30000000")
    assert "green_min_threshold     30000000" in on("leaf1", "ecnconfig -l").stdout
    on("leaf1", "sonic-clear queuecounters")
    incast()
    assert ecn_marked(3) == 0
    on("leaf1", "config qos reload")
    assert "green_min_threshold     102400" in on("leaf1", "ecnconfig -l").stdout


def rx_ok(port: str) -> int:
    lines = on("leaf1", "show interfaces counters").stdout.splitlines()
    return next(int(line.split()[2].replace(",", "")) for line in lines[2:] if line.split()[0] == port)


def test_shutdown_and_startup_of_a_port(lab_pfc):
    status = json.loads(cli("status", "--json").stdout)["labs"][0]
    h1 = next(n for n in status["nodes"] if n["name"] == "h1")["interfaces"][0]["address"].split("/")[0]
    assert cli("config", "leaf1", "--", "interface", "shutdown", "Ethernet4").stdout == "Ethernet4: link admin down\n"
    try:
        line = next(l for l in on("leaf1", "show interfaces status").stdout.splitlines() if l.split()[0] == "Ethernet4")
        assert line.split()[7:9] == ["down", "down"]
        assert "NO-CARRIER" in on("h2", "ip link show eth1").stdout
        # The kernel took the shut port's subnet away, and zebra with it (lab-pfc runs FRR: its table)
        assert "198.19.2.0/24" not in on("leaf1", "show ip route").stdout
        before = rx_ok("Ethernet4")
        assert on("h2", f"ping -c 2 -W 1 {h1}", check=False).returncode != 0
        assert rx_ok("Ethernet4") == before
    finally:  # the later tests send through this port
        cli("config", "leaf1", "--", "interface", "startup", "Ethernet4")
    line = next(l for l in on("leaf1", "show interfaces status").stdout.splitlines() if l.split()[0] == "Ethernet4")
    assert line.split()[7:9] == ["up", "up"]
    assert "C>* 198.19.2.0/24 is directly connected, Ethernet4" in on("leaf1", "show ip route").stdout
    time.sleep(0.5)
    assert on("h2", f"ping -c 2 -W 2 {h1}", check=False).returncode == 0
    assert rx_ok("Ethernet4") > before


def rx_drp(port: str) -> int:
    lines = on("leaf1", "show interfaces counters").stdout.splitlines()
    return next(int(line.split()[6].replace(",", "")) for line in lines[2:] if line.split()[0] == port)


def test_a_host_nic_trusting_pcp_is_not_paused_and_mlnx_qos_fixes_it_live(lab_pfc):
    on("h2", "mlnx_qos -i eth1 --trust pcp")
    on("leaf1", "sonic-clear counters")
    incast()
    assert rx_drp("Ethernet4") > 0 and rx_drp("Ethernet0") == 0  # h2's port only
    shown = on("h2", "mlnx_qos -i eth1 --trust dscp").stdout
    nic = read_mlnx_qos(shown, "h2.mlnx_qos.txt")
    assert (nic.trust, nic.pfc_priorities, nic.dscp_to_priority[26]) == ("dscp", {3}, 3)
    assert read_nic_sysfs(on("h2", "sysfs").stdout, "h2.sysfs.txt").dcqcn_np["cnp_dscp"] == 48
    on("leaf1", "sonic-clear counters")
    incast()
    assert rx_drp("Ethernet4") == 0
    # The senders' NICs honoured the pauses, as `ethtool -S` counts them on a ConnectX.
    stats = dict(line.strip().split(": ") for line in on("h1", "ethtool -S eth1").stdout.splitlines()[1:])
    assert int(stats["rx_prio3_pause"]) > 0 and int(stats["rx_prio3_pause_duration"]) > 0, stats
    assert int(stats["tx_bytes_phy"]) > 3_000_000


def perftest(test: str, *options: str) -> str:
    """A perftest-shaped test: its server on h5, then its client on h1 once the server waits;
    what the server printed."""
    server = subprocess.Popen([*CLI, "exec", "h5", "--", test, *options], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while on("h1", f"{test} {' '.join(options)} 198.19.5.2", check=False).returncode != 0:
            assert time.monotonic() < deadline and server.poll() is None, "the server never waited"
            time.sleep(1)
        out, _ = server.communicate(timeout=60)
    finally:
        server.kill()
    assert "Waiting for client to connect" in out
    return out


def result_row(out: str) -> list[str]:
    lines = out.splitlines()
    return lines[next(i for i, line in enumerate(lines) if "#bytes" in line) + 1].split()


def test_perftest_bw_and_lat_server_and_client_for_write_and_read(lab_pfc, tmp_path):
    for test, title, options in (("ib_write_bw", "RDMA_Write BW Test", ()),
                                 ("ib_read_bw", "RDMA_Read BW Test", ("-o", "4"))):
        pcap = tmp_path / f"{test}.pcap"
        probe = Probe(state.load("lab-pfc").node("h1").netns, "eth1", pcap=pcap).start()
        try:
            out = perftest(test, "-D", "1", *options)
        finally:
            probe.stop()
        row = result_row(out)
        assert title in out and row[0] == "65536" and float(row[3]) > 0
        # On the client's wire, as scapy reads it: WRITEs out, or READ requests out and their
        # responses back (AETH on all but MIDDLE), each response on a PSN its request took.
        roce = [f for f in rdpcap(str(pcap)) if f.haslayer(BTH)]
        opcodes = {f[BTH].opcode for f in roce}
        if test == "ib_write_bw":
            assert layers.RC_RDMA_WRITE_FIRST in opcodes and layers.RC_RDMA_READ_REQUEST not in opcodes
            continue
        requests = [f for f in roce if f[BTH].opcode == layers.RC_RDMA_READ_REQUEST]
        responses = [f for f in roce
                     if layers.RC_RDMA_READ_RESPONSE_FIRST <= f[BTH].opcode <= layers.RC_RDMA_READ_RESPONSE_ONLY]
        assert requests and responses and layers.RC_RDMA_WRITE_FIRST not in opcodes
        assert all(r[RETH].dma_length == 65536 for r in requests)
        assert all(f.haslayer(AETH) == (f[BTH].opcode != layers.RC_RDMA_READ_RESPONSE_MIDDLE) for f in responses)
        taken = {(r[BTH].psn + k) & 0xFFFFFF for r in requests for k in range(16)}  # 64 KiB: 16 responses of 4 KiB
        assert all(f[BTH].psn in taken for f in responses)
    for test, title in (("ib_write_lat", "RDMA_Write Latency Test"), ("ib_read_lat", "RDMA_Read Latency Test")):
        out = perftest(test, "-n", "50")
        row = result_row(out)
        assert title in out and row[:2] == ["2", "50"] and 0 < float(row[2]) <= float(row[3])


def test_typing_into_the_interactive_shell(lab_pfc):
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(ROOT)
        os.execv(CLI[0], [*CLI, "shell", "leaf1"])
    seen = b""

    def until(text: bytes, timeout_s: float = 60) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout_s
        while text not in seen and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:
                    break
        assert text in seen, seen.decode(errors="replace")[-2000:]

    try:
        until(b"leaf1:")  # the prompt
        os.write(fd, b"show pfc priority\n")
        until(b"Lossless priorities")
        until(b"Ethernet16")
        os.write(fd, b"config interface pfc priority Ethernet0 4 on\n")
        until(b"restarted the ASIC pipeline")
        os.write(fd, b"show nosuch; echo status=$?\n")
        until(b"status=2")
        os.write(fd, b"exit\n")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)
    assert "3,4" in next(l for l in on("leaf1", "show pfc priority").stdout.splitlines() if l.startswith("Ethernet0 "))


# After every test on the module's lab-pfc: each challenge brings up a lab of its own.
@pytest.mark.parametrize("name", challenges.names())
def test_a_challenge_fails_its_check_until_the_documented_fix(lab_pfc, name):
    """Every challenge, live: `start` seeds its fault into the running lab, `check` fails (the
    static checks over the running configs, and the symptom's scenario where it has one) without
    naming the fault (no config_db table its patch touches), the fix `give-up` prints, typed as
    printed, makes `check` pass."""
    chosen = challenges.load(name)
    touched = {op["path"].split("/")[1] for ops in chosen.fault.values() for op in ops} - {"trust"}  # a NIC's field
    cli("down")
    started = cli("challenge", "start", name).stdout
    assert chosen.title in started
    before = cli("challenge", "check", check=False, timeout=600)
    assert before.returncode == 1 and "not solved yet" in before.stdout, before.stdout
    assert not [t for t in touched if re.search(rf"\b{t}\b", started + before.stdout)], touched
    answer = cli("challenge", "give-up").stdout
    fixes = [shlex.split(line.strip())[1:] for line in answer.splitlines() if line.strip().startswith("invoke exec")]
    assert len(fixes) == len(chosen.fix)
    for fix in fixes:
        cli(*fix)
    after = cli("challenge", "check", check=False, timeout=600)
    if after.returncode and "inconclusive" in after.stdout:
        pytest.skip(f"{name}: the symptom's run fell behind at the TDF up picked: {after.stdout}")
    assert after.returncode == 0 and f"challenge {name}: solved" in after.stdout, after.stdout


# Last: it takes the module's lab down to bring up its own.
def test_an_eos_leaf_shows_its_qos_and_takes_a_configure_session(tmp_path):
    # lab-pfc's fabric with leaf1 running an EOS running-config (lab.yml `profiles:`)
    for folder in ("topologies", "profiles", "traffic"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    lab = tmp_path / "labs" / "eos-leaf"
    lab.mkdir(parents=True)
    (lab / "leaf1.cfg").write_text(LEAF1_EOS)
    (lab / "lab.yml").write_text("topology: incast-1x5\nnic: emulated\nroce: {cc_algorithm: none}\nprofiles:\n  leaf1:\n"
                                 "    eos: leaf1.cfg\n    buffer: {pool_size_bytes: 12MiB, dynamic_th: -5, "
                                 "xoff_bytes: 56KiB, xon_bytes: 18KiB}\n")

    def eos(*args: str, typed: str | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run([*CLI, *args], capture_output=True, text=True, input=typed, timeout=300,
                                cwd=tmp_path, env={**os.environ, "ROCELAB_HOME": str(tmp_path)})
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    cli("down", check=False)
    eos("up", "eos-leaf")
    try:
        shown = eos("exec", "leaf1", "--", "show", "qos", "interfaces", "Ethernet5").stdout
        assert shown.startswith("Ethernet5:\n   Trust Mode: DSCP")
        eos("traffic", "incast-4to1", "--size", "2MB", "--iters", "1", "--report-dir", "none")
        pfc = eos("exec", "leaf1", "--", "show", "priority-flow-control", "counters").stdout.splitlines()[2:]
        assert all(int(line.split()[2].replace(",", "")) > 0 for line in pfc[:4])  # leaf1 paused every sender
        committed = eos("exec", "leaf1", "--", "configure", "session", "nopfc",
                        typed="interface Ethernet1\nno priority-flow-control priority 3 no-drop\ncommit\n").stdout
        assert "restarted the ASIC pipeline" in committed
        state = eos("exec", "leaf1", "--", "show", "priority-flow-control").stdout.splitlines()
        assert state[2].split()[:2] == ["Et1", "No"] and state[3].split()[:3] == ["Et2", "Yes", "3"]
    finally:
        eos("down")
