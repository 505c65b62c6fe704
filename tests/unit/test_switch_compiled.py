"""The switch core compiled (setup.py, ROCELAB_COMPILE=1) decides exactly as its source.

One scenario touches every stage: an incast into a lossless TC with WRED/ECN, PFC sent
and honoured, a lossy flow tail-dropped, a TTL-expired packet trapped, garbage counted.
It runs here, on whatever `rocelab.switch` this interpreter imports, and in a child on
a copy of the package with no compiled module in it; every frame out (time, port, bytes)
and every counter must match. Skipped where the core is not compiled: then there is only
the source.

    python tests/unit/test_switch_compiled.py      prints the scenario's digest
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rocelab
from rocelab.qos.model import WredProfile
from rocelab.switch import pipeline
from test_switch_support import (
    RATE_BPS, drive, lossless_pg_profile, lossless_profile, make_switch, paced, pfc_from_peer, roce,
)

COMPILED = not pipeline.__file__.endswith(".py")


def digest() -> str:
    wred = WredProfile("ECN", False, "ecn_all", 20_000, 60_000, 50)
    switch = make_switch(lossless_profile(pg=lossless_pg_profile(static_th_bytes=30_000), wred=wred), seed=7)
    arrivals = (paced("eth1", roce("eth1", "eth3", 4096), RATE_BPS * 0.8, 0.0, 0.05)
                + paced("eth2", roce("eth2", "eth3", 4096, sport=50000), RATE_BPS * 0.8, 0.0, 0.05)
                + paced("eth4", roce("eth4", "eth3", 1500, dscp=0), RATE_BPS * 0.9, 0.0, 0.05)
                + [(0.01, "eth3", pfc_from_peer("eth3", {3: 2000})), (0.02, "eth1", roce("eth1", "eth2", ttl=1)),
                   (0.03, "eth2", b"\x00" * 20), (0.03, "eth2", roce("eth2", "eth1")[:30])])
    sent = drive(switch, arrivals, 0.0, 0.2)
    h = hashlib.sha256()
    for t, port, frame in sent:
        h.update(f"{t!r} {port} ".encode() + frame)
    h.update(json.dumps(switch.counters(0.2), sort_keys=True).encode())
    return f"{len(sent)} {h.hexdigest()}"


@pytest.mark.skipif(not COMPILED, reason="the switch core is not compiled here: only its source runs")
def test_the_compiled_core_sends_and_counts_exactly_as_its_source(tmp_path):
    pure = tmp_path / "rocelab"
    shutil.copytree(Path(rocelab.__file__).parent, pure, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    child = subprocess.run([sys.executable, __file__], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{Path(__file__).parent}"})
    assert child.stdout.strip() == f"pure: {digest()}"


def test_a_compiled_build_of_this_checkout_decides_as_its_source(tmp_path):
    """Builds the wheel with ROCELAB_COMPILE=1 (mypyc, ~10 s on 2 cores) and runs the scenario
    on it: the compiled core must be what imports, and its digest the source's."""
    pytest.importorskip("mypyc", reason="needs mypy (pip install -e '.[dev]')")
    checkout, tree = Path(__file__).resolve().parents[2], tmp_path / "tree"  # a clean tree: no stale build/
    shutil.copytree(checkout / "src", tree / "src", ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(checkout / name, tree / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                            "-w", str(tmp_path / "wheel"), str(tree)], capture_output=True, text=True,
                           env={**os.environ, "ROCELAB_COMPILE": "1"})
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("rocelab-*.whl")
    shutil.unpack_archive(wheel, tmp_path / "site", format="zip")
    child = subprocess.run([sys.executable, __file__], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{Path(__file__).parent}"})
    assert child.stdout.strip() == f"compiled: {digest()}"


if __name__ == "__main__":
    print("compiled:" if COMPILED else "pure:", digest())
