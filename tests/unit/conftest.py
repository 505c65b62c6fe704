"""The switch-core tests run on both pipelines: the Python reference and its C fast path
(rocelab.switch.fastpath), so every behaviour they assert holds for what switchd runs."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

import test_switch_support

# The generated traces (test_switch_traces.py): CI runs 2,000 examples; HYPOTHESIS_PROFILE=dev
# runs 200 while working on the switch.
settings.register_profile("ci", max_examples=2000, print_blob=True)
settings.register_profile("dev", max_examples=200, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SWITCH_MODULES = {"test_switch_forwarding", "test_switch_pause", "test_switch_pfc", "test_switch_scheduling",
                  "test_switch_wred"}


def pytest_generate_tests(metafunc):
    """Every test of a switch module, and any other test that asks for `switch_implementation`
    (test_switch_frames' scapy fuzz of malformed frames), runs once per pipeline."""
    asked = "switch_implementation" in metafunc.fixturenames
    if asked or metafunc.module.__name__.rsplit(".", 1)[-1] in SWITCH_MODULES:
        if not asked:
            metafunc.fixturenames.append("switch_implementation")
        metafunc.parametrize("switch_implementation", ["python", "c"], indirect=True)


@pytest.fixture(autouse=True)
def _on_the_parametrized_pipeline(request):
    """pytest 9 no longer runs a fixture added to `metafunc.fixturenames` by pytest_generate_tests
    (the switch modules' [c] runs built the Python pipeline): ask for it by name."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "switch_implementation" in callspec.params:
        request.getfixturevalue("switch_implementation")


@pytest.fixture
def switch_implementation(request, monkeypatch):
    if request.param not in test_switch_support.IMPLEMENTATIONS:
        pytest.skip("the C fast path is not built here (no C compiler at install time)")
    monkeypatch.setattr(test_switch_support, "implementation", request.param)
    return request.param
