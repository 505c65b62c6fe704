"""Explicit registries (STYLE.md 4): engines, congestion-control algorithms, schedulers and
traffic patterns are registered by name in one function each; an unknown name is answered
with the list of valid ones."""

from __future__ import annotations

from typing import Generic, Iterator, TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    def __init__(self, what: str, name: str, known: list[str]):
        self.what, self.name, self.known = what, name, known
        super().__init__(f"unknown {what} {name!r}; expected one of: {', '.join(known)}")

    def __str__(self) -> str:
        return self.args[0]


class Registry(Generic[T]):
    def __init__(self, what: str):
        self.what = what
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> None:
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._items[name] = item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownName(self.what, name, sorted(self._items)) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
