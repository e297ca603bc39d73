"""The performance model against published runs: predicted against measured, row by row.

``data/published_runs.csv`` (``data/README.md`` describes it) holds runs
whose model shape, strategy and cluster are published, each with what was
measured and where (paper, table, page or file); ``assumed`` says what a row
had to assume where its source is silent. An optional ``attention`` column names the attention kernel a run
ran (:class:`~sappkit.layers.KernelConfig`'s ``attention``); without it, a row ran
:data:`PUBLISHED_ATTENTION`. An optional ``fused_elementwise`` column is False where a run's norms,
activations and rotary embedding ran as PyTorch's eager ops (``KernelConfig.fused_elementwise``). A row's metric is what its source
measured (:data:`METRICS`); the prediction is
:func:`sappkit.evaluate_strategy`'s step priced in the same unit, and the
error ``predicted / measured - 1``.

``data/published_memory.csv`` holds per-device memory a source gives for a
published configuration: the parameters with their optimizer state
(compared with the ``param_mb`` of a stage holding only transformer layers,
as the sources count them; the first stage when every stage holds the
embedding or the LM head) or the activations (the first stage's
``activation_mb + overhead_mb``, where they peak), in GiB
(:func:`validate_memory`).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._check import check_int, check_number, short
from .._files import as_path, bundled, read_csv
from .._frames import check_frame
from ..errors import InputError
from ..hardware import Cluster
from ..layers import KernelConfig, TransformerConfig
from ..layers.flops import megatron_sc21_flops
from ..layers.units import text_table
from .config import Strategy
from .evaluate import evaluate_strategy

__all__ = ["METRICS", "METRIC_NAMES", "PUBLISHED_RUNS", "PUBLISHED_MEMORY", "published_runs", "published_memory", "validate",
           "validate_memory", "Validation", "run_inputs", "run_kernels", "PUBLISHED_ATTENTION", "OPTIONAL",
           "FAMILIES", "GROUPS", "family", "family_of"]

#: The families :meth:`Validation.by_group` tells apart, and the columns it groups by.
FAMILIES, GROUPS = ("dense", "fsdp", "moe"), ("device", "family", "precision")
#: The bundled tables of published runs and of published per-device memory.
PUBLISHED_RUNS, PUBLISHED_MEMORY = "published_runs.csv", "published_memory.csv"
#: What a row's ``measured`` is, by its ``metric`` (memory rows: by their ``part``).
METRICS = {
    "tflops_sc21": "teraFLOP/s per GPU, counted as Narayanan et al. SC'21 eq. 3 (recompute's fourth pass counted)",
    "iteration_s": "seconds per iteration",
    "tokens_per_s_per_gpu": "tokens per second per GPU (global batch x sequence / step / devices)",
    "param_opt_gib": "GiB of parameters and optimizer state per device",
    "activation_gib": "GiB of activations per device",
}
#: Short names of the metrics in printed tables.
METRIC_NAMES = {"tflops_sc21": "TFLOP/s/GPU", "iteration_s": "s/iteration", "tokens_per_s_per_gpu": "tokens/s/GPU",
                "param_opt_gib": "param+opt GiB",
                "activation_gib": "activation GiB"}
_SHAPE = ("layers", "hidden_size", "num_heads", "ffn_size", "seq_length", "vocab_size")
_STRATEGY = ("tensor_parallel", "pipeline_parallel", "virtual_stages", "data_parallel", "micro_batch_size", "zero")
_SETTINGS = (*_SHAPE, *_STRATEGY, "global_batch", "devices", "cluster", "dtype", "recompute", "sequence_parallel",
             "overlap_grad_reduce", "overlap_p2p_comm", "assumed")
_COLUMNS = ("run", "source", "where", "metric", "measured", *_SETTINGS)
_MEMORY_COLUMNS = ("run", "source", "where", "part", "measured_gib", *_SETTINGS)
_NUMERIC = (*_SHAPE, *_STRATEGY, "global_batch", "devices")
#: Optional columns of a published run: name -> (its type, a whole number, a flag or a name, ``"model"`` or
#: ``"strategy"`` field); a row without one (or with it empty) runs the default of :class:`~sappkit.TransformerConfig`
#: or :class:`Strategy`.
OPTIONAL = {
    "num_kv_heads": (int, "model"), "head_dim": (int, "model"), "v_head_dim": (int, "model"),
    "gated_mlp": (bool, "model"), "dropout": (bool, "model"),
    "experts": (int, "model"), "top_k": (int, "model"), "expert_ffn_size": (int, "model"),
    "shared_experts": (int, "model"), "dense_layers": (int, "model"),
    "attention_window": (int, "model"), "windowed_layers": (int, "model"),
    "expert_clamp": (bool, "model"), "expert_bias": (bool, "model"),
    "context_parallel": (int, "strategy"), "expert_parallel": (int, "strategy"),
    "expert_tensor_parallel": (int, "strategy"), "reshard_after_forward": (bool, "strategy"),
    "overlap_param_gather": (bool, "strategy"), "expert_imbalance": (float, "strategy"),
    "moe_a2a_overlap": (bool, "strategy"), "moe_shared_expert_overlap": (bool, "strategy"),
    "fp8_recipe": (str, "strategy"), "tp_comm_overlap": (bool, "strategy"),
    "cp_kind": (str, "strategy"),
}
#: The attention a row ran where it has no ``attention`` column: the materialised attention of Megatron-LM's
#: 2021-22 runs (flash attention came after them).
PUBLISHED_ATTENTION = "paper"


def published_runs(path=None) -> pd.DataFrame:
    """The published runs (default the bundled ``published_runs.csv``), checked.

    Examples
    --------
    >>> runs = published_runs()
    >>> runs.groupby("cluster").size().to_dict()
    {'dgx-a100': 18, 'dgx-b200': 7, 'dgx-h100': 89, 'grand-teton-h100': 8}
    """
    frame = _read(path, PUBLISHED_RUNS, "published runs", _COLUMNS, "measured")
    _check_choices(frame, "metric", ("tflops_sc21", "iteration_s", "tokens_per_s_per_gpu"))
    return frame


def published_memory(path=None) -> pd.DataFrame:
    """The published per-device memory (default the bundled ``published_memory.csv``), checked."""
    frame = _read(path, PUBLISHED_MEMORY, "published memory", _MEMORY_COLUMNS, "measured_gib")
    _check_choices(frame, "part", ("param_opt", "activation"))
    return frame


def _read(path, bundled_name: str, what: str, columns: tuple, measured: str) -> pd.DataFrame:
    path = bundled(bundled_name) if path is None else as_path("path", path)
    frame = read_csv(path, what, f"a CSV file of {what}")
    return check_frame(frame, "runs", columns, what, numeric=(measured, *_NUMERIC))


def _check_choices(frame: pd.DataFrame, column: str, choices: tuple) -> None:
    for index, value in frame[column].items():
        if value not in choices:
            raise InputError(f"runs row {index} ({frame.at[index, 'run']!r}): {column} must be one of "
                             f"{', '.join(map(repr, choices))}; got {value!r}")


def run_inputs(row) -> tuple[TransformerConfig, Strategy, int]:
    """A published run's model, strategy and global batch (the optional columns, :data:`OPTIONAL`, where given)."""
    read = {bool: _flag, int: _whole, float: lambda row, name: check_number(name, row[name], minimum=1),
            str: lambda row, name: str(row[name])}
    given = {name: read[kind](row, name) for name, (kind, _) in OPTIONAL.items()
             if name in row.index and not pd.isna(row[name])}
    shape = {name: given[name] for name, (_, field) in OPTIONAL.items() if field == "model" and name in given}
    model = TransformerConfig(**{name: _whole(row, name) for name in _SHAPE}, **shape, name="layer")
    v = _whole(row, "virtual_stages")
    settings = {name: given[name] for name, (_, field) in OPTIONAL.items() if field == "strategy" and name in given}
    strategy = Strategy(**{name: _whole(row, name) for name in _STRATEGY},
                        schedule="interleaved" if v > 1 else "1f1b", dtype=row["dtype"],
                        sequence_parallel=_flag(row, "sequence_parallel"),
                        overlap_grad_reduce=_flag(row, "overlap_grad_reduce"),
                        overlap_p2p_comm=_flag(row, "overlap_p2p_comm"), **settings)
    if strategy.devices != _whole(row, "devices"):
        raise InputError(f"t·cp·dp·p = {strategy.devices} devices, but the row says {_whole(row, 'devices')}")
    return model, strategy, _whole(row, "global_batch")


def _whole(row, name: str) -> int:
    return check_int(name, row[name], minimum=0)


def _flag(row, name: str) -> bool:
    """A CSV cell as a bool: a boolean, or ``true`` / ``false`` in any case; anything else is refused."""
    value = row[name]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in ("true", "false"):
        raise InputError(f"{name} must be true or false; got {short(value)}")
    return text == "true"


def _per_row(rows: pd.DataFrame, what: str, measured: str, compare) -> list[dict]:
    """``compare(row)`` for each row of a non-empty table whose measured value is a number > 0; a refusal names
    the row."""
    if not isinstance(rows, pd.DataFrame) or rows.empty:
        raise InputError(f"{what} holds no rows: there is nothing to compare")
    compared = []
    for index, row in rows.iterrows():
        try:
            check_number(measured, row[measured], minimum=0, strict=True)
            compared.append(compare(row))
        except InputError as error:
            raise error.with_prefix(f"{what} row {index} ({short(row.get('run'))}): ") from None
    return compared


@dataclass(frozen=True, eq=False)
class Validation:
    """Predicted against measured per published run (:func:`validate`).

    ``frame``: ``run``, ``source``, ``metric``, ``measured``, ``predicted``,
    ``error`` (``predicted / measured - 1``), ``step_s`` (the predicted
    step), ``device`` (the cluster's device), ``family`` (:data:`FAMILIES`),
    ``precision`` (the run's dtype), ``where``, ``assumed``.
    """

    frame: pd.DataFrame = field(repr=False)

    @property
    def mean_error(self) -> float:
        """Mean absolute error over the rows."""
        return float(self.frame["error"].abs().mean())

    @property
    def worst_error(self) -> float:
        """Largest absolute error of a row."""
        return float(self.frame["error"].abs().max())

    def by_group(self) -> pd.DataFrame:
        """Per device, family and precision: ``runs``, ``mean_error`` and ``worst_error`` (absolute), then the
        whole as ``all``."""
        absolute = self.frame.assign(abs_error=self.frame["error"].abs())
        groups = absolute.groupby(list(GROUPS), sort=True)["abs_error"].agg(["size", "mean", "max"]).reset_index()
        whole = pd.DataFrame([{**dict.fromkeys(GROUPS, "all"), "size": len(absolute),
                               "mean": absolute["abs_error"].mean(), "max": absolute["abs_error"].max()}])
        frame = pd.concat([groups, whole], ignore_index=True)
        return frame.rename(columns={"size": "runs", "mean": "mean_error", "max": "worst_error"})

    def describe(self) -> str:
        """The table (100 columns), the errors per device, family and precision, and the mean and worst."""
        shown = self.frame[["run", "metric", "measured", "predicted", "error"]].copy()
        shown["error"] = [f"{error:+.1%}" for error in shown["error"]]
        shown["metric"] = shown["metric"].map(METRIC_NAMES)
        groups = self.by_group()
        for column in ("mean_error", "worst_error"):
            groups[column] = [f"{value:.1%}" for value in groups[column]]
        return "\n".join([text_table(shown.round(2)), "", text_table(groups),
                          f"mean |error| {self.mean_error:.2%}, worst {self.worst_error:.2%} over "
                          f"{len(self.frame)} runs"])

    def __repr__(self) -> str:
        return f"Validation({len(self.frame)} runs: mean |error| {self.mean_error:.2%}, worst {self.worst_error:.2%})"

    def _repr_html_(self) -> str:
        return f"<div><b>{html.escape(repr(self))}</b>{self.frame.round(3).to_html(index=False)}</div>"


def validate(runs: pd.DataFrame | None = None, *, clusters: dict[str, Cluster] | None = None) -> Validation:
    """Price every published run and compare with what was measured.

    Parameters
    ----------
    runs : DataFrame, optional
        Rows as :func:`published_runs` reads them (default: the bundled table).
    clusters : dict, optional
        Cluster to use per ``cluster`` name of the rows (default: the presets).

    Examples
    --------
    >>> result = validate(published_runs().iloc[:1])
    >>> result.frame[["run", "measured"]].to_dict("records")
    [{'run': 'sc21-1.7b', 'measured': 137.0}]
    """
    runs = published_runs() if runs is None else runs
    return Validation(pd.DataFrame(_per_row(runs, "runs", "measured", lambda row: _run_compared(row, clusters))))


def _run_compared(row, clusters) -> dict:
    model, strategy, batch, result = _priced(row, clusters)
    seconds = result.step_time / 1e3
    if row["metric"] == "tflops_sc21":
        flops = megatron_sc21_flops(model, batch=batch, recompute=row["recompute"] == "full")
        predicted = flops / seconds / strategy.devices / 1e12
    elif row["metric"] == "tokens_per_s_per_gpu":
        predicted = batch * model.seq_length / seconds / strategy.devices
    else:
        predicted = seconds
    return _compared(row, row["metric"], float(row["measured"]), predicted, step_s=seconds, result=result,
                     model=model)


def validate_memory(rows: pd.DataFrame | None = None, *,
                    clusters: dict[str, Cluster] | None = None) -> Validation:
    """Price every published memory row and compare per-device memory (module docstring), in GiB.

    Examples
    --------
    >>> result = validate_memory()
    >>> result.worst_error < 0.05
    True
    """
    rows = published_memory() if rows is None else rows
    return Validation(pd.DataFrame(_per_row(rows, "memory rows", "measured_gib",
                                            lambda row: _memory_compared(row, clusters))))


def _memory_compared(row, clusters) -> dict:
    model, _, _, result = _priced(row, clusters)
    stages = result.stages
    if row["part"] == "activation":
        predicted = float(stages["activation_mb"].iloc[0] + stages["overhead_mb"].iloc[0]) / 1024
    else:
        body_only = stages.iloc[1:-1] if len(stages) > 2 else stages.iloc[:1]
        predicted = float(body_only["param_mb"].min()) / 1024
    return _compared(row, f"{row['part']}_gib", float(row["measured_gib"]), predicted,
                     step_s=result.step_time / 1e3, result=result, model=model)


def _priced(row, clusters):
    model, strategy, batch = run_inputs(row)
    cluster = (clusters or {}).get(row["cluster"]) or Cluster.preset(row["cluster"])
    result = evaluate_strategy(model, strategy, cluster=cluster, global_batch=batch, recompute=row["recompute"],
                               kernels=run_kernels(row))
    return model, strategy, batch, result


def run_kernels(row) -> KernelConfig:
    """The kernels a published run ran: its ``attention`` (default :data:`PUBLISHED_ATTENTION`) and
    ``fused_elementwise`` (default fused) columns."""
    fused = row.get("fused_elementwise")
    return KernelConfig(attention=str(row.get("attention", PUBLISHED_ATTENTION)),
                        fused_elementwise=True if fused is None or pd.isna(fused) else _flag(row, "fused_elementwise"))


def family(model: TransformerConfig, strategy: Strategy) -> str:
    """A run's family (:data:`FAMILIES`): ``moe`` with routed experts, else ``fsdp`` under ZeRO 3, else ``dense``."""
    return family_of(bool(model.experts), strategy.zero)


def family_of(moe: bool, zero: int) -> str:
    """The family (:data:`FAMILIES`) of a model with routed experts or not (``moe``) under ZeRO stage ``zero``."""
    return "moe" if moe else "fsdp" if zero == 3 else "dense"


def _compared(row, metric: str, measured: float, predicted: float, *, step_s: float, result, model) -> dict:
    return {"run": row["run"], "source": row["source"], "metric": metric, "measured": measured,
            "predicted": predicted, "error": predicted / measured - 1, "step_s": step_s,
            "device": result.cluster.device.name, "family": family(model, result.strategy),
            "precision": result.strategy.dtype, "where": row["where"], "assumed": row["assumed"]}
