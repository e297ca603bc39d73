"""Memory fit: per-layer memory from the peak memory of a few dry-run stages (SAPP's memory fit).

Model (docs/design.md "The memory fit"; :mod:`sappkit.memfit.model`): every observed
stage's peak is linear in the parameters — a per-stage constant, head, tail,
and per body kind its parameter memory and activation memory per option,
weighted by layer counts and micro-batches in flight. All observed stages
are solved together by least squares (exactly when square) on the design
matrix with columns scaled to unit norm, whose 2-norm condition number is
reported. ``head_mb`` and ``tail_mb`` exclude ``const_mb``; SAPP's
include it (:meth:`MemoryFit.head_tail` shows both).

Pooling versus SAPP. SAPP's memory fit (``compute_memory``) solves each dry-run configuration (A, B)
separately from its middle stages, averages the two solutions, then takes
head and tail as the mean residual of the stage-0 and stage-(p−1)
observations. With one run the two agree exactly (head and tail each have
a free parameter of their own). With several runs sappkit pools: every
observed stage weighs the same, stage 0 and p − 1 of later runs also inform
the per-layer values, and runs that identify nothing alone (pp = 4 rounds)
identify everything together. Under equal independent noise pooling is the
least-squares optimum; averaging per-configuration solves is not (and needs
every configuration to be solvable on its own).

Several body kinds (sappkit's extension; SAPP's fit has one): observations
carry a ``kind`` column and each kind gets its own ``param_mb[kind]`` and
``activation_mb[kind:option]``. Identifiability is checked the same way —
e.g. DeepSeek's three dense layers are identifiable only from dry runs that
put dense layers on middle stages in varying numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._check import check_bool, check_choice, check_number
from ..columns import CHUNK, KIND, MEMORY_MB, OPTION, STAGE
from ..errors import InputError
from ..layers.table import LayerTable
from ..layers.units import TEXT_WIDTH, wrap_text
from .dryruns import MICRO_BATCHES, as_observations
from .identify import check_ends, column_norms, considered, identifiability
from .model import (
    ACTIVATION, CONST, HEAD, PARAM, TAIL, Param, body_params, design, observed_options, params_to_layers,
)
from .stage_config import RUN, STAGES

__all__ = ["MemoryFit", "fit_memory", "NAME", "VALUE_MB", "STDERR_MB", "PREDICTED_MB", "RESIDUAL_MB",
           "LOO_RESIDUAL_MB"]

NAME = "name"
VALUE_MB = "value_mb"
STDERR_MB = "stderr_mb"
PREDICTED_MB = "predicted_mb"
RESIDUAL_MB = "residual_mb"
LOO_RESIDUAL_MB = "loo_residual_mb"
#: Above this condition number the fit warns that noise in the peaks moves the parameters a lot.
_ILL_CONDITIONED = 1e4


@dataclass(frozen=True, eq=False)
class MemoryFit:
    """Per-layer memory fitted from dry runs (:func:`fit_memory`).

    Parameters
    ----------
    params : DataFrame
        ``name``, ``kind``, ``option``, ``value_mb``, ``stderr_mb`` (NaN unless
        over-determined).
    observations : DataFrame
        The observations with ``predicted_mb``, ``residual_mb`` (observed −
        predicted) and ``loo_residual_mb`` (the stage's residual when the fit
        leaves it out; NaN where that stage alone determines a parameter).
    rank : int
        Of the design matrix (every parameter is identified: the parameter count).
    condition_number : float
        Of the design matrix with columns scaled to unit norm.
    loo_error_mb : float
        Root mean square of the defined leave-one-out residuals (NaN if none).
    const_fitted : bool
        Whether ``const_mb`` was fitted (else it counts as 0).
    warnings : tuple of str
        What to be careful about: const not fitted, a large residual, ill
        conditioning, negative values.
    schedule : str
        The schedule the dry runs ran.
    less_memory : bool
        Its less-memory variant.
    """

    params: pd.DataFrame
    observations: pd.DataFrame
    rank: int
    condition_number: float
    loo_error_mb: float
    const_fitted: bool
    warnings: tuple[str, ...]
    schedule: str
    less_memory: bool

    @property
    def _params(self) -> list[Param]:
        return [Param(name.split("[")[0], kind, option) for name, kind, option
                in zip(self.params[NAME], self.params[KIND], self.params[OPTION])]

    def value(self, name: str) -> float:
        """The fitted value of parameter ``name`` (``const_mb`` is 0 when not fitted)."""
        match = self.params.loc[self.params[NAME] == name, VALUE_MB]
        if match.empty and name == CONST:
            return 0.0
        if match.empty:
            raise InputError(f"name {name!r} is not a fitted parameter; the fit has "
                             f"{', '.join(map(repr, self.params[NAME]))}")
        return float(match.iloc[0])

    def head_tail(self) -> pd.DataFrame:
        """Head and tail memory excluding ``const_mb`` (sappkit's) and including it (SAPP's report)."""
        const = self.value(CONST)
        values = [self.value(HEAD), self.value(TAIL)]
        return pd.DataFrame({"role": ["head", "tail"], "excluding_const_mb": values,
                             "including_const_mb": [v + const for v in values]})

    def predict(self, configs: pd.DataFrame) -> pd.DataFrame:
        """Each stage's peak for ``configs`` (observations without ``memory_mb``): a copy with ``predicted_mb``.

        Examples
        --------
        >>> from sappkit import dryrun_config, fit_memory, read_dryrun_csv
        >>> fit = fit_memory(read_dryrun_csv("data/llama2_70b_dryruns.csv"))
        >>> config = dryrun_config(stages=16, layers=80, recompute=True)
        >>> fit.predict(config)["predicted_mb"].round(-2).tolist()[:4]
        [7800.0, 7400.0, 7400.0, 7300.0]
        """
        configs = as_observations(configs, name="configs", memory=False)
        shapes = _shapes(self.observations)
        for run, shape in _shapes(configs).items():
            if shape not in shapes.values():
                seen = ", ".join(sorted({_shape_text(s) for s in shapes.values()}))
                raise InputError(f"configs run {run!r} has {_shape_text(shape)} but the fit's dry runs had {seen}: "
                                 "head_mb and tail_mb hold activations at that pipeline shape, so predict that shape "
                                 "only (or build a layer table with to_layers)")
        fitted = {(p.kind, p.option) for p in self._params if p.role == ACTIVATION}
        for kind, options in observed_options(configs).items():
            if (kind, None) not in {(p.kind, None) for p in self._params if p.role == PARAM}:
                raise InputError(f"configs has kind {kind!r}, which the fit has no param_mb for")
            for option in options:
                if (kind, option) not in fitted:
                    of_kind = f" of kind {kind!r}" if kind is not None else ""
                    raise InputError(f"configs runs layers{of_kind} under {option!r}, which the fit has no "
                                     "activation_mb for (no dry run ran it)")
        matrix, row_of, _ = design(configs, self._params, schedule=self.schedule, less_memory=self.less_memory)
        out = configs.copy()
        out[PREDICTED_MB] = (matrix @ self.params[VALUE_MB].to_numpy())[row_of]
        return out

    def to_layers(self, times, *, kind: str | None = None, head: str = "head", tail: str = "tail",
                  count=None) -> LayerTable:
        """A layer table for the balancer: ``times`` with the fitted memory.

        Parameters
        ----------
        times : LayerTable or DataFrame
            Columns ``kind``, ``option``, ``forward_time``, ``backward_time``
            (e.g. a layer table from :func:`sappkit.read_layers_json`, whose
            memory is replaced). Every fitted option needs its row and every
            body row a fitted option.
        kind : str, optional
            The body kind of a fit without a ``kind`` column (default: the
            only body kind of ``times``).
        head, tail : str
            Which kinds of ``times`` are head and tail, when it has no ``role``.
        count : int or mapping, optional
            Layers per body kind, when ``times`` has no ``count``; by default
            the layers of a run that observed every stage.

        Notes
        -----
        The head's and tail's ``param_mb`` are ``head_mb`` and ``tail_mb``
        with no activation (as SAPP writes them): right for the pipeline
        shape the dry runs had. ``const_mb`` is the table's constant; the
        times keep their unit (``times.time_unit``, or a frame's
        ``attrs["time_unit"]``).

        Examples
        --------
        >>> from sappkit import fit_memory, read_dryrun_csv, read_layers_json
        >>> fit = fit_memory(read_dryrun_csv("data/llama2_70b_dryruns.csv"))
        >>> table = fit.to_layers(read_layers_json("data/llama2_70b.json"))
        >>> table.const_mb == fit.value("const_mb")
        True
        """
        return params_to_layers(self.params, self.observations, times, kind=kind, head=head, tail=tail,
                                count=count)

    def describe(self, *, width: int | None = TEXT_WIDTH) -> str:
        """How many parameters from how many stages, rank, conditioning, leave-one-out error, warnings; each line
        wrapped at ``width`` columns (None: not wrapped)."""
        stages = self.observations.drop_duplicates([RUN, STAGE])
        const = "const fitted" if self.const_fitted else "const not fitted"
        loo = "n/a" if np.isnan(self.loo_error_mb) else f"{self.loo_error_mb:.1f} MB"
        lines = [f"{len(self.params)} parameters from {len(stages)} observed stages in {stages[RUN].nunique()} "
                 f"run(s): rank {self.rank}, condition number {self.condition_number:.3g}, {const}, "
                 f"leave-one-out error {loo}"]
        text = "\n".join(lines + [f"warning: {w}" for w in self.warnings])
        return text if width is None else wrap_text(text, width)


def _shapes(frame: pd.DataFrame) -> dict:
    """Run → (stages, chunks, micro-batches or None): what the micro-batches in flight depend on."""
    return {run: (int(rows[STAGES].iloc[0]), int(rows[CHUNK].max()) + 1 if CHUNK in rows else 1,
                  int(rows[MICRO_BATCHES].iloc[0]) if MICRO_BATCHES in rows else None)
            for run, rows in frame.groupby(RUN, sort=False)}


def _shape_text(shape: tuple) -> str:
    stages, chunks, micro = shape
    return (f"{stages} stages" + (f" x {chunks} chunks" if chunks > 1 else "")
            + (f", {micro} micro-batches" if micro is not None else ""))


def fit_memory(observations, *, const="auto", schedule="1f1b", less_memory=False, options=None,
               tolerance=0.02) -> MemoryFit:
    """Fit per-layer memory, head, tail and a per-stage constant from dry-run peaks.

    Parameters
    ----------
    observations : DataFrame
        Dry-run observations (:mod:`sappkit.memfit.dryruns`).
    const : {"auto", True, False}
        ``auto`` fits ``const_mb`` when the observations identify it and says
        so in ``warnings`` when they do not; ``True`` refuses then; ``False``
        never fits it.
    schedule : {"1f1b", "interleaved"}
        What the dry runs ran (interleaved observations carry ``chunk``).
    less_memory : bool
        The less-memory interleaved variant.
    options : sequence of str, optional
        Options to fit (default: every option some stage runs); a stage
        running another option is refused, not dropped.
    tolerance : float
        Warn when a residual exceeds this fraction of its observed peak.

    Notes
    -----
    ``const="auto"`` fits the constant when the design matrix with it has
    full column rank — for one run, SAPP's rule (at least options + 4
    observed stages, not all holding the same number of layers). Refusals
    (:class:`sappkit.InputError`) name what is missing and the dry run that
    would fix it: stage 0 or the last stage not observed, an option asked
    for but never run, fewer observed stages than parameters, equal layer
    counts with ``const=True``, any other parameter the observations cannot
    separate, and runs of different pipeline shapes. Warnings (in the result,
    never on stderr): const not fitted, a residual above ``tolerance``, a
    condition number above 1e4, a negative value.

    Examples
    --------
    >>> from sappkit import read_dryrun_csv
    >>> fit = fit_memory(read_dryrun_csv("data/llama2_70b_dryruns.csv"))
    >>> fit.rank == len(fit.params), fit.const_fitted
    (True, True)
    """
    obs = as_observations(observations)
    schedule = _check_schedule(schedule)
    less_memory = check_bool("less_memory", less_memory)
    if not (const == "auto" or const is True or const is False):
        raise InputError(f"const must be 'auto', True or False; got {const!r}")
    tolerance = check_number("tolerance", tolerance, minimum=0, strict=True)
    shapes = _shapes(obs)
    if len(set(shapes.values())) > 1:
        listing = ", ".join(f"run {run!r} has {_shape_text(shape)}" for run, shape in shapes.items())
        raise InputError(f"observations mix pipeline shapes ({listing}): head_mb and tail_mb hold activations at "
                         "the shape's micro-batches in flight, so fit the runs of one shape at a time")
    body = body_params(considered(obs, options))
    check_ends(obs)
    params = body if const is False else [Param(CONST), *body]
    matrix, row_of, stages = design(obs, params, schedule=schedule, less_memory=less_memory)
    notes = []
    problem = identifiability(obs, matrix, row_of, params, const_requested=const is True)
    if problem and const == "auto":
        notes.append(f"const_mb is not fitted: {problem[1]}; the other parameters absorb the per-stage "
                     f"constant (fitting it needs {Param(CONST).hint()})")
        params, matrix = body, matrix[:, 1:]
        problem = identifiability(obs, matrix, row_of, params, const_requested=False)
    if problem:
        raise InputError(problem[0])
    return _solve(obs, matrix, row_of, stages, params, notes, tolerance, schedule, less_memory)


def _check_schedule(schedule) -> str:
    if schedule == "dualpipev":
        raise InputError("schedule 'dualpipev' is not supported by fit_memory: DualPipeV puts head and tail "
                         "both on stage 0, so dry-run peaks cannot tell them apart; fit a 1f1b dry run")
    if schedule == "seqpipe":
        raise InputError("schedule 'seqpipe' is not supported by fit_memory: fit a dry run without sequence "
                         "splitting (schedule '1f1b' or 'interleaved')")
    return check_choice("schedule", schedule, ("1f1b", "interleaved"))


def _solve(obs, matrix, row_of, stages, params, notes, tolerance, schedule, less_memory) -> MemoryFit:
    n, k = matrix.shape
    peaks = np.zeros(n)
    peaks[row_of] = obs[MEMORY_MB].to_numpy()
    norms = column_norms(matrix)
    u, singular, vt = np.linalg.svd(matrix / norms, full_matrices=False)
    values = (vt.T @ ((u.T @ peaks) / singular)) / norms
    residual = peaks - matrix @ values
    dof = n - k
    if dof > 0:
        variance = float(residual @ residual) / dof * ((vt.T / singular) ** 2).sum(axis=1) / norms**2
        stderr = np.sqrt(variance)
    else:
        stderr = np.full(k, np.nan)
    leverage = (u**2).sum(axis=1)
    defined = leverage < 1 - 1e-9
    loo = np.full(n, np.nan)
    loo[defined] = residual[defined] / (1 - leverage[defined])
    frame = pd.DataFrame({NAME: [p.name for p in params], KIND: [p.kind for p in params],
                          OPTION: [p.option for p in params], VALUE_MB: values, STDERR_MB: stderr})
    out = obs.assign(**{PREDICTED_MB: (peaks - residual)[row_of], RESIDUAL_MB: residual[row_of],
                        LOO_RESIDUAL_MB: loo[row_of]})
    condition = float(singular[0] / singular[-1])
    return MemoryFit(params=frame, observations=out, rank=k, condition_number=condition,
                     loo_error_mb=float(np.sqrt(np.mean(loo[defined] ** 2))) if defined.any() else np.nan,
                     const_fitted=params[0].role == CONST,
                     warnings=tuple(notes + _warnings(frame, stages, peaks, residual, condition, tolerance)),
                     schedule=schedule, less_memory=less_memory)


def _warnings(frame, stages, peaks, residual, condition, tolerance) -> list[str]:
    out = []
    worst = int(np.argmax(np.abs(residual) / peaks))
    if abs(residual[worst]) > tolerance * peaks[worst]:
        run, stage = stages.iloc[worst]
        out.append(f"the largest residual is {residual[worst]:+,.1f} MB at run {run!r} stage {stage} "
                   f"({abs(residual[worst]) / peaks[worst]:.1%} of its {peaks[worst]:,.0f} MB peak, above the "
                   f"{tolerance:.0%} tolerance): the linear model does not explain these peaks well; check the "
                   "configuration stated for that run")
    if condition > _ILL_CONDITIONED:
        out.append(f"the condition number {condition:.3g} is high: small errors in the peaks move the parameters "
                   "a lot; add dry runs with more varied layer counts (sappkit.plan_dryruns)")
    for name, value in zip(frame[NAME], frame[VALUE_MB]):
        if value < 0:
            out.append(f"{name} is fitted negative ({value:.1f} MB): memory cannot be negative; the dry runs do "
                       "not pin it down or their stated configuration is wrong")
    return out
