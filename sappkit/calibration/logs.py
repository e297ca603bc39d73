"""Measured step times from training logs: Megatron-LM, torchtitan and NeMo/Lightning, warm-up skipped.

The lines each trainer prints (colour codes are stripped first):

- **Megatron-LM** (``megatron/training/training.py``, ``training_log``):
  ``iteration      100/  500000 | consumed samples: ... | elapsed time per iteration (ms): 1234.5 | ...``;
- **torchtitan** (``torchtitan/components/metrics.py``, ``MetricsProcessor.log``):
  ``step: 100  loss:  2.3456  memory: 40.12GiB(50.66%)  tps: 1,234  tflops: 123.45  mfu: 12.48%``, where
  ``tps`` is tokens per second per device, so a step takes ``tokens_per_device / tps`` (the global batch's
  tokens over the devices);
- **NeMo / Lightning** (NeMo's ``train_step_timing`` metric, in seconds): the progress bar's
  ``train_step_timing in s=1.23`` and NeMo 2's ``| global_step: 120 | ... | train_step_timing in s: 1.23``.

A log may report every step or every ``log_freq`` steps; lines of steps up
to ``warmup`` are skipped (compilation, NCCL set-up, the allocator's first
growth), and the run's step time is the median of the rest.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .._check import check_choice, check_int, check_number
from .._files import as_path, read_text
from ..errors import InputError

__all__ = ["LOG_FORMATS", "read_step_times", "measured_step_ms"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUMBER = r"([0-9][0-9,]*(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
#: Trainer -> (pattern of the step number, pattern of the step's time, what the time is).
LOG_FORMATS = {
    "megatron": (re.compile(r"\biteration\s+(\d+)\s*/"),
                 re.compile(r"elapsed time per iteration \(ms\):\s*" + _NUMBER), "ms"),
    "torchtitan": (re.compile(r"\bstep:\s*(\d+)\b"), re.compile(r"\btps:\s*" + _NUMBER), "tps"),
    "nemo": (re.compile(r"\bglobal_step[=:]\s*(\d+)"), re.compile(r"train_step_timing in s[=:]\s*" + _NUMBER), "s"),
}


def read_step_times(log, *, trainer: str | None = None, tokens_per_device: float | None = None,
                    warmup: int = 10) -> pd.DataFrame:
    """The step times a training log reports, after the warm-up.

    Parameters
    ----------
    log : path or str
        The log file, or its text (a str holding a line break).
    trainer : {"megatron", "torchtitan", "nemo"}, optional
        Default: the one whose step-time pattern the log holds.
    tokens_per_device : float, optional
        torchtitan only: tokens one device processes per step (``global_batch · seq_length / devices``).
    warmup : int
        Lines of steps ``<= warmup`` are skipped.

    Returns
    -------
    DataFrame
        ``step``, ``step_ms``, ``trainer``: one row per reporting line after the warm-up.

    Examples
    --------
    >>> text = "\\n".join(f" iteration {i:8d}/ 1000 | elapsed time per iteration (ms): {900 + i:.1f} |"
    ...                   for i in range(1, 16))
    >>> read_step_times(text)["step_ms"].tolist()
    [911.0, 912.0, 913.0, 914.0, 915.0]
    """
    what = "a training log (Megatron-LM, torchtitan or NeMo/Lightning)"
    text = log if isinstance(log, str) and "\n" in log else read_text(as_path("log", log), what)
    name = "the log" if isinstance(log, str) and "\n" in log else str(log)
    text = _ANSI.sub("", text)
    warmup = check_int("warmup", warmup, minimum=0)
    trainer = _trainer(text, name) if trainer is None else check_choice("trainer", trainer, LOG_FORMATS)
    step_pattern, time_pattern, unit = LOG_FORMATS[trainer]
    if unit == "tps":
        if tokens_per_device is None:
            raise InputError(f"{name}: a torchtitan log gives tokens per second (tps); give tokens_per_device "
                             "(global batch x sequence length / devices) to turn it into step times")
        check_number("tokens_per_device", tokens_per_device, minimum=0, strict=True)
    rows = []
    for line in text.splitlines():
        found = time_pattern.search(line)
        step = step_pattern.search(line)
        if found is None or step is None:
            continue
        value = float(found.group(1).replace(",", ""))
        milliseconds = {"ms": value, "s": value * 1e3}.get(unit) if unit != "tps" else \
            (tokens_per_device / value * 1e3 if value > 0 else np.inf)
        rows.append({"step": int(step.group(1)), "step_ms": milliseconds, "trainer": trainer})
    frame = pd.DataFrame(rows, columns=["step", "step_ms", "trainer"])
    if frame.empty:
        raise InputError(f"{name}: no {trainer} step-time line found (pattern {time_pattern.pattern!r})")
    kept = frame[frame["step"] > warmup].reset_index(drop=True)
    if kept.empty:
        raise InputError(f"{name}: every step-time line is of a step <= warmup = {warmup} (the last is step "
                         f"{int(frame['step'].max())}); log longer or lower warmup")
    return kept


def measured_step_ms(log, **options) -> float:
    """The median step time of a training log after the warm-up, ms (:func:`read_step_times`)."""
    return float(read_step_times(log, **options)["step_ms"].median())


def _trainer(text: str, name: str) -> str:
    for trainer, (_, time_pattern, _) in LOG_FORMATS.items():
        if time_pattern.search(text):
            return trainer
    raise InputError(f"{name}: no step-time line of {', '.join(LOG_FORMATS)} found (Megatron-LM's 'elapsed time "
                     "per iteration (ms)', torchtitan's 'tps:', NeMo's 'train_step_timing in s')")
