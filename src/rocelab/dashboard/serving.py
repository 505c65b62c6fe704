"""What a serving dashboard and the other commands tell each other, through small files
under paths.STATE_DIR (no web stack imported here: `run` and `traffic` use this).

    dashboard.serving     {"url", "pid"} while `invoke dashboard` serves
    <lab>/job.json        the job or case `run`/`traffic` is on, while a dashboard serves
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from rocelab import paths


def _serving_file() -> Path:
    return paths.STATE_DIR / "dashboard.serving"  # not *.json: state.all_labs() reads those


def _job_file(lab: str) -> Path:
    return paths.STATE_DIR / lab / "job.json"


def _write(target: Path, doc: dict) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, target)  # atomic: the sampler never reads half a file


def announce(url: str) -> None:
    _write(_serving_file(), {"url": url, "pid": os.getpid()})


def withdraw() -> None:
    _serving_file().unlink(missing_ok=True)


def url() -> str | None:
    """The URL of the dashboard serving now, if one is."""
    try:
        doc = json.loads(_serving_file().read_text())
        os.kill(doc["pid"], 0)
    except (OSError, ValueError, KeyError):
        return None
    return doc["url"]


def publish_job(lab: str, **fields: object) -> None:
    """Tell a serving dashboard what the lab runs now (nothing when none serves)."""
    if url() is None:
        return
    path = _job_file(lab)
    try:
        doc = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        doc = {}
    _write(path, {**doc, **fields, "updated": time.time()})


def end_job(lab: str) -> None:
    _job_file(lab).unlink(missing_ok=True)


class JobReporter:
    """A job's progress callback's companion: at most every `every_s`, the progress to the
    dashboard (iteration, bytes, bytes per second and busbw so far, emulated), when one serves."""

    def __init__(self, lab: str, every_s: float = 0.2):
        self.lab, self.every_s, self._last = lab, every_s, 0.0

    def __call__(self, progress) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        publish_job(self.lab, iterations_done=progress.iterations_done, iterations=progress.iterations,
                    bytes_done=progress.bytes_done, bytes_total=progress.bytes_total,
                    bytes_per_s=progress.bytes_done / progress.elapsed_s if progress.elapsed_s > 0 else 0.0,
                    busbw_bps=progress.busbw_bps)


def read_job(lab: str) -> dict | None:
    try:
        return json.loads(_job_file(lab).read_text())
    except (OSError, ValueError):
        return None


def save_snapshot(target: Path, timeout_s: float = 10.0) -> Path | None:
    """Ask the serving dashboard for its snapshot and write it to `target`; None when none serves."""
    where = url()
    if where is None:
        return None
    try:
        with urllib.request.urlopen(f"{where}snapshot", timeout=timeout_s) as reply:
            body = reply.read()
    except (OSError, urllib.error.URLError):
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(body)
    return target
