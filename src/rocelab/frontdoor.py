"""How rocelab's tasks meet invoke: the same behaviour from `invoke TASK` and `rocelab TASK`.

invoke treats every positional argument as required. rocelab's tasks have optional ones
(`down [LAB]`, `graph [LAB]`, `show counters [NODE]`), declared in invoke's own words for
an argument whose value may be left out: `@task(positional=["lab"], optional=["lab"])`.
invoke's parser hands such an argument the next word when there is one; when the task's
words end without one, `_complete_context` below drops it from the positionals the
parser still waits for, so it keeps its default instead of failing the command.

The extension is one wrapper on invoke's parser, not on a collection: `invoke` (which
loads tasks.py and copies its collection into a plain Collection) and the `rocelab`
console script parse with the same parser class, so both doors behave alike. It is
installed when rocelab.tasks is imported, once.
"""

from __future__ import annotations

from invoke.parser.parser import ParseMachine

_INVOKE_COMPLETE_CONTEXT = ParseMachine.complete_context


def _complete_context(self: ParseMachine) -> None:
    # self.context is the parser's own copy of the task's context: changing it changes no task.
    if self.context is not None:
        self.context.positional_args = [a for a in self.context.positional_args
                                        if not (a.optional and a.value is None)]
    _INVOKE_COMPLETE_CONTEXT(self)


def install() -> None:
    """Let optional positionals be left out (idempotent)."""
    ParseMachine.complete_context = _complete_context
