"""Shared fixtures. Root tests are marked `root` and skip with a reason when not root.

The suite keeps its lab records in its own state folder, so it never sees or touches
labs a user has up, and names its labs uniquely (`t<pid>-…`).
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-test-state-"))

import itertools  # noqa: E402
import shutil  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0
_counter = itertools.count(1)


def pytest_collection_modifyitems(config, items):
    if IS_ROOT:
        return
    skip = pytest.mark.skip(reason="needs root: creates network namespaces (run as root, as CI does)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


def unique_lab_name(stem: str) -> str:
    return f"t{os.getpid() % 10000}-{next(_counter)}-{stem}"[:31]


@pytest.fixture
def lab_home(tmp_path, monkeypatch):
    """A project folder with the shipped topologies and one lab, `l1`, whose lab.yml to write."""
    shutil.copytree(ROOT / "topologies", tmp_path / "topologies")
    (tmp_path / "labs" / "l1").mkdir(parents=True)
    monkeypatch.setenv("ROCELAB_HOME", str(tmp_path))
    return tmp_path / "labs" / "l1" / "lab.yml"


def _labs_brought_up():
    """bring_up(lab_or_topology, **overrides) → (Lab, LabState); torn down when the scope ends."""
    from rocelab.engines import builtin_engines
    from rocelab.model.lab import load_lab
    from rocelab.runtime import calibration

    engine = builtin_engines().get("netns")
    made = []

    def _up(ref: str, **overrides):
        spec = load_lab(ref)
        spec = replace(spec, name=unique_lab_name(spec.name), **overrides)
        record = calibration.up(engine, spec)
        made.append(record)
        return spec, record

    yield _up
    for record in made:
        engine.down(record)


bring_up = pytest.fixture(_labs_brought_up, name="bring_up")
# A lab several tests of a module share, when none of them leaves it changed.
bring_up_for_module = pytest.fixture(_labs_brought_up, scope="module", name="bring_up_for_module")
