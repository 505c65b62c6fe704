"""The `rocelab` console script: exactly the invoke tasks of rocelab.tasks, under another name."""

from __future__ import annotations

import sys

from invoke import Collection, Program
from invoke.parser import ParserContext

from rocelab import __version__


class _Context(ParserContext):
    """A parser context whose optional positionals (`down [LAB]`) may be left out.

    invoke treats every positional as required; the parser asks the same property both
    while eating tokens (there an unfilled optional positional must still eat the next one)
    and when the context closes (there it must not count as missing)."""

    def __init__(self, optional_positionals: frozenset[str], **kwargs):
        super().__init__(**kwargs)
        self.optional_positionals = optional_positionals

    @property
    def missing_positional_args(self):
        missing = super().missing_positional_args
        if sys._getframe(1).f_code.co_name == "complete_context":
            return [a for a in missing if a.name not in self.optional_positionals]
        return missing


class TaskCollection(Collection):
    def to_contexts(self, ignore_unknown_help=None):
        contexts = []
        for ctx in super().to_contexts(ignore_unknown_help=ignore_unknown_help):
            task = self[ctx.name]
            optional = frozenset(getattr(task.body, "optional_positionals", ()))
            contexts.append(_Context(optional, name=ctx.name, aliases=ctx.aliases, args=ctx.args.values())
                            if optional else ctx)
        return contexts


def main() -> None:
    from rocelab import tasks

    Program(namespace=tasks.ns, name="rocelab", binary="rocelab", version=__version__).run()
