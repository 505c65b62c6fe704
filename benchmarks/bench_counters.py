"""What one `counters` request costs switchd's loop, and its reader: the C core's packed
counters against the nested view built from the reference's objects (what switchd answered
before the packed form: `_store` into the reference, its nested dict, JSON), same switch, same run.
And nicd's: a NIC of 1 and 16 QPs that moved data, each QP's report a dict against a list
(`counters {"packed": true}`), the `clear` baseline taken away and the JSON made as nicd does.

    python benchmarks/bench_counters.py [--requests N]

While a case runs, the sampler asks every agent for its counters 20 times a second; the loop
serves nothing else during a request, so its cost is lateness for every event due meanwhile.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from rocelab import paths
from rocelab.roce import Nic, NicConfig
from rocelab.roce.agent import _subtract
from rocelab.roce.nic import expand_qps
from rocelab.roce.sim import FabricSim, connect_qps
from rocelab.switch import Fib, NextHop, PortSpec
from rocelab.switch.agent import load_profile
from rocelab.switch.counters import expand
from rocelab.switch.fastpath import FastSwitch


def _switch(ports: int) -> FastSwitch:
    names = [f"eth{i + 1}" for i in range(ports)]
    specs = [PortSpec(n, f"02:00:00:00:01:{i:02x}", 100e9 / 1000) for i, n in enumerate(names)]
    fib = Fib(routes={f"198.18.{i}.0/24": [NextHop(n, f"02:00:00:00:02:{i:02x}")] for i, n in enumerate(names)},
              local=frozenset())
    profile = load_profile(str(paths.profiles_dir() / "roce-lossless.json"), 1000)
    return FastSwitch("leaf1", specs, profile, fib, random.Random(1))


def _nic(qps: int) -> tuple[Nic, float, dict, dict]:
    """A NIC whose `qps` QPs each wrote 64 KB to a peer over a lossy link (DCQCN on), the time,
    and its counters cleared before (as a case clears them before its job makes its QPs): as
    dicts and packed."""
    rng = random.Random(1)
    a, b = (Nic(mac, ip, 100e9 / 1000, NicConfig(), rng=rng)
            for mac, ip in (("02:00:00:00:00:0a", "198.18.0.10"), ("02:00:00:00:00:0b", "198.18.0.11")))
    base, base_packed = a.counters(0.0), a.counters(0.0, packed=True)
    mr = b.register_mr(bytearray(1 << 16))
    pairs = [connect_qps(a, b) for _ in range(qps)]
    for qa, _ in pairs:
        a.post_write(qa, 1, bytes(1 << 16), remote_va=mr.va, r_key=mr.r_key)
    sim = FabricSim(random.Random(2))
    for nic in (a, b):
        sim.attach(nic, delay_s=1e-6, loss=0.01)
    sim.run(60.0, stop=lambda: all(a.qp(qa).counters.messages_sent for qa, _ in pairs))
    return a, sim.now, base, base_packed


def _per_request_us(fn, requests: int) -> float:
    start = time.perf_counter()
    for _ in range(requests):
        fn()
    return (time.perf_counter() - start) / requests * 1e6


def _row(size: int, before, after, expand_wire, requests: int) -> str:
    """One table row: `before` and `after` each make a request's JSON; the reader expands `after`'s."""
    before_us, after_us = _per_request_us(before, requests), _per_request_us(after, requests)
    wire = json.loads(after())
    reader_us = _per_request_us(lambda: expand_wire(wire), requests)
    return (f"{size:>5}  {before_us:>18.0f}  {after_us:>9.0f}  {after_us / before_us:>6.2f}  {reader_us:>16.0f}  "
            f"{len(before()):>12,}/{len(after()):,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    print(f"{'ports':>5}  {'nested (before) µs':>18}  {'packed µs':>9}  {'ratio':>6}  {'reader expand µs':>16}  "
          f"{'JSON bytes nested/packed':>24}")
    for ports in (5, 32):
        switch = _switch(ports)
        now = time.monotonic()

        def nested() -> str:
            switch._store()
            return json.dumps(switch.reference.counters(now))

        def packed() -> str:
            return json.dumps(switch.packed_counters(now))

        print(_row(ports, nested, packed, expand, args.requests))
    print(f"\n{'QPs':>5}  {'QPs as dicts µs':>18}  {'lists µs':>9}  {'ratio':>6}  {'reader expand µs':>16}  "
          f"{'JSON bytes dicts/lists':>24}")
    for qps in (1, 16):
        nic, now, base, base_packed = _nic(qps)

        def as_dicts() -> str:
            return json.dumps(_subtract(nic.counters(now), base))

        def as_lists() -> str:
            return json.dumps(_subtract(nic.counters(now, packed=True), base_packed))

        print(_row(qps, as_dicts, as_lists, expand_qps, args.requests))


if __name__ == "__main__":
    main()
