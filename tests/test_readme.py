"""The README and the documentation pages as a newcomer reads them: their Python examples run, from the
repository's root as they assume, every line they print fits a 100-column page, and what the README says to
run is what the tools run."""

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


#: The number words a heading may count its table's rows in.
_COUNTS = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def _extras(path) -> list[str]:
    """The optional modules a notebook's metadata requires (``sappkit.requires``)."""
    import json

    return json.loads(path.read_text()).get("metadata", {}).get("sappkit", {}).get("requires", [])


def test_the_readme_says_what_a_newcomer_runs_as_the_tools_run_it():
    """Issue 39 items 10 and 13: the questions' heading counts its table's rows ("the four questions" had six);
    the virtual environment is made by ``python3`` (Debian has no ``python``); the progress line quoted is one
    ``sappkit report`` prints (``notebook 3/5`` was ``4/6``, and a cell number is a code cell's of that
    notebook's cells); "after the demo" names commands and files that exist; plain nbconvert and papermill
    get the cell timeout they need (jupyter/nbclient#312)."""
    import nbformat

    from sappkit.cli import main
    from sappkit.report import default_notebooks

    text = (REPO / "README.md").read_text()
    heading = re.search(r"^## The (\w+) questions(, and the search)?\n\n(.*?)\n\n", text, re.M | re.S)
    assert heading, "no questions heading"
    rows = heading[3].splitlines()[2:]  # the table's header and its rule
    assert len(rows) == _COUNTS[heading[1]] + bool(heading[2]), heading[0]
    assert "python3 -m venv .venv" in text and not re.search(r"(?<!\S)python -m venv", text)
    progress = re.search(r"`notebook (\d+)/(\d+): (\w+), cell (\d+)/(\d+)`", text)
    assert progress, "no progress line quoted"
    # what the README's own command runs: the notebooks that need no optional extra (CI also has torch)
    names = [path.stem for path in default_notebooks() if not _extras(path)]
    number, count, name, cell, cells = progress.groups()
    assert (int(count), names[int(number) - 1]) == (len(names), name), progress[0]
    nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    assert (nb.cells[int(cell) - 1].cell_type, int(cells)) == ("code", len(nb.cells)), progress[0]
    after = re.search(r"\*\*After the demo\*\*:(.*?)\n\n", text, re.S)
    assert after, "nothing said about what to run after the demo"
    said = " ".join(after[1].split())
    for command in re.findall(r"`sappkit (\S+)", said):
        with pytest.raises(SystemExit) as helped:
            main([command, "--help"])
        assert helped.value.code == 0, command
    assert all((REPO / path).exists() for path in re.findall(r"(notebooks/\S+\.ipynb|docs/\S+\.md)", said))
    words = " ".join(text.split())
    assert "--ExecutePreprocessor.timeout=" in words and "papermill --execution-timeout" in words
