"""What one reading of a switch's kernel FIB costs: switchd reads it again at every change of a
route, neighbour, link or address, inside its loop (rocelab.switch.agent.Switchd.refresh_fib).

    python benchmarks/bench_fib_read.py [--readings 200]

In a namespace of its own, per size (ports, ECMP routes over four uplinks): a leaf of
leaf-spine-2x2 as FRR fills it, a leaf of a larger fabric, a 32-port switch. Printed, CPU
ms per reading: rocelab.kernel.rtnl (what switchd runs: one links dump, the neighbours,
addresses and routes, the FIB built), and in the same run the reference: pyroute2's own
dumps of the same tables (links twice, neighbours, addresses, the main table's routes), which
is what switchd's reading asked of pyroute2 before, without building the FIB. Needs root.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pyroute2 import IPRoute  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from rocelab.kernel.netns import in_netns  # noqa: E402
from rocelab.kernel.rtnl import Rtnl  # noqa: E402
from rocelab.switch.kernel_fib import down_ports, read_fib  # noqa: E402

SIZES = ((8, 12), (16, 100), (32, 400))  # (ports, ECMP routes)
UPLINKS = 4


def build(ns: str, ports: int, routes: int) -> list[str]:
    """veth pairs eN-pN, a /31 and a neighbour on each eN, `routes` /24s over the first four."""
    batch = ["link set lo up"]
    for i in range(ports):
        batch += [f"link add e{i} type veth peer name p{i}", f"link set e{i} up", f"link set p{i} up",
                  f"addr add 198.18.{i}.0/31 dev e{i}",
                  f"neigh replace 198.18.{i}.1 lladdr 02:52:4c:00:0c:{i:02x} dev e{i} nud permanent"]
    hops = " ".join(f"nexthop via 198.18.{i}.1" for i in range(UPLINKS))
    batch += [f"route add 198.19.{r // 256}.{r % 256}/32 {hops}" for r in range(routes)]
    subprocess.run(["ip", "-n", ns, "-batch", "-"], input="\n".join(batch) + "\n", text=True, check=True)
    return [f"e{i}" for i in range(ports)]


def cpu_ms(read, readings: int) -> float:
    read()
    start = time.process_time()
    for _ in range(readings):
        read()
    return (time.process_time() - start) / readings * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readings", type=int, default=200)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_fib_read: needs root (it makes a namespace)")
    table = Table(title=f"one FIB reading, CPU ms (mean of {args.readings})", title_justify="left")
    for column in ("ports", "ECMP routes", "FIB entries", "rocelab.kernel.rtnl", "pyroute2's dumps", "ratio"):
        table.add_column(column, justify="right")
    for ports, routes in SIZES:
        ns = f"bfib{os.getpid()}"
        subprocess.run(["ip", "netns", "add", ns], check=True)
        try:
            names = build(ns, ports, routes)
            with in_netns(ns):
                rtnl, ipr = Rtnl(), IPRoute()

            def ours():
                links = rtnl.links()
                down_ports(links, names)
                return read_fib(rtnl, names, links)

            def reference():
                ipr.get_links(), ipr.get_links(), ipr.get_neighbours(family=2), ipr.get_addr(family=2)
                ipr.get_routes(family=2, table=254)

            entries = len(ours().routes)
            a, b = cpu_ms(ours, args.readings), cpu_ms(reference, max(args.readings // 10, 5))
            table.add_row(str(ports), str(routes), str(entries), f"{a:.3f}", f"{b:.2f}", f"{a / b:.3f}x")
            rtnl.close()
            ipr.close()
        finally:
            subprocess.run(["ip", "netns", "del", ns], check=False)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
