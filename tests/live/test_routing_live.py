"""FRR's BGP on leaf-spine-2x2 (one `up --routing bgp` for every test here), driven as a user
types it: every fabric session Established in `vtysh`, every remote host subnet in the kernel FIB
via bgp with one next hop per spine, `config interface shutdown` withdrawing the link's routes
on the far side and `startup` bringing them back on both sides, a partly lossy link losing a share
of FRR's packets too, and `down` leaving no FRR process or file."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import time
from dataclasses import replace

import pytest

from test_labs import CLI, ROOT, cli

from rocelab import paths
from rocelab.engines import builtin_engines, frr
from rocelab.engines import state as lab_state
from rocelab.errors import InputError
from rocelab.kernel import control, frrloss
from rocelab.model.lab import load_lab
from rocelab.model.scenario import Impairment
from rocelab.reporting.status import routing_lines, status_json
from rocelab.runtime.scenario import impair, revive_links

pytestmark = pytest.mark.root
LAB = "leaf-spine-2x2"
WITHDRAW_TIMEOUT_S = 15.0  # BGP's own reaction to a carrier loss is immediate; this bounds a slow machine


@pytest.fixture(scope="module")
def bgp_lab():
    cli("down", check=False)
    cli("up", LAB, "--routing", "bgp", "--tdf", "1000")
    yield
    cli("down", check=False)


def on(node: str, *argv: str) -> str:
    return cli("exec", node, "--", *argv).stdout


def bgp_routes(node: str) -> dict[str, int]:
    """prefix → number of next hops, of the routes bgp installed in the node's kernel FIB (read
    with `ip -n`: in milliseconds, where `rocelab exec` takes a Python start-up)."""
    out, prefix = {}, None
    shown = subprocess.run(["ip", "-n", f"{LAB}.{node}", "route", "show", "proto", "bgp"], capture_output=True,
                           text=True, check=True).stdout
    for line in shown.splitlines():
        if not line.startswith((" ", "\t")):
            prefix = line.split()[0]
            out[prefix] = 0 if " via " not in line else 1
        elif "nexthop via" in line:
            out[prefix] += 1
    return out


def programmed(node: str, prefix: str) -> int:
    """Next hops of a prefix in the table the node's switchd forwards on (after programming)."""
    return len(control.request(control.socket_path(LAB, node), "fib")["routes"].get(prefix, []))


def until(check, timeout_s: float = WITHDRAW_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while not (result := check()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return result


def test_sessions_are_established_and_remote_hosts_are_reached_over_every_spine(bgp_lab):
    summary = on("leaf1", "vtysh", "-c", "show ip bgp summary")
    rows = [line.split() for line in summary.splitlines() if line.startswith("198.18.")]
    assert len(rows) == 2 and all(row[9].isdigit() for row in rows), summary  # State/PfxRcd: a count once up
    assert on("leaf1", "ip", "route", "show", "proto", "bgp").count("nexthop via") == 6  # as a user sees it
    routes = bgp_routes("leaf1")
    remote = [p for p in routes if ipaddress.ip_network(p).prefixlen == 24]
    assert sorted(remote) == ["198.19.3.0/24", "198.19.4.0/24"]
    assert all(routes[p] == 2 for p in remote), routes
    assert "B>* 198.19.3.0/24" in on("leaf1", "vtysh", "-c", "show ip route")
    # SONiC's `show ip route` is FRR's, the ports by SONiC's names.
    shown = on("leaf1", "show", "ip", "route", "198.19.3.0/24")
    assert 'Known via "bgp"' in shown and ", via Ethernet8, weight 1" in shown and "eth3" not in shown
    assert "0% packet loss" in on("h1", "ping", "-c", "1", "-W", "2", "198.19.4.2")


def test_every_bgpd_runs_the_rendered_configuration_once_up(bgp_lab):
    """bgpd booted with `coalesce-time 0` (rocelab.routing.frr.FINISH_BOOT): once `up` returns,
    every switch's running bgpd has the rendered one's coalesce time, FRR's default, and keeps
    suppress-fib-pending as SONiC renders it."""
    for node in ("leaf1", "leaf2", "spine1", "spine2"):
        running = on(node, "vtysh", "-c", "show running-config")
        rendered = (paths.STATE_DIR / LAB / node / "frr" / "bgpd.conf").read_text()
        assert "coalesce-time" not in running and "coalesce-time" not in rendered, (node, running)
        assert " bgp suppress-fib-pending" in running and "  bgp suppress-fib-pending" in rendered, node


def test_shutdown_withdraws_the_links_routes_and_startup_restores_them(bgp_lab):
    # leaf2 programs a route in 1 ms of production time: 1 s of wall time at TDF 1000, so the
    # kernel's withdrawal reaches its forwarding table seconds later (3 routes change: leaf1's
    # two host subnets and its Loopback0).
    leaf2 = control.socket_path(LAB, "leaf2")
    control.request(leaf2, "fib_programming", routes_per_s=1000)
    cli("config", "leaf1", "--", "interface", "shutdown", "Ethernet8")  # leaf1:eth3, to spine1
    try:
        # spine1 loses its only path to leaf1's hosts; leaf2 reaches them over spine2 alone,
        assert until(lambda: "198.19.1.0/24" not in bgp_routes("spine1")), bgp_routes("spine1")
        assert until(lambda: bgp_routes("leaf2").get("198.19.1.0/24") == 1), bgp_routes("leaf2")
        # once its emulated ASIC has programmed the change, in emulated time.
        withdrawn = time.monotonic()
        assert programmed("leaf2", "198.19.1.0/24") == 2
        assert until(lambda: programmed("leaf2", "198.19.1.0/24") == 1)
        assert time.monotonic() - withdrawn > 1.0
        assert "0% packet loss" in on("h3", "ping", "-c", "1", "-W", "2", "198.19.1.2")
    finally:
        control.request(leaf2, "fib_programming", routes_per_s=None)
        cli("config", "leaf1", "--", "interface", "startup", "Ethernet8")
    assert until(lambda: bgp_routes("leaf2").get("198.19.1.0/24") == 2, 30.0), bgp_routes("leaf2")
    assert until(lambda: programmed("leaf2", "198.19.1.0/24") == 2)
    # leaf1, whose own port went down and up, spreads over both spines again (with the kernel's
    # nexthop objects, FRR 8.4 kept spine1 out of leaf1's group for good: routing/frr.py)
    assert until(lambda: bgp_routes("leaf1").get("198.19.3.0/24") == 2), bgp_routes("leaf1")
    assert until(lambda: programmed("leaf1", "198.19.3.0/24") == 2)


def test_a_partly_lossy_link_loses_a_share_of_frrs_packets_too_until_the_next_case(bgp_lab):
    """A case's `impair: {port: leaf1:eth3, loss: 50%}`: switchd drops half the data frames it sends
    there and the kernel half of FRR's BGP and BFD packets (rocelab.kernel.frrloss), which leave
    under the emulated ASIC; the next case's revival clears both and names the port."""
    record = lab_state.load(LAB)
    impair(record, Impairment("leaf1", "eth3", loss_pct=50))
    try:  # BFD sends every 300 ms, BGP a keepalive every 3 s
        assert until(lambda: frrloss.lost(f"{LAB}.leaf1").get("eth3", 0) >= 3, 10.0), frrloss.lost(f"{LAB}.leaf1")
        assert frrloss.lost(f"{LAB}.spine1") == {}  # one direction: leaf1's transmitter
    finally:
        revived = revive_links(record, load_lab(LAB).fabric)
    assert "leaf1:eth3" in revived and frrloss.lost(f"{LAB}.leaf1") == {}
    assert until(lambda: bgp_routes("leaf1").get("198.19.3.0/24") == 2, 30.0), bgp_routes("leaf1")


def test_down_leaves_no_frr_process_socket_or_file(bgp_lab):
    folder = paths.STATE_DIR / LAB
    assert list(folder.glob("*/frr/bgpd.vty"))
    cli("down", LAB)
    assert not folder.exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"{folder}/" not in ps


def run_in(home, *args: str) -> str:
    """`rocelab ARGS` with `home` as the project (its labs/, topologies/, profiles/)."""
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, cwd=home,
                          env={**os.environ, "ROCELAB_HOME": str(home)})
    assert done.returncode == 0, f"rocelab {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def down_in(home, name: str) -> None:
    subprocess.run([*CLI, "down", name], capture_output=True, timeout=120, cwd=home,
                   env={**os.environ, "ROCELAB_HOME": str(home)})


def lab_home(tmp_path, name: str, lab_yml: str):
    """A project folder with rocelab's topologies and profiles and one lab, `name`."""
    home = tmp_path / "home"
    for folder in ("topologies", "profiles"):
        shutil.copytree(ROOT / folder, home / folder)
    (home / "labs" / name).mkdir(parents=True)
    (home / "labs" / name / "lab.yml").write_text(lab_yml)
    return home


def test_the_far_end_of_a_shut_link_forwards_into_it_until_it_detects_the_loss_of_signal(tmp_path):
    # link_down_detect_ms 3 at TDF 1000: spine1 sees leaf1's shut uplink 3 s of wall time after
    # its carrier went; leaf1, which shut it, stops using it at once.
    # Static routes: FRR would withdraw spine1's routes over eth1 as soon as the kernel lost the
    # carrier, and this is the ASIC's own detection, alone.
    home = lab_home(tmp_path, "los", "topology: leaf-spine-2x2\nrouting: static\ntdf: 1000\nlink_down_detect_ms: 3\n")
    spine1, leaf1 = control.socket_path("los", "spine1"), control.socket_path("los", "leaf1")

    def via_eth1() -> set[str]:  # spine1's routes out of eth1, leaf1's rack
        return {p for p, hops in control.request(spine1, "fib")["routes"].items() if any(h[0] == "eth1" for h in hops)}

    try:
        run_in(home, "up", "los")
        toward_leaf1 = via_eth1()
        assert toward_leaf1
        run_in(home, "config", "leaf1", "--", "interface", "shutdown", "Ethernet8")  # leaf1:eth3, to spine1:eth1
        shut = time.monotonic()
        assert "eth3" in control.request(leaf1, "fib")["down"]
        assert until(lambda: control.request(spine1, "fib")["dark"] == ["eth1"], 2.0)
        assert control.request(spine1, "fib")["down"] == [] and via_eth1() == toward_leaf1
        assert control.request(spine1, "links")["links"]["eth1"]["oper"] == "up"  # as the ASIC sees it
        assert until(lambda: control.request(spine1, "fib")["down"] == ["eth1"])
        assert time.monotonic() - shut > 2.5  # 3 s after the carrier went, less the CLI's own exit
        assert via_eth1() == set() and control.request(spine1, "fib")["dark"] == []
        assert control.request(spine1, "links")["links"]["eth1"]["oper"] == "down"
        run_in(home, "config", "leaf1", "--", "interface", "startup", "Ethernet8")
        assert until(lambda: via_eth1() == toward_leaf1)  # back at once
    finally:
        down_in(home, "los")


def test_a_cumulus_leaf_peers_unnumbered_with_generated_spines(tmp_path):
    # lab.yml `profiles:` gives leaf1 examples/fabric-bgp-cumulus's NVUE file: its own AS 65101 and
    # unnumbered sessions on swp3/swp4 (`remote-as external`); the spines and leaf2 get the
    # generated design, whose sessions toward leaf1 take its AS and peer on the port too.
    home = lab_home(tmp_path, "cumleaf", "topology: leaf-spine-2x2\nnic: emulated\nrouting: bgp\nprofiles:\n"
                    "  leaf1:\n    cumulus: leaf1.yml\n"
                    "    buffer: {pool_size_bytes: 12MiB, dynamic_th: -5, xoff_bytes: 56KiB}\n")
    shutil.copy(ROOT / "examples" / "fabric-bgp-cumulus" / "leaf1" / "nv-config.yml",
                home / "labs" / "cumleaf" / "leaf1.yml")

    try:
        up = run_in(home, "up", "cumleaf", "--tdf", "1000")  # waits until every host is reached over every spine
        assert "routing: bgp (FRR) on leaf1: from labs/cumleaf/leaf1.yml" in " ".join(up.split())
        summary = run_in(home, "exec", "spine1", "--", "vtysh", "-c", "show ip bgp summary")
        row = next(line.split() for line in summary.splitlines() if line.startswith("eth1 "))
        assert row[2] == "65101" and row[9].isdigit(), summary  # leaf1's AS, Established (a prefix count)
        # IPv6 on the unnumbered ports alone: a link-local address on eth3 and eth4, none to the hosts
        shown = subprocess.run(["ip", "-n", "cumleaf.leaf1", "-j", "-6", "addr", "show"], capture_output=True,
                               text=True, check=True).stdout
        assert sorted(link["ifname"] for link in json.loads(shown) if link["addr_info"]) == ["eth3", "eth4"]
        routes = control.request(control.socket_path("cumleaf", "leaf2"), "fib")["routes"]
        assert len(routes["198.19.1.0/24"]) == 2, routes  # leaf1's rack over both spines
        assert "0% packet loss" in run_in(home, "exec", "h3", "--", "ping", "-c", "1", "-W", "2", "198.19.1.2")
    finally:
        down_in(home, "cumleaf")


def test_without_frr_a_lab_left_to_the_default_runs_static_routes_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(frr, "FRR_DAEMONS_DIR", tmp_path)  # as on a machine without Debian's frr
    engines = builtin_engines()
    engine = engines.get("netns")
    lab = replace(load_lab(LAB), name="nofrr", tdf=1000)
    assert lab.routing == "bgp" and lab.routing_how == "default"
    record = None
    try:
        record = engine.up(lab)
        assert record.routing["mode"] == "static"
        (line,) = routing_lines(status_json(record, engines)["routing"])
        assert line.startswith("routing: static (BGP, the default, needs FRR, and this machine lacks zebra, bgpd, bfdd")
        assert "apt-get install frr" in line
        assert "0% packet loss" in subprocess.run(["ip", "netns", "exec", "nofrr.h1", "ping", "-c", "1", "-W", "2",
                                                   "198.19.3.2"], capture_output=True, text=True).stdout
        assert not list((paths.STATE_DIR / "nofrr").glob("*/frr"))
    finally:
        if record is not None:
            engine.down(record)
    for how in ("lab", "option"):  # asked for by lab.yml or --routing: an input error, nothing made
        with pytest.raises(InputError) as caught:
            engine.up(replace(lab, routing_how=how))
        assert "apt-get install frr" in caught.value.problems[0].hint
        assert lab_state.load("nofrr") is None and not os.path.exists("/run/netns/nofrr.leaf1")
