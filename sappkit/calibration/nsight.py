"""Kernels of an Nsight Systems report exported as SQLite (``nsys export --type sqlite``), as trace events.

The tables read (Nsight Systems' SQLite export schema):

- ``CUPTI_ACTIVITY_KIND_KERNEL``: each kernel's ``start`` and ``end`` (ns)
  on the GPU, its ``correlationId`` and its name (``demangledName``, else
  ``shortName``: ids into ``StringIds``);
- ``CUPTI_ACTIVITY_KIND_RUNTIME``: the CUDA API call that launched it (the
  same ``correlationId``), its ``start`` and its thread (``globalTid``);
- ``NVTX_EVENTS``: push/pop ranges (``eventType`` 59) with their ``text``
  (or ``textId`` into ``StringIds``), ``start``, ``end`` and ``globalTid``.
  Under ``torch.autograd.profiler.emit_nvtx(record_shapes=True)`` each ATen
  op is a range named ``aten::mm, seq = 12, op_id = 34, sizes = [[512, 512],
  [512, 512]], input_op_ids = [...]``.

A kernel's op is the innermost range on the launching thread around its
launch. The op's ``sizes`` give a GEMM's shapes. NVTX does not record dtypes, so a
GEMM's dtype is read from the kernel's name (``bf16``, ``f16``/``fp16``,
``e4m3``, else fp32), and an NCCL kernel's collective and dtype too
(``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``). Its size is the op's first size
when the op has one. Its group is not in the report (one rank: read, not
fitted).
"""

from __future__ import annotations

import json
import re
import sqlite3
from bisect import bisect_right
from pathlib import Path

from ..errors import InputError

__all__ = ["SQLITE_MAGIC", "read_nsight_events"]

#: The first bytes of every SQLite file.
SQLITE_MAGIC = b"SQLite format 3\x00"
_PUSH_POP = 59
_KERNELS = """SELECT k.start, k."end", k.correlationId, COALESCE(d.value, s.value, '')
    FROM CUPTI_ACTIVITY_KIND_KERNEL AS k LEFT JOIN StringIds AS d ON d.id = k.demangledName
    LEFT JOIN StringIds AS s ON s.id = k.shortName"""
_LAUNCHES = "SELECT correlationId, start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"
_RANGES = """SELECT n.start, n."end", n.globalTid, COALESCE(n.text, s.value, '')
    FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS s ON s.id = n.textId WHERE n.eventType = ?"""
#: Kernel-name fragments -> the dtype name PyTorch's traces write.
_DTYPES = (("e4m3", "c10::Float8_e4m3fn"), ("bf16", "c10::BFloat16"), ("f16", "c10::Half"))
_NCCL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")


def read_nsight_events(path: Path) -> list[tuple[dict, dict | None]]:
    """Each kernel of the report as a (kernel, op) pair of PyTorch profiler trace events (module docstring):
    the kernel's ``name`` and ``dur`` (µs), and its op's ``name`` and ``Input Dims`` (None: no op around it)."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as database:
            kernels = database.execute(_KERNELS).fetchall()
            launches = {row[0]: row[1:] for row in database.execute(_LAUNCHES)}
            ranges = _ranges(database)
    except sqlite3.Error as error:
        raise InputError(f"{path}: not an Nsight Systems SQLite export with CUPTI_ACTIVITY_KIND_KERNEL, "
                         f"CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS and StringIds ({error})") from None
    events = []
    for start, end, correlation, name in kernels:
        launch = launches.get(correlation)
        op = _op(ranges.get(launch[1], ([], [])), launch[0]) if launch else None
        kernel = {"name": name, "dur": (end - start) / 1e3, "args": {}}
        dtype = next((value for part, value in _DTYPES if part in name.lower()), "float")
        nccl = _NCCL.match(name)
        if nccl:
            count = _count(op)
            kernel["args"] = {"Collective name": nccl.group(1), "In msg nelems": count, "Out msg nelems": count,
                              "dtype": dtype, "Group size": 1}
        if op is not None:
            op["args"]["Input type"] = [dtype] * len(op["args"]["Input Dims"])
        events.append((kernel, op))
    return events


def _ranges(database) -> dict:
    """Thread -> (the ranges' starts in order, the ranges: (start, end, text))."""
    by_thread: dict = {}
    for start, end, thread, text in sorted(database.execute(_RANGES, (_PUSH_POP,))):
        by_thread.setdefault(thread, []).append((start, end, text))
    return {thread: ([row[0] for row in rows], rows) for thread, rows in by_thread.items()}


def _op(thread: tuple[list, list], launched: int) -> dict | None:
    """The innermost range around ``launched`` (the latest-starting one that has not ended) as an op event."""
    starts, rows = thread
    for index in range(bisect_right(starts, launched) - 1, -1, -1):
        start, end, text = rows[index]
        if end >= launched:
            name, _, rest = text.partition(",")
            return {"name": name.strip(), "args": {"Input Dims": _sizes(rest)}}
    return None


def _sizes(text: str) -> list:
    """The ``sizes = [[...], ...]`` of emit_nvtx's range text ([] without one)."""
    found = text.find("sizes = ")
    if found < 0:
        return []
    depth, begin = 0, found + len("sizes = ")
    for index in range(begin, len(text)):
        depth += {"[": 1, "]": -1}.get(text[index], 0)
        if depth == 0:
            try:
                return json.loads(text[begin:index + 1])
            except ValueError:
                return []
    return []


def _count(op: dict | None):
    dims = (op or {}).get("args", {}).get("Input Dims") or []
    if dims and dims[0] and all(isinstance(size, int) for size in dims[0]):
        count = 1
        for size in dims[0]:
            count *= size
        return count
    return None
