"""What a forward keeps for its backward, the peak its backward reaches, and how long each pass takes.

- :class:`KeptStorages` counts the storages saved for the backward, seen
  through ``torch.autograd.graph.saved_tensors_hooks`` (and, for selective
  checkpointing, the op outputs its policy caches): each storage once, by
  its address, and only while the graph still holds it; excluded addresses
  (parameters, buffers, inputs shared by every layer) are not counted.
- :func:`backward_peak` is the most memory the backward holds beyond what
  was live when it started: on CUDA the caching allocator's peak, on CPU the
  running sum of the profiler's memory events (allocations and frees).
- :func:`elapsed_ms` times one call: CUDA events on a GPU, the wall clock on CPU.
"""

from __future__ import annotations

import os
import sys
import time
import weakref
from contextlib import contextmanager

import torch
from torch.profiler import ProfilerActivity, profile, record_function

__all__ = ["KeptStorages", "backward_peak", "elapsed_ms", "tensors"]

_BACKWARD = "sappkit::backward"


class KeptStorages:
    """Storages a forward saves for its backward, each counted once.

    Parameters
    ----------
    excluded : set of int
        Storage addresses never counted (parameters, buffers, shared inputs).
    """

    def __init__(self, excluded: set[int]):
        self._excluded = excluded
        self._packed: list[tuple[weakref.ref, int, int]] = []
        self._cached: dict[int, int] = {}

    @contextmanager
    def saving(self):
        """Count what autograd saves while the block runs its forward inside."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
            yield self

    def _pack(self, tensor):
        # A detached alias that only the graph holds: it dies with the node that saved it, and holds no
        # grad_fn (saving an op's own output would otherwise make a cycle only the garbage collector frees).
        alias = tensor.detach()
        storage = alias.untyped_storage()
        self._packed.append((weakref.ref(alias), storage.data_ptr(), storage.nbytes()))
        return alias

    def cache(self, output) -> None:
        """Count the tensors in ``output``, an op's result a selective-checkpoint policy keeps."""
        for tensor in tensors(output):
            storage = tensor.untyped_storage()
            self._cached[storage.data_ptr()] = storage.nbytes()

    def nbytes(self) -> int:
        """Bytes of the distinct storages still saved (a branch the graph dropped no longer counts)."""
        kept = dict(self._cached)
        for ref, address, nbytes in self._packed:
            if ref() is not None:
                kept[address] = nbytes
        return sum(nbytes for address, nbytes in kept.items() if address not in self._excluded)


def _unpack(tensor):
    return tensor


def tensors(value):
    """The tensors in a nested tuple, list or dict (op outputs, a part's inputs).

    Examples
    --------
    >>> [t.numel() for t in tensors({"cos": torch.zeros(2), "rest": (torch.zeros(3), "mask")})]
    [2, 3]
    """
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors(item)


def backward_peak(forward, backward, device: torch.device) -> int:
    """Bytes the backward holds at its peak beyond what was live when it started.

    ``forward()`` returns what ``backward(result)`` takes. On CPU both run
    under the profiler, so the frees of what the forward kept are seen.
    """
    if device.type == "cuda":
        result = forward()
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        backward(result)
        torch.cuda.synchronize(device)
        return max(torch.cuda.max_memory_allocated(device) - start, 0)
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = forward()
        with record_function(_BACKWARD):
            backward(result)
        del result
    events = list(prof.profiler.kineto_results.events())
    window = next(e for e in events if e.name() == _BACKWARD)
    live = start = peak = 0
    for event in sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        if event.start_ns() >= window.end_ns():
            break
        live += event.nbytes()
        if event.start_ns() < window.start_ns():
            start = peak = live
        else:
            peak = max(peak, live)
    return max(peak - start, 0)


@contextmanager
def _quiet_stderr():
    """Silence file descriptor 2: PyTorch's profiler writes start/stop lines there from C++."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def elapsed_ms(call, device: torch.device):
    """``(result, milliseconds)`` of one ``call()``: CUDA events on a GPU, the wall clock on CPU."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = call()
        end.record()
        end.synchronize()
        return result, start.elapsed_time(end)
    began = time.perf_counter()
    result = call()
    return result, (time.perf_counter() - began) * 1e3
