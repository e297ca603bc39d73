"""Kernel times from a PyTorch profiler trace (Chrome trace JSON): GEMMs with shapes, attention, collectives.

``torch.profiler.profile(record_shapes=True).export_chrome_trace(path)``
writes ``{"traceEvents": [...]}``; the events read:

- **CUDA**: ``"cat": "kernel"`` events (their ``dur`` is the GPU's), each
  tied to the ATen op that launched it by ``args["External id"]``; a GEMM is a
  kernel under ``aten::mm``, ``aten::addmm``, ``aten::bmm``, ``aten::baddbmm``
  or ``aten::_scaled_mm`` (shapes from the op's ``Input Dims``); attention a
  kernel named ``flash``/``fmha``/``attention`` or under a
  ``_scaled_dot_product_*``/``_flash_attention_*``/``_efficient_attention_*``
  op; a collective an NCCL kernel (``nccl*``), whose ``args`` give
  ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``
  and ``dtype``;
- **CPU** (no kernel events): the ``"cat": "cpu_op"`` GEMM and attention
  implementation ops themselves, and gloo's ``gloo:<collective>``
  annotations (``Input Dims``, ``Input type``; the group is the trace's
  ``distributedInfo.world_size``);
- **Nsight Systems** (a report exported as SQLite, ``nsys export --type sqlite``): its kernels, each tied to
  the ATen op that ``emit_nvtx(record_shapes=True)`` put around its launch (:mod:`.nsight`).

The frame: ``kind`` (``gemm``, ``attention``, ``collective``), ``name``, ``op``,
``duration_ms``, ``flops`` (GEMMs: ``2·batch·m·n·k``; attention forward:
``4·batch·heads·s_q·s_k·d``), ``batch``, ``m``, ``n``, ``k``, ``nbytes``
(GEMMs: the operands and result; collectives: the larger message), ``ranks``,
``collective``, ``dtype``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .._files import as_path, load_json
from ..errors import InputError
from ..hardware import Cluster, collective_ms
from .fit import Observed
from .nsight import SQLITE_MAGIC, read_nsight_events

__all__ = ["GEMM_OPS", "KERNEL_COLUMNS", "read_kernel_times", "kernels_observed"]

#: ATen ops whose kernels are GEMMs, and where their two matrices are among the inputs.
GEMM_OPS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2),
            "aten::_scaled_mm": (0, 1)}
_ATTENTION_OPS = ("aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention")
_ATTENTION_KERNELS = ("flash", "fmha", "attention")
#: Bytes of one element by the dtype names traces write (``Input type`` and NCCL's ``dtype``).
DTYPE_BYTES = {"float": 4, "Float": 4, "c10::BFloat16": 2, "BFloat16": 2, "c10::Half": 2, "Half": 2,
               "double": 8, "c10::Float8_e4m3fn": 1, "Float8_e4m3fn": 1, "int": 4, "long int": 8}
#: Collective names as traces write them (NCCL's "Collective name", gloo's annotation), lower case without "_".
_COLLECTIVES = {"allreduce": "all_reduce", "allgather": "all_gather", "allgatherbase": "all_gather",
                "reducescatter": "reduce_scatter", "reducescatterbase": "reduce_scatter",
                "alltoall": "all_to_all", "alltoallbase": "all_to_all"}
KERNEL_COLUMNS = ("kind", "name", "op", "duration_ms", "flops", "batch", "m", "n", "k", "nbytes", "ranks",
                  "collective", "dtype")


def read_kernel_times(trace) -> pd.DataFrame:
    """The GEMM, attention and collective kernels of a PyTorch profiler Chrome trace or of an Nsight Systems
    SQLite export (module docstring).

    Examples
    --------
    >>> frame = read_kernel_times("tests/calibration/cuda_trace_fragment.json")
    >>> frame.groupby("kind").size().to_dict()
    {'attention': 1, 'collective': 4, 'gemm': 6}
    """
    path = as_path("trace", trace)
    if _is_sqlite(path):
        return _frame(path, [_kernel_row(kernel, op) for kernel, op in read_nsight_events(path)])
    document = load_json(path, "a PyTorch profiler trace (Chrome trace JSON)")
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(events, list):
        raise InputError(f"{path}: no 'traceEvents' list; expected a PyTorch profiler trace (Chrome trace JSON)")
    complete = [event for event in events if isinstance(event, dict) and event.get("ph") == "X"]
    ops = {event["args"]["External id"]: event for event in complete
           if event.get("cat") == "cpu_op" and "External id" in event.get("args", {})}
    kernels = [event for event in complete if event.get("cat") == "kernel"]
    ranks = int((document.get("distributedInfo") or {}).get("world_size", 1))
    rows = [_kernel_row(event, ops.get(event.get("args", {}).get("External id"))) for event in kernels] if kernels \
        else [_cpu_row(event, ranks) for event in complete]
    return _frame(path, rows)


def _is_sqlite(path) -> bool:
    if not path.is_file():
        return False
    with path.open("rb") as file:
        return file.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


def _frame(path, rows) -> pd.DataFrame:
    frame = pd.DataFrame([row for row in rows if row is not None], columns=list(KERNEL_COLUMNS))
    if frame.empty:
        raise InputError(f"{path}: no GEMM, attention or collective in the trace (record it with "
                         "torch.profiler.profile(record_shapes=True) so the ops carry their shapes)")
    return frame


def _kernel_row(kernel: dict, op: dict | None) -> dict | None:
    args, name = kernel.get("args", {}), kernel.get("name", "")
    if "Collective name" in args or name.startswith("nccl"):
        return _collective(kernel, args.get("Collective name", ""), args.get("In msg nelems"),
                           args.get("Out msg nelems"), args.get("dtype"), args.get("Group size", 1))
    if op is not None and op["name"] in GEMM_OPS:
        return _gemm(kernel, op)
    if any(word in name.lower() for word in _ATTENTION_KERNELS) or \
            (op is not None and op["name"].startswith(_ATTENTION_OPS)):
        return _attention(kernel, op)
    return None


def _cpu_row(event: dict, ranks: int) -> dict | None:
    name, args = event.get("name", ""), event.get("args", {})
    if event.get("cat") == "cpu_op" and name in GEMM_OPS:
        return _gemm(event, event)
    if event.get("cat") == "cpu_op" and name.startswith(_ATTENTION_OPS):
        return _attention(event, event)
    if name.startswith("gloo:") and args.get("Input Dims"):
        count = int(np.prod(args["Input Dims"][0]))
        return _collective(event, name.removeprefix("gloo:"), count, count, (args.get("Input type") or [""])[0],
                           ranks)
    return None


def _row(event: dict, kind: str, op: dict | None, **values) -> dict:
    return {"kind": kind, "name": event.get("name", ""), "op": None if op is None else op["name"],
            "duration_ms": float(event.get("dur", 0.0)) / 1e3, **values}


def _gemm(event: dict, op: dict) -> dict | None:
    dims = op.get("args", {}).get("Input Dims") or []
    first, second = GEMM_OPS[op["name"]]
    if len(dims) <= second or len(dims[first]) < 2 or len(dims[second]) < 2:
        return None
    a, b = dims[first], dims[second]
    batch = int(np.prod(a[:-2])) if len(a) > 2 else 1
    m, k, n = int(a[-2]), int(a[-1]), int(b[-1])
    types = op.get("args", {}).get("Input type") or []
    dtype = types[first] if len(types) > first else ""
    size = DTYPE_BYTES.get(dtype, 2)
    return _row(event, "gemm", op, flops=2.0 * batch * m * n * k, batch=batch, m=m, n=n, k=k,
                nbytes=float(size * batch * (m * k + k * n + m * n)), dtype=dtype)


def _attention(event: dict, op: dict | None) -> dict:
    dims = (op or {}).get("args", {}).get("Input Dims") or []
    if len(dims) >= 2 and len(dims[0]) == 4 and len(dims[1]) == 4:
        # _flash_attention_* takes (batch, sequence, heads, head dim); _scaled_dot_product_* (batch, heads, ...)
        sequence_first = (op or {}).get("name", "").startswith("aten::_flash_attention")
        (b, s_q, h, d), s_k = (dims[0], dims[1][1]) if sequence_first else \
            ((dims[0][0], dims[0][2], dims[0][1], dims[0][3]), dims[1][2])
        flops = 4.0 * b * h * s_q * s_k * d
    else:
        flops = np.nan
    return _row(event, "attention", op, flops=flops)


def _collective(event: dict, name: str, count_in, count_out, dtype, ranks) -> dict:
    key = name.lower().removeprefix("nccl").replace("_", "")
    collective = _COLLECTIVES.get(key, key)
    counts = [value for value in (count_in, count_out) if isinstance(value, int | float)]
    size = DTYPE_BYTES.get(dtype or "", 2)
    return _row(event, "collective", None, collective=collective, ranks=int(ranks),
                nbytes=float(max(counts) * size) if counts else np.nan, dtype=dtype)


#: Trace dtype names -> the device's peak they run at.
_PEAKS = {"float": "fp32", "Float": "fp32", "c10::Float8_e4m3fn": "fp8", "Float8_e4m3fn": "fp8"}


def kernels_observed(kernels) -> Observed:
    """The GEMMs and collectives of ``kernels`` (a :func:`read_kernel_times` frame or a trace) as the model
    prices them: a GEMM by :meth:`~sappkit.hardware.DeviceConfig.matmul_ms`, a collective of ``ranks`` neighbouring
    ranks by :func:`~sappkit.hardware.collective_ms` on :meth:`~sappkit.hardware.Cluster.link` (attention kernels
    are read, not fitted)."""
    frame = kernels if isinstance(kernels, pd.DataFrame) else read_kernel_times(kernels)
    frame = frame[(frame["kind"] == "gemm") | ((frame["kind"] == "collective") & (frame["ranks"] > 1))]
    frame = frame[frame["duration_ms"] > 0].reset_index(drop=True)
    if frame.empty:
        raise InputError("kernels: no GEMM and no collective over more than one rank to fit")

    def predict(cluster: Cluster) -> np.ndarray:
        times = []
        for row in frame.itertuples():
            if row.kind == "gemm":
                times.append(cluster.device.matmul_ms(row.flops, row.nbytes, _PEAKS.get(row.dtype, "bf16"),
                                                      size=row.flops / row.batch))
            else:
                ranks = int(row.ranks)
                times.append(collective_ms(row.collective, row.nbytes, ranks, cluster.link(ranks, 1)))
        return np.array(times)

    return Observed(frame["duration_ms"].to_numpy(dtype=float), predict)
