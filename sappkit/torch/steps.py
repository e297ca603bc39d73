"""A small transformers Llama's training step, measured: forward, backward, gradient all-reduce, optimizer step.

:func:`measure_steps` runs each :class:`StepConfig` in ``data_parallel``
spawned processes (gloo on a CPU, NCCL on GPUs), each on one torch thread
on a CPU. A step is what a trainer's step is:

- the forward and the loss (``LlamaForCausalLM`` with ``labels``: the LM
  head and the cross-entropy), every decoder layer run as its recompute
  option runs it (:func:`sappkit.torch.options.run_forward`: ``none``,
  ``selective`` re-runs the attention core, ``full`` the whole layer);
- the backward, the gradients accumulated in one flat buffer (as Megatron-LM's
  grad buffer) that data parallelism all-reduces in one call after it;
- the fused AdamW step (``torch.optim.AdamW(fused=True)``) and the buffer
  zeroed for the next step.

On a CPU the step's time is the process's CPU time (``time.process_time``:
the compute thread and gloo's threads), so other processes on a shared
machine add little; on a GPU the wall clock around the synchronised step.
Each configuration's time is the median of ``repeats`` steps after
``warmup``; with data parallelism, the slowest rank's median. Beside it is
the machine's one-minute load average (``os.getloadavg``) when it ran.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .._check import check_choice, check_int
from .options import DEFAULT_OPTIONS, run_forward

__all__ = ["StepConfig", "LLAMA", "measure_steps", "llama_keys"]

#: The small Llama measured: ``config.json`` keys (2 layers of hidden 512; steps of a fraction of a second on
#: one CPU core).
LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8,
         "num_key_value_heads": 8, "intermediate_size": 1376, "vocab_size": 8192, "hidden_act": "silu",
         "max_position_embeddings": 256}


@dataclass(frozen=True)
class StepConfig:
    """One training step's shape: ``seq_length``, ``micro_batch_size``, ``recompute`` (``none``, ``selective``,
    ``full``), ``data_parallel`` ranks and ``micro_batches`` accumulated per step."""

    seq_length: int
    micro_batch_size: int = 1
    recompute: str = "none"
    data_parallel: int = 1
    micro_batches: int = 1

    def __post_init__(self):
        check_int("seq_length", self.seq_length, minimum=2)
        check_int("micro_batch_size", self.micro_batch_size, minimum=1)
        check_choice("recompute", self.recompute, DEFAULT_OPTIONS)
        check_int("data_parallel", self.data_parallel, minimum=1)
        check_int("micro_batches", self.micro_batches, minimum=1)

    @property
    def global_batch(self) -> int:
        """Samples per step: ``micro_batch_size · micro_batches · data_parallel``."""
        return self.micro_batch_size * self.micro_batches * self.data_parallel

    @property
    def label(self) -> str:
        """``s128 b1 none dp1``."""
        return f"s{self.seq_length} b{self.micro_batch_size} {self.recompute} dp{self.data_parallel}"


def llama_keys(keys: dict, seq_length: int) -> dict:
    """``keys`` with room for ``seq_length`` positions (``max_position_embeddings``)."""
    return {**keys, "max_position_embeddings": max(int(keys.get("max_position_embeddings", 0)), seq_length)}


def measure_steps(configs, keys: dict = LLAMA, *, device: str = "cpu", repeats: int = 5,
                  warmup: int = 2) -> list[dict]:
    """Measure each configuration's step (module docstring): one dict per configuration with ``step_ms`` (the
    slowest rank's median), ``rank_ms`` (each rank's median), ``load_1min`` (before and after) and its fields."""
    configs = [config if isinstance(config, StepConfig) else StepConfig(**config) for config in configs]
    check_choice("device", device, ("cpu", "cuda"))
    check_int("repeats", repeats, minimum=1)
    check_int("warmup", warmup, minimum=0)
    results = [None] * len(configs)
    for ranks in sorted({config.data_parallel for config in configs}):
        chosen = [i for i, config in enumerate(configs) if config.data_parallel == ranks]
        measured = _spawned([configs[i] for i in chosen], keys, device, ranks, repeats, warmup)
        for index, row in zip(chosen, measured):
            results[index] = row
    return results


def _spawned(configs, keys, device, ranks, repeats, warmup) -> list[dict]:
    backend = "nccl" if device == "cuda" else "gloo"
    with tempfile.TemporaryDirectory() as folder:
        job = {"configs": [asdict(config) for config in configs], "keys": keys, "device": device,
               "backend": backend, "ranks": ranks, "repeats": repeats, "warmup": warmup, "folder": folder}
        mp.spawn(_rank, args=(job,), nprocs=ranks, join=True)
        per_rank = [json.loads((Path(folder) / f"rank{rank}.json").read_text()) for rank in range(ranks)]
    rows = []
    for index, config in enumerate(configs):
        times = [ranked[index]["step_ms"] for ranked in per_rank]
        loads = per_rank[0][index]["load_1min"]
        rows.append({**asdict(config), "step_ms": max(times), "rank_ms": times, "load_1min": loads})
    return rows


def _rank(rank: int, job: dict) -> None:
    """One rank's process: every configuration's steps, its medians written to ``rank<N>.json``."""
    device = job["device"]
    if device == "cpu":
        torch.set_num_threads(1)
    else:
        torch.cuda.set_device(rank)
    if job["ranks"] > 1:
        dist.init_process_group(job["backend"], init_method=f"file://{job['folder']}/store", rank=rank,
                                world_size=job["ranks"])
    rows = []
    for fields in job["configs"]:
        config = StepConfig(**fields)
        step = _training_step(job["keys"], config, device, rank)
        load = os.getloadavg()[0]
        times = [_timed(step, device) for _ in range(job["warmup"] + job["repeats"])][job["warmup"]:]
        rows.append({"step_ms": statistics.median(times), "load_1min": [load, os.getloadavg()[0]]})
    (Path(job["folder"]) / f"rank{rank}.json").write_text(json.dumps(rows))
    if job["ranks"] > 1:
        dist.destroy_process_group()


def _timed(step, device: str) -> float:
    clock = time.perf_counter if device == "cuda" else time.process_time
    if device == "cuda":
        torch.cuda.synchronize()
    start = clock()
    step()
    if device == "cuda":
        torch.cuda.synchronize()
    return (clock() - start) * 1e3


class _Recomputed(torch.nn.Module):
    """A decoder layer run as a recompute option runs it (:func:`~sappkit.torch.options.run_forward`)."""

    def __init__(self, layer: torch.nn.Module, spec):
        super().__init__()
        self.layer, self.spec = layer, spec

    def forward(self, *args, **kwargs):
        return run_forward(self.layer, self.spec, args, kwargs)


def _training_step(keys: dict, config: StepConfig, device: str, rank: int):
    """The step of ``config`` as a function (module docstring), on a model built from ``keys``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    keys = llama_keys(keys, config.seq_length)
    hf = AutoConfig.for_model(**{"use_cache": False, **keys})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf, attn_implementation="sdpa").to(device)
    layers = model.model.layers
    for index in range(len(layers)):
        layers[index] = _Recomputed(layers[index], DEFAULT_OPTIONS[config.recompute])
    model.train()
    params = [param for param in model.parameters() if param.requires_grad]
    grads = torch.zeros(sum(param.numel() for param in params), device=device)
    offset = 0
    for param in params:  # each gradient a view of one flat buffer, accumulated into in place
        param.grad = grads[offset:offset + param.numel()].view_as(param)
        offset += param.numel()
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=True)
    generator = torch.Generator().manual_seed(rank)
    batches = [torch.randint(0, keys["vocab_size"], (config.micro_batch_size, config.seq_length),
                             generator=generator).to(device) for _ in range(config.micro_batches)]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda")

    def step():
        for ids in batches:
            with autocast:
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        if config.data_parallel > 1:
            dist.all_reduce(grads)  # summed: the mean's scale is the learning rate's
        optimizer.step()
        grads.zero_()

    return step
