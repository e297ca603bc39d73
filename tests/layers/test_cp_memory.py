"""All-gather context parallelism's working set (the whole sequence's keys and values, their gradients and a
reordered copy in the backward), against its closed form by hand; ring and Ulysses hold none of it."""

import dataclasses

import pytest

from sappkit import KernelConfig, ParallelConfig, TransformerConfig, estimate_layers
from sappkit.layers.param_memory import fsdp_working_bytes

#: Grouped-query attention with values narrower than keys, so that ``max(K, V)`` is the keys'.
GQA = TransformerConfig(layers=4, hidden_size=1024, num_heads=16, num_kv_heads=4, head_dim=64, v_head_dim=32,
                        ffn_size=2816, seq_length=4096, vocab_size=8000, gated_mlp=True, mtp_layers=1)
FLASH = KernelConfig(attention="flash")
T, B = 2, 2


def _table(kind, c, model=GQA, **parallel):
    parallel = ParallelConfig(tensor_parallel=T, context_parallel=c, micro_batch_size=B, cp_kind=kind,
                              data_parallel=2, **parallel)
    return estimate_layers(model, parallel=parallel, kernels=FLASH, options=("none", "full"))


def _closed_form_mb(c, s=4096, kv_heads=4, d=64, d_v=32):
    """``e·n·(a_kv/t)·((d + d_v)(3 + 1/2c) + max(d, d_v))`` in MB, bf16, ``n = s·b``."""
    return 2 * s * B * kv_heads / T * ((d + d_v) * (3 + 1 / (2 * c)) + max(d, d_v)) / 2**20


@pytest.mark.parametrize("c", [2, 4])
def test_allgather_holds_the_whole_sequences_keys_values_and_their_gradients_in_the_backward(c):
    table = _table("allgather", c)
    body = table.frame[table.frame["role"] == "body"]
    assert body["working_mb"].tolist() == pytest.approx([_closed_form_mb(c)] * 2, rel=1e-12)
    assert body["first_working_mb"].tolist() == body["working_mb"].tolist()
    # 2 bytes x 4,096 x 2 tokens x 2 heads per rank = 2**15 per element of a head: 11.75 MB at cp 2, 11.375 at 4
    assert _closed_form_mb(c) == {2: (96 * 3.25 + 64) / 32, 4: (96 * 3.125 + 64) / 32}[c] == {2: 11.75, 4: 11.375}[c]
    # the tail's MTP layer runs an attention of its own; the embedding none
    ends = table.frame[table.frame["role"] != "body"].set_index("role")["working_mb"]
    assert ends["head"] == 0.0 and ends["tail"] == pytest.approx(_closed_form_mb(c), rel=1e-12)
    # what is kept per layer does not change: a transient working set
    ring = _table("ring", c)
    assert table.frame["activation_mb"].tolist() == ring.frame["activation_mb"].tolist()


@pytest.mark.parametrize("kind", ["ring", "a2a"])
@pytest.mark.parametrize("c", [1, 2, 4])
def test_ring_and_ulysses_hold_none_of_it_nor_does_one_rank(kind, c):
    assert (_table(kind, c).frame[["working_mb", "first_working_mb"]] == 0.0).all().all()
    assert (_table("allgather", 1).frame[["working_mb", "first_working_mb"]] == 0.0).all().all()


def test_it_adds_to_what_zero_3_gathers_and_mla_gathers_every_heads_keys():
    table = _table("allgather", 2, zero=3)
    body = table.frame[table.frame["role"] == "body"].iloc[0]
    dense = table.breakdown.set_index("kind").loc["layer", "params"].iloc[0]
    working, first = fsdp_working_bytes(dense, 0.0, ParallelConfig(tensor_parallel=T, context_parallel=2,
                                                                   data_parallel=2, zero=3))
    assert working > 0
    assert body["working_mb"] == pytest.approx(_closed_form_mb(2) + working / 2**20, rel=1e-12)
    assert body["first_working_mb"] == pytest.approx(_closed_form_mb(2) + first / 2**20, rel=1e-12)
    mla = dataclasses.replace(GQA, num_kv_heads=16, q_lora_rank=256, kv_lora_rank=128, rope_head_dim=32,
                              mtp_layers=0)
    latent = _table("allgather", 2, model=mla).frame.set_index("role").loc["body", "working_mb"].iloc[0]
    assert latent == pytest.approx(_closed_form_mb(2, kv_heads=16), rel=1e-12)  # K and V per head, a_kv = a
