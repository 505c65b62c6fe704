"""A host's NIC commands, shaped as NVIDIA's and perftest's: `mlnx_qos`, `cma_roce_tos`,
`show_gids`, `ethtool [-S]`, the ConnectX sysfs knobs and RoCE counters (`sysfs`), and
perftest's `ib_write_bw`, `ib_write_lat`, `ib_read_bw` and `ib_read_lat` (server and client).

Every command is a small function over the host node (rocelab.nodecli.node.HostNode, click's
`obj`): a show prints (rocelab.reporting.nic_cli), a change builds a new HostNicConfig and
commits it to nicd live. An error prints "Error: …" and exits 1, a usage error exits 2, and
in both cases nothing changed. What nicd does not emulate (ETS, rate limits, buffers) is
refused by name rather than accepted and ignored.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import click

from rocelab.ethernet import PRIORITIES
from rocelab.nodecli.node import HostNode, NicError
from rocelab.qos.model import DSCP_VALUES
from rocelab.qos.nic import HostNicConfig, sysfs_setting
from rocelab.roce.config import NicConfig
from rocelab.reporting import nic_cli

pass_host = click.make_pass_decorator(HostNode)
PERFTEST_PORT = 18515  # perftest's default TCP port for its out-of-band exchange
MAX_OUTSTANDING_READS = NicConfig.max_rd_atomic  # what the emulated device offers, as ConnectX's 16
NOT_EMULATED = {"prio_tc": "nicd keeps 802.1Q's priority → TC order", "tsa": "nicd has no ETS",
                "tcbw": "nicd has no ETS", "ratelimit": "nicd has no per-TC rate limit",
                "cable_len": "nicd has no receive buffers to size", "buffer_size": "nicd has no receive buffers",
                "prio2buffer": "nicd has no receive buffers"}


def _commit(node: HostNode, new: HostNicConfig) -> None:
    try:
        lines = node.commit(new)
    except NicError as exc:
        raise click.ClickException(str(exc)) from None
    for line in lines:
        click.echo(line, err=True)


def _interface(node: HostNode, name: str) -> None:
    if name != node.iface:
        raise click.ClickException(f"{name}: no such RoCE interface on {node.name} (its port is {node.iface})")


# --- mlnx_qos


def _flags(ctx, param, text: str | None) -> frozenset[int] | None:
    if text is None:
        return None
    values = text.split(",")
    if len(values) != PRIORITIES or any(v not in ("0", "1") for v in values):
        raise click.BadParameter(f"{text!r}: expected eight 0/1 flags, priority 0 first, e.g. 0,0,0,1,0,0,0,0")
    return frozenset(p for p, v in enumerate(values) if v == "1")


def _dscp2prio_change(ctx, param, text: str | None) -> tuple[str, int, int] | None:
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) != 3 or parts[0] not in ("set", "del") or not all(p.isdigit() for p in parts[1:]) \
            or not int(parts[1]) < DSCP_VALUES or not int(parts[2]) < PRIORITIES:
        raise click.BadParameter(f"{text!r}: expected set,DSCP,PRIO or del,DSCP,PRIO (DSCP 0-63, PRIO 0-7)")
    return parts[0], int(parts[1]), int(parts[2])


def _dscp2prio(dscp_to_priority: tuple[int, ...], change: tuple[str, int, int]) -> tuple[int, ...]:
    verb, dscp, prio = change
    mapping = list(dscp_to_priority)
    if verb == "del":
        if mapping[dscp] != prio:
            raise click.BadParameter(f"DSCP {dscp} is on priority {mapping[dscp]}, not {prio}",
                                     param_hint="'--dscp2prio'")
        prio = dscp >> 3  # the device's default for that DSCP
    mapping[dscp] = prio
    return tuple(mapping)


def _refusing(option: str):
    def refuse(ctx, param, value):
        if value is not None:
            raise click.ClickException(f"--{option} is not emulated: {NOT_EMULATED[option]}")
    return refuse


def _not_emulated(fn):
    for option in reversed(NOT_EMULATED):
        fn = click.option(f"--{option}", expose_value=False, callback=_refusing(option),
                          help=f"not emulated ({NOT_EMULATED[option]})")(fn)
    return fn


@click.command(name="mlnx_qos")
@click.option("-i", "--interface", required=True, help="the RoCE interface")
@click.option("--trust", type=click.Choice(["pcp", "dscp"]), help="classify received frames by PCP or DSCP")
@click.option("-f", "--pfc", callback=_flags, help="PFC per priority, eight 0/1 flags: 0,0,0,1,0,0,0,0")
@click.option("--dscp2prio", callback=_dscp2prio_change, help="set,DSCP,PRIO or del,DSCP,PRIO")
@_not_emulated
@pass_host
def mlnx_qos(node: HostNode, interface, trust, pfc, dscp2prio):
    """Show or set the NIC's QoS (trust, PFC, DSCP → priority), as NVIDIA's mlnx_qos."""
    _interface(node, interface)
    current = node.running()
    changes: dict = {}
    if trust:
        changes["trust"] = trust
    if pfc is not None:
        changes["pfc_priorities"] = pfc
    if dscp2prio:
        changes["dscp_to_priority"] = _dscp2prio(current.dscp_to_priority, dscp2prio)
    if changes:
        _commit(node, dataclasses.replace(current, **changes))
    click.echo(nic_cli.mlnx_qos(node.running()))


# --- cma_roce_tos


@click.command(name="cma_roce_tos")
@click.option("-d", "--device", default=nic_cli.DEVICE, show_default=True, help="the RDMA device")
@click.option("-p", "--port", type=click.IntRange(1, 1), default=1, help="the device's port")
@click.option("-t", "--tos", type=click.IntRange(0, 255), help="the ToS RDMA-CM gives RoCE connections")
@pass_host
def cma_roce_tos(node: HostNode, device, port, tos):
    """Show or set the default ToS of RDMA-CM's RoCE connections (its DSCP is ToS >> 2)."""
    if device != nic_cli.DEVICE:
        raise click.ClickException(f"{device}: no such RDMA device (this host has {nic_cli.DEVICE})")
    if tos is None:
        click.echo(node.running().roce_tos)
        return
    _commit(node, dataclasses.replace(node.running(), roce_tos=tos))


# --- sysfs


def _write_knob(node: HostNode, current: HostNicConfig, path: str, value: str) -> HostNicConfig:
    try:
        what, name, number = sysfs_setting(path, value)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if what != "roce_tos" and f"/net/{node.iface}/" not in path:
        raise click.ClickException(f"{path}: no such file ({node.name}'s RoCE port is {node.iface})")
    if what == "roce_tos":
        return dataclasses.replace(current, roce_tos=number)
    if what == "roce_np.enable":
        if not number:
            raise click.ClickException(f"{path}: not emulated: nicd's notification point always answers CE with CNPs")
        return current
    if what == "roce_rp.enable":
        enabled = current.rp_enabled | {name} if number else current.rp_enabled - {name}
        return dataclasses.replace(current, rp_enabled=frozenset(enabled))
    files = dict(current.dcqcn_rp if what == "roce_rp" else current.dcqcn_np)
    if name not in files:
        raise click.ClickException(f"{path}: no such file; {what}: {', '.join(sorted(files))}")
    if (what, name) == ("roce_rp", "rpg_max_rate") and number:
        raise click.ClickException(f"{path}: not emulated: a QP's rate is capped by the port only (0: no cap)")
    if (what, name) == ("roce_np", "cnp_802p_prio") and number != files[name]:
        raise click.ClickException(f"{path}: nicd sends CNPs on the priority dscp2prio gives cnp_dscp "
                                   f"({files[name]}): change the map (mlnx_qos --dscp2prio) or cnp_dscp")
    files[name] = number
    return dataclasses.replace(current, **{"dcqcn_rp" if what == "roce_rp" else "dcqcn_np": files})


@click.command(name="sysfs")
@click.argument("path", required=False, default="/")
@click.argument("value", required=False)
@pass_host
def sysfs(node: HostNode, path, value):
    """Read or write the NIC's sysfs and configfs knobs: DCQCN's roce_np/roce_rp files and their
    enable/P, and rdma_cm's default_roce_tos; read the port's RoCE hw_counters.

    sysfs [PATH]: every file under PATH as PATH=VALUE, as docs/hosts.md's collection loop prints
    them; sysfs FILE VALUE: write (echo VALUE > FILE)."""
    current = node.running()
    files = nic_cli.sysfs_files(current, node.iface)
    # The counters only when asked for by path: `sysfs` alone is the collection loop of docs/hosts.md.
    counters = (nic_cli.hw_counters(node.counters()["counters"], node.runs_dcqcn())
                if path.startswith("/sys/class/infiniband") else {})
    if value is None:
        files |= counters
        under = {p: v for p, v in files.items() if p == path or p.startswith(path.rstrip("/") + "/")}
        if not under:
            raise click.ClickException(f"{path}: no such file or directory")
        click.echo(files[path] if path in files else "\n".join(f"{p}={v}" for p, v in under.items()))
        return
    if path in counters:
        raise click.ClickException(f"{path}: read-only (a counter of the NIC)")
    _commit(node, _write_knob(node, current, path, value))


# --- ethtool


@click.command(name="ethtool")
@click.option("-S", "--statistics", "statistics", is_flag=True, help="Show adapter statistics")
@click.argument("devname")
@pass_host
def ethtool(node: HostNode, statistics, devname):
    """The RoCE port's settings, or with -S its NIC statistics (mlx5's names, for what nicd
    counts). The veth under it: `ip -s link`."""
    _interface(node, devname)
    if statistics:
        reply = node.counters()
        pfc = node.running().pfc_priorities or frozenset()
        click.echo(nic_cli.ethtool_stats(reply["counters"], reply["tdf"], pfc))
        return
    click.echo(nic_cli.ethtool_settings(devname, node.port_rate_bps()))


# --- show_gids


@click.command(name="show_gids")
@click.argument("device", required=False)
@pass_host
def show_gids(node: HostNode, device):
    """The RDMA devices' GID tables"""
    if device not in (None, nic_cli.DEVICE):
        raise click.ClickException(f"{device}: no such RDMA device (this host has {nic_cli.DEVICE})")
    click.echo(nic_cli.show_gids(node.iface, node.mac, node.address))


# --- perftest


def _perftest_options(fn):
    for option in reversed((
            click.argument("server", required=False),
            click.option("-d", "--ib-dev", default=nic_cli.DEVICE, help="the RDMA device"),
            click.option("-p", "--port", type=click.IntRange(1, 65535), default=PERFTEST_PORT, help="the server's port"),
            click.option("-x", "--gid-index", type=click.IntRange(0, 1), default=1, help="GID index (1: the IPv4 GID)"))):
        fn = option(fn)
    return fn


def _bw_command(name: str, verb: str, test: str, what: str) -> click.Command:
    @click.command(name=name, help=f"{what}, as perftest's: run it with no address on the server host first, then "
                   "with the server's address on the client. Figures are production-equivalent.")
    @_perftest_options
    @click.option("-s", "--size", type=click.IntRange(1, 1 << 30), default=65536, show_default=True,
                  help="message size")
    @click.option("-q", "--qp", type=click.IntRange(1, 64), default=1, show_default=True, help="QPs")
    @click.option("-D", "--duration", type=click.FloatRange(0.1, 600), default=5.0, show_default=True,
                  help="seconds to stream (wall clock, emulated)")
    @click.option("--report_gbits", is_flag=True, help="report Gb/sec instead of MB/sec")
    @pass_host
    def command(node: HostNode, server, ib_dev, port, gid_index, size, qp, duration, report_gbits, outs=None):
        from rocelab.traffic.job import run_bw

        def run(peer: str) -> dict:
            # WRITE: the client pushes to the server; READ: the client pulls from the server.
            src, dst = (peer, node.name) if verb == "read" else (node.name, peer)
            summary = run_bw(node.record, src, dst, message_bytes=size, qps=qp, duration_s=duration, verb=verb,
                             outstanding_reads=outs)
            return {k: v for k, v in summary.items() if k != "job"}

        _perftest(node, test, qp, ib_dev, server, port, run, lambda summary: nic_cli.perftest_bw(summary, report_gbits))

    if verb == "read":  # perftest's -o: how many READs each QP keeps outstanding
        command = click.option("-o", "--outs", type=click.IntRange(1, MAX_OUTSTANDING_READS), default=None,
                               help="outstanding READs per QP (default: the NIC's max_rd_atomic, "
                                    f"{MAX_OUTSTANDING_READS} unless the lab's roce: sets it)")(command)
    return command


def _lat_command(name: str, verb: str, test: str, what: str) -> click.Command:
    @click.command(name=name, help=f"{what}, as perftest's. Server first (no address), then the client. "
                   "Production-equivalent usec.")
    @_perftest_options
    @click.option("-s", "--size", type=click.IntRange(1, 1 << 23), default=2, show_default=True, help="message size")
    @click.option("-n", "--iters", type=click.IntRange(1, 100_000), default=1000, show_default=True,
                  help="iterations")
    @pass_host
    def command(node: HostNode, server, ib_dev, port, gid_index, size, iters):
        from rocelab.traffic.job import run_latency

        _perftest(node, test, 1, ib_dev, server, port,
                  lambda peer: run_latency(node.record, node.name, peer, message_bytes=size, iterations=iters,
                                           verb=verb),
                  nic_cli.perftest_lat)

    return command


ib_write_bw = _bw_command("ib_write_bw", "write", "RDMA_Write BW Test", "RDMA WRITE bandwidth, client to server")
ib_read_bw = _bw_command("ib_read_bw", "read", "RDMA_Read BW Test",
                         "RDMA READ bandwidth: the client reads the server's memory")
ib_write_lat = _lat_command("ib_write_lat", "write", "RDMA_Write Latency Test",
                            "RDMA WRITE latency: round trips of one write each way, half of each the latency")
ib_read_lat = _lat_command("ib_read_lat", "read", "RDMA_Read Latency Test",
                           "RDMA READ latency: one read of the server's memory at a time, each whole round trip "
                           "the latency")


def _perftest(node: HostNode, test: str, qps: int, device: str, server: str | None, port: int, run, render) -> None:
    if device != nic_cli.DEVICE:
        raise click.ClickException(f"{device}: no such RDMA device (this host has {nic_cli.DEVICE})")
    header = nic_cli.perftest_header(test, qps, node.pmtu_bytes())
    if server is None:
        _serve(node, port, header, render)
    else:
        _client(node, server, port, header, run, render)


def _serve(node: HostNode, port: int, header: str, render) -> None:
    waiting = node.home / f"perftest-{port}.json"
    done = waiting.with_suffix(".result.json")
    node.home.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)
    waiting.write_text(json.dumps({"pid": os.getpid()}))
    click.echo(f"\n************************************\n* Waiting for client to connect... *\n"
               f"************************************\n{header}")
    try:
        while not done.exists():
            time.sleep(0.2)
        summary = json.loads(done.read_text())
    finally:
        waiting.unlink(missing_ok=True)
        done.unlink(missing_ok=True)
    if "error" in summary:
        raise click.ClickException(summary["error"])
    click.echo(render(summary))


def _client(node: HostNode, server: str, port: int, header: str, run, render) -> None:
    from rocelab.traffic.job import JobFailed

    peer = node.host_at(server)
    waiting = node.folder / (peer or "") / f"perftest-{port}.json"
    if peer is None or not waiting.exists() or not _alive(json.loads(waiting.read_text())["pid"]):
        raise click.ClickException(f"Couldn't connect to {server}:{port} (no perftest server waits there: "
                                   "run the same test with no address on that host first)")
    click.echo(header)
    done = waiting.with_suffix(".result.json")
    try:
        summary = run(peer)
    except JobFailed as exc:
        done.write_text(json.dumps({"error": f"the test failed: {exc}"}))
        raise click.ClickException(f"the test failed: {exc}") from None
    done.write_text(json.dumps(summary))
    click.echo(render(summary))
    click.echo(summary["fidelity"]["line"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


COMMANDS = {"mlnx_qos": mlnx_qos, "cma_roce_tos": cma_roce_tos, "sysfs": sysfs, "show_gids": show_gids,
            "ethtool": ethtool, "ib_write_bw": ib_write_bw, "ib_write_lat": ib_write_lat, "ib_read_bw": ib_read_bw,
            "ib_read_lat": ib_read_lat}
