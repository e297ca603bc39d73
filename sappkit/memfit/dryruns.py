"""Dry-run observations: what each observed stage held, and its peak memory.

One frame, one row per observed stage:

================  ==========================================================
``run``           the dry-run configuration (a round of a YAML, a log folder)
``stage``         the stage, ``0 .. stages - 1``
``chunk``         optional: interleaved dry runs have one row per (stage, chunk)
``kind``          optional (sappkit's extension): a model with several body
                  kinds has one row per (stage[, chunk], kind)
``stages``        ``p`` of the run
``layers``        body layers on the row's stage (chunk, kind)
``n_<option>``    layers of the row under each option, adding up to ``layers``
``memory_mb``     the stage's peak, repeated on each of its rows
``micro_batches`` optional: caps micro-batches in flight (uncapped when absent)
================  ==========================================================

The readers turn MindFormers' per-stage configuration into per-option counts
with :func:`sappkit.memfit.stage_config.dryrun_config` (its notes give the
cumulative-count convention).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from .._check import as_finite, check_choice, short
from .._files import as_path, load_yaml, read_csv, shown
from .._frames import check_columns, name_column, number_column, whole_column
from .._frames import plain as _plain
from ..columns import CHUNK, KIND, LAYERS, MEMORY_MB, STAGE
from ..errors import InputError
from ..limits import MAX_CHUNKS, MAX_DRY_RUNS, MAX_LAYERS, MAX_MEMORY_MB, MAX_MICRO_BATCHES, MAX_STAGES
from .stage_config import COUNT_PREFIX, RUN, STAGES, dryrun_config

__all__ = ["MICRO_BATCHES", "DryRunWarning", "count_columns", "as_observations", "read_dryrun_yaml",
           "read_dryrun_csv", "read_dryrun_logs"]

MICRO_BATCHES = "micro_batches"
_PEAK_LINES = {
    "used": re.compile(r"Used peak memory usage \(without fragments\):\s*(\d+(?:\.\d+)?)M"),
    "actual": re.compile(r"Actual peak memory usage \(with fragments\):\s*(\d+(?:\.\d+)?)M"),
}
_STAGE_FOLDER = re.compile(r"stage(\d+)(?:_.*)?", re.IGNORECASE)


def count_columns(frame: pd.DataFrame) -> list[str]:
    """The ``n_<option>`` columns of ``frame``, in frame order."""
    return [c for c in frame.columns if isinstance(c, str) and c.startswith(COUNT_PREFIX) and len(c) > 2]


def as_observations(frame, *, name: str = "observations", memory: bool = True) -> pd.DataFrame:
    """Validate a dry-run observations frame (``memory=False``: a configuration without peaks); return a copy.

    Rows are named by position (``row 3``) in error messages.
    """
    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"{name} must be a DataFrame of dry-run observations; got {type(frame).__name__}")
    check_columns(frame, name, "dry-run observations")
    required = [RUN, STAGE, STAGES, LAYERS] + ([MEMORY_MB] if memory else [])
    missing = [c for c in required if c not in frame.columns]
    counts = count_columns(frame)
    if missing or not counts:
        what = ", ".join(map(repr, missing)) if missing else "n_<option> count columns"
        raise InputError(f"{name} is missing {what}; dry-run observations need columns "
                         f"{', '.join(required)} and one count column per option (n_none, n_full, ...)")
    frame = frame.reset_index(drop=True)
    if frame.empty:
        raise InputError(f"{name} has no rows; expected one row per observed stage")
    name_column(frame, RUN, name)
    where = functools.partial(_where, frame, name)
    maxima = {STAGE: MAX_STAGES, STAGES: MAX_STAGES, LAYERS: MAX_LAYERS, CHUNK: MAX_CHUNKS,
              MICRO_BATCHES: MAX_MICRO_BATCHES, **dict.fromkeys(counts, MAX_LAYERS)}
    values = {column: whole_column(frame, column, name, maximum=maxima[column], where=where)
              for column in (STAGE, STAGES, LAYERS, *counts, *(c for c in (CHUNK, MICRO_BATCHES) if c in frame))}
    if memory:
        values[MEMORY_MB] = number_column(frame, MEMORY_MB, name, strict=True, maximum=MAX_MEMORY_MB, where=where,
                                          expected="the stage's peak memory, a number > 0 (MB)")
    if KIND in frame:
        values[KIND] = name_column(frame, KIND, name, where=where)
    frame = frame.assign(**values)
    _check_rows(frame, name, counts)
    return frame


def _where(frame: pd.DataFrame, name: str, row: int) -> str:
    run, stage = (_plain(frame.at[row, column]) for column in (RUN, STAGE))
    return f"{name} row {row} (run {short(run)}, stage {short(stage)})"


def _check_rows(frame: pd.DataFrame, name: str, counts: list[str]) -> None:
    stage, stages, layers = (frame[c].to_numpy() for c in (STAGE, STAGES, LAYERS))
    for row in np.flatnonzero((stages < 2) | (stage >= stages))[:1]:
        raise InputError(f"{_where(frame, name, row)} has stages = {stages[row]}; expected "
                         f"stages >= 2 and stage < stages")
    total = frame[counts].to_numpy().sum(axis=1)
    for row in np.flatnonzero(total != layers)[:1]:
        raise InputError(f"{_where(frame, name, row)}: its counts {' + '.join(counts)} add up to "
                         f"{total[row]} but layers is {layers[row]}; they must add up to the layers")
    keys = [RUN, STAGE] + [c for c in (CHUNK, KIND) if c in frame]
    for row in np.flatnonzero(frame.duplicated(keys).to_numpy())[:1]:
        raise InputError(f"{_where(frame, name, row)} repeats ({', '.join(keys)}) of an earlier row; "
                         "observe each once")
    run_of = pd.factorize(frame[RUN])[0]
    stage_of = run_of * (int(stages.max()) + 1) + stage
    checks = [(run_of, STAGES, "run")] + ([(run_of, MICRO_BATCHES, "run")] if MICRO_BATCHES in frame else [])
    checks += [(stage_of, MEMORY_MB, "stage")] if MEMORY_MB in frame else []
    for group, column, scope in checks:
        values = frame[column].to_numpy()
        first = np.full(group.max() + 1, -1)
        first[group[::-1]] = np.arange(len(group))[::-1]
        for row in np.flatnonzero(values != values[first[group]])[:1]:
            row = int(first[group[row]])
            raise InputError(f"{_where(frame, name, row)} column {column!r} differs between the rows of "
                             f"its {scope}; a {scope} has one {column} value")


class DryRunWarning(UserWarning):
    """A dry-run file read with a caveat (e.g. rounds that differ where head and tail were observed)."""


_TOP_KEYS = ("pipeline_config", "time_config", "recompute_config", "memory_usage")
_RECOMPUTE_KEYS = ("recompute", "select_recompute", "select_comm_recompute")


def read_dryrun_yaml(path, *, kinds: Mapping[str, int] | None = None) -> pd.DataFrame:
    """Read MindFormers' pipeline_balance init YAML: one run per dry-run round.

    ``pipeline_config`` (``pipeline_num``, ``num_layer``, ``offset``) and
    ``recompute_config`` state each stage's layers and recompute counts (see
    the module notes); ``memory_usage`` gives ``head_memory`` (stage 0),
    ``tail_memory`` (stage p − 1) and ``body_memories`` (``stage_id``,
    ``memories``). Several rounds are lists of lists — one list per round —
    for ``offset``, the recompute keys (whose per-round items may be a bool or
    0) and ``body_memories``; a bool or 0 applies to every round. Runs are
    named ``round1``, ``round2``, ... ``head_memory`` and ``tail_memory``
    belong to the **first** round, as the format's documentation says; the
    original tool pairs them with the last round's configuration, so a
    :class:`DryRunWarning` is issued when the rounds differ at stage 0 or
    p − 1. ``time_config`` is accepted and not read. ``kinds`` as for
    :func:`dryrun_config`.

    Examples
    --------
    >>> frame = read_dryrun_yaml("tests/memfit/data/two_rounds.yaml")
    >>> frame[["run", "stage", "layers", "n_full", "memory_mb"]].to_numpy().tolist()[:3]
    [['round1', 0, 20, 1, 66502.0], ['round1', 1, 21, 2, 52536.0], ['round1', 2, 19, 1, 35595.0]]
    """
    path = as_path("path", path)
    data = load_yaml(path, "a MindFormers pipeline_balance YAML")
    if not isinstance(data, dict):
        raise InputError(f"{path}: the top level is {short(data)}; expected a mapping with keys "
                         f"{', '.join(_TOP_KEYS)}")
    _keys(path, "the top level", data, _TOP_KEYS, required=("pipeline_config", "memory_usage"))
    pipeline = _keys(path, "pipeline_config", data["pipeline_config"], ("pipeline_num", "num_layer", "offset"),
                     required=("pipeline_num", "num_layer"))
    recompute = _keys(path, "recompute_config", data.get("recompute_config") or {}, _RECOMPUTE_KEYS)
    usage = _keys(path, "memory_usage", data["memory_usage"], ("head_memory", "tail_memory", "body_memories"),
                  required=("head_memory", "tail_memory", "body_memories"))
    body = _keys(path, "memory_usage.body_memories", usage["body_memories"], ("stage_id", "memories"),
                 required=("stage_id", "memories"))
    p, total = pipeline["pipeline_num"], pipeline["num_layer"]
    for key, value, least, most in (("pipeline_num", p, 2, MAX_STAGES), ("num_layer", total, 1, MAX_LAYERS)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
            raise InputError(f"{path}: pipeline_config.{key} is {short(value)}; expected an int >= {least}")
        if value > most:
            raise InputError(f"{path}: pipeline_config.{key} is {short(value)}; expected an int <= {most.cited}")
    named = {"pipeline_config.offset": pipeline.get("offset", 0),
             **{f"recompute_config.{k}": recompute.get(k) or 0 for k in _RECOMPUTE_KEYS},
             "memory_usage.body_memories.stage_id": body["stage_id"],
             "memory_usage.body_memories.memories": body["memories"]}
    rounds = _rounds(path, named)
    per_round = {key: _by_round(path, key, value, rounds, memory="memory_usage" in key)
                 for key, value in named.items()}
    head, tail = (_peak(f"{path}: memory_usage.{key}", usage[key]) for key in ("head_memory", "tail_memory"))
    frames = []
    for r in range(rounds):
        config = dryrun_config(stages=p, layers=total, offset=per_round["pipeline_config.offset"][r],
                               **{k: per_round[f"recompute_config.{k}"][r] for k in _RECOMPUTE_KEYS},
                               run=f"round{r + 1}", kinds=kinds, where=f"{path} (round {r + 1})")
        peaks = _round_peaks(path, r, p, per_round, head if r == 0 else None, tail if r == 0 else None)
        observed = config[config[STAGE].isin(peaks)].copy()
        observed[MEMORY_MB] = observed[STAGE].map(peaks).astype(float)
        frames.append((config, observed))
    _warn_if_ends_differ(path, p, [config for config, _ in frames])
    return pd.concat([observed for _, observed in frames], ignore_index=True)


def _keys(path: Path, where: str, mapping, known: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
    if not isinstance(mapping, dict):
        raise InputError(f"{path}: {where} is {short(mapping)}; expected a mapping with keys {', '.join(known)}")
    for key in mapping:
        if key not in known:
            raise InputError(f"{path}: {where} has unknown key {short(key)}; expected keys {', '.join(known)}")
    for key in required:
        if key not in mapping:
            raise InputError(f"{path}: {where} has no key {key!r}; expected keys {', '.join(known)}")
    return mapping


def _rounds(path: Path, named: dict) -> int:
    """Rounds: the length of every value given as a list of lists (which must agree), else 1."""
    lengths = {key: len(value) for key, value in named.items()
               if isinstance(value, list) and any(isinstance(item, list) for item in value)}
    if len(set(lengths.values())) > 1:
        listing = ", ".join(f"{key} has {n}" for key, n in lengths.items())
        raise InputError(f"{path}: the keys give different numbers of rounds ({listing}); "
                         "every list of lists must have one list per round")
    rounds = next(iter(lengths.values()), 1)
    if rounds > MAX_DRY_RUNS:
        raise InputError(f"{path}: the lists of lists give {rounds} rounds; expected at most {MAX_DRY_RUNS.cited}")
    return rounds


def _by_round(path: Path, key: str, value, rounds: int, *, memory: bool) -> list:
    """``value`` as one item per round."""
    nested = isinstance(value, list) and any(isinstance(item, list) for item in value)
    if nested or (rounds > 1 and isinstance(value, list) and not memory):
        if len(value) != rounds or (memory and not all(isinstance(item, list) for item in value)):
            raise InputError(f"{path}: {key} is {short(value)}; with {rounds} rounds expected a list of "
                             f"{rounds} items, one per round")
        return list(value)
    if memory and rounds > 1:
        raise InputError(f"{path}: {key} is {short(value)}; with {rounds} rounds expected a list of "
                         f"{rounds} lists, one per round")
    return [value] * rounds


def _peak(where: str, value) -> float:
    """A stage's peak memory, read at ``where`` (the file and key, or the log line)."""
    number = as_finite(value)
    if number is None or number <= 0:
        raise InputError(f"{where} is {short(value)}; expected the stage's peak memory, a number > 0 (MB)")
    if number > MAX_MEMORY_MB:
        raise InputError(f"{where} is {short(value)}; expected a peak memory <= {MAX_MEMORY_MB.cited} MB")
    return number


def _round_peaks(path: Path, r: int, p: int, per_round: dict, head, tail) -> dict[int, float]:
    stage_key, memory_key = "memory_usage.body_memories.stage_id", "memory_usage.body_memories.memories"
    where = f" round {r + 1}" if len(per_round[stage_key]) > 1 else ""
    ids, memories = per_round[stage_key][r], per_round[memory_key][r]
    if not isinstance(ids, list) or not isinstance(memories, list) or len(ids) != len(memories):
        raise InputError(f"{path}: {stage_key}{where} and memories must be lists of one length; got "
                         f"{short(ids)} and {short(memories)}")
    peaks = {} if head is None else {0: head, p - 1: tail}
    for stage, memory in zip(ids, memories):
        if not (isinstance(stage, int) and not isinstance(stage, bool) and 0 <= stage < p):
            raise InputError(f"{path}: {stage_key}{where} has {short(stage)}; expected a stage from 0 to {p - 1}")
        if stage in peaks:
            owner = {0: "head_memory", p - 1: "tail_memory"}.get(stage) if head is not None else None
            again = f"{owner} already observes it" if owner and ids.count(stage) == 1 else "it is listed twice"
            raise InputError(f"{path}: {stage_key}{where} lists stage {stage}, but {again}; observe a stage "
                             "once per round")
        peaks[stage] = _peak(f"{path}: {memory_key}{where} (stage {stage})", memory)
    return peaks


def _warn_if_ends_differ(path: Path, p: int, configs: list[pd.DataFrame]) -> None:
    def ends(config):
        return config[config[STAGE].isin([0, p - 1])].drop(columns=RUN).reset_index(drop=True)
    differing = [r + 1 for r, config in enumerate(configs[1:], start=1) if not ends(config).equals(ends(configs[0]))]
    if differing:
        warnings.warn(f"{path}: round(s) {', '.join(map(str, differing))} differ from round 1 at stage 0 or "
                      f"{p - 1}; head_memory and tail_memory are read as round 1's stages, as the format's "
                      "documentation says (the original tool pairs them with the last round's configuration)",
                      DryRunWarning, stacklevel=3)


def read_dryrun_csv(path) -> pd.DataFrame:
    """Read dry-run observations from a CSV with the observations columns.

    Examples
    --------
    >>> frame = read_dryrun_csv("data/llama2_70b_dryruns.csv")
    >>> sorted(frame["run"].unique())
    ['round1', 'round2']
    """
    path = as_path("path", path)
    frame = read_csv(path, "a CSV of dry-run observations", "dry-run observations", dtype={RUN: str, KIND: str})
    return as_observations(frame, name=str(path))


def read_dryrun_logs(folder, *, stages, layers, offset=0, recompute=0, select_recompute=0,
                     select_comm_recompute=0, chunks=1, peak="used", run="logs",
                     kinds: Mapping[str, int] | None = None) -> pd.DataFrame:
    """Peak memory per stage from MindSpore dry-run logs, joined with the configuration you ran.

    ``folder`` holds one folder per observed stage, named ``stage<s>`` or
    ``stage<s>_<anything>`` (other entries are not read); the stage's peak is
    the largest ``Used peak memory usage (without fragments): <n>M`` (or,
    with ``peak="actual"``, ``Actual peak memory usage (with fragments)``)
    line in any ``*.log`` file below it — with several ranks per stage, the
    stage must fit on every one. The configuration (``stages`` ...
    ``kinds``) is stated as for :func:`dryrun_config`.

    Examples
    --------
    >>> frame = read_dryrun_logs("tests/memfit/data/logs_4stages", stages=4, layers=8,
    ...                          offset=[1, 0, 0, -1], recompute=[0, 1, 2, 0])
    >>> frame[["stage", "layers", "n_full"]].to_numpy().tolist(), frame["memory_mb"].tolist()
    ([[0, 3, 0], [1, 2, 1], [3, 1, 0]], [30500.0, 20100.0, 12000.0])
    """
    peak = check_choice("peak", peak, tuple(_PEAK_LINES))
    root = as_path("folder", folder)
    try:
        problem = None if root.is_dir() else "not a folder" if root.exists() else "no such folder"
    except OSError as error:
        problem = f"cannot read ({error.strerror})"
    if problem is not None:
        raise InputError(f"{shown(root)}: {problem}; expected a folder with one stage<s>_* folder per stage")
    config = dryrun_config(stages=stages, layers=layers, offset=offset, recompute=recompute,
                           select_recompute=select_recompute, select_comm_recompute=select_comm_recompute,
                           chunks=chunks, run=run, kinds=kinds)
    p = int(config[STAGES].iloc[0])
    folders = {}
    for entry in sorted(root.iterdir()):
        match = _STAGE_FOLDER.fullmatch(entry.name)
        if not entry.is_dir() or not match:
            continue
        stage = int(match.group(1))
        if stage >= p:
            raise InputError(f"{entry}: stage {stage} is not a stage of a {p}-stage pipeline (0 to {p - 1})")
        if stage in folders:
            raise InputError(f"{root}: stage {stage} has two folders, {folders[stage].name!r} and "
                             f"{entry.name!r}; keep one folder per stage")
        folders[stage] = entry
    if not folders:
        raise InputError(f"{root}: no stage<s>_* folders; expected one folder per observed stage "
                         "(stage0_..., stage3_...)")
    peaks = {stage: _folder_peak(entry, peak) for stage, entry in folders.items()}
    frame = config[config[STAGE].isin(peaks)].reset_index(drop=True)
    frame[MEMORY_MB] = frame[STAGE].map(peaks).astype(float)
    return frame


def _folder_peak(folder: Path, peak: str) -> float:
    """The largest peak any ``*.log`` below ``folder`` reports, read line by line (logs can be large)."""
    largest = None
    for log in sorted(folder.rglob("*.log")):
        if not log.is_file():
            continue
        try:
            with log.open(encoding="utf-8", errors="replace") as lines:
                for number, line in enumerate(lines, start=1):
                    for match in _PEAK_LINES[peak].finditer(line):
                        if largest is None or float(match.group(1)) > largest[0]:
                            largest = (float(match.group(1)), f"{log} line {number}")
        except OSError as error:
            raise InputError(f"{log}: cannot read ({error.strerror or error}); expected a dry-run log") from None
    if largest is None:
        line = "Used peak memory usage (without fragments)" if peak == "used" else \
            "Actual peak memory usage (with fragments)"
        raise InputError(f"{folder}: no *.log file below it has a line '{line}: <n>M'; "
                         "expected the dry run's log for this stage")
    value, where = largest
    return _peak(f"{where}: the peak memory", value)
