"""The rendered report, opened in headless chromium as a reader would: titles, decoded plots, painted pixels,
no blank section, working dashboards and nothing fetched.

The report is built once per session from the repository's notebooks
(``sappkit report``'s default), with the network closed to the browser: a
report must read without a kernel and without the internet.
"""

from __future__ import annotations

import importlib.util
import io
import os
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

from sappkit.report import default_notebooks, notebook_summary, write_report

from .. import browser_support
from ..browser_support import blank_parts, browser_context, image_states, pixel_spread, require_browser
from .figure_check import checking_figures

pytestmark = pytest.mark.browser

#: The state a precomputed dashboard shows: its control's value and readout, the label and images of the shown state.
_SHOWN_STATE = """states => {
    const shown = Array.from(states.querySelectorAll(".sappkit-state")).filter(state => !state.hidden);
    const control = states.querySelector(".sappkit-control");
    return {
        kind: control.tagName.toLowerCase(), value: control.value,
        count: states.querySelectorAll(".sappkit-state").length,
        shown: shown.map(state => state.dataset.label),
        readout: (states.querySelector("output") || control.selectedOptions[0]).textContent,
        images: shown.flatMap(state => Array.from(state.querySelectorAll("img")).map(img => img.src)),
    };
}"""


@pytest.fixture(scope="session")
def report(tmp_path_factory):
    """A report on every notebook of the repository: (its index.html, the notebooks, what its figures overlap).

    The kernels check every figure as they draw it (:mod:`.figure_check`): the last item maps each notebook to
    the figures it drew, each with what overlaps on it.
    """
    require_browser()
    notebooks = default_notebooks()
    assert notebooks, "the repository has no notebooks/*.ipynb to report on"
    folder = tmp_path_factory.mktemp("report")
    with checking_figures(folder / "ipython") as checked:
        index = write_report(notebooks, folder / "out", progress=checked.progress)
    return index, notebooks, checked.figures()


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """One headless chromium for the module's pages, offline."""
    with browser_context(tmp_path_factory.mktemp("chromium-profile")) as context:
        context.set_offline(True)
        yield context


def _open(context, path, requests: list | None = None):
    page = context.new_page()
    if requests is not None:
        page.on("request", lambda request: requests.append(request.url))
    page.goto(path.as_uri(), wait_until="load")
    return page


def _has_dashboard(notebook) -> bool:
    nb = nbformat.read(notebook, as_version=4)
    return any(cell.cell_type == "code" and "Dashboard(" in cell.source for cell in nb.cells)


def test_index_links_every_notebook_page(report, context, tmp_path):
    index, notebooks, _ = report
    page = _open(context, index)
    assert page.title() == "sappkit report"
    links = page.eval_on_selector_all("a", "links => links.map(a => [a.getAttribute('href'), a.textContent])")
    assert [href for href, _ in links] == [f"{path.stem}.html" for path in notebooks]
    shot = tmp_path / "index.png"
    page.screenshot(path=shot)
    assert pixel_spread(shot.read_bytes()) > 1.0, f"blank screenshot {shot}"
    page.close()


def test_every_page_renders_its_plots(report, context, tmp_path):
    index, notebooks, _ = report
    for path in notebooks:
        page = _open(context, index.parent / f"{path.stem}.html")
        title = notebook_summary(nbformat.read(path, as_version=4))[0] or path.stem
        assert page.title() == title, path.name
        images = image_states(page)
        assert images, f"{path.name}: no plot in the rendered page"
        broken = [image for image in images if not (image["complete"] and image["natural_width"] > 0)]
        assert not broken, f"{path.name}: images not decoded: {broken}"
        # a dashboard's other states are hidden until chosen; everything else is drawn
        undrawn = [image for image in images if not image["in_hidden_state"] and image["width"] == 0]
        assert not undrawn, f"{path.name}: images not drawn: {undrawn}"
        assert page.locator(".jp-CodeCell .jp-InputArea").count() == 0, f"{path.name}: code shown in a no-input report"
        shot = tmp_path / f"{path.stem}.png"
        page.screenshot(path=shot, full_page=True)  # the whole page, as a reader scrolls it
        assert pixel_spread(shot.read_bytes()) > 1.0, f"{path.name}: blank screenshot {shot}"
        plot = tmp_path / f"{path.stem}-plot.png"
        page.locator("img").first.screenshot(path=plot)
        assert pixel_spread(plot.read_bytes()) > 5.0, f"{path.name}: first plot painted blank {plot}"
        page.close()


def test_no_figure_has_overlapping_text_or_a_legend_over_its_data(report):
    """Every figure the notebooks draw, inline and in the dashboards' precomputed states, as a reader reads it."""
    _, notebooks, figures = report
    drawn = {path.stem for path in notebooks if image_states_expected(path)}
    assert drawn <= {name for name, checks in figures.items() if checks}, figures.keys()
    problems = {name: [problem for check in checks for problem in check] for name, checks in figures.items()}
    assert {name: found for name, found in problems.items() if found} == {}


def image_states_expected(path) -> bool:
    """Whether a notebook draws figures (a ``plot_``, ``plt.`` or dashboard call in a code cell)."""
    nb = nbformat.read(path, as_version=4)
    return any(cell.cell_type == "code" and ("plot_" in cell.source or "plt." in cell.source
                                             or "Dashboard(" in cell.source) for cell in nb.cells)


def test_no_section_and_no_output_is_blank(report, context):
    index, notebooks, _ = report
    for path in notebooks:
        page = _open(context, index.parent / f"{path.stem}.html")
        assert page.locator("h1, h2, h3").count() > 1, f"{path.name}: no sections to check"
        assert blank_parts(page) == {"sections": [], "outputs": []}, path.name
        page.close()


def test_pages_request_nothing_outside_the_report_folder(report, context):
    index, notebooks, _ = report
    folder = index.parent.as_uri() + "/"
    for name in ["index.html", *(f"{path.stem}.html" for path in notebooks)]:
        requests = []
        page = _open(context, index.parent / name, requests)
        page.wait_for_load_state("networkidle")
        assert requests and all(url.startswith(folder) for url in requests), f"{name} requested {requests}"
        page.close()


def test_every_dashboard_is_a_control_over_precomputed_states(report, context, tmp_path):
    index, notebooks, _ = report
    with_dashboards = [path for path in notebooks if _has_dashboard(path)]
    assert {path.stem for path in with_dashboards} >= {"00_tour", "01_memory_fit", "02_balance", "03_recompute",
                                                       "04_alternatives", "06_strategy"}
    for path in with_dashboards:
        page = _open(context, index.parent / f"{path.stem}.html")
        dashboards = page.locator(".sappkit-states")
        assert dashboards.count() == 1, f"{path.name}: expected its dashboard's precomputed states"
        states = dashboards.first
        states.scroll_into_view_if_needed()
        before = states.evaluate(_SHOWN_STATE)
        assert before["count"] >= 3 and len(before["shown"]) == 1 and before["images"], (path.name, before)
        assert before["readout"] == before["shown"][0]
        first = _visible_image(states, tmp_path / f"{path.stem}-before.png")
        _move(page, states.locator(".sappkit-control"), before)
        after = states.evaluate(_SHOWN_STATE)
        assert after["value"] != before["value"] and len(after["shown"]) == 1, (path.name, after)
        assert after["readout"] == after["shown"][0] != before["shown"][0]
        assert after["images"] and after["images"] != before["images"], f"{path.name}: the figure did not change"
        second = _visible_image(states, tmp_path / f"{path.stem}-after.png")
        assert first.shape != second.shape or np.abs(first - second).mean() > 0.5, f"{path.name}: same pixels"
        page.close()


def _move(page, control, before: dict) -> None:
    """Move a dashboard's control as a reader does: a slider by keyboard to one end, a list to another entry."""
    if before["kind"] == "input":
        control.focus()
        page.keyboard.press("Home" if int(before["value"]) > 0 else "End")
    else:
        control.select_option(index=0 if int(before["value"]) > 0 else before["count"] - 1)


def _visible_image(states, path) -> np.ndarray:
    """The first image of the state on show, as painted (grey levels)."""
    states.locator(".sappkit-state:not([hidden]) img").first.screenshot(path=path)
    return np.asarray(Image.open(io.BytesIO(path.read_bytes())).convert("L"), dtype=float)


#: The least width and height (pixels, as painted) of the strategy page's Gantt chart: its frame, the longest dark
#: horizontal and vertical lines of a figure (a Gantt chart squeezed by its legend was 70 px wide, 3 px in a state).
_GANTT_LEAST_PX = (300, 150)
#: The least share of its figure's painted width the Gantt chart's frame takes: drawn 2.2 : 1 beside the stage
#: memory with its legend above the chart alone, notebook 06's plan cell gave it 55% (776 of 1,411 px).
_GANTT_LEAST_SHARE = 0.6
#: The text that opens the strategy page's paragraph above the best plan's figure.
_BEST_PLAN_TEXT = "The best strategy's balanced plan"
#: The index among the page's images of the first image after the paragraph that opens with a given text.
_FIRST_IMAGE_AFTER = """(images, text) => {
    const paragraph = Array.from(document.querySelectorAll("p")).find(p => p.textContent.trim().startsWith(text));
    return paragraph ? images.findIndex(
        image => paragraph.compareDocumentPosition(image) & Node.DOCUMENT_POSITION_FOLLOWING) : -1;
}"""


def test_the_strategy_page_draws_a_readable_gantt_chart_and_no_bar_above_its_peak(report, context, tmp_path):
    """Issue 39: 06_strategy.html's best plan and every state of its dashboard, as painted offline: the Gantt
    chart, drawn beside the stage memory as each one's last figure, is at least :data:`_GANTT_LEAST_PX` wide
    and tall and takes :data:`_GANTT_LEAST_SHARE` of its figure's width, and the kernel's figure check (every
    figure the notebook drew, inline and in each state) finds no bar above the peak its stage marks and no
    Axes squeezed. The screenshots go to ``$SAPPKIT_SCREENSHOTS/06_strategy`` when that is set (a folder to
    look at them in), else to ``tmp_path/06_strategy``; the test prints where (``pytest -s`` or ``-rP``)."""
    index, _, figures = report
    assert figures.get("06_strategy"), "notebook 06 drew no figure the kernel checked"
    problems = [problem for check in figures["06_strategy"] for problem in check]
    assert [problem for problem in problems if "above the peak" in problem or "squeezed" in problem] == []
    page = _open(context, index.parent / "06_strategy.html")
    shots = Path(os.environ.get("SAPPKIT_SCREENSHOTS") or tmp_path) / "06_strategy"
    shots.mkdir(parents=True, exist_ok=True)
    for old in shots.glob("*.png"):
        old.unlink()
    print(f"screenshots of 06_strategy.html: {shots}")
    best = page.locator("img").evaluate_all(_FIRST_IMAGE_AFTER, _BEST_PLAN_TEXT)
    assert best >= 0, f"no figure after the paragraph opening {_BEST_PLAN_TEXT!r}"
    frames = {"the best plan": _frame_px(page.locator("img").nth(best), shots / "best-plan.png")}
    states = page.locator(".sappkit-states").first
    control = states.locator(".sappkit-control")
    count = states.evaluate(_SHOWN_STATE)["count"]
    for number in range(count):
        control.evaluate("(control, value) => { control.value = String(value); "
                         "control.dispatchEvent(new Event('input')); }", number)
        shown = states.evaluate(_SHOWN_STATE)
        assert len(shown["shown"]) == 1 and shown["value"] == str(number), shown
        last = states.locator(".sappkit-state:not([hidden]) img").last
        frames[shown["shown"][0]] = _frame_px(last, shots / f"state-{number}.png")
    page.close()
    assert len(frames) == count + 1 and len(list(shots.glob("*.png"))) == count + 1
    (least_w, least_h), least_share = _GANTT_LEAST_PX, _GANTT_LEAST_SHARE
    assert {where: px for where, px in frames.items()
            if px[0] < least_w or px[1] < least_h or px[0] < least_share * px[2]} == {}, (shots, frames)


def _frame_px(image, path) -> tuple[int, int, int]:
    """Width and height in pixels, as painted, of the frame of ``image``'s leftmost Axes (the Gantt chart), and
    the width of the whole image.

    Its left spine is the leftmost dark vertical line over a third of the image's height; its width is the
    longest dark line that runs right from that spine's foot (the bottom spine).
    """
    image.scroll_into_view_if_needed()
    image.screenshot(path=path)
    dark = np.asarray(Image.open(io.BytesIO(path.read_bytes())).convert("L")) < 96
    height, foot = _runs(dark.T)  # per column: its longest vertical run and the row where it ends
    spines = np.flatnonzero(height >= dark.shape[0] / 3)
    if not spines.size:
        return 0, 0, dark.shape[1]
    left = int(spines[0])
    rows = dark[max(foot[left] - 8, 0):foot[left] + 1, left:]  # the bottom spine, above the tick marks below it
    return int(np.argmin(np.pad(rows, ((0, 0), (0, 1))), axis=1).max()), int(height[left]), dark.shape[1]


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``mask``: the length of its longest run of True and the index of that run's last element."""
    padded = np.pad(mask.astype(np.int8), ((0, 0), (1, 1)))
    edges = np.diff(padded, axis=1)
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)
    longest, last = np.zeros(mask.shape[0], dtype=int), np.zeros(mask.shape[0], dtype=int)
    for row, start, end in zip(rows, starts, ends):
        if end - start > longest[row]:
            longest[row], last[row] = end - start, end - 1
    return longest, last


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
