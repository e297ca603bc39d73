"""The balance dashboard in a real JupyterLab, driven the way a user drives it.

A headless JupyterLab serves a temporary copy of the notebooks and data;
Debian's chromium, driven by Playwright, opens ``02_balance.ipynb``, runs
every cell from the Run menu, moves the dashboard's memory-limit slider with
the keyboard, and checks that the slider's value went down, that the
re-solved plan's figure (stage memory and stage times) was redrawn and that
the status line names the limit the slider shows. Server, kernel and browser are stopped even when the test fails.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from ..browser_support import browser_context, jupyter_lab, log_tail, require_browser, wait_for_kernel

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = "notebooks/02_balance.ipynb"
#: The dashboard under test: the output area holding the slider whose label names the memory limit.
#: Returns the plot images' sources, the status text (HTML and Label widgets, printed lines), the slider's value
#: and its readout (as the status line prints it, e.g. "51,500").
_DASHBOARD_STATE = """() => {
    const dashboard = Array.from(document.querySelectorAll('.jp-OutputArea-output')).find(output =>
        Array.from(output.querySelectorAll('.widget-slider')).some(slider => /memory/i.test(slider.textContent)));
    if (!dashboard) return null;
    const slider = Array.from(dashboard.querySelectorAll('.widget-slider')).find(s => /memory/i.test(s.textContent));
    return {
        images: Array.from(dashboard.querySelectorAll('.widget-output img')).map(img => img.src),
        status: Array.from(dashboard.querySelectorAll(
            '.widget-html-content, .widget-label-basic, [data-mime-type="application/vnd.jupyter.stdout"]'))
            .map(element => element.textContent.trim()).join(' | '),
        value: Number(slider.querySelector('.noUi-handle').getAttribute('aria-valuenow')),
        readout: slider.querySelector('.widget-readout').textContent.trim(),
    };
}"""


@pytest.fixture
def lab_root(tmp_path):
    """A temporary copy of the repository's notebooks and data (JupyterLab saves what it opens)."""
    root = tmp_path / "root"
    for folder in ("notebooks", "data"):
        shutil.copytree(REPO / folder, root / folder)
    return root


def test_memory_slider_redraws_plot_and_status(lab_root, tmp_path):
    require_browser()
    home = tmp_path / "home"
    with jupyter_lab(lab_root, home) as (base, token), browser_context(tmp_path / "chromium-profile") as context:
        page = context.new_page()
        try:
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
            page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(timeout=90_000)
            wait_for_kernel(base, token)
            # The committed outputs (and widget state) would show a dashboard before anything ran.
            _menu(page, "Edit", "Clear Outputs of All Cells")
            assert page.evaluate(_DASHBOARD_STATE) is None
            _menu(page, "Run", "Run All Cells")
            page.wait_for_function(f"() => {{ const s = ({_DASHBOARD_STATE})(); return s && s.images.length > 0 "
                                   f"&& s.status !== ''; }}", timeout=90_000)
            before = page.evaluate(_DASHBOARD_STATE)
            slider = page.locator(".jp-OutputArea-output .widget-slider", has_text=re.compile("memory", re.IGNORECASE))
            slider.locator(".noUi-handle").focus()
            for _ in range(3):
                page.keyboard.press("ArrowLeft")
            page.wait_for_function(
                f"([before]) => {{ const s = ({_DASHBOARD_STATE})(); return s && s.value < before.value "
                f"&& s.images.join() !== before.images.join() && s.status.includes(s.readout); }}",
                arg=[before], timeout=60_000)
            after = page.evaluate(_DASHBOARD_STATE)
        except Exception:
            shot = tmp_path / "jupyterlab.png"
            page.screenshot(path=shot)
            print(f"screenshot: {shot}\nserver log:\n{log_tail(home)}")
            raise
    assert after["value"] < before["value"]
    assert after["images"] != before["images"]
    assert after["status"] != before["status"]
    assert before["readout"] in before["status"] and after["readout"] in after["status"]


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-item", has_text=menu).first.click()
    page.get_by_role("menuitem", name=item, exact=True).click()
