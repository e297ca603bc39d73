"""Dashboards for readers without a kernel: a dashboard's states precomputed behind one control.

A live dashboard re-solves as its controls move; a rendered report has no
kernel and no network. :func:`record_states` runs a dashboard's own callback
(the one its live controls call) over a list of control values and keeps
each state's text and figures (as PNG); :func:`states_html` turns the states
into one self-contained HTML fragment: a range slider (or a list) and a few
lines of inline script that show one state at a time. Nothing is fetched;
without script the fragment shows the state it starts at.

Precomputing costs a solve and a drawing per state, so the dashboards do it
only when the kernel runs for a report (``sappkit report`` sets
:data:`REPORT_ENV`): their widget (:func:`dashboard_box`) then carries the
fragment as its HTML alternative, which the report shows in place of the
widget. A notebook run in JupyterLab or by nbval pays nothing.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import matplotlib.pyplot as plt

from ..errors import InputError

__all__ = ["REPORT_ENV", "Shown", "State", "control_states", "dashboard_box", "display_shown", "for_report",
           "record_states", "states_html", "written_out"]

#: Set to ``"1"`` in the environment of a kernel that runs a notebook for a report (by ``sappkit report``).
REPORT_ENV = "SAPPKIT_REPORT"


@dataclass(frozen=True, eq=False)
class Shown:
    """What a dashboard's callback gives for one setting of its controls.

    Attributes
    ----------
    result : object
        What it computed (a plan, a choice, ...), or None when the setting was refused.
    text : str
        The text the dashboard shows (a status line, a summary, a refusal).
    figures : tuple of matplotlib Figure
        The figures it shows, in order.
    alert : bool
        The text is a refusal or says that nothing fits (shown in red).
    """

    result: Any
    text: str = ""
    figures: tuple = ()
    alert: bool = False


@dataclass(frozen=True)
class State:
    """One precomputed state: the control value written out, the text shown and the figures as PNG bytes."""

    label: str
    text: str
    images: tuple[bytes, ...]
    alert: bool = False


def for_report() -> bool:
    """Whether this process runs a notebook for a report (:data:`REPORT_ENV` is ``"1"``)."""
    return os.environ.get(REPORT_ENV) == "1"


def record_states(show: Callable[[Any], Shown], values: Iterable, *, label: Callable[[Any], str],
                  dpi: float = 80) -> list[State]:
    """``show(value)`` for every value, each kept as a :class:`State` labelled ``label(value)``; figures closed.

    Examples
    --------
    >>> def show(limit):
    ...     figure, ax = plt.subplots(figsize=(2, 1))
    ...     ax.axhline(limit)
    ...     return Shown(limit, text=f"limit {limit}", figures=(figure,), alert=limit < 2)
    >>> open_before = len(plt.get_fignums())
    >>> states = record_states(show, [1, 2], label=lambda limit: f"{limit} GB")
    >>> [(state.label, state.text, state.alert, state.images[0][:4]) for state in states]
    [('1 GB', 'limit 1', True, b'\\x89PNG'), ('2 GB', 'limit 2', False, b'\\x89PNG')]
    >>> len(plt.get_fignums()) == open_before
    True
    """
    states = []
    for value in values:
        shown = show(value)
        try:
            images = tuple(_png(figure, dpi) for figure in shown.figures)
        finally:
            for figure in shown.figures:
                plt.close(figure)
        states.append(State(label(value), shown.text, images, shown.alert))
    return states


def states_html(states: Sequence[State], *, control: str, start: int = 0,
                kind: Literal["range", "select"] = "range", note: str = "") -> str:
    """One self-contained HTML fragment showing ``states`` one at a time, switched by a control named ``control``.

    ``kind="range"`` is a slider over the states in order (its readout the
    state's label), ``"select"`` a list of the labels; the fragment starts at
    ``states[start]``. ``note`` (plain text) says above the control what was
    precomputed. The inline script only hides and shows the states' blocks.

    Examples
    --------
    >>> fragment = states_html([State("20,000 MB", "fits", ()), State("10,000 MB", "does not fit", (), alert=True)],
    ...                        control="memory limit", start=1)
    >>> '<input type="range" class="sappkit-control" min="0" max="1" step="1" value="1"' in fragment
    True
    >>> fragment.count('class="sappkit-state"'), fragment.count("hidden>")
    (2, 1)
    """
    if not states:
        raise InputError("states must hold at least one State; got none")
    if not (isinstance(start, int) and 0 <= start < len(states)):
        raise InputError(f"start must be a state number from 0 to {len(states) - 1}; got {start!r}")
    if kind not in ("range", "select"):
        raise InputError(f"kind must be 'range' or 'select'; got {kind!r}")
    name = html.escape(control)
    if kind == "range":
        picker = (f'<input type="range" class="sappkit-control" min="0" max="{len(states) - 1}" step="1" '
                  f'value="{start}" autocomplete="off" aria-label="{name}"> '
                  f'<output>{html.escape(states[start].label)}</output>')
    else:
        options = "".join(f'<option value="{number}"{" selected" if number == start else ""}>'
                          f"{html.escape(state.label)}</option>" for number, state in enumerate(states))
        picker = f'<select class="sappkit-control" autocomplete="off" aria-label="{name}">{options}</select>'
    blocks = "\n".join(_state_html(state, hidden=number != start) for number, state in enumerate(states))
    lines = ['<div class="sappkit-states">', _STYLE]
    if note:
        lines.append(f'<p class="sappkit-note">{html.escape(note)}</p>')
    lines += [f'<label class="sappkit-picker">{name} {picker}</label>', blocks, _SCRIPT, "</div>"]
    return "\n".join(lines)


def control_states(show: Callable[..., Shown], settings: Mapping[str, Any], controls: Mapping[str, Any],
                   name: str, values: Sequence, *, label: Callable[[Any], str], control: str, what: str,
                   kind: Literal["range", "select"] = "range") -> str:
    """A dashboard's states for a report over one control: ``show(**settings)`` with ``name`` at each of
    ``values`` and the other controls as ``settings`` has them (``controls``, the widgets by name, give each its
    description), starting at the control's own value; the note says ``what`` was precomputed, with what else.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> def show(limit, stages):
    ...     return Shown(limit, text=f"limit {limit} on {stages} stages")
    >>> widgets = {"limit": SimpleNamespace(description="limit"), "stages": SimpleNamespace(description="stages")}
    >>> fragment = control_states(show, {"limit": 2, "stages": 4}, widgets, "limit", [1, 2], label=str,
    ...                           control="limit", what="the plans at 2 limits")
    >>> "Precomputed for this report: the plans at 2 limits, with stages 4." in fragment, 'value="1"' in fragment
    (True, True)
    """
    states = record_states(lambda value: show(**{**settings, name: value}), values, label=label)
    others = {controls[key].description: value for key, value in settings.items() if key != name}
    note = f"Precomputed for this report: {what}, with {written_out(others)}. Run the notebook to change the other " \
           f"controls."
    return states_html(states, control=control, start=list(values).index(settings[name]), kind=kind, note=note)


def written_out(settings: Mapping[str, Any]) -> str:
    """Control values as a reader reads them: ``name value`` pairs, numbers with separators, booleans on/off.

    Examples
    --------
    >>> written_out({"stages": 16, "memory MB": 53000.0, "a mode per layer": True, "runs": ("round1", "round2")})
    'stages 16, memory MB 53,000, a mode per layer on, runs round1 + round2'
    """
    return ", ".join(f"{name} {_written(value)}" for name, value in settings.items())


def display_shown(output, shown: Shown, *, text: bool = True) -> None:
    """Show ``shown`` in the ``ipywidgets.Output`` ``output`` (its text unless ``text=False``); close its figures."""
    from IPython.display import Pretty, display

    with output:
        output.clear_output(wait=True)
        if text and shown.text:
            display(Pretty(shown.text))
        if shown.figures:
            display(*shown.figures)
    for figure in shown.figures:
        plt.close(figure)


def dashboard_box(children, *, report_html: Callable[[], str]):
    """An ``ipywidgets.VBox`` of ``children`` whose display, in a kernel run for a report, adds ``report_html()``.

    The widget view stays the first choice of a live front end; a report
    (which has no kernel) shows the HTML alternative instead.
    """
    box = _report_box_class()(children)
    box.report_html = report_html
    _labels_at_full_width(box)
    return box


def _labels_at_full_width(widget) -> None:
    """Every labelled control under ``widget`` shows its whole label (ipywidgets cuts one past ~80 px: the
    dashboards' ``micro-bat…``)."""
    if getattr(widget, "description", "") and hasattr(getattr(widget, "style", None), "description_width"):
        widget.style.description_width = "initial"
    for child in getattr(widget, "children", ()):
        _labels_at_full_width(child)


@functools.cache
def _report_box_class():
    import ipywidgets as w

    class ReportBox(w.VBox):
        """A VBox that, displayed by a kernel run for a report, carries its dashboard's precomputed states."""

        report_html: Callable[[], str] | None = None

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            if self.report_html is not None and for_report():
                bundle["text/html"] = self.report_html()
            return bundle

    return ReportBox


def _png(figure, dpi: float) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def _state_html(state: State, *, hidden: bool) -> str:
    label = html.escape(state.label)
    parts = [f'<div class="sappkit-state" data-label="{label}"{" hidden" if hidden else ""}>']
    if state.text:
        alert = ' class="sappkit-alert"' if state.alert else ""
        parts.append(f"<pre{alert}>{html.escape(state.text)}</pre>")
    parts += [f'<img src="data:image/png;base64,{base64.b64encode(image).decode("ascii")}" '
              f'alt="{label}: figure {number}">' for number, image in enumerate(state.images, start=1)]
    parts.append("</div>")
    return "".join(parts)


def _written(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (int, float)):
        return f"{value:,.6g}"
    if isinstance(value, (tuple, list)):
        return " + ".join(map(_written, value))
    return str(value)


_STYLE = """<style>
.sappkit-states { margin: 0.4em 0; }
.sappkit-note { color: #555; margin: 0.2em 0 0.5em; }
.sappkit-picker { display: flex; align-items: center; gap: 0.6em; font-weight: bold; }
.sappkit-picker input[type=range] { width: 26em; }
.sappkit-state[hidden] { display: none; }
.sappkit-state pre { white-space: pre-wrap; margin: 0.5em 0; }
.sappkit-state pre.sappkit-alert { color: #b00020; font-weight: bold; }
.sappkit-state img { display: block; max-width: 100%; }
</style>"""

#: Shows the state the control names and hides the others; the readout (a slider's) names the state.
_SCRIPT = """<script>
(function () {
  var root = document.currentScript.parentNode;
  var control = root.querySelector(".sappkit-control");
  var readout = root.querySelector("output");
  var states = root.querySelectorAll(".sappkit-state");
  function show() {
    var chosen = Number(control.value);
    for (var i = 0; i < states.length; i++) states[i].hidden = i !== chosen;
    if (readout) readout.textContent = states[chosen].getAttribute("data-label");
  }
  control.addEventListener("input", show);
  control.addEventListener("change", show);
  show();
})();
</script>"""
