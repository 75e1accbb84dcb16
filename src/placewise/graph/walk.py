"""Graph walks every pass shares: one stable topological order and one last-use analysis.

Both work on plain indices (``0..n-1`` in the caller's original order), so the IR, fusion,
the placement problem and the program builder call the same code on their own node types:

- ``topological_order``: Kahn's algorithm; among the nodes ready at a step, the one with the
  smallest ``priority`` (by default its index: the original order) comes first, so a graph
  already in topological order keeps its order and any other keeps it "as much as it can".
  On a cycle the order is shorter than ``n``: the nodes on a cycle or after one are missing,
  and the caller names them in its own error.
- ``last_use``: the index of the last step that reads each value (a value that is written
  and never read dies at its first writer), so a walker frees it right after that step.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, TypeVar

__all__ = ["last_use", "topological_order"]

K = TypeVar("K", bound=Hashable)


def topological_order(preds: Sequence[Iterable[int]], priority: Sequence[Any] | None = None,
                      *, depth_first: bool = False) -> list[int]:
    """Indices ``0..n-1`` in a topological order of the edges ``p -> v`` for ``p`` in
    ``preds[v]`` (a repeated edge counts once per repeat, consistently).

    Stable (the default): whenever several nodes are ready, the one with the smallest
    ``(priority[v], v)`` comes next (``priority`` defaults to the index). ``depth_first``:
    the ready nodes form a stack instead (the node freed last comes next; ``priority`` is
    ignored) -- the order the program builder's gate analysis has always walked.
    On a cycle the result is shorter than ``n``; it holds exactly the nodes that no cycle
    precedes, whichever rule picks among the ready ones.

    >>> topological_order([[], [], [0, 1], [0]])  # already ordered: kept
    [0, 1, 2, 3]
    >>> topological_order([[1], [], [], [2]])  # 0 waits for 1, then the original order
    [1, 0, 2, 3]
    >>> topological_order([[], [], []], priority=[5, 1, 3])
    [1, 2, 0]
    >>> topological_order([[], [0], [0]], depth_first=True)  # 2 was freed last
    [0, 2, 1]
    >>> topological_order([[2], [0], [1], []])  # 0 -> 1 -> 2 -> 0: only 3 is free
    [3]
    """
    n = len(preds)
    indeg = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for v, ps in enumerate(preds):
        for p in ps:
            succ[p].append(v)
            indeg[v] += 1
    out: list[int] = []
    if depth_first:
        stack = [v for v in range(n) if indeg[v] == 0]
        while stack:
            v = stack.pop()
            out.append(v)
            for w in succ[v]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    stack.append(w)
        return out
    key = range(n) if priority is None else priority
    ready = [(key[v], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(ready)
    while ready:
        _, v = heapq.heappop(ready)
        out.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(ready, (key[w], w))
    return out


def last_use(reads: Sequence[Iterable[K]],
             writes: Sequence[Iterable[K]] | None = None) -> dict[K, int]:
    """For each value, the index of the last step that reads it: ``reads[i]`` are the values
    step ``i`` reads, ``writes[i]`` (optional) those it writes. A value that no step reads
    dies at its first writer. A walker may drop a value right after the step ``last_use``
    gives it.

    >>> last_use([["x"], ["x", "y"], ["y"]])
    {'x': 1, 'y': 2}
    >>> last_use([[], ["a"], []], writes=[["a"], ["b"], ["c"]])
    {'a': 1, 'b': 1, 'c': 2}
    """
    last: dict[K, int] = {}
    for i, rs in enumerate(reads):
        if writes is not None:
            for k in writes[i]:
                last.setdefault(k, i)
        for k in rs:
            last[k] = i
    return last
