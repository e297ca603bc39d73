"""Dashboard of ``notebooks/00_tour.ipynb``: schedule, stages, micro-batches, chunks and recompute option in,
the simulated step (schedule and memory figure, stage-memory bars) out.

Thin wiring of :func:`sappkit.demo.tour_simulation` and the pipeline plots;
bad combinations (DualPipeV with fewer than ``2p`` micro-batches, ...) show
the :class:`sappkit.InputError` message instead of a figure. For a report,
the simulations under every schedule are precomputed (:mod:`.offline`).
"""

from __future__ import annotations

from ..demo import tour_simulation
from ..errors import InputError
from ..layers.table import as_layer_table
from ..plots.pipeline import plot_simulation, plot_stage_memory
from .offline import Shown, control_states, dashboard_box, display_shown

__all__ = ["TourDashboard"]


class TourDashboard:
    """Sliders and dropdowns over a layer table; ``.widget`` to display, ``.last`` is the latest simulation.

    ``.message`` holds the error text when the last settings were refused (``.last`` is then None).
    """

    def __init__(self, layers, *, stages: int = 16, micro_batches: int = 32, chunks: int = 2,
                 schedule: str = "interleaved", option: str | None = None, limit_mb: float | None = None):
        import ipywidgets as w

        self.layers = as_layer_table(layers)
        self.limit_mb = limit_mb
        options = self.layers.options(self.layers.body_kinds[0])
        self.controls = dict(
            schedule=w.Dropdown(options=["1f1b", "interleaved", "dualpipev"], value=schedule, description="schedule"),
            stages=w.IntSlider(value=stages, min=2, max=32, description="stages"),
            micro_batches=w.IntSlider(value=micro_batches, min=1, max=128, description="micro-batches"),
            chunks=w.IntSlider(value=chunks, min=2, max=4, description="chunks"),
            option=w.Dropdown(options=options, value=option or options[0], description="recompute"),
        )
        self.output = w.Output()
        self.last = None
        self.message = ""
        for control in self.controls.values():
            control.observe(lambda _change: self.update(), names="value")
        self.widget = dashboard_box([w.HBox(list(self.controls.values())[:3]),
                                     w.HBox(list(self.controls.values())[3:]), self.output],
                                    report_html=self.report_html)
        self.update()

    def settings(self) -> dict:
        """The controls' values, by :func:`~sappkit.demo.tour_simulation`'s argument names."""
        return {name: control.value for name, control in self.controls.items()}

    def show(self, **settings) -> Shown:
        """The simulation for ``settings`` and its two figures, or the refusal."""
        try:
            simulation = tour_simulation(self.layers, limit_mb=self.limit_mb, **settings)
        except InputError as exc:
            return Shown(None, str(exc), alert=True)
        return Shown(simulation, figures=(plot_simulation(simulation), plot_stage_memory(simulation.stages).figure))

    def update(self) -> None:
        """Re-simulate with the controls' values and redraw (figures are closed once shown)."""
        shown = self.show(**self.settings())
        self.last, self.message = shown.result, shown.text
        display_shown(self.output, shown)

    def report_html(self) -> str:
        """The schedule list for a report: the step simulated under every schedule, the other controls as set."""
        return control_states(self.show, self.settings(), self.controls, "schedule", self.controls["schedule"].options,
                              label=str, control="schedule", what="the step under each schedule", kind="select")
