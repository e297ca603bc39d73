"""The strategies a trainer accepts: every combination of the searched degrees and settings, and the rule each other
breaks.

:func:`enumerate_strategies` lays out every way to run a model on exactly
``devices`` devices (``t · cp · dp · p = devices``) over the values of each
searched dimension (:func:`default_dims`, or the caller's), for every
schedule and its chunk counts, and checks each against a trainer's rules (:mod:`sappkit.strategy.legality`, the check
:func:`sappkit.evaluate_strategy` holds a strategy to as well). A strategy that breaks one keeps the first it
breaks (its name in ``rule``, the numbers in ``reason``) and is never ranked.

Strategies that differ only in a setting without effect are not laid out
twice (:func:`canonical_settings`): without a pipeline (``p = 1``) only
``1f1b`` with ``v = 1``; ``1f1b`` and ``gpipe`` run one chunk, the
interleaved schedules two or more (one chunk is ``1f1b`` or ``gpipe``
again), ``zb_interleaved`` one or more; without tensor parallelism (``t =
1``) sequence parallelism and its communication overlap change nothing
(written on and off); without context parallelism (``cp = 1``) the CP kind
changes nothing (written ``ring``); below ZeRO 3 nothing is resharded
(``reshard_after_forward`` written True, :class:`~sappkit.Strategy`'s
default, which it ignores there).

By default (the caller's ``dims`` lay out what they list) two dimensions
keep the values the trainers run, not every product:

- chunks: 1 to :data:`FREE_CHUNKS` on any pipeline whose cells keep a body
  layer each, and up to :data:`DEFAULT_CHUNKS` where the ``p · v`` cells
  hold equal layers: ``p · v`` divides the body layers, or the body layers
  and two (Megatron-LM's ``--num-layers-per-virtual-pipeline-stage``, with
  ``--account-for-embedding-in-pipeline-split`` and
  ``--account-for-loss-in-pipeline-split`` counting the embedding and the
  loss as a layer each: Llama 3.1 405B's 126 layers on 8 stages of 8
  chunks, NVIDIA's recipe; Nemotron-4 340B's 96 on 8 of 12);
- expert tensor parallelism: 1 (each expert whole on a rank, as DeepSeek-V3
  and Qwen3 train) or ``t`` (Megatron-Core's default,
  ``expert_tensor_parallel_size`` = ``tensor_model_parallel_size``, as
  Grok-1's recipe runs);
- micro-batch sizes: the powers of two up to :data:`MICRO_BATCH_CAP`, and
  a replica's whole batch in one micro-batch where it is up to the cap
  (torchtitan without a pipeline runs its ``local_batch_size`` so: its Llama
  3 8B recipe on 64 GPUs at 12).

What is not searched: the precision (the caller's ``dtype``); ``seqpipe``
(:class:`~sappkit.Strategy` has no slice count, and with one slice per
micro-batch it is the interleaved schedule); DeepSeek's bidirectional
DualPipe (``dualpipe``: two copies of the model in opposite directions,
which :func:`~sappkit.evaluate_strategy` prices on the even placement but
whose mirrored copies the balancer does not place and the search's time
bounds are not proven for; ``dualpipev``, its V-shaped one-copy variant, is
searched); the
overlaps the trainers run by default (gradient reduction, pipeline
transfers, weight gathers: on) and the MoE overlaps (off), which the caller
sets on a :class:`~sappkit.Strategy`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from ..._check import check_bool, check_choice, check_int, short
from ...errors import InputError
from ...layers import TransformerConfig
from ...layers.configs import CP_KINDS
from ...limits import MAX_CHUNKS, MAX_STAGES
from ...pipeline.schedules import SCHEDULES, V_SHAPED, check_one_copy
from ..legality import MICRO_BATCHES, PIPELINE_RULES, REASON, RULE, RULES, RuledModel, apply_rules

__all__ = ["DIMENSIONS", "SEARCHED_SCHEDULES", "RULES", "default_dims", "check_dims", "enumerate_strategies",
           "RULE", "REASON", "MICRO_BATCHES", "DEFAULT_CHUNKS", "FREE_CHUNKS", "MICRO_BATCH_CAP", "canonical_settings",
           "check_schedules"]

#: The searched dimensions, :class:`~sappkit.Strategy`'s field names, in the order frames show them.
DIMENSIONS = ("tensor_parallel", "pipeline_parallel", "virtual_stages", "data_parallel", "context_parallel",
              "expert_parallel", "expert_tensor_parallel", "micro_batch_size", "zero", "sequence_parallel",
              "reshard_after_forward", "tp_comm_overlap", "cp_kind")
#: The dimensions whose values are switches, and the one whose values are names (the rest are whole numbers).
_SWITCHES, _KINDS = ("sequence_parallel", "reshard_after_forward", "tp_comm_overlap"), {"cp_kind": CP_KINDS}
#: The schedules the search lays out by default (module docstring: not ``seqpipe``).
SEARCHED_SCHEDULES = tuple(name for name in SCHEDULES if name not in ("seqpipe", "dualpipe"))
#: The most chunks a stage runs by default: :data:`~sappkit.limits.MAX_CHUNKS`, as long as every cell keeps a body
#: layer (``p v`` up to the body layers); above :data:`FREE_CHUNKS` only the counts whose cells hold equal layers
#: (module docstring).
DEFAULT_CHUNKS = MAX_CHUNKS
#: Chunk counts laid out whatever the layers (each cell holding at least one).
FREE_CHUNKS = 4
#: The largest micro-batch size laid out by default: published runs use 1 to 16 sequences (Megatron-LM's SC'21
#: runs of 2,048 tokens 16; torchtitan's Llama 3 70B of 8,192 tokens 16, its 8B 12); larger ones only add activation
#: memory for a matmul already long enough to run at speed. ``dims`` asks for more.
MICRO_BATCH_CAP = 16
#: Schedules that run one chunk, two (the V), or any number from their least.
_ONE_CHUNK, _LEAST_CHUNKS = ("1f1b", "gpipe"), {"interleaved": 2, "looped_bfs": 2, "zb_interleaved": 1}


def _divisors(n: int, upto: int | None = None) -> tuple[int, ...]:
    return tuple(d for d in range(1, (n if upto is None else min(n, upto)) + 1) if n % d == 0)


def default_dims(models: Sequence[TransformerConfig], devices: int, devices_per_node: int, *,
                 tensor_across_nodes: bool = False, global_batch: int | None = None) -> dict[str, tuple]:
    """The values each dimension takes unless the caller says otherwise.

    ``t``: the divisors of a node's devices (with ``tensor_across_nodes``, of ``devices``, up to the most
    attention heads of a stack); ``p``: the divisors of ``devices`` up to the body layers (and
    :data:`~sappkit.limits.MAX_STAGES`); ``v``: 1 to :data:`DEFAULT_CHUNKS` chunks, as long as each cell gets
    a body layer (``p v`` up to the body layers; above :data:`FREE_CHUNKS`, equal cells, module docstring;
    each schedule takes those it runs); ``cp``: 1, 2, 4, 8, 16;
    ``ep``: the divisors of the routed experts (1 for a dense model); ``etp``: the values of ``t`` (1 for a
    dense model; laid out as 1 or ``t``, module docstring; the ``experts`` rule keeps those ``ep · etp``
    divides ``t · cp · dp`` by); ``b``: the divisors of
    ``global_batch`` up to :data:`MICRO_BATCH_CAP` (1, 2, 4, 8, 16 without one; laid out where a power of two or
    a replica's whole batch, module docstring; the ``batch`` rule keeps those that divide a replica's share);
    ZeRO 0 to 3, ZeRO 3 with and without ``reshard_after_forward``; sequence
    parallelism on and off, and with it tensor-parallel communication overlap off and on (``tp_comm_overlap``);
    every CP kind (``ring``, ``allgather``, ``a2a``; the ``heads`` rule keeps ``a2a`` where ``cp · t`` divides
    the heads). ``dp`` is what the devices leave (``devices / (t cp p)``). Settings without effect are laid out
    once (module docstring).

    Examples
    --------
    >>> from sappkit import TransformerConfig
    >>> gpt = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048,
    ...                         vocab_size=32000)
    >>> dims = default_dims([gpt], 64, 8, global_batch=96)
    >>> dims["tensor_parallel"], dims["pipeline_parallel"], dims["expert_parallel"], dims["micro_batch_size"]
    ((1, 2, 4, 8), (1, 2, 4, 8), (1,), (1, 2, 3, 4, 6, 8, 12, 16))
    """
    model = RuledModel.of(models)
    tensor = _divisors(devices, max(h for h, _ in model.heads)) if tensor_across_nodes else _divisors(devices_per_node)
    batch = _divisors(global_batch, MICRO_BATCH_CAP) if global_batch is not None else \
        tuple(b for b in _divisors(MICRO_BATCH_CAP) if b & (b - 1) == 0)
    return {"tensor_parallel": tensor, "context_parallel": (1, 2, 4, 8, 16),
            "pipeline_parallel": _divisors(devices, min(model.layers, MAX_STAGES)),
            "virtual_stages": tuple(range(1, DEFAULT_CHUNKS + 1)), "data_parallel": _divisors(devices),
            "expert_parallel": _divisors(model.experts) if model.experts else (1,),
            "expert_tensor_parallel": tensor if model.experts else (1,), "micro_batch_size": batch,
            "zero": (0, 1, 2, 3), "sequence_parallel": (False, True), "reshard_after_forward": (False, True),
            "tp_comm_overlap": (False, True), "cp_kind": CP_KINDS}


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
        if key in _SWITCHES:
            checked = [check_bool(f"dims[{key!r}]", value) for value in values]
        elif key in _KINDS:
            checked = [check_choice(f"dims[{key!r}]", value, _KINDS[key]) for value in values]
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
    for name in schedules:
        check_one_copy(name, "the strategy search")
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


def canonical_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (strategy rows) with each setting that has no effect written as the one value the search lays out
    (module docstring), rows that become alike kept once."""
    frame = frame.copy()
    frame.loc[frame["tensor_parallel"] == 1, ["sequence_parallel", "tp_comm_overlap"]] = [True, False]
    frame.loc[frame["context_parallel"] == 1, "cp_kind"] = "ring"
    frame.loc[frame["zero"] < 3, "reshard_after_forward"] = True
    return frame.drop_duplicates(ignore_index=True)


def _settings(layouts: pd.DataFrame, dims: dict[str, tuple], defaulted: set[str], global_batch: int) -> pd.DataFrame:
    """The layouts crossed with every other dimension but the chunks, settings without effect laid out once
    (:func:`canonical_settings`, on the few combinations of the degrees they depend on before the rest); of the
    ``defaulted`` dimensions, ``etp`` 1 or ``t``, ``b`` a power of two or the whole replica batch (module
    docstring) and ``tp_comm_overlap`` only with sequence parallelism (the ``sequence`` rule's)."""
    settings = pd.DataFrame({"tensor_parallel": dims["tensor_parallel"]})
    for key in ("context_parallel", "zero", *_SWITCHES, *_KINDS):
        settings = settings.merge(pd.DataFrame({key: dims[key]}), how="cross")
    grid = layouts.merge(canonical_settings(settings), on=["tensor_parallel", "context_parallel"])
    for key in ("expert_parallel", "expert_tensor_parallel", "micro_batch_size"):
        grid = grid.merge(pd.DataFrame({key: dims[key]}), how="cross")
    if "tp_comm_overlap" in defaulted:  # the overlap needs sequence parallelism (the sequence rule)
        grid = grid[grid["sequence_parallel"] | ~grid["tp_comm_overlap"]]
    if "expert_tensor_parallel" in defaulted:
        etp = grid["expert_tensor_parallel"]
        grid = grid[(etp == 1) | (etp == grid["tensor_parallel"])]
    if "micro_batch_size" in defaulted:
        b = grid["micro_batch_size"]
        grid = grid[(b & (b - 1) == 0) | (b * grid["data_parallel"] == global_batch)]
    return grid.reset_index(drop=True)


def _pipelines(grid: pd.DataFrame, pairs: list[tuple[str, int]], layers: int | None) -> pd.DataFrame:
    """The rows crossed with every (schedule, chunks) pair, those the layers allow where ``layers`` is given (the
    default chunk counts, module docstring); no pipeline runs only 1f1b on one chunk. A row a rule already rejects
    breaks it on every pipeline: it is laid out once, on the first pair."""
    schedules = pd.DataFrame(pairs, columns=["schedule", "virtual_stages"])
    rejected, accepted = grid[grid[RULE].notna()], grid[grid[RULE].isna()]
    piped = accepted[accepted["pipeline_parallel"] > 1].merge(schedules, how="cross")
    if layers is not None:
        cells = piped["pipeline_parallel"] * piped["virtual_stages"]
        equal = (layers % cells == 0) | ((layers + 2) % cells == 0)
        piped = piped[(cells <= layers) & ((piped["virtual_stages"] <= FREE_CHUNKS) | equal)]
    first = pd.DataFrame(pairs[:1], columns=["schedule", "virtual_stages"])
    once = pd.concat([rejected[rejected["pipeline_parallel"] > 1].merge(first, how="cross"),
                      grid[grid["pipeline_parallel"] == 1].assign(schedule="1f1b", virtual_stages=1)])
    return pd.concat([once, piped], ignore_index=True)


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
    {None: 285, 'node': 15}
    >>> space.loc[space["rule"] == "node", "reason"].iloc[0]
    'tensor_parallel=16 does not divide devices_per_node=8 (a tensor-parallel group stays inside a node)'
    """
    check_bool("tensor_across_nodes", tensor_across_nodes)
    model = RuledModel.of(models)
    space = check_dims(dims, default_dims(models, devices, devices_per_node, tensor_across_nodes=tensor_across_nodes,
                                          global_batch=global_batch))
    pairs = _schedule_chunks(check_schedules(schedules), space["virtual_stages"])
    grid = _settings(_layouts(devices, space), space, set(DIMENSIONS) - set(dims or ()), global_batch)
    grid[MICRO_BATCHES] = global_batch // (grid["data_parallel"] * grid["micro_batch_size"])
    grid[RULE], grid[REASON] = None, ""
    # the rules of the layout first, once per layout; the pipeline's on what they leave
    layout_rules = tuple(rule for rule in RULES if rule not in PIPELINE_RULES)
    apply_rules(grid, model, devices_per_node, global_batch, tensor_across_nodes, rules=layout_rules)
    # the default chunk counts stop where cells run out of layers
    frame = _pipelines(grid, pairs, None if dims is not None and "virtual_stages" in dims else model.layers)
    apply_rules(frame, model, devices_per_node, global_batch, tensor_across_nodes, rules=PIPELINE_RULES)
    frame = frame[[*DIMENSIONS, "schedule", MICRO_BATCHES, RULE, REASON]]
    return frame.sort_values(list(DIMENSIONS) + ["schedule"], kind="stable").reset_index(drop=True)
