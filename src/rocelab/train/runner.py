"""Running a training job on a lab: one worker process per host, inside that host's
namespace, watched until it finishes, fails or stalls; never left running.

The workers are forked from one process that imported PyTorch and scikit-learn once
(multiprocessing's fork server, started by the first job and kept while this process lives),
not each started afresh: those imports cost every worker ~3.5 s of CPU, and four workers on
two cores 4-7 s of each case's wall time before any step (2026-11-28). As with any
multiprocessing start method but fork, a script that runs a job guards its main
(`if __name__ == "__main__":`): the fork server's children import it.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from rocelab import paths
from rocelab.kernel.netns import enter
from rocelab.errors import InputError, Problem
from rocelab.engines.state import LabState
from rocelab.model.topology import Fabric
from rocelab.train.core import Done, Ready, Step, StallWatch, TrainResult, TrainSpec, parse_line

STORE_PORT = 29500  # the TCP store's port on the first worker: PyTorch's usual MASTER_PORT
LOG_TAIL_CHARS = 2000
WORKER_MODULE = "rocelab.train.worker"
_FORK_SERVER = multiprocessing.get_context("forkserver")
# And what every worker would import itself: torch.use_deterministic_algorithms imports the
# inductor's config (and with it dynamo and sympy, ~1 s) the first time it is called.
_FORK_SERVER.set_forkserver_preload([WORKER_MODULE, "torch._inductor.config", __name__])


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


def _kill(procs: list[multiprocessing.Process]) -> None:
    for proc in procs:
        if proc.exitcode is None:
            for kill in (os.killpg, os.kill):  # its session (the worker and anything it started), and
                try:                          # the worker itself should it not have made that session yet
                    kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    for proc in procs:
        proc.join()


def _worker(ns: str, config: dict, env: dict[str, str], log: str, events) -> None:
    """A worker as the fork server's child: in its host's namespace and a session of its own
    (a Ctrl-C at the shell does not reach it, `_kill` stops it and what it started), its
    events written to `events`, everything else to its log."""
    os.setsid()
    enter(ns)
    os.environ.update(env)
    os.dup2(events.fileno(), sys.stdout.fileno())
    events.close()
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log_fd, sys.stderr.fileno())
    os.close(log_fd)
    from rocelab.train import worker  # the fork server's: imported once for every worker

    sys.exit(worker.main(config))


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
    procs: list[multiprocessing.Process] = []
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
            env = {"GLOO_SOCKET_IFNAME": fabric.node(host).ports[0].name}
            events, sink = _FORK_SERVER.Pipe(duplex=False)
            proc = _FORK_SERVER.Process(target=_worker, name=f"{WORKER_MODULE} {host}", args=(
                record.node(host).netns, config, env, str(worker_log(record.name, host)), sink))
            proc.start()
            sink.close()  # the worker holds the only writer: its end is the stream's end
            procs.append(proc)
            stream = os.fdopen(os.dup(events.fileno()), "r")
            events.close()
            threading.Thread(target=_read_lines, args=(rank, stream, lines), daemon=True).start()
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
                procs[rank].join()
                code = procs[rank].exitcode
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
