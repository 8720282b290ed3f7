"""Fault injection at the HTTP layer of a real boto3 client: botocore's before-send event answers for the
server, so botocore's own retry logic runs exactly as it would against DynamoDB. No mocks of boto3."""

from __future__ import annotations

import io
import json
from typing import Any

from botocore.awsrequest import AWSResponse


class _Raw(io.BytesIO):
    def stream(self, **_: Any):
        yield self.getvalue()


class Faults:
    """`fail(operation, code, times)`: the next `times` attempts of that operation get that DynamoDB error."""

    def __init__(self, client: Any):
        self.attempts: dict[str, int] = {}
        self._plan: dict[str, list[tuple[str, str, dict]]] = {}
        client.meta.events.register("before-send.dynamodb", self._before_send)

    def fail(self, operation: str, code: str, times: int = 1, message: str = "injected", **extra: Any) -> None:
        self._plan.setdefault(operation, []).extend([(code, message, extra)] * times)

    def clear(self) -> None:
        """Every planned failure not yet used is dropped: the table answers again."""
        self._plan.clear()

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        operation = request.headers.get("X-Amz-Target", b"")
        operation = (operation.decode() if isinstance(operation, bytes) else operation).rpartition(".")[2]
        self.attempts[operation] = self.attempts.get(operation, 0) + 1
        plan = self._plan.get(operation)
        if not plan:
            return None
        code, message, extra = plan.pop(0)
        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message, **extra})
        return AWSResponse(
            request.url,
            400,
            {"x-amzn-RequestId": "fault", "Content-Type": "application/x-amz-json-1.0"},
            _Raw(body.encode()),
        )


def conflict_reasons(actions: int, at: int) -> dict:
    """CancellationReasons of a transaction whose action `at` hit a TransactionConflict."""
    return {"CancellationReasons": [{"Code": "TransactionConflict" if i == at else "None"} for i in range(actions)]}
