"""The rendered report, opened in headless chromium as a reader would: titles, decoded plots, painted pixels.

The report is built once per session from the repository's notebooks
(``sappkit report``'s default), with the network closed to the browser: a
report must read without a kernel and without the internet.
"""

from __future__ import annotations

import importlib.util

import nbformat
import pytest

from sappkit.report import default_notebooks, notebook_summary, write_report

from .. import browser_support
from ..browser_support import browser_context, image_states, pixel_spread, require_browser

pytestmark = pytest.mark.browser


@pytest.fixture(scope="session")
def report(tmp_path_factory):
    """A report on every notebook of the repository: (its index.html, the notebooks)."""
    require_browser()
    notebooks = default_notebooks()
    assert notebooks, "the repository has no notebooks/*.ipynb to report on"
    return write_report(notebooks, tmp_path_factory.mktemp("report") / "out"), notebooks


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """One headless chromium for the module's pages."""
    with browser_context(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


def _open(context, path):
    page = context.new_page()
    page.goto(path.as_uri(), wait_until="load")
    return page


def test_index_links_every_notebook_page(report, context, tmp_path):
    index, notebooks = report
    page = _open(context, index)
    assert page.title() == "sappkit report"
    links = page.eval_on_selector_all("a", "links => links.map(a => [a.getAttribute('href'), a.textContent])")
    assert [href for href, _ in links] == [f"{path.stem}.html" for path in notebooks]
    shot = tmp_path / "index.png"
    page.screenshot(path=shot)
    assert pixel_spread(shot.read_bytes()) > 1.0, f"blank screenshot {shot}"
    page.close()


def test_every_page_renders_its_plots(report, context, tmp_path):
    index, notebooks = report
    for path in notebooks:
        page = _open(context, index.parent / f"{path.stem}.html")
        title = notebook_summary(nbformat.read(path, as_version=4))[0] or path.stem
        assert page.title() == title, path.name
        images = image_states(page)
        assert images, f"{path.name}: no plot in the rendered page"
        broken = [image for image in images if not (image["complete"] and image["natural_width"] > 0
                                                    and image["width"] > 0)]
        assert not broken, f"{path.name}: images not decoded or not drawn: {broken}"
        assert page.locator(".jp-CodeCell .jp-InputArea").count() == 0, f"{path.name}: code shown in a no-input report"
        shot = tmp_path / f"{path.stem}.png"
        page.screenshot(path=shot)
        assert pixel_spread(shot.read_bytes()) > 1.0, f"{path.name}: blank screenshot {shot}"
        plot = tmp_path / f"{path.stem}-plot.png"
        page.locator("img").first.screenshot(path=plot)
        assert pixel_spread(plot.read_bytes()) > 5.0, f"{path.name}: first plot painted blank {plot}"
        page.close()


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception),
                                             ("false", pytest.skip.Exception)])
def test_missing_chromium_skips_only_outside_ci(monkeypatch, tmp_path, ci, outcome):
    monkeypatch.setattr(browser_support, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome) as raised:
        require_browser()
    missing = [f"chromium at {tmp_path / 'no-chromium'} (apt-get install -y chromium)"]
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install playwright; no 'playwright install')")
    expected = "browser test needs " + " and ".join(missing)
    assert str(raised.value) == (expected + "; CI must install them" if ci == "true" else expected)
