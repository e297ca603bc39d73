"""The README's Python examples run, from the repository's root as the README assumes, and every line they print
fits a 100-column page."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.DOTALL)


def test_the_readme_has_its_examples():
    assert len(EXAMPLES) == 4 and "estimate_layers" in EXAMPLES[1] and "check_config" in EXAMPLES[2]
    assert "LocalCluster" in EXAMPLES[3]


@pytest.mark.parametrize("example", EXAMPLES, ids=["four questions", "estimate, balance, simulate",
                                                   "import, check, plan, export", "search on dask"])
def test_an_example_runs_and_prints_lines_that_fit_the_page(example, monkeypatch, capsys):
    if "dask" in example:
        pytest.importorskip("distributed")  # the [cluster] extra: in [dev], not in the core's lowest-versions run
    monkeypatch.chdir(REPO)
    exec(compile(example, "README.md", "exec"), {"__name__": "readme"})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 10 and max(map(len, lines)) <= 100
    assert not [line for line in lines if "..." in line]  # no frame cut short by pandas
