"""Dashboard of ``notebooks/03_recompute.ipynb``: budget, modes, per-layer toggle and host link in; the choice,
its stage memory before and after, each layer's option and the time-saved curve out.

The callback logic is :func:`recompute_view` (pure, tested in pytest); the
dashboard only wires controls to it and draws with :mod:`sappkit.plots.recompute`.
For a report, the budget slider's states are precomputed (:mod:`.offline`).
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .._check import check_number
from ..errors import InputError
from ..layers.table import as_layer_table
from ..layers.units import ms_per_unit
from ..plots.recompute import plot_before_after, plot_layer_options, plot_time_saved
from ..recompute.chooser import HostLink, RecomputeChoice, choose_recompute, sweep_recompute
from ..recompute.trainer_plan import trainer_plan_line
from .offline import Shown, control_states, dashboard_box, display_shown

__all__ = ["MODE_SETS", "RecomputeView", "recompute_view", "RecomputeDashboard"]

#: The dashboard's "modes" choices: a label -> the modes (None: each kind's front options).
MODE_SETS = {"front options": None, "off / selective / full": ("off", "selective", "full"),
             "selective / full": ("selective", "full"), "off / full": ("off", "full")}


@dataclass(frozen=True)
class RecomputeView:
    """What the dashboard shows for one setting: the choice, the time-saved curve, and a summary text."""

    choice: RecomputeChoice
    curve: pd.DataFrame
    text: str


def recompute_view(layers, partition, *, memory_mb: float, modes: str = "front options", per_layer: bool = False,
                   link_gbps: float = 0.0, time_unit_ms: float | None = None, fsdp_holds_grads: bool | None = None,
                   curve: pd.DataFrame | None = None) -> RecomputeView:
    """Choose at ``memory_mb`` with the dashboard's settings, and sweep 25 budgets from half to 5/4 of it.

    ``modes`` is a key of :data:`MODE_SETS`; ``per_layer`` applies to modes
    only (front options are chosen per layer anyway); ``link_gbps`` > 0 adds
    a host link of that many GB/s (the layer table's time unit being
    ``time_unit_ms`` ms; default known from its ``time_unit``, e.g. 1 for
    ``ms``). The text is the choice's description and, where
    it has one, its trainer plan. A ``curve`` given (an earlier view's, for
    the same settings but the budget) is kept instead of sweeping again.
    """
    if modes not in MODE_SETS:
        raise InputError(f"modes must be one of {', '.join(map(repr, MODE_SETS))}; got {modes!r}")
    mode_set = MODE_SETS[modes]
    link_gbps = check_number("link_gbps", link_gbps, minimum=0)
    link = None
    if link_gbps > 0:
        unit_ms = ms_per_unit(as_layer_table(layers).time_unit, time_unit_ms)
        link = HostLink.from_gbps(link_gbps, time_unit_ms=unit_ms)
    settings = dict(modes=mode_set, per_layer=bool(per_layer and mode_set is not None), link=link,
                    fsdp_holds_grads=fsdp_holds_grads)
    choice = choose_recompute(layers, partition, memory_mb=memory_mb, **settings)
    if curve is None:
        curve = sweep_recompute(layers, partition, memory_mb=np.linspace(0.5 * memory_mb, 1.25 * memory_mb, 25),
                                **settings)
    text = choice.describe()
    if choice.chosen and choice.layer_options["mode"].notna().all():
        mode, overrides = choice.trainer_plan()
        text += "\n" + trainer_plan_line(mode, overrides)
    return RecomputeView(choice, curve, text)


class RecomputeDashboard:
    """Budget slider, modes, per-layer toggle and host-link bandwidth over one partition.

    ``.widget`` to display; ``.last`` is the latest :class:`RecomputeView`
    (None when the settings were refused, with the reason in ``.message``).
    The curve is swept again only when a setting other than the budget
    changes. A report shows the choices at ``report_budgets`` budgets evenly
    over the budget slider's range (and its value) behind a slider of its own.
    """

    def __init__(self, layers, partition, *, memory_mb: float, time_unit_ms: float | None = None,
                 fsdp_holds_grads: bool | None = None, max_gbps: float = 100.0, report_budgets: int = 16):
        import ipywidgets as w

        self.layers = as_layer_table(layers)
        self.partition = partition
        self.time_unit_ms = time_unit_ms
        self.fsdp_holds_grads = fsdp_holds_grads
        self.report_budgets = report_budgets
        self.controls = dict(
            memory_mb=w.FloatSlider(value=memory_mb, min=0.5 * memory_mb, max=1.25 * memory_mb,
                                    step=memory_mb / 200, description="memory (MB)", continuous_update=False),
            modes=w.Dropdown(options=list(MODE_SETS), value="front options", description="modes"),
            per_layer=w.Checkbox(value=True, description="a mode per layer"),
            link_gbps=w.FloatSlider(value=0.0, min=0.0, max=max_gbps, step=1.0, description="host GB/s",
                                    continuous_update=False),
        )
        self.output = w.Output()
        self.last: RecomputeView | None = None
        self.message = ""
        self._curve_key = None
        for control in self.controls.values():
            control.observe(lambda _change: self.update(), names="value")
        self.widget = dashboard_box([w.HBox([self.controls["memory_mb"], self.controls["modes"]]),
                                     w.HBox([self.controls["per_layer"], self.controls["link_gbps"]]), self.output],
                                    report_html=self.report_html)
        self.update()

    def settings(self) -> dict:
        """The controls' values, by :func:`recompute_view`'s argument names."""
        return {name: control.value for name, control in self.controls.items()}

    def show(self, *, curve: pd.DataFrame | None = None, **settings) -> Shown:
        """The view for ``settings`` (its curve ``curve`` if given), its text and its figure, or the refusal."""
        try:
            view = recompute_view(self.layers, self.partition, time_unit_ms=self.time_unit_ms,
                                  fsdp_holds_grads=self.fsdp_holds_grads, curve=curve, **settings)
        except InputError as exc:
            return Shown(None, str(exc), alert=True)
        figure = plt.figure(figsize=(12, 8), layout="constrained")
        # the middle strip of layer options needs room for its own title and axis label besides its bars
        top, middle, bottom = figure.subfigures(3, 1, height_ratios=(4, 2.2, 3.2))
        if not view.choice.pricing.stages.empty:
            plot_before_after(view.choice, axes=top.subplots(1, 2, sharey=True))
        plot_layer_options(view.choice, ax=middle.subplots())
        plot_time_saved(view.curve, current_mb=settings["memory_mb"], against="both", ax=bottom.subplots())
        return Shown(view, view.text, (figure,))

    def update(self) -> None:
        """Re-choose with the controls' values and redraw (figures are closed once shown)."""
        settings = self.settings()
        key = (settings["modes"], settings["per_layer"], settings["link_gbps"])
        curve = None if key != self._curve_key or self.last is None else self.last.curve
        shown = self.show(curve=curve, **settings)
        self.last, self.message = shown.result, shown.text if shown.result is None else ""
        if shown.result is not None:
            self._curve_key = key
        display_shown(self.output, shown)

    def report_html(self) -> str:
        """The budget slider for a report: the choices at ``report_budgets`` budgets and the slider's value.

        Every state keeps the curve on show, as the live slider does.
        """
        slider = self.controls["memory_mb"]
        budgets = sorted({*np.linspace(slider.min, slider.max, self.report_budgets).tolist(), slider.value})
        curve = None if self.last is None else self.last.curve
        return control_states(lambda **settings: self.show(curve=curve, **settings), self.settings(), self.controls,
                              "memory_mb", budgets, label=lambda budget: f"{budget:,.0f} MB",
                              control="memory budget", what=f"the choices at {len(budgets)} memory budgets")
