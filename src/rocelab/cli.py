"""The `rocelab` console script: exactly the invoke tasks of rocelab.tasks, under another name."""

from __future__ import annotations

from invoke import Program

from rocelab import __version__, tasks


def main() -> None:
    Program(namespace=tasks.ns, name="rocelab", binary="rocelab", version=__version__).run()
