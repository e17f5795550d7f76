"""Snapshots of the folded state, so a reader folds only the events after the latest one.

A snapshot is the `SessionState` through one seq, written to the artifact store and referenced by a
`state_snapshot` event (`belay.journal.events.StateSnapshot`): its root document's sha256 is in
the event, the event is in the record's hash chain, and every blob the root names is addressed by
its own sha256, so a snapshot is as tamper-evident as the record. Folding the snapshot event
changes nothing; a reader starts from the state the snapshot holds and applies the events after
`covers_seq` (`load_state`). A snapshot that cannot be used (its root missing or failing its hash,
or written by another version of the fold, `FOLD_VERSION`) is passed over for the one before it,
and so on back to the first event: never a wrong state.

The codec is generic over the state model: every field that is not a persistent map is stored
as its JSON in the root document; every `immutables.Map` field is stored as sorted runs of pages,
so that:

- loading a snapshot costs the same at any history length: the root document names the pages, and
  a page is read (and its values parsed) only when a lookup needs it (`SnapshotMap`);
- writing one costs what changed since the last: the entries changed since the map was loaded (or
  last written) become one new run, and runs are merged only when the newer is at least a quarter
  of the older (so each entry is rewritten a few times over the life of the record, and a lookup
  checks a handful of runs).

A run is its entries sorted by (fingerprint, key), the fingerprint being the CRC-32 of the key: a
lookup finds the key's position in the run's fingerprint array (four bytes per entry, read once)
and reads the one page that holds it. A key the run does not hold costs a binary search, no page.
A key deleted since an older run is a tombstone in the newer one until the runs are merged into
the oldest. Small blobs are kept inline in the root document.

A `SnapshotMap` answers what an `immutables.Map` answers (`get`, `set`, `delete`, `in`, `len`,
iteration) and is used in its place in the state a snapshot loads, so `apply` and every view work
on it unchanged. Iterating it streams every page once, merging the runs in their common order,
and keeps none of what it read: a walk costs time in proportion to the map, not memory. A lookup
keeps the page it read (and the value it parsed), so a view that looks up many scattered keys
holds many pages; the views that do are bounded by what they show.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import hashlib
import heapq
import importlib
import inspect
import json
import pkgutil
import sys
import typing
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from immutables import Map
from pydantic import BaseModel, TypeAdapter, ValidationError

from belay.journal import dispatch as dispatch_module
from belay.journal import events as events_module
from belay.journal import state as state_package
from belay.journal.events import ArtifactRef, Event, StateSnapshot, StateSnapshotEvent
from belay.journal.state import EMPTY, SessionState, fold
from belay.journal.storage import ArtifactCorrupted, ArtifactNotFound, BlobStore, EventReader, StoreError

CODEC_VERSION = 1
FORMAT = "belay-state-snapshot"
ROOT_MEDIA_TYPE = "application/vnd.belay.state-snapshot+json"
PAGE_MEDIA_TYPE = "application/vnd.belay.state-snapshot-page"

PAGE_ENTRIES = 256  # entries per page of a run
INLINE_BYTES = 4096  # a blob this small is kept in the root document
EAGER_ENTRIES = 64  # a map this small, all inline, is loaded whole into an immutables.Map
MERGE_RATIO = 4  # a newer run at least 1/MERGE_RATIO of the next older is merged into it
MAX_RUNS = 8

# When the harness writes a snapshot: every SNAPSHOT_EVERY events, and at a verified checkpoint
# once SNAPSHOT_AT_CHECKPOINT events followed the last snapshot (fewer fold in a few milliseconds).
SNAPSHOT_EVERY = 1000
SNAPSHOT_AT_CHECKPOINT = 200
# Events folded per read of the tail: a reader holds one page of events at a time.
TAIL_PAGE = 5000
# How many snapshots a reader tries, newest first, before folding the whole record.
FALLBACK_LIMIT = 3

GetBlob = Callable[[str], bytes]  # sha256 -> the verified bytes
PutBlob = Callable[[bytes], str]  # bytes -> their sha256, once stored


class SnapshotUnusable(StoreError):
    """A snapshot that cannot give the state it names: missing or damaged blobs, a document this
    version cannot read, or another version of the fold. Readers pass over it."""


# --------------------------------------------------------------------------------------------------
# Which fold wrote a snapshot


def _describe(annotation: Any, seen: set[type]) -> str:
    """A stable description of a type, with every pydantic model's fields spelled out."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return annotation.__qualname__
        seen.add(annotation)
        fields = ",".join(
            f"{name}:{_describe(info.annotation, seen)}={info.default!r}"
            for name, info in annotation.model_fields.items()
        )
        return f"{annotation.__qualname__}({fields})"
    args = typing.get_args(annotation)
    if args:
        origin = typing.get_origin(annotation)
        return (
            f"{getattr(origin, '__qualname__', repr(origin))}[{','.join(_describe(a, seen) for a in args)}]"
        )
    return getattr(annotation, "__qualname__", repr(annotation))


def _source(module: ModuleType) -> str:
    try:
        return inspect.getsource(module)
    except (OSError, TypeError):  # no source shipped: the model's shape still counts
        return ""


def fold_modules() -> list[ModuleType]:
    """The modules whose text decides what the fold computes: the events, their dispatch to
    handlers, and every module of the state package (found by walking it, so a module added to
    it counts without being named here)."""
    found = pkgutil.walk_packages(state_package.__path__, prefix=f"{state_package.__name__}.")
    state_modules = sorted((importlib.import_module(info.name) for info in found), key=lambda m: m.__name__)
    return [events_module, dispatch_module, state_package, *state_modules]


def fold_version(model: type[BaseModel] = SessionState) -> str:
    """Which fold a snapshot of `model` comes from: the codec, the model's shape (every field of
    every record), and the text of the fold and of the events it folds (`fold_modules`). Any
    change to them makes older snapshots unusable, so a reader folds from the record instead of
    trusting a state an older fold computed."""
    digest = hashlib.sha256()
    digest.update(f"{FORMAT}/{CODEC_VERSION}\n{_describe(model, set())}\n".encode())
    for module in fold_modules():
        digest.update(f"{module.__name__}\n".encode())
        digest.update(_source(module).encode())
    return digest.hexdigest()


FOLD_VERSION = fold_version()


# --------------------------------------------------------------------------------------------------
# Blobs: inline in the root document, or in the artifact store


def _blob_ref(data: bytes, put: PutBlob) -> dict[str, str]:
    if len(data) <= INLINE_BYTES:
        return {"inline": base64.b64encode(data).decode()}
    return {"sha256": put(data)}


def _blob(ref: Any, get: GetBlob) -> bytes:
    try:
        if "inline" in ref:
            return base64.b64decode(ref["inline"], validate=True)
        return get(ref["sha256"])
    except (ArtifactNotFound, ArtifactCorrupted) as error:
        raise SnapshotUnusable(f"a page of the snapshot cannot be read: {error}") from error
    except (KeyError, TypeError, ValueError) as error:
        raise SnapshotUnusable(f"a page reference of the snapshot is malformed: {error}") from error


def fingerprint(key: str) -> int:
    return zlib.crc32(key.encode())


def _fingerprints_from(data: bytes) -> array[int]:
    fingerprints = array("I")
    fingerprints.frombytes(data)  # stored little-endian
    if sys.byteorder == "big":
        fingerprints.byteswap()
    return fingerprints


def _fingerprint_bytes(fingerprints: array[int]) -> bytes:
    if sys.byteorder == "big":
        fingerprints = array("I", fingerprints)
        fingerprints.byteswap()
    return fingerprints.tobytes()


# --------------------------------------------------------------------------------------------------
# Runs and the map built on them

_ABSENT: Any = object()  # a run (or a map) does not hold the key
_DELETED: Any = object()  # the key was deleted: a tombstone, stored as an empty value

Entry = tuple[int, str, bytes]  # (fingerprint, key, value JSON; b"" for a tombstone)


class _Run:
    """One sorted run of a map's entries, read lazily: its fingerprints on the first lookup, a page
    on the first lookup that lands in it. Shared by every map built on it, so what one map reads
    the others find cached."""

    __slots__ = (
        "_decode",
        "_fingerprint_ref",
        "_fingerprints",
        "_get",
        "_page_refs",
        "_pages",
        "_values",
        "count",
        "page_entries",
    )

    def __init__(
        self,
        count: int,
        page_entries: int,
        fingerprint_ref: Any,
        page_refs: Sequence[Any],
        get: GetBlob,
        decode: Callable[[bytes], Any],
        fingerprints: array[int] | None = None,
    ) -> None:
        if page_entries < 1 or len(page_refs) != -(-count // page_entries):
            raise SnapshotUnusable("a run of the snapshot names the wrong number of pages")
        self.count = count
        self.page_entries = page_entries
        self._fingerprint_ref = fingerprint_ref
        self._page_refs = tuple(page_refs)
        self._get = get
        self._decode = decode
        self._fingerprints = fingerprints
        self._pages: dict[int, dict[str, bytes]] = {}  # page index -> key -> value JSON (b"": deleted)
        self._values: dict[str, Any] = {}  # values parsed so far

    def descriptor(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "page_entries": self.page_entries,
            "fingerprints": self._fingerprint_ref,
            "pages": list(self._page_refs),
        }

    @property
    def all_inline(self) -> bool:
        return "inline" in self._fingerprint_ref and all("inline" in ref for ref in self._page_refs)

    def fingerprints(self) -> array[int]:
        if self._fingerprints is None:
            fingerprints = _fingerprints_from(_blob(self._fingerprint_ref, self._get))
            if len(fingerprints) != self.count:
                raise SnapshotUnusable("a run of the snapshot has the wrong number of entries")
            self._fingerprints = fingerprints
        return self._fingerprints

    def _read_page(self, index: int) -> dict[str, bytes]:
        data = _blob(self._page_refs[index], self._get)
        page: dict[str, bytes] = {}
        try:
            for line in data.split(b"\n") if data else ():
                key, _, raw = line.partition(b"\t")
                page[json.loads(key)] = raw
        except ValueError as error:
            raise SnapshotUnusable(f"a page of the snapshot is malformed: {error}") from error
        if len(page) != min(self.page_entries, self.count - index * self.page_entries):
            raise SnapshotUnusable("a page of the snapshot has the wrong number of entries")
        return page

    def _page(self, index: int) -> dict[str, bytes]:
        page = self._pages.get(index)
        if page is None:
            page = self._pages[index] = self._read_page(index)
        return page

    def find(self, key: str) -> Any:
        """The value, _DELETED, or _ABSENT."""
        value = self._values.get(key, _ABSENT)
        if value is not _ABSENT:
            return value
        fingerprints = self.fingerprints()
        wanted = fingerprint(key)
        position = bisect.bisect_left(fingerprints, wanted)
        while position < self.count and fingerprints[position] == wanted:
            index = position // self.page_entries
            raw = self._page(index).get(key)
            if raw is not None:
                value = self._values[key] = self._decode(raw) if raw else _DELETED
                return value
            position = (index + 1) * self.page_entries  # the same fingerprint, another key: the next page
        return _ABSENT

    def entries(self) -> Iterator[Entry]:
        """Every entry in order, raw; the pages read on the way are not kept."""
        fingerprints = self.fingerprints()
        for index in range(len(self._page_refs)):
            page = self._pages.get(index) or self._read_page(index)
            start = index * self.page_entries
            for offset, (key, raw) in enumerate(page.items()):
                yield fingerprints[start + offset], key, raw

    def decode(self, key: str, raw: bytes) -> Any:
        value = self._values.get(key, _ABSENT)
        if value is _ABSENT:
            value = self._decode(raw) if raw else _DELETED
        return value


def _tagged(run: _Run, depth: int) -> Iterator[tuple[int, str, int, bytes]]:
    """A run's entries with its depth, so that merged runs sort a key's newest entry first."""
    for fp, key, raw in run.entries():
        yield fp, key, depth, raw


class SnapshotMap:
    """A persistent map whose older entries live in snapshot runs and are read on first use; the
    entries set or deleted since are an `immutables.Map` on top. Immutable like the map it stands
    in for: `set` and `delete` return a new one that shares everything else."""

    __slots__ = ("_count", "_head", "_runs")

    def __init__(self, runs: tuple[_Run, ...], head: Map[str, Any] | None = None, count: int = 0) -> None:
        self._runs = runs
        self._head: Map[str, Any] = head if head is not None else Map()
        self._count = count

    def _find(self, key: str) -> Any:
        value = self._head.get(key, _ABSENT)
        if value is _ABSENT:
            for run in self._runs:
                value = run.find(key)
                if value is not _ABSENT:
                    break
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self._find(key)
        return default if value is _ABSENT or value is _DELETED else value

    def __getitem__(self, key: str) -> Any:
        value = self._find(key)
        if value is _ABSENT or value is _DELETED:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        value = self._find(key)
        return value is not _ABSENT and value is not _DELETED

    def __len__(self) -> int:
        return self._count

    def set(self, key: str, value: Any) -> SnapshotMap:
        added = 0 if key in self else 1
        return SnapshotMap(self._runs, self._head.set(key, value), self._count + added)

    def delete(self, key: str) -> SnapshotMap:
        if key not in self:
            raise KeyError(key)
        return SnapshotMap(self._runs, self._head.set(key, _DELETED), self._count - 1)

    def items(self) -> Iterator[tuple[str, Any]]:
        """Every entry: the changed ones, then the runs merged in their common (fingerprint, key)
        order, the newest run's entry winning. The runs are streamed a page at a time and nothing
        read on the way is kept, so a walk costs the same memory at any size."""
        head = self._head
        for key, value in head.items():
            if value is not _DELETED:
                yield key, value
        previous: tuple[int, str] | None = None
        for fp, key, depth, raw in heapq.merge(
            *(_tagged(run, depth) for depth, run in enumerate(self._runs))
        ):
            if (fp, key) == previous:
                continue  # an older run's entry for a key a newer run holds
            previous = (fp, key)
            if raw and key not in head:
                yield key, self._runs[depth].decode(key, raw)

    def keys(self) -> Iterator[str]:
        return (key for key, _ in self.items())

    def values(self) -> Iterator[Any]:
        return (value for _, value in self.items())

    def __iter__(self) -> Iterator[str]:
        return self.keys()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SnapshotMap | Map):
            return NotImplemented
        if len(self) != len(other):
            return False
        return all(key in other and other[key] == value for key, value in self.items())

    def __hash__(self) -> int:
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"SnapshotMap({len(self)} entries, {len(self._runs)} runs, {len(self._head)} changed)"


# --------------------------------------------------------------------------------------------------
# Writing


def _page_bytes(entries: Sequence[Entry]) -> bytes:
    return b"\n".join(json.dumps(key).encode() + b"\t" + raw for _, key, raw in entries)


def _new_run(entries: Sequence[Entry], put: PutBlob, get: GetBlob, decode: Callable[[bytes], Any]) -> _Run:
    fingerprints = array("I", (fp for fp, _, _ in entries))
    pages = [
        _blob_ref(_page_bytes(entries[start : start + PAGE_ENTRIES]), put)
        for start in range(0, len(entries), PAGE_ENTRIES)
    ]
    fingerprint_ref = _blob_ref(_fingerprint_bytes(fingerprints), put)
    return _Run(len(entries), PAGE_ENTRIES, fingerprint_ref, pages, get, decode, fingerprints)


def _merged(newer: _Run, older: _Run, drop_tombstones: bool) -> list[Entry]:
    """The entries of two runs in order; where both hold a key, the newer's."""
    merged: list[Entry] = []
    left, right = newer.entries(), older.entries()
    a, b = next(left, None), next(right, None)
    while a is not None and b is not None:
        if a[:2] < b[:2]:
            merged.append(a)
            a = next(left, None)
        elif a[:2] > b[:2]:
            merged.append(b)
            b = next(right, None)
        else:  # the same key in both: the newer entry wins
            merged.append(a)
            a, b = next(left, None), next(right, None)
    for rest, rest_iter in ((a, left), (b, right)):
        if rest is not None:
            merged.append(rest)
            merged.extend(rest_iter)
    return [entry for entry in merged if entry[2]] if drop_tombstones else merged


@dataclass(frozen=True)
class _MapCodec:
    adapter: TypeAdapter[Any]

    def dump(self, value: Any) -> bytes:
        return self.adapter.dump_json(value)

    def load(self, raw: bytes) -> Any:
        return self.adapter.validate_json(raw)


def _write_map(value: Any, codec: _MapCodec, put: PutBlob, get: GetBlob) -> list[_Run]:
    if isinstance(value, SnapshotMap):
        runs = list(value._runs)
        changed = value._head.items()
    else:
        runs = []
        changed = value.items()
    entries = sorted(
        (fingerprint(key), key, b"" if item is _DELETED else codec.dump(item)) for key, item in changed
    )
    if not runs:
        entries = [entry for entry in entries if entry[2]]
    if entries:
        runs.insert(0, _new_run(entries, put, get, codec.load))
    while len(runs) > 1 and (runs[0].count * MERGE_RATIO >= runs[1].count or len(runs) > MAX_RUNS):
        merged = _merged(runs[0], runs[1], drop_tombstones=len(runs) == 2)
        runs[0:2] = [_new_run(merged, put, get, codec.load)] if merged else []
    return runs


def _map_from(runs: list[_Run], count: int, codec: _MapCodec) -> Any:
    """What a state holds for a map: small ones whole, larger ones as a SnapshotMap."""
    if count == 0:
        return Map()
    if count <= EAGER_ENTRIES and all(run.all_inline for run in runs):
        return Map(SnapshotMap(tuple(runs), count=count).items())
    return SnapshotMap(tuple(runs), count=count)


@dataclass(frozen=True)
class _ModelCodec:
    """How the fields of one state model are stored."""

    plain: dict[str, TypeAdapter[Any]]
    maps: dict[str, _MapCodec]


_CODECS: dict[type[BaseModel], _ModelCodec] = {}


def _codec(model: type[BaseModel]) -> _ModelCodec:
    codec = _CODECS.get(model)
    if codec is None:
        plain: dict[str, TypeAdapter[Any]] = {}
        maps: dict[str, _MapCodec] = {}
        for name, info in model.model_fields.items():
            assert info.annotation is not None  # every field of a state model is annotated
            if typing.get_origin(info.annotation) is Map:
                _, value_type = typing.get_args(info.annotation)
                maps[name] = _MapCodec(TypeAdapter(value_type))
            else:
                plain[name] = TypeAdapter(info.annotation)
        codec = _CODECS[model] = _ModelCodec(plain, maps)
    return codec


def encode_state(state: SessionState, put: PutBlob, get: GetBlob) -> tuple[bytes, SessionState]:
    """The snapshot's root document, its pages stored through `put`; and the same state rebuilt on
    the runs just written, so that the next snapshot of its successors writes only what changes
    from here."""
    model = type(state)
    codec = _codec(model)
    document: dict[str, Any] = {
        "format": FORMAT,
        "codec": CODEC_VERSION,
        "fold_version": fold_version(model) if model is not SessionState else FOLD_VERSION,
        "fields": {
            name: adapter.dump_python(getattr(state, name), mode="json")
            for name, adapter in codec.plain.items()
        },
        "maps": {},
    }
    rebased: dict[str, Any] = {name: getattr(state, name) for name in codec.plain}
    for name, map_codec in codec.maps.items():
        value = getattr(state, name)
        runs = _write_map(value, map_codec, put, get)
        document["maps"][name] = {"count": len(value), "runs": [run.descriptor() for run in runs]}
        rebased[name] = _map_from(runs, len(value), map_codec)
    root = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return root, model.model_construct(**rebased)


# --------------------------------------------------------------------------------------------------
# Reading


def decode_state(root: bytes, get: GetBlob, model: type[SessionState] = SessionState) -> SessionState:
    """The state a snapshot's root document holds; its map pages are read when first needed."""
    codec = _codec(model)
    try:
        document = json.loads(root)
        if document.get("format") != FORMAT or document.get("codec") != CODEC_VERSION:
            raise SnapshotUnusable("the snapshot is in a format this version cannot read")
        version = FOLD_VERSION if model is SessionState else fold_version(model)
        if document.get("fold_version") != version:
            raise SnapshotUnusable("the snapshot was written by another version of the fold")
        stored_fields, stored_maps = document["fields"], document["maps"]
        if set(stored_fields) != set(codec.plain) or set(stored_maps) != set(codec.maps):
            raise SnapshotUnusable("the snapshot's fields are not the state's")
        values: dict[str, Any] = {
            name: adapter.validate_python(stored_fields[name]) for name, adapter in codec.plain.items()
        }
        for name, map_codec in codec.maps.items():
            stored = stored_maps[name]
            runs = [
                _Run(
                    int(run["count"]),
                    int(run["page_entries"]),
                    run["fingerprints"],
                    run["pages"],
                    get,
                    map_codec.load,
                )
                for run in stored["runs"]
            ]
            values[name] = _map_from(runs, int(stored["count"]), map_codec)
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as error:
        raise SnapshotUnusable(f"the snapshot document is malformed: {error}") from error
    return model.model_construct(**values)


@dataclass
class LoadedState:
    """A state folded from the latest usable snapshot plus the events after it."""

    state: SessionState
    snapshot_seq: int | None = None  # the snapshot event the fold started from, if any
    snapshot_covers: int = 0  # the seq that snapshot covers (0: the fold started from nothing)
    passed_over: list[str] = field(default_factory=list)  # snapshots that could not be used, and why


async def _snapshot_state(artifacts: BlobStore, event: StateSnapshotEvent) -> SessionState:
    payload = event.payload
    if payload.fold_version != FOLD_VERSION:
        raise SnapshotUnusable("written by another version of the fold")
    if payload.covers_seq >= event.seq:
        raise SnapshotUnusable(f"it claims to cover seq {payload.covers_seq}, not before its own")

    def read() -> SessionState:
        try:
            root = artifacts.get(payload.ref.sha256)
        except (ArtifactNotFound, ArtifactCorrupted) as error:
            raise SnapshotUnusable(str(error)) from error
        return decode_state(root, artifacts.get)

    state = await asyncio.to_thread(read)
    if state.last_seq != payload.covers_seq or (state.session_id and state.session_id != event.session_id):
        raise SnapshotUnusable("its state is not the one the event names")
    return state


async def fold_tail(
    store: EventReader, session_id: str, state: SessionState, *, page: int = TAIL_PAGE
) -> SessionState:
    """`state` brought up to the end of the record, reading the events after it a page at a time."""
    while True:
        events = await store.read(session_id, state.last_seq + 1, limit=page)
        state = fold(events, state)
        if len(events) < page:
            return state


async def load_state(
    store: EventReader,
    artifacts: BlobStore | None,
    session_id: str,
    *,
    skip: frozenset[int] = frozenset(),
    page: int = TAIL_PAGE,
) -> LoadedState:
    """The session's state: the latest usable snapshot (none without an artifact store, or past
    the ones in `skip`) plus every event after it, read a page at a time and each checked against
    the hash chain as it is read."""
    passed_over: list[str] = []
    state, snapshot_seq, covers = EMPTY, None, 0
    event: Event | None = await store.latest(session_id, StateSnapshot.EVENT_TYPE) if artifacts else None
    while artifacts is not None and isinstance(event, StateSnapshotEvent):
        if event.seq not in skip:
            try:
                state, snapshot_seq = await _snapshot_state(artifacts, event), event.seq
                covers = state.last_seq
                break
            except SnapshotUnusable as unusable:
                passed_over.append(f"the snapshot at seq {event.seq}: {unusable}")
        previous = event.payload.previous_seq
        if previous is None or len(passed_over) >= FALLBACK_LIMIT or previous >= event.seq:
            break
        found = await store.read(session_id, previous, previous)
        event = found[0] if found else None
    return LoadedState(
        await fold_tail(store, session_id, state, page=page), snapshot_seq, covers, passed_over
    )


def snapshot_due(state: SessionState, covered: int, checkpoint_recorded: bool) -> bool:
    """Whether the harness writes a snapshot now, its last one covering seq `covered`."""
    since = state.last_seq - covered
    return since >= SNAPSHOT_EVERY or (checkpoint_recorded and since >= SNAPSHOT_AT_CHECKPOINT)


def write_snapshot(state: SessionState, artifacts: BlobStore) -> tuple[ArtifactRef, SessionState]:
    """Store a snapshot of `state` (blocking: run it in a thread). Returns the ref of its root
    document, for the `state_snapshot` event, and the state rebuilt on what was written."""

    def put(data: bytes) -> str:
        return artifacts.put(data, media_type=PAGE_MEDIA_TYPE).sha256

    root, rebased = encode_state(state, put, artifacts.get)
    return artifacts.put(root, media_type=ROOT_MEDIA_TYPE), rebased
