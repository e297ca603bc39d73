"""The memory fit's forward model: what a dry-run stage's peak should be, given per-layer memory.

An observed stage s of a run with p stages holds

    M = const + head·[s = 0] + tail·[s = p − 1]
        + Σ_kinds ( param_k · n_k + Σ_o act_{k,o} · Σ_c n_{k,o,c} · f(c, s) )

where ``n_k`` counts the stage's layers of body kind k, ``n_{k,o,c}`` those
of chunk c under option o and ``f(c, s)`` is the micro-batches in flight
(:func:`sappkit.in_flight`; 1F1B ``p − s``; without a ``micro_batches``
column the counts are uncapped, as in SAPP's memory fit). ``head`` and ``tail`` are
the whole extra memory of the first and last stage (the head's parameters
and its activations at the head cell's in-flight count), excluding
``const``. :func:`design` writes this as a matrix (one row per observed
stage, one column per parameter) that :func:`sappkit.fit_memory` inverts
and :func:`synthetic_dryruns` multiplies; :func:`expected_params` reads the
parameters off a layer table and :func:`params_to_layers` writes fitted ones
back into one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._check import check_bool, check_int, check_number
from .._frames import check_frame
from ..columns import ACTIVATION_MB, BACKWARD_TIME, BODY, CHUNK, COUNT, FORWARD_TIME
from ..columns import HEAD as HEAD_ROLE
from ..columns import KIND, LAYERS, MEMORY_MB, OPTION, PARAM_MB, ROLE, SAPP_OPTIONS, STAGE
from ..columns import TAIL as TAIL_ROLE
from ..errors import InputError
from ..limits import MAX_MEMORY_MB
from ..layers.table import LayerTable, as_layer_table
from ..layers.units import time_unit_of
from ..pipeline.schedules import in_flight_counts
from .dryruns import MICRO_BATCHES, as_observations, count_columns
from .stage_config import RUN, STAGES, count_column

__all__ = ["Param", "CONST", "HEAD", "TAIL", "PARAM", "ACTIVATION", "body_params", "design", "observed_options",
           "synthetic_dryruns", "expected_params", "params_to_layers"]

CONST, HEAD, TAIL, PARAM, ACTIVATION = "const_mb", "head_mb", "tail_mb", "param_mb", "activation_mb"
#: What each option is called in the MindFormers YAML, for the "which dry run fixes it" hints.
YAML_KEY = {"selective": "select_recompute", "comm": "select_comm_recompute",
            "both": "select_recompute and select_comm_recompute", "full": "recompute"}


@dataclass(frozen=True)
class Param:
    """One parameter of the model: its role (:data:`CONST`, :data:`HEAD`, :data:`TAIL`, :data:`PARAM`,
    :data:`ACTIVATION`), body kind (None for a single unnamed kind) and option."""

    role: str
    kind: str | None = None
    option: str | None = None

    @property
    def name(self) -> str:
        """``param_mb``, ``activation_mb[full]``, ``param_mb[moe]``, ``activation_mb[moe:full]``."""
        inside = ":".join(x for x in (self.kind, self.option) if x is not None)
        return f"{self.role}[{inside}]" if inside else self.role

    def hint(self) -> str:
        """What the dry runs need so this parameter can be told apart."""
        of_kind = f" of kind {self.kind!r}" if self.kind else ""
        if self.role in (HEAD, TAIL):
            where = "stage 0" if self.role == HEAD else "the last stage"
            return f"observations of {where} whose layers the other stages pin down"
        if self.role == CONST:
            return "stages other than the first and last holding different numbers of layers"
        if self.role == PARAM:
            return f"stages holding different numbers of layers{of_kind}"
        key = f" ({YAML_KEY[self.option]})" if self.option in YAML_KEY else ""
        return f"stages holding different numbers of layers{of_kind} under {self.option!r}{key}"


def body_params(per_kind: dict) -> list[Param]:
    """Head, tail, then per kind its parameter memory and one activation per option."""
    out = [Param(HEAD), Param(TAIL)]
    for kind, options in per_kind.items():
        out += [Param(PARAM, kind)] + [Param(ACTIVATION, kind, o) for o in options]
    return out


def observed_options(observations: pd.DataFrame) -> dict[str | None, tuple[str, ...]]:
    """Body kind (None without a ``kind`` column) → options some row runs, SAPP order first."""
    kinds = observations[KIND].to_numpy() if KIND in observations else np.full(len(observations), None)
    columns = count_columns(observations)
    ordered = [count_column(o) for o in SAPP_OPTIONS if count_column(o) in columns]
    ordered += [c for c in columns if c not in ordered]
    out = {}
    for kind in dict.fromkeys(kinds):
        rows = observations[kinds == kind]
        out[kind] = tuple(c[2:] for c in ordered if (rows[c] > 0).any())
    return out


def design(frame: pd.DataFrame, params: list[Param], *, schedule: str,
           less_memory: bool = False) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """The design matrix of ``frame``'s stages for ``params``.

    Returns ``(matrix, row_of, stages)``: one matrix row per observed (run,
    stage) in order of appearance, ``row_of[i]`` the matrix row of frame row
    i, and ``stages`` the (run, stage) of each matrix row.
    """
    run_of = pd.factorize(frame[RUN])[0]
    stage = frame[STAGE].to_numpy()
    _, first, row_of = np.unique(run_of * (int(frame[STAGES].max()) + 1) + stage, return_index=True,
                                 return_inverse=True)
    # Matrix rows in order of first appearance.
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    row_of, first = rank[row_of], first[order]
    flights = _flights(frame, schedule, less_memory)
    kinds = frame[KIND].to_numpy() if KIND in frame else np.full(len(frame), None)
    first_stage, last_stage = stage[first], frame[STAGES].to_numpy()[first] - 1
    matrix = np.zeros((len(first), len(params)))
    for j, param in enumerate(params):
        if param.role == CONST:
            matrix[:, j] = 1.0
        elif param.role in (HEAD, TAIL):
            matrix[:, j] = first_stage == (0 if param.role == HEAD else last_stage)
        else:
            mine = kinds == param.kind
            per_row = frame[LAYERS].to_numpy() if param.role == PARAM else \
                frame[count_column(param.option)].to_numpy() * flights
            matrix[:, j] = np.bincount(row_of[mine], weights=per_row[mine], minlength=len(first))
    stages = pd.DataFrame({RUN: frame[RUN].to_numpy()[first], STAGE: first_stage})
    return matrix, row_of, stages


def _flights(frame: pd.DataFrame, schedule: str, less_memory: bool) -> np.ndarray:
    """Micro-batches in flight on each row's (chunk, stage), for its run's pipeline shape."""
    out = np.zeros(len(frame))
    chunks = frame[CHUNK].to_numpy() if CHUNK in frame else np.zeros(len(frame), dtype=int)
    run_of, runs = pd.factorize(frame[RUN])
    stages = frame[STAGES].to_numpy()
    micro = frame[MICRO_BATCHES].to_numpy() if MICRO_BATCHES in frame else 2 * stages
    stage = frame[STAGE].to_numpy()
    for r, run in enumerate(runs):
        at = np.flatnonzero(run_of == r)
        p, v = int(stages[at[0]]), int(chunks[at].max()) + 1
        if schedule == "1f1b" and v > 1:
            why = f"observations run {run!r} has chunk {v - 1}; schedule '1f1b' has one chunk per stage"
            raise InputError(f"{why} (pass schedule='interleaved')", cli=f"{why} (add --schedule interleaved)")
        # Without micro_batches the counts are SAPP's, uncapped: 2p is at least every schedule's largest.
        counts = in_flight_counts(schedule, p, int(micro[at[0]]), v, less_memory)
        out[at] = counts[chunks[at], stage[at]]
    return out


def synthetic_dryruns(layers, configs, *, schedule="1f1b", less_memory=False, noise_mb=0.0, seed=0,
                      round_mb=False) -> pd.DataFrame:
    """Dry-run observations a model with known memory would give: ``configs`` with ``memory_mb`` filled in.

    Parameters
    ----------
    layers : LayerTable or DataFrame
        The truth: each body kind's ``param_mb`` and ``activation_mb`` per
        option, the head's and tail's memory, ``const_mb``.
    configs : DataFrame
        Observations without ``memory_mb`` (e.g. :func:`sappkit.dryrun_config`
        or a dry-run plan's ``configs``); without a ``kind`` column the table
        must have one body kind.
    schedule, less_memory
        The pipeline the dry runs run.
    noise_mb : float
        Standard deviation of Gaussian noise added to every stage's peak.
    seed : int
        Seeds the noise.
    round_mb : bool
        Round peaks to whole MB, as MindSpore's logs print them.

    Examples
    --------
    >>> from sappkit import read_layers_json, dryrun_config
    >>> config = dryrun_config(stages=4, layers=80, offset=[1, 0, 0, -1], recompute=[2, 3, 0, 1])
    >>> synthetic_dryruns(read_layers_json("data/llama2_70b.json"), config)["memory_mb"].round().tolist()
    [78812.0, 58254.0, 49580.0, 31932.0]
    """
    noise_mb = check_number("noise_mb", noise_mb, minimum=0, maximum=MAX_MEMORY_MB)
    seed = check_int("seed", seed, minimum=0)
    round_mb = check_bool("round_mb", round_mb)
    truth = _truth(layers, configs, schedule, less_memory)
    matrix, row_of, _ = design(truth.configs, truth.params, schedule=schedule, less_memory=less_memory)
    peaks = matrix @ truth.values + truth.ends
    if noise_mb:
        peaks = peaks + np.random.default_rng(seed).normal(0.0, float(noise_mb), len(peaks))
    out = truth.configs.copy()
    out[MEMORY_MB] = np.round(peaks)[row_of] if round_mb else peaks[row_of]
    return out


def expected_params(layers, configs, *, schedule="1f1b", less_memory=False) -> pd.DataFrame:
    """The parameters :func:`sappkit.fit_memory` should recover from dry runs of ``layers`` at ``configs``.

    A frame ``name``, ``kind``, ``option``, ``value_mb`` (const, head, tail,
    then each kind's parameter and activation memory for the options the
    configs run). Head and tail depend on the pipeline shape, so every run
    must share it.

    Examples
    --------
    >>> from sappkit import read_layers_json, dryrun_config
    >>> config = dryrun_config(stages=4, layers=80, recompute=[2, 3, 0, 1])
    >>> truth = expected_params(read_layers_json("data/llama2_70b.json"), config)
    >>> truth[["name", "value_mb"]].round(1).to_numpy().tolist()[:3]
    [['const_mb', 3000.0], ['head_mb', 250.4], ['tail_mb', 312.9]]
    """
    truth = _truth(layers, configs, schedule, less_memory)
    if len(set(truth.head_tail)) > 1:
        raise InputError("configs runs have different pipeline shapes, so head_mb and tail_mb differ between "
                         "runs; give runs of one shape")
    head, tail = truth.head_tail[0]
    params = [Param(CONST), Param(HEAD), Param(TAIL), *truth.params[1:]]
    values = [truth.values[0], head, tail, *truth.values[1:]]
    return pd.DataFrame({"name": [p.name for p in params], KIND: [p.kind for p in params],
                         OPTION: [p.option for p in params], "value_mb": values})


@dataclass(frozen=True)
class _Truth:
    configs: pd.DataFrame
    params: list[Param]
    values: np.ndarray
    ends: np.ndarray
    head_tail: list[tuple[float, float]]


def _truth(layers, configs, schedule: str, less_memory: bool) -> _Truth:
    table = as_layer_table(layers)
    configs = as_observations(configs, name="configs", memory=False)
    if KIND not in configs and len(table.body_kinds) != 1:
        raise InputError(f"configs has no 'kind' column but layers has body kinds "
                         f"{', '.join(map(repr, table.body_kinds))}; state each stage's kinds "
                         "(dryrun_config(kinds=...))")
    params, values = [Param(CONST)], [table.const_mb]
    for kind, options in observed_options(configs).items():
        name = table.body_kinds[0] if kind is None else kind
        if name not in table.body_kinds:
            raise InputError(f"configs kind {name!r} is not a body kind of layers; its body kinds are "
                             f"{', '.join(map(repr, table.body_kinds))}")
        rows = table.rows(name)
        params.append(Param(PARAM, kind))
        values.append(table.param_mb(name))
        for option in options:
            if option not in rows.index:
                raise InputError(f"configs run layers of kind {name!r} under {option!r}, which layers does not "
                                 f"list; its options are {', '.join(map(repr, rows.index))}")
            params.append(Param(ACTIVATION, kind, option))
            values.append(float(rows.at[option, ACTIVATION_MB]))
    _, row_of, stages = design(configs, [], schedule=schedule, less_memory=less_memory)
    last = configs[STAGES].to_numpy()[np.unique(row_of, return_index=True)[1]] - 1
    ends_rows = (table.head, table.tail)
    per_run = {run: _ends(ends_rows, rows, schedule, less_memory) for run, rows in configs.groupby(RUN, sort=False)}
    head, tail = (np.array([per_run[run][i] for run in stages[RUN]]) for i in (0, 1))
    ends = head * (stages[STAGE].to_numpy() == 0) + tail * (stages[STAGE].to_numpy() == last)
    return _Truth(configs, params, np.asarray(values, dtype=float), ends, list(per_run.values()))


def _ends(ends_rows: tuple, rows: pd.DataFrame, schedule: str, less_memory: bool) -> tuple[float, float]:
    """Head and tail memory of one run: parameters plus activations at their cells' in-flight counts."""
    p = int(rows[STAGES].iloc[0])
    v = int(rows[CHUNK].max()) + 1 if CHUNK in rows else 1
    m = int(rows[MICRO_BATCHES].iloc[0]) if MICRO_BATCHES in rows else 2 * p
    counts = in_flight_counts(schedule, p, m, v, less_memory)
    out = []
    for row, flight in zip(ends_rows, (counts[0, 0], counts[v - 1, p - 1])):
        out.append(0.0 if row is None else float(row[PARAM_MB] + row[ACTIVATION_MB] * flight))
    return out[0], out[1]


def params_to_layers(params: pd.DataFrame, observations: pd.DataFrame, times, *, kind=None, head="head",
                     tail="tail", count=None):
    """A layer table from fitted ``params`` and ``times`` (see :meth:`sappkit.MemoryFit.to_layers`)."""
    frame = _times_frame(times)
    values = dict(zip(params["name"], params["value_mb"]))
    for name, value in values.items():
        if value < 0:
            raise InputError(f"{name} is fitted negative ({value:.1f} MB); a layer table needs memory >= 0 "
                             "(see the fit's warnings)")
    if ROLE not in frame:
        frame[ROLE] = np.where(frame[KIND] == head, HEAD_ROLE, np.where(frame[KIND] == tail, TAIL_ROLE, BODY))
        for role, name in ((HEAD_ROLE, head), (TAIL_ROLE, tail)):
            if not (frame[KIND] == name).any():
                raise InputError(f"times has no row for the {role} kind {name!r}; add its forward_time and "
                                 f"backward_time, or name it with {role}=")
    kinds = _kind_names(params, frame, kind)
    counts = _counts(frame, observations, kinds, count)
    param, activation, count_of = [], [], []
    for row, (role, name, option) in enumerate(zip(frame[ROLE], frame[KIND], frame[OPTION])):
        if role in (HEAD_ROLE, TAIL_ROLE):
            param.append(values[HEAD if role == HEAD_ROLE else TAIL])
            activation.append(0.0)
            count_of.append(1)
            continue
        fitted = Param(ACTIVATION, kinds[name], option).name
        if fitted not in values:
            raise InputError(f"times row {row} gives option {option!r} of kind {name!r}, which the fit has no "
                             "activation_mb for; drop that row or add a dry run that runs it")
        param.append(values[Param(PARAM, kinds[name]).name])
        activation.append(values[fitted])
        count_of.append(counts[name])
    out = frame.assign(**{PARAM_MB: param, ACTIVATION_MB: activation, COUNT: count_of})
    for fit_kind, name in ((v, k) for k, v in kinds.items()):
        have = set(out.loc[out[KIND] == name, OPTION])
        for option in params.loc[(params["name"].str.startswith(ACTIVATION))
                                 & (params[KIND].to_numpy() == fit_kind), OPTION]:
            if option not in have:
                raise InputError(f"times has no row for option {option!r} of kind {name!r}, which the fit has; "
                                 "add its forward_time and backward_time")
    return LayerTable(out, const_mb=values.get(CONST, 0.0), time_unit=time_unit_of(frame))


def _times_frame(times) -> pd.DataFrame:
    if isinstance(times, LayerTable):
        return times.frame.copy()
    if not isinstance(times, pd.DataFrame):
        raise InputError(f"times must be a LayerTable or a DataFrame with columns kind, option, forward_time, "
                         f"backward_time; got {type(times).__name__}")
    check_frame(times, "times", (KIND, OPTION, FORWARD_TIME, BACKWARD_TIME), "a times frame")
    return times.reset_index(drop=True).copy()


def _kind_names(params: pd.DataFrame, frame: pd.DataFrame, kind) -> dict:
    """Body kind name in ``times`` → its kind in the fit (None for a fit without kinds)."""
    body = list(dict.fromkeys(frame.loc[frame[ROLE] == BODY, KIND]))
    fitted = list(dict.fromkeys(params.loc[params["name"].str.startswith(PARAM), KIND]))
    if fitted == [None]:
        if kind is None and len(body) != 1:
            raise InputError(f"times has body kinds {', '.join(map(repr, body))}; name the fitted one with kind=")
        name = body[0] if kind is None else kind
        if name not in body or len(body) > 1:
            raise InputError(f"times must have exactly the fitted body kind {name!r}; its body kinds are "
                             f"{', '.join(map(repr, body))}")
        return {name: None}
    if set(body) != set(fitted):
        raise InputError(f"times has body kinds {', '.join(map(repr, body))} but the fit has "
                         f"{', '.join(map(repr, fitted))}; they must be the same")
    return {name: name for name in body}


def _counts(frame: pd.DataFrame, observations: pd.DataFrame, kinds: dict, count) -> dict:
    """Layers of each body kind: ``times``' count column, else ``count``, else a run that observed every stage."""
    if COUNT in frame and count is None:
        return {name: int(frame.loc[frame[KIND] == name, COUNT].iloc[0]) for name in kinds}
    if count is not None:
        given = count if isinstance(count, dict) else {name: count for name in kinds}
        missing = [name for name in kinds if name not in given]
        if missing or len(kinds) > 1 and not isinstance(count, dict):
            raise InputError(f"count must give the layers of every body kind ({', '.join(map(repr, kinds))}); "
                             f"got {count!r}")
        return {name: int(given[name]) for name in kinds}
    for _, rows in observations.groupby(RUN, sort=False):
        if rows[STAGE].nunique() == rows[STAGES].iloc[0]:
            column = rows[KIND] if KIND in rows else pd.Series([None] * len(rows), index=rows.index)
            return {name: int(rows.loc[column.to_numpy() == fit_kind, LAYERS].sum())
                    for name, fit_kind in kinds.items()}
    raise InputError("count is needed: times has no 'count' column and no run observed every stage, so the "
                     "model's layer count is unknown; pass count=")
