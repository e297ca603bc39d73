"""MkDocs hook: the notebooks rendered without widgets, so that their pages fetch nothing.

A committed notebook's dashboards are ipywidgets views whose JavaScript would come from a CDN. Before
mkdocs-jupyter renders a notebook, this hook points its page at a copy made by
:func:`sappkit.report.offline.offline_notebook` (each widget view gives way to its HTML alternative or a
snapshot, as in the rendered report), in a temporary folder removed after the build.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

_COPIES: list[Path] = []


def on_files(files, **_):
    """Point every notebook page at its copy without widgets."""
    import nbformat

    from sappkit.report.offline import offline_notebook

    folder = Path(tempfile.mkdtemp(prefix="sappkit-docs-"))
    _COPIES.append(folder)
    for file in files:
        if file.src_uri.endswith(".ipynb"):
            copy = folder / file.src_uri
            copy.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(offline_notebook(nbformat.read(file.abs_src_path, as_version=4)), copy)
            file.abs_src_path = str(copy)
    return files


def on_post_build(**_):
    """Remove the copies."""
    while _COPIES:
        shutil.rmtree(_COPIES.pop(), ignore_errors=True)
