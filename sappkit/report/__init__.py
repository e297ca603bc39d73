"""Reports a team can share: the notebooks executed on bundled data and rendered as HTML.

Executes each notebook in a fresh kernel without ever waiting on an idle
one (:mod:`~sappkit.report.execution`) and renders the pages and an index
(:mod:`~sappkit.report.pages`).
"""

from .execution import execute_notebook, idle_waits, read_notebook
from .pages import check_out, default_notebooks, left_out_notebooks, notebook_summary, write_report

__all__ = ["check_out", "default_notebooks", "execute_notebook", "idle_waits", "left_out_notebooks",
           "notebook_summary", "read_notebook", "write_report"]
