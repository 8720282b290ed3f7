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
    (
        "lib/storage/schema.py",
        "create_table",
    ): "called by open_database only for the local backend; on AWS the stack (or an operator) creates the table",
    (
        "lib/storage/schema.py",
        "add_vector_index",
    ): "called by open_database only for the local backend; on AWS an operator runs `admin add-vector-index`",
    (
        "lib/storage/schema.py",
        "delete_vector_index",
    ): "called by open_database only for the local backend (an index made before the chat filter is made again); "
    "on AWS an operator runs `admin add-vector-index --rebuild`",
    (
        "lib/storage/schema.py",
        "ensure_ttl",
    ): "called by open_database only for the local backend; on AWS the stack (or create-table) turns TTL on",
    (
        "lib/turn/demo.py",
        "seed_demo",
    ): "the demo history (batch writes): the chat page offers it only on the local backend (welcome_screen checks "
    "database.local, and seed_demo refuses AWS unless told); on AWS an operator runs `admin seed-demo --allow-aws`",
}
# IAM authorises a transaction by the actions of its items, not by an action of its own.
TRANSACTION_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
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
    if suffix in ("Ref", "Condition"):  # the two short forms whose long form has no Fn:: prefix
        return {suffix: value}
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


def _module_path(dotted: str) -> str | None:
    """lib.web.ui -> lib/web/ui.py (or its package's __init__.py); None if no such module of ours."""
    base = ROOT / dotted.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate.relative_to(ROOT).as_posix()
    return None


def _bindings(module: ast.Module) -> dict[str, tuple[str, ...]]:
    """What a module's imported names are: ("module", path) for our modules, ("function", path, name) for a
    name imported from one, ("external",) for anything from another library (`atexit.register(...)` is not a
    call of some function of ours that happens to be named `register`)."""
    found: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            for alias in node.names:
                path = _module_path(alias.name) if alias.name.startswith("lib") else None
                found[(alias.asname or alias.name).split(".")[0]] = ("module", path) if path else ("external",)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                name = alias.asname or alias.name
                if not node.module.startswith("lib"):
                    found[name] = ("external",)
                elif sub := _module_path(f"{node.module}.{alias.name}"):
                    found[name] = ("module", sub)
                else:
                    found[name] = ("function", _module_path(node.module) or "", alias.name)
    return found


class _Code:
    """lib/'s functions: module-level ones by (path, name), methods by name (an object's type is not known
    statically, so `obj.send_message(...)` may be any method of that name: an over-approximation)."""

    def __init__(self) -> None:
        self.functions: dict[tuple[str, str], ast.AST] = {}
        self.constructors: dict[tuple[str, str], ast.AST] = {}  # a class named in code runs its __init__
        self.methods: dict[str, list[tuple[str, ast.AST]]] = {}
        self.bindings: dict[str, dict[str, tuple[str, ...]]] = {}
        self.pages: list[tuple[str, ast.Module]] = []
        for path, module in _sources():
            self.bindings[path] = _bindings(module)
            if not path.startswith("lib/"):
                self.pages.append((path, module))  # the pages: all their code runs
            for node in module.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.functions[(path, node.name)] = node
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            self.methods.setdefault(item.name, []).append((path, item))
                            if item.name == "__init__":
                                self.constructors[(path, node.name)] = item

    def targets(self, path: str, node: ast.AST) -> Iterator[tuple[str, str, ast.AST]]:
        """The functions of ours this code calls or refers to (a function passed as a callback counts)."""
        bindings = self.bindings[path]
        for child in ast.walk(node):
            if isinstance(child, ast.Name):
                bound = bindings.get(child.id)
                key = (bound[1], bound[2]) if bound and bound[0] == "function" else (path, child.id)
                if (bound is None or bound[0] == "function") and key in self.functions:
                    yield key[0], key[1], self.functions[key]
                elif (bound is None or bound[0] == "function") and key in self.constructors:
                    yield key[0], f"{key[1]}.__init__", self.constructors[key]
            elif isinstance(child, ast.Attribute):
                owner = bindings.get(child.value.id) if isinstance(child.value, ast.Name) else None
                if owner and owner[0] == "external":
                    continue
                if owner and owner[0] == "module":
                    if (owner[1], child.attr) in self.functions:
                        yield owner[1], child.attr, self.functions[(owner[1], child.attr)]
                    continue
                for method_path, method in self.methods.get(child.attr, []):
                    yield method_path, child.attr, method


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


def _reached(code: "_Code") -> dict[str, tuple[str, ast.AST]]:
    """path:name -> (path, node) of every function the deployed app's pages can reach."""
    reached: dict[str, tuple[str, ast.AST]] = {}
    frontier = [(path, "(page)", module) for path, module in code.pages]
    while frontier:
        path, name, node = frontier.pop()
        where = f"{path}:{name}"
        if where in reached or (path, name) in NOT_IN_THE_DEPLOYED_APP_FUNCTIONS:
            continue
        reached[where] = (path, node)
        frontier.extend(code.targets(path, node))
    return reached


def app_dynamodb_actions() -> dict[str, set[str]]:
    """IAM action -> the functions (path:name) that need it, for the code the deployed app can reach."""
    client_methods = boto3.client("dynamodb", region_name="us-east-1").meta.method_to_api_mapping
    code = _Code()
    reached = _reached(code)
    needed: dict[str, set[str]] = {}
    for where, (_, node) in reached.items():
        for operation in _operations(node, client_methods):
            if operation in TRANSACTION_OPERATIONS:
                continue  # authorised by its items' actions, found as item:<kind>
            action = TRANSACTION_ITEM_ACTIONS[operation[5:]] if operation.startswith("item:") else operation
            needed.setdefault(action, set()).add(where)
    return needed


# The IAM action that authorises each S3 API operation the code may call (ListObjectsV2 is s3:ListBucket, on the
# bucket rather than its objects).
S3_IAM_ACTIONS = {
    "PutObject": "s3:PutObject",
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "DeleteObject": "s3:DeleteObject",
    "DeleteObjects": "s3:DeleteObject",
    "ListObjectsV2": "s3:ListBucket",
    "CopyObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
}


def app_s3_actions() -> dict[str, set[str]]:
    """S3 IAM action -> the functions (path:name) that need it, for the code the deployed app can reach: the same
    reachability as the DynamoDB derivation, with S3's operation names (lib/storage/objects.py's `_call`)."""
    client_methods = boto3.client("s3", region_name="us-east-1").meta.method_to_api_mapping
    code = _Code()
    reached = _reached(code)
    # The one module that sends S3 requests (tests/test_one_door.py). Its backends share method names (put_bytes of
    # S3 and of memory), and `reached` keeps one node per path:name: every method of a reached name counts.
    module = "lib/storage/objects.py"
    names = {where.split(":", 1)[1] for where, (path, _) in reached.items() if path == module}
    nodes = [(n, f) for n in names for p, f in code.methods.get(n, []) if p == module]
    nodes += [(n, code.functions[(module, n)]) for n in names if (module, n) in code.functions]
    needed: dict[str, set[str]] = {}
    for name, node in nodes:
        for operation in _operations(node, client_methods):
            if not operation.startswith("item:"):
                needed.setdefault(S3_IAM_ACTIONS.get(operation, f"s3:{operation}"), set()).add(f"{module}:{name}")
    return needed
