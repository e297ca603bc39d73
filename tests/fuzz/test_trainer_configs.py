"""Malformed trainer configs: every reader answers with a config or an InputError, never a traceback."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sappkit import InputError
from sappkit.trainers.hyperparallel import read_hyperparallel
from sappkit.trainers.megatron import MEGATRON_FLAGS, read_megatron
from sappkit.trainers.mindformers import read_mindformers
from sappkit.trainers.torchtitan_import import read_torchtitan

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
values = st.one_of(st.none(), st.booleans(), st.integers(-3, 70), st.text(max_size=5),
                   st.lists(st.integers(-2, 5), max_size=4), st.lists(st.lists(st.integers(-2, 5), max_size=3),
                                                                       max_size=3))


def answers(read):
    try:
        read()
    except InputError:
        pass


@SETTINGS
@given(st.lists(st.one_of(st.sampled_from(sorted(MEGATRON_FLAGS)), st.integers(-2, 90).map(str), st.just("0"),
                          st.sampled_from(["full", "block", "uniform", "selective", "E|tt|tL", "Ett|(t|)*2,L",
                                           "$X", "core_attn"])), max_size=14))
def test_megatron_arguments(words):
    answers(lambda: read_megatron(words, world_size=64))


@SETTINGS
@given(st.fixed_dictionaries({}, optional={
    "parallel_config": st.dictionaries(st.sampled_from(["pipeline_stage", "micro_batch_num", "data_parallel",
                                                        "model_parallel", "seq_split_num"]), values, max_size=4),
    "model": st.fixed_dictionaries({"model_config": st.dictionaries(
        st.sampled_from(["num_layers", "offset", "pp_interleave_num"]), values, max_size=3)}),
    "parallel": st.fixed_dictionaries({"pipeline_config": st.dictionaries(
        st.sampled_from(["pipeline_interleave", "pipeline_scheduler"]),
        st.one_of(values, st.sampled_from(["1f1b", "seqpipe", "seqvpp", "zero_bubble_v"])), max_size=2)}),
    "recompute_config": st.dictionaries(st.sampled_from(["recompute", "select_recompute", "select_comm_recompute"]),
                                        values, max_size=3)}))
def test_mindformers_documents(document):
    answers(lambda: read_mindformers(document))


@SETTINGS
@given(st.fixed_dictionaries({}, optional={
    "parallelism": st.dictionaries(st.sampled_from(["pipeline_parallel_degree", "pipeline_parallel_schedule",
                                                    "module_fqns_per_model_part", "pipeline_parallel_layers_per_stage",
                                                    "pipeline_parallel_microbatch_size", "num_pp_microbatches",
                                                    "data_parallel_shard_degree", "tensor_parallel_degree"]),
                                   st.one_of(values, st.sampled_from(["1F1B", "Interleaved1F1B", "ZBVZeroBubble"]),
                                             st.lists(st.lists(st.sampled_from(["layers.0", "layers.1", "norm"]),
                                                               max_size=3), max_size=4)), max_size=5),
    "training": st.dictionaries(st.sampled_from(["local_batch_size", "global_batch_size"]), values, max_size=2),
    "activation_checkpoint": st.dictionaries(st.sampled_from(["mode", "selective_ac_option"]),
                                             st.one_of(values, st.sampled_from(["full", "selective", "op", "2"])),
                                             max_size=2)}))
def test_torchtitan_settings(settings_):
    answers(lambda: read_torchtitan(settings_, num_layers=4, world_size=16))


@SETTINGS
@given(st.dictionaries(st.sampled_from(["accelerator", "activation_checkpoint"]),
                       st.one_of(values, st.dictionaries(st.sampled_from(["pp_size", "tp_size", "mode", "layers"]),
                                                         st.one_of(values, st.dictionaries(
                                                             st.sampled_from(["0", "1-2", "x"]),
                                                             st.sampled_from(["off", "full", "no"]))), max_size=3)),
                       max_size=2))
def test_hyperparallel_documents(document):
    answers(lambda: read_hyperparallel(document, num_layers=4))
