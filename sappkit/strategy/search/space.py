"""The strategies a trainer accepts: every combination of the searched degrees, and the rule each other breaks.

:func:`enumerate_strategies` lays out every way to run a model on exactly
``devices`` devices (``t · cp · dp · p = devices``) over the values of each
searched dimension (:func:`default_dims`, or the caller's), for every
schedule and its chunk counts, and checks each against a trainer's rules (:mod:`sappkit.strategy.legality`, the check
:func:`sappkit.evaluate_strategy` holds a strategy to as well). A strategy that breaks one keeps the first it
breaks (its name in ``rule``, the numbers in ``reason``) and is never ranked.

Strategies that differ only in a setting without effect are not laid out
twice: without a pipeline (``p = 1``) only ``1f1b`` with ``v = 1``;
``1f1b`` and ``gpipe`` run one chunk, the interleaved schedules two or more
(one chunk is ``1f1b`` or ``gpipe`` again), ``zb_interleaved`` one or more.
``seqpipe`` is not searched: :class:`~sappkit.Strategy` has no slice count,
and with one slice per micro-batch it is the interleaved schedule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from ..._check import check_bool, check_choice, check_int, short
from ...errors import InputError
from ...layers import TransformerConfig
from ...limits import MAX_STAGES
from ...pipeline.schedules import SCHEDULES, V_SHAPED
from ..legality import MICRO_BATCHES, REASON, RULE, RULES, RuledModel, apply_rules

__all__ = ["DIMENSIONS", "SEARCHED_SCHEDULES", "RULES", "default_dims", "check_dims", "enumerate_strategies",
           "RULE", "REASON", "MICRO_BATCHES", "DEFAULT_CHUNKS",
           "check_schedules"]

#: The searched dimensions, :class:`~sappkit.Strategy`'s field names, in the order frames show them.
DIMENSIONS = ("tensor_parallel", "pipeline_parallel", "virtual_stages", "data_parallel", "context_parallel",
              "expert_parallel", "expert_tensor_parallel", "micro_batch_size", "zero", "sequence_parallel")
#: The schedules the search lays out by default (module docstring: not ``seqpipe``).
SEARCHED_SCHEDULES = tuple(name for name in SCHEDULES if name != "seqpipe")
#: The most chunks a stage runs by default: the balancer's exact search grows steeply with a stage's chunks (a
#: 70B-class model on 4 stages balances in about a second at 4 chunks and a minute or more at 8); ``dims`` asks for
#: more, up to :data:`~sappkit.limits.MAX_CHUNKS`.
DEFAULT_CHUNKS = 4
#: Schedules that run one chunk, two (the V), or any number from their least.
_ONE_CHUNK, _LEAST_CHUNKS = ("1f1b", "gpipe"), {"interleaved": 2, "looped_bfs": 2, "zb_interleaved": 1}


def _divisors(n: int, upto: int | None = None) -> tuple[int, ...]:
    return tuple(d for d in range(1, (n if upto is None else min(n, upto)) + 1) if n % d == 0)


def default_dims(models: Sequence[TransformerConfig], devices: int, devices_per_node: int, *,
                 tensor_across_nodes: bool = False) -> dict[str, tuple]:
    """The values each dimension takes unless the caller says otherwise.

    ``t``: the divisors of a node's devices (with ``tensor_across_nodes``, of ``devices``, up to the most
    attention heads of a stack); ``p``: the divisors of ``devices`` up to the body layers (and
    :data:`~sappkit.limits.MAX_STAGES`); ``v``: 1 to :data:`DEFAULT_CHUNKS` chunks, as long as each cell gets
    a body layer (``p v`` up to the body layers; each schedule takes those it runs); ``cp``: 1, 2, 4, 8, 16;
    ``ep``: the divisors of the routed experts (1 for a dense model); ``etp``: 1; ``b``: 1, 2, 4, 8; ZeRO 0 to
    3; sequence parallelism on. ``dp`` is what the devices leave (``devices / (t cp p)``).

    Examples
    --------
    >>> from sappkit import TransformerConfig
    >>> gpt = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048,
    ...                         vocab_size=32000)
    >>> dims = default_dims([gpt], 64, 8)
    >>> dims["tensor_parallel"], dims["pipeline_parallel"], dims["expert_parallel"]
    ((1, 2, 4, 8), (1, 2, 4, 8), (1,))
    """
    model = RuledModel.of(models)
    tensor = _divisors(devices, max(h for h, _ in model.heads)) if tensor_across_nodes else _divisors(devices_per_node)
    return {"tensor_parallel": tensor, "context_parallel": (1, 2, 4, 8, 16),
            "pipeline_parallel": _divisors(devices, min(model.layers, MAX_STAGES)),
            "virtual_stages": tuple(range(1, DEFAULT_CHUNKS + 1)), "data_parallel": _divisors(devices),
            "expert_parallel": _divisors(model.experts) if model.experts else (1,),
            "expert_tensor_parallel": (1,), "micro_batch_size": (1, 2, 4, 8), "zero": (0, 1, 2, 3),
            "sequence_parallel": (True,)}


def check_dims(dims, defaults: dict[str, tuple]) -> dict[str, tuple]:
    """``defaults`` with the caller's ``dims`` (a mapping of dimension to its values) put in, each checked."""
    if dims is None:
        return dict(defaults)
    if not isinstance(dims, Mapping):
        raise InputError(f"dims must be a mapping of dimension to its values, e.g. {{'tensor_parallel': [4, 8]}}; "
                         f"got {short(dims)}")
    chosen = dict(defaults)
    for key, values in dims.items():
        if key not in DIMENSIONS:
            raise InputError(f"dims has an unknown dimension {short(key)}; expected some of {', '.join(DIMENSIONS)}")
        if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence | set | frozenset | range):
            raise InputError(f"dims[{key!r}] must be a sequence of values; got {short(values)}")
        if not values:
            raise InputError(f"dims[{key!r}] must list at least one value; got an empty sequence")
        if key == "sequence_parallel":
            checked = [check_bool(f"dims[{key!r}]", value) for value in values]
        elif key == "zero":
            checked = [check_choice(f"dims[{key!r}]", check_int(f"dims[{key!r}]", value), (0, 1, 2, 3))
                       for value in values]
        else:
            checked = [check_int(f"dims[{key!r}]", value, minimum=1) for value in values]
        chosen[key] = tuple(sorted(set(checked)))
    return chosen


def check_schedules(schedules) -> tuple[str, ...]:
    """The schedules to search: :data:`SEARCHED_SCHEDULES` by default, else the caller's, each checked."""
    if schedules is None:
        return SEARCHED_SCHEDULES
    if isinstance(schedules, str):
        schedules = (schedules,)
    if not isinstance(schedules, Sequence) or not schedules:
        raise InputError(f"schedules must be a non-empty sequence of schedule names; got {short(schedules)}")
    return tuple(dict.fromkeys(check_choice("schedules", name, SCHEDULES) for name in schedules))


def _schedule_chunks(schedules: tuple[str, ...], chunks: tuple[int, ...]) -> list[tuple[str, int]]:
    """(schedule, v) pairs: the V schedules at 2, one-chunk schedules at 1, the others at the chunks they take."""
    pairs = []
    for name in schedules:
        if name in V_SHAPED:
            pairs += [(name, 2)] if 2 in chunks else []
        elif name in _ONE_CHUNK:
            pairs += [(name, 1)] if 1 in chunks else []
        else:
            pairs += [(name, v) for v in chunks if v >= _LEAST_CHUNKS.get(name, 1)]
    return pairs


def _layouts(devices: int, dims: dict[str, tuple]) -> pd.DataFrame:
    """Every (t, cp, p, dp) of the dims whose product is ``devices``."""
    rows = [(t, cp, p, devices // (t * cp * p)) for t in dims["tensor_parallel"] for cp in dims["context_parallel"]
            for p in dims["pipeline_parallel"] if devices % (t * cp * p) == 0]
    frame = pd.DataFrame(rows, columns=["tensor_parallel", "context_parallel", "pipeline_parallel",
                                        "data_parallel"])
    return frame[frame["data_parallel"].isin(dims["data_parallel"])]


def _grid(layouts: pd.DataFrame, dims: dict[str, tuple], pairs: list[tuple[str, int]]) -> pd.DataFrame:
    """The layouts crossed with every other dimension and schedule; no pipeline runs only 1f1b on one chunk."""
    others = [pd.DataFrame({key: dims[key]}) for key in ("expert_parallel", "expert_tensor_parallel",
                                                         "micro_batch_size", "zero", "sequence_parallel")]
    grid = layouts
    for other in others:
        grid = grid.merge(other, how="cross")
    schedules = pd.DataFrame(pairs, columns=["schedule", "virtual_stages"])
    piped = grid[grid["pipeline_parallel"] > 1].merge(schedules, how="cross")
    single = grid[grid["pipeline_parallel"] == 1].assign(schedule="1f1b", virtual_stages=1)
    frame = pd.concat([single, piped], ignore_index=True)
    return frame[[*DIMENSIONS, "schedule"]]


def enumerate_strategies(models: Sequence[TransformerConfig], *, devices: int, devices_per_node: int,
                         global_batch: int, dims=None, schedules=None,
                         tensor_across_nodes: bool = False) -> pd.DataFrame:
    """Every strategy of the dims on ``devices`` devices, each with the first rule it breaks (module docstring).

    Returns
    -------
    DataFrame
        One row per strategy: the :data:`DIMENSIONS`, ``schedule``, ``micro_batches`` (``m``), ``rule`` (None
        for a strategy a trainer accepts) and ``reason`` (the rule with the numbers, or "").

    Examples
    --------
    >>> from sappkit import TransformerConfig
    >>> gpt = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048,
    ...                         vocab_size=32000)
    >>> space = enumerate_strategies([gpt], devices=16, devices_per_node=8, global_batch=64,
    ...                              dims={"tensor_parallel": [8, 16], "zero": [1]})
    >>> space["rule"].value_counts(dropna=False).to_dict()
    {None: 68, 'node': 4}
    >>> space.loc[space["rule"] == "node", "reason"].iloc[0]
    'tensor_parallel=16 does not divide devices_per_node=8 (a tensor-parallel group stays inside a node)'
    """
    check_bool("tensor_across_nodes", tensor_across_nodes)
    model = RuledModel.of(models)
    space = check_dims(dims, default_dims(models, devices, devices_per_node, tensor_across_nodes=tensor_across_nodes))
    pairs = _schedule_chunks(check_schedules(schedules), space["virtual_stages"])
    frame = _grid(_layouts(devices, space), space, pairs)
    if dims is None or "virtual_stages" not in dims:  # the default chunk counts stop where cells run out of layers
        frame = frame[frame["pipeline_parallel"] * frame["virtual_stages"] <= model.layers]
    frame[MICRO_BATCHES] = global_batch // (frame["data_parallel"] * frame["micro_batch_size"])
    frame[RULE], frame[REASON] = None, ""
    apply_rules(frame, model, devices_per_node, global_batch, tensor_across_nodes)
    return frame.sort_values(list(DIMENSIONS) + ["schedule"], kind="stable").reset_index(drop=True)
