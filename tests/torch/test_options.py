"""Recompute option specs: what each keeps on a Llama layer (closed forms), and the specs refused."""

import re

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy

from sappkit import InputError
from sappkit.torch import measure_layers
from sappkit.torch.options import DEFAULT_OPTIONS, option_specs

from .models import llama

MB = 2**20
SDPA = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


def per_token(block, options) -> dict[str, float]:
    table = measure_layers(block.layer, block.example, kwargs=block.kwargs, options=options, repeats=1)
    return (table.rows(table.body_kinds[0])["activation_mb"] * MB / block.tokens).to_dict()


def test_each_spec_keeps_what_it_does_not_recompute():
    block = llama()
    h, heads, ffn = block.twin.hidden_size, block.twin.num_heads, block.twin.ffn_size
    kept = per_token(block, {
        "none": "none", "full": "full", "core": "core_attention", "mlp": ["mlp"],
        "recompute_all": lambda ctx, op, *args, **kwargs: CheckpointPolicy.PREFER_RECOMPUTE,
        "save_attention": [SDPA],
        "save_attention_policy": lambda ctx, op, *args, **kwargs: op is SDPA,
    })
    assert kept["full"] == kept["recompute_all"] == 4 * h  # the input, fp32
    # The core's inputs stay (the layer saves Q, K, V anyway); its fp32 log-sum-exp goes.
    assert kept["none"] - kept["core"] == 4 * heads
    # The MLP keeps its input (saved anyway) and four e·f intermediates, which it now recomputes.
    assert kept["none"] - kept["mlp"] == 4 * 4 * ffn
    # Op-level selective checkpointing keeps the input and the cached attention output and log-sum-exp.
    assert kept["save_attention"] == kept["save_attention_policy"] == 4 * h + 4 * h + 4 * heads


def test_names_alone_take_the_default_specs():
    assert option_specs(("full", "none")) == {"full": "full", "none": "none"}
    assert option_specs(tuple(DEFAULT_OPTIONS))["selective"] == "core_attention"


@pytest.mark.parametrize("options, message", [
    (("none", "offload"), "options entry 'offload' needs a spec saying what it recomputes; give options as a "
                          "mapping, e.g. {'offload': ['self_attn']} (names alone may be 'none', 'selective', "
                          "'full')"),
    ("none", "options must be a sequence of option names or a mapping name -> spec; got 'none'"),
    ((), "options must name at least one option, each once; got ()"),
    ({"half": "half"}, "options['half'] must be 'none', 'full', 'core_attention', a list of submodule names, a "
                       "list of OpOverloads or a selective-checkpoint policy function; got 'half'"),
    ({"mixed": ["mlp", SDPA]}, "options['mixed'] must be 'none', 'full', 'core_attention', a list of submodule "
                               "names, a list of OpOverloads or a selective-checkpoint policy function; "
                               f"got {['mlp', SDPA]!r}"),
    ({"": "none"}, "options names must be non-empty strings; got ''"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        option_specs(options)


def test_core_attention_needs_an_sdpa_call():
    block = llama(attention="eager")
    message = ("option spec 'core_attention' recomputes the calls of torch.nn.functional.scaled_dot_product_attention, "
               "and the block made none (an attention written in plain ops, such as transformers' 'eager' "
               "implementation?); name the submodules to recompute or give a selective-checkpoint policy instead")
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        per_token(block, ("selective",))


def test_unknown_submodules_are_refused_with_the_ones_there_are():
    block = llama()
    message = ("option spec names submodule 'attention', which the block does not have; its submodules include "
               "'self_attn', 'self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj', 'self_attn.o_proj', 'mlp', "
               "'mlp.gate_proj', 'mlp.up_proj'")
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        per_token(block, {"attention": ["attention"]})
    assert block.layer.mlp.forward.__func__ is type(block.layer.mlp).forward  # nothing left patched
