"""Dashboard of the strategy search in ``notebooks/06_strategy.ipynb``: device count, global batch, sequence length
and device in; the search's summary, its Pareto plot, the ten fastest strategies with the band of the model's
error about each, and, for the one chosen among them, where its step goes beside the best's (and the user's
own config's, given as ``baseline=``) and its balanced plan with its Gantt chart and stage memory out.

Thin wiring of :func:`sappkit.search_strategies` (each setting searched once and kept, on one thread of this
kernel), :meth:`sappkit.StrategySearch.plan`, :meth:`~sappkit.StrategySearch.step_terms` and the plots.
A setting not searched yet takes a search (about a
second or two on the notebook's space); the chosen row and every setting met before answer at once. For a
report, the device counts' states are precomputed (:mod:`.offline`).
"""

from __future__ import annotations

import html
from concurrent.futures import ThreadPoolExecutor

import matplotlib.pyplot as plt
import pandas as pd

from ..plots.pipeline import plot_plan
from ..plots.search import plot_step_bands, plot_strategy_pareto
from ..plots.strategy import plot_step_terms
from ..strategy.search import search_strategies
from .offline import Shown, control_states, dashboard_box, display_shown

__all__ = ["StrategySearchDashboard"]

#: Rows of the table of the fastest strategies (and the choices of the row control).
TOP = 10


class StrategySearchDashboard:
    """Controls over a model's strategy search; ``.widget`` to display, ``.last`` the latest search.

    ``model`` and ``search_options`` (``dims``, ``memory_mb``, ``balance_top``, ...) go to
    :func:`sappkit.search_strategies`; the controls choose among ``devices``, ``global_batch``, ``seq_length`` and
    ``device`` (their first value to start). ``baseline`` (a trainer config, :func:`sappkit.read_trainer_config`)
    is searched against wherever the devices are its own. ``.table`` (an ``ipywidgets.HTML``) shows the ten
    fastest strategies, ``.output`` the summary and the figures.
    """

    def __init__(self, model, *, devices=(128, 256, 512), global_batch=(256, 512), seq_length=(4096, 8192),
                 device=("h100-sxm", "a100-80g", "h200"), baseline=None, **search_options):
        import ipywidgets as w

        self.model, self.options, self.baseline = model, search_options, baseline
        self.searches: dict = {}
        self.executor = ThreadPoolExecutor(1)
        self.controls = dict(
            devices=w.Dropdown(options=list(devices), description="devices"),
            global_batch=w.Dropdown(options=list(global_batch), description="global batch"),
            seq_length=w.Dropdown(options=list(seq_length), description="sequence"),
            device=w.Dropdown(options=list(device), description="device"),
        )
        self.row = w.Dropdown(description="strategy", layout=w.Layout(width="34em"))
        self.status_html, self.table, self.output = w.HTML(), w.HTML(), w.Output()
        self.last = None
        for control in self.controls.values():
            control.observe(lambda _change: self.update(), names="value")
        self._filling = False
        self.row.observe(lambda _change: None if self._filling else self.redraw(), names="value")
        self.widget = dashboard_box([w.HBox(list(self.controls.values())), self.status_html, self.table, self.row,
                                     self.output], report_html=self.report_html)
        self.update()

    def settings(self) -> dict:
        """The controls' values, by :func:`sappkit.search_strategies`'s argument names."""
        return {name: control.value for name, control in self.controls.items()}

    def search(self, **settings):
        """The search of ``settings`` (searched once, then kept)."""
        key = tuple(sorted(settings.items()))
        if key not in self.searches:
            own = self.baseline is not None and settings.get("devices") == self.baseline.strategy.devices
            self.searches[key] = search_strategies(self.model, executor=self.executor, progress=False,
                                                   baseline=self.baseline if own else None, **self.options,
                                                   **settings)
        return self.searches[key]

    def show(self, row=None, **settings) -> Shown:
        """The search of ``settings``: its summary and Pareto plot; the ten fastest's bands; for ``row`` (default
        the best) its step's terms beside the best's (and the baseline's), its balanced plan's Gantt chart and
        stage memory."""
        found = self.search(**settings)
        best = found.best
        if best is None:
            return Shown(found, found.describe(), (), alert=True)
        row = best.name if row is None else row
        figure, ax = plt.subplots(figsize=(10, 4.5), layout="constrained")
        plot_strategy_pareto(found.frame, memory_mb=found.memory_mb, highlight=row, ax=ax)
        ax.set_title(f"{len(found.frame):,} strategies on {found.devices:,} devices: the priced ones")
        lines = [found.describe()]
        if found.baseline is not None:
            lines.append(f"\nyour config (a) against the best (b):\n{found.against_baseline().describe()}")
        figures = [figure, _bands_and_terms(found, row)]
        if found.frame.at[row, "pipeline_parallel"] > 1:
            plan = found.plan(row)
            lines.append(f"\nbalanced plan of {found.frame.at[row, 'label']} (the pipeline alone, without the "
                         f"data-parallel and optimizer tail):\n{plan.describe()}")
            if plan.has_plan:
                figures.append(plot_plan(plan))
        else:
            lines.append(f"\n{found.frame.at[row, 'label']} runs no pipeline: there is no plan to balance")
        return Shown(found, "\n".join(lines), tuple(figures))

    def update(self) -> None:
        """Search the controls' setting (or take it from those searched), then refill the table and the rows."""
        self.status_html.value = "<i>searching...</i>"
        found = self.search(**self.settings())
        self.last = found
        table = found.table(TOP)
        self.table.value = table.round(1).to_html(classes="sappkit-top") if len(table) else ""
        self._filling = True  # the first row (the best) is chosen anew: draw it once, below
        self.row.options = [(label, index) for index, label in zip(table.index, table["label"])]
        self.row.value = table.index[0] if len(table) else None
        self._filling = False
        self.redraw()

    def redraw(self) -> None:
        """Draw the chosen row of the latest search."""
        if self.last is None:
            return
        shown = self.show(row=self.row.value, **self.settings())
        best = shown.result.best
        color = "red" if shown.alert else "green"
        headline = "no strategy fits" if best is None else (f"best: {best['label']}, step {best['step_ms']:,.0f} "
                                                            f"ms, MFU {best['mfu']:.1%}")
        self.status_html.value = f'<b style="color:{color}">{html.escape(headline)}</b>'
        display_shown(self.output, shown)

    def report_html(self) -> str:
        """The device-count control for a report: every device count's search, its best strategy drawn."""
        values = list(self.controls["devices"].options)
        return control_states(self.show, self.settings(), self.controls, "devices", values,
                              label=lambda devices: f"{devices:,} devices", control="devices",
                              what=f"the search at {len(values)} device counts, each showing its best strategy")



def _bands_and_terms(found, row):
    """One figure: the ten fastest strategies' error bands above; below, the chosen row's step terms beside the
    best's and the baseline's (where the search has one)."""
    terms = {}
    if found.baseline is not None:
        terms[f"your config: {found.baseline.label}"] = found.baseline.terms
    terms[f"best: {found.best['label']}"] = found.step_terms()
    if row != found.best.name:
        terms[f"chosen: {found.frame.at[row, 'label']}"] = found.step_terms(row)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), layout="constrained",
                                         height_ratios=(TOP, len(terms) + 1))
    plot_step_bands(found.frame, n=TOP, ax=top)
    top.set_title("the ten fastest with the model's error: in green, those it cannot tell from the best")
    plot_step_terms(pd.concat(terms, axis=1), ax=bottom)
    bottom.set_title("where the step goes")
    return figure
