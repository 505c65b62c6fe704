"""The front door without root: bad input exits 2 and creates nothing; graph and calc print."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rocelab.kernel.netns import NETNS_DIR

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "rocelab"]
ERRORS = sorted((ROOT / "tests" / "errors").glob("*.yml"))


def namespaces_of(path: Path) -> set[str]:
    """Namespaces of the lab a topology file would make (others' tests may run alongside)."""
    import yaml

    try:
        name = str(yaml.safe_load(path.read_text())["name"])
    except Exception:  # an unparsable file names no lab: any namespace would be a leak
        name = ""
    return {p.name for p in NETNS_DIR.iterdir() if p.name.startswith(f"{name}.")} if NETNS_DIR.is_dir() else set()


@pytest.mark.parametrize("path", ERRORS, ids=lambda p: p.stem)
def test_bad_topology_exits_2_names_the_file_and_leaves_nothing(path):
    result = subprocess.run([*CLI, "up", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert f"tests/errors/{path.name}" in result.stderr
    assert "Traceback" not in result.stderr
    assert namespaces_of(path) == set()


@pytest.mark.parametrize("argv, said", [
    (["dashboard", "--port", "abc"], "--port: 'abc' is not a whole number"),
    (["traffic", "ring-allreduce", "--iters", "x"], "--iters: 'x' is not a whole number"),
    (["bw", "h1", "h2", "--qps=x"], "--qps: 'x' is not a whole number"),
    (["bw", "h1"], "did not receive required positional arguments: 'dst'"),
    (["no-such-task"], "No idea what 'no-such-task' is"),
])
@pytest.mark.parametrize("door", [CLI, [sys.executable, "-m", "invoke"]], ids=["rocelab", "invoke"])
def test_words_the_parser_refuses_exit_2_naming_the_option_and_its_form(door, argv, said):
    result = subprocess.run([*door, *argv], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and said in result.stderr and "Traceback" not in result.stderr


def test_unknown_lab_exits_2_listing_what_exists():
    result = subprocess.run([*CLI, "up", "lab-nope"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "lab-pfc" in result.stderr and "leaf-spine-2x2" in result.stderr


def test_netns_engine_refuses_network_os_nodes_before_making_anything():
    result = subprocess.run([*CLI, "up", "leaf-spine-2x2-nos"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert ("topologies/leaf-spine-2x2-nos.yml: topology.nodes.spine1.kind: 'sonic-vs' is a network OS "
            "container, which the netns engine cannot run") in result.stderr
    assert "--engine clab" in result.stderr
    assert namespaces_of(ROOT / "topologies" / "leaf-spine-2x2-nos.yml") == set()


@pytest.mark.parametrize("argv, said", [
    (["up", "lab-pfc", "--routing", "ospf"], "--routing: 'ospf' is not a routing mode (hint: one of: static, bgp)"),
    (["up", "leaf-spine-2x2-nos", "--engine", "clab", "--routing", "bgp"],
     "--routing: is bgp, and leaf-spine-2x2-nos has NOS switches"),
])
def test_a_routing_up_cannot_run_exits_2_before_making_anything(argv, said):
    result = subprocess.run([*CLI, *argv], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and said in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert namespaces_of(ROOT / "topologies" / "leaf-spine-2x2-nos.yml") == set()


def test_unknown_engine_exits_2_listing_engines():
    result = subprocess.run([*CLI, "up", "lab-pfc", "--engine", "vmware"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "netns" in result.stderr


def test_console_script_exposes_exactly_the_invoke_tasks():
    rocelab = subprocess.run([*CLI, "--list"], capture_output=True, text=True, cwd=ROOT).stdout
    invoke = subprocess.run([sys.executable, "-m", "invoke", "--list"], capture_output=True, text=True, cwd=ROOT).stdout
    tasks = lambda text: sorted(line.split()[0] for line in text.splitlines()[2:] if line.strip())  # noqa: E731
    assert tasks(rocelab) == tasks(invoke)
    assert {"up", "down", "status", "exec", "graph", "test"} <= set(tasks(rocelab))


def test_graph_draws_a_png_and_a_text_tree(tmp_path):
    out = tmp_path / "fabric.png"
    result = subprocess.run([*CLI, "graph", "leaf-spine-2x2", "--out", str(out)], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "spine1" in result.stdout and "198.19.1.2" in result.stdout


def test_calc_json_prices_an_idle_minute():
    result = subprocess.run([*CLI, "calc", "--params", "175B", "--dtype", "fp32", "--gpus", "1024",
                             "--nic-speed", "400G", "--usd-per-gpu-hour", "30", "--json"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["idle_minute_cost_usd"] == pytest.approx(512.0)
    assert doc["gradient_size_bytes"] == 700e9


def test_calc_bad_option_exits_2():
    result = subprocess.run([*CLI, "calc", "--params", "175B", "--dtype", "fp33", "--gpus", "8",
                             "--nic-speed", "400G", "--usd-per-gpu-hour", "30"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and "--dtype" in result.stderr
