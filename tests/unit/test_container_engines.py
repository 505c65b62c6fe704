"""The container engines and rocelab's images without a container: the mirror read from apt's
files, the digest that decides a rebuild, the .clab.yml as deployed (valid for containerlab,
binding what the agents need), `docker run` as containerlab would run each node, and the
messages (exit 2) when Docker or containerlab is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from rocelab import paths
from rocelab.engines.containers import write_deployment
from rocelab.engines.docker import node_settings, run_argv
from rocelab.engines.images import mirror_from_sources, source_digest
from rocelab.model.lab import load_lab

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "data" / "containerlab" / "clab.schema.json"
LINE = ROOT / "tests" / "data" / "containers-line.yml"
CLI = [sys.executable, "-m", "rocelab"]

DEB822 = """\
Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
URIs: http://off.example/debian
Suites: bookworm
Enabled: no

Types: deb
# a comment inside a stanza
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
"""


def test_the_mirror_is_the_first_enabled_deb_source_of_the_release():
    assert mirror_from_sources([("/etc/apt/sources.list.d/debian.sources", DEB822)], "bookworm") == \
        "http://mirror.example/debian"
    one_line = ("# deb http://commented.example/debian bookworm main\n"
                "deb-src http://src.example/debian bookworm main\n"
                "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://one.example/ubuntu jammy main\n")
    assert mirror_from_sources([("/etc/apt/sources.list", one_line)], "jammy") == "http://one.example/ubuntu"
    assert mirror_from_sources([("/etc/apt/sources.list", one_line)], "bookworm") is None


def test_the_source_digest_follows_the_package_and_nothing_else(tmp_path):
    (tmp_path / "src" / "rocelab").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'rocelab'\n")
    module = tmp_path / "src" / "rocelab" / "switchd.py"
    module.write_text("A = 1\n")
    first = source_digest(tmp_path)
    (tmp_path / "README.md").write_text("prose does not go into the wheel\n")
    assert source_digest(tmp_path) == first
    module.write_text("A = 2\n")
    second = source_digest(tmp_path)
    assert second != first
    (tmp_path / "src" / "rocelab" / "_fast.c").write_text("int a;\n")  # a C extension's source goes in too
    assert source_digest(tmp_path) != second


@pytest.fixture
def deployed(tmp_path):
    lab = load_lab("lab-pfc")
    return lab, yaml.safe_load(write_deployment(lab, tmp_path).read_text())


def test_the_deployed_file_validates_and_binds_what_the_agents_need(deployed):
    lab, doc = deployed
    errors = list(jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).iter_errors(doc))
    assert [e.message for e in errors] == []
    linux = doc["topology"]["kinds"]["linux"]
    state = (paths.STATE_DIR / lab.name).resolve()
    assert f"{state}:{state}" in linux["binds"]  # control sockets, agent configs and logs
    assert f"{paths.project_root()}:{paths.project_root()}:ro" in linux["binds"]  # the profiles `run` reloads
    assert lab.profile.is_relative_to(paths.project_root())
    assert linux["sysctls"]["net.ipv6.conf.all.disable_ipv6"] == "1"
    assert linux["image-pull-policy"] == "Never"


def test_docker_run_gives_each_node_no_network_and_only_the_agents_capabilities(deployed, tmp_path):
    lab, doc = deployed
    settings = node_settings(doc, "leaf1")
    argv = run_argv(lab.name, "leaf1", settings, tmp_path / "lab-pfc.clab.yml")
    pairs = set(zip(argv, argv[1:]))
    assert {("--network", "none"), ("--pull", "never"), ("--name", "clab-lab-pfc-leaf1"),
            ("--cap-add", "NET_RAW"), ("--cap-add", "NET_ADMIN"), ("--cap-add", "SYS_NICE"),
            ("--label", "clab-node-group=leaf"), ("--sysctl", "net.ipv6.conf.all.disable_ipv6=1")} <= pairs
    assert "--privileged" not in argv
    assert [a for a, b in pairs if a == "--volume"] and all(("--volume", bind) in pairs for bind in settings["binds"])
    assert argv[-1] == settings["image"] == doc["topology"]["nodes"]["leaf1"]["image"]


def cli(*args: str, path: Path) -> subprocess.CompletedProcess:
    """The CLI with nothing on PATH: no docker, no containerlab, whatever this machine has."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": str(path), "ROCELAB_STATE_DIR": str(paths.STATE_DIR)})


@pytest.mark.parametrize("args, missing, pointer", [
    (("up", str(LINE), "--engine", "clab"), "needs containerlab, which is not installed", "--engine docker"),
    (("up", str(LINE), "--engine", "docker"), "the docker command is not installed", "--engine netns"),
    (("images",), "the docker command is not installed", "apt-get install docker.io"),
])
def test_a_missing_runtime_is_exit_2_with_how_to_install_and_nothing_made(tmp_path, args, missing, pointer):
    result = cli(*args, path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert missing in result.stderr and pointer in result.stderr
    assert not (paths.STATE_DIR / "containers-line").exists()
    assert not (paths.STATE_DIR / "containers-line.json").exists()
