"""read_profile_times on traces built to the profilers' formats: MindSpore's trace_view.json, PyTorch's events.

(``tests/torch/test_profile_traces.py`` records PyTorch traces from real modules.)

MindSpore's ``Scope Layer`` process (named by a ``process_name`` metadata
event) holds one complete event per scope level, ``tid`` the depth; the
depth-0 scopes ``Default``, ``Gradients`` and ``recompute_Default`` are the
forward, the backward and the forward recomputed in the backward. Times are
microseconds, written as strings as MindSpore writes its Decimal times.
"""

import json

import pytest

from sappkit import InputError, read_profile_times

LAYERS = 3
STEPS = 2


def scope(name, depth, ts, dur):
    return {"ph": "X", "name": name, "pid": 3, "tid": depth, "ts": f"{ts:.3f}", "dur": f"{dur:.3f}"}


def trace_view(recompute=True):
    """Two micro-batches: per layer i a forward of 100 + 10 i us, a backward of 200 + 20 i, a recompute of 90."""
    events = [{"ph": "M", "name": "process_name", "pid": 3, "tid": 0, "args": {"name": "Scope Layer"}},
              {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Ascend Hardware"}},
              {"ph": "X", "name": "MatMul-op1", "pid": 1, "tid": 7, "ts": 5.0, "dur": 3.0}]
    expected = {}
    t = 1000.0
    for _ in range(STEPS):
        start = t
        events.append(scope("network-TrainOneStepCell", 1, t, 0))
        events.append(scope("0-embedding", 3, t, 40.0))
        t += 40.0
        for i in range(LAYERS):
            events.append(scope(f"{i}-LlamaDecodeLayer", 3, t, 100 + 10 * i))
            events.append(scope("attention", 4, t, 50))  # inside the layer: not a second pass
            t += 100 + 10 * i
        events.append(scope("Default", 0, start, t - start))
        start = t
        for i in reversed(range(LAYERS)):
            if recompute:
                events.append(scope("recompute_Default", 0, t, 90))
                events.append(scope(f"{i}-LlamaDecodeLayer", 3, t, 90))
                t += 90
            events.append(scope(f"{i}-LlamaDecodeLayer", 3, t, 200 + 20 * i))
            events.append(scope("Gradients", 0, t, 200 + 20 * i))
            t += 200 + 20 * i
        events.append(scope("Gradients", 0, t, 60))
        events.append(scope("0-embedding", 3, t, 60))
        t += 60
    for i in range(LAYERS):
        expected[str(i)] = ((100 + 10 * i) / 1000, (200 + 20 * i + (90 if recompute else 0)) / 1000)
    return {"traceEvents": events}, expected


@pytest.mark.parametrize("recompute", [True, False])
def test_mindspore_scope_layers_give_forward_and_backward_to_the_microsecond(tmp_path, recompute):
    document, expected = trace_view(recompute)
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(document))
    times = read_profile_times(path, r"(\d+)-LlamaDecodeLayer", head_pattern=r"\d+-(embedding)")
    assert times["layer"].tolist() == ["embedding", "0", "1", "2"]
    assert times["passes"].tolist() == [STEPS] * 4
    for row in times[times["role"] == "body"].itertuples(index=False):
        forward, backward = expected[row.layer]
        assert abs(row.forward_time - forward) * 1000 < 1e-6 and abs(row.backward_time - backward) * 1000 < 1e-6
    head = times.iloc[0]
    assert (head.forward_time, head.backward_time) == (0.04, 0.06)


def test_a_list_of_events_without_the_scope_layer_is_not_a_mindspore_trace(tmp_path):
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps([{"ph": "X", "name": "0-LlamaDecodeLayer", "pid": 1, "tid": 0, "ts": 1, "dur": 2}]))
    with pytest.raises(InputError) as caught:
        read_profile_times(path, r"(\d+)-LlamaDecodeLayer", trace_format="mindspore")
    assert str(caught.value) == (f"{path}: no 'Scope Layer' process in this trace (MindSpore writes one in "
                                 "trace_view.json); is it a PyTorch trace?")


@pytest.mark.parametrize("document, kwargs, message", [
    ({"traceEvents": {"a": 1}}, {}, "{path}: a Chrome trace is a list of events or an object with 'traceEvents'"),
    ([{"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": "soon", "dur": 1}], {},
     "{path}: trace event 0 ('x'): ts must be a number of microseconds; got 'soon'"),
    ([], {"layer_pattern": "("}, "layer_pattern '(' is not a regular expression (missing ), unterminated "
                                 "subpattern at position 0)"),
    ([], {"head_pattern": ""}, "head_pattern must be a regular expression (a non-empty string of at most 1000 "
                               "characters); got ''"),
])
def test_bad_traces_and_patterns_are_refused_naming_what(tmp_path, document, kwargs, message):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputError) as caught:
        read_profile_times(path, **{"layer_pattern": r"(\d+)-Layer", **kwargs})
    assert str(caught.value) == message.format(path=path)


def test_a_pytorch_layers_backward_counts_each_backward_call_once(tmp_path):
    """Two autograd nodes recorded inside the layer's forward; one's backward runs inside the other's."""
    def op(name, ts, dur, seq, tid=1):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                "args": {"Sequence number": seq, "Fwd thread id": 0}}
    events = [{"ph": "X", "cat": "python_function", "name": "nn.Module: Block_0", "pid": 1, "tid": 1, "ts": 100,
               "dur": 50, "args": {}},
              op("aten::mm", 110, 10, 7), op("aten::gelu", 125, 5, 8), op("aten::mm", 200, 10, 9),  # 9: not the layer's
              op("autograd::engine::evaluate_function: CheckpointFunctionBackward", 300, 40, 8),
              op("autograd::engine::evaluate_function: MmBackward0", 310, 12, 7),  # nested in the one above
              op("autograd::engine::evaluate_function: MmBackward0", 400, 9, 9)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    times = read_profile_times(path, r"nn\.Module: Block_(\d+)")
    assert times[["layer", "passes", "forward_time", "backward_time"]].values.tolist() == [["0", 1, 0.05, 0.04]]
