"""The balancer against brute-force enumeration, and every constraint and objective cell biting.

The reference here re-derives SAPP's pipeline balancer's model independently of
``sappkit.balance_*``: in-flight counts, the overhead walk, the frontier,
recompute consistency and every level of the ``sapp`` objective, evaluated on every
placement of a small instance. Each constraint test also solves the
reference *without* the constraint and checks that the answer changes, so
dropping it from sappkit would fail the test. SAPP charges no working
set, so the balancer runs here with ``working_set=False`` (its parity
switch) unless a test asks for it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from functools import partial

import numpy as np
import pandas as pd
import pytest

import sappkit
from sappkit.balancer.evaluate import counts_from_assignment, evaluate
from sappkit.balancer.exact import search
from sappkit.balancer.ilp.program import BalanceModel
from sappkit.balancer.optimise import optimise
from sappkit.balancer.views import even_plan
from sappkit.balancer.setup import make_setup
from sappkit.balancer.ilp.solver import SolverOptions, solve

#: The balancer and its set-up in SAPP's pipeline balancer's memory model (no working set), unless a call asks for it.
balance = partial(sappkit.balance, working_set=False)
setup_of = partial(make_setup, working_set=False)

OPTIONS = ("none", "selective", "full")

# ---------------------------------------------------------------- reference model


def reference_in_flight(schedule, p, m, v, less_memory=False, k=1):
    """SAPP's pipeline balancer's micro-batches in flight, written out cell by cell."""
    counts = np.zeros((v, p), dtype=int)
    for c, s in itertools.product(range(v), range(p)):
        if schedule == "dualpipev":
            counts[c, s] = min(2 * p - s if c == 0 else s + 1, m)
        elif schedule == "seqpipe":
            counts[c, s] = p - s + k - 1
        elif v == 1:
            counts[c, s] = min(p - s, m)
        elif less_memory:
            counts[c, s] = min(p - (s if c == v - 1 else 0), m)
        else:
            extra = max(0, p - 2 * s - 1) if c == 0 else (min(0, p - 2 * s - 1) if c == v - 1 else 0)
            counts[c, s] = min(p + extra, m)
    return counts


def reference_overhead_terms(p, v, s, less_memory):
    """SAPP's pipeline balancer's ``init_overhead_variables``: (factor, plus chunk, minus chunk) for stage s."""
    terms, vf, vb = [], v - 1, v - 1
    for step in range(v - 1):
        if step % 2 == 0:
            vf = (vf + 1) % v
            terms.append((p - s if less_memory else p - abs(p - 2 * s - 1), vf, vb))
        else:
            vb -= 1
            if less_memory:
                terms.append((s, vf, vb))
            else:
                terms.append((max(p - 2 * s - 1, 0), vf + 1, vb + 1))
                terms.append((max(2 * s + 1 - p, 0), vf, vb))
    return terms


def table(rng, *, kinds=1, counts=(6,), options=OPTIONS, head=True, tail=True, equal_forward=True, modules=None):
    """A small random layer table: more recompute keeps less and takes longer."""
    rows = []
    if head:
        rows.append(dict(kind="embed", role="head", count=1, param_mb=float(rng.integers(20, 60)), option="none",
                         forward_time=float(rng.integers(1, 3)), backward_time=float(rng.integers(1, 4)),
                         activation_mb=float(rng.integers(0, 10)), module=(modules or ["m"])[0]))
    for k in range(kinds):
        forward, param = float(rng.integers(2, 5)), float(rng.integers(10, 40))
        activation = np.sort(rng.integers(5, 60, len(options)))[::-1].astype(float)
        backward = np.sort(rng.integers(3, 12, len(options))).astype(float)
        for o, option in enumerate(options):
            rows.append(dict(kind=f"k{k}", role="body", count=counts[k], param_mb=param,
                             option=option, forward_time=forward if equal_forward else float(rng.integers(2, 5)),
                             backward_time=backward[o], activation_mb=activation[o],
                             module=(modules or ["m"] * kinds)[k]))
    if tail:
        rows.append(dict(kind="head_out", role="tail", count=1, param_mb=float(rng.integers(20, 60)),
                         option="none", forward_time=float(rng.integers(1, 4)), backward_time=float(rng.integers(1, 6)),
                         activation_mb=float(rng.integers(0, 20)), module=(modules or ["m"])[-1]))
    return pd.DataFrame(rows)


def placements(total, slots):
    """Every way to put ``total`` identical layers into ``slots`` slots (stars and bars), as rows."""
    rows = []
    for bars in itertools.combinations(range(total + slots - 1), slots - 1):
        edges = (-1, *bars, total + slots - 1)
        rows.append([edges[i + 1] - edges[i] - 1 for i in range(slots)])
    return np.array(rows, dtype=int)


def brute_force(frame, *, stages, micro_batches, memory_mb, chunks=1, schedule=None, less_memory=False,
                level=1, overhead=True, frontier=True, consistency=True, in_flight=None, working_set=False):
    """The best sapp objective over every placement, or None when nothing fits; flags drop constraints."""
    p, m, v = stages, micro_batches, chunks
    schedule = schedule or ("1f1b" if v == 1 else "interleaved")
    body = frame[frame.role == "body"]
    kinds = list(dict.fromkeys(body.kind))
    items = [(k, o) for k in kinds for o in body[body.kind == k].option]
    per_kind = []
    for kind in kinds:
        n_opt = int((body.kind == kind).sum())
        grid = placements(int(body[body.kind == kind]["count"].iloc[0]), n_opt * v * p)
        per_kind.append(grid.reshape(len(grid), n_opt, v, p))
    combos = list(itertools.product(*[range(len(g)) for g in per_kind]))
    x = np.stack([np.concatenate([per_kind[k][i] for k, i in enumerate(c)], axis=0) for c in combos]).astype(float)
    value = {col: np.array([body[(body.kind == k) & (body.option == o)][col].iloc[0] for k, o in items])
             for col in ("forward_time", "backward_time", "activation_mb", "param_mb")}
    cells = lambda col: np.einsum("i,nics->ncs", value[col], x)  # noqa: E731
    forward, backward, act = cells("forward_time"), cells("backward_time"), cells("activation_mb")
    param = cells("param_mb").sum(axis=1)
    flight = reference_in_flight(schedule, p, m, v, less_memory) if in_flight is None else in_flight
    memory = param + np.einsum("cs,ncs->ns", flight, act) + frame.attrs.get("const_mb", 0.0)
    tail_cell = (1, 0) if schedule == "dualpipev" else (v - 1, p - 1)
    fixed_f, fixed_b = np.zeros((v, p)), np.zeros((v, p))
    for role, (c, s) in (("head", (0, 0)), ("tail", tail_cell)):
        rows = frame[frame.role == role]
        if len(rows):
            row = rows.iloc[0]
            memory[:, s] += row.param_mb + row.activation_mb * flight[c, s]
            fixed_f[c, s] += row.forward_time
            fixed_b[c, s] += row.backward_time
    if overhead and v > 1 and m != p:
        for s in range(p):
            expr = sum(f * (act[:, a, s] - act[:, b, s]) for f, a, b in reference_overhead_terms(p, v, s, less_memory))
            memory[:, s] += np.maximum(0, np.ceil(np.asarray(expr, dtype=float) - 1e-6))
    ok = (memory <= memory_mb + 1e-6).all(axis=1)
    reserved = {(0, 0), (1, 0)} if schedule == "dualpipev" else {(0, 0), (v - 1, p - 1)}
    occupied = x.sum(axis=1)
    for c, s in itertools.product(range(v), range(p)):
        if (c, s) not in reserved:
            ok &= occupied[:, c, s] >= 1
    order = [(c, s) for c in range(v) for s in (range(p - 1, -1, -1) if schedule == "dualpipev" and c == 1
                                                 else range(p))]
    by_kind = [x[:, [i for i, (k, _) in enumerate(items) if k == kind]].sum(axis=1) for kind in kinds]
    if frontier:
        for k in range(1, len(kinds)):
            for c, s in order:
                if schedule == "dualpipev" and c == 1:
                    before = [(0, t) for t in range(p)] + [(1, t) for t in range(s, p)]
                else:
                    before = order[:order.index((c, s))]
                if before:
                    started = sum(by_kind[k][:, d, t] for d, t in before) > 0
                    ok &= ~(started & (by_kind[k - 1][:, c, s] > 0))
    options_used = list(dict.fromkeys(o for _, o in items))
    if consistency and len(kinds) > 1 and len(options_used) == 2:
        least, most = sorted(options_used, key=lambda o: ("none", "selective", "comm", "both", "full").index(o))
        for k in range(len(kinds) - 1):
            later = [i for i, (kind, o) in enumerate(items) if o == most and kinds.index(kind) > k]
            plain = [i for i, (kind, o) in enumerate(items) if o == least and kinds.index(kind) == k]
            if later and plain:
                ok &= ~((x[:, later].sum(axis=1) > 0) & (x[:, plain[0]] > 0)).any(axis=(1, 2))
    if not ok.any():
        return None
    F, B = forward[ok] + fixed_f, backward[ok] + fixed_b
    body_forward = forward[ok]
    sapp = reference_sapp(F, B, body_forward, fixed_f, fixed_b, frame, p=p, m=m, v=v, level=level,
                          less_memory=less_memory)
    return float(sapp.min())


def reference_sapp(F, B, body_forward, fixed_f, fixed_b, frame, *, p, m, v, level, less_memory):
    """The ``sapp`` objective at every level (docs/design.md "Time and the objectives"), cell by cell, for
    arrays of placements [n, chunk, stage]."""
    split = v > 1 and m == p and level >= 1
    if split:
        s = np.arange(p)
        factors = s if less_memory else np.abs(p - 1 - 2 * s) * ((m >= 2 * p) | (s >= p // 2))
        first = np.maximum(B[:, : v - 1].max(axis=(1, 2)), 0)
        last = (B[:, v - 1] + fixed_f[v - 1] + factors / m * body_forward[:, v - 1]).max(axis=1)
        term = np.maximum(first, last) if level >= 2 else first + np.maximum(first, last)
    else:
        term = (F.max(axis=1) + B.max(axis=1)).max(axis=1)
    if level < 2:
        return term
    head = frame[frame.role == "head"]
    head_f = float(head.forward_time.iloc[0]) if len(head) else 0.0
    body_work = (F - fixed_f + B - fixed_b).sum(axis=(1, 2))
    bubble = np.zeros(len(F))
    for c in range(v - 1):
        bubble += (v - c) / v * (F[:, c] + B[:, c]).sum(axis=1) / p
        running = np.maximum(F[:, c, 0] - head_f, 0)
        for s in range(1, p):
            bubble += m * np.maximum(running - F[:, c, s], 0)
            running = np.maximum(running, F[:, c, s])
    running = F[:, v - 1, p - 1]
    for s in range(p - 2, -1, -1):
        bubble += m * np.maximum(running - F[:, v - 1, s], 0)
        running = np.maximum(running, F[:, v - 1, s])
    return (body_work + bubble) / max(1, v - 2) + term * (m - 2)


def solve_both_ways(frame, **pipeline):
    """sappkit's sapp optimum by the exact search (when it applies) and by the ILP alone."""
    setup = setup_of(frame, **pipeline)
    found = search(setup)
    fast = None if found is None else (found.upper if found.counts is not None else math.inf)
    model = BalanceModel(setup)
    result = solve(model.problem, SolverOptions(time_limit=30))
    ilp = result.objective if result.status == "optimal" else (math.inf if result.status == "infeasible" else None)
    return fast, ilp, result.status


def loose_limit(frame, **pipeline):
    """A memory limit under what an even, unrecomputed placement needs: recompute must help."""
    setup = setup_of(frame, memory_mb=1e9, **pipeline)
    even = sappkit.even_assignment(frame, stages=setup.stages, chunks=setup.chunks, schedule=setup.schedule)
    return float(evaluate(setup, counts_from_assignment(setup, even)).stages.memory_mb.max()) * 0.85


# ---------------------------------------------------------------- brute force

CASES = [
    dict(counts=(12,), options=("none", "full"), stages=4, micro_batches=4),
    dict(counts=(8,), options=OPTIONS, stages=3, micro_batches=6),
    dict(counts=(6,), options=OPTIONS, stages=2, micro_batches=4, chunks=2),
    dict(counts=(7,), options=("none", "full"), stages=2, micro_batches=2, chunks=2),
    dict(counts=(6,), options=("none", "full"), stages=3, micro_batches=6, chunks=2),
    dict(counts=(6,), options=("none", "full"), stages=3, micro_batches=6, chunks=2, less_memory=True),
    dict(counts=(6,), options=("none", "full"), stages=2, micro_batches=4, chunks=2, schedule="dualpipev"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_optimum_equals_brute_force(rng, case):
    case = dict(case)
    frame = table(rng, counts=case.pop("counts"), options=case.pop("options"))
    for scale in (0.75, 0.9, 1.1):
        limit = loose_limit(frame, **{k: v for k, v in case.items() if k != "less_memory"}) * scale
        best = brute_force(frame, memory_mb=limit, **case)
        fast, ilp, _ = solve_both_ways(frame, memory_mb=limit, **case)
        expected = math.inf if best is None else best
        assert fast == pytest.approx(expected, rel=1e-9)
        assert ilp == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("pipeline, counts", [
    (dict(stages=3, micro_batches=6), (3, 4)),
    (dict(stages=2, micro_batches=4, chunks=2, schedule="dualpipev"), (3, 3)),
], ids=["1f1b", "dualpipev"])
def test_multimodal_optimum_equals_brute_force(rng, pipeline, counts):
    frame = table(rng, kinds=2, counts=counts, options=("none", "full"), modules=["vision", "language"])
    limit = loose_limit(frame, **pipeline)
    best = brute_force(frame, memory_mb=limit, **pipeline)
    fast, ilp, _ = solve_both_ways(frame, memory_mb=limit, **pipeline)
    assert fast is None
    assert ilp == pytest.approx(best, rel=1e-6)


def test_public_balance_reports_the_optimum(rng):
    frame = table(rng, counts=(8,))
    limit = loose_limit(frame, stages=3, micro_batches=6)
    plan = balance(frame, stages=3, micro_batches=6, memory_mb=limit)
    assert plan.status == "optimal" and plan.gap == 0.0 and plan.method == "exact search"
    assert plan.objective == pytest.approx(brute_force(frame, stages=3, micro_batches=6, memory_mb=limit))
    assert plan.fits and plan.has_plan


# ---------------------------------------------------------------- constraints bite


def _bites(frame, flag, **pipeline):
    """sappkit equals the reference with the constraint, and the reference without it differs."""
    limit = pipeline.pop("memory_mb")
    with_it = brute_force(frame, memory_mb=limit, **pipeline)
    without = brute_force(frame, memory_mb=limit, **pipeline, **{flag: False})
    plan = balance(frame, memory_mb=limit, solver=SolverOptions(time_limit=30), **pipeline)
    assert plan.status == "optimal"
    assert plan.objective == pytest.approx(with_it, rel=1e-6)
    assert without != pytest.approx(with_it, rel=1e-6)
    return plan


def test_overhead_term_binds():
    # A slow tail empties the last stage's last chunk, so its first chunk outweighs it: SAPP's
    # overhead charges the difference when m != p.
    frame = pd.DataFrame([
        *[dict(kind="b", role="body", count=6, param_mb=10, option=o, forward_time=2, backward_time=bt,
               activation_mb=a) for o, bt, a in (("none", 4, 40), ("full", 7, 4))],
        dict(kind="t", role="tail", count=1, param_mb=20, option="none", forward_time=10, backward_time=10,
             activation_mb=0)])
    plan = _bites(frame, "overhead", stages=2, micro_batches=4, chunks=2, memory_mb=150)
    assert plan.stages.overhead_mb.max() > 0


def test_overhead_dropped_when_micro_batches_equal_stages():
    frame = pd.DataFrame([
        dict(kind="b", role="body", count=6, param_mb=10, option=o, forward_time=2, backward_time=bt,
             activation_mb=a) for o, bt, a in (("none", 4, 40), ("full", 7, 4))])
    plan = balance(frame, stages=2, micro_batches=2, chunks=2, memory_mb=330)
    assert (plan.stages.overhead_mb == 0).all()
    assert plan.objective == pytest.approx(brute_force(frame, stages=2, micro_batches=2, chunks=2,
                                                       memory_mb=330, overhead=False))


@pytest.mark.parametrize("schedule, chunks, less_memory, micro_batches, limit", [
    ("1f1b", 1, False, 8, 60), ("interleaved", 2, False, 6, 80), ("interleaved", 2, True, 6, 80),
    ("dualpipev", 2, False, 6, 80), ("seqpipe", 1, False, 3, 60),
])
def test_each_schedule_in_flight_binds(schedule, chunks, less_memory, micro_batches, limit):
    # With every cell holding one micro-batch the reference would answer differently.
    frame = pd.DataFrame([
        dict(kind="b", role="body", count=6, param_mb=10, option=o, forward_time=2, backward_time=bt,
             activation_mb=a) for o, bt, a in (("none", 4, 30), ("full", 7, 3))])
    pipeline = dict(stages=3, micro_batches=micro_batches, chunks=chunks, schedule=schedule, less_memory=less_memory)
    expected = brute_force(frame, memory_mb=limit, **pipeline)
    plan = balance(frame, memory_mb=limit, **pipeline)
    assert plan.objective == pytest.approx(expected)
    flat = np.ones_like(reference_in_flight(schedule, 3, micro_batches, chunks, less_memory))
    assert brute_force(frame, memory_mb=limit, in_flight=flat, **pipeline) != pytest.approx(expected)


def test_less_memory_with_one_chunk_is_1f1b_with_a_note(rng):
    frame = table(rng, counts=(12,))
    pipeline = dict(stages=3, micro_batches=6, memory_mb=loose_limit(frame, stages=3, micro_batches=6))
    plain, less = balance(frame, **pipeline), balance(frame, less_memory=True, **pipeline)
    assert less.objective == plain.objective and less.stages.equals(plain.stages)
    assert less.notes == ("less_memory has no effect with one chunk: a stage holds the 1F1B counts either way",)
    assert less.simulate().step_time == plain.simulate().step_time


def test_less_memory_changes_the_plan():
    frame = pd.DataFrame([
        dict(kind="b", role="body", count=8, param_mb=10, option=o, forward_time=2, backward_time=bt,
             activation_mb=a) for o, bt, a in (("none", 4, 30), ("full", 7, 3))])
    pipeline = dict(stages=2, micro_batches=4, chunks=2, memory_mb=280)
    regular = balance(frame, **pipeline)
    less = balance(frame, less_memory=True, **pipeline)
    assert less.objective < regular.objective
    assert less.objective == pytest.approx(brute_force(frame, less_memory=True, **pipeline))
    assert regular.objective == pytest.approx(brute_force(frame, **pipeline))


def test_multimodal_frontier_binds():
    # The tower's layers are cheap in memory, the LM's heavy: without the frontier an LM layer would go first.
    frame = pd.DataFrame([
        *[dict(kind="vit", role="body", count=3, param_mb=5, option=o, forward_time=1, backward_time=bt,
               activation_mb=a, module="vision") for o, bt, a in (("none", 2, 10), ("full", 3, 1))],
        *[dict(kind="lm", role="body", count=3, param_mb=40, option=o, forward_time=4, backward_time=bt,
               activation_mb=a, module="language") for o, bt, a in (("none", 8, 30), ("full", 12, 2))],
    ])
    plan = _bites(frame, "frontier", stages=3, micro_batches=6, memory_mb=200)
    order = [(c, s) for c, s in plan.setup.cells]
    first_lm = min(order.index((r.chunk, r.stage)) for r in plan.assignment.itertuples() if r.kind == "lm")
    last_vit = max(order.index((r.chunk, r.stage)) for r in plan.assignment.itertuples() if r.kind == "vit")
    assert last_vit <= first_lm


def test_recompute_consistency_binds():
    frame = pd.DataFrame([
        *[dict(kind="dense", role="body", count=2, param_mb=10, option=o, forward_time=2, backward_time=bt,
               activation_mb=a) for o, bt, a in (("none", 4, 29), ("full", 9, 5))],
        *[dict(kind="moe", role="body", count=4, param_mb=30, option=o, forward_time=3, backward_time=bt,
               activation_mb=a) for o, bt, a in (("none", 6, 36), ("full", 7, 5))],
    ])
    plan = _bites(frame, "consistency", stages=2, micro_batches=4, memory_mb=130)
    for (c, s), cell in plan.assignment.groupby(["chunk", "stage"]):
        if ((cell.kind == "moe") & (cell.option == "full")).any():
            assert not ((cell.kind == "dense") & (cell.option == "none")).any()
    off = balance(frame, stages=2, micro_batches=4, memory_mb=130, consistent_recompute=False)
    assert off.objective == pytest.approx(brute_force(frame, stages=2, micro_batches=4, memory_mb=130,
                                                      consistency=False))


def test_consistency_with_three_options_is_noted():
    frame = pd.DataFrame([
        dict(kind=k, role="body", count=3, param_mb=10, option=o, forward_time=2, backward_time=4 + i,
             activation_mb=30 - 10 * i) for k in ("a", "b") for i, o in enumerate(OPTIONS)])
    plan = balance(frame, stages=2, micro_batches=4, memory_mb=1000)
    assert plan.notes == ("recompute consistency not applied: MindFormers' rule is defined for two options "
                          "and the body kinds use 3 (none, selective, full), as SAPP's pipeline balancer does",)


# ---------------------------------------------------------------- the objective table


@pytest.mark.parametrize("level", [0, 1, 2])
@pytest.mark.parametrize("split", [True, False], ids=["v>1,m=p", "otherwise"])
def test_objective_table_cell(rng, level, split):
    frame = table(rng, counts=(6,), options=("none", "full"))
    pipeline = dict(stages=2, chunks=2, micro_batches=2 if split else 4)
    limit = loose_limit(frame, **pipeline)
    expected = brute_force(frame, memory_mb=limit, level=level, **pipeline)
    plan = balance(frame, memory_mb=limit, optimization_level=level, **pipeline)
    assert plan.status == "optimal"
    assert plan.objective == pytest.approx(expected, rel=1e-6)


def test_level_two_weighs_the_bubble(rng):
    frame = table(rng, counts=(6,), options=("none", "full"))
    plan = balance(frame, stages=3, micro_batches=6, memory_mb=1e6, optimization_level=2)
    stage_time = plan.stages.time.max()
    assert plan.objective > stage_time * (6 - 2)
    assert plan.method.startswith("ilp")


# ---------------------------------------------------------------- SeqPipe

SEQ = dict(batch_size=1, num_heads=8, seq_length=4096, head_dim=128, hidden_size=1024, vocab_size=32000,
           model_parallel=8)


def test_seqpipe_rescales_and_drops_full():
    frame = pd.DataFrame([
        dict(kind="b", role="body", count=6, param_mb=10, option=o, forward_time=2, backward_time=bt,
             activation_mb=a) for o, bt, a in (("none", 4, 30), ("selective", 5, 12), ("full", 7, 3))])
    plan = balance(frame, stages=3, micro_batches=2, schedule="seqpipe", seq_split=2, seq_params=SEQ,
                           memory_mb=300)
    assert "full" not in set(plan.assignment.option)
    assert plan.notes == ("SeqPipe cannot run full recompute: option 'full' dropped for kind 'b'",)
    rescaled = pd.DataFrame([
        dict(kind="b", role="body", count=6, param_mb=10 + 4, option=o, forward_time=1, backward_time=bt / 2,
             activation_mb=(a - 2) / 2 + 2) for o, bt, a in (("none", 4, 30), ("selective", 5, 12))])
    expected = brute_force(rescaled, stages=3, micro_batches=4, memory_mb=300,
                           in_flight=np.array([[4, 3, 2]]))
    assert plan.objective == pytest.approx(expected)
    unscaled = brute_force(frame[frame.option != "full"], stages=3, micro_batches=2, memory_mb=300)
    assert unscaled is None or unscaled != pytest.approx(expected)


def test_seqpipe_needs_its_parameters():
    frame = table(np.random.default_rng(0), counts=(6,))
    with pytest.raises(sappkit.InputError) as error:
        balance(frame, stages=3, micro_batches=2, schedule="seqpipe", seq_split=2, memory_mb=300)
    assert str(error.value) == ("seq_params must be a mapping with keys batch_size, num_heads, seq_length, head_dim, "
                                "hidden_size, vocab_size, model_parallel, ffn_size; got NoneType (schedule "
                                "'seqpipe' with seq_split > 1 needs it)")


# ---------------------------------------------------------------- infeasible and bad input


def test_infeasible_reports_the_least_memory():
    frame = pd.DataFrame([
        dict(kind="b", role="body", count=8, param_mb=100, option=o, forward_time=1, backward_time=bt,
             activation_mb=a) for o, bt, a in (("none", 2, 50), ("full", 3, 5))])
    plan = balance(frame, stages=2, micro_batches=4, memory_mb=400)
    assert plan.status == "infeasible" and plan.objective is None and not plan.has_plan
    assert (plan.memory_needed_mb, plan.binding_stage) == (440.0, 0)
    assert plan.message == "no placement fits 400 MB; the least-memory placement needs 440 MB on stage 0"
    assert balance(frame, stages=2, micro_batches=4, memory_mb=440.0).status == "optimal"
    assert balance(frame, stages=2, micro_batches=4, memory_mb=439.0).status == "infeasible"
    # With the working set the last full layer ends warm-up holding the plain layer it rebuilds at one
    # micro-batch, 50 MB: 400 + 2 x 4 x 5 + 50 on stage 0. The exact search and the ILP both find it.
    plan = balance(frame, stages=2, micro_batches=4, memory_mb=400, working_set=True)
    assert (plan.status, plan.memory_needed_mb, plan.method) == ("infeasible", 490.0, "exact search")
    assert plan.stages.working_mb.tolist() == [50.0, 50.0]
    setup = setup_of(frame, stages=2, micro_batches=4, memory_mb=400, working_set=True)
    model = BalanceModel(setup, memory="minimise")
    assert solve(model.problem, SolverOptions()).status == "optimal"
    assert evaluate(setup, model.counts()).stages.memory_mb.max() == pytest.approx(490.0)


def test_too_few_layers_for_the_cells():
    frame = table(np.random.default_rng(1), counts=(3,))
    plan = balance(frame, stages=4, micro_batches=4, chunks=2, memory_mb=1e6)
    assert plan.status == "infeasible" and plan.memory_needed_mb is None
    assert plan.message == ("the model has 3 body layers but the pipeline has 6 cells that must each hold one; "
                            "use fewer stages or chunks")


def test_bad_arguments_name_themselves():
    frame = table(np.random.default_rng(2), counts=(6,))
    with pytest.raises(sappkit.InputError) as error:
        balance(frame, stages=2, micro_batches=4, memory_mb=0)
    assert str(error.value) == "memory_mb must be a finite number > 0; got 0"
    with pytest.raises(sappkit.InputError) as error:
        balance(frame, stages=2, micro_batches=4, memory_mb=100, objective="fast")
    assert str(error.value) == "objective must be one of 'sapp', 'step'; got 'fast'"
    with pytest.raises(sappkit.InputError) as error:
        balance(frame, stages=2, micro_batches=4, memory_mb=100, solver="highs")
    assert str(error.value) == "solver must be a SolverOptions; got str"


# ---------------------------------------------------------------- step against sapp


@pytest.mark.parametrize("chunks, micro_batches", [(1, 8), (1, 16), (2, 8), (2, 16)])
@pytest.mark.parametrize("scale", [0.7, 0.85, 1.0])
def test_step_never_simulates_slower_than_sapp_or_an_even_plan_that_fits(rng, chunks, micro_batches, scale):
    frame = table(rng, counts=(16,))
    pipeline = dict(stages=4, micro_batches=micro_batches, chunks=chunks)
    limit = loose_limit(frame, **pipeline) * scale
    sapp = balance(frame, memory_mb=limit, **pipeline)
    step = balance(frame, memory_mb=limit, objective="step", **pipeline)
    if sapp.status == "infeasible":
        assert step.status == "infeasible" and step.memory_needed_mb == sapp.memory_needed_mb
        return
    assert step.status in ("optimal", "feasible") and step.fits
    assert step.objective == step.step_time == pytest.approx(step.simulate().step_time, rel=1e-9)
    assert step.step_time <= sapp.simulate().step_time * (1 + 1e-12)
    assert step.lower_bound <= step.step_time and step.gap == pytest.approx(1 - step.lower_bound / step.step_time)
    for option in OPTIONS:
        even = even_plan(frame, option=option, memory_mb=limit, **pipeline)
        assert not even.fits or step.step_time <= even.simulate().step_time * (1 + 1e-12)
    assert any(start in step.method for start in ("sapp optimum (exact search)", "even plan", "least busiest"))


def test_optimise_uses_the_ilp_when_the_search_does_not_apply(rng):
    frame = table(rng, counts=(6,), equal_forward=False)
    setup = setup_of(frame, stages=2, micro_batches=4, memory_mb=loose_limit(frame, stages=2, micro_batches=4))
    solved = optimise(setup, SolverOptions())
    assert solved.method == "ilp (highs)" and solved.status == "optimal"
    assert solved.objective == pytest.approx(brute_force(frame, stages=2, micro_batches=4,
                                                         memory_mb=setup.memory_mb))


def test_search_bounds_hand_over_to_the_ilp(rng, monkeypatch):
    # When the exact search cannot close the gap it hands its bound and incumbent to the ILP.
    frame = table(rng, counts=(8,))
    setup = setup_of(frame, stages=3, micro_batches=6, memory_mb=loose_limit(frame, stages=3, micro_batches=6))
    found = search(setup)
    monkeypatch.setattr(sappkit.balancer.exact, "search",
                        lambda *a, **k: replace(found, proven=False, lower=found.lower * 0.9))
    solved = optimise(setup, SolverOptions())
    assert solved.method == "ilp (highs) bounded by exact search"
    assert (solved.status, solved.objective) == ("optimal", pytest.approx(found.upper))


SMALL_SEQ = dict(SEQ, hidden_size=512, vocab_size=1000)


@pytest.mark.parametrize("pipeline", [
    dict(stages=3, micro_batches=3, chunks=2, schedule="seqpipe", seq_split=2, seq_params=SMALL_SEQ),
    dict(stages=3, micro_batches=6, chunks=2, schedule="seqpipe", seq_split=2, seq_params=SMALL_SEQ,
         less_memory=True),
    dict(stages=3, micro_batches=6, chunks=2, schedule="dualpipev"),
], ids=["seqpipe-v2", "seqpipe-v2-less-memory", "dualpipev"])
def test_exact_search_agrees_with_the_ilp(rng, pipeline):
    frame = table(rng, counts=(12,))
    limit = loose_limit(frame, **{k: v for k, v in pipeline.items() if k not in ("less_memory", "seq_params",
                                                                                 "seq_split")})
    for scale in (0.5, 0.8):
        fast, ilp, status = solve_both_ways(frame, memory_mb=limit * scale, **pipeline)
        assert fast is not None and fast == pytest.approx(ilp, rel=1e-6)


def test_a_cache_never_serves_another_instance(rng):
    frame = table(rng, counts=(12,))
    cache = sappkit.balancer.exact.Cache()
    first = setup_of(frame, stages=3, micro_batches=6, memory_mb=loose_limit(frame, stages=3, micro_batches=6))
    other = setup_of(frame, stages=4, micro_batches=8, memory_mb=first.memory_mb)
    search(first, cache=cache)
    assert search(other, cache=cache).upper == search(other).upper


def test_the_step_objective_with_one_micro_batch_on_one_chunk():
    """The step is then all the work, run one cell after the other."""
    table = pd.DataFrame([dict(kind="block", role="body", count=12, param_mb=100, option=o, forward_time=1,
                               backward_time=t, activation_mb=a) for o, t, a in (("none", 2, 50), ("full", 3, 5))])
    plan = sappkit.balance(table, stages=2, micro_batches=1, memory_mb=700, objective="step")
    rival = sappkit.balance(table, stages=2, micro_batches=1, memory_mb=700)
    assert plan.fits and plan.step_time == plan.simulate().step_time <= rival.simulate().step_time
    assert plan.step_time == (plan.stages.forward_time + plan.stages.backward_time).sum()


def test_the_time_limit_bounds_the_exact_search_too(deepseek):
    """DeepSeek-V3 interleaved: the exact search proves it in well under a second, and a limit it cannot meet
    stops it (the limit is past at its first stage) with a plan that says so."""
    shape = dict(stages=16, micro_batches=32, chunks=2, memory_mb=70000)
    assert balance(deepseek, **shape).status == "optimal"
    stopped = balance(deepseek, **shape, solver=SolverOptions(time_limit=1e-9))
    assert (stopped.status, stopped.method, stopped.has_plan) == ("failed", "exact search", False)
    assert stopped.message == ("the exact search ran past the 1e-09 s time limit before it proved a plan; allow it "
                               "more time (SolverOptions.time_limit, --time-limit)")
