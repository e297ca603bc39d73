"""Dashboard of ``notebooks/01_memory_fit.ipynb``: choose runs, stages, const and options; refit and redraw.

The logic is :func:`refit` (pure, tested); :class:`FitDashboard` only wires it
to widgets and draws with :func:`sappkit.plot_fit`. For a report, a few fits
are precomputed (:mod:`.offline`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..columns import STAGE
from ..errors import InputError
from ..memfit.dryruns import as_observations, count_columns
from ..memfit.fit import MemoryFit, fit_memory
from ..memfit.model import observed_options
from ..memfit.stage_config import RUN
from ..plots.fit import plot_fit
from .offline import Shown, dashboard_box, display_shown, record_states, states_html, written_out

__all__ = ["Refit", "refit", "FitDashboard"]


@dataclass(frozen=True, eq=False)
class Refit:
    """One refit of the dashboard.

    Attributes
    ----------
    fit : MemoryFit or None
        The fit, or None when the selection cannot be fitted.
    message : str
        The fit's description, or why there is no fit (the refusal).
    excluded : DataFrame
        ``run``, ``stage``, ``reason``: selected stages left out because they
        run an option outside the chosen set.
    """

    fit: MemoryFit | None
    message: str
    excluded: pd.DataFrame

    def summary(self) -> str:
        """The message, and which stages the option set left out."""
        if self.excluded.empty:
            return self.message
        left = ", ".join(f"{run} stage {stage}" for run, stage in zip(self.excluded[RUN], self.excluded[STAGE]))
        return f"{self.message}\nleft out ({len(self.excluded)} stage(s) running other options): {left}"


def refit(observations, *, runs=None, stages=None, const="auto", options=None) -> Refit:
    """Fit the observations of ``runs`` and ``stages`` (default all) that run only ``options`` (default all).

    A refusal becomes the message of a result without a fit, so a dashboard
    can say why instead of failing.

    Examples
    --------
    >>> from sappkit import read_dryrun_csv
    >>> observed = read_dryrun_csv("data/llama2_70b_dryruns.csv")
    >>> print(refit(observed, runs=["round2"], const=False).message.split(":")[0])
    8 parameters from 16 observed stages in 1 run(s)
    >>> print(refit(observed, stages=range(1, 16)).message)
    fit_memory cannot fit head_mb (the embedding): no run observes stage 0; add stage 0's peak memory to a dry run
    """
    obs = as_observations(observations)
    chosen = np.ones(len(obs), dtype=bool)
    if runs is not None:
        chosen &= obs[RUN].isin(list(runs)).to_numpy()
    if stages is not None:
        chosen &= obs[STAGE].isin(list(stages)).to_numpy()
    obs = obs[chosen]
    empty = pd.DataFrame({RUN: [], STAGE: [], "reason": []})
    if obs.empty:
        return Refit(None, "no stage selected: choose at least one run and stage", empty)
    excluded = empty
    if options is not None:
        options = tuple(options)
        others = [c for c in count_columns(obs) if c[2:] not in options]
        running = obs[others].sum(axis=1) > 0 if others else pd.Series(False, index=obs.index)
        out = obs.loc[running.groupby([obs[RUN], obs[STAGE]]).transform("any")]
        excluded = out.drop_duplicates([RUN, STAGE])[[RUN, STAGE]].assign(reason=[
            "runs " + ", ".join(repr(c[2:]) for c in others if rows[c].sum() > 0)
            for _, rows in out.groupby([RUN, STAGE], sort=False)]).reset_index(drop=True)
        obs = obs.drop(out.index)
        if obs.empty:
            return Refit(None, f"every selected stage runs an option outside {options!r}", excluded)
    try:
        fit = fit_memory(obs, const=const, options=options)
    except InputError as error:
        return Refit(None, str(error), excluded)
    return Refit(fit, fit.describe(), excluded)


class FitDashboard:
    """Runs, stages, const and options to fit, then the parameters, peaks and residuals; ``.widget`` to display,
    ``.last`` the latest :class:`Refit`.

    A report shows the fits of every run together under each ``const`` and
    of each run alone behind a list of its own.

    Parameters
    ----------
    observations : DataFrame
        Dry-run observations (e.g. :func:`sappkit.read_dryrun_csv`).
    """

    def __init__(self, observations):
        import ipywidgets as w

        self.observations = as_observations(observations)
        runs = list(dict.fromkeys(self.observations[RUN]))
        stages = sorted(set(self.observations[STAGE]))
        options = list(dict.fromkeys(o for per in observed_options(self.observations).values() for o in per))
        self.runs = w.SelectMultiple(options=runs, value=runs, description="runs", rows=min(len(runs), 5))
        self.stages = w.SelectMultiple(options=stages, value=stages, description="stages", rows=6)
        self.const = w.ToggleButtons(options=[("auto", "auto"), ("fit", True), ("none", False)], value="auto",
                                     description="const")
        self.options = w.SelectMultiple(options=options, value=options, description="options",
                                        rows=min(len(options), 5))
        self.output = w.Output()
        for control in (self.runs, self.stages, self.const, self.options):
            control.observe(lambda _change: self.redraw(), names="value")
        self.widget = dashboard_box([w.HBox([self.runs, self.stages, self.options]), self.const, self.output],
                                    report_html=self.report_html)
        self.last: Refit | None = None
        self.redraw()

    def settings(self) -> dict:
        """The controls' values, by :func:`refit`'s argument names."""
        return dict(runs=self.runs.value, stages=self.stages.value, const=self.const.value,
                    options=self.options.value)

    def show(self, **settings) -> Shown:
        """The refit for ``settings``: its summary and, where it fits, the three drawings in one figure."""
        result = refit(self.observations, **settings)
        figures = () if result.fit is None else (plot_fit(result.fit)[0].figure,)
        return Shown(result, result.summary(), figures, alert=result.fit is None)

    def redraw(self) -> None:
        """Refit with the controls' values; show the summary and the three drawings (figures closed once shown)."""
        shown = self.show(**self.settings())
        self.last = shown.result
        display_shown(self.output, shown)

    def report_html(self) -> str:
        """The list for a report: every selected run fitted under each ``const``, then each run alone."""
        settings = self.settings()
        choices = [{**settings, "const": const} for _, const in self.const.options]
        if len(settings["runs"]) > 1:
            choices += [{**settings, "runs": (run,)} for run in settings["runs"]]
        const_names = {value: name for name, value in self.const.options}
        states = record_states(lambda choice: self.show(**choice), choices, label=lambda choice: written_out(
            {"runs": choice["runs"], "const": const_names[choice["const"]]}))
        others = {"stages": "all" if len(settings["stages"]) == len(self.stages.options) else settings["stages"],
                  "options": settings["options"]}
        note = (f"Precomputed for this report: {len(choices)} fits, with {written_out(others)}. Run the notebook to "
                f"choose other runs, stages and options.")
        return states_html(states, control="fit", start=choices.index(settings), kind="select", note=note)
