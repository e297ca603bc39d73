"""Pages for readers without a kernel or a network: widgets give way to what they can show, nothing is fetched."""

from __future__ import annotations

import copy
import re

import nbformat
import pytest

from sappkit.report.offline import WIDGET_STATE, WIDGET_VIEW, offline_exporter, offline_notebook

new_output = nbformat.v4.new_output


def _view(model_id: str, **data) -> dict:
    return new_output("display_data", data={WIDGET_VIEW: {"model_id": model_id, "version_major": 2,
                                                          "version_minor": 0}, "text/plain": "VBox(...)", **data})


def _model(name: str, **state) -> dict:
    return {"model_name": name, "model_module": "@jupyter-widgets/controls", "state": state}


#: A dashboard as nbclient stores it: two rows of controls, a status line, and an Output holding a print and a plot.
_STATE = {
    "box": _model("VBoxModel", children=["IPY_MODEL_row1", "IPY_MODEL_row2", "IPY_MODEL_status", "IPY_MODEL_out"]),
    "row1": _model("HBoxModel", children=["IPY_MODEL_limit", "IPY_MODEL_schedule", "IPY_MODEL_gone"]),
    "row2": _model("HBoxModel", children=["IPY_MODEL_runs", "IPY_MODEL_layer", "IPY_MODEL_button"]),
    "limit": _model("FloatSliderModel", description="memory MB", value=53000.0, layout="IPY_MODEL_layout"),
    "schedule": _model("DropdownModel", description="schedule", index=1, _options_labels=["1f1b", "interleaved"]),
    "runs": _model("SelectMultipleModel", description="runs", index=[0, 2], _options_labels=["r1", "r2", "r3"]),
    "layer": _model("CheckboxModel", description="a mode per layer", value=True),
    "button": _model("ButtonModel", description="one more from here"),
    "status": _model("HTMLModel", value='<b style="color:green">optimal</b>'),
    "out": {"model_name": "OutputModel", "state": {"outputs": [
        {"output_type": "stream", "name": "stdout", "text": "peak 50,617 MB\n"},
        {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},
         "metadata": {}}]}},
    "bar": _model("IntProgressModel", description="17/17", value=17, max=17),
    "layout": _model("LayoutModel", width="640px"),
}


def _notebook(*outputs) -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_markdown_cell("# Dashboards"),
             nbformat.v4.new_code_cell("dashboard", outputs=list(outputs))]
    return nbformat.v4.new_notebook(cells=cells, metadata={"widgets": {WIDGET_STATE: {
        "state": _STATE, "version_major": 2, "version_minor": 0}}})


def test_a_widget_with_an_html_alternative_gives_way_to_it():
    states = '<div class="sappkit-states">precomputed</div>'
    nb = _notebook(_view("box", **{"text/html": states}), new_output("stream", text="after\n"))
    before = copy.deepcopy(nb)
    offline = offline_notebook(nb)
    assert nb == before, "the executed notebook is left as it was"
    assert offline.cells[1].outputs == [new_output("display_data", data={"text/plain": "VBox(...)",
                                                                         "text/html": states}),
                                        new_output("stream", text="after\n")]
    assert "widgets" not in offline.metadata


def test_a_widget_without_one_is_shown_as_it_was_left():
    outputs = offline_notebook(_notebook(_view("box"), _view("bar"), _view("unknown"))).cells[1].outputs
    controls = ("memory MB 53,000, schedule interleaved, runs r1 + r3, a mode per layer on")
    assert outputs == [
        new_output("display_data", data={"text/html": (
            f'<p class="sappkit-snapshot"><b>As the notebook left it</b> (the controls need a running kernel): '
            f"{controls}</p>")}),
        new_output("display_data", data={"text/html": '<b style="color:green">optimal</b>'}),
        new_output("stream", text="peak 50,617 MB\n"),
        new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}),
        new_output("display_data", data={"text/html": (
            '<p class="sappkit-snapshot">17/17 <progress value="17" max="17"></progress></p>')}),
    ]


def test_pieces_of_one_stream_are_joined_as_jupyterlab_shows_them():
    outputs = [new_output("stream", text="const_mb = 3014.6"), new_output("stream", text="\n"),
               new_output("stream", name="stderr", text="warning\n"), new_output("stream", text="a\n"),
               new_output("display_data", data={"text/plain": "frame"}), new_output("stream", text="b\n"),
               new_output("stream", text="c\n")]
    joined = offline_notebook(_notebook(*outputs)).cells[1].outputs
    assert joined == [new_output("stream", text="const_mb = 3014.6\n"),
                      new_output("stream", name="stderr", text="warning\n"), new_output("stream", text="a\n"),
                      new_output("display_data", data={"text/plain": "frame"}), new_output("stream", text="b\nc\n")]


def test_a_page_fetches_nothing_and_runs_only_its_own_script(tmp_path):
    fragment = '<div id="states">states</div><script>document.getElementById("states").hidden = false;</script>'
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Offline\n\nThe bubble is $(p - 1)/m$.\n\n```mermaid\ngraph LR; a-->b\n```"),
        nbformat.v4.new_code_cell("states", outputs=[new_output("execute_result", data={"text/html": fragment},
                                                                execution_count=1)], execution_count=1)],
        metadata={"widgets": {WIDGET_STATE: {"state": {}, "version_major": 2, "version_minor": 0}}})
    page, _ = offline_exporter(with_input=False).from_notebook_node(offline_notebook(nb))
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", page, re.DOTALL)
    assert scripts == [("", 'document.getElementById("states").hidden = false;')]
    assert not re.search(r'\b(src|href)="(https?:)?//', page)
    assert not re.search(r"\bimport\s*\(|@import|url\((https?:)?//", page)
    assert "The bubble is $(p - 1)/m$." in page and "widget-state" not in page


@pytest.mark.parametrize("with_input", [False, True])
def test_code_is_shown_only_when_asked(with_input):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("limit_mb = 53_000")])
    page, _ = offline_exporter(with_input=with_input).from_notebook_node(nb)
    assert ("limit_mb" in page) == with_input
