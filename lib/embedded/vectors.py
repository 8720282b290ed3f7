"""Vector indexes for the embedded DynamoDB (docs/search.md): VectorIndexes, VectorIndexUpdates and SearchVectors.

moto knows none of it, so the serialized WSGI layer (lib/embedded/server.py) hands these
requests here. A vector index is kept like DynamoDB keeps one: from the final image of
every item any operation writes or deletes, an entry (its HASH value, INLINE_FILTER values,
float32 vector and projected attributes) is added, replaced or removed. With a data folder
the entries live in SQLite's `vectors` table and are written in the SAME transaction as the
item images (Disk.commit's `extra`), so acknowledged <=> durable holds for vectors too and
a restart finds them without re-reading any item. Without one they live in memory only.

SearchVectors is answered exactly: numpy over every vector of the one HASH value the
condition names (no ANN, so recall is 1.0 here, 99%+ on AWS). Scores follow botocore's
documentation: COSINE 1 - cos (0 identical .. 2 opposite, k smallest), EUCLIDEAN the
distance (k smallest), DOT_PRODUCT the product (k largest).

Consumed bytes are this emulator's model, not AWS's published formula (there is none
in the API): a search is 4 bytes per dimension of the query plus the size of the items
returned; a write is 4 bytes per dimension plus the size of the projected attributes.

Every function here runs under server.REQUEST_LOCK: no lock of its own.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lib.embedded.disk import Disk, key_text
from lib.embedded.vector_search import (  # noqa: F401  (decorate, error_body, ok_body: the server's)
    MAX_TOP_K,
    VectorError,
    answer_body,
    condition,
    decorate,
    error_body,
    ok_body,
    projection,
    scores,
)
from lib.embedded.vector_search import invalid as _invalid
from lib.embedded.vector_search import vector_of as _vector
from lib.storage.itemsize import item_size

MAX_DIMENSIONS = 4096
MAX_INDEXES = 5
CACHE_VECTORS = 100_000  # vectors kept in memory across HASH values (about 100 MB at 256-d, snippets included);
# the least recently searched partitions beyond it reload from SQLite on their next search
_SQL = """CREATE TABLE IF NOT EXISTS vectors (
    tbl TEXT NOT NULL, idx TEXT NOT NULL, pk TEXT NOT NULL, sk TEXT NOT NULL, hash TEXT NOT NULL,
    filters TEXT NOT NULL, vec BLOB NOT NULL, item TEXT NOT NULL, PRIMARY KEY (tbl, idx, pk, sk)) WITHOUT ROWID"""
_SQL_INDEX = "CREATE INDEX IF NOT EXISTS vectors_by_hash ON vectors (tbl, idx, hash)"


@dataclass
class IndexDef:
    """One vector index of a table, as CreateTable/UpdateTable declared it."""

    name: str
    table: str
    vector_attr: str
    hash_attr: str | None
    filters: list[str]
    projection: dict
    dimensions: int
    distance: str
    key_attrs: list[str] = field(default_factory=list)

    def describe(self, region: str) -> dict:
        schema = ([{"AttributeName": self.hash_attr, "SearchSchemaElementType": "HASH"}] if self.hash_attr else []) + [
            {"AttributeName": f, "SearchSchemaElementType": "INLINE_FILTER"} for f in self.filters
        ]
        return {
            "IndexName": self.name,
            "SearchSchema": schema,
            "Projection": self.projection,
            "VectorAttribute": {"AttributeName": self.vector_attr},
            "Dimensions": self.dimensions,
            "DistanceFunction": self.distance,
            "IndexStatus": "ACTIVE",
            "Backfilling": False,
            "IndexArn": f"arn:aws:dynamodb:{region}:123456789012:table/{self.table}/index/{self.name}",
        }

    def projected(self, image: dict) -> dict:
        """The attributes the index keeps a copy of (never the vector: it is kept as float32 beside them)."""
        kind = self.projection.get("ProjectionType", "ALL")
        keep = set(self.key_attrs) | {self.hash_attr} | set(self.filters)
        if kind == "INCLUDE":
            keep |= set(self.projection.get("NonKeyAttributes", []))
        return {k: v for k, v in image.items() if k != self.vector_attr and (kind == "ALL" or k in keep)}

    def entry(self, image: dict | None) -> tuple[str, dict, np.ndarray, dict] | None:
        """(hash, inline filters, vector, projected item) of an image, or None when the index leaves it out:
        deleted, no vector, or no HASH attribute (DynamoDB writes such an item but silently never indexes it)."""
        if image is None or self.vector_attr not in image:
            return None
        hash_value = image.get(self.hash_attr) if self.hash_attr else {"S": ""}
        if not hash_value or len(hash_value) != 1:
            return None
        vector = _vector(image[self.vector_attr], self.dimensions)
        if vector is None:
            return None
        kind, value = next(iter(hash_value.items()))
        if kind not in ("S", "N", "B"):
            return None
        filters = {f: image[f] for f in self.filters if f in image}
        return key_text(kind, value), filters, vector, self.projected(image)


class _Partition:
    """The entries of one HASH value of one index, with the matrix searches use, kept up to date row by row.

    A send writes one turn and then searches: rebuilding the matrix (and a JSON text per filter value) after
    every write made each send O(the user's vectors). Instead a put appends a row (or overwrites its own row)
    and a drop marks its row dead; dead rows are squeezed out once they are half the matrix.

    Invariant: the live rows, in row order, are `entries` in dict order (a dict keeps a replaced key's place, and
    an overwritten row keeps its place too), so "ties: insertion order" means row order.
    """

    _FIRST = 16  # rows allocated for a new partition; doubled when full (amortized O(1) per put)

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], tuple[dict, str]] = {}  # key -> (inline filters, projected item JSON)
        self.sizes: dict[tuple[str, str], int] = {}  # key -> its item's size, once a search has returned it
        self._row: dict[tuple[str, str], int] = {}  # key -> its row
        self._keys: list[tuple[str, str] | None] = []  # row -> key; None once dropped
        self._vectors: np.ndarray | None = None  # (capacity, dimensions) float32; rows past len(_keys) unused
        self._norms = np.zeros(0, np.float32)
        self._live = np.zeros(0, bool)
        self._columns: dict[str, np.ndarray] = {}  # inline filter attribute -> each row's value as JSON text
        self._dead = 0

    def put(self, key: tuple[str, str], filters: dict, vector: np.ndarray, item: str) -> None:
        self.entries[key] = (filters, item)  # the vector lives only in its matrix row (one copy in memory)
        self.sizes.pop(key, None)
        row = self._row.get(key)
        if row is None:
            row = len(self._keys)
            self._grow(row + 1, len(vector))
            self._keys.append(key)
            self._row[key] = row
        self._vectors[row] = vector
        self._norms[row] = np.linalg.norm(vector)
        self._live[row] = True
        for name, column in self._columns.items():
            column[row] = _filter_text(filters.get(name))

    def drop(self, key: tuple[str, str]) -> None:
        if self.entries.pop(key, None) is None:
            return
        self.sizes.pop(key, None)
        row = self._row.pop(key)
        self._keys[row] = None
        self._live[row] = False
        self._dead += 1
        if self._dead > max(self._FIRST, len(self._keys) // 2):
            self._compact()

    def _grow(self, rows: int, dimensions: int) -> None:
        capacity = 0 if self._vectors is None else len(self._vectors)
        if rows <= capacity:
            return
        size = max(self._FIRST, 2 * capacity)
        vectors = np.zeros((size, dimensions), np.float32)
        norms, live = np.zeros(size, np.float32), np.zeros(size, bool)
        if capacity:
            vectors[:capacity], norms[:capacity], live[:capacity] = self._vectors, self._norms, self._live
        self._vectors, self._norms, self._live = vectors, norms, live
        for name, column in self._columns.items():
            grown = np.full(size, _filter_text(None), dtype=object)
            grown[:capacity] = column
            self._columns[name] = grown

    def _compact(self) -> None:
        """Squeeze out the dead rows, keeping the live ones in their order (`entries`' order)."""
        keep = np.array([self._row[key] for key in self.entries], dtype=np.int64)
        size = max(self._FIRST, 2 * len(keep))
        vectors = np.zeros((size, self._vectors.shape[1]), np.float32)
        vectors[: len(keep)] = self._vectors[keep]
        norms, live = np.zeros(size, np.float32), np.zeros(size, bool)
        norms[: len(keep)], live[: len(keep)] = self._norms[keep], True
        for name, column in self._columns.items():
            squeezed = np.full(size, _filter_text(None), dtype=object)
            squeezed[: len(keep)] = column[keep]
            self._columns[name] = squeezed
        self._vectors, self._norms, self._live = vectors, norms, live
        self._keys = list(self.entries)
        self._row = {key: row for row, key in enumerate(self._keys)}
        self._dead = 0

    def mask(self, filters: dict) -> np.ndarray:
        """Live rows whose inline filter attributes equal `filters` (a column per attribute, built on first use)."""
        rows = self._live[: len(self._keys)].copy()
        for name, value in filters.items():
            if name not in self._columns:
                column = np.full(len(self._live), _filter_text(None), dtype=object)
                for key, row in self._row.items():
                    column[row] = _filter_text(self.entries[key][0].get(name))
                self._columns[name] = column
            rows &= self._columns[name][: len(self._keys)] == _filter_text(value)
        return rows

    def size(self, key: tuple[str, str]) -> int:
        """The size of an entry's item (DynamoDB's rule), computed the first time a search returns it."""
        size = self.sizes.get(key)
        if size is None:
            size = self.sizes[key] = item_size(json.loads(self.entries[key][1]))
        return size

    def matrix(self, dimensions: int) -> tuple[list, np.ndarray, np.ndarray]:
        """(row -> key, None for a dead row; the vectors as one float32 matrix; their norms): views, no copy.
        A dead row's vector is stale: callers rank only the rows `mask` keeps."""
        if self._vectors is None:
            return [], np.zeros((0, dimensions), np.float32), np.zeros(0, np.float32)
        rows = len(self._keys)
        return self._keys, self._vectors[:rows], self._norms[:rows]


def _filter_text(value: Any) -> str:
    """An attribute value as comparable text (the same value always gives the same text; absent is "null")."""
    return json.dumps(value, sort_keys=True)


class VectorState:
    """Every table's vector index definitions and entries, for the process's one moto backend."""

    def __init__(self) -> None:
        self.defs: dict[str, list[IndexDef]] = {}
        self.memory: dict[str, bool] = {}  # table -> its entries live only in memory (no data folder)
        self._cache: OrderedDict[tuple[str, str, str], _Partition] = OrderedDict()
        self._prepared: set[int] = set()  # disks whose `vectors` table exists
        self.write_bytes: dict[str, float] = {}  # index -> bytes of the request being served

    # --- definitions --------------------------------------------------------------------------------

    def _prepare(self, disk: Disk) -> None:
        if id(disk) not in self._prepared:
            disk.transaction([(_SQL, ()), (_SQL_INDEX, ())])
            self._prepared.add(id(disk))

    @staticmethod
    def _parse(table: str, spec: dict, attribute_types: dict[str, str], key_attrs: list[str]) -> IndexDef:
        name = spec.get("IndexName", "")
        vector = (spec.get("VectorAttribute") or {}).get("AttributeName")
        if not vector:
            raise _invalid(f"Vector index {name}: VectorAttribute.AttributeName is required.")
        dims = spec.get("Dimensions")
        if not isinstance(dims, int) or not 1 <= dims <= MAX_DIMENSIONS:
            raise _invalid(f"Vector index {name}: Dimensions must be between 1 and {MAX_DIMENSIONS}.")
        if spec.get("DistanceFunction") not in ("COSINE", "DOT_PRODUCT", "EUCLIDEAN"):
            raise _invalid(f"Vector index {name}: DistanceFunction must be COSINE, DOT_PRODUCT or EUCLIDEAN.")
        hash_attr, filters = None, []
        for element in spec.get("SearchSchema") or []:
            attr, role = element.get("AttributeName"), element.get("SearchSchemaElementType")
            if attr not in attribute_types:
                raise _invalid(
                    f"Vector index {name}: search schema attribute {attr} must be declared in AttributeDefinitions."
                )
            if role == "HASH":
                if hash_attr is not None:
                    raise _invalid(f"Vector index {name}: at most one HASH element in SearchSchema.")
                hash_attr = attr
            else:
                filters.append(attr)
        projection = spec.get("Projection") or {"ProjectionType": "ALL"}
        return IndexDef(name, table, vector, hash_attr, filters, projection, dims, spec["DistanceFunction"], key_attrs)

    def for_moto(self, operation: str, request: dict, backend: Any, *, replay: bool = False) -> bytes | None:
        """Check a CreateTable/UpdateTable's vector parts (VectorError) and return the body moto can take: the
        SearchSchema-only AttributeDefinitions left out (moto wants exactly the key attributes). None: unchanged.
        `replay`: a request read back from disk at start, taken as it was when first accepted."""
        specs = (
            request.get("VectorIndexes")
            if operation == "CreateTable"
            else [u["Create"] for u in request.get("VectorIndexUpdates") or [] if "Create" in u]
        )
        deletes = (
            [u["Delete"]["IndexName"] for u in request.get("VectorIndexUpdates") or [] if "Delete" in u]
            if operation == "UpdateTable"
            else []
        )
        name = request.get("TableName", "")
        existing = self.defs.get(name, []) if operation == "UpdateTable" else []
        table = backend.tables.get(name)
        if not replay:
            kept = [d for d in existing if d.name not in deletes]
            _check_on_demand(operation, request, table, len(kept) + len(specs or []))
        if not specs and not deletes:
            return None
        types = {a["AttributeName"]: a["AttributeType"] for a in request.get("AttributeDefinitions") or []}
        if operation == "UpdateTable":
            if table is None:
                raise VectorError("ResourceNotFoundException", f"Requested resource not found: Table: {name} not found")
            types = (
                {**{a["AttributeName"]: a["AttributeType"] for a in table.attr}, **types}
                if hasattr(table, "attr")
                else types
            )
        names = [d.name for d in existing if d.name not in deletes] + [s.get("IndexName") for s in specs or []]
        if len(names) != len(set(names)):
            raise _invalid(f"A vector index with this name already exists on table {name}.")
        if len(names) > MAX_INDEXES:
            raise _invalid(f"A table has at most {MAX_INDEXES} vector indexes.")
        missing = [d for d in deletes if d not in [e.name for e in existing]]
        if missing:
            raise VectorError("ResourceNotFoundException", f"Requested resource not found: vector index {missing[0]}")
        for spec in specs or []:
            self._parse(name, spec, types, [])
        if table is not None:
            keys = {table.hash_key_attr, table.range_key_attr}
            for index in getattr(table, "global_indexes", []) + getattr(table, "indexes", []):
                keys |= {k["AttributeName"] for k in index.schema}
        else:
            keys = {k["AttributeName"] for k in request.get("KeySchema") or []}
            for index in (request.get("GlobalSecondaryIndexes") or []) + (request.get("LocalSecondaryIndexes") or []):
                keys |= {k["AttributeName"] for k in index.get("KeySchema", [])}
        body = {k: v for k, v in request.items() if k not in ("VectorIndexes", "VectorIndexUpdates")}
        if "AttributeDefinitions" in body:
            body["AttributeDefinitions"] = [a for a in body["AttributeDefinitions"] if a["AttributeName"] in keys]
            if not body["AttributeDefinitions"] and operation == "UpdateTable":
                del body["AttributeDefinitions"]
        return json.dumps(body).encode()

    def table_changed(self, operation: str, request: dict, backend: Any, *, replay: bool = False) -> None:
        """After moto took a table request (live, or replayed from disk at start): keep its vector indexes; a new
        live index is backfilled from the table's items before this returns (so DescribeTable never shows it
        Backfilling here, and a search right after sees every item)."""
        name = request.get("TableName", "")
        table = backend.tables.get(name)
        if operation == "DeleteTable" or table is None:
            self.defs.pop(name, None)
            self._forget(name)
            return
        disk = getattr(table, "chat_disk", None)
        self.memory[name] = disk is None
        keys = [k for k in (table.hash_key_attr, table.range_key_attr) if k]
        types = {a["AttributeName"]: a["AttributeType"] for a in getattr(table, "attr", [])}
        types.update({a["AttributeName"]: a["AttributeType"] for a in request.get("AttributeDefinitions") or []})
        if operation == "CreateTable":
            self.defs[name] = [self._parse(name, s, types, keys) for s in request.get("VectorIndexes") or []]
            self._forget(name)
            if disk is not None and not replay:
                self._prepare(disk)
                disk.transaction([("DELETE FROM vectors WHERE tbl = ?", (name,))])
            return
        if operation != "UpdateTable":
            return
        current = self.defs.setdefault(name, [])
        for update in request.get("VectorIndexUpdates") or []:
            if "Delete" in update:
                gone = update["Delete"]["IndexName"]
                current[:] = [d for d in current if d.name != gone]
                self._forget(name)
                if disk is not None and not replay:
                    self._prepare(disk)
                    disk.transaction([("DELETE FROM vectors WHERE tbl = ? AND idx = ?", (name, gone))])
            elif "Create" in update:
                index = self._parse(name, update["Create"], types, keys)
                current.append(index)
                if not replay:
                    self._backfill(table, index, disk)

    def _backfill(self, table: Any, index: IndexDef, disk: Disk | None) -> None:
        """Index every item the table holds: from disk (the truth) with a folder, else from moto's memory."""
        if disk is None:
            for item in table.all_items():
                self.apply_memory(
                    table.name,
                    key_text(item.hash_key.type, item.hash_key.value),
                    key_text(item.range_key.type, item.range_key.value) if item.range_key else "",
                    item.to_json()["Attributes"],
                )
            return
        self._prepare(disk)
        after = None
        while rows := disk.rows_after(table.name, after, 5_000):
            writes = [(table.name, pk, sk, image) for pk, sk, image in rows]
            disk.transaction(self.statements(writes, only=index))
            after = rows[-1][:2]
        self._forget(table.name)

    def _forget(self, table: str) -> None:
        for key in [k for k in self._cache if k[0] == table]:
            del self._cache[key]

    def describe(self, table: str, region: str) -> list[dict]:
        return [d.describe(region) for d in self.defs.get(table, [])]

    # --- writes ---------------------------------------------------------------------------------------

    def check_items(self, operation: str, request: dict) -> None:
        """Refuse a Put whose vector attribute is not a list of exactly Dimensions numbers (before moto applies it)."""
        items: list[tuple[str, dict]] = []
        if operation == "PutItem":
            items = [(request.get("TableName", ""), request.get("Item") or {})]
        elif operation == "BatchWriteItem":
            items = [
                (t, r["PutRequest"]["Item"])
                for t, rs in (request.get("RequestItems") or {}).items()
                for r in rs
                if "PutRequest" in r
            ]
        elif operation == "TransactWriteItems":
            items = [
                (a["Put"]["TableName"], a["Put"]["Item"]) for a in request.get("TransactItems") or [] if "Put" in a
            ]
        for table, item in items:
            for index in self.defs.get(table, []):
                if index.vector_attr in item and _vector(item[index.vector_attr], index.dimensions) is None:
                    got = len(item[index.vector_attr].get("L", [])) if isinstance(item[index.vector_attr], dict) else 0
                    raise _invalid(
                        f"One or more parameter values were invalid: vector attribute "
                        f"{index.vector_attr} must be a list of {index.dimensions} numbers for vector "
                        f"index {index.name} (got {got})."
                    )

    def statements(
        self, writes: list[tuple[str, str, str, str | None]], *, only: IndexDef | None = None
    ) -> list[tuple[str, tuple]]:
        """SQL that keeps the `vectors` table in step with these item images (table, pk, sk, JSON or None): run in
        the same transaction as the images. Also updates the cached partitions and counts the write bytes."""
        out: list[tuple[str, tuple]] = []
        for table, pk, sk, image_text in writes:
            indexes = [only] if only is not None else self.defs.get(table, [])
            if not indexes:
                continue
            image = json.loads(image_text) if image_text is not None else None
            for index in indexes:
                entry = index.entry(image)
                if entry is None:
                    out.append(
                        (
                            "DELETE FROM vectors WHERE tbl = ? AND idx = ? AND pk = ? AND sk = ?",
                            (table, index.name, pk, sk),
                        )
                    )
                    continue
                hash_text, filters, vector, item = entry
                item_text = json.dumps(item, ensure_ascii=False)
                out.append(
                    (
                        "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (table, index.name, pk, sk, hash_text, json.dumps(filters), vector.tobytes(), item_text),
                    )
                )
                self._count_write(index, item)
        return [(_SQL, ()), (_SQL_INDEX, ())] + out if out else out  # IF NOT EXISTS: a no-op but on a new file

    def _count_write(self, index: IndexDef, item: dict) -> None:
        self.write_bytes[index.name] = self.write_bytes.get(index.name, 0.0) + 4 * index.dimensions + item_size(item)

    def _invalidate(self, index: IndexDef, pk: str, sk: str) -> None:
        """Drop (pk, sk) from whichever cached partition holds it (its HASH value may have changed)."""
        for (table, name, _), part in self._cache.items():
            if table == index.table and name == index.name:
                part.drop((pk, sk))

    def after_commit(self, writes: list[tuple[str, str, str, str | None]]) -> None:
        """The images are durable: the cached partitions that are loaded follow them (never before the commit,
        so a failed commit leaves the cache matching SQLite)."""
        for table, pk, sk, image_text in writes:
            for index in self.defs.get(table, []):
                self._invalidate(index, pk, sk)
                entry = index.entry(json.loads(image_text)) if image_text is not None else None
                if entry is None:
                    continue
                part = self._cache.get((table, index.name, entry[0]))
                if part is not None:
                    part.put((pk, sk), entry[1], entry[2], json.dumps(entry[3], ensure_ascii=False))

    def apply_memory(self, table: str, pk: str, sk: str, image: dict | None) -> None:
        """An in-memory table's write: its entries live only here."""
        for index in self.defs.get(table, []):
            self._invalidate(index, pk, sk)
            entry = index.entry(image)
            if entry is None:
                continue
            hash_text, filters, vector, item = entry
            key = (table, index.name, hash_text)
            part = self._cache.setdefault(key, _Partition())
            part.put((pk, sk), filters, vector, json.dumps(item, ensure_ascii=False))
            self._count_write(index, item)

    # --- search ---------------------------------------------------------------------------------------

    def _partition(self, table: Any, index: IndexDef, hash_text: str) -> _Partition:
        key = (table.name, index.name, hash_text)
        part = self._cache.get(key)
        if part is not None:
            self._cache.move_to_end(key)
            return part
        part = _Partition()
        disk = getattr(table, "chat_disk", None)
        if disk is not None:
            self._prepare(disk)
            for pk, sk, filters, vec, item in disk._read(  # noqa: SLF001 (same package; under the request lock)
                "SELECT pk, sk, filters, vec, item FROM vectors WHERE tbl = ? AND idx = ? AND hash = ?",
                (table.name, index.name, hash_text),
            ):
                part.put((pk, sk), json.loads(filters), np.frombuffer(vec, dtype=np.float32), item)
            self._cache[key] = part
            held = sum(len(p.entries) for p in self._cache.values())
            for oldest in [k for k in self._cache if k != key and not self.memory.get(k[0], False)]:
                if held <= CACHE_VECTORS:
                    break
                held -= len(self._cache.pop(oldest).entries)
        else:
            self._cache[key] = part  # in memory: this is the only copy
        return part

    def search(self, request: dict, backend: Any) -> bytes:
        """A SearchVectors request's answer, as its JSON body (VectorError for what DynamoDB would refuse)."""
        name = request.get("TableName", "")
        table = backend.tables.get(name)
        if table is None:
            raise VectorError("ResourceNotFoundException", f"Requested resource not found: Table: {name} not found")
        index = next((d for d in self.defs.get(name, []) if d.name == request.get("IndexName")), None)
        if index is None:
            raise VectorError(
                "ResourceNotFoundException",
                f"Requested resource not found: Vector index: {request.get('IndexName')} not found",
            )
        top_k = request.get("TopK")
        if not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise _invalid(f"TopK must be between 1 and {MAX_TOP_K}.")
        query = _vector({"L": request.get("SearchVector") or []}, None)
        if query is None:
            raise _invalid("SearchVector must be a list of numbers.")
        if len(query) != index.dimensions:
            raise _invalid(
                f"The number of dimensions of SearchVector ({len(query)}) does not match the "
                f"dimensions of vector index {index.name} ({index.dimensions})."
            )
        hash_text, filters = condition(index, request)
        part = self._partition(table, index, hash_text)
        keys, matrix, norms = part.matrix(index.dimensions)
        found = scores(index.distance, matrix, norms, query)
        rank = -found if index.distance == "DOT_PRODUCT" else found.copy()  # smaller is better
        rank[~part.mask(filters)] = np.inf  # dead rows, and rows the inline filters leave out
        candidates = np.flatnonzero(np.isfinite(rank))
        if len(candidates) > top_k:  # every row as good as the k-th: which ties make the cut is decided below
            kth = np.partition(rank[candidates], top_k - 1)[top_k - 1]
            candidates = candidates[rank[candidates] <= kth]
        order = candidates[np.lexsort((candidates, rank[candidates]))][:top_k]  # ties: insertion order
        wanted = projection(request)
        results, size = [], 0
        for i in order:
            key = keys[i]
            if wanted is None:  # the stored JSON goes out as it is: nothing parsed, nothing encoded again
                item = part.entries[key][1]
                size += part.size(key)
            else:
                item = {k: v for k, v in json.loads(part.entries[key][1]).items() if k in wanted}
                if index.vector_attr in wanted:
                    item[index.vector_attr] = {"L": [{"N": repr(float(x))} for x in matrix[i]]}
                size += item_size(item)
            results.append((item, float(found[i])))
        consumed = None
        if request.get("ReturnConsumedCapacity") in ("TOTAL", "INDEXES"):
            consumed = {"VectorSearchRequestBytes": float(4 * index.dimensions + size)}
        return answer_body(results, consumed)


STATE = VectorState()
READS = ("SearchVectors", "DescribeTable")  # requests whose body the server parses for this module


def _check_on_demand(operation: str, request: dict, table: Any, indexes_after: int) -> None:
    """ValidationException, as DynamoDB's, for a table that would hold a vector index and not be on demand: one
    made with one (BillingMode defaults to PROVISIONED), one given one, or one with one switched to PROVISIONED."""
    if indexes_after <= 0 or (operation == "UpdateTable" and table is None):  # moto says the table is not found
        return
    if operation == "CreateTable":
        billing = request.get("BillingMode") or "PROVISIONED"
    else:
        billing = request.get("BillingMode") or getattr(table, "billing_mode", None) or "PROVISIONED"
    if billing != "PAY_PER_REQUEST":
        raise _invalid(
            "One or more parameter values were invalid: vector indexes are supported only on tables in on-demand "
            f"capacity mode (BillingMode PAY_PER_REQUEST); table {request.get('TableName', '')} would be {billing}."
        )


def settle_in_memory(backend: Any, table: Any, key_or_item: dict) -> None:
    """After a successful write to an in-memory table: its final image (or absence) to the index."""
    if not STATE.defs.get(table.name):
        return
    try:
        hash_key, range_key = backend.get_keys_value(table, key_or_item)
    except Exception:
        return  # moto refused the malformed key itself
    current = table.get_item(hash_key, range_key)
    STATE.apply_memory(
        table.name,
        key_text(hash_key.type, hash_key.value),
        key_text(range_key.type, range_key.value) if range_key is not None else "",
        current.to_json()["Attributes"] if current is not None else None,
    )


def replayable(operation: str, request: dict, backend: Any) -> dict:
    """A stored table request as moto takes it (vector parts and SearchSchema-only attributes left out)."""
    if operation not in ("CreateTable", "UpdateTable"):
        return request
    stripped = STATE.for_moto(operation, request, backend, replay=True)
    return request if stripped is None else json.loads(stripped)
