"""``sappkit report``: executed pages, the index, overwrite protection and failing notebooks named to the cell."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import io
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from sappkit import InputError
from sappkit.cli import main
from sappkit.report import default_notebooks, left_out_notebooks, notebook_summary, write_report

new_code, new_markdown = nbformat.v4.new_code_cell, nbformat.v4.new_markdown_cell

#: Reads ``../data/limit.txt`` (so it only works from the notebook's own folder), prints, plots, and leaves
#: a slider at a value set after it was displayed (the stored widget state must hold the last value).
_DASHBOARD_CELLS = [
    new_markdown("# Stage memory under a **limit**\n\nHow the [limit](https://example.org) caps `memory_mb`.\n\n"
                 "More prose."),
    new_code("from pathlib import Path\nlimit_mb = int(Path('../data/limit.txt').read_text())\n"
             "print(f'limit {limit_mb} MB')"),
    new_code("import matplotlib.pyplot as plt\nplt.bar([0, 1], [limit_mb / 2, limit_mb / 3]);"),
    new_code("import ipywidgets as widgets\nslider = widgets.IntSlider(value=1, max=99999, "
             "description='memory limit')\nslider"),
    new_code("slider.value = limit_mb"),
]


def _write(path: Path, cells) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A two-page report written by the command line; yields (folder, notebooks, stdout)."""
    root = tmp_path_factory.mktemp("project")
    (root / "data").mkdir()
    (root / "data" / "limit.txt").write_text("48000")
    notebooks = [_write(root / "notebooks" / "01_stage_memory.ipynb", _DASHBOARD_CELLS),
                 _write(root / "notebooks" / "02_plain.ipynb", [new_code("print('no heading here')")])]
    out = root / "reports"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", "--notebooks", str(root / "notebooks"), "--out", str(out)]) == 0
    return out, notebooks, stdout.getvalue()


def test_progress_lines_name_each_notebook_and_the_output(built):
    out, _, stdout = built
    lines = [re.sub(r"done in \d+\.\d s", "done in T s", line) for line in stdout.splitlines()]
    assert lines == [
        "notebook 1/2: 01_stage_memory, starting its kernel",
        *[f"notebook 1/2: 01_stage_memory, cell {cell}/5" for cell in range(2, 6)],
        "notebook 1/2: 01_stage_memory, done in T s -> 01_stage_memory.html",
        "notebook 2/2: 02_plain, starting its kernel",
        "notebook 2/2: 02_plain, cell 1/1",
        "notebook 2/2: 02_plain, done in T s -> 02_plain.html",
        f"report written to {out} (open {out / 'index.html'})",
    ]


def test_index_links_each_page_with_its_heading_and_first_line(built):
    out, _, _ = built
    assert sorted(path.name for path in out.iterdir()) == ["01_stage_memory.html", "02_plain.html", "index.html"]
    index = (out / "index.html").read_text()
    items = re.findall(r'<li><a href="([^"]+)">([^<]*)</a>(?:<br><span>([^<]*)</span>)?</li>', index)
    assert items == [("01_stage_memory.html", "Stage memory under a limit", "How the limit caps memory_mb."),
                     ("02_plain.html", "02_plain", "")]
    assert '<meta name="generator" content="sappkit report 0.1.0">' in index
    assert "<p>2 notebooks executed by sappkit 0.1.0 (code hidden).</p>" in index


def test_page_runs_in_its_folder_hides_code_and_keeps_plots_and_widgets_as_left(built):
    out, _, _ = built
    page = (out / "01_stage_memory.html").read_text()
    assert "<title>Stage memory under a limit</title>" in page
    assert "limit 48000 MB" in page
    assert "class=\"jp-CodeMirrorEditor" not in page and "read_text" not in page and "plt.bar" not in page
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', page)) == 1
    # the slider as it was left (its value set after it was displayed), written out: the page has no kernel
    assert ('<p class="sappkit-snapshot"><b>As the notebook left it</b> (the controls need a running kernel): '
            'memory limit 48,000</p>') in page
    assert "widget-state" not in page and "widget-view" not in page and "<script" not in page


def test_existing_report_is_refused_before_anything_runs(built, capsys):
    out, notebooks, _ = built
    before = {path.name: path.stat().st_mtime_ns for path in out.iterdir()}
    message = (f"out: {str(out)!r} already exists and is not empty; pass force=True to replace the "
               f"report there, or choose another folder")
    with pytest.raises(InputError) as raised:
        write_report(notebooks, out)
    assert str(raised.value) == message
    assert main(["report", "--notebooks", *map(str, notebooks), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"sappkit report: --out {str(out)!r} already exists and is not empty; add "
                                       "--force to replace the report there, or choose another folder (--out DIR)\n")
    assert {path.name: path.stat().st_mtime_ns for path in out.iterdir()} == before


def test_force_replaces_a_previous_report_only(built, tmp_path):
    out, notebooks, _ = built
    stranger = tmp_path / "photos"
    stranger.mkdir()
    (stranger / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(InputError) as raised:
        write_report(notebooks, stranger, force=True)
    assert str(raised.value) == (f"out: {str(stranger)!r} is not a sappkit report (no index.html written by "
                                 f"'sappkit report'); force replaces only a previous report, choose another folder")
    previous = shutil.copytree(out, tmp_path / "report")
    lines = []
    index = write_report([notebooks[1]], previous, with_input=True, force=True, progress=lines.append)
    assert index == previous / "index.html"
    assert sorted(path.name for path in previous.iterdir()) == ["02_plain.html", "index.html"]
    assert "<span class=\"s1\">'no heading here'</span>" in (previous / "02_plain.html").read_text()
    assert "(with code)" in index.read_text()
    assert [line.split(",")[0] for line in lines] == ["notebook 1/1: 02_plain"] * 3
    assert sorted(path.name for path in tmp_path.iterdir()) == ["photos", "report"]


def test_failing_notebook_names_cell_and_error_and_keeps_previous_report(built, tmp_path):
    out, notebooks, _ = built
    previous = shutil.copytree(out, tmp_path / "report")
    broken = _write(tmp_path / "broken.ipynb", [new_markdown("# Broken"), new_code("x = 1"),
                                                new_code("# check the plan\nraise ValueError(f'bad stage {x}')"),
                                                new_code("print('never runs')")])
    with pytest.raises(InputError) as raised:
        write_report([broken, notebooks[1]], previous, force=True)
    assert str(raised.value) == (f"notebook {str(broken)!r} failed at cell 3 of 4 ('# check the plan'): "
                                 f"ValueError: bad stage 1; no report was written (run the notebook in "
                                 f"JupyterLab to see the traceback)")
    assert sorted(path.name for path in previous.iterdir()) == sorted(path.name for path in out.iterdir())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["broken.ipynb", "report"]


def test_bad_notebook_arguments_are_named(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hi")
    first = _write(tmp_path / "a" / "tour.ipynb", [])
    second = _write(tmp_path / "b" / "tour.ipynb", [])
    (tmp_path / "junk.ipynb").write_text("{not json")
    (tmp_path / "file").write_text("")
    cases = [
        ([text], tmp_path / "r", f"notebooks: {str(text)!r} is not an .ipynb file or a folder of them"),
        ([tmp_path / "missing.ipynb"], tmp_path / "r",
         f"notebooks: {str(tmp_path / 'missing.ipynb')!r}: no such file or folder"),
        ([], tmp_path / "r", "notebooks must name at least one .ipynb file; got none"),
        ([tmp_path / "empty"], tmp_path / "r", "notebooks must name at least one .ipynb file; got none"),
        ([first, second], tmp_path / "r", (f"notebooks: {str(first)!r} and {str(second)!r} would both render "
                                           f"as 'tour.html'; rename one or report them separately")),
        ([first], tmp_path / "file", f"out: {str(tmp_path / 'file')!r} is a file, expected a report folder"),
        ([first], tmp_path / "file" / "a" / "report",
         (f"out: {str(tmp_path / 'file' / 'a' / 'report')!r} would be inside {str(tmp_path / 'file')!r}, which is a "
          f"file, not a folder; choose another report folder")),
    ]
    (tmp_path / "empty").mkdir()
    for notebooks, out, message in cases:
        with pytest.raises(InputError) as raised:
            write_report(notebooks, out)
        assert str(raised.value) == message
    with pytest.raises(InputError) as raised:
        write_report([tmp_path / "junk.ipynb"], tmp_path / "r")
    assert str(raised.value) == (f"notebooks: {str(tmp_path / 'junk.ipynb')!r} is not a Jupyter notebook (not JSON: "
                                 f"Expecting property name enclosed in double quotes: line 1 column 2 (char 1))")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("cells", "expected"), [
    ([new_markdown("intro line\n\n## Fit `memory` *per* layer\n")], ("Fit memory per layer", "intro line")),
    ([new_code("# not a heading"), new_markdown("<img src='x.png'>\n\n| a |\n\n- first **point**\n- second")],
     ("", "first point - second")),
    ([new_markdown("# Only a heading")], ("Only a heading", "")),
    ([new_markdown("# T\n```\nx = 1\n\ny = 2\n```\n**Bold** start,\nwrapped *over\ntwo* lines. Next one.")],
     ("T", "Bold start, wrapped over two lines.")),
    ([new_markdown("# Long\n\n" + "word " * 40)], ("Long", ("word " * 32).strip() + " …")),
    ([], ("", "")),
])
def test_notebook_summary(cells, expected):
    assert notebook_summary(nbformat.v4.new_notebook(cells=cells)) == expected


def test_default_notebooks_are_the_repository_notebooks_in_order(monkeypatch, tmp_path):
    folder = Path(__file__).resolve().parents[2] / "notebooks"
    # Every repository notebook is either run or left out with why; only 05 may be (without its
    # [torch] extra).
    missing = ", ".join(name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None)
    expected_left = {folder / "05_pytorch.ipynb": f"needs {missing}, not installed here"} if missing else {}
    assert left_out_notebooks() == expected_left
    assert default_notebooks() == sorted(set(folder.glob("*.ipynb")) - set(expected_left))
    # A notebook that needs an optional extra the environment lacks is left out, and named with why.
    for name, requires in (("a.ipynb", ["json"]), ("b.ipynb", ["no_such_module_for_sappkit", "json", "no_such_2"]),
                           ("c.ipynb", [])):
        nbformat.write(nbformat.v4.new_notebook(metadata={"sappkit": {"requires": requires}}), tmp_path / name)
    monkeypatch.setattr("sappkit.report.pages._NOTEBOOKS_DIR", tmp_path)
    assert [path.name for path in default_notebooks()] == ["a.ipynb", "c.ipynb"]
    assert left_out_notebooks() == {tmp_path / "b.ipynb": "needs no_such_module_for_sappkit, no_such_2, not "
                                                          "installed here"}


def test_the_index_names_the_notebooks_left_out_and_why(tmp_path):
    notebook = _write(tmp_path / "01_notes.ipynb", [new_markdown("# Notes\n\nA page.")])
    index = write_report([notebook], tmp_path / "r", left_out={tmp_path / "05_pytorch.ipynb": "needs torch, not "
                                                                                              "installed here"})
    text = index.read_text()
    assert "<p>1 notebook executed by sappkit" in text
    assert "<p>Left out: 05_pytorch (needs torch, not installed here).</p>" in text


@pytest.fixture
def unwritable():
    """A folder no one may make anything in, not even root (Linux's sysfs), and the reason the system gives."""
    if not Path("/sys/kernel").is_dir():
        pytest.skip("needs Linux's sysfs for a folder even root cannot write in")
    try:
        Path("/sys/sappkit-probe").mkdir()
    except OSError as exc:
        return Path("/sys"), exc.strerror
    Path("/sys/sappkit-probe").rmdir()
    pytest.skip("/sys is writable here")


def test_out_where_no_folder_can_be_made_is_refused_before_anything_runs(tmp_path, capsys, unwritable):
    folder, reason = unwritable
    notebook = _write(tmp_path / "writes.ipynb", [new_code("open('ran', 'w').close()")])
    for out in (folder / "report", folder / "new" / "deeper" / "report"):
        assert main(["report", "--notebooks", str(notebook), "--out", str(out)]) == 2
        assert capsys.readouterr().err == (f"sappkit report: out: cannot make the report folder {str(out)!r} "
                                           f"({reason}); choose a folder you can write to\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["writes.ipynb"]


def test_a_page_that_cannot_be_written_leaves_the_previous_report_alone(built, tmp_path, monkeypatch):
    out, notebooks, _ = built
    previous = shutil.copytree(out, tmp_path / "report")
    before = {path.name: path.read_bytes() for path in previous.iterdir()}
    write_text = Path.write_text

    def disk_full_at_the_index(path, text, *args, **kwargs):
        if path.name == "index.html":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(path, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", disk_full_at_the_index)
    with pytest.raises(InputError) as raised:
        write_report([notebooks[1]], previous, force=True)
    assert str(raised.value) == (f"out: cannot write the page 'index.html' of the report {str(previous)!r} "
                                 f"(No space left on device); no report was written")
    assert {path.name: path.read_bytes() for path in previous.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report"]
