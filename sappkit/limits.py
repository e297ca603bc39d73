"""The limits sappkit refuses to go beyond, declared once.

Each limit is generous — ten times and more what a real training run needs —
and keeps every call to minutes and to memory a laptop has: beyond them the
models would run for hours, exhaust memory or overflow their integers. A
refusal is a :class:`sappkit.InputError` that names the argument, the value
and the limit (``stages must be an int <= 256 (sappkit.limits.MAX_STAGES);
got 1000``).

Examples
--------
>>> from sappkit import limits
>>> limits.MAX_STAGES, limits.MAX_STAGES.name
(256, 'MAX_STAGES')
"""

from __future__ import annotations

__all__ = ["Limit", "MAX_STAGES", "MAX_CHUNKS", "MAX_MICRO_BATCHES", "MAX_SEQ_SPLIT", "MAX_LAYERS",
           "MAX_SIMULATED_PASSES", "MAX_MEMORY_MB", "MAX_TIME", "MAX_BUCKETS", "MAX_SWEEP_POINTS", "MAX_DRY_RUNS",
           "MAX_THREADS", "MAX_FILE_MB", "MAX_DOCUMENT_VALUES", "MAX_MICROBATCH_SIZE", "MAX_DEVICES",
           "MAX_GLOBAL_BATCH", "MAX_SEQ_LENGTH", "MAX_EXPANDED_CHARS", "MAX_NESTING", "MAX_WIDTH"]


class Limit(int):
    """An int that knows its name in :mod:`sappkit.limits`, so a refusal can cite it."""

    name: str

    def __new__(cls, value: int, name: str) -> Limit:
        limit = super().__new__(cls, value)
        limit.name = name
        return limit

    @property
    def cited(self) -> str:
        """``256 (sappkit.limits.MAX_STAGES)``: the value and where it is declared."""
        return f"{int(self)} (sappkit.limits.{self.name})"


#: Pipeline stages ``p`` (real runs use up to ~128).
MAX_STAGES = Limit(256, "MAX_STAGES")
#: Chunks per stage ``v`` (real runs use up to ~8).
MAX_CHUNKS = Limit(32, "MAX_CHUNKS")
#: Micro-batches per step ``m``.
MAX_MICRO_BATCHES = Limit(65536, "MAX_MICRO_BATCHES")
#: SeqPipe slices per micro-batch ``k``.
MAX_SEQ_SPLIT = Limit(1024, "MAX_SEQ_SPLIT")
#: Body layers of a model, all kinds together (real models have up to ~200); the balancer's search grows
#: faster than linearly with them (2048 layers on 16 stages: seconds).
MAX_LAYERS = Limit(2048, "MAX_LAYERS")
#: Forward passes one simulated step runs, ``p v m k`` (the simulator steps about 100 000 a second).
MAX_SIMULATED_PASSES = Limit(1_000_000, "MAX_SIMULATED_PASSES")
#: Any memory in MB: a device's, a stage's peak, a layer's (2**30 MB is 1 PiB).
MAX_MEMORY_MB = Limit(2**30, "MAX_MEMORY_MB")
#: Any time of a layer or a cell, in the input's own unit (sums of them stay finite).
MAX_TIME = Limit(10**15, "MAX_TIME")
#: Knapsack buckets of a device, ``memory_mb / bucket_mb`` (80 GB in 1 MB buckets is 80 000).
MAX_BUCKETS = Limit(2**24, "MAX_BUCKETS")
#: Memory limits one sweep solves at (``sweep_memory``, ``sweep_recompute``).
MAX_SWEEP_POINTS = Limit(1000, "MAX_SWEEP_POINTS")
#: Dry runs: those ``plan_dryruns`` may propose (``max_runs``), the rounds of a dry-run YAML.
MAX_DRY_RUNS = Limit(64, "MAX_DRY_RUNS")
#: Threads the balancer's solver may start (``SolverOptions.threads``; a billion exhausts memory).
MAX_THREADS = Limit(256, "MAX_THREADS")
#: Size of a file read whole (layer JSON or CSV, dry-run YAML or CSV, offsets YAML), in MB.
MAX_FILE_MB = Limit(16, "MAX_FILE_MB")
#: Values a JSON or YAML document holds once its YAML aliases are expanded (an alias bomb expands to billions).
MAX_DOCUMENT_VALUES = Limit(1_000_000, "MAX_DOCUMENT_VALUES")
#: Samples per micro-batch a trainer configuration may ask for (real runs use 1 to a few dozen).
MAX_MICROBATCH_SIZE = Limit(1_048_576, "MAX_MICROBATCH_SIZE")
#: Devices of one run, and so any parallel degree (the largest published runs use ~100 000).
MAX_DEVICES = Limit(1_048_576, "MAX_DEVICES")
#: Samples per step (real runs use up to ~16 000 sequences).
MAX_GLOBAL_BATCH = Limit(16_777_216, "MAX_GLOBAL_BATCH")
#: Tokens per sequence (real runs use up to ~1 000 000).
MAX_SEQ_LENGTH = Limit(16_777_216, "MAX_SEQ_LENGTH")
#: Characters a config may expand to: a launch script after its variables, a layout after its repeats.
MAX_EXPANDED_CHARS = Limit(1_000_000, "MAX_EXPANDED_CHARS")
#: Nesting depth of an expression sappkit reads (a ``$((...))``, a recipe's Python): real ones nest a few levels.
MAX_NESTING = Limit(100, "MAX_NESTING")
#: A model's widths and counts: hidden, FFN and head sizes, heads, vocabulary, experts (real ones stay below ~10**6).
MAX_WIDTH = Limit(16_777_216, "MAX_WIDTH")
