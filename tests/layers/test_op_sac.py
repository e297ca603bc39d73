"""torchtitan's per-op selective checkpointing (``selective_op``) against its closed form on one layer."""

import pytest

from sappkit import Cluster, InputError, KernelConfig, ParallelConfig, Strategy, TransformerConfig, estimate_layers
from sappkit import balance, evaluate_strategy, torchtitan_config
from sappkit.layers.op_sac import OP_SAC
from sappkit.trainers.torchtitan_import import read_torchtitan

#: A Llama-3-shaped layer (GQA, SwiGLU, no dropout), small enough to price quickly.
LLAMA = TransformerConfig(layers=4, hidden_size=1024, num_heads=16, num_kv_heads=4, ffn_size=3584, seq_length=1024,
                          vocab_size=8000, gated_mlp=True, dropout=False, name="layer")
FLASH = KernelConfig(attention="flash")
E, B = 2, 2  # bf16 bytes per element, micro-batch


def _row(table, option):
    frame = table.frame
    return frame[(frame["kind"] == "layer") & (frame["option"] == option)].iloc[0]


def _matmul_ms(device, m, n, k):
    return device.matmul_ms(2 * m * n * k, E * (m * k + k * n + m * n), "bf16")


def test_one_layer_reruns_every_second_matmul_and_the_pointwise_ops_and_saves_the_odd_matmuls():
    cluster = Cluster.preset("dgx-h100")
    device = cluster.device
    table = estimate_layers(LLAMA, parallel=ParallelConfig(micro_batch_size=B), cluster=cluster, kernels=FLASH,
                            options=("none", OP_SAC))
    none, op = _row(table, "none"), _row(table, OP_SAC)
    h, f, a, kv, d = 1024, 3584, 16, 4, 64
    n = LLAMA.seq_length * B
    # Re-run: wk, wo, w3 at their own shapes; norm1 and norm2 (2e per element), the first residual add (3e), SwiGLU
    # (3e per element of each half); not the flash kernel, wq, wv, w1, w2 or the last residual add.
    rerun = (_matmul_ms(device, n, kv * d, h) + _matmul_ms(device, n, h, a * d) + _matmul_ms(device, n, f, h)
             + 2 * device.memory_ms(2 * E * n * h) + device.memory_ms(3 * E * n * h) + device.memory_ms(3 * E * n * f))
    assert op.forward_time == pytest.approx(none.forward_time)
    assert op.backward_time - none.backward_time == pytest.approx(rerun, rel=1e-9)
    # Kept: the block input, wq, wv, w1 and w2's outputs, the flash output and its log-sum-exp.
    kept = E * n * h + E * n * (a * d + kv * d + f + h) + n * (E * a * d + 4 * a)
    assert op.activation_mb == pytest.approx(kept / 2**20, rel=1e-12)
    breakdown = table.breakdown.set_index(["kind", "option"])
    assert breakdown.at[("layer", OP_SAC), "recompute_ms"] == pytest.approx(rerun, rel=1e-9)


def test_sequence_parallel_reruns_both_all_gathers_and_keeps_the_reduce_scatters():
    cluster = Cluster.preset("dgx-h100")
    parallel = ParallelConfig(tensor_parallel=2, sequence_parallel=True, micro_batch_size=B)
    table = estimate_layers(LLAMA, parallel=parallel, cluster=cluster, kernels=FLASH, options=("comm", OP_SAC))
    breakdown = table.breakdown.set_index(["kind", "option"])
    comm = breakdown.loc[("layer", "comm")]
    op = breakdown.loc[("layer", OP_SAC)]
    assert op["tp_comm_ms"] == pytest.approx(comm["tp_comm_ms"])  # both re-run the two sequence-parallel gathers
    n, h, t = LLAMA.seq_length * B, 1024, 2
    single = estimate_layers(LLAMA, parallel=ParallelConfig(micro_batch_size=B), cluster=cluster, kernels=FLASH,
                             options=(OP_SAC,))
    # Under TP 2 + SP: input, the column-parallel outputs and the attention output halve, w2's partial sums stay
    # whole, the two reduce-scatter outputs are added.
    whole = E * n * h + E * n * (16 * 64 + 4 * 64 + 3584 + h) + n * (E * 16 * 64 + 4 * 16)
    expected = (whole - E * n * h) / t + E * n * h + 2 * E * n * h / t
    assert _row(single, OP_SAC).activation_mb == pytest.approx(whole / 2**20)
    assert _row(table, OP_SAC).activation_mb == pytest.approx(expected / 2**20)


def test_fp8_reruns_every_linear_gemm_with_its_cast():
    parallel = ParallelConfig(micro_batch_size=B, dtype="fp8")
    table = estimate_layers(LLAMA, parallel=parallel, cluster="dgx-h100", kernels=FLASH, options=("none", OP_SAC))
    bf16 = estimate_layers(LLAMA, parallel=ParallelConfig(micro_batch_size=B), cluster="dgx-h100", kernels=FLASH,
                           options=(OP_SAC,))
    none, op = _row(table, "none"), _row(table, OP_SAC)
    assert op.backward_time - none.backward_time > 0.5 * none.forward_time  # the four linear layers' forwards
    assert op.activation_mb < _row(bf16, OP_SAC).activation_mb  # no matmul output kept


def test_what_it_cannot_price_is_refused():
    moe = TransformerConfig(layers=2, hidden_size=512, num_heads=8, ffn_size=2048, experts=8, top_k=2,
                            expert_ffn_size=512, seq_length=256, vocab_size=8000, name="moe_model")
    with pytest.raises(InputError, match="routed experts"):
        estimate_layers(moe, options=(OP_SAC,))
    with pytest.raises(InputError, match="roofline"):
        estimate_layers(LLAMA, options=(OP_SAC,), time_model="flops")
    with pytest.raises(InputError, match="selective_op"):
        evaluate_strategy(LLAMA, Strategy(data_parallel=8), cluster="dgx-h100", global_batch=8, recompute="op")


def test_a_strategy_prices_it_between_no_recompute_and_full():
    strategy = Strategy(data_parallel=8, micro_batch_size=1, zero=3)
    steps = {option: evaluate_strategy(LLAMA, strategy, cluster="dgx-h100", global_batch=16, recompute=option).step_time
             for option in ("none", "selective", OP_SAC, "full")}
    assert steps["none"] < steps["selective"] < steps[OP_SAC] < steps["full"]


def test_torchtitans_op_level_checkpointing_reads_as_it_and_as_selective_on_a_table_without_it():
    settings = {"activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"},
                "training": {"local_batch_size": 2}}
    config = read_torchtitan(settings, num_layers=LLAMA.layers, world_size=1)
    assert set(config.options) == {OP_SAC}
    with_op = estimate_layers(LLAMA, cluster="dgx-h100", kernels=FLASH, options=("none", "selective", OP_SAC))
    without = estimate_layers(LLAMA, cluster="dgx-h100", kernels=FLASH, options=("none", "selective"))
    priced = config.plan_for(with_op, memory_mb=80_000)
    fallback = config.plan_for(without, memory_mb=80_000)
    assert set(priced.assignment["option"]) == {OP_SAC} and set(fallback.assignment["option"]) == {"selective"}
    assert any("priced as 'selective'" in note for note in fallback.notes)
    assert priced.simulate().step_time > fallback.simulate().step_time  # it re-runs more than the attention core
    frame = with_op.frame
    only = with_op.with_frame(frame[(frame["role"] != "body") | (frame["option"] == OP_SAC)].reset_index(drop=True))
    plan = balance(only, stages=2, micro_batches=4, memory_mb=80_000)
    exported = torchtitan_config(plan, microbatch_size=2).settings["activation_checkpoint"]
    assert exported == {"mode": "selective", "selective_ac_option": "op"}
