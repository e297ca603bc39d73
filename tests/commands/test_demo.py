"""``sappkit demo``: the headline, and the report it writes unless told not to."""

from pathlib import Path

import pytest

from sappkit import InputError
from sappkit.cli import main
from sappkit.report import default_notebooks, left_out_notebooks

from .test_report import NO_EXTRA, without_notebook_tools


@pytest.fixture()
def writer(monkeypatch, demo, tmp_path):
    """A stand-in for write_report that records its call and says where it would have written (and the demo
    computed once), run from an empty folder (so the default report folder is free)."""
    calls = []
    monkeypatch.chdir(tmp_path)

    def write_report(notebooks, out, *, force=False, progress=None, with_input=False, left_out=None):
        calls.append(dict(notebooks=list(notebooks), out=out, force=force, with_input=with_input))
        if left_out:
            calls[-1]["left_out"] = {Path(path).name: why for path, why in left_out.items()}
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
    expected = dict(notebooks=default_notebooks(), out=Path("reports"), force=False, with_input=False)
    left_out = left_out_notebooks()  # notebook 05 without the [torch] extra, as the Quickstart installs
    if left_out:
        expected["left_out"] = {path.name: why for path, why in left_out.items()}
    assert writer == [expected]
    headline, report = out.split("\n\nwriting the report to reports\n")
    assert words(headline) == words(demo.describe())
    assert report == ("".join(f"left out: {path.stem} ({why})\n" for path, why in left_out.items())
                      + f"[1/1] {default_notebooks()[0].name}: executing\n"
                      f"report written to reports (open {Path('reports') / 'index.html'})\n")


def test_cli_demo_passes_out_force_and_notebooks(writer, tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "r"), "--force", "--notebooks", "notebooks/00_tour.ipynb"]) == 0
    assert writer == [dict(notebooks=[Path("notebooks/00_tour.ipynb")], out=tmp_path / "r", force=True,
                           with_input=False)]
    assert capsys.readouterr().out.splitlines()[-1] == f"report written to {tmp_path / 'r'} (open " \
                                                        f"{tmp_path / 'r' / 'index.html'})"


def test_cli_demo_names_the_notebooks_it_leaves_out_and_why(writer, monkeypatch, capsys):
    """Without torch, notebook 05 is not executed, and the demo says so (the index page too: test_pages)."""
    from importlib.util import find_spec

    monkeypatch.setattr("sappkit.report.pages.find_spec", lambda name: None if name == "torch" else find_spec(name))
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "\nleft out: 05_pytorch (needs torch, not installed here)\n" in out
    assert writer[0]["left_out"] == {"05_pytorch.ipynb": "needs torch, not installed here"}
    names = [path.name for path in writer[0]["notebooks"]]
    assert "05_pytorch.ipynb" not in names and names[:5] == [f"0{n}_{name}.ipynb" for n, name in enumerate(
        ("tour", "memory_fit", "balance", "recompute", "alternatives"))]


def test_cli_demo_refuses_a_report_folder_in_the_way_before_the_demo(monkeypatch, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setattr("sappkit.commands.demo.run_demo", lambda: pytest.fail("the demo ran"))
    assert main(["demo", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr() == ("", f"sappkit demo: --out {str(tmp_path)!r} already exists and is not empty; add "
                                       "--force to replace the report there, or choose another folder (--out DIR)\n")


def test_cli_demo_reports_a_refused_report_folder(demo, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)  # a clean folder: the Quickstart's own `sappkit demo` leaves reports/ in the clone

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
