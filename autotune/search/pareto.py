"""The Pareto front of (hours, dollars) points, both minimised: one rule for the report's
Pareto set, the local moves' ranking and the search budget's patience.

    front(options, key=lambda o: (o.hours, o.usd))      # nobody beats them on both
    fronts(trials, key=lambda t: tuple(t.values))       # the front, then the next, ...
    tracker = FrontTracker(); tracker.add((3.0, 10.0))  # True: the front gained a point

A point dominates another when it is no worse in every objective and better in one; equal
points do not dominate each other (both stay on the front).
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence, TypeVar

T = TypeVar("T")
Point = Sequence[float]


def weakly_dominates(a: Point, b: Point) -> bool:
    """`a` is no worse than `b` in every objective."""
    return all(x <= y for x, y in zip(a, b))


def dominates(a: Point, b: Point) -> bool:
    """`a` is no worse than `b` in every objective and better in at least one."""
    return weakly_dominates(a, b) and tuple(a) != tuple(b)


def front(items: Iterable[T], key: Callable[[T], Point]) -> list[T]:
    """The items no other item dominates, in their given order."""
    items = list(items)
    return [i for i in items if not any(dominates(key(o), key(i)) for o in items)]


def fronts(items: Iterable[T], key: Callable[[T], Point]) -> list[list[T]]:
    """Non-dominated sorting: the front, then the front of the rest, and so on."""
    rest, out = list(items), []
    while rest:
        first = front(rest, key)
        out.append(first)
        rest = [i for i in rest if i not in first]
    return out


class FrontTracker:
    """A front grown one point at a time: `add` says whether the point joined it (a point
    equal to one already there adds nothing)."""

    def __init__(self) -> None:
        self.points: list[tuple[float, ...]] = []

    def add(self, point: Point) -> bool:
        p = tuple(point)
        if any(weakly_dominates(f, p) for f in self.points):
            return False
        self.points = [f for f in self.points if not weakly_dominates(p, f)] + [p]
        return True
