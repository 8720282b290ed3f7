"""For the deployment tests: read the CloudFormation template, and derive from the code which DynamoDB IAM actions
the running app needs (so the task role's policy is checked against the code, not against a list kept by hand)."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Iterator

import boto3
import yaml

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "deploy" / "chat.yaml"

# Code that never runs in the deployed app, each with why. Everything else in lib/ that the pages can reach
# (by name, following calls and references from app.py and pages/) counts.
NOT_IN_THE_DEPLOYED_APP = {
    "lib/embedded/": "the local backend's in-process server; with CHAT_BACKEND=aws it is never started",
    "lib/admin.py": "operator commands, run with the operator's credentials, not the task role",
}
NOT_IN_THE_DEPLOYED_APP_FUNCTIONS = {
    ("lib/storage/schema.py", "create_table"):
        "called by open_database only for the local backend; on AWS the stack (or an operator) creates the table",
}
# IAM authorises a transaction by the actions of its items, not by an action of its own.
TRANSACTION_ITEM_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                            "ConditionCheck": "ConditionCheckItem"}
TRANSACTION_OPERATIONS = {"TransactWriteItems", "TransactGetItems"}


class _CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short forms (!Ref, !GetAtt, !Sub, !If, ...) as their long forms."""


def _short_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _short_form)


def load_template() -> dict:
    return yaml.load(TEMPLATE.read_text(), Loader=_CfnLoader)  # noqa: S506 (a SafeLoader subclass)


def _excluded(path: str) -> bool:
    return any(path.startswith(prefix) for prefix in NOT_IN_THE_DEPLOYED_APP)


def _sources() -> Iterator[tuple[str, ast.Module]]:
    files = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "lib").rglob("*.py"))]
    for file in files:
        path = file.relative_to(ROOT).as_posix()
        if not _excluded(path):
            yield path, ast.parse(file.read_text(), filename=path)


def _names_used(node: ast.AST) -> set[str]:
    """Every name this code calls or refers to (a function passed as a callback counts)."""
    used = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            used.add(child.id)
        elif isinstance(child, ast.Attribute):
            used.add(child.attr)
    return used


def _operations(node: ast.AST, client_methods: dict[str, str]) -> set[str]:
    """DynamoDB API operations named in this code: `_call("query", ...)`, `gateway.call("get_item", ...)`,
    `partial(self._call, "query")`, `client.update_item(...)`, `self._client.query`; and transaction items."""
    found = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            func = child.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            args = list(child.args)
            if name == "partial" and args:  # partial(self._call, "query"): the operation is the next argument
                inner = args[0]
                inner_name = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")
                name, args = (inner_name, args[1:]) if inner_name.endswith("call") else ("", [])
            if name.endswith("call") and args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
                if args[0].value in client_methods:
                    found.add(client_methods[args[0].value])
        elif isinstance(child, ast.Attribute) and child.attr in client_methods:
            owner = child.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if owner_name.lstrip("_").endswith("client"):
                found.add(client_methods[child.attr])
        elif isinstance(child, ast.Dict):
            for key in child.keys:
                if isinstance(key, ast.Constant) and key.value in TRANSACTION_ITEM_ACTIONS:
                    found.add("item:" + key.value)
    return found


def app_dynamodb_actions() -> dict[str, set[str]]:
    """IAM action -> the functions (path:name) that need it, for the code the deployed app can reach."""
    client_methods = boto3.client("dynamodb", region_name="us-east-1").meta.method_to_api_mapping
    functions: dict[str, list[tuple[str, ast.AST]]] = {}
    entry: list[ast.AST] = []
    for path, module in _sources():
        for node in ast.walk(module):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (path, node.name) not in NOT_IN_THE_DEPLOYED_APP_FUNCTIONS:
                    functions.setdefault(node.name, []).append((path, node))
        if not path.startswith("lib/"):
            entry.append(module)  # the pages: all their code runs
    seen: set[str] = set()
    frontier = set().union(*(_names_used(node) for node in entry))
    reached: list[tuple[str, ast.AST]] = [("(pages)", node) for node in entry]
    while frontier:
        name = frontier.pop()
        if name in seen:
            continue
        seen.add(name)
        for path, node in functions.get(name, []):
            reached.append((f"{path}:{name}", node))
            frontier |= _names_used(node) - seen
    needed: dict[str, set[str]] = {}
    for where, node in reached:
        for operation in _operations(node, client_methods):
            if operation in TRANSACTION_OPERATIONS:
                continue  # authorised by its items' actions, found as item:<kind>
            action = TRANSACTION_ITEM_ACTIONS[operation[5:]] if operation.startswith("item:") else operation
            needed.setdefault(action, set()).add(where)
    return needed
