"""The shape of the code, checked: imports only point down the layers, and no module reaches into another
module's private names. Read from the source with `ast` (every import, also those inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Low to high. A module may import its own package and anything in a lower layer; never a higher one, and
# never a sibling package of its own layer. The base modules import only each other.
LAYERS = [
    ("lib.errors", "lib.logs", "lib.config", "lib.tokens", "lib.aws"),  # base
    ("lib.storage",),  # keys, records, the gateway, the store and its verbs, the capacity meter
    ("lib.embedded",),  # the embedded DynamoDB (moto + SQLite): it follows storage's sizing rules
    ("lib.model",),  # the model port: ChatModel, Prompt, Reply, Usage, providers, prompts
    ("lib.usage", "lib.export"),
    ("lib.search",),
    ("lib.context",),
    ("lib.turn",),  # the turn, the worker registry, the chat service
    ("lib.hot",),  # the optional hot tier mirrors live answers (lib.turn.live); injected, never imported below
    ("lib.database",),  # opens the configured DynamoDB (local server or AWS)
    ("lib.services",),  # builds everything once per process
    ("lib.ops", "lib.web"),  # admin commands; Streamlit glue
    ("lib.admin", "pages", "app"),  # entry points
]
BASE = LAYERS[0]


def modules() -> dict[str, Path]:
    found = {"app": ROOT / "app.py"}
    for path in [*ROOT.glob("lib/**/*.py"), *ROOT.glob("pages/*.py")]:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    found.pop("lib", None)  # the package's own __init__ (empty)
    return found


def package(module: str) -> tuple[int, str]:
    """(layer, package) of a module: the longest entry of LAYERS it falls in."""
    best = None
    for rank, entries in enumerate(LAYERS):
        for entry in entries:
            if (module == entry or module.startswith(entry + ".")) and (best is None or len(entry) > len(best[1])):
                best = (rank, entry)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def imported(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            if node.module == "lib":  # from lib import tokens
                out += [(node.lineno, f"lib.{a.name}") for a in node.names]
    return [(line, name) for line, name in out if name.split(".")[0] in ("lib", "pages", "app") and name != "lib"]


def upward_imports() -> list[str]:
    wrong = []
    for module, path in modules().items():
        rank, own = package(module)
        for line, name in imported(path):
            other_rank, other = package(name)
            if other == own or (own in BASE and other in BASE) or other_rank < rank:
                continue
            wrong.append(f"{path.relative_to(ROOT)}:{line} {module} -> {name}")
    return wrong


def test_imports_only_point_down_the_layers():
    assert upward_imports() == []


def test_the_layer_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The check itself: a storage module importing the chat page is reported."""
    bad = tmp_path / "lib" / "storage" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    from lib.web.chat_page import ChatPage\n")
    import sys

    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "app.py").write_text("")
    assert upward_imports() == ["lib/storage/bad.py:2 lib.storage.bad -> lib.web.chat_page"]


def test_the_chat_page_leaves_the_turn_to_the_chat_service():
    names = {name for _, name in imported(ROOT / "lib" / "web" / "chat_page.py")}
    assert not names & {"lib.turn.worker", "lib.turn.turns", "lib.context.engine", "lib.search.indexer"}


def private_reach_ins() -> list[str]:
    """`obj._name` where `_name` is not defined in the same module (a private name of another module's class).
    The embedded server is exempt: it patches moto's internals on purpose (lib/embedded/moto_patches.py)."""
    wrong = []
    for module, path in modules().items():
        if module.startswith("lib.embedded"):
            continue
        tree = ast.parse(path.read_text())
        own = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                continue  # a subclass overriding its base's hook
            if node.attr not in own:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    return wrong


def test_no_module_reaches_into_another_modules_private_names():
    assert private_reach_ins() == []
