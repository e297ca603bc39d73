"""Plan dry runs: the fewest well-conditioned MindFormers configurations that identify every memory parameter.

Beyond SAPP (whose guide draws offsets by hand). The memory fit has
``k`` unknowns — ``const_mb`` (optional), ``head_mb``, ``tail_mb``,
``param_mb`` and one ``activation_mb`` per option — and a 1F1B dry run of
``p`` stages gives ``p`` equations, so at least ``ceil(k / p)`` runs are
needed; stage 0 and p − 1 each bring a parameter of their own, and with
``const`` the middle stages must hold different numbers of layers.

For R = ceil(k / p), ..., ``max_runs`` runs the planner starts from a
structured design — offsets alternating around the even split, each stage
running one option in turn — and runs a seeded local search that moves one
layer between two stages of a run, or one layer of a stage to another
option, whenever that raises the rank or lowers the condition number of the
column-scaled design matrix (the one :func:`sappkit.fit_memory` solves);
the first R that reaches full rank is returned. The same input gives the
same plan. Every stage holds between ``max(1, b − d)`` and ``b + d`` layers
(one more when ``p`` does not divide the layers), ``b = layers // p``,
``d = max(1, b // 2)``, so dry runs stay close to the real partition; and no
stage runs both selective-only and comm-only layers, which MindFormers'
cumulative counts cannot express.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._check import check_int
from ..columns import MEMORY_MB, SAPP_OPTIONS, STAGE
from ..errors import InputError
from ..limits import MAX_DRY_RUNS, MAX_LAYERS, MAX_STAGES
from ..layers.units import wrap_text
from .dryruns import as_observations
from .identify import unidentified
from .model import CONST, Param, body_params, design
from .stage_config import RUN, count_column, dryrun_config

__all__ = ["DryRunPlan", "plan_dryruns"]

#: Local-search proposals per run count, and proposals without improvement before giving up early.
_PROPOSALS = 600
_PATIENCE = 200
_SEED = 20261129


@dataclass(frozen=True, eq=False)
class DryRunPlan:
    """Dry runs to do, from :func:`plan_dryruns`.

    Parameters
    ----------
    configs : DataFrame
        Every stage of every run (``run`` is ``round1``, ``round2``, ...):
        the observations frame without ``memory_mb``.
    stages, layers : int
        ``pipeline_num`` and ``num_layer``.
    options : tuple of str
        The options the runs exercise, SAPP order.
    const : bool
        Whether the runs identify ``const_mb`` too.
    rank : int
        Rank of the design matrix: the number of parameters (all identified).
    condition_number : float
        Of the column-scaled design matrix, as :func:`sappkit.fit_memory` reports it.
    params : tuple of str
        The parameters the runs identify.
    """

    configs: pd.DataFrame
    stages: int
    layers: int
    options: tuple[str, ...]
    const: bool
    rank: int
    condition_number: float
    params: tuple[str, ...]

    @property
    def runs(self) -> int:
        """Number of dry runs (rounds)."""
        return int(self.configs[RUN].nunique())

    def offsets(self) -> dict[str, dict[str, list[int]]]:
        """Per run, the MindFormers ``offset``, ``recompute``, ``select_recompute``, ``select_comm_recompute``."""
        base = self.layers // self.stages
        out = {}
        for run, rows in self.configs.groupby(RUN, sort=False):
            count = {o: rows[count_column(o)].to_numpy() for o in SAPP_OPTIONS}
            full = count["full"]
            out[run] = {"offset": (rows["layers"].to_numpy() - base).tolist(), "recompute": full.tolist(),
                        "select_recompute": (full + count["both"] + count["selective"]).tolist(),
                        "select_comm_recompute": (full + count["both"] + count["comm"]).tolist()}
        return out

    def to_yaml(self, observations: pd.DataFrame | None = None) -> str:
        """The runs as a MindFormers pipeline_balance init YAML (lists of lists per round when several).

        ``memory_usage`` lists every observed stage: round 1's stage 0 and
        p − 1 as ``head_memory`` and ``tail_memory``, the rest under
        ``body_memories``; its values are null placeholders to fill in from
        the dry-run logs, or the peaks of ``observations`` (e.g. a synthetic
        dry run of this plan). :func:`sappkit.read_dryrun_yaml` reads it back.
        """
        peaks = self._peaks(observations)
        p, rounds = self.stages, list(self.offsets().items())

        def field(key):
            values = [per[key] for _, per in rounds]
            return _flow(values if len(values) > 1 else values[0])

        body = [[s for s in range(p) if r or s not in (0, p - 1)] for r in range(len(rounds))]
        memories = [[peaks.get((run, s)) for s in stages] for (run, _), stages in zip(rounds, body)]
        first = rounds[0][0]
        lines = [f"# sappkit.plan_dryruns: {len(rounds)} dry run(s) of {p} stages, {self.layers} layers,",
                 f"# options {', '.join(self.options)}; condition number {self.condition_number:.3g}",
                 "pipeline_config:", f"  pipeline_num: {p}", f"  num_layer: {self.layers}",
                 f"  offset: {field('offset')}",
                 "recompute_config:", *(f"  {key}: {field(key)}" for key in
                                        ("recompute", "select_recompute", "select_comm_recompute")),
                 "memory_usage:" + ("" if peaks else "  # fill in each stage's peak (MB) from its dry-run log"),
                 f"  head_memory: {_flow(peaks.get((first, 0)))}",
                 f"  tail_memory: {_flow(peaks.get((first, p - 1)))}",
                 "  body_memories:", f"    stage_id: {_flow(body if len(body) > 1 else body[0])}",
                 f"    memories: {_flow(memories if len(memories) > 1 else memories[0])}"]
        return "\n".join(lines) + "\n"

    def _peaks(self, observations) -> dict:
        if observations is None:
            return {}
        observed = as_observations(observations)
        merged = self.configs.merge(observed, how="left", on=list(self.configs.columns), indicator=True)
        missing = merged[merged["_merge"] != "both"]
        if not missing.empty:
            run, stage = missing[RUN].iloc[0], missing[STAGE].iloc[0]
            raise InputError(f"observations has no row matching run {run!r} stage {stage} of the plan (same "
                             "layers and counts); give the peaks of the planned dry runs")
        return {(run, stage): float(m) for run, stage, m in zip(merged[RUN], merged[STAGE], merged[MEMORY_MB])}

    def describe(self) -> str:
        """How many runs, what they identify and how well conditioned they are."""
        return wrap_text(f"{self.runs} dry run(s) of {self.stages} stages and {self.layers} layers identify "
                         f"{self.rank} parameters ({', '.join(self.params)}); condition number "
                         f"{self.condition_number:.3g}")


def _flow(value) -> str:
    """A YAML flow value: null, a number or a (nested) list."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def plan_dryruns(stages, layers, options, *, const=True, max_runs=8) -> DryRunPlan:
    """The fewest 1F1B dry runs that identify every memory parameter, well conditioned.

    Parameters
    ----------
    stages, layers : int
        ``pipeline_num`` and ``num_layer`` of the dry runs.
    options : sequence of str
        SAPP options to fit (``none``, ``selective``, ``comm``, ``both``,
        ``full``): every layer of the runs runs one of them.
    const : bool
        Also identify ``const_mb`` (needs at least 3 stages).
    max_runs : int
        Give up beyond this many runs.

    Examples
    --------
    >>> plan = plan_dryruns(16, 96, ["none", "selective", "full"])
    >>> plan.runs, plan.rank
    (1, 7)
    """
    p = check_int("stages", stages, minimum=2, maximum=MAX_STAGES, why="a pipeline needs at least two stages")
    total = check_int("layers", layers, minimum=p, maximum=MAX_LAYERS,
                      why="every stage of a dry run holds at least one layer")
    limit = check_int("max_runs", max_runs, minimum=1, maximum=MAX_DRY_RUNS)
    chosen = _check_options(options)
    if const is not True and const is not False:
        raise InputError(f"const must be True or False; got {const!r}")
    if const and p == 2:
        why = ("needs stages >= 3; got 2: with two stages every stage also holds the head or the tail, which absorb "
               "the per-stage constant, so no set of dry runs identifies it")
        raise InputError(f"const=True {why} (pass const=False)", cli=f"fitting const_mb {why} (add --no-const)")
    if const and total == p:
        why = (f"needs layers > stages; got {total} layers on {p} stages: every stage holds exactly one layer in "
               "every dry run, so the constant cannot be told apart from param_mb")
        raise InputError(f"const=True {why} (pass const=False)", cli=f"fitting const_mb {why} (add --no-const)")
    if total == p and p <= 3:
        raise InputError(f"layers must be > stages when stages <= 3; got {total} layers on {p} stages: every stage "
                         "holds exactly one layer, and no middle stage pair tells param_mb from the activations")
    params = body_params({None: chosen})
    params = [Param(CONST), *params] if const else params
    fewest = max(1, math.ceil(len(params) / p))
    if fewest > limit:
        raise InputError(f"plan_dryruns needs at least {fewest} dry runs of {p} stages to identify {len(params)} "
                         f"parameters ({', '.join(q.name for q in params)}); max_runs is {limit}")
    best = None
    for runs in range(fewest, limit + 1):
        counts, deficit = _search(runs, p, total, chosen, const)
        best = counts
        if deficit == 0:
            return _plan(counts, p, total, chosen, const, params)
    configs = _configs(best, p, total, chosen)
    lost, rank = unidentified(design(configs, params, schedule="1f1b")[0], params)
    raise InputError(f"plan_dryruns found no {limit} or fewer dry runs of {p} stages and {total} layers that "
                     f"identify every parameter (best: rank {rank} of {len(params)}, missing "
                     f"{', '.join(q.name for q in lost)}); allow more runs with max_runs, more layers, or fewer "
                     "options")


def _check_options(options) -> tuple[str, ...]:
    if isinstance(options, str) or not hasattr(options, "__iter__"):
        raise InputError(f"options must be a sequence of SAPP option names; got {options!r}")
    options = list(options)
    for option in options:
        if option not in SAPP_OPTIONS:
            raise InputError(f"options has {option!r}; expected SAPP options {', '.join(SAPP_OPTIONS)} (the ones "
                             "a MindFormers dry-run YAML can express)")
    if not options or len(set(options)) != len(options):
        raise InputError(f"options must name at least one option, each once; got {options!r}")
    return tuple(o for o in SAPP_OPTIONS if o in options)


def _bounds(p: int, total: int) -> tuple[int, int]:
    base, extra = divmod(total, p)
    spread = max(1, base // 2)
    return max(1, base - spread), base + spread + (extra > 0)


def _initial(runs: int, p: int, total: int, k: int) -> np.ndarray:
    """Offsets alternating around the even split, each stage's layers under one option in turn."""
    lo, hi = _bounds(p, total)
    base, extra = divmod(total, p)
    spread = max(1, base // 2)
    held = np.full((runs, p), base)
    held[:, 1:extra + 1] += 1  # the layers left over go to middle stages first, where they vary the counts
    for r in range(runs):
        for j, s in enumerate(range(r % 2, p - 1, 2)):
            move = min(1 + (j + r) % spread, held[r, s + 1] - lo, hi - held[r, s])
            held[r, s] += move
            held[r, s + 1] -= move
    counts = np.zeros((runs, p, k), dtype=int)
    for r in range(runs):
        for s in range(p):
            counts[r, s, (s + r) % k] = held[r, s]
    return counts


def _matrix(counts: np.ndarray, const: bool) -> np.ndarray:
    """The 1F1B design matrix of counts [run, stage, option]: rows (run, stage), columns as the fit's."""
    runs, p, k = counts.shape
    stage = np.tile(np.arange(p), runs)
    columns = [np.ones(runs * p)] if const else []
    columns += [(stage == 0).astype(float), (stage == p - 1).astype(float), counts.sum(axis=2).ravel()]
    return np.column_stack(columns + [(counts * (p - np.arange(p))[None, :, None]).reshape(runs * p, k)])


def _score(matrix: np.ndarray) -> tuple[int, float]:
    """(parameters not identified, condition number) of the column-scaled matrix."""
    norms = np.sqrt((matrix * matrix).sum(axis=0))
    singular = np.linalg.svd(matrix / np.where(norms > 0, norms, 1), compute_uv=False)
    rank = int((singular > 1e-9 * singular[0]).sum())
    width = matrix.shape[1]
    return width - rank, (singular[0] / singular[-1] if rank == width else math.inf)


def _search(runs: int, p: int, total: int, options: tuple[str, ...], const: bool) -> tuple[np.ndarray, int]:
    """Local search from the structured design; returns the counts [run, stage, option] and the rank deficit.

    A proposal moves one layer of run r from (stage a, option i) to (stage b,
    option j); b = a changes only its option. It is kept when it keeps the
    stage bounds and the selective/comm rule and improves the score.
    """
    k = len(options)
    lo, hi = _bounds(p, total)
    exclusive = [options.index(o) for o in ("selective", "comm") if o in options]
    counts = _initial(runs, p, total, k)
    matrix = _matrix(counts, const)
    first_act = matrix.shape[1] - k
    score, stale = _score(matrix), 0
    draws = np.random.default_rng(_SEED).random((_PROPOSALS, 6))
    for u in draws:
        if stale >= _PATIENCE and score[0] == 0:
            break
        stale += 1
        r, a, i, j = int(u[0] * runs), int(u[1] * p), int(u[3] * k), int(u[4] * k)
        b = int(u[2] * p) if u[5] < 0.5 else a
        if counts[r, a, i] == 0 or (a == b and i == j):
            continue
        if a != b and (counts[r, a].sum() <= lo or counts[r, b].sum() >= hi):
            continue
        if len(exclusive) == 2:
            after = counts[r, b].copy()
            after[j] += 1
            after[i] -= a == b
            if (after[exclusive] > 0).all():
                continue
        trial = matrix.copy()
        for stage, option, step in ((a, i, -1), (b, j, 1)):
            row = r * p + stage
            trial[row, first_act - 1] += step
            trial[row, first_act + option] += step * (p - stage)
        new = _score(trial)
        if new[0] < score[0] or (new[0] == score[0] and new[1] < score[1] * (1 - 1e-9)):
            counts[r, a, i] -= 1
            counts[r, b, j] += 1
            matrix, score, stale = trial, new, 0
    return counts, score[0]


def _configs(counts: np.ndarray, p: int, total: int, options: tuple[str, ...]) -> pd.DataFrame:
    """The runs as MindFormers configurations, through :func:`dryrun_config` (so the YAML says exactly this)."""
    base = total // p
    frames = []
    for r, run in enumerate(counts):
        per = {o: run[:, options.index(o)] if o in options else np.zeros(p, dtype=int) for o in SAPP_OPTIONS}
        full = per["full"]
        frames.append(dryrun_config(
            stages=p, layers=total, offset=(run.sum(axis=1) - base).tolist(), recompute=full.tolist(),
            select_recompute=(full + per["both"] + per["selective"]).tolist(),
            select_comm_recompute=(full + per["both"] + per["comm"]).tolist(), run=f"round{r + 1}"))
    return pd.concat(frames, ignore_index=True)


def _plan(counts, p, total, options, const, params) -> DryRunPlan:
    configs = _configs(counts, p, total, options)
    matrix = design(configs, params, schedule="1f1b")[0]
    norms = np.linalg.norm(matrix, axis=0)
    singular = np.linalg.svd(matrix / norms, compute_uv=False)
    return DryRunPlan(configs=configs, stages=p, layers=total, options=options, const=const, rank=len(params),
                      condition_number=float(singular[0] / singular[-1]), params=tuple(q.name for q in params))
