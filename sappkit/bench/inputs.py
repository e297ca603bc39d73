"""The readers on the largest inputs within sappkit's limits: each within 10 s of CPU and 2 GB.

The bad-input pass promised that nothing takes more than 10 s or 2 GB on
inputs within the documented limits (:mod:`sappkit.limits`). Each case here
is one of the largest such inputs, or a bomb the limits refuse, built in a
temporary folder and read once per repeat: a 1.5 MB MindFormers YAML, a
profiler trace of 38,000 layer spans and 38,000 operators, a launch script
whose variables expand to almost :data:`~sappkit.limits.MAX_EXPANDED_CHARS`
characters, a Megatron layout that expands to exactly that many, a
``$((...))`` of 3,000 terms, and two bombs (a layout whose groups unroll to
nothing, a script that doubles its variable 22 times). ``median_ms`` is the
read's wall time (the target, 10,000 ms, is of its CPU); ``detail`` gives the peak Python memory
of one read (``tracemalloc``, a second run: tracing slows the timed one
otherwise), and ``passed`` needs both within target (2 GiB).
"""

from __future__ import annotations

import json
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from ..errors import InputError
from ..limits import MAX_EXPANDED_CHARS
from ..trainers.exchange import read_trainer_config
from ..trainers.megatron import read_megatron
from ..trainers.megatron_layout import parse_layout
from ..trainers.mindformers import read_mindformers
from ..trainers.profiles import read_profile_times
from . import median_seconds, row

__all__ = ["measure", "CASES", "peak_bytes", "TARGET_MS", "TARGET_BYTES"]

TARGET_MS, TARGET_BYTES = 10_000.0, 2 * 2**30
#: Spans (and operators) in the largest trace: the count the bad-input pass timed in minutes.
TRACE_SPANS = 38_000


def mindformers_yaml(folder: Path) -> Callable[[], object]:
    """A MindFormers config of about 1.5 MB: its settings, then a long list the reader does not need."""
    lines = ["parallel_config:", "  pipeline_stage: 4", "  micro_batch_num: 8", "  data_parallel: 2",
             "model:", "  model_config:", "    num_layers: 32", "callbacks:"]
    lines += [f"  - {{type: CheckpointMonitor, prefix: run_{i:06d}, save_checkpoint_steps: {i}}}"
              for i in range(20_000)]
    path = folder / "mindformers.yaml"
    path.write_text("\n".join(lines) + "\n")
    return lambda: read_mindformers(path)


def trace(folder: Path) -> Callable[[], object]:
    """A PyTorch trace: 38,000 layer spans, each running one operator (600,000 values, within
    :data:`~sappkit.limits.MAX_DOCUMENT_VALUES`)."""
    events = []
    for i in range(TRACE_SPANS):
        base = {"ph": "X", "pid": 1, "tid": 1}
        events += [{**base, "name": f"layer{i}", "ts": 10 * i, "dur": 5},
                   {**base, "name": "aten::mm", "ts": 10 * i + 1, "dur": 1, "args": {"Sequence number": i}}]
    path = folder / "trace.json"
    path.write_text(json.dumps(events))
    return lambda: read_profile_times(path, r"layer(\d+)")


def script(folder: Path) -> Callable[[], object]:
    """A launch script whose variable doubles 16 times: every substitution together just under the cap."""
    lines = ["A=ab"] + ['A="$A $A"'] * 16 + ["torchrun pretrain_gpt.py --num-layers 8 --pipeline-model-parallel-size "
                                             "2 --micro-batch-size 1 --global-batch-size 8 --extra $A"]
    path = folder / "launch.sh"
    path.write_text("\n".join(lines) + "\n")
    return lambda: read_trainer_config(path)


def arithmetic(folder: Path) -> Callable[[], object]:
    """``--num-layers $((1+1+...-1-1))``: 3,000 terms that come to 32 layers."""
    terms = "+".join(["1"] * 1_516) + "-" + "-".join(["1"] * 1_484)
    path = folder / "arithmetic.sh"
    path.write_text(f"N=$(({terms}))\ntorchrun pretrain_gpt.py --num-layers $N --pipeline-model-parallel-size 2\n")
    return lambda: read_trainer_config(path)


def layout(_folder: Path) -> Callable[[], object]:
    """A layout that expands to exactly :data:`~sappkit.limits.MAX_EXPANDED_CHARS` characters, its 999 '|' included."""
    stage = MAX_EXPANDED_CHARS // 1_000 - 1  # characters per stage, with its "|"
    text = f"(t*{stage}|)*999,t*{stage}L"
    return lambda: parse_layout(text)


def refused(call: Callable[[], object]) -> Callable[[], object]:
    """``call`` expected to raise InputError: returns the message, or fails loudly if it was accepted."""
    def run():
        try:
            call()
        except InputError as error:
            return str(error)
        raise AssertionError("a bomb was accepted")
    return run


#: (case, builder): a builder writes its input into a folder and returns the read.
CASES = (
    ("MindFormers YAML, 1.5 MB", mindformers_yaml),
    (f"trace, {TRACE_SPANS:,} spans and operators", trace),
    ("launch script, a variable doubled 16 times", script),
    ("$((...)) of 3,000 terms", arithmetic),
    ("layout expanding to 1,000,000 characters", layout),
    ("bomb: (t*0)*9999999 x 7,692 (refused)",
     lambda _: refused(lambda: parse_layout("(t*0)*9999999" * 7_692))),
    ("bomb: a variable doubled 22 times (refused)",
     lambda folder: refused(lambda: read_megatron("A=1\n" + 'A="$A $A"\n' * 22 + "--num-layers 8 $A\n"))),
)


def peak_bytes(call: Callable[[], object]) -> int:
    """The peak Python memory (``tracemalloc``) of one ``call()``, in bytes."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure(quick: bool) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for case, build in CASES:
            read = build(Path(folder))
            seconds = median_seconds(read, repeats=1 if quick else 3)
            peak = peak_bytes(read)
            result = row("inputs", case, seconds, TARGET_MS, f"peak {peak / 2**20:,.1f} MiB (tracemalloc), target "
                                                              f"{TARGET_BYTES / 2**30:.0f} GiB")
            result["passed"] = bool(result["passed"] and peak < TARGET_BYTES)
            rows.append(result)
    return rows
