"""The committed notebooks as nbval reads them: only wall-clock durations are masked, so a changed step time,
objective or bound fails the notebook's check."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: What the library prints for a time it measured on the wall clock (``... in 0.12 s``).
WALL_CLOCK = ("report progress: notebook 1/5: 00_tour, done in 4.4 s -> 00_tour.html",
              "max_sum objective 2,054 ms, gap 0.0, found by exact search in 0.03 s")
#: Computed results nbval must compare (each once masked as a duration).
COMPUTED = ("step time 5,901 ms", "sapp objective 125 ms", "a mode per layer saves 42.9 ms of forward",
            "step objective 4,840 ms (simulated step time; proven lower bound 3,970 ms, gap 18.0%)",
            "simulated step 5,972 ms with the second peak, 5,972 ms without", "forward 12 ms, backward 24.5 s")


def sanitize(text: str) -> str:
    """``text`` as nbval compares it, with the sanitizer the test command gives (pyproject.toml's addopts)."""
    rules = configparser.ConfigParser()
    rules.read(ROOT / "tests" / "nbval_sanitize.cfg")
    for section in rules.sections():
        text = re.sub(rules[section]["regex"], rules[section]["replace"], text)
    return text


def output_texts(path: Path) -> list[str]:
    """Every text a notebook's committed outputs show: streams, plain text and HTML."""
    texts = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", ()):
            pieces = [output.get("text", "")] + [output.get("data", {}).get(kind, "")
                                                 for kind in ("text/plain", "text/html")]
            texts += ["".join(piece) if isinstance(piece, list) else piece for piece in pieces if piece]
    return texts


@pytest.mark.parametrize("text", COMPUTED)
def test_computed_times_are_compared(text):
    assert sanitize(text) == text


@pytest.mark.parametrize("text", WALL_CLOCK)
def test_wall_clock_durations_are_masked(text):
    assert re.search(r"\d+(\.\d+)? s\b", sanitize(text)) is None and "in TIME" in sanitize(text)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_time_a_notebook_shows_is_compared(path):
    for text in output_texts(path):
        times = re.findall(r"[\d,.]+ ?(?:ms|s|seconds)\b", text)
        assert re.findall(r"[\d,.]+ ?(?:ms|s|seconds)\b", sanitize(text)) == times


def printed_lines(path: Path) -> list[str]:
    """The lines a notebook's committed outputs print: streams and plain text (not a widget's stand-in text, not
    the plain copy of a table shown as HTML)."""
    lines = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", ()):
            data = output.get("data", {})
            shown = [output.get("text", "")]
            if not any(kind in data for kind in ("text/html", "image/png", "application/vnd.jupyter.widget-view+json")):
                shown.append(data.get("text/plain", ""))
            lines += "".join("".join(text) if isinstance(text, list) else text for text in shown).splitlines()
    return lines


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_printed_line_fits_100_columns(path):
    long = [line for line in printed_lines(path) if len(line) > 100]
    assert long == [], f"{path.name}: {len(long)} line(s) over 100 columns, the longest {max(map(len, long))}"


def test_every_notebook_says_first_how_to_execute_it_headless():
    """Plain nbconvert once hung forever after 00_tour's last cell (jupyter/nbclient#312, no default timeout):
    each notebook's first cell names the command that works and the timeout the others need."""
    import json

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        first = json.loads(path.read_text())["cells"][0]
        text = "".join(first["source"])
        assert first["cell_type"] == "markdown", path.name
        assert "`sappkit report` runs every notebook" in text, path.name
        assert "`jupyter nbconvert --execute --ExecutePreprocessor.timeout=60`" in text, path.name
        assert "`papermill --execution-timeout 60`" in text, path.name
