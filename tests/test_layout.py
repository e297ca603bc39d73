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
#: The house's rooms (top-level folders and modules), bottom to top: a room imports only rooms before it (or
#: beside it in a tuple), counting imports inside functions, which hide a circle from Python but not from a reader.
#: The face (``sappkit/__init__.py``, "sappkit" here) sits at the bottom: when imported it imports only errors and
#: reaches every room by name on first use; a room may read ``__version__`` from it. The models run from
#: ``hardware`` to ``strategy``; nothing in them imports ``trainers`` or anything above.
HOUSE = (("errors",), ("sappkit", "limits", "columns"), ("_check",), ("_files", "_frames"),
         ("hardware",), ("layers",), ("models", "pipeline"), ("memfit", "recompute"), ("one_more", "balancer"),
         ("strategy",), ("trainers", "plots", "loop"), ("calibration",), ("torch",), ("demo",), ("widgets",),
         ("report",), ("bench",),
         ("commands",), ("cli",), ("__main__",))
#: The model folders, in the order data flows.
MODELS = ("hardware", "layers", "models", "pipeline", "memfit", "recompute", "one_more", "balancer", "strategy")
#: Inside a folder with rooms (sub-packages), the order data flows among its members (modules and rooms): a
#: member imports only members before it (or beside it in a tuple), never the folder's own ``__init__``. Every
#: folder that has rooms is listed here with every member, so a new module or room states where it stands.
ROOM_ORDER = {
    "sappkit.balancer": (("sapp_compat", "setup", "peaks", "evaluate", "mindformers_yaml"), ("exact", "ilp"), ("step",),
                         ("plan", "grammar", "optimise", "views")),
    "sappkit.balancer.exact": (("stage_bounds", "cells", "result"), ("enumeration", "segments"), ("boundary",),
                               ("route",)),
    "sappkit.balancer.exact.boundary": (("stage_cells",), ("cap_search",), ("stage_tables",), ("stage_dp",),
                                        ("split_search",), ("search",)),
    "sappkit.strategy": (("config", "compiled"), ("step", "legality"), ("result",), ("evaluate",),
                         ("validation",), ("bands",), ("search",)),
    "sappkit.strategy.search": (("space", "shapes", "labels"), ("bounds",), ("even_bounds",), ("tasks",),
                                ("explain",), ("engine", "result"),
                                ("strategies",)),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The sappkit modules ``path`` imports, at module level or inside a function."""
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    return _imports_in(path.read_text(), _module_name(path), package=path.name == "__init__.py", modules=modules)


def _imports_in(source: str, name: str, *, package: bool, modules: set[str]) -> set[str]:
    """The ``modules`` that module ``name``'s ``source`` imports anywhere in its body: ``from X import a`` imports
    the module ``X.a`` where there is one, else ``X``."""
    parent = name if package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parent.split(".")[: len(parent.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found |= {f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                      for alias in node.names}
    return {target for target in found if target in modules and target != name}


def _graph() -> dict[str, set[str]]:
    return {_module_name(path): _imports(path) for path in PACKAGE.rglob("*.py")}


def _room(module: str) -> str:
    """The room of the house (a top-level folder or module, or "sappkit", the face) that holds ``module``."""
    return module.split(".")[1] if module.count(".") else module


def _member(folder: str, module: str) -> str | None:
    """The member of ``folder`` (a module or room directly inside it) that holds ``module``; None outside it."""
    return module[len(folder) + 1:].split(".")[0] if module.startswith(folder + ".") else None


def _members(folder: str) -> set[str]:
    """The modules and rooms directly inside ``folder`` (a dotted package name)."""
    path = PACKAGE.parent.joinpath(*folder.split("."))
    return ({p.stem for p in path.glob("*.py") if p.stem != "__init__"}
            | {p.parent.name for p in path.glob("*/__init__.py")})


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first again at the end), or None."""
    state = {}

    def visit(module, trail):
        if state.get(module) == "open":
            return trail[trail.index(module):] + [module]
        if state.get(module) == "done":
            return None
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            found = visit(target, trail + [module])
            if found:
                return found
        state[module] = "done"
        return None

    return next(filter(None, (visit(module, []) for module in sorted(graph))), None)


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` from a room of the house to a room above it."""
    rank = {room: i for i, group in enumerate(HOUSE) for room in group}
    return sorted(f"{module} imports {target}, in {_room(target)}/, a room above {_room(module)}/"
                  for module, targets in graph.items() for target in targets
                  if rank[_room(target)] > rank[_room(module)])


def test_every_room_of_the_house_is_placed_and_every_model_has_a_folder():
    assert len(list(PACKAGE.glob("*.py"))) <= 12
    rooms = {"sappkit"} | {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    rooms |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    listed = {room for group in HOUSE for room in group}
    assert listed == rooms, f"HOUSE leaves out {sorted(rooms - listed)} and lists {sorted(listed - rooms)}"
    assert all((PACKAGE / folder / "__init__.py").is_file() for folder in MODELS)


def test_no_import_cycles_counting_imports_inside_functions():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_room_imports_a_room_above_it_even_inside_a_function():
    upward = _upward(_graph())
    assert not upward, "imports running up the house: " + "; ".join(upward)


def test_the_house_checks_see_an_import_inside_a_function_and_a_circle():
    modules = {"sappkit.balancer.plan", "sappkit.trainers.mindformers", "sappkit.trainers", "sappkit.errors"}
    lazy = "from ..errors import InputError\n\ndef to_yaml(plan):\n    from ..trainers.mindformers import x\n"
    found = _imports_in(lazy, "sappkit.balancer.plan", package=False, modules=modules)
    assert found == {"sappkit.errors", "sappkit.trainers.mindformers"}
    assert _imports_in("from .. import trainers", "sappkit.balancer.plan", package=False,
                       modules=modules) == {"sappkit.trainers"}
    graph = {"sappkit.balancer.plan": found, "sappkit.trainers.mindformers": {"sappkit.balancer.plan"}}
    assert _upward(graph) == ["sappkit.balancer.plan imports sappkit.trainers.mindformers, in trainers/, a room "
                              "above balancer/"]
    assert _cycle(graph) == ["sappkit.balancer.plan", "sappkit.trainers.mindformers", "sappkit.balancer.plan"]


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
                 ROOT / "README.md", ROOT / "data" / "README.md", ROOT / "mkdocs.yml",
                 *(ROOT / "docs").rglob("*.md"), *(ROOT / "docs").rglob("*.py")]:
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
