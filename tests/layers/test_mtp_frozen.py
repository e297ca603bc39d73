"""Multi-token-prediction layers and frozen stacks in estimate_layers, each against its formula worked by hand.

MTP (DeepSeek-V3 sec. 2.2; Megatron-LM's last stage holds the MTP layers and a copy of the embedding; SAPP's
recompute chooser puts the MTP layer after the output layer, in the last stage's working set at the end of
warm-up): the tail gains, per MTP layer, a body layer, the 2h -> h projection, three norms and a second output
head's logits, and the embedding copy once. A frozen stack: weights only (no gradient, no optimizer state), no
weight-gradient matmuls, no gradient reduction or optimizer step.
"""

import pytest

from sappkit import InputError, ParallelConfig, TransformerConfig, estimate_layers
from sappkit.balancer import even_plan

H, V, S = 1024, 50_000, 2048
MB = 2**20


def gpt(**fields):
    return TransformerConfig(layers=4, hidden_size=H, num_heads=16, ffn_size=4 * H, seq_length=S, vocab_size=V,
                             **fields)


def test_mtp_layers_add_a_layer_a_projection_and_an_output_head_to_the_tail():
    plain, mtp = (estimate_layers(gpt(mtp_layers=n), options=("none", "full"), time_model="flops") for n in (0, 2))
    layer = plain.rows("layer").loc["none"]
    # bf16 weights 2 + fp32 gradient 4 + Adam 12 bytes per parameter (ZeRO-1 on one rank)
    per_param = 2 + 4 + 12
    extra_params = V * H + 2 * (2 * H * H + 3 * H)  # the embedding copy once; projection and norms per layer
    assert mtp.tail["param_mb"] - plain.tail["param_mb"] == pytest.approx(
        2 * layer["param_mb"] + extra_params * per_param / MB)
    # per token: the two norms' inputs 2eh, the projection's input 2eh, the output head's 2eh and fp32 logits 4v
    kept = S * (3 * 2 * 2 * H + 4 * V)
    assert mtp.tail["activation_mb"] - plain.tail["activation_mb"] == pytest.approx(
        2 * (layer["activation_mb"] + kept / MB))
    # forward: the block's, then 2 * 2h * h (projection) + 2hv (output head) FLOPs per token, at 300 TFLOP/s x 40%
    ms_per_flop = 1e3 / (300e12 * 0.4)
    assert mtp.tail["forward_time"] - plain.tail["forward_time"] == pytest.approx(
        2 * (layer["forward_time"] + S * (4 * H * H + 2 * H * V) * ms_per_flop))
    assert mtp.tail["backward_time"] - plain.tail["backward_time"] == pytest.approx(
        2 * (mtp.tail["forward_time"] - plain.tail["forward_time"]))
    assert mtp.body_layers == plain.body_layers == 4  # the decoder's layers are unchanged


@pytest.mark.parametrize("schedule, stages, last", [("1f1b", 2, 1), ("dualpipev", 2, 0)])
def test_the_last_stage_holds_the_mtp_layers_in_flight_and_in_its_working_set(schedule, stages, last):
    # SAPP's estimator at the end of warm-up: the output layer's working set plus the MTP layer's, each what it
    # keeps at one micro-batch; the stage also holds them at its one micro-batch in flight (the tail's count).
    plain, mtp = (estimate_layers(gpt(mtp_layers=n), options=("none",)) for n in (0, 1))
    plans = [even_plan(table, option="none", stages=stages, micro_batches=8, memory_mb=1e6, schedule=schedule,
                       chunks=2 if schedule == "dualpipev" else 1) for table in (plain, mtp)]
    params = mtp.tail["param_mb"] - plain.tail["param_mb"]
    kept = mtp.tail["activation_mb"] - plain.tail["activation_mb"]
    grown = plans[1].stages["memory_mb"] - plans[0].stages["memory_mb"]
    assert grown.iloc[last] == pytest.approx(params + kept * (1 + 1))  # in flight (one) and the working set
    assert grown.drop(last).abs().max() == pytest.approx(0.0)
    simulated = plans[1].simulate().stages["memory_mb"] - plans[0].simulate().stages["memory_mb"]
    assert simulated.tolist() == pytest.approx(grown.tolist())  # the simulator's peaks see them alike
    assert plans[1].stages["time"].iloc[last] - plans[0].stages["time"].iloc[last] == pytest.approx(
        mtp.tail["forward_time"] + mtp.tail["backward_time"] - plain.tail["forward_time"]
        - plain.tail["backward_time"])


def test_only_the_last_stack_has_mtp_layers():
    vision = TransformerConfig(layers=2, hidden_size=H, num_heads=16, ffn_size=4 * H, seq_length=256, patch_size=14,
                               name="vit", module="vision", mtp_layers=1)
    with pytest.raises(InputError) as caught:
        estimate_layers(vision, gpt())
    assert str(caught.value) == ("models[0] ('vit') mtp_layers=1; only the last stack predicts tokens (its MTP "
                                 "layers follow its last layer)")


def test_a_frozen_stack_holds_its_weights_alone_and_computes_no_weight_gradients():
    parallel = ParallelConfig(data_parallel=4, zero=1)
    trained, frozen = (estimate_layers(gpt(frozen=f), parallel=parallel, options=("none",), time_model="flops")
                       for f in (False, True))
    dense = trained.rows("layer").loc["none"]
    still = frozen.rows("layer").loc["none"]
    # trained: 2 + 4 + 12/4 bytes per parameter; frozen: the bf16 weights, 2 bytes
    assert still["param_mb"] == pytest.approx(dense["param_mb"] * 2 / (2 + 4 + 12 / 4))
    # backward: the input gradients alone, the matmuls once (not twice) and the attention core twice as before
    forward = dense["forward_time"]
    core = S * S * 2 * 16 * (64 + 64) / 1 * 1e3 / (300e12 * 0.4)  # 2a(d + d_v) FLOPs per (query, key) pair
    assert still["forward_time"] == pytest.approx(forward)
    assert still["backward_time"] == pytest.approx(forward + core)
    assert dense["backward_time"] == pytest.approx(2 * forward)
    parts = frozen.breakdown.set_index("kind").loc["layer"]
    assert (parts["dp_comm_ms"], parts["optimizer_ms"], parts["params"]) == (0.0, 0.0, 0.0)
    assert trained.breakdown.set_index("kind").loc["layer", "dp_comm_ms"] > 0
    assert still["activation_mb"] == dense["activation_mb"]  # the input gradients still need them


def test_a_frozen_stack_runs_no_weight_gradient_matmul_on_the_roofline():
    from sappkit.layers.ops import BACKWARD, FORWARD, layer_ops
    from sappkit.layers.configs import KernelConfig
    from sappkit.hardware import DeviceConfig
    device, parallel = DeviceConfig(), ParallelConfig()
    trained, frozen = (layer_ops(gpt(frozen=f), False, parallel, device, KernelConfig()) for f in (False, True))
    weights = [op for op in trained if op.matmul and not op.core]
    forward = sum(op.flops for op in weights if op.phase == FORWARD)
    assert sum(op.flops for op in weights if op.phase == BACKWARD) == pytest.approx(2 * forward)
    assert sum(op.flops for op in frozen if op.matmul and not op.core and op.phase == BACKWARD) == \
        pytest.approx(forward)
    assert [op for op in frozen if op.core] == [op for op in trained if op.core]
