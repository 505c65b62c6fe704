"""Running a training job on a lab: one worker process per host, inside that host's
namespace, watched until it finishes, fails or stalls; never left running.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from rocelab import paths
from rocelab.kernel.netns import popen_in
from rocelab.errors import InputError, Problem
from rocelab.engines.state import LabState
from rocelab.model.topology import Fabric
from rocelab.train.core import Done, Ready, Step, StallWatch, TrainResult, TrainSpec, parse_line

STORE_PORT = 29500  # the TCP store's port on the first worker: PyTorch's usual MASTER_PORT
LOG_TAIL_CHARS = 2000


def require_torch(source: str) -> None:
    """PyTorch and scikit-learn come with the optional `train` extra; say so before anything starts."""
    missing = [m for m in ("torch", "sklearn") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError([Problem(source, "scenario", f"trains a model, and {', '.join(missing)} is not installed",
                                  "pip install 'rocelab[train]' (from a checkout: pip install -e '.[train]')")])


def training_hosts(fabric: Fabric, spec: TrainSpec) -> tuple[str, ...]:
    return spec.hosts or tuple(h.name for h in fabric.hosts)


def worker_log(lab: str, host: str) -> Path:
    return paths.STATE_DIR / lab / f"train-{host}.log"


def _read_lines(rank: int, stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put((rank, line))
    lines.put((rank, None))  # end of this worker's output


def _kill(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its session: the worker and anything it started
            except ProcessLookupError:
                pass
    for proc in procs:
        proc.wait()


def run_training(record: LabState, fabric: Fabric, spec: TrainSpec, *,
                 on_step: Callable[[Step, int], object] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> TrainResult:
    """Start the workers, stream rank 0's steps to `on_step(step, workers)`, and return what
    they reported. A job with no step for `spec.stall_timeout_s` is STALLED: every worker
    is killed and the result says so. A worker that fails takes the others down with it."""
    hosts = training_hosts(fabric, spec)
    result = TrainResult(hosts, spec)
    master = fabric.node(hosts[0]).ports[0].address.ip
    lines: queue.Queue = queue.Queue()
    procs: list[subprocess.Popen] = []
    watch = StallWatch(clock, spec.start_timeout_s, spec.stall_timeout_s)
    started = clock()
    (paths.STATE_DIR / record.name).mkdir(parents=True, exist_ok=True)
    try:
        for rank, host in enumerate(hosts):
            config = {"rank": rank, "workers": len(hosts), "master": str(master), "port": STORE_PORT,
                      "seed": spec.seed, "batch_size": spec.batch_size, "learning_rate": spec.learning_rate,
                      "target_accuracy": spec.target_accuracy, "max_steps": spec.max_steps,
                      # gloo gives up on its own too (later than the watch, which reports the
                      # stall): a worker whose runner died does not wait forever for its peers
                      "gloo_timeout_s": 2 * spec.stall_timeout_s}
            env = {**os.environ, "GLOO_SOCKET_IFNAME": fabric.node(host).ports[0].name, "OMP_NUM_THREADS": "1"}
            with worker_log(record.name, host).open("wb") as log:
                proc = popen_in(record.node(host).netns, [sys.executable, "-m", "rocelab.train.worker",
                                                          json.dumps(config)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env, text=True)
            procs.append(proc)
            threading.Thread(target=_read_lines, args=(rank, proc.stdout, lines), daemon=True).start()
        open_streams = len(procs)
        while open_streams:
            try:
                rank, line = lines.get(timeout=max(watch.remaining_s(), 0.0))
            except queue.Empty:
                if watch.stalled():
                    starting = len(result.ready) < len(hosts)
                    what, limit = (("not every worker was ready", spec.start_timeout_s) if starting
                                   else ("no step completed", spec.stall_timeout_s))
                    result.stalled = True
                    result.error = f"stalled: {what} within {limit:g} s; every worker was killed"
                    break
                continue
            if line is None:
                open_streams -= 1
                code = procs[rank].wait()
                if code != 0 and result.error is None:
                    result.error = f"worker {rank} on {hosts[rank]} exited {code}: " + _tail(record.name, hosts[rank])
                    break
                continue
            event = parse_line(line)
            if event is None:
                continue
            result.add(event)
            if isinstance(event, Ready) and len(result.ready) == len(hosts):
                watch.ready()
            elif isinstance(event, Step) and event.rank == 0:
                watch.progress()
                if on_step is not None:
                    on_step(event, len(hosts))
            elif isinstance(event, Done) and len(result.done) == len(hosts):
                break  # every worker has said all it will: no need to wait for PyTorch's teardown
    finally:
        _kill(procs)
        result.wall_s = clock() - started
    return result


def _tail(lab: str, host: str) -> str:
    try:
        return worker_log(lab, host).read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return "(no log)"
