"""The house: one folder per model, imports that flow one way, a public face that survives every import."""

import ast
import importlib
import pkgutil
import types
from importlib.util import find_spec
from pathlib import Path

import sappkit

PACKAGE = Path(sappkit.__file__).parent
#: The model folders in the order data flows: a folder imports only from folders before it (or beside it in a
#: tuple), and from the shared top-level helpers.
MODEL_ORDER = (("layers",), ("pipeline",), ("memfit", "recompute"), ("one_more", "balancer"), ("strategy",),
               ("trainers",), ("torch",))


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The sappkit modules ``path`` imports at module level (what runs when it is imported)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            found |= {target} if node.module else {f"{target}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sappkit"):
            found.add(node.module)
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    return {target for target in found if target in modules}


def _graph() -> dict[str, set[str]]:
    return {_module_name(path): _imports(path) for path in PACKAGE.rglob("*.py")}


def test_the_top_level_holds_few_modules_and_every_model_has_a_folder():
    assert len(list(PACKAGE.glob("*.py"))) <= 12
    for group in MODEL_ORDER:
        for folder in group:
            assert (PACKAGE / folder / "__init__.py").is_file()


def test_no_import_cycles():
    graph = _graph()
    state = {}

    def visit(module, trail):
        if state.get(module) == "open":
            raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(module):] + [module]))
        if state.get(module) == "done":
            return
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            visit(target, trail + [module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])


def test_model_folders_import_only_the_folders_before_them():
    rank = {folder: i for i, group in enumerate(MODEL_ORDER) for folder in group}
    for module, targets in _graph().items():
        folder = module.split(".")[1] if module.count(".") else None
        if folder not in rank:
            continue
        for target in targets:
            other = target.split(".")[1] if target.count(".") else None
            if other in rank and other != folder:
                assert rank[other] < rank[folder], f"{module} imports {target}, a model after it"


def test_every_public_name_resolves_even_after_every_module_is_imported():
    for info in pkgutil.walk_packages(sappkit.__path__, "sappkit."):
        optional = info.name.startswith("sappkit.torch") and find_spec("torch") is None  # the [torch] extra
        if not info.name.endswith("__main__") and not optional:  # running __main__ is the command line
            importlib.import_module(info.name)
    for name in sappkit.__all__:
        value = getattr(sappkit, name)
        assert not isinstance(value, types.ModuleType), f"sappkit.{name} is a module, not the public {name}"
    assert callable(sappkit.balance) and callable(sappkit.alternatives)
