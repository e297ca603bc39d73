"""Random small cases, an independent stage-memory model and brute force for the recompute chooser tests.

The memory model here is written from docs/design.md ("One memory model", the chooser's terms)
directly, in exact fractions,
without sappkit.recompute.pricing: the chooser's reported memory and its optimality are
checked against it.
"""

import itertools
import math
from fractions import Fraction

import pandas as pd
import pytest

from sappkit.layers.table import LayerTable
from sappkit.pipeline.orders import stage_orders
from sappkit.pipeline.phases import BACKWARD, FORWARD
from sappkit.recompute.partition import Partition

OPTIONS = ("none", "selective", "full")


def random_table(rng, *, kinds=1, once=False, grads=False, head=True, tail=True, options=OPTIONS):
    """A layer table with integer memories (so 1 MB buckets are exact) and random times."""
    rows = []
    if head:
        rows.append(dict(kind="embed", role="head", count=1, param_mb=int(rng.integers(0, 30)), option="none",
                         forward_time=1.0, backward_time=2.0, activation_mb=int(rng.integers(0, 10)),
                         grad_mb=int(rng.integers(0, 5)) if grads else 0, working_mb=0))
    for k in range(kinds):
        act = sorted(rng.integers(1, 60, len(options)).tolist(), reverse=True)
        backward = sorted((rng.integers(20, 60, len(options)) / 10).tolist())
        grad = int(rng.integers(0, 8)) if grads else 0
        for option, a, b in zip(options, act, backward):
            rows.append(dict(kind=f"body{k}", role="body", count=0, param_mb=int(rng.integers(0, 30)), option=option,
                             forward_time=float(rng.integers(5, 15) / 10), backward_time=b, activation_mb=a,
                             memory_once_mb=int(rng.integers(0, 6)) if once else 0,
                             working_mb=int(rng.integers(0, 20)), first_working_mb=int(rng.integers(0, 20)),
                             grad_mb=grad))
    if tail:
        rows.append(dict(kind="loss", role="tail", count=1, param_mb=int(rng.integers(0, 30)), option="none",
                         forward_time=1.0, backward_time=2.0, activation_mb=int(rng.integers(0, 10)),
                         working_mb=int(rng.integers(0, 10)), grad_mb=int(rng.integers(0, 5)) if grads else 0))
    frame = pd.DataFrame(rows)
    # Each kind's per-kind columns must agree across its rows.
    for kind, group in frame.groupby("kind"):
        frame.loc[group.index, "param_mb"] = group["param_mb"].iloc[0]
    return frame


def random_partition(rng, frame, *, stages, most=3, chunks=1, configured=True):
    """Random layer counts per cell (>= 1), kinds poured in model order, counts written into the table."""
    cells = [(c, s) for c in range(chunks) for s in range(stages)]
    counts = rng.integers(1, most + 1, len(cells))
    kinds = list(dict.fromkeys(frame.loc[frame["role"] == "body", "kind"]))
    total = int(counts.sum())
    split = sorted(rng.choice(range(1, total), len(kinds) - 1, replace=False).tolist()) if len(kinds) > 1 else []
    per_kind = [b - a for a, b in zip([0, *split], [*split, total])]
    order = [kind for kind, n in zip(kinds, per_kind) for _ in range(n)]
    for kind, n in zip(kinds, per_kind):
        frame.loc[frame["kind"] == kind, "count"] = n
    rows, at = [], 0
    for (c, s), n in zip(cells, counts):
        for kind in order[at:at + n]:
            rows.append((c, s, kind, 1))
        at += n
    table = LayerTable(frame)
    micro_batches = int(rng.integers(stages, 2 * stages + 1))
    options = [str(rng.choice(table.options(kind))) for kind in order] if configured else None
    part = Partition(stages=stages, micro_batches=micro_batches, chunks=chunks,
                     cells=pd.DataFrame(rows, columns=["chunk", "stage", "kind", "layers"]), configured=options)
    return table, part


class _Prices:
    """The table's rows as plain dicts (pandas lookups are too slow for brute force)."""

    def __init__(self, table):
        frame = table.frame
        self.rows = {(r["kind"], r["option"]): r for r in frame.to_dict("records")}
        self.param = {r["kind"]: r["param_mb"] for r in self.rows.values()}
        self.head = next((r for r in self.rows.values() if r["role"] == "head"), None)
        self.tail = next((r for r in self.rows.values() if r["role"] == "tail"), None)
        self.const = table.const_mb


_PRICES = {}


def _prices(table):
    if id(table) not in _PRICES or _PRICES[id(table)][0] is not table:
        _PRICES[id(table)] = (table, _Prices(table))
    return _PRICES[id(table)][1]


def _row(table, kind, option):
    return _prices(table).rows[kind, option]


def layer_memory(table, kind, option, n, *, offloaded=Fraction(0)):
    row = _row(table, kind, option)
    return (Fraction(row["activation_mb"]) - offloaded) * n + Fraction(row["memory_once_mb"])


def working_set(table, kind, option, column="working_mb"):
    run = "none" if option == "full" else option
    row, own = _row(table, kind, run), _row(table, kind, option)
    return Fraction(row["activation_mb"]) + Fraction(row["memory_once_mb"]) + Fraction(own[column])


def _stage_layers(part):
    """Each stage's body layers (as namedtuples), model order."""
    layers = list(part.body.itertuples(index=False))
    return [[layer for layer in layers if layer.stage == s] for s in range(part.stages)]


def overhead(table, part, s, layers):
    """SAPP's interleaved steady overhead of stage ``s`` at the configured options."""
    v, p = part.chunks, part.stages
    if v == 1:
        return Fraction(0)
    per_batch = [Fraction(0)] * v
    for layer in layers:
        per_batch[layer.chunk] += Fraction(_row(table, layer.kind, layer.configured)["activation_mb"])
    prices = _prices(table)
    if s == 0 and prices.head is not None:
        per_batch[0] += Fraction(prices.head["activation_mb"])
    if s == p - 1 and prices.tail is not None:
        per_batch[v - 1] += Fraction(prices.tail["activation_mb"])
    left = part.micro_batches - p
    pairs = [((v - 1 - i, i), left - s) for i in range(v // 2)]
    if not part.less_memory:
        pairs += [((v - 1 - i, i + 1), left - s) for i in range((v - 1) // 2)]
    pairs += [((v - 2 - i, i), s) for i in range((v - 1) // 2)]
    return max([Fraction(0)] + [factor * abs(per_batch[a] - per_batch[b]) for (a, b), factor in pairs])


def one_stage(table, part, s, layers, options, *, fsdp=False, offloaded=None, transit=Fraction(0)):
    """Stage ``s``'s ``(warm-up peak, second peak or None, time)``; ``options`` maps layer -> option."""
    offloaded = offloaded or {}
    p, v = part.stages, part.chunks
    counts = part.in_flight_counts
    prices = _prices(table)
    head, tail = prices.head, prices.tail
    param = sum(Fraction(prices.param[layer.kind]) for layer in layers) + Fraction(prices.const)
    steady = overhead(table, part, s, layers)  # SAPP's, in the second peak (one chunk: 0)
    warm = back = Fraction(0)
    time = 0.0
    for row, (c, at) in ((head, (0, 0)), (tail, (v - 1, p - 1))):
        if row is None or at != s:
            continue
        time += row["forward_time"] + row["backward_time"]  # the stage time includes the head and tail
        n = int(counts[c, s])
        kept = Fraction(row["activation_mb"]) * n + Fraction(row["memory_once_mb"])
        param += Fraction(row["param_mb"])
        warm += kept
        back += kept * (n - 1) / n + Fraction(row["grad_mb"])
        if row is tail:
            warm += Fraction(row["activation_mb"]) + Fraction(row["memory_once_mb"]) + Fraction(row["working_mb"])
    last_chunk = [layer for layer in layers if layer.chunk == v - 1]
    ending = last_chunk[-1].layer if last_chunk and not (s == p - 1 and tail is not None) else None
    for position, layer in enumerate(layers):
        option = options[layer.layer]
        n = layer.in_flight
        kept = layer_memory(table, layer.kind, option, n, offloaded=Fraction(offloaded.get(layer.layer, 0)))
        row = _row(table, layer.kind, option)
        warm += kept
        back += kept * (n - 1) / n + Fraction(row["grad_mb"])
        time += row["forward_time"] + row["backward_time"]
        if position == 0:
            back += working_set(table, layer.kind, option, "first_working_mb")
        if layer.layer == ending:
            warm += working_set(table, layer.kind, option)
    if v > 1:
        warm = stepped_warm_up(table, part, s, layers, options)
    return param + warm + transit, param + steady + back + transit if fsdp else None, time


def stepped_warm_up(table, part, s, layers, options):
    """More chunks: memory kept once plus the highest activation and working set held stepping stage ``s``'s
    order (a forward adds its cell's activation; a backward holds its cell's last layer's working set, the
    tail's on its cell, while it runs)."""
    p, v = part.stages, part.chunks
    prices = _prices(table)
    kept_once, activation, working = Fraction(0), [Fraction(0)] * v, [Fraction(0)] * v
    for layer in layers:
        row = _row(table, layer.kind, options[layer.layer])
        kept_once += Fraction(row["memory_once_mb"])
        activation[layer.chunk] += Fraction(row["activation_mb"])
        working[layer.chunk] = working_set(table, layer.kind, options[layer.layer])
    for row, (c, at) in ((prices.head, (0, 0)), (prices.tail, (v - 1, p - 1))):
        if row is not None and at == s:
            kept_once += Fraction(row["memory_once_mb"])
            activation[c] += Fraction(row["activation_mb"])
            if row is prices.tail:
                working[c] = Fraction(row["activation_mb"]) + Fraction(row["memory_once_mb"]) + Fraction(
                    row["working_mb"])
    held = peak = Fraction(0)
    for phase, chunk, _ in stage_orders(part.schedule, p, part.micro_batches, v, part.less_memory)[s]:
        held += activation[chunk] if phase == FORWARD else 0
        peak = max(peak, held + (working[chunk] if phase == BACKWARD else 0))
        held -= activation[chunk] if phase == BACKWARD else 0
    return kept_once + peak


def stage_memory(table, part, options, *, fsdp=False, offloaded=None, transit=None):
    """Per stage ``(warm-up peak, second peak or None, time)`` from docs/design.md's model, in exact fractions.

    ``options`` lists each layer's option; ``offloaded`` maps layer -> MB per micro-batch moved;
    ``transit`` maps stage -> MB held in transit.
    """
    transit = transit or {}
    options = dict(enumerate(options))
    return [one_stage(table, part, s, layers, options, fsdp=fsdp, offloaded=offloaded,
                      transit=Fraction(transit.get(s, 0)))
            for s, layers in enumerate(_stage_layers(part))]


def fits(peaks, limit):
    warm, back, _ = peaks
    return warm <= limit and (back is None or back <= limit)


def brute_force_stages(table, part, limit, offered, *, fsdp=False):
    """Per stage, the least time of any per-layer assignment that fits (inf when none)."""
    best = []
    for s, layers in enumerate(_stage_layers(part)):
        least = math.inf
        for picks in itertools.product(*(offered[layer.kind] for layer in layers)):
            options = {layer.layer: pick for layer, pick in zip(layers, picks)}
            peaks = one_stage(table, part, s, layers, options, fsdp=fsdp)
            if fits(peaks, limit):
                least = min(least, peaks[2])
        best.append(least)
    return best


def limit_between(table, part, offered, rng, *, fsdp=False):
    """A capacity between the lightest and the heaviest plan's peak (integer MB)."""
    body = part.body
    lightest = [offered[k][-1] for k in body["kind"]]
    heaviest = [offered[k][0] for k in body["kind"]]
    low = max(max(m for m in peak[:2] if m is not None) for peak in stage_memory(table, part, lightest, fsdp=fsdp))
    high = max(max(m for m in peak[:2] if m is not None) for peak in stage_memory(table, part, heaviest, fsdp=fsdp))
    return int(rng.integers(math.floor(low) - 5, math.ceil(max(high, low)) + 5))


def check_reported_memory(choice, fsdp=False, offloaded=None, transit=None, copy_time=None):
    """The chooser's stage frame equals the independent model, and fits (``copy_time``: stage -> time added)."""
    part, table = choice.pricing.partition, choice.pricing.layers
    options = choice.layer_options["option"].tolist()
    expected = stage_memory(table, part, options, fsdp=fsdp, offloaded=offloaded, transit=transit)
    for s, (warm, back, time) in enumerate(expected):
        row = choice.stages.iloc[s]
        assert row["memory_mb"] == pytest.approx(float(max(warm, back or warm)), abs=1e-6)
        if back is not None:
            assert row["backward_mb"] == pytest.approx(float(back), abs=1e-6)
        assert row["time"] == pytest.approx(time + (copy_time or {}).get(s, 0.0), abs=1e-9)
        parts = row[["param_mb", "activation_mb", "overhead_mb", "working_mb", "const_mb"]].sum()
        assert parts == pytest.approx(float(warm), abs=1e-6)
        assert row["memory_mb"] <= row["limit_mb"] + 1e-9


def test_independent_model_on_a_hand_case():
    frame = pd.DataFrame([
        dict(kind="h", role="head", count=1, param_mb=10, option="none", forward_time=1, backward_time=1,
             activation_mb=2),
        dict(kind="b", role="body", count=3, param_mb=100, option="none", forward_time=1, backward_time=2,
             activation_mb=30, working_mb=7, first_working_mb=4, grad_mb=5),
        dict(kind="b", role="body", count=3, param_mb=100, option="full", forward_time=1, backward_time=3,
             activation_mb=3, working_mb=9, first_working_mb=6, grad_mb=5),
        dict(kind="t", role="tail", count=1, param_mb=20, option="none", forward_time=1, backward_time=1,
             activation_mb=4, working_mb=1),
    ])
    table = LayerTable(frame)
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": [2, 1]})
    part = Partition(stages=2, micro_batches=4, cells=cells)
    (warm0, back0, time0), (warm1, back1, _) = stage_memory(table, part, ["full", "none", "full"], fsdp=True)
    # stage 0, 2 in flight: params 210, head 2*2, layers 3*2 + 30*2, ending layer (none): 30 + 7.
    assert warm0 == 210 + 4 + 6 + 60 + 37
    # second peak: head 4/2, layers 6/2 + 60/2, grads 10, first layer's (full) working set: plain 30 + 6.
    # time: the head (1 + 1) and the layers (1 + 3, 1 + 2), as a balancer plan's stage time.
    assert back0 == 210 + 2 + 3 + 30 + 10 + 36 and time0 == 2.0 + 7.0
    # stage 1 (tail, 1 in flight): params 120, tail 4 + working 4 + 1, layer 3, no body working set.
    assert warm1 == 120 + 4 + 5 + 3 and back1 == 120 + 0 + 0 + 5 + 36
