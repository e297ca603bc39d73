"""Shareable HTML reports: execute notebooks on bundled data and render them for readers without a kernel.

Each notebook runs top to bottom in a fresh kernel of this Python
environment, with its own folder as working directory (so the notebooks'
``../data/...`` paths resolve), told that it runs for a report (so the
dashboards precompute their states). nbconvert renders the executed
notebook as HTML with the code hidden by default; plots are embedded images,
and a page needs no kernel and fetches nothing (:mod:`~sappkit.report.offline`):
each dashboard shows its precomputed states behind a control that works in
the page, any other widget a snapshot of how it was left. An ``index.html``
links every page with its title and first paragraph line.

The report is built in a hidden sibling folder and moved into place only
when every notebook ran, so a failing notebook never leaves half a report
and never destroys the previous one.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from importlib.util import find_spec
from pathlib import Path

from ..errors import InputError

__all__ = ["check_out", "default_notebooks", "left_out_notebooks", "notebook_summary", "write_report"]

#: Marks an ``index.html`` written by :func:`write_report`; only such folders are replaced under ``force``.
GENERATOR = "sappkit report"
_NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"


def default_notebooks() -> list[Path]:
    """Every ``notebooks/*.ipynb`` of the repository sappkit is installed from, in sorted order.

    A notebook whose metadata lists modules under ``sappkit.requires`` (an
    optional extra, e.g. ``05_pytorch.ipynb`` needs ``torch``) is left out
    where one of them is not installed.

    Examples
    --------
    >>> all(path.suffix == ".ipynb" for path in default_notebooks())
    True
    """
    return [path for path in _repository_notebooks() if not _missing(path)]


def left_out_notebooks() -> dict[Path, str]:
    """The notebooks :func:`default_notebooks` leaves out, each with why: the modules it needs that are missing.

    Examples
    --------
    >>> all(why.startswith("needs ") for why in left_out_notebooks().values())
    True
    """
    return {path: f"needs {', '.join(missing)}, not installed here" for path in _repository_notebooks()
            if (missing := _missing(path))}


def _repository_notebooks() -> list[Path]:
    if not _NOTEBOOKS_DIR.is_dir():
        raise InputError(f"no notebooks folder at {str(_NOTEBOOKS_DIR)!r} (sappkit is not installed from a "
                         f"source checkout); name the notebooks explicitly (--notebooks PATH ...)")
    return sorted(_NOTEBOOKS_DIR.glob("*.ipynb"))


def _missing(path: Path) -> list[str]:
    """The modules the notebook's metadata requires (``sappkit.requires``) that are not installed."""
    required = json.loads(path.read_text()).get("metadata", {}).get("sappkit", {}).get("requires", [])
    return [module for module in required if find_spec(module) is None]


def notebook_summary(nb) -> tuple[str, str]:
    """The notebook's first markdown heading and the first sentence of its first paragraph, as plain text.

    Either is empty when the notebook's markdown has none; a long sentence
    is cut at a word with an ellipsis.

    Examples
    --------
    >>> import nbformat
    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
    ...     "# Balance: **where** the layers go\\n\\nStages fit the\\n`device`. Then the time."),
    ... ])
    >>> notebook_summary(nb)
    ('Balance: where the layers go', 'Stages fit the device.')
    """
    title = line = ""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        source = re.sub(r"(```|\$\$).*?\1", "", cell.source, flags=re.DOTALL)
        for block in re.split(r"\n\s*\n", source):
            prose = []
            for text in block.splitlines():
                text = text.strip()
                if text.startswith("#"):
                    title = title or _plain(text.lstrip("#"))
                elif text:
                    prose.append(text)
            if prose and not line and not prose[0].startswith(("<", "|", "---", "![")):
                line = _first_sentence(_plain(re.sub(r"^([-*+>]|\d+\.)\s+", "", " ".join(prose))))
            if title and line:
                return title, line
    return title, line


def write_report(notebooks: Iterable[str | os.PathLike], out: str | os.PathLike, *, with_input: bool = False,
                 force: bool = False, progress: Callable[[str], None] | None = None,
                 left_out: Mapping[str | os.PathLike, str] | None = None) -> Path:
    """Execute ``notebooks``, render each as ``out/<name>.html`` plus ``out/index.html``; return the index path.

    Parameters
    ----------
    notebooks
        ``.ipynb`` files (a folder stands for its ``*.ipynb`` in sorted
        order); see :func:`default_notebooks`.
    out
        Report folder. An existing, non-empty folder is refused unless
        ``force``, and even then only when it holds a previous report.
    with_input
        Show the code cells (hidden by default: the report is for readers).
    progress
        Called with one line of text as each notebook starts and ends, and as each of its code cells
        starts (``"notebook 3/5: 03_recompute, cell 12/20"``).
    left_out
        Notebooks not executed, each with why (:func:`left_out_notebooks`):
        the index names them, so a reader knows what the report lacks.

    Examples
    --------
    >>> import nbformat, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "answer.ipynb"
    ...     nbformat.write(nbformat.v4.new_notebook(cells=[
    ...         nbformat.v4.new_markdown_cell("# Answer\\nThe answer, computed."),
    ...         nbformat.v4.new_code_cell("6 * 7")]), path)
    ...     index = write_report([path], Path(folder) / "report")
    ...     sorted(page.name for page in index.parent.iterdir())
    ['answer.html', 'index.html']
    """
    from .execution import execute_notebook

    paths = _check_notebooks(notebooks)
    out = check_out(out, force=force)
    say = progress or (lambda line: None)
    with _staged(out) as staging:
        entries = []
        for number, path in enumerate(paths, start=1):
            tag = f"notebook {number}/{len(paths)}: {path.stem}"
            say(f"{tag}, starting its kernel")
            start = time.perf_counter()
            nb = execute_notebook(path, for_report=True, progress=lambda text, tag=tag: say(f"{tag}, {text}"))
            title, line = notebook_summary(nb)
            page = f"{path.stem}.html"
            _write_page(staging / page, _render(nb, title or path.stem, with_input=with_input), out=out)
            entries.append((page, title or path.stem, line))
            say(f"{tag}, done in {time.perf_counter() - start:.1f} s -> {page}")
        _write_page(staging / "index.html", _index_html(entries, with_input=with_input, left_out=left_out or {}),
                    out=out)
    return out / "index.html"


def _check_notebooks(notebooks) -> list[Path]:
    from .execution import read_notebook

    if isinstance(notebooks, (str, os.PathLike)):
        notebooks = [notebooks]
    paths = []
    for item in notebooks:
        path = Path(item)
        if path.is_dir():
            paths.extend(sorted(path.glob("*.ipynb")))
        elif not path.exists():
            raise InputError(f"notebooks: {str(path)!r}: no such file or folder")
        elif path.suffix != ".ipynb" or not path.is_file():
            raise InputError(f"notebooks: {str(path)!r} is not an .ipynb file or a folder of them")
        else:
            paths.append(path)
    if not paths:
        raise InputError("notebooks must name at least one .ipynb file; got none")
    pages = {}
    for path in paths:
        read_notebook(path)
        if path.stem in pages:
            raise InputError(f"notebooks: {str(pages[path.stem])!r} and {str(path)!r} would both render as "
                             f"{path.stem + '.html'!r}; rename one or report them separately")
        pages[path.stem] = path
    return paths


def check_out(out: str | os.PathLike, *, force: bool = False) -> Path:
    """``out`` as a :class:`~pathlib.Path` when a report may be written there: a new or empty folder, or with
    ``force`` one holding a previous report; else an :class:`~sappkit.InputError` saying why (checked before any
    notebook runs)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"out: {str(out)!r} is a file, expected a report folder")
    above = next(folder for folder in out.parents if folder.exists())
    if not above.is_dir():
        raise InputError(f"out: {str(out)!r} would be inside {str(above)!r}, which is a file, not a folder; "
                         f"choose another report folder")
    if not out.exists() or not any(out.iterdir()):
        return out
    if not force:
        raise InputError(f"out: {str(out)!r} already exists and is not empty; pass force=True to replace the "
                         "report there, or choose another folder",
                         cli=f"--out {str(out)!r} already exists and is not empty; add --force to replace the "
                             "report there, or choose another folder (--out DIR)")
    index = out / "index.html"
    if not (index.is_file() and f'content="{GENERATOR}' in index.read_text(encoding="utf-8", errors="replace")):
        raise InputError(f"out: {str(out)!r} is not a sappkit report (no index.html written by {GENERATOR!r}); "
                         f"force replaces only a previous report, choose another folder")
    return out


@contextlib.contextmanager
def _staged(out: Path):
    """A hidden sibling folder of ``out`` to build the report in, put in ``out``'s place when the block ends well.

    Otherwise it is removed, with the parent folders made for it: nothing
    half-written stays, and a previous report is untouched.
    """
    made = [folder for folder in (out.parent, *out.parent.parents) if not folder.exists()]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    except OSError as exc:
        _remove_empty(made)
        raise InputError(f"out: cannot make the report folder {str(out)!r} ({exc.strerror or exc}); "
                         f"choose a folder you can write to") from None
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(made)
        raise
    try:
        staging.chmod(0o755)
        _move_into_place(staging, out)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(made)
        raise InputError(f"out: cannot put the report in place at {str(out)!r} ({exc.strerror or exc}); "
                         f"no report was written") from None


def _move_into_place(staging: Path, out: Path) -> None:
    """Rename ``staging`` to ``out``; a previous report there steps aside first and goes only once the new one is in."""
    if not out.exists():
        staging.rename(out)
        return
    previous = staging.with_name(staging.name + "-previous")
    out.rename(previous)
    try:
        staging.rename(out)
    except OSError:
        previous.rename(out)
        raise
    shutil.rmtree(previous, ignore_errors=True)


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders``, deepest first, as long as they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _write_page(path: Path, text: str, *, out: Path) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"out: cannot write the page {path.name!r} of the report {str(out)!r} "
                         f"({exc.strerror or exc}); no report was written") from None


def _render(nb, title: str, *, with_input: bool) -> str:
    from .offline import offline_exporter, offline_notebook

    nb = offline_notebook(nb)
    nb.metadata["title"] = title
    body, _ = offline_exporter(with_input=with_input).from_notebook_node(nb)
    return body


def _index_html(entries: list[tuple[str, str, str]], *, with_input: bool, left_out: Mapping) -> str:
    from .. import __version__

    items = "\n".join(
        f'  <li><a href="{html.escape(page)}">{html.escape(title)}</a>'
        + (f"<br><span>{html.escape(line)}</span>" if line else "") + "</li>"
        for page, title, line in entries
    )
    code = "with code" if with_input else "code hidden"
    count = f"{len(entries)} notebook{'s' if len(entries) != 1 else ''}"
    skipped = "".join(f"<p>Left out: {html.escape(Path(path).stem)} ({html.escape(why)}).</p>\n"
                      for path, why in left_out.items())
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="{GENERATOR} {__version__}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>sappkit report</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #222; }}
li {{ margin: 0.8rem 0; }}
a {{ font-size: 1.1rem; }}
span {{ color: #555; }}
</style>
</head>
<body>
<h1>sappkit report</h1>
<p>{count} executed by sappkit {__version__} ({code}).</p>
{skipped}<ul>
{items}
</ul>
</body>
</html>
"""


def _first_sentence(text: str, *, limit: int = 160) -> str:
    sentence = re.match(r".+?[.!?](?=\s|$)", text)
    text = sentence.group(0) if sentence else text
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _plain(text: str) -> str:
    """Markdown inline markup removed: links keep their text, emphasis and code marks go."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"(?<!\w)([*_`]{1,3})(\S(?:.*?\S)?)\1(?!\w)", r"\2", text).strip()
