"""MindFormers' YAML both ways: offsets, recompute lists, ``pipeline_config`` and ``parallel_config``.

A cell ``(c, s)`` of a MindFormers pipeline holds ``num_layers // (p v) +
offset[c][s]`` layers (``offset`` an int for every cell, a list per stage, or
a list of lists per chunk when ``pp_interleave_num`` is above 1), and the
offsets must sum to the remainder ``num_layers % (p v)``. ``recompute``,
``select_recompute`` and ``select_comm_recompute`` count a cell's *first*
layers that recompute fully, their attention core (``selective``) and their
communication (``comm``); a layer within both of the last two runs
``both``. A flat per-stage list with more chunks is dealt to the chunks one
layer at a time, chunk 0 first; a count above a cell's layers is cut to
them; ``True`` is every layer; a dict of operator patterns gives each
pattern its own list (sappkit reads the largest). The schedule is
``parallel.pipeline_config.pipeline_scheduler``: ``1f1b`` (interleaved with
``pipeline_interleave`` and ``pp_interleave_num`` above 1), ``seqpipe`` and
``seqvpp`` (SeqPipe over ``seq_split_num`` slices, one or more chunks) and
``zero_bubble_v`` (ZB-V, two chunks in a V).

Sources followed: MindFormers ``mindformers/models/utils.py``
(``LayerSetting``: ``_check_inputs``, ``_format_recompute_list``,
``_alloc_recompute_layer``, ``_check_layer_rule``),
``mindformers/tools/register/template.py`` (``ParallelConfig``,
``RecomputeConfig`` and their defaults), ``mindformers/tools/check_rules.py``
(``seqvpp``), commit ``fd4deebc1606`` (2025-07-24); the MindFormers
configuration reference (``docs/mindformers/docs/source_en/feature/
configuration.md``, mindspore-ai/docs commit ``9e844dc65dc5``): the
``recompute_config`` fields, ``micro_batch_num >= pipeline_stage``,
``runner_config.batch_size``; ``model.model_config.mtp_depth``, DeepSeek-V3's
multi-token-prediction layers (``research/deepseek3/deepseek3_671b/
pretrain_deepseek3_671b.yaml``, mindspore-lab/mindformers commit ``aa3b5258922e``:
``mtp_depth: 1``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._check import check_int, short
from .._files import as_path, load_yaml
from ..balancer.mindformers_yaml import check_scheduler, pipeline_sections, sections_yaml
from ..errors import InputError
from ..limits import (MAX_CHUNKS, MAX_DEVICES, MAX_LAYERS, MAX_MICRO_BATCHES, MAX_MICROBATCH_SIZE, MAX_SEQ_LENGTH,
                      MAX_SEQ_SPLIT, MAX_STAGES, Limit)
from ..pipeline.schedules import model_order
from ..strategy import Strategy
from .config import (Finding, TrainerConfig, flag, layer_options, pipeline_of, section, strategy_of,
                     whole)

__all__ = ["MindFormersConfig", "mindformers_config", "read_mindformers"]

_WHAT = "MindFormers config"


@dataclass(frozen=True)
class MindFormersConfig:
    """A plan as MindFormers YAML sections, and what MindFormers runs differently."""

    document: dict
    notes: tuple[str, ...] = ()

    def to_yaml(self) -> str:
        """The sections as YAML, ready to merge into a MindFormers config."""
        return sections_yaml(self.document)


def mindformers_config(source, *, strategy: Strategy | None = None, strict: bool = True) -> MindFormersConfig:
    """A plan (or a recompute choice) as MindFormers' parallel, pipeline, model and recompute sections.

    ``strict=False`` writes the nearest lists where MindFormers' cannot state
    a cell's recompute (a note says which cells differ) instead of refusing.

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit import plan_from_offsets
    >>> rows = [dict(kind="block", role="body", count=8, param_mb=100, option=o, forward_time=1,
    ...              backward_time=b, activation_mb=a) for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> plan = plan_from_offsets(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000,
    ...                          offset=[1, -1], recompute=[2, 0])
    >>> document = mindformers_config(plan).document
    >>> document["model"]["model_config"]["offset"], document["recompute_config"]["recompute"]
    ([1, -1], [2, 0])
    """
    pipe = pipeline_of(source)
    check_scheduler(pipe.schedule)
    notes = [] if pipe.fits else [f"the plan does not fit memory_mb={pipe.memory_mb:g}"]
    lists = _lists(pipe, strict, notes)
    parallel = {"pipeline_stage": pipe.stages, "micro_batch_num": pipe.micro_batches}
    if pipe.seq_split > 1:
        parallel["seq_split_num"] = pipe.seq_split
    if strategy is not None:
        parallel = {"data_parallel": strategy.data_parallel, "model_parallel": strategy.tensor_parallel,
                    "context_parallel": strategy.context_parallel, "expert_parallel": strategy.expert_parallel,
                    **parallel, "use_seq_parallel": strategy.sequence_parallel}
    document = pipeline_sections(schedule=pipe.schedule, chunks=pipe.chunks,
                                 num_layers=int(np.sum(pipe.layer_counts)), lists=lists, parallel=parallel)
    if strategy is not None:
        document["runner_config"] = {"batch_size": strategy.micro_batch_size}
    if pipe.less_memory:
        notes.append("the less-memory interleaved order is MindFormers' own choice of warm-up; no key sets it")
    return MindFormersConfig(document, tuple(notes))


def _lists(pipe, strict: bool, notes: list[str]) -> dict:
    """``offset`` and the cumulative recompute counts, one chunk: per stage; more: per chunk."""
    cells = layer_options(pipe.schedule, pipe.layer_counts, pipe.options)
    v, p = pipe.chunks, pipe.stages
    base = int(np.sum(pipe.layer_counts)) // (p * v)
    grids = {key: np.zeros((v, p), dtype=int) for key in ("offset", "recompute", "select_recompute",
                                                          "select_comm_recompute")}
    unknown = sorted(set(pipe.options) - {"none", "selective", "comm", "both", "full"})
    if unknown:
        raise InputError(f"MindFormers' recompute lists know none, selective, comm, both and full; this plan runs "
                         f"{', '.join(map(repr, unknown))}")
    differ = []
    for c in range(v):
        for s in range(p):
            options = cells[c][s]
            full, select, comm = (sum(o in group for o in options) for group in
                                  (("full",), ("selective", "both", "full"), ("comm", "both", "full")))
            grids["offset"][c, s] = len(options) - base
            grids["recompute"][c, s], grids["select_recompute"][c, s] = full, select
            grids["select_comm_recompute"][c, s] = comm
            if _decode(len(options), full, select, comm) != options:
                differ.append(f"(chunk {c}, stage {s})")
    if differ and strict:
        raise InputError(f"MindFormers' recompute lists cannot state cell {differ[0]}: they recompute a cell's "
                         "first layers, so selective and comm layers overlap into 'both'; use strict=False for "
                         "the nearest lists, or plan with balance(..., trainer='mindformers')")
    if differ:
        notes.append(f"MindFormers' lists run other recompute than the plan on {len(differ)} cell(s), from "
                     f"{differ[0]}: they recompute a cell's first layers")
    return {key: [int(x) for x in grid[0]] if v == 1 else grid.tolist() for key, grid in grids.items()}


def _decode(n: int, full: int, select: int, comm: int) -> list[str]:
    """A cell's options from its cumulative counts, as MindFormers applies them to its first layers."""
    options = []
    for j in range(n):
        if j < full:
            options.append("full")
        elif j < select and j < comm:
            options.append("both")
        elif j < select:
            options.append("selective")
        elif j < comm:
            options.append("comm")
        else:
            options.append("none")
    return options


# ---------------------------------------------------------------------------------------------------- import


def read_mindformers(source, *, world_size: int | None = None) -> TrainerConfig:
    """A MindFormers YAML (a path or its document) as a :class:`TrainerConfig`."""
    document = source if isinstance(source, dict) else load_yaml(as_path("path", source), "a MindFormers config")
    origin = "document" if isinstance(source, dict) else str(source)
    if not isinstance(document, dict):
        raise InputError(f"{_WHAT}: expected a mapping at the top; got {short(document)}")
    parallel = section(_WHAT, document, "parallel_config")
    model = section(_WHAT, section(_WHAT, document, "model"), "model_config")
    pipeline = section(_WHAT, section(_WHAT, document, "parallel"), "pipeline_config")
    recompute = section(_WHAT, document, "recompute_config")
    layers = whole(_WHAT, model, "num_layers" if "num_layers" in model else "num_hidden_layers", None,
                   maximum=MAX_LAYERS)
    p = whole(_WHAT, parallel, "pipeline_stage", 1, maximum=MAX_STAGES)
    m = whole(_WHAT, parallel, "micro_batch_num", 1, maximum=MAX_MICRO_BATCHES)
    interleave = flag(_WHAT, pipeline, "pipeline_interleave", False)
    v = whole(_WHAT, model, "pp_interleave_num", 1, maximum=MAX_CHUNKS) if interleave else 1
    scheduler = pipeline.get("pipeline_scheduler", "1f1b")
    schedule = {"1f1b": "interleaved" if v > 1 else "1f1b", "seqpipe": "seqpipe", "seqvpp": "seqpipe",
                "zero_bubble_v": "zbv"}.get(scheduler) if isinstance(scheduler, str) else None
    if schedule is None:
        raise InputError(f"{_WHAT}: parallel.pipeline_config.pipeline_scheduler {short(scheduler)} is not one "
                         "MindFormers runs (1f1b, seqpipe, seqvpp, zero_bubble_v)")
    findings, notes = [], []
    counts = _cell_counts(model.get("offset", 0), layers, p, v, findings)
    options = _options(recompute, counts, schedule, notes)
    findings += _rules(parallel, scheduler, p, m)
    dp, t, cp = (whole(_WHAT, parallel, key, 1) for key in ("data_parallel", "model_parallel", "context_parallel"))
    if world_size is not None and check_int("world_size", world_size, minimum=1,
                                            maximum=MAX_DEVICES) != dp * p * t * cp:
        notes.append(f"world_size {world_size} is not data_parallel x model_parallel x context_parallel x "
                     "pipeline_stage, as MindFormers requires")
    strategy = strategy_of(_WHAT, tensor_parallel=t, pipeline_parallel=p, virtual_stages=v, data_parallel=dp,
                        context_parallel=cp, expert_parallel=whole(_WHAT, parallel, "expert_parallel", 1),
                        micro_batch_size=whole(_WHAT, section(_WHAT, document, "runner_config"), "batch_size", 1,
                                               maximum=MAX_MICROBATCH_SIZE),
                        schedule=schedule, sequence_parallel=flag(_WHAT, parallel, "use_seq_parallel", False))
    seq_split = whole(_WHAT, parallel, "seq_split_num", 1, maximum=MAX_SEQ_SPLIT) if schedule == "seqpipe" else 1
    return TrainerConfig(trainer="mindformers", strategy=strategy, layer_counts=tuple(map(tuple, counts)),
                         options=tuple(options), num_layers=layers, micro_batches=m, seq_split=seq_split,
                         mtp_layers=whole(_WHAT, model, "mtp_depth", 0, minimum=0, maximum=MAX_LAYERS),
                         seq_params=_seq_params(document, model, parallel), findings=tuple(findings), settings=document, notes=tuple(notes), source=origin)


def _seq_params(document: dict, model: dict, parallel: dict) -> dict | None:
    """SeqPipe's model sizes from the model config, where it gives them all (else None), each a checked int."""
    def size(mapping: dict, *keys: str, default=None, maximum: Limit = MAX_SEQ_LENGTH):
        key = next((key for key in keys if key in mapping), keys[0])
        return None if mapping.get(key, default) is None else whole(_WHAT, mapping, key, default, maximum=maximum)

    heads, hidden = size(model, "num_heads", "num_attention_heads"), size(model, "hidden_size")
    params = {"batch_size": size(section(_WHAT, document, "runner_config"), "batch_size", default=1,
                                 maximum=MAX_MICROBATCH_SIZE),
              "num_heads": heads, "seq_length": size(model, "seq_length"), "hidden_size": hidden,
              "vocab_size": size(model, "vocab_size"), "model_parallel": size(parallel, "model_parallel", default=1),
              "head_dim": size(model, "head_dim", default=hidden // heads if hidden and heads else None)}
    ffn = size(model, "intermediate_size", "ffn_hidden_size")
    if ffn is not None:
        params["ffn_size"] = ffn
    return params if all(value is not None for value in params.values()) else None


def _cell_counts(offset, layers: int, p: int, v: int, findings: list[Finding]) -> np.ndarray:
    """``[chunk, stage]`` layers MindFormers builds: ``layers // (p v) + offset``."""
    expected = f"{_WHAT}: offset must be an int, a list of {p} ints or {v} such lists; got {short(offset)}"
    flat = offset if isinstance(offset, list) and not any(isinstance(x, list) for x in offset) else (
        [x for row in offset for x in (row if isinstance(row, list) else [row])] if isinstance(offset, list)
        else [offset])
    if not all(isinstance(x, int) and not isinstance(x, bool) and abs(x) <= MAX_LAYERS for x in flat):
        raise InputError(f"{expected} (each within +-{MAX_LAYERS.cited})")
    try:
        grid = np.broadcast_to(np.array(offset, dtype=int), (v, p))
    except ValueError:
        raise InputError(expected) from None
    counts = layers // (p * v) + grid
    if (counts < 0).any():
        raise InputError(f"{_WHAT}: offset {short(offset)} leaves a cell fewer than 0 layers")
    remainder = layers % (p * v)
    if int(grid.sum()) != remainder:
        built = int(counts.sum())
        name = "layers_dropped" if built < layers else "layers_added"
        findings.append(Finding(name, "error", f"the offsets place {built} of the {layers} layers ({layers} // "
                                               f"({p} x {v}) = {layers // (p * v)} per cell + offsets summing to "
                                               f"{int(grid.sum())}): MindFormers refuses them (they must sum to "
                                               f"{layers} % {p * v} = {remainder})",
                                f"make the offsets sum to {remainder} (sappkit's export writes them)"))
    return counts


def _options(recompute: dict, counts: np.ndarray, schedule: str, notes: list[str]) -> list[str]:
    """Each layer's option in model order from the recompute lists (MindFormers' rules, module docstring)."""
    v, p = counts.shape
    grids = {key: _recompute_grid(key, recompute.get(key, False), counts, notes)
             for key in ("recompute", "select_recompute", "select_comm_recompute")}
    options = []
    for c, s in model_order(schedule, p, v):
        options += _decode(int(counts[c, s]), *(int(grids[key][c, s]) for key in grids))
    return options


def _recompute_grid(key: str, value, counts: np.ndarray, notes: list[str]) -> np.ndarray:
    """``[chunk, stage]`` counts of one list: bools, a flat list dealt over chunks, nested lists, patterns."""
    v, p = counts.shape
    if isinstance(value, dict):  # operator patterns -> lists; the largest per cell
        grids = [_recompute_grid(key, item, counts, notes) for item in value.values()]
        if len({grid.tobytes() for grid in grids}) > 1:
            notes.append(f"recompute_config.{key} gives its operator patterns different lists: sappkit prices the "
                         "largest per cell")
        return np.max(grids, axis=0) if grids else np.zeros_like(counts)
    if isinstance(value, bool):
        return counts.copy() if value else np.zeros_like(counts)
    expected = (f"{_WHAT}: recompute_config.{key} must be a bool, a list of {p} counts or {v} such lists; got "
                f"{short(value)}")
    if not isinstance(value, list | tuple):
        raise InputError(expected)
    flat = len(value) == p and not any(isinstance(row, list | tuple) for row in value)
    nested = len(value) == v and all(isinstance(row, list | tuple) and len(row) == p for row in value)
    items = [x for row in value for x in (row if isinstance(row, list | tuple) else [row])]
    if not (flat or nested) or not all(isinstance(x, int) and 0 <= x <= MAX_LAYERS for x in items):
        raise InputError(expected)
    if flat:
        per_stage = np.array([counts[:, s].sum() if item is True else int(item) for s, item in enumerate(value)])
        return _deal(np.minimum(per_stage, counts.sum(axis=0)), counts)
    rows = [[counts[c, s] if item is True else 0 if item is False else int(item) for s, item in enumerate(row)]
            for c, row in enumerate(value)]
    return np.minimum(np.array(rows, dtype=int), counts)


def _deal(per_stage: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """A per-stage count dealt over the chunks one layer at a time, chunk 0 first (``_alloc_recompute_layer``)."""
    grid = np.zeros_like(counts)
    for s, left in enumerate(per_stage):
        while left:
            for c in range(counts.shape[0]):
                if left and grid[c, s] < counts[c, s]:
                    grid[c, s] += 1
                    left -= 1
    return grid


def _rules(parallel: dict, scheduler: str, p: int, m: int) -> list[Finding]:
    found = []
    if p > 1 and m < p:
        found.append(Finding("microbatches_unsupported", "error",
                             f"micro_batch_num {m} < pipeline_stage {p}: MindFormers requires at least one "
                             "micro-batch per stage", f"set micro_batch_num to {p} or more"))
    if scheduler == "seqvpp" and parallel.get("seq_split_num", 1) == 1:
        found.append(Finding("microbatches_unsupported", "error", "pipeline_scheduler seqvpp with seq_split_num 1: "
                                                                  "MindFormers refuses it",
                             "set seq_split_num above 1, or use pipeline_scheduler seqpipe"))
    return found
