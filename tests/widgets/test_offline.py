"""Precomputed dashboard states: recorded from the dashboards' own callbacks, shown by one self-contained fragment,
and equal to what the live controls show at the same values."""

from __future__ import annotations

import base64
import io
from html.parser import HTMLParser

import matplotlib.pyplot as plt
import pytest
from PIL import Image

from sappkit.errors import InputError
from sappkit.widgets.alternatives import walk_step
from sappkit.widgets.fit import refit
from sappkit.widgets.offline import REPORT_ENV, Shown, State, record_states, states_html

from ..bundled import even_partition


class _Fragment(HTMLParser):
    """The parts of a :func:`states_html` fragment: the control, its readout, the states and the scripts."""

    def __init__(self, text: str):
        super().__init__()
        self.control, self.options, self.readout, self.states, self.scripts = None, [], None, [], []
        self._in = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("class") == "sappkit-control":
            self.control = {"tag": tag, **attrs}
        elif tag == "option":
            self.options.append({"selected": "selected" in attrs, "text": ""})
            self._in = "option"
        elif tag == "output":
            self._in = "output"
        elif attrs.get("class") == "sappkit-state":
            self.states.append({"label": attrs["data-label"], "hidden": "hidden" in attrs, "text": "",
                                "alert": False, "images": []})
        elif tag == "pre":
            self.states[-1]["alert"] = attrs.get("class") == "sappkit-alert"
            self._in = "pre"
        elif tag == "img":
            self.states[-1]["images"].append(base64.b64decode(attrs["src"].removeprefix("data:image/png;base64,")))
        elif tag == "script":
            self.scripts.append(attrs)

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "option":
            self.options[-1]["text"] += data
        elif self._in == "output":
            self.readout = data
        elif self._in == "pre":
            self.states[-1]["text"] += data


def _shown_states(fragment: str) -> list[dict]:
    """The states of a fragment that holds exactly one shown state, with a control to switch them."""
    parsed = _Fragment(fragment)
    assert parsed.control is not None and parsed.scripts == [{}], "one control and one inline script, nothing fetched"
    assert sum(not state["hidden"] for state in parsed.states) == 1
    return parsed.states


def _report_fragment(dashboard, monkeypatch) -> str:
    """The dashboard widget's HTML alternative as a kernel run for a report displays it (none otherwise)."""
    monkeypatch.delenv(REPORT_ENV, raising=False)
    assert "text/html" not in dashboard.widget._repr_mimebundle_()
    monkeypatch.setenv(REPORT_ENV, "1")
    bundle = dashboard.widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    return bundle["text/html"]


def _figure(height: float) -> plt.Figure:
    figure, ax = plt.subplots(figsize=(2, 1))
    ax.bar([0, 1], [1, height])
    return figure


def test_record_states_keeps_each_value_as_text_and_png_and_closes_the_figures():
    states = record_states(lambda n: Shown(n, f"{n} bars", tuple(_figure(n) for _ in range(n)), alert=n == 1),
                           [1, 2], label=lambda n: f"n = {n}", dpi=50)
    assert [(state.label, state.text, state.alert, len(state.images)) for state in states] == [
        ("n = 1", "1 bars", True, 1), ("n = 2", "2 bars", False, 2)]
    sizes = {Image.open(io.BytesIO(image)).size for state in states for image in state.images}
    sharper = record_states(lambda n: Shown(n, figures=(_figure(n),)), [1], label=str, dpi=100)[0].images[0]
    (width, height), = sizes
    assert Image.open(io.BytesIO(sharper)).size == pytest.approx((2 * width, 2 * height), abs=2)
    assert plt.get_fignums() == []


def test_a_failing_drawing_still_closes_its_figures():
    figure = _figure(1)
    figure.savefig = lambda *args, **kwargs: (_ for _ in ()).throw(OSError("disk full"))
    with pytest.raises(OSError):
        record_states(lambda n: Shown(n, figures=(figure,)), [1], label=str)
    assert plt.get_fignums() == []


def test_range_fragment_shows_the_start_state_and_escapes_what_it_writes():
    images = [record_states(lambda n: Shown(n, figures=(_figure(n),)), [n], label=str)[0].images[0] for n in (1, 2)]
    states = [State("<10 & 20> MB", 'no "plan"', (), alert=True), State("a", "", (images[0],)),
              State("b", "fits", (images[1],))]
    fragment = states_html(states, control="memory <limit>", start=1, note="Precomputed: 3 limits & more.")
    parsed = _Fragment(fragment)
    assert parsed.control == {"tag": "input", "type": "range", "class": "sappkit-control", "min": "0", "max": "2",
                              "step": "1", "value": "1", "autocomplete": "off", "aria-label": "memory <limit>"}
    assert parsed.readout == "a"
    assert parsed.states == [
        {"label": "<10 & 20> MB", "hidden": True, "text": 'no "plan"', "alert": True, "images": []},
        {"label": "a", "hidden": False, "text": "", "alert": False, "images": [images[0]]},
        {"label": "b", "hidden": True, "text": "fits", "alert": False, "images": [images[1]]},
    ]
    assert parsed.scripts == [{}]
    assert "Precomputed: 3 limits &amp; more." in fragment and "memory &lt;limit&gt;" in fragment
    assert "http" not in fragment


def test_select_fragment_lists_the_labels():
    states = [State(label, "", ()) for label in ("1f1b", "interleaved", "dualpipev")]
    parsed = _Fragment(states_html(states, control="schedule", start=2, kind="select"))
    assert parsed.control == {"tag": "select", "class": "sappkit-control", "autocomplete": "off",
                              "aria-label": "schedule"}
    assert parsed.options == [{"selected": False, "text": "1f1b"}, {"selected": False, "text": "interleaved"},
                              {"selected": True, "text": "dualpipev"}]
    assert [state["hidden"] for state in parsed.states] == [True, True, False]


@pytest.mark.parametrize(("states", "options", "message"), [
    ([], {}, "states must hold at least one State; got none"),
    ([State("a", "", ())], {"start": 1}, "start must be a state number from 0 to 0; got 1"),
    ([State("a", "", ())], {"kind": "slider"}, "kind must be 'range' or 'select'; got 'slider'"),
])
def test_bad_fragments_are_refused(states, options, message):
    with pytest.raises(InputError) as raised:
        states_html(states, control="limit", **options)
    assert str(raised.value) == message


@pytest.mark.slow  # every state of the dashboard
def test_balance_states_are_the_plans_the_slider_shows(llama, monkeypatch):
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.balance import BalanceDashboard

    dashboard = BalanceDashboard(llama, memory_mb=22000, stages=4, micro_batches=8, memory_range=(10000, 40000),
                                 report_limits=4)
    states = _shown_states(_report_fragment(dashboard, monkeypatch))
    assert [state["label"] for state in states] == ["10,000 MB", "20,000 MB", "22,000 MB", "30,000 MB", "40,000 MB"]
    assert not states[2]["hidden"]
    for limit, state in zip((10000, 20000, 22000, 30000, 40000), states):
        dashboard.controls["memory_mb"].value = limit
        assert (state["text"], state["alert"]) == (dashboard.status, not dashboard.last.has_plan)
        assert len(state["images"]) == (0 if dashboard.last.counts is None else 1)
    assert [state["alert"] for state in states] == [True, False, False, False, False], "19,625 MB fit at the least"
    assert plt.get_fignums() == []


@pytest.mark.slow  # every state of the dashboard
def test_recompute_states_are_the_choices_the_slider_shows(llama, monkeypatch):
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.recompute import RecomputeDashboard

    dashboard = RecomputeDashboard(llama, even_partition(llama), memory_mb=40000, report_budgets=3)
    curve = dashboard.last.curve
    states = _shown_states(_report_fragment(dashboard, monkeypatch))
    assert [state["label"] for state in states] == ["20,000 MB", "35,000 MB", "40,000 MB", "50,000 MB"]
    for budget, state in zip((20000, 35000, 40000, 50000), states):
        dashboard.controls["memory_mb"].value = budget
        assert dashboard.last.curve is curve
        assert (state["text"], len(state["images"])) == (dashboard.last.text, 1)


@pytest.mark.slow  # every state of the dashboard
def test_alternatives_states_are_the_plan_and_each_alternative(deepseek, monkeypatch):
    pytest.importorskip("ipywidgets")
    from sappkit import choose_recompute
    from sappkit.widgets.alternatives import AlternativesDashboard

    choice = choose_recompute(deepseek, even_partition(deepseek), memory_mb=60000, modes=("off", "selective", "full"),
                              per_layer=True)
    dashboard = AlternativesDashboard(choice)
    states = _shown_states(_report_fragment(dashboard, monkeypatch))
    picks = [pick for _, pick in dashboard.last.labels]
    assert picks == [None, *range(len(dashboard.last.found.frame))] and len(states) == len(picks) > 2
    assert [state["label"] for state in states] == [label for label, _ in dashboard.last.labels]
    for pick, state in zip(picks, states):
        assert state["text"] == walk_step(dashboard.last.analysis, dashboard.last.path, pick=pick).summary()
        assert len(state["images"]) == 1


def test_tour_states_are_every_schedule_with_refusals_written_out(llama, monkeypatch):
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.tour import TourDashboard

    dashboard = TourDashboard(llama, stages=4, micro_batches=6, option="selective", schedule="1f1b")
    states = _shown_states(_report_fragment(dashboard, monkeypatch))
    assert [state["label"] for state in states] == ["1f1b", "interleaved", "dualpipev"]
    assert [(len(state["images"]), state["alert"]) for state in states] == [(2, False), (2, False), (0, True)]
    dashboard.controls["schedule"].value = "dualpipev"
    assert states[2]["text"] == dashboard.message != ""


@pytest.mark.slow  # every state of the dashboard
def test_fit_states_are_each_const_then_each_run_alone(observed, monkeypatch):
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.fit import FitDashboard

    dashboard = FitDashboard(observed)
    states = _shown_states(_report_fragment(dashboard, monkeypatch))
    runs = tuple(dict.fromkeys(observed["run"]))
    assert [state["label"] for state in states] == [
        f"runs {' + '.join(runs)}, const {const}" for const in ("auto", "fit", "none")] + [
        f"runs {run}, const auto" for run in runs]
    settings = [{"const": const} for const in ("auto", True, False)] + [{"runs": [run]} for run in runs]
    for chosen, state in zip(settings, states):
        assert state["text"] == refit(observed, **{**dashboard.settings(), **chosen}).summary()
        assert len(state["images"]) == 1
