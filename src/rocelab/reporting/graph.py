"""Pictures of a fabric: a text tree for the terminal and a layered PNG (matplotlib)."""

from __future__ import annotations

from pathlib import Path

from rich.tree import Tree

from rocelab.model.topology import Fabric
from rocelab.units import format_rate

LAYER_Y = {"spine": 2.0, "leaf": 1.0, "host": 0.0}
ROLE_COLOUR = {"spine": "#4c72b0", "leaf": "#55a868", "host": "#c44e52"}


def text_tree(fabric: Fabric) -> Tree:
    """Spines, then leaves with their uplinks and hosts."""
    tree = Tree(f"[bold]{fabric.name}[/bold] ({fabric.source})")
    for role in ("spine", "leaf", "host"):
        nodes = [n for n in fabric.nodes if n.role == role]
        if not nodes:
            continue
        branch = tree.add(f"[bold]{role}s[/bold]")
        for node in nodes:
            leaf = branch.add(f"{node.name}")
            for port in node.ports:
                link = fabric.links[port.link]
                peer = fabric.peer(port)
                leaf.add(f"{port.name} {port.address} → {peer.node}:{peer.name} {peer.address.ip} "
                         f"({format_rate(link.rate_bps)}b/s, {link.delay_s * 1e9:.0f} ns)")
    return tree


def _positions(fabric: Fabric) -> dict[str, tuple[float, float]]:
    pos = {}
    layers = {role: [n.name for n in fabric.nodes if n.role == role] for role in LAYER_Y}
    widest = max(len(v) for v in layers.values())
    for role, names in layers.items():
        for i, name in enumerate(names):
            pos[name] = ((i + 0.5) * widest / len(names), LAYER_Y[role])
    return pos


def draw(fabric: Fabric, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    pos = _positions(fabric)
    width = max(6.0, 1.3 * max(sum(1 for n in fabric.nodes if n.role == r) for r in LAYER_Y))
    fig, ax = plt.subplots(figsize=(width, 5.5))
    small = len(fabric.nodes) <= 12  # addresses on every link only where they stay legible
    for link in fabric.links:
        (xa, ya), (xb, yb) = pos[link.a.node], pos[link.b.node]
        ax.plot([xa, xb], [ya, yb], color="#999999", linewidth=1, zorder=1)
        if small:
            for port, (x0, y0), (x1, y1) in ((link.a, (xa, ya), (xb, yb)), (link.b, (xb, yb), (xa, ya))):
                ax.annotate(f"{port.name}\n{port.address.ip}", (x0 + 0.22 * (x1 - x0), y0 + 0.22 * (y1 - y0)),
                            fontsize=6, ha="center", va="center", color="#333333",
                            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
    for node in fabric.nodes:
        x, y = pos[node.name]
        ax.scatter([x], [y], s=900, color=ROLE_COLOUR[node.role], zorder=2)
        ax.annotate(node.name, (x, y), ha="center", va="center", color="white", fontsize=8, weight="bold", zorder=3)
    rates = sorted({format_rate(l.rate_bps) for l in fabric.links})
    ax.set_title(f"{fabric.name}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, "
                 f"{len(fabric.links)} links at {', '.join(rates)}b/s")
    ax.set_yticks(list(LAYER_Y.values()), [f"{r}s" for r in LAYER_Y])
    ax.set_xticks([])
    ax.set_ylim(-0.5, 2.5)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
