"""Input errors that name the user's file, the path inside it, and what was expected.

Validation collects every problem, then stops once (STYLE.md rule 3). The CLI turns an
InputError into its message on stderr and exit status 2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

EXIT_USAGE = 2
GROUP_AFTER = 5  # more problems of one kind than this are told as one line with a count
SHOWN_PLACES = 3
_VALUE = re.compile(r"'[^']*'|\"[^\"]*\"|\d+")


@dataclass(frozen=True)
class Problem:
    file: str
    path: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.file}: {self.path}" if self.path else self.file
        text = f"{where}: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text


def _kind(problem: Problem) -> tuple[str, str, str]:
    """Problems that differ only in their values (a port name, a number) are of one kind."""
    return problem.file, _VALUE.sub("…", problem.message), _VALUE.sub("…", problem.hint)


def describe(problems: list[Problem]) -> str:
    """One line a problem; a kind with more than GROUP_AFTER of them, one line with a count
    and the first few places, so a production file with thousands of ports stays readable."""
    groups: dict[tuple[str, str, str], list[Problem]] = {}
    for problem in problems:
        groups.setdefault(_kind(problem), []).append(problem)
    lines = []
    for items in groups.values():
        if len(items) <= GROUP_AFTER:
            lines += [str(p) for p in items]
            continue
        first = items[0]
        places = ", ".join(p.path for p in items[:SHOWN_PLACES])
        text = (f"{first.file}: {len(items)} alike, at {places} and {len(items) - SHOWN_PLACES} more; "
                f"the first: {first.message}")
        lines.append(f"{text} (hint: {first.hint})" if first.hint else text)
    return "\n".join(lines)


class InputError(Exception):
    """One or more problems in user input; exit status 2. The same problem found twice is
    kept once."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(dict.fromkeys(problems))
        super().__init__(describe(self.problems))


@dataclass
class Problems:
    """Collects problems about one file; `raise_if_any` stops once with all of them."""

    file: str
    items: list[Problem] = field(default_factory=list)

    def add(self, path: str, message: str, hint: str = "") -> None:
        self.items.append(Problem(self.file, path, message, hint))

    def raise_if_any(self) -> None:
        if self.items:
            raise InputError(self.items)


def read_text(source: str) -> str:
    """A user's text file, or an InputError naming it: unreadable, or not UTF-8."""
    try:
        with open(source, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise InputError([Problem(source, "", f"cannot read the file: {e.strerror}")]) from e
    except UnicodeDecodeError as e:
        raise InputError([Problem(source, "", f"is not UTF-8 text: {e.reason} at byte "
                                              f"{e.start}")]) from e
