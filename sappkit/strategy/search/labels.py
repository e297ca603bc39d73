"""A strategy's label read back: ``"t8 p16 v2 dp64 interleaved zero1"`` as a :class:`~sappkit.Strategy`.

The vocabulary is the one :attr:`sappkit.Strategy.label` and the search's table write:

- degrees: ``t``, ``p``, ``v``, ``dp``, ``cp``, ``ep``, ``etp``, ``b`` (micro-batch size), each followed by a
  whole number, e.g. ``t8``;
- a schedule name (``1f1b``, ``interleaved``, ``zbv``, ...) and ``zero0`` ... ``zero3``;
- switches: ``no-reshard``, ``no-sp``, ``tp-overlap``, ``cp-ring`` / ``cp-allgather`` / ``cp-a2a``,
  ``no-grad-overlap``, ``no-p2p-overlap``, ``no-param-overlap``, ``a2a-overlap``, ``shared-overlap``,
  ``imbalance1.2``;
- a dtype: ``bf16``, ``fp16``, ``fp32``, ``fp8`` or ``fp8-<recipe>`` (``fp8-current``).

What a label leaves out takes :class:`~sappkit.Strategy`'s default, except two: ``dp`` fills the ``devices``
given (``devices / (t · cp · p)``), and a pipeline with ``v`` above 1 and no schedule runs ``interleaved``.
"""

from __future__ import annotations

import re

from ..._check import check_int
from ...errors import InputError
from ...layers.configs import CP_KINDS, FP8_RECIPES
from ...limits import MAX_DEVICES
from ...pipeline.schedules import SCHEDULES
from ..config import DEGREE_NAMES, Strategy

__all__ = ["parse_strategy", "SWITCHES"]

#: The degrees by their short names (the label's), ``etp`` among them.
_DEGREES = {short: field for field, short in DEGREE_NAMES.items()} | {"etp": "expert_tensor_parallel"}
#: The switches a label may carry, each as the field it sets and the value it sets it to.
SWITCHES = {"no-reshard": ("reshard_after_forward", False), "no-sp": ("sequence_parallel", False),
            "tp-overlap": ("tp_comm_overlap", True), "no-grad-overlap": ("overlap_grad_reduce", False),
            "no-p2p-overlap": ("overlap_p2p_comm", False), "no-param-overlap": ("overlap_param_gather", False),
            "a2a-overlap": ("moe_a2a_overlap", True), "shared-overlap": ("moe_shared_expert_overlap", True)} \
    | {f"cp-{kind}": ("cp_kind", kind) for kind in CP_KINDS} \
    | {dtype: ("dtype", dtype) for dtype in ("bf16", "fp16", "fp32", "fp8")} \
    | {schedule: ("schedule", schedule) for schedule in SCHEDULES}
_DEGREE = re.compile(r"(etp|dp|cp|ep|t|p|v|b)([0-9]+)")
_ZERO = re.compile(r"zero([0-3])")
_FP8 = re.compile(r"fp8-(" + "|".join(FP8_RECIPES) + ")")
_IMBALANCE = re.compile(r"imbalance([0-9]+(?:\.[0-9]+)?)")
_EXPECTED = ("a degree (t8, p16, v2, dp64, cp2, ep8, etp1, b1), a schedule, zero0-zero3, a dtype or a switch "
             f"({', '.join(s for s in SWITCHES if s not in SCHEDULES)}, fp8-<recipe>, imbalance<x>)")


def parse_strategy(label: str, *, devices: int | None = None, dtype: str = "bf16",
                   fp8_recipe: str | None = None) -> Strategy:
    """The :class:`~sappkit.Strategy` a label names (module docstring), checked as any strategy is.

    Parameters
    ----------
    label : str
        Tokens separated by spaces, e.g. ``"t8 p16 v2 dp64"``.
    devices : int, optional
        The devices the strategy runs on: ``dp`` where the label leaves it out, else a check of ``t·cp·dp·p``.
    dtype, fp8_recipe : str, optional
        The precision of a label that names none (a search's: its labels name it only when not bf16).

    Examples
    --------
    >>> parse_strategy("t8 p16 v2", devices=8192).label
    't8 p16 v2 dp64 cp1 ep1 b1 interleaved zero1'
    >>> parse_strategy("t1 dp8 cp8 b2 zero3 fp8-current").sharding
    'ZeRO 3, resharded after forward'
    """
    if not isinstance(label, str) or not label.split():
        raise InputError(f"label must be a strategy label such as 't8 p16 v2 dp64'; got {label!r}")
    fields: dict = {}
    for token in label.split():
        key, value = _token(token, label)
        if key in fields:
            raise InputError(f"label {label!r}: {token!r} sets {key} a second time; give each once")
        fields[key] = value
    if devices is not None:
        devices = check_int("devices", devices, minimum=1, maximum=MAX_DEVICES)
        _fill_data_parallel(fields, devices, label)
    if "fp8_recipe" in fields:
        fields.setdefault("dtype", "fp8")
    elif "dtype" not in fields:
        fields.update(dtype=dtype, fp8_recipe=fp8_recipe)
    if fields.get("virtual_stages", 1) > 1 and "schedule" not in fields:
        fields["schedule"] = "interleaved"
    strategy = Strategy(**fields)
    if devices is not None and strategy.devices != devices:
        raise InputError(f"label {label!r} runs on t*cp*dp*p = {strategy.devices} devices; expected devices="
                         f"{devices}")
    return strategy


def _token(token: str, label: str) -> tuple[str, object]:
    """The field one token sets and its value."""
    if token in SWITCHES:
        return SWITCHES[token]
    if match := _DEGREE.fullmatch(token):
        return _DEGREES[match[1]], int(match[2])
    if match := _ZERO.fullmatch(token):
        return "zero", int(match[1])
    if match := _FP8.fullmatch(token):
        return "fp8_recipe", match[1]
    if match := _IMBALANCE.fullmatch(token):
        return "expert_imbalance", float(match[1])
    raise InputError(f"label {label!r}: unknown token {token!r}; expected {_EXPECTED}")


def _fill_data_parallel(fields: dict, devices: int, label: str) -> None:
    if "data_parallel" in fields:
        return
    rest = fields.get("tensor_parallel", 1) * fields.get("context_parallel", 1) * fields.get("pipeline_parallel", 1)
    if devices % rest:
        raise InputError(f"label {label!r}: t*cp*p = {rest} does not divide devices={devices}, so no dp fills them")
    fields["data_parallel"] = devices // rest
