"""A lab's own PFC-watchdog clock: `pfc_wd_tdf` in lab.yml, carried to switchd's profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.model.lab import load_lab
from rocelab.switch.agent import load_profile

ROOT = Path(__file__).resolve().parents[2]


def test_the_watchdog_runs_on_the_labs_tdf_unless_the_lab_gives_it_its_own(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\ntdf: 1000\n")
    assert load_lab("l1").pfc_wd_tdf is None
    lab_home.write_text("topology: leaf-spine-2x2\ntdf: 1000\npfc_wd_tdf: 10\n")
    assert load_lab("l1").pfc_wd_tdf == 10


@pytest.mark.parametrize("value", ["0", "2.5", "fast", "true"])
def test_a_bad_watchdog_tdf_names_the_key_and_what_is_expected(lab_home, value):
    lab_home.write_text(f"topology: leaf-spine-2x2\npfc_wd_tdf: {value}\n")
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    (problem,) = exc.value.problems
    assert problem.file.endswith("lab.yml") and problem.path.startswith("pfc_wd_tdf")
    assert "is not a time-dilation factor" in problem.message and "whole number" in problem.hint


def test_switchd_dilates_detection_and_restoration_by_the_watchdog_tdf():
    profile = load_profile(str(ROOT / "profiles" / "roce-lossless.json"), 10)
    wd = profile.ports["Ethernet0"].pfc_wd
    assert (wd.detection_time_ms, wd.restoration_time_ms, wd.action) == (2000, 2000, "drop")
