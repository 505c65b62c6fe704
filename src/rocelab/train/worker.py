"""One data-parallel worker, started by rocelab.train.runner inside its host's namespace:

    python -m rocelab.train.worker '{"rank": 0, "workers": 4, "master": "198.19.1.2", ...}'

PyTorch DistributedDataParallel with the gloo backend, rendezvous through a TCP store at
the first worker's fabric address, a small MLP (about a million parameters) on
scikit-learn's bundled digits (no download). Prints its progress as JSON lines on stdout
(rocelab.train.core's events); everything else goes to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from rocelab.train.core import Done, Ready, Step, bucket_bytes, event_line, ring_share_bytes, sync_span_s

HIDDEN = (1024, 896)  # 64 → 1024 → 896 → 10: 993,930 parameters, a 3.98 MB fp32 gradient
HELD_OUT = 0.2  # of the 1,797 digits, kept out of training to measure accuracy


def mlp(features: int, classes: int) -> nn.Module:
    sizes = (features, *HIDDEN)
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-1], classes))


class BucketMeter:
    """DDP comm hook state: counts what each gradient bucket hands to AllReduce and when it
    comes back reduced, then AllReduces it exactly as DDP's default hook does."""

    def __init__(self, group):
        self.group = group
        self.buckets: list[tuple[int, int]] = []
        self.spans: list[tuple[float, float]] = []

    def take(self) -> tuple[int, float]:
        """The step's (bytes synced, AllReduce time), and a fresh start for the next step."""
        synced, seconds = bucket_bytes(self.buckets), sync_span_s(self.spans)
        self.buckets, self.spans = [], []
        return synced, seconds


def metered_allreduce(meter: BucketMeter, bucket):
    buffer = bucket.buffer()
    meter.buckets.append((buffer.numel(), buffer.element_size()))
    began = time.perf_counter()

    def reduced(fut):
        meter.spans.append((began, time.perf_counter()))
        return fut.value()

    return allreduce_hook(meter.group, bucket).then(reduced)


def emit(event) -> None:
    print(event_line(event), flush=True)


def main(config: dict) -> int:
    rank, workers, seed = config["rank"], config["workers"], config["seed"]
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # four workers share two cores with the switches
    torch.use_deterministic_algorithms(True)
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    train_idx, test_idx = train_test_split(range(len(y)), test_size=HELD_OUT, random_state=seed, stratify=digits.target)
    x_train, y_train = x[train_idx], y[train_idx]
    x_test, y_test = x[test_idx], y[test_idx]

    dist.init_process_group("gloo", init_method=f"tcp://{config['master']}:{config['port']}", rank=rank,
                            world_size=workers, timeout=timedelta(seconds=config["gloo_timeout_s"]))
    model = mlp(x.shape[1], 10)  # the same seed on every worker: the same initial weights
    # init_sync off: the replicas already agree (same seed), so the only bytes on the fabric
    # are the gradients' AllReduce, which the lab measures.
    ddp = DistributedDataParallel(model, init_sync=False)
    meter = BucketMeter(dist.group.WORLD)
    ddp.register_comm_hook(meter, metered_allreduce)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=config["learning_rate"])
    params = sum(p.numel() for p in model.parameters())
    emit(Ready(rank, workers, params, next(model.parameters()).element_size()))

    shuffle = torch.Generator().manual_seed(seed)
    batch = config["batch_size"]
    order: list[int] = []
    start = time.perf_counter()
    steps = 0
    reached = False
    while steps < config["max_steps"] and not reached:
        if len(order) < batch * workers:  # a new epoch: every worker draws the same permutation
            order = torch.randperm(len(y_train), generator=shuffle).tolist()
        global_batch, order = order[:batch * workers], order[batch * workers:]
        mine = global_batch[rank::workers]
        began = time.perf_counter()
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x_train[mine]), y_train[mine])
        loss.backward()  # DDP AllReduces the gradient buckets during backward
        optimizer.step()
        step_time_s = time.perf_counter() - began
        with torch.no_grad():  # every replica is the same model, so every worker gets the same accuracy
            accuracy = int((model(x_test).argmax(1) == y_test).sum()) / len(y_test)  # exact: 342/360 is 0.95
        steps += 1
        synced, sync_s = meter.take()
        emit(Step(rank, steps, loss.item(), accuracy, step_time_s, time.perf_counter() - start, synced,
                  ring_share_bytes(synced, workers), sync_s))
        reached = accuracy >= config["target_accuracy"]
    emit(Done(rank, steps, reached))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
