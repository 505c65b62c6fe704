"""Reading a user's YAML file so that errors can point at the line of a value."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rocelab.errors import InputError, Problem
from rocelab.paths import display


@dataclass(frozen=True)
class YamlDoc:
    name: str  # the file as the user would type it
    data: Any
    root: yaml.Node | None

    def line(self, *path: str | int) -> int | None:
        """1-based line of the value at `path` (keys and list indexes), if it is there."""
        node = self.root
        for step in path:
            if isinstance(node, yaml.MappingNode):
                node = next((v for k, v in node.value if k.value == step), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
                node = node.value[step]
            else:
                return None
            if node is None:
                return None
        return node.start_mark.line + 1 if node is not None else None


def load_yaml(path: Path) -> YamlDoc:
    name = display(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError([Problem(name, "", f"cannot be read: {exc.strerror}")]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise InputError([Problem(name, where, f"is not valid YAML: {reason}")]) from None
    return YamlDoc(name, data, root)


def yaml_path(*path: str | int) -> str:
    """('topology', 'links', 3, 'endpoints', 1) → 'topology.links[3].endpoints[1]'."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


def at(doc: YamlDoc, *path: str | int) -> str:
    """A YAML path with the line it stands on, for error messages."""
    where, line = yaml_path(*path), doc.line(*path)
    if line is None:
        return where
    return f"{where} (line {line})" if where else f"line {line}"
