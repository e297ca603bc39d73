"""Per-layer forward and backward times read from a profiler trace: PyTorch's and MindSpore's Chrome traces.

Both profilers write the Chrome trace event format: a JSON list of events,
or an object whose ``traceEvents`` holds them, each complete event (``"ph":
"X"``) with a ``name``, ``pid``, ``tid``, start ``ts`` and duration ``dur``
in microseconds (numbers or numeric strings). ``layer_pattern`` is a
regular expression; an event whose name it matches (``re.search``) is one
forward pass of a layer, named by the pattern's first group, else by the
whole name; a match inside another match is not counted twice.

- **PyTorch** (``torch.profiler.profile(..., with_stack=True).export_chrome_trace``):
  a layer's forward is its matched span (``nn.Module: Block_3``, or a
  ``record_function`` label). Every operator the span runs carries the
  autograd ``Sequence number`` of the node it records; the node's backward
  runs as ``autograd::engine::evaluate_function: ...`` with the same number,
  and those events' durations (outermost ones, so nested backward calls
  count once) are the layer's backward. Weight-gradient accumulation
  (``AccumulateGrad``, no sequence number) is not attributed to a layer.
- **MindSpore** (``trace_view.json``): the ``Scope Layer`` process (its
  ``process_name`` metadata event) holds one complete event per scope level,
  ``tid`` the depth. The depth-0 scopes split the step: ``Default`` is the
  forward, ``Gradients`` the backward, ``recompute_Default`` the forward
  recomputed in the backward. A layer's scope events inside ``Default`` are
  its forward, inside ``Gradients`` or ``recompute_Default`` its backward, as
  MindFormers' pipeline balance tool reads them to fill head, body and tail
  times.

Times come out in ms per pass (per micro-batch): a layer's forward is the
mean of its forward spans, its backward the sum of its backward events over
the number of forward spans.

Sources followed: PyTorch's Chrome trace export (``torch.profiler``, the
``Sequence number`` and ``Fwd thread id`` arguments of ``cpu_op`` events,
PyTorch 2.13); MindSpore ``mindspore/profiler/analysis/parser/
timeline_creator/scope_layer_timeline_creator.py`` and
``mindspore/profiler/common/constant.py`` (``SCOPE_LAYER_PID``,
``TOP_SCOPE_NAMES``); MindSpore's profiler tutorial
(``tutorials/source_en/debug/profiler.md``, mindspore-ai/docs
``9e844dc65dc5``: ``trace_view.json`` in the Chrome/Ascend trace format);
MindFormers' pipeline balance ``ComputationAnalyzer`` (its trace reader).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._check import as_whole, check_choice, short
from .._files import as_path, load_json
from ..columns import BACKWARD_TIME, BODY, FORWARD_TIME, HEAD, KIND, OPTION, ROLE, TAIL
from ..errors import InputError
from ..layers.table import LayerTable, as_layer_table
from .patterns import exponential_repeat

__all__ = ["read_profile_times", "profile_layer_table", "PROFILE_COLUMNS"]

#: Columns of :func:`read_profile_times`' frame.
PROFILE_COLUMNS = ("layer", "role", "passes", "forward_time", "backward_time")
_BACKWARD = "autograd::engine::evaluate_function: "
_SCOPE_LAYER = "Scope Layer"
_PHASES = {"Default": "forward", "Gradients": "backward", "recompute_Default": "backward"}
#: Longest layer, head or tail pattern accepted.
_MAX_PATTERN = 1000


@dataclass(frozen=True)
class _Event:
    name: str
    pid: object
    tid: object
    ts: float
    dur: float
    args: dict
    sequence: int | None = None
    """The autograd ``Sequence number`` the event records (PyTorch), if any."""

    @property
    def end(self) -> float:
        return self.ts + self.dur


def read_profile_times(path, layer_pattern: str, *, head_pattern: str | None = None,
                       tail_pattern: str | None = None, trace_format: str | None = None) -> pd.DataFrame:
    """Per-layer forward and backward times (ms per micro-batch) from a PyTorch or MindSpore trace.

    Parameters
    ----------
    path : path
        The Chrome-trace JSON (``torch.profiler``'s export, MindSpore's ``trace_view.json``).
    layer_pattern : str
        A regular expression matching a body layer's forward event names
        (module docstring); its first group names the layer.
    head_pattern, tail_pattern : str, optional
        The same for the embedding and the loss / LM head.
    trace_format : {"pytorch", "mindspore"}, optional
        Default: MindSpore when the trace has a ``Scope Layer`` process.

    Returns
    -------
    DataFrame
        ``layer``, ``role`` (``head``, ``body``, ``tail``), ``passes`` (forward
        spans found), ``forward_time``, ``backward_time`` in ms; head first,
        the body in the order of its first forward, tail last.
    """
    events, meta = _events(path)
    patterns = {role: _pattern(name, value) for role, name, value in (
        (HEAD, "head_pattern", head_pattern), (BODY, "layer_pattern", layer_pattern),
        (TAIL, "tail_pattern", tail_pattern)) if value is not None or role == BODY}
    scope = _scope_pid(meta)
    kind = trace_format if trace_format is not None else ("mindspore" if scope is not None else "pytorch")
    kind = check_choice("trace_format", kind, ("pytorch", "mindspore"))
    if kind == "mindspore":
        if scope is None:
            raise InputError(f"{path}: no '{_SCOPE_LAYER}' process in this trace (MindSpore writes one in "
                             "trace_view.json); is it a PyTorch trace?")
        rows = _mindspore_rows(events, scope, patterns)
    else:
        rows = _pytorch_rows(events, patterns)
    if not any(role == BODY for _, role, *_ in rows):
        raise InputError(f"{path}: no event name matches layer_pattern {layer_pattern!r}")
    frame = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
    order = frame[ROLE].map({HEAD: 0, BODY: 1, TAIL: 2})
    frame = frame.assign(_order=order).sort_values("_order", kind="stable").drop(columns="_order")
    frame.attrs["time_unit"] = "ms"
    return frame.reset_index(drop=True)


def _pattern(name: str, value) -> re.Pattern:
    """``value`` compiled; one that backtracks exponentially (:mod:`sappkit.trainers.patterns`) refused."""
    if not isinstance(value, str) or not value or len(value) > _MAX_PATTERN:
        raise InputError(f"{name} must be a regular expression (a non-empty string of at most {_MAX_PATTERN} "
                         f"characters); got {short(value)}")
    try:
        pattern = re.compile(value)
        why = exponential_repeat(value)
    except (re.error, RecursionError, OverflowError) as error:
        raise InputError(f"{name} {short(value)} is not a regular expression ({error})") from None
    if why:
        raise InputError(f"{name} {short(value)} backtracks exponentially on names that almost match: {why}; "
                         "write each repeat so that the next character tells its iterations apart (e.g. '(a+)+' "
                         "as 'a+')")
    return pattern


def _events(path) -> tuple[list[_Event], list[dict]]:
    """Complete events and metadata events of a Chrome trace."""
    document = load_json(as_path("path", path), "a Chrome-trace JSON (torch.profiler, MindSpore trace_view.json)")
    raw = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(raw, list):
        raise InputError(f"{path}: a Chrome trace is a list of events or an object with 'traceEvents'")
    events, meta = [], []
    for index, event in enumerate(raw):
        if not isinstance(event, dict) or event.get("ph") not in ("M", "X"):
            continue
        args = event.get("args")
        if args is not None and not isinstance(args, dict):
            raise InputError(f"{path}: trace event {index} ({short(event.get('name'))}): args must be an object; "
                             f"got {short(args)}")
        if event["ph"] == "M":
            meta.append(event)
        else:
            events.append(_Event(str(event.get("name", "")), _key(event.get("pid")), _key(event.get("tid")),
                                 _micros(path, event, "ts", index), _micros(path, event, "dur", index), args or {},
                                 _sequence(path, event, args or {}, index)))
    return events, meta


def _key(value) -> str:
    """A pid or tid as the text it is compared by (profilers write ints or strings)."""
    return str(value) if isinstance(value, str | int | float | bool | type(None)) else short(value)


def _sequence(path, event: dict, args: dict, index: int) -> int | None:
    number = args.get("Sequence number")
    if number is None:
        return None
    whole = as_whole(number) if not isinstance(number, str) else (int(number) if number.isdigit() and
                                                                    len(number) <= 19 else None)
    if whole is None or whole < 0:
        raise InputError(f"{path}: trace event {index} ({short(event.get('name'))}): args 'Sequence number' must "
                         f"be a whole number >= 0; got {short(number)}")
    return whole


def _micros(path, event: dict, key: str, index: int) -> float:
    try:
        value = float(event[key])
    except (KeyError, TypeError, ValueError, OverflowError):
        raise InputError(f"{path}: trace event {index} ({short(event.get('name'))}): {key} must be a number of "
                         f"microseconds; got {short(event.get(key))}") from None
    if not np.isfinite(value) or (key == "dur" and value < 0):
        raise InputError(f"{path}: trace event {index} ({short(event.get('name'))}): {key} must be a finite "
                         f"number of microseconds{' >= 0' if key == 'dur' else ''}; got {value}")
    return value


def _scope_pid(meta: list[dict]):
    for event in meta:
        if event.get("name") == "process_name" and (event.get("args") or {}).get("name") == _SCOPE_LAYER:
            return event.get("pid")
    return None


def _matches(events: list[_Event], patterns: dict) -> list[tuple[str, str, _Event]]:
    """``(role, layer, event)`` for every outermost matched event (per pid and tid)."""
    found = []
    for event in sorted(events, key=lambda e: (e.pid, e.tid, e.ts, -e.dur)):
        for role, pattern in patterns.items():
            match = pattern.search(event.name)
            if match:
                layer = match.group(1) if pattern.groups else match.group(0)
                found.append((role, layer, event))
                break
    outer, last = [], {}
    for role, layer, event in found:
        key = (event.pid, event.tid)
        if key in last and event.ts < last[key].end and event.end <= last[key].end:
            continue
        last[key] = event
        outer.append((role, layer, event))
    return outer


def _pytorch_rows(events: list[_Event], patterns: dict) -> list[tuple]:
    spans = _matches(events, patterns)
    by_thread: dict[tuple, list[_Event]] = {}
    backward: dict[int, list[_Event]] = {}
    for event in events:
        if event.sequence is not None and event.name.startswith(_BACKWARD):
            backward.setdefault(event.sequence, []).append(event)
        elif event.sequence is not None:
            by_thread.setdefault((event.pid, event.tid), []).append(event)
    starts = {}
    for thread, ops in by_thread.items():  # each thread's ops by start, so a span finds its own by bisection
        ops.sort(key=lambda op: op.ts)
        starts[thread] = [op.ts for op in ops]
    totals: dict[tuple, list] = {}
    for role, layer, span in spans:
        ops, at = by_thread.get((span.pid, span.tid), []), starts.get((span.pid, span.tid), [])
        inside = ops[bisect.bisect_left(at, span.ts):bisect.bisect_right(at, span.end)]
        numbers = {op.sequence for op in inside if op.end <= span.end}
        passes = _outermost([event for number in numbers for event in backward.get(number, [])])
        entry = totals.setdefault((role, layer), [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += span.dur
        entry[2] += sum(event.dur for event in passes)
    return _rows(totals)


def _outermost(events: list[_Event]) -> list[_Event]:
    """Events not inside another of the list (same thread)."""
    kept, last = [], {}
    for event in sorted(events, key=lambda e: (e.pid, e.tid, e.ts, -e.dur)):
        key = (event.pid, event.tid)
        if key in last and event.end <= last[key].end:
            continue
        last[key] = event
        kept.append(event)
    return kept


def _mindspore_rows(events: list[_Event], scope, patterns: dict) -> list[tuple]:
    scoped = [event for event in events if event.pid == _key(scope)]
    phases = sorted(((event.ts, event.end, _PHASES[event.name]) for event in scoped
                     if event.name in _PHASES and str(event.tid) == "0"), key=lambda phase: phase[0])
    if not phases:
        raise InputError(f"the '{_SCOPE_LAYER}' process has no top scope ({', '.join(_PHASES)}) at depth 0")
    starts = np.array([phase[0] for phase in phases])
    totals: dict[tuple, list] = {}
    for role, layer, event in _matches(scoped, patterns):
        at = int(np.searchsorted(starts, event.ts, side="right")) - 1
        if at < 0 or event.end > phases[at][1]:
            continue  # outside every top scope: not a pass of the step
        entry = totals.setdefault((role, layer), [0, 0.0, 0.0])
        if phases[at][2] == "forward":
            entry[0] += 1
            entry[1] += event.dur
        else:
            entry[2] += event.dur
    return _rows(totals)


def _rows(totals: dict) -> list[tuple]:
    rows = []
    for (role, layer), (passes, forward, backward) in totals.items():
        if passes:
            rows.append((layer, role, passes, forward / passes / 1000.0, backward / passes / 1000.0))
    return rows


def profile_layer_table(layers, times: pd.DataFrame, *, option: str = "none"):
    """``layers`` with the head, body and tail times of a profile (:func:`read_profile_times`).

    The head and tail rows take their measured times. Each body kind's
    ``option`` row (the option the profiled run used) takes the mean
    forward and backward of its layers in the profile (the k-th profiled
    body layer is the table's k-th body layer in model order when the counts
    agree; with one body kind every profiled layer counts). The other options
    keep their extra recompute, scaled as the forward was:
    ``B(o) = B_measured + (B_table(o) - B_table(option)) · F_measured / F_table``.
    The table's time unit becomes ``ms``.
    """
    table = as_layer_table(layers)
    frame = table.frame.copy()
    body = times[times[ROLE] == BODY]
    kinds = table.body_kinds
    if len(kinds) > 1 and len(body) != table.body_layers:
        raise InputError(f"the profile times {len(body)} body layers and the table's {len(kinds)} body kinds hold "
                         f"{table.body_layers}: profile every layer to map them to kinds")
    position = 0
    for kind in kinds:
        share = body if len(kinds) == 1 else body.iloc[position:position + table.count(kind)]
        position += table.count(kind)
        _set_times(frame, kind, option, share[FORWARD_TIME].mean(), share[BACKWARD_TIME].mean())
    for role in (HEAD, TAIL):
        measured = times[times[ROLE] == role]
        row = table.head if role == HEAD else table.tail
        if len(measured) and row is not None:
            _set_times(frame, str(row[KIND]), str(row[OPTION]), measured[FORWARD_TIME].mean(),
                       measured[BACKWARD_TIME].mean())
    return LayerTable(frame, const_mb=table.const_mb, device=table.device, time_unit="ms")


def _set_times(frame: pd.DataFrame, kind: str, option: str, forward: float, backward: float) -> None:
    rows = frame[KIND] == kind
    reference = frame[rows & (frame[OPTION] == option)]
    if reference.empty:
        raise InputError(f"kind {kind!r} has no option {option!r} to set the profiled times on")
    base_forward, base_backward = float(reference[FORWARD_TIME].iloc[0]), float(reference[BACKWARD_TIME].iloc[0])
    scale = forward / base_forward if base_forward else 1.0
    frame.loc[rows, BACKWARD_TIME] = backward + (frame.loc[rows, BACKWARD_TIME] - base_backward) * scale
    frame.loc[rows, FORWARD_TIME] = forward
