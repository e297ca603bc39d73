"""``sappkit report``: without the notebooks extra, one line naming it."""

import sys

from sappkit.cli import main

#: What a command that executes notebooks says where nbformat (the first notebook tool it imports) is missing.
NO_EXTRA = ("executing and rendering notebooks needs the notebooks extra (no module 'nbformat'): "
            "pip install 'sappkit[notebooks]'")


def without_notebook_tools(monkeypatch) -> None:
    """Make ``sappkit.report`` import afresh, as it would where the notebook tools are not installed."""
    for name in [name for name in sys.modules if name == "sappkit.report" or name.startswith("sappkit.report.")]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("nbformat", "nbclient", "nbconvert", "ipykernel"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of a module set to None fails as a missing one


def test_cli_report_without_the_notebooks_extra_names_it(monkeypatch, capsys):
    without_notebook_tools(monkeypatch)
    assert main(["report", "--out", "nowhere"]) == 2
    assert capsys.readouterr() == ("", "sappkit report: " + NO_EXTRA + "\n")
