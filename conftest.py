"""Collection for the whole tree: figures drawn off screen (Agg) and closed after every test, doctests included
(a figure one module leaves open would be counted by the next module's test on the same worker); the slow lane;
and without PyTorch, what needs the ``[torch]`` extra reported as skipped.

The slow lane (``pytest -m slow``; ``pytest -m "not slow"`` is the fast lane, docs/contributing.md says when to run
which): every notebook under nbval, the real-browser checks, the fuzz suite, and the exhaustive and brute-force
tests marked ``slow`` where they are written. A plain ``pytest``, as CI runs it, runs both.

A file that imports torch (the ``sappkit.torch`` modules under ``--doctest-modules``, the torch tests and
their helpers, notebook 05) is replaced by one collector that skips with the reason, so a plain install's
``pytest`` passes and says what it left out. In CI (``CI`` set) a missing torch fails instead: there the
extra is installed, and these files are the only proof that the measured layer tables work.
"""

from importlib.util import find_spec
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from tests.ci import in_ci  # noqa: E402

ROOT = Path(__file__).parent
#: Files and folders that import torch when collected.
NEEDS_TORCH = (ROOT / "sappkit" / "torch", ROOT / "tests" / "torch", ROOT / "notebooks" / "05_pytorch.ipynb")
#: What runs without torch anyway: the test of that very case, and the folder's own plumbing.
RUNS_WITHOUT_TORCH = tuple(ROOT / "tests" / "torch" / name for name in ("test_import.py", "conftest.py", "__init__.py"))
#: Folders whose every test is slow: the notebooks (each executed in a kernel) and the fuzz suite.
SLOW_FOLDERS = (ROOT / "notebooks", ROOT / "tests" / "fuzz")
REASON = "needs PyTorch, the [torch] extra (pip install torch==2.13.0 && pip install -e '.[dev,torch]')"


def needs_missing_torch(path: Path) -> bool:
    """Whether collecting ``path`` would import torch on a machine that lacks it."""
    if find_spec("torch") is not None or path in RUNS_WITHOUT_TORCH:
        return False
    return any(path == place or place in path.parents for place in NEEDS_TORCH)


class TorchMissing(pytest.File):
    """Stands in for a file that needs torch: skipped with the reason, or an error in CI."""

    def collect(self):
        if in_ci():
            raise self.CollectError(f"{self.path.relative_to(ROOT)} {REASON}; CI must install it")
        pytest.skip(f"{self.path.relative_to(ROOT)} {REASON}")


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collectors = yield
    if collectors and needs_missing_torch(Path(file_path)):
        return [TorchMissing.from_parent(parent, path=file_path)]
    return collectors


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Mark the slow lane (the slow folders' items and the real-browser checks, ``browser``) and the tests whose
    examples hypothesis draws (``property``: .ci/lowest runs them on the lowest hypothesis, which draws others)."""
    for item in items:
        path = Path(item.path)
        if item.get_closest_marker("browser") or any(path == folder or folder in path.parents
                                                     for folder in SLOW_FOLDERS):
            item.add_marker(pytest.mark.slow)
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


@pytest.fixture(autouse=True)
def _close_figures():
    """Every figure a test or doctest leaves open is closed after it."""
    yield
    plt.close("all")
