"""Input errors that name the user's file, the path inside it, and what was expected.

Validation collects every problem, then stops once (STYLE.md rule 3). The CLI turns an
InputError into its message on stderr and exit status 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXIT_USAGE = 2


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


class InputError(Exception):
    """One or more problems in user input; exit status 2."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


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
