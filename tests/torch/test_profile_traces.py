"""read_profile_times on PyTorch profiler traces recorded from real modules on CPU.

The expected times come from the trace another way than the reader takes
them: a layer's forward is its module span; its backward is every
``autograd::engine::evaluate_function`` event that a forward-to-backward
flow (``fwdbwd``) starting inside the span leads to (the reader follows
autograd sequence numbers instead). Both must agree to the microsecond.
"""

import json

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from sappkit import InputError, read_profile_times
from sappkit.trainers.profiles import profile_layer_table


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, width=32, depth=4):
        super().__init__()
        self.embed = nn.Embedding(100, width)
        self.layers = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 100)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    torch.manual_seed(0)
    model = Model()
    tokens = torch.randint(0, 100, (4, 16))
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as recorded:
        for _ in range(3):  # three micro-batches
            model(tokens).logsumexp(-1).mean().backward()
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    recorded.export_chrome_trace(str(path))
    return path


def expected_times(path, pattern):
    """``{layer: (forward_us, backward_us)}`` per pass, by the flow events (module docstring)."""
    import re

    events = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X" and re.search(pattern, e["name"])]
    starts = {e["id"]: e["ts"] for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "s"}
    finishes = {e["id"]: e["ts"] for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "f"}
    backward = [e for e in events if e.get("ph") == "X" and e["name"].startswith("autograd::engine::evaluate_function")]
    found = {}
    for span in spans:
        layer = re.search(pattern, span["name"]).group(1)
        ids = [i for i, ts in starts.items() if span["ts"] <= ts <= span["ts"] + span["dur"] and i in finishes]
        hit = {}
        for i in ids:
            around = [e for e in backward if e["ts"] <= finishes[i] <= e["ts"] + e["dur"]]
            outer = min(around, key=lambda e: e["ts"])  # the outermost evaluate_function holding the flow's end
            hit[(outer["ts"], outer["dur"])] = outer["dur"]
        forward, back, passes = found.get(layer, (0.0, 0.0, 0))
        found[layer] = (forward + span["dur"], back + sum(hit.values()), passes + 1)
    return {layer: (f / n, b / n, n) for layer, (f, b, n) in found.items()}


def test_layer_times_match_the_traces_own_op_durations_to_the_microsecond(trace):
    times = read_profile_times(trace, r"nn\.Module: Block_(\d+)", head_pattern=r"nn\.Module: (Embedding_0)",
                               tail_pattern=r"nn\.Module: (Linear_8)$")
    expected = expected_times(trace, r"nn\.Module: (Block_\d+|Embedding_0|Linear_8)$")
    assert times["role"].tolist() == ["head", "body", "body", "body", "body", "tail"]
    assert times["passes"].tolist() == [3] * 6
    for row in times.itertuples(index=False):
        key = row.layer if row.role != "body" else f"Block_{row.layer}"
        forward, backward, passes = expected[key]
        assert abs(row.forward_time * 1000 - forward) < 1  # microseconds
        assert abs(row.backward_time * 1000 - backward) < 1
        assert row.backward_time > 0
    assert times.attrs["time_unit"] == "ms"


def test_the_profiled_times_fill_a_layer_table(trace):
    import pandas as pd

    times = read_profile_times(trace, r"nn\.Module: Block_(\d+)", head_pattern=r"nn\.Module: (Embedding_0)",
                               tail_pattern=r"nn\.Module: (Linear_8)$")
    rows = [dict(kind="block", role="body", count=4, param_mb=1, option=o, forward_time=2.0, backward_time=b,
                 activation_mb=1) for o, b in (("none", 4.0), ("full", 6.0))]
    rows += [dict(kind="embed", role="head", count=1, param_mb=1, option="none", forward_time=1, backward_time=1,
                  activation_mb=1),
             dict(kind="head", role="tail", count=1, param_mb=1, option="none", forward_time=1, backward_time=1,
                  activation_mb=1)]
    table = profile_layer_table(pd.DataFrame(rows), times)
    body = times[times["role"] == "body"]
    block = table.rows("block")
    assert table.time_unit == "ms"
    assert block.loc["none", "forward_time"] == pytest.approx(body["forward_time"].mean())
    assert block.loc["none", "backward_time"] == pytest.approx(body["backward_time"].mean())
    # full keeps its recompute (2 table units of backward per 2 of forward), scaled as the forward was
    assert block.loc["full", "backward_time"] == pytest.approx(body["backward_time"].mean()
                                                               + 2.0 * body["forward_time"].mean() / 2.0)
    assert table.rows("embed").loc["none", "forward_time"] == pytest.approx(times["forward_time"].iloc[0])


def test_a_pattern_that_matches_nothing_is_refused(trace):
    with pytest.raises(InputError) as caught:
        read_profile_times(trace, r"nn\.Module: Decoder_(\d+)")
    assert str(caught.value) == f"{trace}: no event name matches layer_pattern 'nn\\\\.Module: Decoder_(\\\\d+)'"
