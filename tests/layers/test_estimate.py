"""Analytic layer tables: Korthikanti et al.'s closed forms, parameter counts, time, bad inputs."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sappkit import DeviceConfig, InputError, KernelConfig, ParallelConfig, TransformerConfig, estimate_layers
from sappkit.columns import SAPP_OPTIONS

MB = 2**20
# One FLOP per millisecond and one byte per millisecond: times equal FLOPs and bytes (up to rounding).
SLOW = DeviceConfig(tflops=1e-9, mfu=1.0, link_gbs=1e-6, hbm_gbs=1e-6)
# s = 8, b = 2, h = 16, a = 4, f = 4h, v = 32: s·b·h = 256 bytes per element, 5·a·s/h = 10.
GPT = TransformerConfig(layers=3, hidden_size=16, num_heads=4, ffn_size=64, seq_length=8, vocab_size=32)


def body(table, option, kind="layer"):
    return table.rows(kind).loc[option]


def estimate(model=GPT, **parallel):
    """The paper's time model (FLOPs at a flat efficiency): its closed forms are what these tests check."""
    parallel = {"micro_batch_size": 2, **parallel}
    return estimate_layers(model, parallel=ParallelConfig(**parallel), device=SLOW, time_model="flops")


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_activations_are_korthikanti_closed_forms(sequence_parallel):
    table = estimate(tensor_parallel=2, sequence_parallel=sequence_parallel)
    kept = {option: body(table, option).activation_mb * MB for option in SAPP_OPTIONS}
    sbh, t, core = 256, 2, 10
    if sequence_parallel:  # eq. 5 and sec. 4.2.1: everything split over t
        assert kept == {"none": sbh / t * (34 + core), "selective": 34 * sbh / t, "comm": (34 - 4 + core) * sbh / t,
                        "both": 30 * sbh / t, "full": 2 * sbh / t}
    else:  # eq. 2: 10·s·b·h replicated, 24/t and the attention core split
        assert kept == {"none": sbh * (10 + 24 / t + core / t), "selective": sbh * (10 + 24 / t),
                        "comm": sbh * (6 + 24 / t + core / t), "both": sbh * (6 + 24 / t), "full": 2 * sbh}
    assert kept["none"] == (5632 if sequence_parallel else 6912)


def test_head_and_tail_are_korthikanti_sec_4_3():
    table = estimate(tensor_parallel=2)
    # Embedding dropout mask s·b·h/t; output layer 4·s·b·h/t·(1 + v/h).
    assert table.head.activation_mb * MB == 128
    assert table.tail.activation_mb * MB == 4 * 256 / 2 * (1 + 32 / 16)


def test_parameter_bytes_follow_the_zero_stage():
    params = (12 * 16**2 + 2 * 16) / 2  # attention 4h², MLP 8h², two norms, over t = 2
    held = {}
    for zero in (0, 1, 2, 3):
        row = body(estimate(tensor_parallel=2, data_parallel=4, zero=zero), "none")
        held[zero] = (row.param_mb * MB / params, row.working_mb * MB, row.first_working_mb * MB)
    # ZeRO-3 over D = 4 (bf16 w = 2, fp32 g = 4): at the end of warm-up the layer's gathered weights and whole
    # gradient and the next layer's prefetched weights, (2w + g)(1 - 1/D) = 6; on the stage's first layer its own
    # weights and gradient, the second layer's gradient under reduction and its reduce-scatter output,
    # (w + 2g)(1 - 1/D) + g/D = 8.5 bytes per parameter.
    assert held == {0: (18, 0, 0), 1: (2 + 4 + 12 / 4, 0, 0), 2: (2 + 16 / 4, 0, 0),
                    3: (18 / 4, 8 * params * 3 / 4, params * (10 * 3 / 4 + 1))}
    kept = body(estimate(tensor_parallel=2, data_parallel=4, zero=3, reshard_after_forward=False), "none")
    # without resharding the gathered weights stay from forward to backward: held, not in the working set, which
    # keeps the whole gradient and the prefetch (w + g)(1 - 1/D), and on the first layer the two gradients and the
    # output, 2g(1 - 1/D) + g/D
    assert (kept.param_mb * MB / params, kept.working_mb * MB, kept.first_working_mb * MB) == \
        (18 / 4 + 2 * 3 / 4, 6 * params * 3 / 4, params * (8 * 3 / 4 + 1))


def test_time_is_six_params_tokens_plus_attention():
    table = estimate(tensor_parallel=2)
    forward = (24 * 2 * 8 * 16**2 + 4 * 2 * 8**2 * 16) / 2  # Megatron's 24·b·s·h² + 4·b·s²·h, over t
    core = 4 * 2 * 8**2 * 16 / 2
    # comm: all-gathers receive (t-1)/t of 2·e·s·b·h bytes twice; layer norms move 2·2·e·s·b·h/t.
    comm = 2 * 2 * 256 / 2 + 2 * 2 * 2 * 256 / 2
    backward = {option: body(table, option).backward_time for option in SAPP_OPTIONS}
    assert body(table, "none").forward_time == pytest.approx(forward, rel=1e-12)
    assert backward == pytest.approx({"none": 2 * forward, "selective": 2 * forward + core,
                                      "comm": 2 * forward + comm, "both": 2 * forward + core + comm,
                                      "full": 3 * forward}, rel=1e-12)
    tail = (table.tail.forward_time, table.tail.backward_time)
    assert tail == pytest.approx((2 * 16 * 32 * 16 / 2, 2 * 16 * 32 * 16), rel=1e-12)
    assert (table.head.forward_time, table.head.backward_time) == (0, 0)


def test_device_throughput_scales_time():
    fast = estimate_layers(GPT, device=DeviceConfig(tflops=100.0, mfu=0.5), time_model="flops")
    slow = estimate_layers(GPT, device=DeviceConfig(tflops=100.0, mfu=0.25), time_model="flops")
    assert body(slow, "full").backward_time == pytest.approx(2 * body(fast, "full").backward_time, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(hidden=st.sampled_from([64, 128, 512]), heads=st.sampled_from([4, 8]), kv_heads=st.sampled_from([1, 2, 4]),
       seq=st.sampled_from([64, 256, 2048]), gated=st.booleans(), dropout=st.booleans(),
       tp=st.sampled_from([1, 2, 4]), sp=st.booleans(), moe=st.booleans())
def test_more_recompute_keeps_less_and_costs_more(hidden, heads, kv_heads, seq, gated, dropout, tp, sp, moe):
    model = TransformerConfig(layers=2, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads,
                              ffn_size=3 * hidden, seq_length=seq, vocab_size=100, gated_mlp=gated,
                              dropout=dropout, **(dict(experts=4, top_k=2) if moe else {}))
    table = estimate_layers(model, parallel=ParallelConfig(tensor_parallel=kv_heads if tp > kv_heads else tp,
                                                           sequence_parallel=sp))
    rows = table.rows(table.body_kinds[0])
    memory, backward = rows.activation_mb, rows.backward_time
    assert memory.full < memory.both < memory.selective < memory.none
    assert memory.both < memory.comm < memory.none
    assert backward.none < backward.selective < backward.full
    assert backward.none < backward.comm < backward.both and backward.selective < backward.both


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_tensor_parallel_halves_what_it_splits(sequence_parallel):
    one, two = estimate(tensor_parallel=1), estimate(tensor_parallel=2, sequence_parallel=sequence_parallel)
    for option in SAPP_OPTIONS:
        if sequence_parallel:
            assert body(two, option).activation_mb == body(one, option).activation_mb / 2
        assert body(two, option).forward_time == body(one, option).forward_time / 2
    assert body(two, "selective").activation_mb * MB == (34 * 256 / 2 if sequence_parallel else 256 * (10 + 24 / 2))


def test_context_parallel_splits_activations_and_time():
    one, two = estimate(), estimate(context_parallel=2)
    for option in SAPP_OPTIONS:
        assert body(two, option).activation_mb == body(one, option).activation_mb / 2
        assert body(two, option).backward_time == body(one, option).backward_time / 2


def test_gqa_and_swiglu_change_the_per_layer_constant():
    model = TransformerConfig(layers=1, hidden_size=16, num_heads=4, num_kv_heads=1, ffn_size=40,
                              seq_length=8, vocab_size=32, gated_mlp=True, dropout=False)
    table = estimate(model)
    # 4·e·h (norms, linear inputs) + e·(h + h/4 + h/4 + h) (Q, K, V, projection input) + 3·e·f, per token.
    per_token = 8 * 16 + 2 * (16 + 4 + 4 + 16) + 3 * 2 * 40
    assert body(table, "selective").activation_mb * MB == 16 * per_token
    assert body(table, "none").activation_mb * MB == 16 * per_token + 2 * 4 * 8 * 16  # softmax output e·a·s²·b
    params = 16 * 16 + 2 * 16 * 4 + 16 * 16 + 3 * 16 * 40 + 2 * 16
    assert body(table, "none").param_mb * MB == params * (2 + 4 + 12)


def test_moe_counts_experts_over_expert_parallel_ranks():
    model = TransformerConfig(layers=3, dense_layers=1, hidden_size=16, num_heads=4, ffn_size=64, experts=4,
                              top_k=2, shared_experts=1, expert_ffn_size=8, seq_length=8, vocab_size=32,
                              gated_mlp=True)
    table = estimate_layers(model, parallel=ParallelConfig(data_parallel=2, expert_parallel=2, zero=0,
                                                           dtype="fp32"), options=("none", "full"))
    assert table.body_kinds == ("layer", "layer_moe")
    assert (table.count("layer"), table.count("layer_moe")) == (1, 2)
    dense = 4 * 16**2 + 16 * 4 + 3 * 16 * 8 + 2 * 16  # attention, router, shared expert, norms
    experts = 4 * 3 * 16 * 8 / 2
    assert table.param_mb("layer_moe") * MB == 16 * (dense + experts)
    assert table.param_mb("layer") * MB == 16 * (4 * 16**2 + 3 * 16 * 64 + 2 * 16)
    # Per token: norms and linear inputs 4·e·h, dropout masks 2h, Q K V and projection input 4·e·h,
    # top_k·(2·e·h + 3·e·f_e), the shared expert 3·e·f_e, fp32 router scores 4·E.
    per_token = 4 * 4 * 16 + 2 * 16 + 4 * 4 * 16 + 2 * (2 * 4 * 16 + 3 * 4 * 8) + 3 * 4 * 8 + 4 * 4
    core = (4 + 1 + 4) * 4 * 8 * 8
    assert body(table, "none", "layer_moe").activation_mb * MB == 8 * per_token + core


@pytest.mark.parametrize("model, total", [
    (TransformerConfig(layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, ffn_size=28672,
                       vocab_size=32000, seq_length=4096, gated_mlp=True), 68_976_648_192),
    (TransformerConfig(layers=61, dense_layers=3, hidden_size=7168, num_heads=128, head_dim=192, v_head_dim=128,
                       q_lora_rank=1536, kv_lora_rank=512, rope_head_dim=64, ffn_size=18432, experts=256,
                       top_k=8, shared_experts=1, expert_ffn_size=2048, vocab_size=129280, seq_length=4096,
                       gated_mlp=True), 671e9),
], ids=["llama2-70b", "deepseek-v3"])
def test_published_parameter_counts(model, total):
    frame = estimate_layers(model, parallel=ParallelConfig(zero=0, dtype="fp32"), options=("none",)).frame
    counted = (frame.param_mb * frame["count"]).sum() * MB / 16
    assert counted == pytest.approx(total, rel=1e-3)


def test_stacks_give_a_multimodal_table_in_model_order():
    vision = TransformerConfig(layers=4, hidden_size=32, num_heads=4, ffn_size=128, seq_length=16, patch_size=2,
                               name="vit", module="vision")
    language = TransformerConfig(layers=6, hidden_size=16, num_heads=4, ffn_size=64, seq_length=8, vocab_size=32,
                                 name="decoder", module="language")
    table = estimate_layers(vision, language, parallel=ParallelConfig(zero=0, dtype="fp32"), options=("full",))
    assert table.body_kinds == ("vit", "decoder")
    assert table.modules == ("vision", "language") and table.multimodal
    assert (table.head.module, table.tail.module) == ("vision", "language")
    # Head: patch embedding 3·p²·h and positions s·h of the tower, token embedding v·h of the language model.
    assert table.head.param_mb * MB == 16 * (12 * 32 + 16 * 32 + 32 * 16)
    assert table.tail.param_mb * MB == 16 * (16 + 32 * 16)


def test_options_are_priced_in_sapp_order():
    table = estimate_layers(GPT, options=["full", "none"])
    assert table.options("layer") == ("none", "full")


def test_const_mb_is_the_tables_constant():
    assert estimate_layers(GPT, const_mb=2500).const_mb == 2500


VIT = TransformerConfig(layers=2, hidden_size=16, num_heads=4, ffn_size=64, seq_length=8, patch_size=2, name="vit")


@pytest.mark.parametrize("models, options, parallel, message", [
    ((), SAPP_OPTIONS, {}, "estimate_layers needs at least one TransformerConfig; got none"),
    ((GPT, "x"), SAPP_OPTIONS, {}, "models[1] must be a TransformerConfig; got str"),
    ((GPT,), ("none", "offload"), {}, "options must be distinct names among 'none', 'selective', 'comm', 'both', "
                                      "'full', 'selective_op'; got ('none', 'offload')"),
    ((GPT,), "none", {}, "options must be distinct names among 'none', 'selective', 'comm', 'both', 'full', "
                         "'selective_op'; got 'none'"),
    ((GPT,), SAPP_OPTIONS, dict(tensor_parallel=8), "models[0] ('layer') num_heads=4 is not a multiple of "
                                                    "tensor_parallel = 8"),
    ((GPT,), SAPP_OPTIONS, dict(tensor_parallel=4, context_parallel=4),
     "models[0] ('layer') seq_length=8 is not a multiple of the sequence split (context_parallel, times "
     "tensor_parallel under sequence_parallel) = 16"),
    ((GPT, GPT), SAPP_OPTIONS, {}, "models[0] ('layer') vocab_size=32; only the last stack has a vocabulary "
                                   "(its token embedding is the head, its LM head the tail)"),
    ((VIT,), SAPP_OPTIONS, {}, "models[0] ('vit') needs vocab_size > 0: the last stack's LM head is the tail"),
    ((VIT, VIT), SAPP_OPTIONS, {}, "models[1] ('vit') patch_size=2; only the first stack embeds patches"),
    ((TransformerConfig(layers=2, hidden_size=16, num_heads=4, ffn_size=64, seq_length=8, name="a"), GPT),
     SAPP_OPTIONS, {}, "models[0] ('a') needs patch_size > 0: the head embeds the first stack's input, and only "
                       "the last stack has a vocabulary"),
    ((VIT, TransformerConfig(layers=2, hidden_size=16, num_heads=4, ffn_size=64, seq_length=8, vocab_size=32,
                             name="vit")),
     SAPP_OPTIONS, {}, "layer kind name(s) 'vit' repeat; give each stack its own name (and moe_name); "
                       "'embedding' and 'lm_head' are the head and tail"),
])
def test_bad_estimate_inputs(models, options, parallel, message):
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        estimate_layers(*models, parallel=ParallelConfig(**parallel), options=options)


def test_bad_argument_types():
    with pytest.raises(InputError, match=r"^parallel must be a ParallelConfig; got dict$"):
        estimate_layers(GPT, parallel={})
    with pytest.raises(InputError, match=r"^device must be a DeviceConfig, a preset name or a hardware file \(\.toml\); got dict$"):
        estimate_layers(GPT, device={})
    with pytest.raises(InputError, match=r"^cluster must be a Cluster, a preset name or a hardware file \(\.toml\); got int$"):
        estimate_layers(GPT, cluster=8)
    with pytest.raises(InputError, match=r"^time_model must be one of 'roofline', 'flops'; got 'mfu'$"):
        estimate_layers(GPT, time_model="mfu")
    with pytest.raises(InputError, match=r"^const_mb must be a finite number >= 0; got -1$"):
        estimate_layers(GPT, const_mb=-1)
    with pytest.raises(InputError, match=r"^kernels must be a KernelConfig; got str$"):
        estimate_layers(GPT, kernels="flash")


def test_kernels_change_what_a_layer_keeps_by_their_closed_forms():
    # s = 8, b = 2 (16 tokens), h = 16, a = 4 (d = 4), f = 64, bf16 (e = 2), dropout on, no parallelism.
    def kept(**kernels):
        table = estimate_layers(GPT, parallel=ParallelConfig(micro_batch_size=2), device=SLOW,
                                kernels=KernelConfig(**kernels), options=("none", "selective"))
        return (table.rows("layer")["activation_mb"] * MB / 16).to_dict()

    paper = kept()
    assert paper == {"none": 34 * 16 + 5 * 4 * 8, "selective": 34 * 16}
    # Per (query, key) pair: fp32 softmax 4a, then the dropout's mask and output (1 + e)·a, vs (e + 1 + e)·a.
    assert kept(attention="eager")["none"] - paper["none"] == 8 * (4 - 2) * 4
    assert kept(attention="eager")["selective"] == paper["selective"]
    # Flash: nothing per pair, the fp32 log-sum-exp per head and token.
    assert kept(attention="flash") == {"none": paper["selective"] + 4 * 4, "selective": paper["selective"]}
    # Math: Q, K, V as fp32 copies (MHA: no repeat), fp32 softmax, fp32 dropout mask and output.
    assert kept(attention="math")["none"] - paper["selective"] == (4 - 2) * 3 * 16 + 8 * (4 + 1 + 4) * 4
    assert kept(norm="hf")["none"] - paper["none"] == 2 * (4 * 16 + 4)
    assert kept(dropout_mask="dtype")["none"] - paper["none"] == 2 * 16 + 8 * 4  # two hidden masks, the core's


def test_hidden_dropout_drops_the_two_residual_masks_only():
    def kept(model):
        table = estimate_layers(model, parallel=ParallelConfig(micro_batch_size=2), device=SLOW, options=("none",))
        return table.rows("layer")["activation_mb"].iloc[0] * MB / 16, table.head.activation_mb * MB / 16

    attention_only = TransformerConfig(layers=3, hidden_size=16, num_heads=4, ffn_size=64, seq_length=8,
                                       vocab_size=32, hidden_dropout=False)
    assert kept(GPT)[0] - kept(attention_only)[0] == 2 * 16
    assert kept(attention_only)[1] == 0


def test_the_flops_model_still_writes_the_bundled_tables_byte_for_byte(tmp_path):
    """The bundled layer tables were made with the paper's count; ``time_model="flops"`` keeps making them."""
    import importlib.util

    from sappkit import write_layers_json

    from ..bundled import DATA

    spec = importlib.util.spec_from_file_location("make_layers", DATA / "make_layers.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    for name, models, parallel, const in (("llama2_70b", (make.LLAMA2_70B,), make.LLAMA2_70B_PARALLEL, 3000),
                                          ("deepseek_v3", (make.DEEPSEEK_V3,), make.DEEPSEEK_V3_PARALLEL, 4000),
                                          ("vlm", (make.VISION, make.LANGUAGE), make.VLM_PARALLEL, 3000)):
        table = estimate_layers(*models, parallel=parallel, device=make.DEVICE, time_model="flops", const_mb=const)
        write_layers_json(table, tmp_path / f"{name}.json")
        assert (tmp_path / f"{name}.json").read_bytes() == (DATA / f"{name}.json").read_bytes(), name
