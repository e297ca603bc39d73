"""``sappkit demo``: the headline, and the report it writes unless told not to."""

from pathlib import Path

import pytest

from sappkit import InputError
from sappkit.cli import main
from sappkit.report import default_notebooks

from .test_report import NO_EXTRA, without_notebook_tools


@pytest.fixture()
def writer(monkeypatch, demo):
    """A stand-in for write_report that records its call and says where it would have written (and the demo
    computed once)."""
    calls = []

    def write_report(notebooks, out, *, force=False, progress=None, with_input=False):
        calls.append(dict(notebooks=list(notebooks), out=out, force=force, with_input=with_input))
        progress(f"[1/1] {Path(calls[-1]['notebooks'][0]).name}: executing")
        return Path(out) / "index.html"

    monkeypatch.setattr("sappkit.report.write_report", write_report)
    monkeypatch.setattr("sappkit.commands.demo.run_demo", lambda: demo)
    return calls


def words(text: str) -> list[str]:
    """The text's words: what stays when its lines are wrapped at other widths."""
    return text.split()


def test_cli_demo_prints_the_headline_and_no_report_when_asked(demo, capsys):
    assert main(["demo", "--no-report"]) == 0
    out = capsys.readouterr().out
    assert words(out) == words(demo.describe())
    assert max(map(len, out.splitlines())) <= 100


def test_cli_demo_writes_the_report_of_every_notebook_by_default(demo, writer, capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert writer == [dict(notebooks=default_notebooks(), out=Path("reports"), force=False, with_input=False)]
    headline, report = out.split("\n\nwriting the report to reports\n")
    assert words(headline) == words(demo.describe())
    assert report == (f"[1/1] {default_notebooks()[0].name}: executing\n"
                      f"report written to reports (open {Path('reports') / 'index.html'})\n")


def test_cli_demo_passes_out_force_and_notebooks(writer, tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "r"), "--force", "--notebooks", "notebooks/00_tour.ipynb"]) == 0
    assert writer == [dict(notebooks=[Path("notebooks/00_tour.ipynb")], out=tmp_path / "r", force=True,
                           with_input=False)]
    assert capsys.readouterr().out.splitlines()[-1] == f"report written to {tmp_path / 'r'} (open " \
                                                        f"{tmp_path / 'r' / 'index.html'})"


def test_cli_demo_reports_a_refused_report_folder(demo, monkeypatch, capsys):
    def refuse(notebooks, out, **options):
        raise InputError(f"out: {str(out)!r} already exists and is not empty")

    monkeypatch.setattr("sappkit.report.write_report", refuse)
    monkeypatch.setattr("sappkit.commands.demo.run_demo", lambda: demo)
    assert main(["demo"]) == 2
    assert capsys.readouterr().err == "sappkit demo: out: 'reports' already exists and is not empty\n"


def test_cli_demo_without_the_notebooks_extra_says_so_before_the_demo(monkeypatch, capsys):
    without_notebook_tools(monkeypatch)
    monkeypatch.setattr("sappkit.commands.demo.run_demo", lambda: pytest.fail("the demo ran"))
    assert main(["demo"]) == 2
    assert capsys.readouterr() == ("", "sappkit demo: " + NO_EXTRA + "\n")
