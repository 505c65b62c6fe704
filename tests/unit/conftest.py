"""The switch-core tests run on both pipelines: the Python reference and its C fast path
(rocelab.switch.fastpath), so every behaviour they assert holds for what switchd runs."""

from __future__ import annotations

import pytest

import test_switch_support

SWITCH_MODULES = {"test_switch_forwarding", "test_switch_pause", "test_switch_pfc", "test_switch_scheduling",
                  "test_switch_wred"}


def pytest_generate_tests(metafunc):
    if metafunc.module.__name__.rsplit(".", 1)[-1] in SWITCH_MODULES:
        metafunc.fixturenames.append("switch_implementation")
        metafunc.parametrize("switch_implementation", ["python", "c"], indirect=True)


@pytest.fixture
def switch_implementation(request, monkeypatch):
    if request.param not in test_switch_support.IMPLEMENTATIONS:
        pytest.skip("the C fast path is not built here (no C compiler at install time)")
    monkeypatch.setattr(test_switch_support, "implementation", request.param)
    return request.param
