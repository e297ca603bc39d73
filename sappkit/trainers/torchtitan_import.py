"""torchtitan configs read back: the release's TOML job config and the main branch's Python recipes.

A TOML job config (v0.2.x) is read whole. A Python recipe of the main branch
is read without running it: every literal assigned to
``config.parallelism.<field>`` or ``config.training.<field>``, or passed to
``ParallelismConfig(...)`` / ``TrainingConfig(...)``, and the checkpointing
policy assigned to ``config.activation_checkpoint`` (``FullAC.Config()``,
``SelectiveAC.Config()``, ``MemoryBudgetAC.Config()``, ``None``). What a
recipe inherits from another recipe it calls is not read: those fields take
the dataclass defaults.

The stages come from ``module_fqns_per_model_part`` when it is given (a
layer named in no part is deleted by torchtitan's split: the model trains
without it), else from torchtitan's own split of ``n`` layers into stages
(``generate_llm_fqn_per_model_part``: the embedding and the output count as
``pipeline_parallel_first_stage_less_layers`` / ``..._last_stage_less_layers``
layers, ``n + weights`` divided with the remainder on the first stages),
``pipeline_parallel_layers_per_stage`` setting the stage count.

Sources followed: torchtitan v0.2.2 ``torchtitan/config/job_config.py``
and ``torchtitan/distributed/pipeline_parallel.py`` (``pipeline_llm``,
``build_pipeline_schedule``, ``generate_llm_fqn_per_model_part``,
``pipeline_module_split``), commit ``73a0e6979dd1``; the main branch's
``torchtitan/config/configs.py`` and ``torchtitan_recipes/tests/features.py``,
commit ``b5bcd76c66d0``; PyTorch's ``torch/distributed/pipelining/
schedules.py`` (the micro-batch checks of each schedule class).
"""

from __future__ import annotations

import ast
import math
import re

from .._check import check_int, short
from ..limits import (MAX_CHUNKS, MAX_GLOBAL_BATCH, MAX_LAYERS, MAX_MICRO_BATCHES, MAX_MICROBATCH_SIZE,
                      MAX_NESTING, MAX_SEQ_LENGTH, MAX_STAGES)
from .._files import as_path, load_toml, read_text
from ..errors import InputError
from ..layers.op_sac import OP_SAC
from ..balancer.grammar import Policy, policy_options
from .config import Finding, TrainerConfig, flag, section, strategy_of, whole
from .torchtitan import TORCHTITAN_SCHEDULES
from .torchtitan_settings import compiled, fsdp_and_async_tp

__all__ = ["read_torchtitan", "python_settings", "split_layers"]

#: torchtitan's schedule names (lower case, as PyTorch matches them) -> sappkit's.
_SCHEDULES = {name.lower(): schedule for schedule, name in TORCHTITAN_SCHEDULES.items() if schedule != "dualpipev"}
#: PyTorch schedule classes that run one stage per rank (``PipelineScheduleSingle``).
_SINGLE = ("1f1b", "gpipe")
_AC_POLICIES = {"FullAC": "full", "SelectiveAC": "selective", "MemoryBudgetAC": "memory_budget"}
_LAYER = re.compile(r"^layers\.(\d+)$")
_WHAT = "torchtitan config"


def read_torchtitan(source, *, num_layers: int | None = None, world_size: int | None = None) -> TrainerConfig:
    """A torchtitan config (a ``.toml`` or ``.py`` path, or its settings dict) as a :class:`TrainerConfig`.

    ``num_layers`` is the model's layer count (torchtitan's config names a
    model flavor, not its depth); it is needed where the config lists no
    ``module_fqns_per_model_part``. ``world_size`` resolves
    ``data_parallel_shard_degree = -1``.
    """
    settings, origin = _settings(source)
    par, training = section(_WHAT, settings, "parallelism"), section(_WHAT, settings, "training")
    p = whole(_WHAT, par, "pipeline_parallel_degree", 1, maximum=MAX_STAGES)
    name = par.get("pipeline_parallel_schedule", "1F1B")
    schedule = _SCHEDULES.get(name.lower()) if isinstance(name, str) else None
    if schedule is None:
        raise InputError(f"{_WHAT}: pipeline_parallel_schedule {short(name)} is not one torchtitan runs (it knows "
                         f"{', '.join(sorted(set(TORCHTITAN_SCHEDULES.values())))})")
    notes, findings = [], []
    m, b = _micro_batches(par, training, notes, findings)
    parts = par.get("module_fqns_per_model_part")
    if parts is None:
        parts = _generated_parts(par, p, schedule, num_layers)
    counts, declared = _cells(parts, p, schedule, num_layers, findings)
    v = len(counts)
    if v > 1 and schedule == "1f1b":
        schedule = "interleaved"  # torchtitan picks Interleaved1F1B for 1F1B with more stages a rank
    findings += _schedule_findings(schedule, p, v, m)
    dp, zero = _data_parallel(par, world_size, p, notes)
    strategy = strategy_of(_WHAT, tensor_parallel=whole(_WHAT, par, "tensor_parallel_degree", 1), pipeline_parallel=p,
                        virtual_stages=v, data_parallel=dp,
                        context_parallel=whole(_WHAT, par, "context_parallel_degree", 1),
                        expert_parallel=whole(_WHAT, par, "expert_parallel_degree", 1),
                        expert_tensor_parallel=whole(_WHAT, par, "expert_tensor_parallel_degree", 1), micro_batch_size=b,
                        schedule=schedule, zero=zero,
                        sequence_parallel=flag(_WHAT, par, "enable_sequence_parallel", True),
                        **fsdp_and_async_tp(par, p, whole(_WHAT, par, "tensor_parallel_degree", 1)))
    options = policy_options(_checkpoint_policy(section(_WHAT, settings, "activation_checkpoint"), notes), schedule,
                             counts)
    batch = whole(_WHAT, training, "global_batch_size", -1, minimum=-1, maximum=MAX_GLOBAL_BATCH)
    return TrainerConfig(trainer="torchtitan", strategy=strategy, layer_counts=tuple(map(tuple, counts)),
                         options=tuple(options), num_layers=declared, micro_batches=m,
                         global_batch=batch if batch > 0 else None, findings=tuple(findings), settings=settings,
                         notes=tuple(notes), source=origin, fused_elementwise=compiled(settings, training))


def _settings(source) -> tuple[dict, str]:
    if isinstance(source, dict):
        return source, "settings"
    settings = getattr(source, "settings", None)
    if isinstance(settings, dict):
        return settings, "TorchtitanConfig"
    path = as_path("path", source)
    if path.suffix == ".toml":
        return load_toml(path, "a torchtitan job config (TOML)"), str(path)
    if path.suffix == ".py":  # the main branch's default policy is SelectiveAC (op level)
        settings = python_settings(read_text(path, "a torchtitan recipe (Python)"))
        settings.setdefault("activation_checkpoint", {"mode": "selective", "selective_ac_option": "op"})
        return settings, str(path)
    raise InputError(f"{path}: a torchtitan config is a .toml job config or a .py recipe; got {path.suffix!r}")


def python_settings(text: str) -> dict:
    """The literal settings a torchtitan Python recipe makes, as the TOML sections would hold them.

    Examples
    --------
    >>> python_settings('''
    ... def run():
    ...     config = base()
    ...     config.parallelism.pipeline_parallel_degree = 4
    ...     config.parallelism.num_pp_microbatches = 8
    ...     config.activation_checkpoint = FullAC.Config()
    ...     return config''')
    {'parallelism': {'pipeline_parallel_degree': 4, 'num_pp_microbatches': 8}, 'activation_checkpoint': {'mode': 'full'}}
    """
    tree = _parsed(text.removeprefix("\ufeff"))
    found: dict[str, dict] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                _assignment(target, node.value, found)
        elif isinstance(node, ast.Call):
            section = {"ParallelismConfig": "parallelism", "TrainingConfig": "training"}.get(_name(node.func))
            if section:
                for keyword in node.keywords:
                    if keyword.arg is not None:
                        found.setdefault(section, {})[keyword.arg] = _literal(keyword.value, keyword.arg)
    return found


def _assignment(target, value, found: dict) -> None:
    chain = _dotted(target)
    if len(chain) == 3 and chain[1] in ("parallelism", "training"):
        found.setdefault(chain[1], {})[chain[2]] = _literal(value, ".".join(chain[1:]))
    elif len(chain) == 2 and chain[1] == "activation_checkpoint":
        if isinstance(value, ast.Constant) and value.value is None:
            found["activation_checkpoint"] = {"mode": "none"}
        elif isinstance(value, ast.Call) and _dotted(value.func)[:1] and _dotted(value.func)[0] in _AC_POLICIES:
            mode = _AC_POLICIES[_dotted(value.func)[0]]
            found["activation_checkpoint"] = {"mode": mode} | ({"selective_ac_option": "op"}
                                                              if mode == "selective" else {})


def _parsed(text: str) -> ast.Module:
    """The recipe's syntax tree; one nested past what Python's parser (or :data:`MAX_NESTING`) takes is refused."""
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise InputError(f"{_WHAT}: the recipe is not valid Python ({error.msg} at line {error.lineno})") from None
    except (RecursionError, MemoryError):
        tree = None
    if tree is None or _depth(tree) > MAX_NESTING:
        raise InputError(f"{_WHAT}: the recipe nests its expressions deeper than {MAX_NESTING.cited} levels; "
                         "sappkit reads recipes of literal settings")
    return tree


def _depth(tree: ast.AST) -> int:
    """The deepest node's depth, found without recursion."""
    deepest, stack = 0, [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= MAX_NESTING:
            stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _dotted(node) -> list[str]:
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    return [node.id, *reversed(chain)] if isinstance(node, ast.Name) else []


def _name(node) -> str:
    chain = _dotted(node)
    return chain[-1] if chain else ""


def _literal(node, where: str):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise InputError(f"{_WHAT}: {where} is set to an expression sappkit does not evaluate "
                         f"({ast.unparse(node)}); write it as a literal") from None


def _micro_batches(par, training, notes, findings) -> tuple[int, int]:
    """``(micro-batches, samples per micro-batch)``."""
    if "num_pp_microbatches" in par:  # the main branch
        m = whole(_WHAT, par, "num_pp_microbatches", 1, maximum=MAX_MICRO_BATCHES)
        tokens, context = (None if training.get(key) is None else
                           whole(_WHAT, training, key, 1, maximum=MAX_GLOBAL_BATCH * MAX_SEQ_LENGTH // 2**24)
                           for key in ("num_tokens_per_microbatch_per_dp_rank", "max_context_length"))
        if tokens and context:
            return m, check_int(f"{_WHAT}: num_tokens_per_microbatch_per_dp_rank / max_context_length",
                                max(1, tokens // context), maximum=MAX_MICROBATCH_SIZE)
        notes.append("micro-batch size taken as 1 sample (num_tokens_per_microbatch_per_dp_rank and "
                     "max_context_length not both set)")
        return m, 1
    size = whole(_WHAT, par, "pipeline_parallel_microbatch_size", 1, maximum=MAX_MICROBATCH_SIZE)
    local = whole(_WHAT, training, "local_batch_size", 8, maximum=MAX_GLOBAL_BATCH)
    if local % size:
        findings.append(Finding("microbatches_unsupported", "error",
                                f"local_batch_size {local} is not a multiple of pipeline_parallel_microbatch_size "
                                f"{size}: torchtitan refuses it", "make local_batch_size a multiple of it"))
    return check_int(f"{_WHAT}: local_batch_size / pipeline_parallel_microbatch_size", max(1, local // size),
                     maximum=MAX_MICRO_BATCHES), size


def _generated_parts(par, p: int, schedule: str, num_layers) -> list[list[str]]:
    """torchtitan's own split when ``module_fqns_per_model_part`` is not given."""
    if num_layers is None:
        raise InputError(f"{_WHAT}: module_fqns_per_model_part is not set, so torchtitan splits the model's layers "
                         "itself: give num_layers (or the layer table) to read it")
    n = check_int("num_layers", num_layers, minimum=1, maximum=MAX_LAYERS)
    first, last = (whole(_WHAT, par, f"pipeline_parallel_{end}_stage_less_layers", 1, minimum=0, maximum=MAX_LAYERS)
                   for end in ("first", "last"))
    per_stage = (None if par.get("pipeline_parallel_layers_per_stage") is None else
                 whole(_WHAT, par, "pipeline_parallel_layers_per_stage", 1, maximum=MAX_LAYERS))
    single = schedule in _SINGLE
    if per_stage is None:
        total = p * (1 if single else 2)
    else:
        total = math.ceil((n + first + last) / per_stage)
        if total % p or (single and total != p) or (not single and total < 2 * p):
            raise InputError(f"{_WHAT}: pipeline_parallel_layers_per_stage {per_stage} makes {total} stages for "
                             f"{p} ranks; torchtitan needs a multiple of {p}, one per rank for "
                             f"{par.get('pipeline_parallel_schedule', '1F1B')} and two or more for looped schedules")
    counts = split_layers(total, n, first, last)
    parts, layer = [], 0
    for i, count in enumerate(counts):
        parts.append((["tok_embeddings"] if i == 0 else []) + [f"layers.{j}" for j in range(layer, layer + count)]
                     + (["norm", "output"] if i == total - 1 else []))
        layer += count
    return parts


def split_layers(stages: int, layers: int, input_weight: int = 1, output_weight: int = 1) -> list[int]:
    """Layers per stage as torchtitan's ``generate_llm_fqn_per_model_part`` splits them.

    Examples
    --------
    >>> split_layers(4, 8)
    [2, 3, 2, 1]
    """
    if stages == 1:
        return [layers]
    effective = layers + input_weight + output_weight
    base, extra = divmod(effective, stages)
    if stages > effective or base == 0 or input_weight > base or output_weight > base:
        raise InputError(f"{_WHAT}: torchtitan cannot split {layers} layers (+ {input_weight} and {output_weight} "
                         f"for the embedding and output) into {stages} stages")
    counts, left = [], layers
    for i in range(stages):
        share = base + (i < extra) - (input_weight if i == 0 else 0) - (output_weight if i == stages - 1 else 0)
        counts.append(min(share, left))
        left -= counts[-1]
    return counts


def _cells(parts, p: int, schedule: str, num_layers, findings) -> tuple[list[list[int]], int]:
    """``([chunk][stage] layers built, layers declared)`` from the model parts in stage-index order."""
    if not isinstance(parts, list) or not parts or not all(isinstance(part, list) for part in parts):
        raise InputError(f"{_WHAT}: module_fqns_per_model_part must be a list of lists of module names; got "
                         f"{short(parts)}")
    if len(parts) > MAX_STAGES * MAX_CHUNKS:
        raise InputError(f"{_WHAT}: module_fqns_per_model_part lists {len(parts):,} model parts; sappkit reads at "
                         f"most pipeline stages x chunks = {MAX_STAGES.cited} x {MAX_CHUNKS.cited}")
    if len(parts) % p:
        raise InputError(f"{_WHAT}: {len(parts)} model parts for pipeline_parallel_degree {p}: torchtitan needs "
                         "a multiple")
    v = len(parts) // p
    v_shaped = schedule in ("zbv", "dualpipev_split")
    if (schedule in _SINGLE and v != 1) or (v_shaped and v != 2):
        raise InputError(f"{_WHAT}: {schedule!r} runs {'one model part' if v == 1 else 'two'} per rank; the config "
                         f"gives {v}")
    indices = [[int(match.group(1)) for name in part if isinstance(name, str) and (match := _LAYER.match(name))]
               for part in parts]
    if sum(map(len, indices)) > MAX_LAYERS or any(i >= MAX_LAYERS for part in indices for i in part):
        raise InputError(f"{_WHAT}: module_fqns_per_model_part names more layers, or a higher layer index, than "
                         f"{MAX_LAYERS.cited}")
    flat = [i for part in indices for i in part]
    if flat != sorted(set(flat)):
        raise InputError(f"{_WHAT}: module_fqns_per_model_part must list each layer once, in order; got "
                         f"{short(flat)}")
    declared = num_layers if num_layers is not None else (max(flat) + 1 if flat else 0)
    missing = sorted(set(range(declared)) - set(flat))
    if missing:
        findings.append(Finding("layers_dropped", "error",
                                f"layers {_ranges(missing)} sit in no model part: torchtitan's split deletes them, "
                                f"so it trains {len(flat)} of the {declared} layers",
                                "name every layer in module_fqns_per_model_part (sappkit's torchtitan export "
                                "writes them all)"))
    counts = [[0] * p for _ in range(v)]
    for i, part in enumerate(indices):
        chunk, stage = (i // p, i % p) if not v_shaped else ((0, i) if i < p else (1, 2 * p - 1 - i))
        counts[chunk][stage] = len(part)
    return counts, declared


def _ranges(values: list[int]) -> str:
    runs, start = [], values[0]
    for a, b in zip(values, values[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ", ".join(runs)


def _schedule_findings(schedule: str, p: int, v: int, m: int) -> list[Finding]:
    stages = p * v
    rule = None
    if schedule == "1f1b" and m < p:
        rule = f"Schedule1F1B needs at least as many micro-batches as stages ({p}); the config runs {m}"
    elif schedule in ("interleaved", "zb_interleaved") and m % max(1, m // p):
        rule = (f"{TORCHTITAN_SCHEDULES[schedule]} runs micro-batches in rounds of max(1, m // p) = {max(1, m // p)}, "
                f"which must divide m = {m}")
    elif schedule == "dualpipev_split" and m < stages:
        rule = f"DualPipeV needs at least as many micro-batches as stages ({stages}); the config runs {m}"
    if rule:
        return [Finding("microbatches_unsupported", "error", f"{rule}: PyTorch refuses it",
                        f"run a multiple of {p} micro-batches, at least {stages}")]
    if m < stages and schedule not in _SINGLE:
        return [Finding("microbatches_few", "warning", f"{m} micro-batches for {stages} stages: torchtitan warns "
                                                       "of a bubble", f"run at least {stages} micro-batches")]
    return []


def _data_parallel(par, world_size, p: int, notes: list[str]) -> tuple[int, int]:
    """``(data-parallel degree, ZeRO stage)``: FSDP's shard degree is ZeRO-3, replicas alone ZeRO-0."""
    shard = whole(_WHAT, par, "data_parallel_shard_degree", -1, minimum=-1)
    replicate = whole(_WHAT, par, "data_parallel_replicate_degree", 1)
    if shard == 0:
        raise InputError(f"{_WHAT}: data_parallel_shard_degree must be -1 (the ranks left over) or >= 1; got 0")
    if shard == -1:
        others = (p * replicate * whole(_WHAT, par, "tensor_parallel_degree", 1)
                  * whole(_WHAT, par, "context_parallel_degree", 1))
        if world_size is None:
            notes.append("data_parallel_shard_degree = -1 takes the ranks left over: give world_size; taken as 1")
            shard = 1
        else:
            shard = max(1, check_int("world_size", world_size, minimum=1) // others)
    return shard * replicate, 3 if shard > 1 else 0


def _checkpoint_policy(checkpoint: dict, notes: list[str]) -> Policy:
    mode = checkpoint.get("mode", "selective")
    option = checkpoint.get("selective_ac_option", "2")
    if mode == "selective" and not (isinstance(option, str) and (option == "op" or re.fullmatch("[0-9]{1,4}", option)
                                                                 and int(option) >= 1)):
        raise InputError(f"{_WHAT}: activation_checkpoint.selective_ac_option must be 'op' or a positive layer "
                         f"count as a string ('2': every second layer), as torchtitan requires; got {short(option)}")
    if mode == "none":
        return Policy("uniform", "none")
    if mode == "full" or (mode == "selective" and option == "1"):
        return Policy("uniform", "full")
    if mode == "selective" and option.isdigit():
        return Policy("every", n=int(option))
    if mode == "selective" and option == "op":  # its save list: sappkit.layers.op_sac
        return Policy("uniform", OP_SAC)
    if mode == "memory_budget":
        notes.append("activation checkpointing 'memory_budget' is the compiler's choice: priced as no recompute")
        return Policy("uniform", "none")
    raise InputError(f"{_WHAT}: activation_checkpoint mode {short(mode)} with selective_ac_option {short(option)} is "
                     "not one torchtitan runs (none, full, selective with 'op' or a block count, memory_budget)")
