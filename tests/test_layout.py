"""The house: one folder per model, imports that flow one way, a public face that survives every import."""

import ast
import importlib
import json
import pkgutil
import re
import types
from importlib.util import find_spec
from pathlib import Path

import sappkit

PACKAGE = Path(sappkit.__file__).parent
ROOT = PACKAGE.parent
#: A module of one job fits in this many lines; a function's code (its docstring aside) in this many.
MODULE_LINES, FUNCTION_LINES = 400, 80
#: The model folders in the order data flows: a folder imports only from folders before it (or beside it in a
#: tuple), and from the shared top-level helpers.
MODEL_ORDER = (("hardware",), ("layers",), ("models", "pipeline"), ("memfit", "recompute"), ("one_more", "balancer"),
               ("strategy",), ("trainers",), ("torch",))
#: Inside a folder with rooms (sub-packages), the order data flows among its members (modules and rooms): a
#: member imports only members before it (or beside it in a tuple), never the folder's own ``__init__``. Every
#: folder that has rooms is listed here with every member, so a new module or room states where it stands.
ROOM_ORDER = {
    "sappkit.balancer": (("setup", "peaks", "evaluate"), ("exact", "ilp"), ("step",),
                         ("plan", "grammar", "optimise", "views")),
    "sappkit.balancer.exact": (("stage_bounds", "cells", "result"), ("enumeration", "segments"), ("boundary",),
                               ("route",)),
    "sappkit.balancer.exact.boundary": (("stage_cells",), ("cap_search",), ("stage_tables",), ("stage_dp",),
                                        ("split_search",), ("search",)),
    "sappkit.strategy": (("config", "compiled"), ("rules",), ("step",), ("result",), ("evaluate",), ("validation", "search")),
    "sappkit.strategy.search": (("space", "shapes"), ("bounds",), ("even_bounds",), ("tasks",), ("engine", "result"),
                                ("strategies",)),
}


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


def _member(folder: str, module: str) -> str | None:
    """The member of ``folder`` (a module or room directly inside it) that holds ``module``; None outside it."""
    return module[len(folder) + 1:].split(".")[0] if module.startswith(folder + ".") else None


def _members(folder: str) -> set[str]:
    """The modules and rooms directly inside ``folder`` (a dotted package name)."""
    path = PACKAGE.parent.joinpath(*folder.split("."))
    return ({p.stem for p in path.glob("*.py") if p.stem != "__init__"}
            | {p.parent.name for p in path.glob("*/__init__.py")})


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


def test_every_folder_with_rooms_states_the_order_of_all_its_members():
    with_rooms = {_module_name(path.parent / "__init__.py").rpartition(".")[0]
                  for path in PACKAGE.glob("*/**/__init__.py") if path.parent.parent != PACKAGE}
    assert with_rooms <= set(ROOM_ORDER), f"folders with rooms missing from ROOM_ORDER: {with_rooms - set(ROOM_ORDER)}"
    for folder, order in ROOM_ORDER.items():
        listed = {member for group in order for member in group}
        assert listed == _members(folder), (f"{folder}: ROOM_ORDER leaves out {sorted(_members(folder) - listed)} "
                                            f"and lists {sorted(listed - _members(folder))}, which do not exist")


def test_inside_a_folder_with_rooms_members_import_only_the_members_before_them():
    graph = _graph()
    for folder, order in ROOM_ORDER.items():
        rank = {member: i for i, group in enumerate(order) for member in group}
        for module, targets in graph.items():
            member = _member(folder, module)
            if member is None:
                continue
            for target in targets:
                assert target != folder, f"{module} imports {folder}, the folder it sits in (an upward import)"
                other = _member(folder, target)
                if other is not None and other != member:
                    assert rank[other] <= rank[member], f"{module} imports {target}, a member of {folder} after it"


def test_rooms_import_each_other_without_cycles():
    graph = _graph()
    for folder in ROOM_ORDER:
        edges = {}
        for module, targets in graph.items():
            member = _member(folder, module)
            if member is not None:
                edges.setdefault(member, set()).update(
                    other for other in map(lambda target: _member(folder, target), targets)
                    if other not in (None, member))
        done, trail = set(), []

        def visit(member):
            if member in trail:
                raise AssertionError(f"{folder}: rooms import in a cycle: "
                                     + " -> ".join(trail[trail.index(member):] + [member]))
            if member in done:
                return
            trail.append(member)
            for other in sorted(edges.get(member, ())):
                visit(other)
            trail.pop()
            done.add(member)

        for member in sorted(edges):
            visit(member)


def test_modules_and_functions_stay_small():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MODULE_LINES:
            too_long.append(f"{path.relative_to(PACKAGE.parent)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                docstring = node.body[0] if ast.get_docstring(node) is not None else None
                lines = node.end_lineno - node.lineno + 1
                lines -= 0 if docstring is None else docstring.end_lineno - docstring.lineno + 1
                if lines > FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: {lines} lines")
    assert not too_long, "over the house's sizes: " + "; ".join(too_long)


# --- what the code, notebooks and docs cite -----------------------------------------------------------------------

#: A repository path as text cites it: rooted at a top-level folder, not a pattern (``tests/test_<module>.py``).
CITED_PATH = re.compile(r"(?<![\w./-])((?:sappkit|tests|notebooks|data|docs|\.ci)/[\w./-]*\w)(?![\w<*{/-])")
#: A dotted name in sappkit as text cites it (``:func:`sappkit.pipeline.simulator.simulate```).
CITED_NAME = re.compile(r"(?<![\w.])(sappkit(?:\.\w+)+)(?![\w*(])")
#: Where installed files live, not in a checkout: the wheel maps data/ to sappkit/data (pyproject.toml).
INSTALLED_ONLY = "sappkit/data"
#: Dotted keys sappkit writes into notebook metadata, not names in the package.
METADATA_KEYS = {"sappkit.client.sent", "sappkit.client.done", "sappkit.requires"}
#: Documents outside the repository that the project was written from; no reader of the repository has them.
OUTSIDE = re.compile(r"DESIGN\.md|STYLE\.md|shared/(?:design|reference)|/work/|\b[Ss]eeds? 00\d\b|\bseed[-_]00\d")


def _cited_texts() -> dict[str, str]:
    """Every text the repository writes for a reader: code and tests, notebooks (cells and outputs), the docs."""
    texts = {}
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), ROOT / "conftest.py",
                 ROOT / "README.md", ROOT / "data" / "README.md", *(ROOT / "docs").glob("*.md")]:
        texts[str(path.relative_to(ROOT))] = path.read_text()
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        cells = json.loads(path.read_text())["cells"]
        parts = ["".join(cell["source"]) for cell in cells]
        parts += ["".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
                  for cell in cells for output in cell.get("outputs", ())]
        texts[str(path.relative_to(ROOT))] = "\n".join(parts)
    texts.pop(str(Path(__file__).relative_to(ROOT)))  # this file spells the patterns out
    return texts


def _resolves(name: str) -> bool:
    """Whether ``name`` is a sappkit module, or an attribute of one (a class's method, a constant...)."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for depth, attribute in enumerate(parts[split:], split + 1):
            if hasattr(value, attribute):
                value = getattr(value, attribute)
            else:  # a dataclass field without a default is no class attribute, and has none of its own
                return attribute in getattr(value, "__dataclass_fields__", {}) and depth == len(parts)
        return True
    return False


def test_every_repository_path_the_code_notebooks_and_docs_cite_exists():
    missing = sorted({f"{source}: {path}" for source, text in _cited_texts().items()
                      for path in CITED_PATH.findall(text)
                      if not path.startswith(INSTALLED_ONLY) and not (ROOT / path.rstrip(".")).exists()})
    assert not missing, "cited paths that do not exist: " + "; ".join(missing)


def test_every_sappkit_name_the_code_notebooks_and_docs_cite_resolves():
    optional = "sappkit.torch" if find_spec("torch") is None else None  # the [torch] extra
    missing = sorted({f"{source}: {name}" for source, text in _cited_texts().items()
                      for name in CITED_NAME.findall(text)
                      if name not in METADATA_KEYS and not (optional and name.startswith(optional))
                      and not _resolves(name.rstrip("."))})
    assert not missing, "cited sappkit names that do not resolve: " + "; ".join(missing)


def test_nothing_cites_a_document_outside_the_repository():
    outside = sorted({f"{source}: {match.group(0)!r}" for source, text in _cited_texts().items()
                      for match in OUTSIDE.finditer(text)})
    assert not outside, ("cited documents outside the repository (name the source, e.g. SAPP's pipeline "
                         "balancer, or docs/design.md): " + "; ".join(outside))
