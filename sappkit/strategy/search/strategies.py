"""``sappkit.search_strategies``: which parallel strategy to run, searched over every one a trainer accepts."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import replace

import numpy as np
import pandas as pd

from ..._check import check_bool, check_choice, check_int, check_number, short
from ...errors import InputError
from ...hardware import CLUSTER_PRESETS, Cluster, DeviceConfig
from ...layers import KernelConfig
from ...layers.flops import model_flops
from ...layers.units import format_mb
from ...limits import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_MEMORY_MB, MAX_SEQ_LENGTH
from ..bands import BAND_COLUMNS, TIE_MS, band_columns
from ..config import DEGREE_NAMES, Strategy
from ..evaluate import resolve_cluster, resolve_model
from ..legality import check_precision
from .engine import Found, local_executor, run_search
from .explain import ordinal, price_config
from .result import COLUMNS, STEP_MS, StrategySearch
from .shapes import SHAPE_DIMENSIONS
from .space import REASON, RULE, enumerate_strategies
from .tasks import Setting, row_groups

__all__ = ["search_strategies", "cluster_for", "OBJECTIVES"]

#: What the search ranks by. On a fixed device count and batch, tokens/s, model TFLOP/s per device and MFU all
#: rank strategies as the step time does.
OBJECTIVES = ("throughput",)


def search_strategies(model, *, devices: int | None = None, global_batch: int | None = None, cluster=None, device=None,
                      seq_length: int | None = None, memory_mb: float | None = None, dims=None,
                      schedules: Sequence[str] | None = None, objective: str = "throughput", balance_top: int = 8,
                      executor: Executor | None = None,
                      progress: bool = True, tensor_across_nodes: bool = False, kernels: KernelConfig | None = None,
                      dtype: str = "bf16", prune: bool = True, fp8_recipe: str | None = None,
                      baseline=None) -> StrategySearch:
    """Search every parallel strategy a trainer accepts for the fastest step on ``devices`` devices.

    Every strategy of the dimensions' values (:mod:`~sappkit.strategy.search.space`: ``t``, ``p``, ``v``,
    ``dp``, ``cp``, ``ep``, ``etp``, micro-batch, ZeRO stage and resharding, sequence parallelism,
    tensor-parallel communication overlap, CP kind, schedule; the precision is ``dtype``'s) is laid out and
    checked against the trainers'
    rules; closed-form bounds prune the ones that cannot fit the device (full recompute everywhere) or cannot
    be among the ``balance_top`` fastest even placements (a branch and bound on the cheap pass: the even
    placement Megatron-LM makes by default, simulated end to end); those are then balanced with the step
    objective and the per-layer recompute choice (:func:`sappkit.balance`). The work runs on ``executor``,
    with the same result on any.

    Parameters
    ----------
    model : TransformerConfig, sequence of them, or str
        The model (a preset name of :func:`sappkit.models.get`, e.g. ``"llama3-70b"``).
    devices : int, optional
        Devices to run on (``t · cp · dp · p``); default the baseline's.
    global_batch : int, optional
        Sequences per step; default the baseline's.
    cluster : Cluster or str, optional
        The cluster (or a preset name): its nodes and links. Default: the preset of ``device``
        (:func:`cluster_for`), else ``"dgx-h100"``.
    device : DeviceConfig or str, optional
        The device (or a preset name) that prices the ops, in place of the cluster's.
    seq_length : int, optional
        Tokens per sequence (default the model's).
    memory_mb : float, optional
        Device memory every stage must fit, MB (default the device's
        :attr:`~sappkit.hardware.DeviceConfig.usable_mb`).
    dims : mapping, optional
        Values per dimension (:class:`~sappkit.Strategy` field names,
        :data:`~sappkit.strategy.search.space.DIMENSIONS`), replacing the defaults of
        :func:`~sappkit.strategy.search.space.default_dims`, e.g. ``{"tensor_parallel": [4, 8], "zero": [1]}``:
        whole numbers for the degrees, ``virtual_stages`` and ``micro_batch_size``; 0 to 3 for ``zero``; bools
        for ``sequence_parallel``, ``reshard_after_forward`` and ``tp_comm_overlap``; ``"ring"``,
        ``"allgather"``, ``"a2a"`` for ``cp_kind``. A dimension given lays out exactly its values (the defaults'
        filters, :mod:`~sappkit.strategy.search.space`, apply to the others).
    schedules : sequence of str, optional
        Pipeline schedules to search (default every schedule but ``seqpipe``).
    objective : {"throughput"}
        The fastest step; tokens/s, TFLOP/s and MFU rank alike on a fixed device count and batch.
    balance_top : int
        How many of the fastest cheap passes to balance (the most promising).
    executor : concurrent.futures.Executor, optional
        Where the work runs (default: a process pool over the local cores). For a Dask cluster:
        ``dask.distributed.Client(address).get_executor()``.
    progress : bool
        Show a progress bar (``tqdm``: a bar in a terminal, a widget in a notebook).
    tensor_across_nodes : bool
        Allow tensor parallelism across nodes (the ``node`` rule lifted).
    kernels : KernelConfig, optional
        The kernels the layers run (default :data:`~sappkit.strategy.compiled.DEFAULT_KERNELS`: flash attention).
    dtype : {"bf16", "fp16", "fp32", "fp8"}
    prune : bool
        False prices every accepted strategy in the cheap pass, bounds ignored (the exhaustive reference the
        tests hold the search to; slow).
    fp8_recipe : {"delayed", "current", "mxfp8"}, optional
        ``dtype="fp8"`` only: Transformer Engine's scaling recipe (default ``delayed``); the device must run it
        (:func:`sappkit.strategy.legality.check_precision`).

    Returns
    -------
    StrategySearch

    Examples
    --------
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> from sappkit import TransformerConfig
    >>> gpt = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048,
    ...                         vocab_size=32000)
    >>> with ThreadPoolExecutor(1) as pool:
    ...     found = search_strategies(gpt, cluster="dgx-a100", devices=16, global_batch=64, memory_mb=1500,
    ...                               balance_top=2,
    ...                               dims={"pipeline_parallel": [2, 4], "micro_batch_size": [1], "zero": [1],
    ...                                     "context_parallel": [1]}, executor=pool, progress=False)
    >>> found
    StrategySearch(213 strategies, best t1 p2 v2 dp8 cp1 ep1 b1 interleaved zero1: 51 ms)
    >>> found.best["recompute"]
    'none 4, comm 4'
    >>> found.counts().to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'balanced': 2, 'evaluated': 46, 'infeasible': 0, 'pruned_time': 109, 'pruned_memory': 56, 'rejected': 0}
    """
    started = time.perf_counter()
    models = resolve_model(model)
    if seq_length is not None:
        length = check_int("seq_length", seq_length, minimum=1, maximum=MAX_SEQ_LENGTH)
        models = (*models[:-1], replace(models[-1], seq_length=length))
    cluster = cluster_for(cluster, device)
    devices, global_batch = _sizes(baseline, devices, global_batch)
    devices = check_int("devices", devices, minimum=1, maximum=MAX_DEVICES)
    batch = check_int("global_batch", global_batch, minimum=1, maximum=MAX_GLOBAL_BATCH)
    check_choice("objective", objective, OBJECTIVES)
    top = check_int("balance_top", balance_top, minimum=1)
    check_bool("progress", progress)
    check_bool("prune", prune)
    if executor is not None and not isinstance(executor, Executor):
        raise InputError(f"executor must be a concurrent.futures.Executor (e.g. dask.distributed.Client("
                         f"...).get_executor()); got {short(executor)}")
    if cluster.devices is not None and devices > cluster.devices:
        raise InputError(f"devices must be <= the cluster's {cluster.devices} ({cluster.nodes} nodes of "
                         f"{cluster.devices_per_node}); got {devices}")
    limit = cluster.device.usable_mb if memory_mb is None else check_number(
        "memory_mb", memory_mb, minimum=0, strict=True, maximum=MAX_MEMORY_MB)
    recipe = check_precision(dtype, fp8_recipe, cluster.device)
    setting = Setting(models=models, cluster=cluster, global_batch=batch, memory_mb=limit, dtype=dtype,
                      kernels=kernels, fp8_recipe=recipe)
    priced_baseline = None if baseline is None else price_config(setting, baseline)
    space = enumerate_strategies(models, devices=devices, devices_per_node=cluster.devices_per_node,
                                 global_batch=batch, dims=dims, schedules=schedules,
                                 tensor_across_nodes=tensor_across_nodes)
    if space.empty:
        raise InputError(f"no strategy was laid out: no t * cp * p * dp of the searched values makes {devices} "
                         f"devices{'' if dims is None else f' (dims={short(dims)})'}; search other values")
    accepted = space[space[RULE].isna()].copy()
    shapes = sorted(row_groups(*(accepted[key].to_numpy() for key in SHAPE_DIMENSIONS)), key=lambda group: group[0])
    shape_of = np.empty(len(accepted), dtype=int)
    for i, (_, at) in enumerate(shapes):  # numbered in the order of their values
        shape_of[at] = i
    accepted["shape"] = shape_of
    found = _run(setting, accepted, executor, top, progress, prune)
    frame = _frame(space, accepted, found, setting, devices, top)
    return StrategySearch(frame=frame, devices=devices, global_batch=batch, memory_mb=limit, top=top,
                          seconds=time.perf_counter() - started, threshold_ms=found.threshold_ms, setting=setting,
                          shapes=found.shapes, shape_of=accepted["shape"], baseline=priced_baseline,
                          _plans={(index, None): outcome.plan for index, outcome in found.balanced.items()})


def cluster_for(cluster=None, device=None) -> Cluster:
    """The cluster a search runs on: ``cluster`` (a preset name or a :class:`~sappkit.hardware.Cluster`) with
    ``device`` (a preset name or a :class:`~sappkit.hardware.DeviceConfig`) in place of its own; without a
    cluster, the preset built of ``device`` (``"h100-sxm"``: ``"dgx-h100"``), else ``"dgx-h100"``'s nodes and
    links.

    Examples
    --------
    >>> cluster_for(device="a100-80g").name, cluster_for("dgx-h100", "h200").device.name
    ('dgx-a100', 'h200')
    """
    if isinstance(device, str | os.PathLike):
        device = DeviceConfig.preset(device)
    elif device is not None and not isinstance(device, DeviceConfig):
        raise InputError(f"device must be a sappkit.hardware.DeviceConfig, a preset name or a hardware file (.toml); got {short(device)}")
    if cluster is None:
        built = [name for name in CLUSTER_PRESETS if device is not None
                 and Cluster.preset(name).device.name == device.name]
        cluster = built[0] if built else "dgx-h100"
    cluster = resolve_cluster(cluster)
    return cluster if device is None else cluster.replace(device=device)


def _sizes(baseline, devices, global_batch) -> tuple:
    """The devices and global batch: as given, else the baseline's (its strategy's devices; its global batch, else
    ``dp · b`` times its micro-batches)."""
    if baseline is not None:
        strategy = getattr(baseline, "strategy", None)
        if not isinstance(strategy, Strategy) or not callable(getattr(baseline, "plan_for", None)):
            raise InputError(f"baseline must be a trainer config with a strategy and plan_for (as "
                             f"sappkit.read_trainer_config returns); got {short(baseline)}")
        if devices is not None and devices != strategy.devices:
            raise InputError(f"devices must be the baseline's {strategy.devices} ({strategy.label}); got {devices}")
        devices = strategy.devices
        if global_batch is None:
            global_batch = getattr(baseline, "global_batch", None) or \
                strategy.data_parallel * strategy.micro_batch_size * baseline.micro_batches
    if devices is None or global_batch is None:
        missing = "devices" if devices is None else "global_batch"
        raise InputError(f"{missing} must be given (or a baseline= trainer config that sets it); got None")
    return devices, global_batch


def _run(setting: Setting, accepted: pd.DataFrame, executor: Executor | None, top: int, progress: bool,
         prune: bool) -> Found:
    from tqdm.auto import tqdm

    with tqdm(unit=" strategies", disable=not progress, leave=False) as bar:
        if executor is not None:
            return run_search(setting, accepted, executor=executor, top=top, progress=bar, prune=prune)
        with local_executor() as pool:
            return run_search(setting, accepted, executor=pool, top=top, progress=bar, prune=prune)


def _frame(space: pd.DataFrame, accepted: pd.DataFrame, found: Found, setting: Setting, devices: int,
           top: int) -> pd.DataFrame:
    """The result's frame (:mod:`~.result`'s docstring), the fastest first."""
    frame = space.copy()
    frame["label"] = _labels(frame, setting.dtype if setting.fp8_recipe is None else f"fp8-{setting.fp8_recipe}")
    frame["status"] = np.where(frame[RULE].notna(), "rejected", "pruned_time")
    for column in ("placement", "recompute"):
        frame[column] = ""
    for column in COLUMNS:
        if column not in frame:
            frame[column] = np.nan
    at = accepted.index
    frame.loc[at, "memory_bound_mb"] = found.memory_bound_mb
    frame.loc[at, "time_bound_ms"] = found.time_bound_ms
    least = found.even_bound_ms.min(axis=1)
    frame.loc[at, "even_bound_ms"] = least
    threshold = found.threshold_ms
    rounded, inverse = np.unique(np.round(least), return_inverse=True)  # each figure written once
    frame.loc[at, REASON] = np.array([f"its even placement needs at least {b:,.0f} ms, not faster than the "
                                      f"{ordinal(top)} fastest cheap pass ({threshold:,.0f} ms)" for b in rounded],
                                     dtype=object)[inverse.ravel()]
    over = at[found.memory_bound_mb > setting.memory_mb]
    unfit = at[(found.memory_bound_mb <= setting.memory_mb) & ~np.isfinite(least)]
    frame.loc[over.union(unfit), "status"] = "pruned_memory"
    frame.loc[over, REASON] = [f"no placement fits: at least {format_mb(b)} with the lightest recompute everywhere"
                               for b in frame.loc[over, "memory_bound_mb"]]
    frame.loc[unfit, REASON] = "its even placement fits under no recompute option (its memory bound)"
    for index, outcome in found.cheap.items():
        _write(frame, index, outcome)
        frame.at[index, "even_step_ms"] = outcome.step_ms
    for index, outcome in found.balanced.items():
        if outcome.step_ms < frame.at[index, STEP_MS]:
            _write(frame, index, outcome)
        frame.at[index, "status"] = "balanced"
    _metrics(frame, setting, devices)
    # steps equal to the microsecond are ties (bands.tie_ranks): they keep the order of their index
    order = np.lexsort((frame.index.to_numpy(), frame["status"].map({s: i for i, s in enumerate(
        ("balanced", "evaluated", "infeasible", "pruned_time", "pruned_memory", "rejected"))}).to_numpy(),
                        np.round(frame[STEP_MS].fillna(np.inf).to_numpy() / TIE_MS)))
    frame = frame.iloc[order]
    bands = band_columns(frame, device=setting.cluster.device.name, moe=any(model.experts for model in setting.models),
                         precision=setting.dtype)
    return pd.concat([frame.drop(columns=list(BAND_COLUMNS)), bands], axis=1)[list(COLUMNS)]


def _write(frame: pd.DataFrame, index, outcome) -> None:
    finite = np.isfinite(outcome.step_ms)
    frame.at[index, "status"] = "evaluated" if finite else "infeasible"
    frame.at[index, REASON] = outcome.message
    frame.at[index, "placement"] = outcome.placement
    frame.at[index, "recompute"] = outcome.recompute
    frame.at[index, STEP_MS] = outcome.step_ms if finite else np.nan
    frame.at[index, "peak_memory_mb"] = outcome.peak_memory_mb
    frame.at[index, "bubble_fraction"] = outcome.bubble


def _metrics(frame: pd.DataFrame, setting: Setting, devices: int) -> None:
    seconds = frame[STEP_MS].to_numpy(dtype=float) / 1e3
    tokens = setting.global_batch * setting.models[-1].seq_length
    frame["tokens_per_s_per_device"] = tokens / seconds / devices
    frame["tflops_per_device"] = model_flops(*setting.models, batch=setting.global_batch) / seconds / devices / 1e12
    frame["mfu"] = frame["tflops_per_device"] / setting.cluster.device.peak_tflops(setting.dtype)
    frame["headroom_mb"] = setting.memory_mb - frame["peak_memory_mb"]
    frame["even_step_ms"] = frame["even_step_ms"].where(np.isfinite(frame["even_step_ms"].astype(float)))


def _labels(frame: pd.DataFrame, dtype: str) -> np.ndarray:
    """:attr:`sappkit.Strategy.label` of each row, written without building the strategies: its degrees and its
    settings each written once per distinct combination (a search's millions of rows hold a few thousand)."""
    short = tuple((name, key) for key, name in DEGREE_NAMES.items())

    def degrees(*values) -> str:
        parts = [f"{name}{value}" for (name, _), value in zip(short, values)]
        return " ".join(parts if values[-1] == 1 else parts[:6] + [f"etp{values[-1]}"] + parts[6:])

    def switches(sp, zero, schedule, reshard, overlap, kind) -> str:
        return " ".join([schedule, f"zero{zero}"] + (["no-reshard"] if zero == 3 and not reshard else [])
                        + ([] if sp else ["no-sp"]) + (["tp-overlap"] if overlap else [])
                        + ([] if kind == "ring" else [f"cp-{kind}"]) + ([] if dtype == "bf16" else [dtype]))

    halves = []
    for write, columns in ((degrees, [key for _, key in short] + ["expert_tensor_parallel"]),
                           (switches, ["sequence_parallel", "zero", "schedule", "reshard_after_forward",
                                       "tp_comm_overlap", "cp_kind"])):
        half = np.empty(len(frame), dtype=object)
        for values, at in row_groups(*(frame[column].to_numpy() for column in columns)):
            half[at] = write(*values)
        halves.append(half)
    return halves[0] + " " + halves[1]
