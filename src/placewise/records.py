"""The one way a record becomes JSON.

A record is either a pydantic model (``Record``: frozen, no extra keys, no inf/nan; the plan
file's and the export manifest's records) or a frozen dataclass kept for speed where millions
are built (the simulator's inner loop). ``to_json`` serialises both through pydantic, so no
record writes its own ``to_json`` by hand and none can drift from its fields.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Pair:
...     a: int
...     b: tuple[float, ...]
>>> to_json(Pair(1, (0.5, 2.0)))
{'a': 1, 'b': [0.5, 2.0]}
>>> class Named(Record):
...     name: str
>>> to_json(Named(name="x"))
{'name': 'x'}
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, with_config

__all__ = ["Record", "dataclass_record", "to_json"]

_T = TypeVar("_T", bound=type)


class Record(BaseModel):
    """Base of every pydantic record: frozen, strict about keys, finite floats."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready Python values (``model_dump(mode="json")``)."""
        return self.model_dump(mode="json")


def dataclass_record(cls: _T) -> _T:
    """Mark a frozen dataclass as a record that a ``Record`` may hold (the plan file holds
    the scheduler's): read back as strictly as a ``Record`` (no extra keys, no inf/nan) and
    re-validated when a ``Record`` is built with an instance."""
    config = ConfigDict(extra="forbid", allow_inf_nan=False, revalidate_instances="always")
    return with_config(config)(cls)


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def to_json(record: Any) -> Any:
    """``record`` (a pydantic model or a dataclass instance) as JSON-ready Python values."""
    if isinstance(record, BaseModel):
        return record.model_dump(mode="json")
    return _adapter(type(record)).dump_python(record, mode="json")
