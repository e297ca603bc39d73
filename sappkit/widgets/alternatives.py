"""Dashboard of ``notebooks/04_alternatives.ipynb``: walk a path of plans, one more fully recomputed layer a step.

Pick an alternative to see its stage-memory bars and trainer plan; "one more
from here" makes it the plan the next alternatives start from, "back" undoes
a step. The logic is :func:`walk_step`, :func:`one_more` and :func:`step_back`
(pure, tested); :class:`AlternativesDashboard` only wires them to widgets. For a
report, the plan on show and its alternatives are precomputed (:mod:`.offline`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..columns import LIMIT_MB, MEMORY_MB, STAGE
from ..errors import InputError
from ..layers.units import format_mb, format_time
from ..one_more.analysis import RecomputeAnalysis, alternatives
from ..one_more.result import Alternatives
from ..plots.pipeline import plot_stage_memory
from ..plots.recompute import plot_before_after
from ..recompute.choice import RecomputeChoice
from ..recompute.trainer_plan import trainer_plan_line
from .offline import Shown, dashboard_box, display_shown, record_states, states_html

__all__ = ["WalkStep", "walk_step", "one_more", "step_back", "AlternativesDashboard"]


@dataclass(frozen=True, eq=False)
class WalkStep:
    """One state of the walk.

    Attributes
    ----------
    analysis : RecomputeAnalysis
        The prices every step reuses.
    path : tuple of RecomputeChoice
        The plans walked, the starting choice first; the alternatives start
        from the last.
    found : Alternatives
        The alternatives from ``path[-1]``.
    pick : int or None
        The alternative picked (a row of ``found.frame``), or None.
    """

    analysis: RecomputeAnalysis
    path: tuple[RecomputeChoice, ...]
    found: Alternatives
    pick: int | None

    @property
    def shown(self) -> RecomputeChoice:
        """The plan on show: the alternative picked, else the path's last plan."""
        return self.path[-1] if self.pick is None else self.found.plans[self.pick]

    @property
    def labels(self) -> list[tuple[str, int | None]]:
        """Dropdown entries ``(label, pick)``: the path's last plan, then one per alternative."""
        entries = [("(the plan the alternatives start from)", None)]
        unit = self.analysis.pricing.layers.time_unit
        for row in self.found.frame.itertuples(index=False):
            entries.append((f"#{row.alternative}: stage {row.stage} {row.kind}, {row.from_mode} -> full: frees "
                            f"{format_mb(row.memory_freed_mb)} for {format_time(row.time_cost, unit)}",
                            row.alternative))
        return entries

    def summary(self) -> str:
        """The path so far, what binds, and the plan on show as the trainer reads it."""
        stages = self.shown.stages
        binding = int(stages[STAGE].iloc[int((stages[MEMORY_MB] - stages[LIMIT_MB]).to_numpy().argmax())])
        mode, layers = self.shown.trainer_plan()
        left_out = f" ({self.found.left_out} more that free no memory left out)" if self.found.left_out else ""
        lines = [f"step {len(self.path) - 1} of the walk; {len(self.found.frame)} alternative(s) from its plan"
                 + (f" ({self.found.reason})" if self.found.reason else left_out),
                 f"on show: {'the plan' if self.pick is None else f'alternative #{self.pick}'}, peak "
                 f"{format_mb(stages[MEMORY_MB].max())} on stage {binding} (limit "
                 f"{format_mb(self.analysis.pricing.memory_mb)}); {self.shown.short_headline()}",
                 f"baseline: {self.shown.baseline}",
                 trainer_plan_line(mode, layers)]
        return "\n".join(lines)


def walk_step(analysis: RecomputeAnalysis, path, *, pick: int | None = None) -> WalkStep:
    """The alternatives from the last plan of ``path``, with alternative ``pick`` on show.

    Examples
    --------
    >>> from sappkit import Partition, RecomputeAnalysis, choose_recompute, read_layers_json
    >>> llama = read_layers_json("data/llama2_70b.json")
    >>> choice = choose_recompute(llama, Partition.from_offsets(llama, stages=4, micro_batches=8), memory_mb=40_000,
    ...                           modes=("off", "selective", "full"), per_layer=True)
    >>> step = walk_step(RecomputeAnalysis.from_pricing(choice.pricing), [choice], pick=0)
    >>> for part in "; ".join(step.summary().splitlines()[:3]).split("; "):
    ...     print(part)
    step 0 of the walk
    7 alternative(s) from its plan (3 more that free no memory left out)
    on show: alternative #0, peak 39,482 MB on stage 2 (limit 40,000 MB)
    simulated step time 5,321 ms, 55.9 ms (1.0%) faster than the baseline
    baseline: every layer at selective, the fastest single option that fits (the configured recompute, every layer none, does not fit)
    >>> print(one_more(step).summary().splitlines()[0])
    step 1 of the walk; 7 alternative(s) from its plan (3 more that free no memory left out)
    """
    path = tuple(path)
    if not path:
        raise InputError("path must hold at least the plan to start from; got an empty path")
    found = alternatives(path[-1], analysis=analysis)
    if pick is not None and not 0 <= pick < len(found.plans):
        raise InputError(f"pick must be an alternative number from 0 to {len(found.plans) - 1}, or None; got {pick!r}")
    return WalkStep(analysis, path, found, pick)


def one_more(step: WalkStep) -> WalkStep:
    """The walk one step on: the alternative picked becomes the plan the next alternatives start from."""
    if step.pick is None:
        raise InputError("one more from here needs an alternative picked; pick one of the alternatives first")
    return walk_step(step.analysis, step.path + (step.shown,))


def step_back(step: WalkStep) -> WalkStep:
    """The walk one step back (at the start, the start again)."""
    return walk_step(step.analysis, step.path[:-1] or step.path)


class AlternativesDashboard:
    """A dropdown of alternatives, "one more from here" and "back"; ``.widget`` to display, ``.last`` the
    latest :class:`WalkStep`.

    A report shows the plan on show and each of its alternatives behind a list of its own.

    Parameters
    ----------
    choice : RecomputeChoice
        The per-layer choice the walk starts from.
    analysis : RecomputeAnalysis, optional
        Default: one on ``choice.pricing`` (nothing priced again).
    """

    def __init__(self, choice: RecomputeChoice, *, analysis: RecomputeAnalysis | None = None):
        import ipywidgets as w

        analysis = analysis if analysis is not None else RecomputeAnalysis.from_pricing(choice.pricing)
        self.last = walk_step(analysis, (choice,))
        self.picker = w.Dropdown(description="alternative", layout=w.Layout(width="640px"))
        self.more = w.Button(description="one more from here")
        self.back = w.Button(description="back")
        self.output = w.Output()
        self._relisting = False
        self.picker.observe(self._picked, names="value")
        self.more.on_click(lambda _button: self._show(step=one_more(self.last), relist=True))
        self.back.on_click(lambda _button: self._show(step=step_back(self.last), relist=True))
        self.widget = dashboard_box([self.picker, w.HBox([self.more, self.back]), self.output],
                                    report_html=self.report_html)
        self._show(step=self.last, relist=True)

    @staticmethod
    def show(step: WalkStep) -> Shown:
        """``step``'s summary and the stage memory of its plan on show; an alternative beside the plan it starts
        from, the stage it changes highlighted and the change written."""
        if step.pick is None:
            ax = plot_stage_memory(step.shown.stages)
            ax.set_title("stage memory of the plan on show")
        else:
            ax, _ = plot_before_after(step.shown, baseline=step.path[-1])
        return Shown(step, step.summary(), (ax.figure,))

    def report_html(self) -> str:
        """The list for a report: the walk's current plan and each of its alternatives, precomputed."""
        step = self.last
        labels = {pick: label for label, pick in step.labels}
        states = record_states(lambda pick: self.show(walk_step(step.analysis, step.path, pick=pick)), labels,
                               label=labels.get)
        note = (f"Precomputed for this report: the plan at step {len(step.path) - 1} of the walk and its "
                f"{len(labels) - 1} alternative(s). Run the notebook to walk on (one more from here, back).")
        return states_html(states, control="alternative", start=list(labels).index(step.pick), kind="select",
                           note=note)

    def _picked(self, change) -> None:
        if not self._relisting:
            self._show(step=walk_step(self.last.analysis, self.last.path, pick=change["new"]))

    def _show(self, *, step: WalkStep, relist: bool = False) -> None:
        """Show ``step``: its plan's stage bars and summary (figures closed once shown)."""
        self.last = step
        if relist:
            self._relisting = True
            self.picker.options = step.labels
            self.picker.value = step.pick
            self._relisting = False
        self.more.disabled = step.pick is None
        self.back.disabled = len(step.path) == 1
        display_shown(self.output, self.show(step))
