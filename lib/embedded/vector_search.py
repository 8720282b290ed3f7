"""SearchVectors' request side for the embedded DynamoDB: its errors, the search condition, scores, projection.

Kept apart from lib/embedded/vectors.py (definitions and entries) so each stays one concept: this module
knows DynamoDB's request and response shapes and scoring conventions, and holds no state.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from typing import Any

import numpy as np

from lib.embedded.disk import key_text

MAX_TOP_K = 100
BLOCK_ELEMENTS = 1 << 18  # the largest matrix-vector product OpenBLAS keeps on the calling thread (256 x 1024 rows)
_DDB = "com.amazonaws.dynamodb.v20120810#"
_TERM = re.compile(r"^\s*([#:]?[A-Za-z0-9_.-]+)\s*(=|<>|<=|>=|<|>)\s*([#:]?[A-Za-z0-9_.-]+)\s*$")


class VectorError(Exception):
    """A request DynamoDB would refuse: (error type, message)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def invalid(message: str) -> VectorError:
    return VectorError("ValidationException", message)


def vector_of(value: Any, dimensions: int | None) -> np.ndarray | None:
    """A list-of-numbers attribute as float32, or None if it is not one (of `dimensions` numbers)."""
    if not isinstance(value, dict) or "L" not in value:
        return None
    numbers = value["L"]
    if dimensions is not None and len(numbers) != dimensions:
        return None
    try:
        return np.array([float(n["N"]) for n in numbers], dtype=np.float32)
    except (KeyError, TypeError, ValueError):
        return None


def condition(index: Any, request: dict) -> tuple[str, dict]:
    """(HASH value, inline filter equalities) of the SearchConditionExpression; VectorError when it lacks the
    HASH equality or uses anything but `=` on the search schema's attributes."""
    text = request.get("SearchConditionExpression")
    names = request.get("ExpressionAttributeNames") or {}
    values = request.get("ExpressionAttributeValues") or {}
    if index.hash_attr is None:
        if not text:
            return "", {}
    elif not text:
        raise invalid(
            f"SearchConditionExpression must give the partition attribute of vector index "
            f"{index.name}: {index.hash_attr} = :value."
        )
    found: dict[str, dict] = {}
    for term in re.split(r"\s+AND\s+", text.strip(), flags=re.IGNORECASE):
        match = _TERM.match(term.strip("() "))
        if not match:
            raise invalid(
                f"Invalid SearchConditionExpression: {term.strip()!r} (only attribute = :value, joined by AND)."
            )
        left, op, right = match.groups()
        if op != "=":
            raise invalid(f"Invalid SearchConditionExpression: operator {op} is not supported; only = is.")
        if left.startswith(":"):
            left, right = right, left
        if not right.startswith(":") or right not in values:
            raise invalid(f"Invalid SearchConditionExpression: {right} is not a value in ExpressionAttributeValues.")
        attr = names.get(left, None) if left.startswith("#") else left
        if attr is None:
            raise invalid(f"Invalid SearchConditionExpression: {left} is not in ExpressionAttributeNames.")
        if attr != index.hash_attr and attr not in index.filters:
            raise invalid(
                f"Invalid SearchConditionExpression: {attr} is not in the search schema of vector index {index.name}."
            )
        found[attr] = values[right]
    if index.hash_attr is not None and index.hash_attr not in found:
        raise invalid(
            f"SearchConditionExpression must give the partition attribute of vector index "
            f"{index.name}: {index.hash_attr} = :value."
        )
    hash_value = found.pop(index.hash_attr, {"S": ""}) if index.hash_attr else {"S": ""}
    kind, value = next(iter(hash_value.items()))
    return key_text(kind, value), found


def products(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """matrix @ query, BLOCK_ELEMENTS at a time. On a bigger product OpenBLAS wakes its other threads, which then
    spin waiting for more work, on the cores the page scripts need: a SearchVectors over 10,000 x 256 took 20-25 ms
    of the process's CPU with one product and 10-12 ms in blocks, at the same wall time. In blocks the product
    stays on the request's thread."""
    rows = max(1, BLOCK_ELEMENTS // max(1, matrix.shape[1]))
    if len(matrix) <= rows:
        return matrix @ query
    out = np.empty(len(matrix), dtype=np.result_type(matrix, query))
    for start in range(0, len(matrix), rows):
        np.matmul(matrix[start : start + rows], query, out=out[start : start + rows])
    return out


def scores(distance: str, matrix: np.ndarray, norms: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Every row's score against the query, in float64 (the vectors stay float32, as the index stores them)."""
    if len(matrix) == 0:
        return np.zeros(0, dtype=np.float64)
    if distance == "EUCLIDEAN":  # |m - q|^2 = |m|^2 - 2 m.q + |q|^2, without copying the matrix
        squared = norms.astype(np.float64) ** 2 - 2 * products(matrix, query).astype(np.float64) + float(query @ query)
        return np.sqrt(np.maximum(squared, 0.0))
    dots = products(matrix, query).astype(np.float64)
    if distance == "DOT_PRODUCT":
        return dots
    scale = norms.astype(np.float64) * float(np.linalg.norm(query))
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(scale > 0, dots / scale, 0.0)
    return 1.0 - np.clip(cos, -1.0, 1.0)


def projection(request: dict) -> set[str] | None:
    text = request.get("ProjectionExpression")
    if not text:
        return None
    names = request.get("ExpressionAttributeNames") or {}
    wanted = set()
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"#?[A-Za-z0-9_-]+", part):
            raise invalid(f"Invalid ProjectionExpression: {part!r} (top-level attribute names only).")
        if part.startswith("#"):
            if part not in names:
                raise invalid(f"Invalid ProjectionExpression: {part} is not in ExpressionAttributeNames.")
            part = names[part]
        wanted.add(part)
    return wanted


def error_body(exc: VectorError) -> tuple[str, list, list[bytes]]:
    """A 400 as DynamoDB sends it: botocore raises it as a ClientError with this type and message."""
    body = json.dumps({"__type": _DDB + exc.kind, "message": str(exc)}).encode()
    return (
        "400 Bad Request",
        [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(body)))],
        [body],
    )


def answer_body(results: list[tuple[str | dict, float]], consumed: dict | None) -> bytes:
    """SearchVectors' JSON body from (item, score) pairs, best first; an item given as text is an index entry's
    stored JSON, spliced in as it is (a search returns up to 100 items: decoding and encoding each again was most of
    the server's time)."""
    parts = [
        '{"Item": '
        + (item if isinstance(item, str) else json.dumps(item, ensure_ascii=False))
        + ', "Score": '
        + (repr(score) if math.isfinite(score) else json.dumps(score))  # json.dumps writes a finite float as repr
        + "}"
        for item, score in results
    ]
    tail = f', "ConsumedCapacity": {json.dumps(consumed)}' if consumed is not None else ""
    return ('{"SearchResults": [' + ", ".join(parts) + "]" + tail + "}").encode("utf-8")


def ok_body(body: bytes) -> tuple[str, list, list[bytes]]:
    return ("200 OK", [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(body)))], [body])


def decorate(
    operation: str, request: dict, status: str, headers: list, chunks: list[bytes], region: str, state: Any
) -> tuple[list, list[bytes]]:
    """Add what moto leaves out of a successful answer: VectorIndexes in a table description, and a write's
    VectorWriteRequestBytes (per index, asked for with ReturnConsumedCapacity=INDEXES)."""
    if not status.startswith("200"):
        return headers, chunks
    table = request.get("TableName", "")
    add_description = operation in ("CreateTable", "UpdateTable", "DescribeTable") and state.defs.get(table)
    add_bytes = state.write_bytes and request.get("ReturnConsumedCapacity") == "INDEXES"
    if not (add_description or add_bytes):
        return headers, chunks
    answer = json.loads(b"".join(chunks) or b"{}")
    if add_description:
        description = answer.get("Table") or answer.get("TableDescription")
        if description is not None:
            description["VectorIndexes"] = state.describe(table, region)
    if add_bytes:
        consumed = answer.get("ConsumedCapacity")
        entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
        if not entries:
            entries = [{"TableName": table}]
            answer["ConsumedCapacity"] = (
                entries if operation in ("TransactWriteItems", "BatchWriteItem") else entries[0]
            )
        entries[0]["VectorIndexes"] = {n: {"VectorWriteRequestBytes": b} for n, b in state.write_bytes.items()}
    body = json.dumps(answer).encode()
    # botocore checks DynamoDB's x-amz-crc32 and retries on a mismatch: recomputed for the new body.
    headers = [(k, v) for k, v in headers if k.lower() not in ("content-length", "x-amz-crc32")] + [
        ("Content-Length", str(len(body))),
        ("x-amz-crc32", str(zlib.crc32(body))),
    ]
    return headers, [body]
