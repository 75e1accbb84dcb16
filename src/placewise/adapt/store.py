"""The last-known-good store: the plan (or plan set) in service, the ones before it, and
the decisions that put each there, in one folder, so that rolling back is one command.

**Layout.** ``DIR/index.json`` (``"format": "placewise-lkg"``, ``"version": 1``): the
``entries`` in the order they were kept, the id of the ``current`` one, and a log of the
guardrail's ``decisions`` (kept and refused alike, newest last, at most
``MAX_DECISIONS``). ``DIR/plans/NNNN.json``: each entry's file, byte for byte as it was
kept. ``DIR/current.json``: a copy of the current entry's file, the path to serve.

**The validator header** of an entry (``Header``): what the file is (``kind``: ``plan`` or
``planset``), its ``sha256`` (the stored bytes are checked against it whenever the entry is
read), the model reference and its fingerprint, the graph fingerprints of its plans, the
machine and calibration fingerprints, the placewise / onnxruntime / torch / python
versions that kept it, when (UTC), and the decision that put it there. The identity fields
are always computed from the file itself; a caller's header adds the decision and notes.

**Refusals** (``InputError``, exit 2): a file whose plans were made for more than one
machine; a candidate whose model or machine fingerprint is not the current entry's
(``check_candidate``: a plan of another model, another batch of it, or another machine is
not a replacement for what is in service); a rollback with nothing before the current
entry. A corrupt index or a stored file that no longer matches its header is a
``SpecError`` naming the file and the place in it.

**Rollback** makes the entry that was current when the current one was kept current
again (its ``previous``), marks the one it leaves ``rolled_back``, and rewrites
``current.json``; every write goes through ``placewise.io``'s atomic writers, the stored
file before the index, so a crash leaves the old index whole.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from placewise.adapt.planset import load_plan_or_set
from placewise.errors import InputError, SpecError
from placewise.io import atomic_write_bytes, atomic_write_json, load_json, read_file_bytes
from placewise.runtime.planned import plan_fingerprint
from placewise.runtime.telemetry import collect_tags, model_fingerprint

__all__ = ["FORMAT", "MAX_DECISIONS", "Entry", "Header", "LastKnownGood", "identity_of",
           "mismatch", "now_utc"]

FORMAT = "placewise-lkg"
VERSION = 1
#: decisions kept in the index's log (the oldest are dropped)
MAX_DECISIONS = 1000
_LIMIT_BYTES = 1 << 30


@dataclass(frozen=True)
class Header:
    """The validator header of a kept plan or plan set (module docstring)."""

    kind: str
    sha256: str
    model: str
    model_fingerprint: str
    graph_fingerprints: tuple[str, ...]
    machine_fingerprint: str
    calibration_fingerprints: tuple[str, ...]
    plan_fingerprint: str
    versions: dict[str, str]
    when: str
    source: str
    decision: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("graph_fingerprints", "calibration_fingerprints", "notes"):
            d[k] = list(d[k])
        return d


@dataclass(frozen=True)
class Entry:
    """One kept file: its ``id``, the stored ``path``, the ``header``, the id of the entry
    that was current when it was kept (``previous``), and when it was rolled back from
    (``rolled_back``, empty while it was not)."""

    id: int
    path: Path
    header: Header
    previous: int | None
    rolled_back: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "file": str(self.path), "header": self.header.to_json(),
                "previous": self.previous, "rolled_back": self.rolled_back}


def _versions() -> dict[str, str]:
    tags = collect_tags()
    return {k: tags[k] for k in ("placewise", "onnxruntime", "torch", "python")}


def now_utc() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def identity_of(obj: Any, file: str, data: bytes | None = None) -> Header:
    """The header's identity fields of a loaded plan or plan set read from ``file``
    (``data``: its bytes, read when not given); ``InputError`` when its plans were made
    for more than one machine."""
    plans = tuple(getattr(obj, "plans", None) or (obj,))
    kind = "plan" if plans[0] is obj else "planset"
    machines = sorted({p.fingerprints.machine for p in plans})
    if len(machines) != 1:
        raise InputError(f"the plans of this plan set were made for {len(machines)} "
                         f"machines", file=file, place="fingerprints.machine")
    if data is None:
        data = read_file_bytes(file, what="plan", limit_bytes=_LIMIT_BYTES)
    fp = plan_fingerprint(obj) if kind == "plan" else str(obj.fingerprint())
    return Header(kind, "sha256:" + hashlib.sha256(data).hexdigest(), str(obj.model),
                  model_fingerprint(str(obj.model)),
                  tuple(sorted({p.fingerprints.graph for p in plans})), machines[0],
                  tuple(sorted({p.fingerprints.calibration for p in plans})), fp,
                  _versions(), now_utc(), os.path.abspath(file))


def mismatch(current: Header, cand: Header) -> tuple[str, str] | None:
    """(place, problem) when ``cand`` is not a replacement for ``current``."""
    if cand.machine_fingerprint != current.machine_fingerprint:
        return ("fingerprints.machine",
                f"the candidate was made for another machine (fingerprint "
                f"{cand.machine_fingerprint[:23]}, the last-known-good's "
                f"{current.machine_fingerprint[:23]}): plan it again for this machine")
    same_graph = cand.kind == current.kind == "plan"
    if (same_graph and cand.graph_fingerprints != current.graph_fingerprints) or (
            cand.model_fingerprint != current.model_fingerprint):
        what = "graph" if same_graph else "model"
        got = cand.graph_fingerprints[0] if same_graph else cand.model_fingerprint
        want = (current.graph_fingerprints[0] if same_graph
                else current.model_fingerprint)
        return (f"fingerprints.{what}",
                f"the candidate was made for another model ({what} fingerprint {got[:23]}, "
                f"the last-known-good's {want[:23]}; model {cand.model!r} vs "
                f"{current.model!r}): plan the model in service, at its shapes")
    return None


class LastKnownGood:
    """The store in folder ``root`` (module docstring); created on the first ``keep``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.index_path = self.root / "index.json"
        self.current_path = self.root / "current.json"

    # -- reading --
    def _index(self) -> dict[str, Any]:
        if not self.index_path.exists():
            if self.root.exists() and not self.root.is_dir():
                raise InputError("the last-known-good store is not a folder",
                                 file=str(self.root))
            return {"format": FORMAT, "version": VERSION, "entries": [], "current": None,
                    "decisions": []}
        file = str(self.index_path)
        doc = load_json(file, what="last-known-good index", error=SpecError)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise SpecError(f"not a last-known-good index (\"format\": {FORMAT!r} expected)",
                            file=file, place="format")
        if doc.get("version") != VERSION:
            raise SpecError(f"unknown version {doc.get('version')!r} (this placewise "
                            f"reads {VERSION})", file=file, place="version")
        for key, typ in (("entries", list), ("decisions", list)):
            if not isinstance(doc.get(key), typ):
                raise SpecError("expected a list", file=file, place=key)
        cur = doc.get("current")
        ids = [e.get("id") if isinstance(e, dict) else None for e in doc["entries"]]
        if cur is not None and cur not in ids:
            raise SpecError(f"the current entry {cur!r} is not among the entries",
                            file=file, place="current")
        return doc

    def _entry(self, doc: Mapping[str, Any], i: int) -> Entry:
        file = str(self.index_path)
        place = f"entries[{i}]"
        raw = doc["entries"][i]
        try:
            h = dict(raw["header"])
            header = Header(
                str(h["kind"]), str(h["sha256"]), str(h["model"]), str(h["model_fingerprint"]),
                tuple(str(x) for x in h["graph_fingerprints"]), str(h["machine_fingerprint"]),
                tuple(str(x) for x in h["calibration_fingerprints"]),
                str(h["plan_fingerprint"]), {str(k): str(v) for k, v in h["versions"].items()},
                str(h["when"]), str(h["source"]), dict(h.get("decision") or {}),
                tuple(str(x) for x in h.get("notes") or ()))
            prev = raw.get("previous")
            entry = Entry(int(raw["id"]), self.root / "plans" / str(raw["file"]), header,
                          None if prev is None else int(prev), str(raw.get("rolled_back", "")))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SpecError(f"a malformed entry ({type(exc).__name__}: {exc})", file=file,
                            place=place) from None
        return entry

    def _find(self, doc: Mapping[str, Any], id_: int | None) -> Entry | None:
        for i, e in enumerate(doc["entries"]):
            if e.get("id") == id_:
                return self._entry(doc, i)
        return None

    def verify(self, entry: Entry) -> bytes:
        """The stored bytes of ``entry``, checked against its header (``SpecError`` when
        the file is missing or was changed since it was kept)."""
        file = str(entry.path)
        if not entry.path.is_file():
            raise SpecError("the stored file of this entry is missing", file=file,
                            place=f"entry {entry.id}")
        data = read_file_bytes(file, what="plan", limit_bytes=_LIMIT_BYTES)
        if "sha256:" + hashlib.sha256(data).hexdigest() != entry.header.sha256:
            raise SpecError("the stored file was changed since it was kept (its sha256 is "
                            "not the header's)", file=file, place=f"entry {entry.id}")
        return data

    def current(self) -> Entry | None:
        """The current last-known-good entry (verified), or ``None`` for an empty store."""
        doc = self._index()
        entry = self._find(doc, doc["current"])
        if entry is not None:
            self.verify(entry)
        return entry

    def history(self) -> list[Entry]:
        """Every entry, in the order kept."""
        doc = self._index()
        return [self._entry(doc, i) for i in range(len(doc["entries"]))]

    def decisions(self) -> list[dict[str, Any]]:
        """The decision log, oldest first."""
        return list(self._index()["decisions"])

    # -- checks --
    def check_candidate(self, header: Header, *, file: str | None = None) -> None:
        """``InputError`` when ``header`` (``identity_of`` a candidate) is not a
        replacement for the current entry: another model or machine (module docstring)."""
        cur = self.current()
        if cur is None:
            return
        bad = mismatch(cur.header, header)
        if bad is not None:
            raise InputError(bad[1], file=file or header.source, place=bad[0])

    # -- writing --
    def keep(self, path: str | os.PathLike[str], header: Mapping[str, Any] | None = None
             ) -> Entry:
        """Keep the plan or plan set file at ``path`` as the new current entry; ``header``:
        the ``decision`` (and ``notes``) to record in its header (its identity is computed
        from the file). Refused (``InputError``) when it does not match the current
        entry's model or machine."""
        file = os.fspath(path)
        obj = load_plan_or_set(file)
        data = read_file_bytes(file, what="plan", limit_bytes=_LIMIT_BYTES)
        ident = identity_of(obj, file, data)
        extra = dict(header or {})
        ident = Header(**{**asdict(ident),
                          "decision": dict(extra.get("decision") or {}),
                          "notes": tuple(str(x) for x in extra.get("notes") or ())})
        doc = self._index()
        self.check_candidate(ident, file=file)
        new_id = 1 + max((int(e["id"]) for e in doc["entries"]), default=0)
        name = f"{new_id:04d}.json"
        atomic_write_bytes(self.root / "plans" / name, data)
        entry = Entry(new_id, self.root / "plans" / name, ident, doc["current"])
        doc["entries"].append({"id": new_id, "file": name, "header": ident.to_json(),
                               "previous": doc["current"], "rolled_back": ""})
        doc["current"] = new_id
        atomic_write_bytes(self.current_path, data)
        atomic_write_json(self.index_path, doc)
        return entry

    def record(self, decision: Mapping[str, Any]) -> None:
        """Append ``decision`` (a decision record's summary) to the log."""
        doc = self._index()
        doc["decisions"] = [*doc["decisions"], dict(decision)][-MAX_DECISIONS:]
        atomic_write_json(self.index_path, doc)

    def rollback(self) -> tuple[Entry, Entry]:
        """Make the previous last-known-good current again: returns (the entry left, the
        entry restored). ``InputError`` when there is nothing to roll back to."""
        doc = self._index()
        cur = self._find(doc, doc["current"])
        if cur is None:
            raise InputError("the store holds no last-known-good plan: nothing to roll back",
                             file=str(self.root))
        prev = self._find(doc, cur.previous)
        if prev is None:
            raise InputError(f"entry {cur.id} (kept {cur.header.when}) is the first "
                             f"last-known-good: there is nothing before it to roll back to",
                             file=str(self.root))
        data = self.verify(prev)
        when = now_utc()
        for e in doc["entries"]:
            if e.get("id") == cur.id:
                e["rolled_back"] = when
        doc["current"] = prev.id
        doc["decisions"] = [*doc["decisions"], {
            "decision": "rollback", "when": when, "from": cur.id, "to": prev.id,
            "reason": f"rolled back from entry {cur.id} to entry {prev.id}"}][-MAX_DECISIONS:]
        atomic_write_bytes(self.current_path, data)
        atomic_write_json(self.index_path, doc)
        left = Entry(cur.id, cur.path, cur.header, cur.previous, when)
        return left, prev

    def version_notes(self, entry: Entry) -> list[str]:
        """How the versions that kept ``entry`` differ from this process's."""
        now = _versions()
        return [f"{k}: kept under {v!r}, now {now.get(k)!r}"
                for k, v in sorted(entry.header.versions.items()) if now.get(k) != v]

