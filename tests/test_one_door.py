"""DynamoDB has one door: only lib/storage (and the embedded server, lib/embedded) composes requests or sends them,
and only lib/aws.py makes boto3 clients. Checked on the source with `ast`, so a new caller is caught before it runs."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOOR = ("lib/storage/", "lib/embedded/")
CLIENT_MODULE = "lib/aws.py"
# Keyword arguments that only a DynamoDB request (or a part of one) has.
REQUEST_KEYWORDS = frozenset(
    {
        "KeyConditionExpression",
        "FilterExpression",
        "UpdateExpression",
        "ConditionExpression",
        "ProjectionExpression",
        "TransactItems",
        "RequestItems",
        "ExpressionAttributeNames",
        "ExpressionAttributeValues",
        "Key",
        "Item",
        "ExclusiveStartKey",
        "TableName",
    }
)
GATEWAY_METHODS = frozenset({"call", "query_pages", "query_all", "scan_pages", "batch_get", "batch_write"})


def _sources() -> list[Path]:
    files = [ROOT / "app.py", *sorted((ROOT / "lib").rglob("*.py")), *sorted((ROOT / "pages").rglob("*.py"))]
    return [f for f in files if f.is_file()]


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _dotted(node: ast.AST) -> str:
    """`boto3.session.Session().client` as text (calls shown as `()`), '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    if isinstance(node, ast.Call):
        inner = _dotted(node.func)
        return f"{inner}()" if inner else ""
    return ""


def door_violations(source: str, name: str) -> list[str]:
    """What in this module's source opens a second door to DynamoDB (or makes a boto3 client elsewhere)."""
    found: list[str] = []
    inside = name.startswith(DOOR)
    for node in ast.walk(ast.parse(source, filename=name)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            callee = _dotted(node.func)
            if name != CLIENT_MODULE and (
                callee in ("boto3.client", "boto3.resource")
                or callee.endswith(("Session().client", "Session().resource"))
            ):
                found.append(f"{where}: makes a boto3 client ({callee}) outside {CLIENT_MODULE}")
            if inside:
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr in GATEWAY_METHODS:
                found.append(f"{where}: calls a Gateway method .{node.func.attr}(")
            if callee.split(".")[-1] == "Gateway":
                found.append(f"{where}: constructs Gateway(")
            found += [
                f"{where}: passes {k.arg}= (a DynamoDB request)" for k in node.keywords if k.arg in REQUEST_KEYWORDS
            ]
        elif not inside and isinstance(node, ast.Dict):
            found += [
                f"{where}: builds a request dict with {k.value!r}"
                for k in node.keys
                if isinstance(k, ast.Constant) and k.value in REQUEST_KEYWORDS - {"Key", "Item"}
            ]
    return found


class TestOneDoor:
    def test_no_module_outside_lib_storage_composes_or_sends_a_dynamodb_request(self):
        found = [v for path in _sources() for v in door_violations(path.read_text(encoding="utf-8"), _name(path))]
        assert found == [], "\n".join(found)

    def test_the_check_sees_each_kind_of_second_door(self):
        source = (
            "import boto3\n"
            "from lib.storage.gateway import Gateway\n"
            "db = Gateway(client, 'chat')\n"
            "db.query_all(KeyConditionExpression='pk = :pk')\n"
            "client.update_item(Key={}, UpdateExpression='SET a = :a')\n"
            "client.update_table(TableName='chat', DeletionProtectionEnabled=True)\n"
            "actions = [{'Put': {'Item': {}, 'ConditionExpression': 'attribute_not_exists(pk)'}}]\n"
            "boto3.session.Session().client('dynamodb')\n"
            "boto3.client('bedrock-runtime')\n"
        )
        found = door_violations(source, "lib/ops/example.py")
        reasons = "\n".join(found)
        for expected in (
            "constructs Gateway(",
            "calls a Gateway method .query_all(",
            "passes KeyConditionExpression=",
            "passes Key=",
            "passes TableName=",
            "passes UpdateExpression=",
            "builds a request dict with 'ConditionExpression'",
            "makes a boto3 client",
        ):
            assert expected in reasons
        assert sum("makes a boto3 client" in v for v in found) == 2

    def test_lib_storage_may_send_requests_but_not_make_clients(self):
        assert door_violations("db.call('get_item', Key={})\n", "lib/storage/example.py") == []
        assert door_violations("boto3.client('dynamodb')\n", "lib/storage/example.py")
        assert door_violations("boto3.session.Session().client('dynamodb')\n", CLIENT_MODULE) == []
