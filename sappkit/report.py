"""Shareable HTML reports: execute notebooks on bundled data and render them for readers without a kernel.

Each notebook runs top to bottom in a fresh kernel of this Python
environment, with its own folder as working directory (so the notebooks'
``../data/...`` paths resolve). nbconvert renders the executed notebook as
HTML with the code hidden by default; plots are embedded images, and the
widgets' last state is stored so a viewer that loads the ipywidgets HTML
manager shows the dashboards as they were left. An ``index.html`` links
every page with its title and first paragraph line.

The report is built in a hidden sibling folder and moved into place only
when every notebook ran, so a failing notebook never leaves half a report
and never destroys the previous one.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from importlib.util import find_spec
from pathlib import Path

from .errors import InputError

__all__ = ["default_notebooks", "execute_notebook", "notebook_summary", "write_report"]

#: Marks an ``index.html`` written by :func:`write_report`; only such folders are replaced under ``force``.
GENERATOR = "sappkit report"
_NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"


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
    if not _NOTEBOOKS_DIR.is_dir():
        raise InputError(f"no notebooks folder at {str(_NOTEBOOKS_DIR)!r} (sappkit is not installed from a "
                         f"source checkout); name the notebooks explicitly (--notebooks PATH ...)")
    return [path for path in sorted(_NOTEBOOKS_DIR.glob("*.ipynb")) if _installed(path)]


def _installed(path: Path) -> bool:
    """Whether the modules the notebook's metadata requires (``sappkit.requires``) are installed."""
    required = json.loads(path.read_text()).get("metadata", {}).get("sappkit", {}).get("requires", [])
    return all(find_spec(module) is not None for module in required)


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


def execute_notebook(path: str | os.PathLike, *, timeout_s: int = 600):
    """Run the notebook at ``path`` top to bottom and return the executed notebook (the file is untouched).

    The kernel is this Python environment's, whatever kernelspecs are
    installed; the working directory is the notebook's folder; the widgets'
    state is stored in the notebook's metadata. A failing (or, after
    ``timeout_s``, hanging) cell raises :class:`~sappkit.InputError` naming
    the notebook, the cell (counted from 1, markdown included) and the error.

    Examples
    --------
    >>> import nbformat, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "answer.ipynb"
    ...     nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("6 * 7")]), path)
    ...     execute_notebook(path).cells[0].outputs[0]["data"]["text/plain"]
    '42'
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellControlSignal, DeadKernelError

    path = Path(path)
    nb = _read_notebook(path)
    current = [0]

    def cell_started(cell, cell_index):
        current[0] = cell_index

    client = NotebookClient(
        nb, timeout=timeout_s, kernel_name="python3", kernel_manager_class=_current_env_kernel_manager(),
        store_widget_state=True, resources={"metadata": {"path": str(path.resolve().parent)}},
        on_cell_start=cell_started,
    )
    try:
        return client.execute()
    except (CellControlSignal, DeadKernelError) as exc:
        raise InputError(_failure_message(path, nb, current[0], exc)) from None


def write_report(notebooks: Iterable[str | os.PathLike], out: str | os.PathLike, *, with_input: bool = False,
                 force: bool = False, progress: Callable[[str], None] | None = None) -> Path:
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
        Called with one line of text as each notebook starts and ends.

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
    paths = _check_notebooks(notebooks)
    out = _check_out(Path(out), force=force)
    say = progress or (lambda line: None)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        entries = []
        for number, path in enumerate(paths, start=1):
            tag = f"[{number}/{len(paths)}] {path.name}"
            say(f"{tag}: executing")
            start = time.perf_counter()
            nb = execute_notebook(path)
            title, line = notebook_summary(nb)
            page = f"{path.stem}.html"
            (staging / page).write_text(_render(nb, title or path.stem, with_input=with_input), encoding="utf-8")
            entries.append((page, title or path.stem, line))
            say(f"{tag}: done in {time.perf_counter() - start:.1f} s -> {page}")
        (staging / "index.html").write_text(_index_html(entries, with_input=with_input), encoding="utf-8")
        staging.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out / "index.html"


def _check_notebooks(notebooks) -> list[Path]:
    if isinstance(notebooks, (str, os.PathLike)):
        notebooks = [notebooks]
    paths = []
    for item in notebooks:
        path = Path(item)
        if path.is_dir():
            paths.extend(sorted(path.glob("*.ipynb")))
        elif path.suffix != ".ipynb" or not path.is_file():
            raise InputError(f"notebooks: {str(path)!r} is not an .ipynb file or a folder of them")
        else:
            paths.append(path)
    if not paths:
        raise InputError("notebooks must name at least one .ipynb file; got none")
    pages = {}
    for path in paths:
        _read_notebook(path)
        if path.stem in pages:
            raise InputError(f"notebooks: {str(pages[path.stem])!r} and {str(path)!r} would both render as "
                             f"{path.stem + '.html'!r}; rename one or report them separately")
        pages[path.stem] = path
    return paths


def _check_out(out: Path, *, force: bool) -> Path:
    if out.exists() and not out.is_dir():
        raise InputError(f"out: {str(out)!r} is a file, expected a report folder")
    if not out.exists() or not any(out.iterdir()):
        return out
    if not force:
        raise InputError(f"out: {str(out)!r} already exists and is not empty; pass force=True (--force) "
                         f"to replace the report there, or choose another folder")
    index = out / "index.html"
    if not (index.is_file() and f'content="{GENERATOR}' in index.read_text(encoding="utf-8", errors="replace")):
        raise InputError(f"out: {str(out)!r} is not a sappkit report (no index.html written by {GENERATOR!r}); "
                         f"force replaces only a previous report, choose another folder")
    return out


def _read_notebook(path: Path):
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except (OSError, ValueError) as exc:
        raise InputError(f"notebooks: cannot read {str(path)!r} as a notebook ({exc})") from None


def _current_env_kernel_manager():
    """A kernel manager class whose ``python3`` is always this interpreter (an installed kernelspec may not be).

    Its sockets are CurveZMQ-encrypted when pyzmq supports it, as ipykernel
    asks (it warns on stderr about a plain TCP kernel).
    """
    import zmq
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class CurrentEnvKernelManager(AsyncKernelManager):
        @default("transport_encryption")
        def _encrypt_when_possible(self):
            return "auto" if zmq.has("curve") else "disabled"

        @property
        def kernel_spec(self):
            return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())

    return CurrentEnvKernelManager


def _failure_message(path: Path, nb, index: int, exc: Exception) -> str:
    first_line = next((text for text in nb.cells[index].source.splitlines() if text.strip()), "")
    if len(first_line) > 60:
        first_line = first_line[:57] + "..."
    if hasattr(exc, "ename"):
        error = f"{exc.ename}: {exc.evalue}"
    else:
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else 'no message'}"
    return (f"notebook {str(path)!r} failed at cell {index + 1} of {len(nb.cells)} ({first_line!r}): {error}; "
            f"no report was written (run the notebook in JupyterLab to see the traceback)")


def _render(nb, title: str, *, with_input: bool) -> str:
    from nbconvert import HTMLExporter

    nb.metadata["title"] = title
    exporter = HTMLExporter(template_name="lab", exclude_input=not with_input,
                            exclude_input_prompt=not with_input, exclude_output_prompt=not with_input)
    body, _ = exporter.from_notebook_node(nb)
    return body


def _index_html(entries: list[tuple[str, str, str]], *, with_input: bool) -> str:
    from . import __version__

    items = "\n".join(
        f'  <li><a href="{html.escape(page)}">{html.escape(title)}</a>'
        + (f"<br><span>{html.escape(line)}</span>" if line else "") + "</li>"
        for page, title, line in entries
    )
    code = "with code" if with_input else "code hidden"
    count = f"{len(entries)} notebook{'s' if len(entries) != 1 else ''}"
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
<ul>
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
