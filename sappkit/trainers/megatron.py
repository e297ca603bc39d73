"""Megatron-LM's arguments both ways: a plan or a strategy as flags, a launch script as a strategy and a plan.

Export (:func:`megatron_args`) writes ``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--context-parallel-size``,
``--expert-model-parallel-size``, ``--micro-batch-size``,
``--global-batch-size``, the layout (nothing for an even split,
``--num-virtual-stages-per-pipeline-rank`` for more chunks,
``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
where only the first and last stages differ, else
``--pipeline-model-parallel-layout``) and the recompute flags of the plan's
policy (:mod:`sappkit.balancer.grammar`): ``--recompute-granularity``,
``--recompute-method``, ``--recompute-num-layers``, ``--recompute-modules``;
and the kernels (:func:`.megatron_flags.kernel_args`): ``--tp-comm-overlap``,
``--cp-comm-type`` and ``--attention-backend``, which import reads back into
the strategy and :attr:`TrainerConfig.attention`.

Import (:func:`read_megatron`) builds each cell's layers as Megatron does: the
layout string (:mod:`.megatron_layout`), else the first/last counts with the
middle stages splitting the rest, else ``--num-layers`` (plus the embedding
and loss with ``--account-for-*-in-pipeline-split``) divided over stages and
chunks, each division an integer one; findings say where that drops or adds
layers, or the micro-batches break the interleaved schedule's group rule.

Sources followed: Megatron-LM ``megatron/training/arguments.py``
(``validate_args``, the pipeline arguments), ``megatron/core/transformer/
transformer_block.py`` (``get_num_layers_to_build``),
``megatron/core/transformer/transformer_config.py`` (recompute fields and
their checks), ``megatron/core/pipeline_parallel/schedules.py`` (the
micro-batch group check of the interleaved schedule), commit
``d98e8a64ddf3`` (2026-08-22).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .._check import check_int
from ..balancer.grammar import Policy, TRAINER_SCHEDULES, matching_policy, policy_options
from ..errors import InputError
from ..limits import MAX_DEVICES, MAX_MICRO_BATCHES
from ..strategy import Strategy
from .config import Finding, Pipeline, TrainerConfig, pipeline_of, strategy_of
from .megatron_layout import format_layout, parse_layout
from .megatron_flags import MEGATRON_FLAGS, MEGATRON_FP8_RECIPES, attention_of, cp_kind_of, fp8_recipe_of, \
    kernel_args, read_megatron_flags
from .shell import shell_tokens

__all__ = ["MegatronArgs", "megatron_args", "read_megatron", "MEGATRON_FLAGS"]

#: sappkit's FP8 recipes as Megatron-LM's ``--fp8-recipe`` names them (``tensorwise``: per-tensor current scaling).
_WHAT = "Megatron-LM arguments"


@dataclass(frozen=True)
class MegatronArgs:
    """Megatron-LM arguments, as a list and as a shell line, with what they leave to the user.

    Examples
    --------
    >>> args = MegatronArgs(("--pipeline-model-parallel-size", "4", "--sequence-parallel"))
    >>> args.line()
    '--pipeline-model-parallel-size 4 --sequence-parallel'
    """

    args: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def line(self) -> str:
        """The arguments on one shell line (quoted where a shell needs it)."""
        return " ".join(shlex.quote(arg) for arg in self.args)

    def shell(self) -> str:
        """One flag (and its value) per line, continued with backslashes, ready for a launch script."""
        lines, current = [], []
        for arg in self.args:
            if arg.startswith("--") and current:
                lines.append(" ".join(current))
                current = []
            current.append(shlex.quote(arg))
        if current:
            lines.append(" ".join(current))
        return " \\\n".join(lines)


def megatron_args(source, *, strategy: Strategy | None = None, global_batch: int | None = None,
                  num_layers: int | None = None, mtp_layers: int = 0, attention: str | None = None) -> MegatronArgs:
    """A plan, a recompute choice or a strategy as Megatron-LM arguments.

    Parameters
    ----------
    source : Plan, RecomputeChoice or Strategy
        What to export. A plan or a choice gives the pipeline, its layout and
        recompute; a strategy the degrees (every layer on an even split).
    strategy : Strategy, optional
        The degrees to write with a plan (its stages, chunks and schedule
        must be the plan's).
    global_batch : int, optional
        Samples per step; default ``m · dp · b`` where the degrees are known.
    num_layers : int, optional
        ``--num-layers`` for a strategy alone (a plan knows its layers).
    mtp_layers : int
        Multi-token-prediction layers, placed before the loss on the last stage.
    attention : str, optional
        The attention kernel (:attr:`~sappkit.layers.KernelConfig.attention`: ``cudnn``, ``fa2`` or ``paper``)
        as ``--attention-backend``; None writes none (Megatron-LM's ``auto``).

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit import balance
    >>> rows = [dict(kind="block", role="body", count=6, param_mb=100, option=o, forward_time=1,
    ...              backward_time=b, activation_mb=a) for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> plan = balance(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000)
    >>> megatron_args(plan).line()
    '--num-layers 6 --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 4'
    """
    mtp = check_int("mtp_layers", mtp_layers, minimum=0)
    if isinstance(source, Strategy):
        return _strategy_args(source, global_batch, num_layers, mtp, attention)
    pipe = pipeline_of(source)
    if pipe.schedule not in TRAINER_SCHEDULES["megatron"]:
        raise InputError(f"Megatron-LM runs the {' and '.join(TRAINER_SCHEDULES['megatron'])} schedules; this "
                         f"plan runs {pipe.schedule!r}")
    if strategy is not None and (strategy.pipeline_parallel, strategy.virtual_stages, strategy.schedule) != (
            pipe.stages, pipe.chunks, pipe.schedule):
        raise InputError(f"strategy runs p={strategy.pipeline_parallel}, v={strategy.virtual_stages}, "
                         f"{strategy.schedule!r} but the plan p={pipe.stages}, v={pipe.chunks}, {pipe.schedule!r}")
    notes = []
    if pipe.less_memory:
        notes.append("Megatron-LM's interleaved schedule has no less-memory variant: it holds more than planned")
    if not pipe.fits:
        notes.append(f"the plan does not fit memory_mb={pipe.memory_mb:g}")
    args = ["--num-layers", str(sum(map(sum, pipe.layer_counts))), "--pipeline-model-parallel-size", str(pipe.stages)]
    args += _layout_args(pipe, mtp)
    args += _recompute_args(pipe, notes)
    args += _degree_args(strategy, pipe.micro_batches, global_batch, notes, attention)
    return MegatronArgs(tuple(args), tuple(notes))


def _strategy_args(strategy: Strategy, global_batch, num_layers, mtp, attention) -> MegatronArgs:
    if strategy.schedule not in TRAINER_SCHEDULES["megatron"]:
        raise InputError(f"Megatron-LM runs the {' and '.join(TRAINER_SCHEDULES['megatron'])} schedules; the "
                         f"strategy runs {strategy.schedule!r}")
    notes = ["no plan: Megatron splits the layers evenly over the stages and chunks"]
    args = [] if num_layers is None else ["--num-layers", str(check_int("num_layers", num_layers, minimum=1))]
    args += ["--pipeline-model-parallel-size", str(strategy.pipeline_parallel)]
    if strategy.virtual_stages > 1:
        args += ["--num-virtual-stages-per-pipeline-rank", str(strategy.virtual_stages)]
    if mtp:
        args += ["--mtp-num-layers", str(mtp)]
    micro = None if global_batch is None else strategy.micro_batches(global_batch)
    args += _degree_args(strategy, micro, global_batch, notes, attention)
    return MegatronArgs(tuple(args), tuple(notes))


def _layout_args(pipe: Pipeline, mtp: int) -> list[str]:
    """The fewest flags that make Megatron build the plan's cells."""
    counts = pipe.layer_counts  # [chunk][stage]
    v, p = pipe.chunks, pipe.stages
    per_stage = [sum(counts[c][s] for c in range(v)) for s in range(p)]
    equal_chunks = all(len({counts[c][s] for c in range(v)}) == 1 for s in range(p))
    args = ["--num-virtual-stages-per-pipeline-rank", str(v)] if v > 1 else []
    if mtp == 0 and equal_chunks and len(set(per_stage)) == 1:
        return args
    middle = set(per_stage[1:-1])
    if mtp == 0 and equal_chunks and len(middle) <= 1 and min(per_stage[0], per_stage[-1]) > 0:
        if per_stage[0] not in middle:
            args += ["--decoder-first-pipeline-num-layers", str(per_stage[0])]
        if per_stage[-1] not in middle:
            args += ["--decoder-last-pipeline-num-layers", str(per_stage[-1])]
        return args
    stages = [["t" * counts[c][s] for s in range(p)] for c in range(v)]
    stages[0][0] = "E" + stages[0][0]
    stages[-1][-1] += "m" * mtp + "L"
    layout = ["--pipeline-model-parallel-layout", format_layout([cell for row in stages for cell in row])]
    return layout + (["--mtp-num-layers", str(mtp)] if mtp else [])


def _recompute_args(pipe: Pipeline, notes: list[str]) -> list[str]:
    policy = matching_policy("megatron", pipe.schedule, pipe.layer_counts, pipe.options)
    if policy is None:
        notes.append("recompute not set: Megatron-LM runs one policy for the model (one option everywhere, or the "
                     f"first N layers of every chunk full) and this plan runs {sorted(set(pipe.options))} otherwise; "
                     "plan with balance(..., trainer='megatron')")
        return []
    if policy.family == "block":
        return ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers",
                str(policy.n)]
    return {"none": [], "selective": ["--recompute-granularity", "selective", "--recompute-modules", "core_attn"],
            "full": ["--recompute-granularity", "full", "--recompute-method", "uniform",
                     "--recompute-num-layers", "1"]}[policy.option]


def _degree_args(strategy: Strategy | None, micro_batches, global_batch, notes: list[str], attention) -> list[str]:
    if strategy is None:
        if global_batch is None:
            global_batch = micro_batches
            notes.append(f"--global-batch-size {micro_batches} runs {micro_batches} micro-batches on one "
                         "data-parallel rank: multiply it by the data-parallel size (no strategy was given)")
        return ["--micro-batch-size", "1", "--global-batch-size", str(global_batch)] + kernel_args(
            False, "ring", attention)
    s = strategy
    out = []
    for flag, value in (("--tensor-model-parallel-size", s.tensor_parallel),
                        ("--context-parallel-size", s.context_parallel),
                        ("--expert-model-parallel-size", s.expert_parallel),
                        ("--expert-tensor-parallel-size", s.expert_tensor_parallel)):
        out += [flag, str(value)] if value != 1 else []
    batch = global_batch if global_batch is not None else (
        None if micro_batches is None else micro_batches * s.data_parallel * s.micro_batch_size)
    out += ["--micro-batch-size", str(s.micro_batch_size)] + ([] if batch is None else
                                                             ["--global-batch-size", str(batch)])
    out += ["--sequence-parallel"] if s.sequence_parallel and s.tensor_parallel > 1 else []
    out += ["--use-distributed-optimizer"] if s.zero >= 1 else []
    out += [flag for flag, on in (("--overlap-moe-expert-parallel-comm", s.moe_a2a_overlap),
                                  ("--moe-shared-expert-overlap", s.moe_shared_expert_overlap)) if on]
    fp8 = ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", MEGATRON_FP8_RECIPES.get(s.fp8_recipe)]
    out += {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp32": [], "fp8": fp8}[s.dtype]
    out += kernel_args(s.tp_comm_overlap, s.cp_kind, attention)
    if s.zero >= 2:
        notes.append(f"ZeRO stage {s.zero}: Megatron's distributed optimizer shards optimizer state and gradients; "
                     "for weights too use Megatron FSDP (--use-megatron-fsdp)")
    return out


# ---------------------------------------------------------------------------------------------------- import


def read_megatron(source, *, world_size: int | None = None, origin: str = "arguments") -> TrainerConfig:
    """A Megatron-LM argument list or launch script as a :class:`TrainerConfig`.

    ``source`` is a list of arguments or a script's text (:mod:`.shell`).
    The data-parallel size is ``world_size / (t · p · cp)``: give
    ``world_size``, or let the script's ``torchrun --nproc-per-node ...
    --nnodes ...`` give it; without either it is 1 (said in the notes).
    """
    flags = read_megatron_flags(shell_tokens(source) if isinstance(source, str) else list(source))
    if "--num-layers" not in flags:
        raise InputError(f"{_WHAT}: --num-layers is missing (sappkit needs the decoder layer count)")
    p = flags.get("--pipeline-model-parallel-size", 1)
    t, cp = flags.get("--tensor-model-parallel-size", 1), flags.get("--context-parallel-size", 1)
    notes, findings = [], []
    layers = flags["--num-layers"]
    counts, v, mtp_cells = _built_counts(flags, p, layers, findings)
    dp, world_note = _data_parallel(flags, world_size, t * p * cp)
    notes += [world_note] if world_note else []
    b = flags.get("--micro-batch-size", 1)
    batch = flags.get("--global-batch-size", dp * b)
    if batch % (dp * b):
        raise InputError(f"{_WHAT}: --global-batch-size {batch} is not a multiple of data-parallel size x "
                         f"--micro-batch-size = {dp} x {b}")
    m = check_int(f"{_WHAT}: micro-batches (--global-batch-size / (dp x b))", batch // (dp * b),
                  maximum=MAX_MICRO_BATCHES)
    schedule = "interleaved" if v > 1 else "1f1b"
    strategy = strategy_of(_WHAT, tensor_parallel=t, pipeline_parallel=p, virtual_stages=v, data_parallel=dp,
                        context_parallel=cp, expert_parallel=flags.get("--expert-model-parallel-size", 1),
                        expert_tensor_parallel=flags.get("--expert-tensor-parallel-size", 1), micro_batch_size=b,
                        schedule=schedule, zero=1 if flags.get("--use-distributed-optimizer") else 0,
                        sequence_parallel=bool(flags.get("--sequence-parallel")),
                        dtype="fp8" if flags.get("--fp8-format") else "fp16" if flags.get("--fp16") else "bf16"
                        if flags.get("--bf16") else "fp32", fp8_recipe=fp8_recipe_of(flags),
                        moe_a2a_overlap=bool(flags.get("--overlap-moe-expert-parallel-comm")),
                        moe_shared_expert_overlap=bool(flags.get("--moe-shared-expert-overlap")),
                        tp_comm_overlap=bool(flags.get("--tp-comm-overlap")), cp_kind=cp_kind_of(flags))
    options = policy_options(_recompute_policy(flags, notes), schedule, counts)
    if v > 1:
        findings += _group_findings(flags, p, m)
    findings += _mtp_findings(mtp_cells)
    return TrainerConfig(trainer="megatron", strategy=strategy, layer_counts=tuple(map(tuple, counts)),
                         options=tuple(options), num_layers=layers, micro_batches=m, global_batch=batch,
                         mtp_layers=flags.get("--mtp-num-layers", 0), findings=tuple(findings), settings=flags,
                         notes=tuple(notes), source=origin, attention=attention_of(flags))


def _data_parallel(flags, world_size, model_parallel: int) -> tuple[int, str]:
    if world_size is None and "--nproc-per-node" in flags:
        world_size = flags["--nproc-per-node"] * flags.get("--nnodes", 1)
    if world_size is None:
        return 1, "no world size given: data-parallel size taken as 1 (pass world_size=)"
    world = check_int("world_size", world_size, minimum=1, maximum=MAX_DEVICES)
    if world % model_parallel:
        raise InputError(f"world_size {world} is not a multiple of t x p x cp = {model_parallel}")
    return world // model_parallel, ""


def _built_counts(flags, p: int, layers: int, findings: list[Finding]):
    """``([chunk][stage] layers Megatron builds, chunks, MTP cells)`` by Megatron's rules."""
    layout = flags.get("--pipeline-model-parallel-layout")
    if layout is not None:
        parsed = parse_layout(layout)
        rows = parsed.cells(p)
        problems = parsed.problems(p, layers, flags.get("--mtp-num-layers", 0))
        findings += [Finding("layout_invalid", "error", f"Megatron refuses the layout: {problem}",
                             "write the layout sappkit exports (balance --export megatron)") for problem in problems]
        counts = parsed.decoder_counts(p)
        mtp = [(c, s, row[s]) for c, row in enumerate(rows) for s in range(p) if "m" in row[s]]
        return counts, len(rows), mtp
    v = _chunks(flags, p, layers)
    first, last = flags.get("--decoder-first-pipeline-num-layers"), flags.get("--decoder-last-pipeline-num-layers")
    extra = int(bool(flags.get("--account-for-embedding-in-pipeline-split"))) + int(
        bool(flags.get("--account-for-loss-in-pipeline-split")))
    if first is not None or last is not None:
        middle_stages = p - (first is not None) - (last is not None)
        rest = layers - (first or 0) - (last or 0)
        middle = rest // middle_stages if middle_stages > 0 else 0
        per_stage = [middle] * p
        if first is not None:
            per_stage[0] = first
        if last is not None:
            per_stage[-1] = last
        why = f"the {middle_stages} middle stages take {rest} // {middle_stages} = {middle}"
    else:
        per_stage = [(layers + extra) // p] * p
        total = f"({layers} + {extra})" if extra else str(layers)
        why = f"{total} // {p} = {(layers + extra) // p} per stage"
    n_chunk = flags.get("--num-layers-per-virtual-pipeline-stage")
    counts = [[(n_chunk if n_chunk else per_stage[s] // v) for s in range(p)] for _ in range(v)]
    if n_chunk:
        why += f", in {v} chunks of --num-layers-per-virtual-pipeline-stage {n_chunk}"
    elif v > 1 and any(per_stage[s] % v for s in range(p)):
        why += f", then // {v} chunks"
    if flags.get("--account-for-embedding-in-pipeline-split"):
        counts[0][0] -= 1
    if flags.get("--account-for-loss-in-pipeline-split"):
        counts[-1][-1] -= 1
    built = sum(map(sum, counts))
    if built != layers:
        name, verb = ("layers_dropped", "drops") if built < layers else ("layers_added", "adds")
        findings.append(Finding(name, "error", f"Megatron builds {built} of the {layers} layers ({why}): it "
                                               f"{verb} {abs(built - layers)}; today's Megatron-LM refuses the "
                                               "split, older releases trained the wrong model",
                                "state every stage: --pipeline-model-parallel-layout (sappkit balance "
                                "--export megatron writes it) or --decoder-first/last-pipeline-num-layers"))
    return counts, v, []


def _chunks(flags, p: int, layers: int) -> int:
    if "--num-virtual-stages-per-pipeline-rank" in flags:
        return flags["--num-virtual-stages-per-pipeline-rank"]
    if "--num-layers-per-virtual-pipeline-stage" in flags:
        return max(1, (layers // p) // flags["--num-layers-per-virtual-pipeline-stage"])
    return 1


def _recompute_policy(flags, notes: list[str]) -> Policy:
    granularity = flags.get("--recompute-granularity")
    if granularity is None and flags.get("--recompute-activations"):
        granularity = "selective"
    if granularity is None:
        return Policy("uniform", "none")
    if granularity == "selective":
        modules = flags.get("--recompute-modules", ["core_attn"])
        if modules != ["core_attn"]:
            notes.append(f"--recompute-modules {' '.join(modules)}: sappkit prices the table's 'selective' option "
                         "(the attention core)")
        return Policy("uniform", "selective")
    if granularity != "full":
        raise InputError(f"{_WHAT}: --recompute-granularity must be 'full' or 'selective'; got {granularity!r}")
    method, n = flags.get("--recompute-method"), flags.get("--recompute-num-layers")
    if method not in ("uniform", "block") or n is None:
        raise InputError(f"{_WHAT}: --recompute-granularity full needs --recompute-method uniform|block and "
                         f"--recompute-num-layers; got {method!r} and {n!r}")
    if method == "block":
        return Policy("block", n=n)
    if n > 1:
        notes.append(f"--recompute-method uniform --recompute-num-layers {n} checkpoints groups of {n} layers; "
                     "sappkit prices every layer fully recomputed (it keeps a little more)")
    return Policy("uniform", "full")


def _group_findings(flags, p: int, m: int) -> list[Finding]:
    """The interleaved schedule's micro-batch group rule (``schedules.py``)."""
    group = flags.get("--microbatch-group-size-per-virtual-pipeline-stage", p)
    fix = (f"run at least {p} micro-batches, a multiple of {group} (--global-batch-size = micro-batches x dp x "
           "--micro-batch-size)" if m < p else
           f"run a multiple of {group} micro-batches (change --global-batch-size), or set "
           f"--microbatch-group-size-per-virtual-pipeline-stage to a divisor of {m} in [{p}, {m}]")
    if group < p or group > m:
        return [Finding("microbatches_unsupported", "error", f"the interleaved schedule runs micro-batches in "
                                                            f"groups of {group}, which must lie in [p, m] = "
                                                            f"[{p}, {m}]: Megatron refuses it", fix)]
    last = m % group
    if 0 < last < p:
        return [Finding("microbatches_unsupported", "error", f"{m} micro-batches in groups of {group} leave a last "
                                                            f"group of {last} < p = {p}: Megatron refuses it", fix)]
    return []


def _mtp_findings(mtp_cells) -> list[Finding]:
    found = []
    for chunk, stage, layers in mtp_cells:
        if "t" not in layers:
            found.append(Finding("mtp_only_stage", "warning",
                                 f"stage {stage} chunk {chunk} holds only MTP layers ({layers}): a whole "
                                 "pipeline stage for what costs about one decoder layer (sappkit prices MTP "
                                 "layers with the LM head, on the last stage)",
                                 "put the MTP layers with the last decoder layers (e.g. '...tttmL'), and take "
                                 "one stage fewer or give the others its share"))
    return found
