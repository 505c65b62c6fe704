"""How rocelab's tasks meet invoke: the same behaviour from `invoke TASK` and `rocelab TASK`.

invoke treats every positional argument as required. rocelab's tasks have optional ones
(`down [LAB]`, `graph [LAB]`, `show counters [NODE]`), declared in invoke's own words for
an argument whose value may be left out: `@task(positional=["lab"], optional=["lab"])`.
invoke's parser hands such an argument the next word when there is one; when the task's
words end without one, `_complete_context` below drops it from the positionals the
parser still waits for, so it keeps its default instead of failing the command.

Bad words on the command line are input errors like any other: exit status 2 and what was
expected, never a traceback. invoke's parser ends a command it cannot parse with its own
status 1, and a value its cast refuses (`--qps x` for a whole number) with a traceback;
`_see_value` names the option and the form it takes, and `_parse_argv` turns every parse
error into exit 2.

What follows `--` (`invoke exec leaf1 -- vtysh -c 'show ip bgp summary'`) is taken as the
words the shell gave (`remainder_argv`): invoke hands a task those words joined with spaces
(its core parser does, before tasks.py is loaded), which would split `-c`'s one argument in four.

The extension is one wrapper on invoke's parser, not on a collection: `invoke` (which
loads tasks.py and copies its collection into a plain Collection) and the `rocelab`
console script parse with the same parser class, so both doors behave alike. It is
installed when rocelab.tasks is imported, once.
"""

from __future__ import annotations

import shlex
import sys

from invoke.exceptions import Exit, ParseError
from invoke.parser.parser import ParseMachine, Parser

_INVOKE_COMPLETE_CONTEXT = ParseMachine.complete_context
_INVOKE_SEE_VALUE = ParseMachine.see_value
_INVOKE_SEE_POSITIONAL = ParseMachine.see_positional_arg
_INVOKE_PARSE_ARGV = Parser.parse_argv
USAGE_ERROR = 2
_FORMS = {int: "a whole number", float: "a number"}


def _complete_context(self: ParseMachine) -> None:
    # self.context is the parser's own copy of the task's context: changing it changes no task.
    if self.context is not None:
        self.context.positional_args = [a for a in self.context.positional_args
                                        if not (a.optional and a.value is None)]
    _INVOKE_COMPLETE_CONTEXT(self)


def _refused(argument, value: str) -> ParseError:
    name = argument.name.replace("_", "-")
    form = _FORMS.get(argument.kind, getattr(argument.kind, "__name__", str(argument.kind)))
    return ParseError(f"{name if argument.positional else '--' + name}: {value!r} is not {form}")


def _see_value(self: ParseMachine, value: str) -> None:
    try:
        _INVOKE_SEE_VALUE(self, value)
    except ValueError:
        raise _refused(self.flag, value) from None


def _see_positional_arg(self: ParseMachine, value: str) -> None:
    waiting = next((a for a in self.context.positional_args if a.value is None), None)
    try:
        _INVOKE_SEE_POSITIONAL(self, value)
    except ValueError:
        raise _refused(waiting, value) from None


def _parse_argv(self: Parser, argv: list[str]):
    try:
        return _INVOKE_PARSE_ARGV(self, argv)
    except ParseError as exc:
        raise Exit(f"rocelab: {exc} (see --help TASK)", code=USAGE_ERROR) from None


def remainder_argv(remainder: str, argv: list[str] | None = None) -> list[str]:
    """The words after `--` as the shell gave them (this process's argv), else the remainder
    invoke joined, split again."""
    argv = sys.argv if argv is None else argv
    return argv[argv.index("--") + 1:] if "--" in argv else shlex.split(remainder)


def install() -> None:
    """Let optional positionals be left out, and end bad words with exit 2 (idempotent)."""
    ParseMachine.complete_context = _complete_context
    ParseMachine.see_value = _see_value
    ParseMachine.see_positional_arg = _see_positional_arg
    Parser.parse_argv = _parse_argv
