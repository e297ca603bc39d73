"""Pages that read without a kernel and without the internet.

nbconvert's ``lab`` template loads require.js, MathJax, mermaid and the
ipywidgets HTML manager from public CDNs, and a widget's view is an empty
``<div>`` until that manager draws it (and even then nothing re-solves
without a kernel). :func:`offline_exporter` renders with the template's
script-loading blocks left out; :func:`offline_notebook` puts in each
widget's place what it can show without a kernel:

- the HTML alternative its display carries, where it has one (a sappkit
  dashboard run for a report: its precomputed states, see
  :mod:`sappkit.widgets.offline`);
- else a snapshot from the widget state stored at execution: its controls'
  values written out, then what its HTML, label, progress and output
  widgets showed as it was left (plots included).

Markdown math stays as written (no MathJax is fetched).
"""

from __future__ import annotations

import copy
import html

import nbformat
from jinja2 import DictLoader

from ..widgets.offline import written_out

__all__ = ["offline_exporter", "offline_notebook"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_TEMPLATE_FILE = "sappkit_offline.html.j2"
#: nbconvert's lab page without the blocks that fetch scripts (require.js, MathJax, mermaid, the widget manager).
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{% block html_head_js %}{% endblock html_head_js %}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{% block html_head_js_mathjax %}{% endblock html_head_js_mathjax %}
{% block html_head_js_mermaidjs %}{% endblock html_head_js_mermaidjs %}
"""
_TEXT_WIDGETS = {"HTMLModel": "text/html", "HTMLMathModel": "text/html", "LabelModel": "text/plain"}


def offline_exporter(*, with_input: bool):
    """An nbconvert ``HTMLExporter`` on the lab template that fetches nothing (code cells shown if ``with_input``)."""
    from nbconvert import HTMLExporter

    return HTMLExporter(template_name="lab", extra_loaders=[DictLoader({_TEMPLATE_FILE: _TEMPLATE})],
                        template_file=_TEMPLATE_FILE, exclude_input=not with_input,
                        exclude_input_prompt=not with_input, exclude_output_prompt=not with_input)


def offline_notebook(nb):
    """A copy of ``nb`` without widgets: each widget view gives way to its HTML alternative or a snapshot.

    Consecutive outputs to the same stream are joined, as JupyterLab shows
    them (a print can reach the client in pieces, which would otherwise
    render as separate blocks, an empty one for a lone newline).

    Examples
    --------
    >>> state = {"a1": {"model_name": "IntSliderModel", "state": {"description": "stages", "value": 16}}}
    >>> cell = nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("display_data", data={
    ...     WIDGET_VIEW: {"model_id": "a1", "version_major": 2, "version_minor": 0}, "text/plain": "IntSlider()"})])
    >>> nb = nbformat.v4.new_notebook(cells=[cell], metadata={"widgets": {WIDGET_STATE: {"state": state}}})
    >>> offline = offline_notebook(nb)
    >>> print(offline.cells[0].outputs[0].data["text/html"])
    <p class="sappkit-snapshot"><b>As the notebook left it</b> (the controls need a running kernel): stages 16</p>
    >>> "widgets" in offline.metadata
    False
    """
    nb = copy.deepcopy(nb)
    state = nb.metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        if cell.cell_type == "code":
            shown = [replaced for output in cell.outputs for replaced in _without_widget(output, state)]
            cell.outputs = _joined_streams(shown)
    return nb


def _joined_streams(outputs: list) -> list:
    joined = []
    for output in outputs:
        previous = joined[-1] if joined else None
        if (output.output_type == "stream" and previous is not None and previous.output_type == "stream"
                and previous.name == output.name):
            joined[-1] = nbformat.v4.new_output("stream", name=output.name, text=previous.text + output.text)
        else:
            joined.append(output)
    return joined


def _without_widget(output, state: dict) -> list:
    data = output.get("data", {})
    if WIDGET_VIEW not in data:
        return [output]
    if set(data) - {WIDGET_VIEW, "text/plain"}:
        output = copy.deepcopy(output)
        del output.data[WIDGET_VIEW]
        return [output]
    return _snapshot(data[WIDGET_VIEW].get("model_id", ""), state)


def _snapshot(model_id: str, state: dict) -> list:
    """The widget ``model_id`` as it was left: one line of its controls' values, then what it showed."""
    controls, shown = {}, []

    def visit(model_id: str) -> None:
        model = state.get(model_id)
        if model is None:
            return
        name, values = model.get("model_name", ""), model.get("state", {})
        if "children" in values:
            for child in values["children"]:
                visit(str(child).removeprefix("IPY_MODEL_"))
        elif name == "OutputModel":
            shown.extend(nbformat.from_dict(output) for output in values.get("outputs", []))
        elif name in _TEXT_WIDGETS:
            if values.get("value"):
                shown.append(nbformat.v4.new_output("display_data", data={_TEXT_WIDGETS[name]: values["value"]}))
        elif name.endswith("ProgressModel"):
            bar = (f'<p class="sappkit-snapshot">{html.escape(values.get("description", ""))} <progress '
                   f'value="{values.get("value", 0)}" max="{values.get("max", 100)}"></progress></p>')
            shown.append(nbformat.v4.new_output("display_data", data={"text/html": bar}))
        elif (value := _control_value(values)) is not None:
            controls[values.get("description") or name.removesuffix("Model")] = value

    visit(model_id)
    if controls:
        line = (f'<p class="sappkit-snapshot"><b>As the notebook left it</b> (the controls need a running kernel): '
                f"{html.escape(written_out(controls))}</p>")
        shown.insert(0, nbformat.v4.new_output("display_data", data={"text/html": line}))
    return shown


def _control_value(values: dict):
    """What a control widget shows as its value (an option's label, a number, ...), or None for other widgets."""
    if "_options_labels" in values and "index" in values:
        labels, index = values["_options_labels"], values["index"]
        if index is None:
            return "none"
        return tuple(labels[i] for i in index) if isinstance(index, list) else labels[index]
    return values.get("value")
