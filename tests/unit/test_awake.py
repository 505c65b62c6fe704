"""How `up` keeps the CPUs awake (rocelab.kernel.awake): a PM QoS request where the device can be
written, one idle-priority spinner per CPU where not or when asked, none when told; and what
`status` reads back from the processes' command lines."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocelab.kernel import awake
from rocelab.reporting.status import awake_line


@pytest.fixture
def device(tmp_path, monkeypatch):
    path = tmp_path / "cpu_dma_latency"
    path.write_bytes(b"")
    monkeypatch.setattr(awake, "PM_QOS", str(path))
    monkeypatch.delenv(awake.KEEP_AWAKE_ENV, raising=False)
    return path


def test_a_writable_pm_qos_device_is_held_by_one_process(device):
    assert awake.how() == "pm-qos"
    assert awake.commands() == [[sys.executable, "-m", "rocelab.kernel.awake", "pm-qos"]]


def test_spinners_where_the_device_cannot_be_written_or_when_asked(device, monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv(awake.KEEP_AWAKE_ENV, "spin")
    assert awake.how() == "spinners"
    assert [argv[-1] for argv in awake.commands()] == [str(cpu) for cpu in cpus]
    monkeypatch.delenv(awake.KEEP_AWAKE_ENV)
    monkeypatch.setattr(awake, "PM_QOS", str(device.parent / "absent"))
    assert awake.how() == "spinners"
    monkeypatch.setenv(awake.KEEP_AWAKE_ENV, "0")
    assert awake.how() == "none" and not awake.wanted()


@pytest.mark.parametrize("last, how", [("pm-qos", "pm-qos"), ("0", "spinners")])
def test_status_reads_how_from_the_running_processes(last, how):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", last])
    deadline = time.monotonic() + 5
    while not Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)  # a process being exec'd reads an empty command line for a moment
    try:
        assert awake.running([proc.pid]) == how
    finally:
        proc.kill()
        proc.wait()
    assert awake.running([proc.pid]) == "none"  # gone
    assert awake.running([]) == "none"


def test_the_status_line_says_how():
    assert "PM QoS request of 0 µs" in awake_line({"how": "pm-qos", "processes": 1})
    assert awake_line({"how": "spinners", "processes": 2}).startswith("CPUs kept awake: 2, by idle-priority spinners")
    assert awake_line({"how": "none", "processes": 0}).startswith("CPUs kept awake: none")
