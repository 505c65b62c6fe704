"""nicd on a live lab: one QP's goodput, the packet-rate ceiling, and the memory it takes.

    python benchmarks/bench_nicd.py [--seconds 5]

1. Goodput: one QP, h1 → h2 on leaf-spine-2x2 (one leaf, idle), 100G links at TDF 1000 (an
   emulated 100 Mb/s link), 4 KB path MTU, 1 MiB messages; goodput is acknowledged payload
   per second. Target ≥ 95% of the line rate. Both data planes: kernel forwarding (unshaped
   veths: the NIC's own pacing sets the rate) and switchd.
2. Packet-rate ceiling: the same QP at TDF 1 with a 1 KB path MTU, so the 100G link no
   longer limits and nicd's CPU does; data packets per second acknowledged. The retransmit
   timeout is raised so a late ACK under full CPU does not count as a loss.
3. RSS: VmRSS and VmHWM (peak) of every nicd after the runs. Target ≤ 60 MB.
Needs root.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from rocelab.runtime import calibration  # noqa: E402
from rocelab.engines import builtin_engines  # noqa: E402
from rocelab.model.lab import load_lab  # noqa: E402
from rocelab.traffic.job import bw_spec, bw_summary, run_job  # noqa: E402

GOODPUT_TARGET = 0.95
RSS_TARGET_BYTES = 60 << 20
CEILING_MESSAGES = 4000  # 64 KiB each: ~260 MB, a few seconds at the CPU's pace


def memory_kb(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def bw_on(dataplane: str, tdf: int, roce: dict, message_bytes: int, messages: int) -> tuple[dict, list[tuple]]:
    engine = builtin_engines().get("netns")
    spec = replace(load_lab("leaf-spine-2x2"), name=f"bnicd{os.getpid() % 10000}", nic="emulated",
                   dataplane=dataplane, tdf=tdf, roce=roce, **({"profile": None} if dataplane == "kernel" else {}))
    record = calibration.up(engine, spec)
    try:
        spec = bw_spec("h1", "h2", message_bytes=message_bytes, qps=1, messages=messages)
        report, results = run_job(record, spec, record_messages=True)
        summary = bw_summary(report, results["h1"], message_bytes)
        memory = [(p["node"], *memory_kb(p["pid"])) for p in record.processes if p["what"] == "nicd"]
    finally:
        engine.down(record)
    return summary, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each goodput run")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_nicd: needs root (it creates network namespaces)")
    memory = []
    print("1. one QP's goodput, idle 100 Mb/s emulated link (100G at TDF 1000), 4 KB MTU, 1 MiB messages")
    for dataplane in ("kernel", "switchd"):
        messages = round(args.seconds * 100e6 / 8 / (1 << 20))  # seconds at the emulated 100 Mb/s
        summary, mem = bw_on(dataplane, 1000, {"pmtu_bytes": 4096}, 1 << 20, messages)
        memory += mem
        share = summary["bw_vs_line_rate"]
        print(f"   {dataplane:8s} goodput {summary['bw_average_bps']['emulated'] / 1e6:6.2f} Mb/s emulated "
              f"({summary['bw_average_bps']['production'] / 1e9:6.2f} Gb/s production) = {share:.1%} of line rate "
              f"[target ≥ {GOODPUT_TARGET:.0%}: {'met' if share >= GOODPUT_TARGET else 'MISSED'}]; "
              f"retransmitted {summary['counters']['retransmitted_bytes']:,} B")
    print("2. packet-rate ceiling: one QP, 100G link at TDF 1 (the CPU limits), 1 KB MTU, 64 KiB messages")
    summary, mem = bw_on("kernel", 1, {"pmtu_bytes": 1024, "retransmit_timeout_s": 0.2}, 65536, CEILING_MESSAGES)
    memory += mem
    packets_per_s = summary["bw_average_bps"]["emulated"] / 8 / 1024
    print(f"   {packets_per_s:,.0f} data packets/s acknowledged ({summary['bw_average_bps']['emulated'] / 1e6:.1f} Mb/s "
          f"of payload), each also received, ICRC-checked and ACKed by the peer nicd; "
          f"retransmitted {summary['counters']['retransmitted_bytes']:,} B, timeouts {summary['counters']['timeouts']}")
    worst_rss, worst_peak = max(m[1] for m in memory), max(m[2] for m in memory)
    print(f"3. nicd memory: RSS ≤ {worst_rss / 1024:.1f} MB, peak ≤ {worst_peak / 1024:.1f} MB over {len(memory)} "
          f"processes [target ≤ {RSS_TARGET_BYTES >> 20} MB: {'met' if worst_peak * 1024 <= RSS_TARGET_BYTES else 'MISSED'}]")


if __name__ == "__main__":
    main()
