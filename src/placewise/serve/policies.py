"""Batching policies, registry-keyed (``BATCHERS``), each a small class.

A batcher sits in front of the plan's first stage. Whenever that stage is free and
requests are queued, the simulator asks ``decide(queued, oldest_wait_s)``: the number of
queued requests to send as one batch now, or 0 to wait; and ``deadline_s(oldest_arrival_s)``:
until when it may wait (``inf``: until enough requests arrive). The simulator asks again at
every arrival and at the deadline.

- ``none``: every request alone, as soon as the stage is free.
- ``static:B``: exactly ``B`` requests per batch; waits, without a time limit, until ``B``
  are queued.
- ``dynamic:max_batch=B,max_delay=D,preferred=P1/P2/...``: Triton's dynamic batcher rule.
  When the queue holds ``B`` or more requests, send ``B``. Otherwise, if a preferred size
  can be formed, send the largest preferred size not above the queue's length. Otherwise
  wait until the oldest queued request has waited ``D``, then send everything queued (at
  most ``B``). Without preferred sizes, the batcher sends ``B`` as soon as ``B`` are
  queued, else whatever is queued once the oldest has waited ``D``. (Triton: "the dynamic
  batcher ... will form batches of the preferred size(s) when possible ... if a preferred
  size cannot be formed it will send a batch of the largest size possible that is less
  than the max batch size once the oldest request has waited max_queue_delay".)

>>> b = parse_batching("dynamic:max_batch=8,max_delay=2ms,preferred=4")
>>> b.decide(3, 0.0), b.decide(5, 0.0), b.decide(9, 0.0), b.decide(3, 0.002)
(0, 4, 8, 3)
>>> parse_batching("static:4").decide(3, 10.0), parse_batching("none").decide(5, 0.0)
(0, 1)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from placewise.errors import InputError
from placewise.units import parse_seconds

__all__ = ["BATCHERS", "Batcher", "DynamicBatcher", "NoBatcher", "StaticBatcher",
           "max_batch", "parse_batching"]


class Batcher:
    """The interface (see the module docstring)."""

    name = ""

    def decide(self, queued: int, oldest_wait_s: float) -> int:
        raise NotImplementedError

    def deadline_s(self, oldest_arrival_s: float) -> float:
        return math.inf

    def describe(self) -> str:
        return self.name


@dataclass(frozen=True)
class NoBatcher(Batcher):
    name = "none"

    def decide(self, queued: int, oldest_wait_s: float) -> int:
        return 1 if queued else 0


@dataclass(frozen=True)
class StaticBatcher(Batcher):
    size: int
    name = "static"

    def decide(self, queued: int, oldest_wait_s: float) -> int:
        return self.size if queued >= self.size else 0

    def describe(self) -> str:
        return f"static:{self.size}"


@dataclass(frozen=True)
class DynamicBatcher(Batcher):
    batch: int
    max_delay_s: float
    preferred: tuple[int, ...] = ()
    name = "dynamic"

    def decide(self, queued: int, oldest_wait_s: float) -> int:
        if queued >= self.batch:
            return self.batch
        fits = [p for p in self.preferred if p <= queued]
        if fits:
            return max(fits)
        if queued and oldest_wait_s >= self.max_delay_s - 1e-15:
            return queued
        return 0

    def deadline_s(self, oldest_arrival_s: float) -> float:
        return oldest_arrival_s + self.max_delay_s

    def describe(self) -> str:
        pref = "/".join(map(str, self.preferred))
        return (f"dynamic:max_batch={self.batch},max_delay={self.max_delay_s:g}s"
                + (f",preferred={pref}" if pref else ""))


def _positive(text: str, place: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise InputError(f"{text!r} is not a positive integer", place=place)
    return int(text)


def _none(args: str) -> Batcher:
    if args:
        raise InputError("'none' takes no options", place="--batching")
    return NoBatcher()


def _static(args: str) -> Batcher:
    return StaticBatcher(_positive(args, "--batching static:B"))


def _dynamic(args: str) -> Batcher:
    opts: dict[str, str] = {}
    for part in filter(None, args.split(",")):
        key, sep, value = part.partition("=")
        if not sep or key not in ("max_batch", "max_delay", "preferred"):
            raise InputError(f"unknown option {part!r} (known: max_batch, max_delay, "
                             f"preferred)", place="--batching dynamic")
        opts[key] = value
    if "max_batch" not in opts:
        raise InputError("dynamic batching needs max_batch=B", place="--batching dynamic")
    batch = _positive(opts["max_batch"], "--batching dynamic max_batch")
    delay = parse_seconds(opts.get("max_delay", "0"), "--batching dynamic max_delay")
    pref = tuple(sorted({_positive(p, "--batching dynamic preferred")
                         for p in opts.get("preferred", "").split("/") if p}))
    if any(p > batch for p in pref):
        raise InputError(f"preferred sizes {pref} exceed max_batch={batch}",
                         place="--batching dynamic preferred")
    return DynamicBatcher(batch, delay, pref)


def max_batch(batcher: Batcher) -> int:
    """The largest batch ``batcher`` ever sends (its decision with an endless queue whose
    oldest request has waited forever).

    >>> max_batch(parse_batching("none")), max_batch(parse_batching("static:4"))
    (1, 4)
    """
    return max(1, int(batcher.decide(2**62, math.inf)))


#: policy name -> parser of its options (the text after ``name:``)
BATCHERS: dict[str, Callable[[str], Batcher]] = {
    "none": _none, "static": _static, "dynamic": _dynamic}


def parse_batching(text: str) -> Batcher:
    """``none``, ``static:B`` or ``dynamic:max_batch=B,max_delay=D,preferred=P1/P2``."""
    name, _, args = text.strip().partition(":")
    if name not in BATCHERS:
        raise InputError(f"unknown batching policy {name!r} (known: "
                         f"{', '.join(sorted(BATCHERS))})", place="--batching")
    return BATCHERS[name](args)
