"""Every figure a report's kernels draw, checked for overlapping text as it is drawn.

:func:`checking_figures` gives the kernels an IPython startup file (through ``IPYTHONDIR``) that wraps
matplotlib's ``FigureCanvasBase.print_figure``, which both the inline display and the dashboards' precomputed
states go through: before each figure is printed, :func:`tests.drawing.figure_overlaps` reads it, and the
result goes to a log, one JSON line per figure, after a line naming the notebook the report is running.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

__all__ = ["checking_figures"]

ROOT = Path(__file__).resolve().parents[2]
LOG_ENV = "SAPPKIT_FIGURE_LOG"

_STARTUP = f"""
import json, os, sys
sys.path.insert(0, {str(ROOT)!r})
from matplotlib.backend_bases import FigureCanvasBase
from tests.drawing import figure_overlaps

_print_figure = FigureCanvasBase.print_figure


def _checked_print_figure(self, *args, **kwargs):
    problems = figure_overlaps(self.figure)
    with open(os.environ[{LOG_ENV!r}], "a", encoding="utf-8") as log:
        log.write(json.dumps({{"problems": problems}}) + "\\n")
    return _print_figure(self, *args, **kwargs)


FigureCanvasBase.print_figure = _checked_print_figure
"""


class _Checked:
    """The log of the figures checked, and the progress callback that marks where each notebook starts."""

    def __init__(self, log: Path):
        self.log = log

    def progress(self, line: str) -> None:
        if line.endswith(", starting its kernel"):
            notebook = line.split(": ", 1)[1].removesuffix(", starting its kernel")
            with open(self.log, "a", encoding="utf-8") as log:
                log.write(json.dumps({"notebook": notebook}) + "\n")

    def figures(self) -> dict[str, list[list[str]]]:
        """Notebook -> per figure it drew, what overlaps on it (empty lists for clean figures)."""
        found: dict[str, list[list[str]]] = {}
        notebook = None
        for line in self.log.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if "notebook" in entry:
                notebook = entry["notebook"]
                found.setdefault(notebook, [])
            else:
                found[notebook].append(entry["problems"])
        return found


@contextlib.contextmanager
def checking_figures(folder: Path):
    """Kernels started inside the block check every figure they print; yields the log's reader."""
    startup = folder / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-check-figures.py").write_text(_STARTUP, encoding="utf-8")
    log = folder / "figures.jsonl"
    log.touch()
    saved = {name: os.environ.get(name) for name in ("IPYTHONDIR", LOG_ENV)}
    os.environ.update(IPYTHONDIR=str(folder), **{LOG_ENV: str(log)})
    try:
        yield _Checked(log)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
