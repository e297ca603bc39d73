"""Dashboard of ``notebooks/02_balance.ipynb``: memory limit, stages, chunks, micro-batches, schedule and
objective in; the re-solved plan's simulated step time (the headline), status line, stage-memory bars and
per-stage time bars out.

Thin wiring of :func:`sappkit.balancer.views.dashboard_plan` (which keeps the
exact search's enumerations per pipeline, so dragging the memory slider
re-solves in milliseconds to a few tenths of a second) and the plots. For a
report, the memory slider's states are precomputed (:mod:`.offline`).
"""

from __future__ import annotations

import html

import matplotlib.pyplot as plt
import numpy as np

from ..balancer.views import dashboard_plan
from ..layers.table import as_layer_table
from ..layers.units import format_time
from ..plots.balance import plot_stage_times
from ..plots.pipeline import plot_stage_memory
from .offline import Shown, control_states, dashboard_box, display_shown

__all__ = ["BalanceDashboard"]


class BalanceDashboard:
    """Controls over a layer table; ``.widget`` to display, ``.last`` the latest plan, ``.status`` its line.

    ``.status_html`` (an ``ipywidgets.HTML``) shows the plan's simulated step
    time as the headline, then the status line, and
    ``.output`` (an ``ipywidgets.Output``) the figures; both change whenever a
    control does. A report shows the plans at ``report_limits`` memory limits
    evenly over the slider's range (and its value) behind a slider of its own.
    """

    def __init__(self, layers, *, memory_mb: float = 53000.0, stages: int = 16, chunks: int = 1,
                 micro_batches: int = 16, schedule: str = "1f1b", objective: str = "sapp",
                 memory_range: tuple[float, float] = (20000.0, 80000.0), report_limits: int = 25):
        import ipywidgets as w

        self.layers = as_layer_table(layers)
        self.cache: dict = {}
        self.report_limits = report_limits
        self.controls = dict(
            memory_mb=w.FloatSlider(value=memory_mb, min=memory_range[0], max=memory_range[1], step=500,
                                    description="memory MB", continuous_update=False, readout_format=",.0f"),
            stages=w.IntSlider(value=stages, min=2, max=32, description="stages", continuous_update=False),
            chunks=w.IntSlider(value=chunks, min=1, max=4, description="chunks", continuous_update=False),
            micro_batches=w.IntSlider(value=micro_batches, min=1, max=128, description="micro-batches",
                                      continuous_update=False),
            schedule=w.Dropdown(options=["1f1b", "interleaved", "dualpipev"], value=schedule,
                                description="schedule"),
            objective=w.Dropdown(options=["sapp", "step"], value=objective, description="objective"),
        )
        self.status_html = w.HTML()
        self.output = w.Output()
        self.last = None
        self.status = ""
        for control in self.controls.values():
            control.observe(lambda _change: self.update(), names="value")
        names = list(self.controls)
        self.widget = dashboard_box([w.HBox([self.controls[n] for n in names[:3]]),
                                     w.HBox([self.controls[n] for n in names[3:]]), self.status_html, self.output],
                                    report_html=self.report_html)
        self.update()

    def settings(self) -> dict:
        """The controls' values, by :func:`~sappkit.balancer.views.dashboard_plan`'s argument names."""
        return {name: control.value for name, control in self.controls.items()}

    def show(self, **settings) -> Shown:
        """The plan for ``settings``, its status line and its figure (stage memory and time per micro-batch)."""
        plan, status = dashboard_plan(self.layers, cache=self.cache, **settings)
        figures = ()
        if plan is not None and plan.counts is not None:
            figure, (memory_ax, time_ax) = plt.subplots(1, 2, figsize=(13, 3.8), layout="constrained")
            plot_stage_memory(plan.stages, ax=memory_ax)
            plot_stage_times(plan.stages, ax=time_ax)
            figures = (figure,)
        return Shown(plan, status, figures, alert=not (plan is not None and plan.has_plan))

    def update(self) -> None:
        """Re-solve with the controls' values, then redraw the status line and figures (closed once shown)."""
        shown = self.show(**self.settings())
        self.last, self.status = shown.result, shown.text
        color = "red" if shown.alert else "green"
        headline = ("" if shown.alert else '<div style="font-size:1.3em"><b>simulated step time '
                    f'{format_time(self.last.step_time, self.last.time_unit)}</b></div>')
        self.status_html.value = f'{headline}<b style="color:{color}">{html.escape(self.status)}</b>'
        display_shown(self.output, shown, text=False)

    def report_html(self) -> str:
        """The memory slider for a report: the plans at ``report_limits`` limits and the slider's value."""
        slider = self.controls["memory_mb"]
        limits = sorted({*np.linspace(slider.min, slider.max, self.report_limits).tolist(), slider.value})
        return control_states(self.show, self.settings(), self.controls, "memory_mb", limits,
                              label=lambda limit: f"{limit:,.0f} MB", control="memory limit",
                              what=f"the plans at {len(limits)} memory limits")
