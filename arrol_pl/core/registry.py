"""A tiny name → callable registry, so configs pick algorithms by string (as verl's ``core_algos`` does)."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T", bound=Callable)


class Registry(Generic[T]):
    """Maps names to callables; ``get`` fails with the list of known names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, *names: str) -> Callable[[T], T]:
        def wrap(fn: T) -> T:
            for name in names:
                if name in self._items:
                    raise KeyError(f"{self.kind} {name!r} is registered twice")
                self._items[name] = fn
            return fn

        return wrap

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {sorted(self._items)}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items
