"""The Python examples of the README and of the documentation pages run, from the repository's root as they
assume, and every line they print fits a 100-column page."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Pages whose examples are recipes, not runs: contributing.md re-executes a notebook in place, calibration.md
#: reads the user's own launch scripts, logs and traces and benchmarks a GPU (tests/calibration runs each step).
RECIPES = {"docs/contributing.md", "docs/calibration.md"}


def _examples(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)


README = _examples(REPO / "README.md")
PAGES = {str(path.relative_to(REPO)): _examples(path) for path in sorted((REPO / "docs").rglob("*.md"))
         if str(path.relative_to(REPO)) not in RECIPES}
EXAMPLES = [("README.md", example) for example in README] + [
    (page, example) for page, examples in PAGES.items() for example in examples]


def test_the_readme_and_the_pages_have_their_examples():
    assert len(README) == 1 and "sappkit.alternatives" in README[0]
    moved = {page: len(examples) for page, examples in PAGES.items() if examples}
    assert moved == {"docs/inputs.md": 1, "docs/search.md": 1, "docs/trainers.md": 1}
    assert "estimate_layers" in PAGES["docs/inputs.md"][0] and "check_config" in PAGES["docs/trainers.md"][0]
    assert "LocalCluster" in PAGES["docs/search.md"][0]


@pytest.mark.parametrize("source, example", EXAMPLES,
                         ids=["the short example", "estimate, balance, simulate", "search on dask",
                              "import, check, plan, export"])
def test_an_example_runs_and_prints_lines_that_fit_the_page(source, example, monkeypatch, capsys):
    if "dask" in example:
        pytest.importorskip("distributed")  # the [cluster] extra: in [dev], not in the core's lowest-versions run
    monkeypatch.chdir(REPO)
    exec(compile(example, source, "exec"), {"__name__": "readme"})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 10 and max(map(len, lines)) <= 100
    assert not [line for line in lines if "..." in line]  # no frame cut short by pandas
