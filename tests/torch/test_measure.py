"""measure_layers: closed forms on small modules, the boundary convention, parameter rules, the table, bad input."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sappkit import InputError, LayerTable, ParallelConfig, balance, estimate_layers
from sappkit.torch import measure_layers

from .models import BATCH, llama, mixtral

MB = 2**20
N, H = 64, 32


def kept(table: LayerTable, column="activation_mb") -> dict[str, float]:
    """Bytes per option of the body kind."""
    return (table.rows(table.body_kinds[0])[column] * MB).to_dict()


class Stack(nn.Module):
    """Decoder layers in a row, as a model runs them."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, hidden, position_embeddings):
        for layer in self.layers:
            hidden = layer(hidden, position_embeddings=position_embeddings)
        return hidden


class Tail(nn.Module):
    """LM head and cross-entropy loss."""

    def __init__(self, hidden, vocab):
        super().__init__()
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, hidden, labels):
        return F.cross_entropy(self.head(hidden).float().flatten(0, 1), labels.flatten())


@pytest.mark.parametrize("bias", [False, True])
def test_a_linear_layer_keeps_its_input_and_its_backward_holds_three_gradients(bias):
    table = measure_layers(nn.Linear(H, H, bias=bias), torch.randn(N, H), options=("none", "full"), repeats=1)
    # Incoming gradient, the input's and the weight's (and the bias's): 4·(2nh + h² + h) bytes.
    gradients = 4 * (2 * N * H + H * H + bias * H)
    assert kept(table) == {"none": 4 * N * H, "full": 4 * N * H}
    # Under full the recompute re-saves the input itself (nothing new); working_set_mb adds the plain
    # option's activation back, so the table's working set equals the backward's peak again.
    assert kept(table, "working_mb") == {"none": gradients, "full": gradients - 4 * N * H}
    assert table.working_set_mb("Linear", "full") * MB == gradients
    params = H * H + bias * H
    assert table.param_mb("Linear") * MB == 16 * params  # fp32: weight 4, gradient 4, Adam moments 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_stack_of_decoder_layers_keeps_the_sum_of_its_layers(dtype):
    one, two = llama(dtype=dtype), llama(dtype=dtype)
    stack = Stack(one.layer, two.layer)
    single = kept(measure_layers(one.layer, one.example, kwargs=one.kwargs, repeats=1))
    options = {"none": "none", "selective": "core_attention", "full": ["layers.0", "layers.1"]}
    both = kept(measure_layers(stack, one.example, kwargs=one.kwargs, options=options, repeats=1))
    assert both == {option: 2 * single[option] for option in single}
    # fp32: the first norm saves the layer's input, counted by the layer; bf16: it saves an fp32 copy.
    e = torch.finfo(dtype).bits // 8
    assert single["full"] == e * one.tokens * one.twin.hidden_size


def test_a_block_that_keeps_its_output_shares_it_with_the_next_blocks_input():
    x = torch.randn(N, H)
    relu, linear = nn.ReLU(), nn.Linear(H, H)
    apart = [kept(measure_layers(module, x, options=("none",), repeats=1))["none"] for module in (relu, linear)]
    together = kept(measure_layers(nn.Sequential(relu, linear), x, options=("none",), repeats=1))["none"]
    assert apart == [4 * N * H, 4 * N * H] and together == 4 * N * H


def test_head_and_tail_are_measured_the_same_way():
    block = llama()
    vocab, hidden = 256, block.twin.hidden_size
    ids = torch.randint(0, vocab, (BATCH, 32))
    table = measure_layers(block.layer, block.example, kwargs=block.kwargs, options=("none",), repeats=1,
                           head=(nn.Embedding(vocab, hidden), ids), tail=(Tail(hidden, vocab), (block.example, ids)))
    assert table.frame[["kind", "role", "count", "option"]].values.tolist() == [
        ["LlamaDecoderLayer", "body", 1, "none"], ["Embedding", "head", 1, "none"], ["Tail", "tail", 1, "none"]]
    tokens = block.tokens
    # The embedding keeps its int64 token ids; the tail its input, the fp32 log-softmax, the labels and
    # cross-entropy's fp32 total weight.
    assert table.head.activation_mb * MB == 8 * tokens
    assert table.tail.activation_mb * MB == tokens * (4 * hidden + 4 * vocab + 8) + 4
    assert table.head.param_mb * MB == table.tail.param_mb * MB == 16 * vocab * hidden


def test_the_table_records_the_device_kind_count_module_and_times():
    block = llama()
    table = measure_layers(block.layer, block.example, kwargs=block.kwargs, options=("none", "full"), kind="decoder",
                           count=80, module_name="language", repeats=2)
    assert table.device == "cpu" and table.with_frame(table.frame).device == "cpu"
    assert table.body_kinds == ("decoder",) and table.count("decoder") == 80 and table.modules == ("language",)
    assert (table.frame[["forward_time", "backward_time"]] > 0).all().all()


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_parameter_memory_follows_estimate_layers_rules(zero):
    block = llama(dtype=torch.bfloat16)
    parallel = ParallelConfig(micro_batch_size=BATCH, data_parallel=4, zero=zero)
    table = measure_layers(block.layer, block.example, kwargs=block.kwargs, options=("none",), repeats=1,
                           parallel=parallel)
    estimate = estimate_layers(block.twin, parallel=parallel, options=("none",)).rows("layer")
    assert table.param_mb("LlamaDecoderLayer") == pytest.approx(estimate["param_mb"].iloc[0], rel=1e-12)
    if zero == 3:  # the gathered weights and gradients come on top of the measured backward peak
        assert table.frame["working_mb"].iloc[0] > estimate["working_mb"].iloc[0] > 0


def test_routed_experts_are_sharded_over_expert_parallel_ranks():
    block = mixtral()
    parallel = ParallelConfig(micro_batch_size=BATCH, data_parallel=2, expert_parallel=2, dtype="fp32")
    table = measure_layers(block.layer, block.example, kwargs=block.kwargs, options=("none",), repeats=1,
                           experts=("mlp.experts",), parallel=parallel)
    estimate = estimate_layers(block.twin, parallel=parallel, options=("none",)).rows("layer_moe")
    assert table.param_mb("MixtralDecoderLayer") == pytest.approx(estimate["param_mb"].iloc[0], rel=1e-12)


@pytest.mark.parametrize("kwargs, message", [
    (dict(count=0), "count must be an int >= 1; got 0"),
    (dict(warmup=0), "warmup must be an int >= 1; got 0 (the first pass allocates the gradients)"),
    (dict(parallel=ParallelConfig(dtype="bf16")), "parallel.dtype is 'bf16' but the block's parameters are "
                                                  "'fp32'; give ParallelConfig(dtype='fp32')"),
    (dict(parallel=ParallelConfig(dtype="fp32", tensor_parallel=2)),
     "measure_layers measures the block as it runs on one device: tensor_parallel and context_parallel must be "
     "1; got 2 and 1 (measure the sharded block instead)"),
    (dict(experts=("mlp.experts",)), "experts names submodule 'mlp.experts', which the block does not have"),
    (dict(experts="mlp"), "experts must be a sequence of submodule names; got the string 'mlp'"),
    (dict(head=(nn.Embedding(4, 4),)), "head must be (module, example) or (module, example, kwargs); "
                                       "got (Embedding(4, 4),)"),
    (dict(tail=(nn.Linear(H, 2), torch.randn(N, H))), "the tail must return the loss, one number; got a tensor "
                                                      "of shape (64, 2)"),
    (dict(tail=("loss", torch.randn(N, H))), "tail module must be a torch.nn.Module; got str"),
])
def test_bad_input_is_refused_naming_the_argument(kwargs, message):
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        measure_layers(nn.Linear(H, H), torch.randn(N, H), options=("none",), repeats=1, **kwargs)


class Nothing(nn.Module):
    def forward(self, hidden):
        return None


def test_a_block_must_return_a_tensor_that_needs_a_gradient():
    message = ("the block's forward must return a tensor that requires grad (or a tuple starting with one); "
               "got NoneType")
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        measure_layers(Nothing(), torch.randn(N, H), options=("none",), repeats=1)


def test_options_named_beside_sapps_are_declared_custom_and_plan():
    table = measure_layers(nn.Linear(H, H), torch.randn(N, H), options={"none": "none", "mlp": "full"}, count=4,
                           repeats=1)
    assert table.custom_options == ("mlp",) and table.options("Linear") == ("none", "mlp")
    assert balance(table, stages=2, micro_batches=2, memory_mb=1e5).has_plan
