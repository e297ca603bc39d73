"""The MindFormers/SAPP layer description JSON: what the writer writes, the original's key conventions, bad files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from sappkit import InputError, LayerTable, read_layers_json, write_layers_json
from sappkit.columns import SAPP_OPTIONS

DATA = Path(__file__).resolve().parents[2] / "data"
BUNDLED = ["llama2_70b.json", "deepseek_v3.json", "vlm.json"]
BODY = {"name": "block", "type": "BODY", "nb_layer": 4, "time": 10, "memory_parameter": 900,
        "memory_activation": 300, "memory_recompute": 20}
HEAD = {"name": "embed", "type": "HEAD", "nb_layer": 1, "time": 2, "memory_parameter": 500}
TAIL = {"name": "head", "type": "TAIL", "nb_layer": 1, "time": 3, "memory_parameter": 600}


def write(tmp_path, document, name="model.json") -> Path:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def read(tmp_path, *layers, **options) -> LayerTable:
    return read_layers_json(write(tmp_path, {"layers_description": list(layers)}), **options)


def times(table, kind="block") -> dict:
    rows = table.rows(kind)
    return {option: (row.forward_time, row.backward_time) for option, row in rows.iterrows()}


def assert_times(actual: dict, expected: dict) -> None:
    """``times(...)`` equals ``expected`` option by option, to rounding (approx takes no nested values)."""
    assert actual.keys() == expected.keys()
    for option, pair in expected.items():
        assert actual[option] == pytest.approx(pair, rel=1e-12), option


def raises_exactly(message: str):
    """Expect an InputError with exactly ``message``."""
    return pytest.raises(InputError, match=f"^{re.escape(message)}$")


# --- the bundled files and what the writer writes ----------------------------------------------------------------


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_files_are_what_the_writer_writes(tmp_path, name):
    table = read_layers_json(DATA / name)
    write_layers_json(table, tmp_path / name)
    assert (tmp_path / name).read_text() == (DATA / name).read_text()
    assert read_layers_json(DATA / name, time_semantics="legacy").frame.equals(table.frame)


def test_bundled_files_have_the_shapes_the_notebooks_expect():
    llama, deepseek, vlm = (read_layers_json(DATA / name) for name in BUNDLED)
    assert (llama.body_kinds, llama.body_layers, llama.options("decoder")) == (("decoder",), 80, SAPP_OPTIONS)
    assert deepseek.body_kinds == ("dense_decoder", "moe_decoder") and not deepseek.multimodal
    assert (deepseek.count("dense_decoder"), deepseek.count("moe_decoder")) == (3, 58)
    assert vlm.body_kinds == ("vit_block", "decoder") and vlm.modules == ("vision", "language")
    assert (vlm.head.module, vlm.tail.module) == ("vision", "language")
    assert all(table.const_mb > 0 for table in (llama, deepseek, vlm))


def test_the_written_json_uses_the_original_keys(tmp_path, extended_table):
    write_layers_json(extended_table, tmp_path / "m.json")
    document = json.loads((tmp_path / "m.json").read_text())
    assert document["stage_const_mem"] == 1234.5
    head, vit, decoder, tail = document["layers_description"]
    assert (head["type"], vit["type"], tail["type"]) == ("HEAD", "BODY", "TAIL")
    assert list(decoder)[:7] == ["name", "type", "model_name", "nb_layer", "time", "forward_time", "memory_parameter"]
    assert {k: decoder[k] for k in ("memory_activation", "memory_select_rec", "memory_select_comm",
                                    "memory_both_comm_select", "memory_recompute")} == {
        "memory_activation": 400, "memory_select_rec": 200, "memory_select_comm": 400 / 3,
        "memory_both_comm_select": 100, "memory_recompute": 80}
    assert decoder["recompute_time"] == 0.7 + 4 / 7 and "recompute_time " not in decoder
    assert (vit["working_mb"], vit["first_working_mb"]) == ({"none": 30, "full": 31}, {"none": 50, "full": 51})
    assert (decoder["memory_once_mb"], decoder["grad_mb"], "first_working_mb" in decoder) == (5.5, 2, False)
    assert (head["working_mb"], "grad_mb" in head, "memory_once_mb" in tail) == (1.5, False, False)


# --- the original's key conventions ------------------------------------------------------------------------------


def test_default_coefficients_multiply_twice_the_time(tmp_path):
    layer = {**BODY, "memory_select_rec": 200, "memory_select_comm": 150, "memory_both_comm_select": 100}
    table = read(tmp_path, HEAD, layer, TAIL)
    assert_times(times(table), {"none": (10, 20), "selective": (10, 20.8), "comm": (10, 22.5),
                                "both": (10, 23.3), "full": (10, 30)})
    assert (table.head.forward_time, table.head.backward_time) == (2, 4)
    assert (table.tail.forward_time, table.tail.backward_time) == (3, 6)


def test_stated_coefficients_replace_the_defaults(tmp_path):
    layer = {**BODY, "memory_select_rec": 200, "backward_coef": 0.1, "select_rec_coef": 0.25,
             "recompute_coef": 1.0, "select_comm_coef": 9.0}
    assert_times(times(read(tmp_path, layer)), {"none": (10, 22), "selective": (10, 25), "full": (10, 40)})


def test_explicit_times_override_coefficients_and_forward_time_overrides_time(tmp_path):
    layer = {**BODY, "memory_select_rec": 200, "forward_time": 12, "backward_time": 24.5, "select_rec_time": 26,
             "recompute_coef": 1.0, "recompute_time": 37}
    assert times(read(tmp_path, layer)) == {"none": (12, 24.5), "selective": (12, 26), "full": (12, 37)}
    # The coefficient base stays 2 * time when forward_time is stated.
    assert times(read(tmp_path, {**BODY, "forward_time": 12})) == {"none": (12, 20), "full": (12, 30)}


def test_the_originals_misspelt_recompute_time_is_read(tmp_path):
    assert times(read(tmp_path, {**BODY, "recompute_time ": 41}))["full"] == (10, 41)
    assert times(read(tmp_path, {**BODY, "recompute_time ": 41, "recompute_time": 41}))["full"] == (10, 41)


def test_legacy_semantics_split_time_in_thirds(tmp_path):
    layer = {**BODY, "time": 30, "memory_select_rec": 200}
    assert_times(times(read(tmp_path, layer, time_semantics="legacy")),
                 {"none": (10, 20), "selective": (10, 20.8), "full": (10, 30)})
    legacy = read(tmp_path, {**HEAD, "time": 3}, {**layer, "forward_time": 7, "recompute_time": 50},
                  time_semantics="legacy")
    assert times(legacy)["none"] == (7, 20) and times(legacy)["full"] == (7, 50)
    assert (legacy.head.forward_time, legacy.head.backward_time) == (1, 2)


def test_absent_and_null_options_are_not_considered_but_zero_is(tmp_path):
    layer = {**BODY, "memory_select_rec": None, "memory_select_comm": 0, "select_comm_coef": 0.5,
             "both_comm_select_coef": 0.2, "select_rec_coef": 0.3}
    table = read(tmp_path, layer)
    assert table.options("block") == ("none", "comm", "full")
    assert table.rows("block").activation_mb.to_dict() == {"none": 300, "comm": 0, "full": 20}


def test_head_and_tail_take_memory_activation_and_backward_time(tmp_path):
    table = read(tmp_path, {**HEAD, "memory_activation": 7, "backward_coef": 0.5, "model_name": None}, BODY,
                 {**TAIL, "backward_time": 9, "model_name": "lm"})
    assert (table.head.option, table.head.activation_mb, table.head.backward_time) == ("none", 7, 6)
    assert table.head.module == "model"  # null means absent
    assert (table.tail.activation_mb, table.tail.backward_time, table.tail.module) == (0, 9, "lm")


def test_model_name_is_the_module_and_extensions_are_read(tmp_path):
    vision = {**BODY, "name": "vit", "model_name": "vision", "working_mb": {"none": 3, "full": 4}, "grad_mb": 1}
    language = {**BODY, "name": "llm", "model_name": "language", "memory_once_mb": 2, "first_working_mb": 8}
    table = read(tmp_path, vision, language)
    assert table.modules == ("vision", "language") and table.multimodal
    assert table.rows("vit")[["working_mb", "first_working_mb", "grad_mb", "memory_once_mb"]].to_dict("list") == {
        "working_mb": [3, 4], "first_working_mb": [3, 4], "grad_mb": [1, 1], "memory_once_mb": [0, 0]}
    assert table.rows("llm")[["working_mb", "first_working_mb", "memory_once_mb"]].to_dict("list") == {
        "working_mb": [0, 0], "first_working_mb": [8, 8], "memory_once_mb": [2, 2]}


def test_an_original_model_file_reads(tmp_path):
    document = {
        "name": "llama2_70b_prof", "pre_defined_layer": {"LlamaEmbedding": 0, "LlamaRMSNorm": -1},
        "auto_partition_layer": {"LLamaDecodeLayer": 96},
        "layers_description": [
            {"name": "LlamaEmbedding", "model_name": "llama2_70b_prof", "type": "HEAD", "time": 13, "nb_layer": 1,
             "memory_parameter": 9000},
            {"name": "LLamaDecodeLayer", "model_name": "llama2_70b_prof", "type": "BODY", "time": 100,
             "nb_layer": 96, "memory_parameter": 1700, "memory_activation": 990, "memory_select_rec": 740,
             "memory_both_comm_select": 400, "memory_recompute": 30},
            {"name": "LlamaRMSNorm", "model_name": "llama2_70b_prof", "type": "TAIL", "time": 110, "nb_layer": 1,
             "memory_parameter": 5800}]}
    table = read_layers_json(write(tmp_path, document))
    assert table.options("LLamaDecodeLayer") == ("none", "selective", "both", "full")
    assert table.body_layers == 96 and table.const_mb == 0 and table.modules == ("llama2_70b_prof",)
    assert times(table, "LLamaDecodeLayer")["both"] == pytest.approx((100, 233), rel=1e-12)


# --- bad files ---------------------------------------------------------------------------------------------------


def layers(*described, **top):
    return {"layers_description": list(described), **top}


BAD_JSON = [
    ("{bad", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2); expected a "
             "MindFormers layer description object"),
    ([BODY], "the top level is a list; expected an object with key 'layers_description'"),
    ({"layers": [BODY]}, "the top level has unknown key 'layers'; see sappkit.read_layers_json for the keys it reads"),
    ({"stage_const_mem": 1}, "the top level has no key 'layers_description'; expected the list of layers"),
    (layers(), "key 'layers_description' is []; expected a non-empty list of layer objects"),
    ({"layers_description": "x" * 80}, "key 'layers_description' is a string; expected a non-empty list of layer "
                                       "objects"),
    (layers(BODY, stage_const_mem=-1), "key 'stage_const_mem' is -1; expected a number >= 0"),
    (layers(3), "layers_description[0] is 3; expected a layer object"),
    (layers({**BODY, "memory_recompte": 1}), "layers_description[0] (name 'block') has unknown key 'memory_recompte' "
                                             "(did you mean 'memory_recompute'?); see sappkit.read_layers_json for "
                                             "the keys it reads"),
    (layers({**BODY, "notes": "x"}), "layers_description[0] (name 'block') has unknown key 'notes'; see "
                                     "sappkit.read_layers_json for the keys it reads"),
    (layers({**BODY, "name": 5}), "layers_description[0] key 'name' is 5; expected a non-empty string"),
    (layers({k: v for k, v in BODY.items() if k != "name"}),
     "layers_description[0] has no key 'name'; expected the layer's kind name (a non-empty string)"),
    (layers({**BODY, "type": "MIDDLE"}), "layers_description[0] (name 'block') key 'type' is 'MIDDLE'; expected "
                                         "one of 'HEAD', 'BODY', 'TAIL'"),
    (layers({**BODY, "type": None}), "layers_description[0] (name 'block') has no key 'type'; expected one of "
                                     "'HEAD', 'BODY', 'TAIL'"),
    (layers({**BODY, "nb_layer": 2.5}), "layers_description[0] (name 'block') key 'nb_layer' is 2.5; expected an "
                                        "int >= 1"),
    (layers({**BODY, "nb_layer": "80"}), "layers_description[0] (name 'block') key 'nb_layer' is '80'; expected an "
                                         "int >= 1"),
    ('{"layers_description": [{"name": "b", "type": "BODY", "nb_layer": Infinity, "time": 1, '
     '"memory_parameter": 1, "memory_activation": 1}]}', "layers_description[0] (name 'b') key 'nb_layer' is inf; "
                                                         "expected an int >= 1"),
    (layers({**HEAD, "nb_layer": 2}, BODY), "layers_description[0] (name 'embed') key 'nb_layer' is 2; expected 1 "
                                            "(a HEAD layer is one layer)"),
    (layers({**BODY, "nb_layer": 1e300}), "layers_description[0] (name 'block') key 'nb_layer' is 1e+300; expected "
                                          "an int <= 2048 (sappkit.limits.MAX_LAYERS)"),
    (layers({**BODY, "nb_layer": 10**30}), "layers_description[0] (name 'block') key 'nb_layer' is "
                                           "1000000000000000000000000000000; expected an int <= 2048 "
                                           "(sappkit.limits.MAX_LAYERS)"),
    (layers({**BODY, "nb_layer": 10**400}), "layers_description[0] (name 'block') key 'nb_layer' is an int of 1329 "
                                            "bits; expected an int <= 2048 (sappkit.limits.MAX_LAYERS)"),
    (layers({**BODY, "nb_layer": True}), "layers_description[0] (name 'block') key 'nb_layer' is True; expected an "
                                         "int >= 1"),
    (layers({**BODY, "memory_parameter": 1e27}), "layers_description[0] (name 'block') key 'memory_parameter' is "
                                                 "1e+27; expected a number <= 1073741824 "
                                                 "(sappkit.limits.MAX_MEMORY_MB)"),
    (layers({**BODY, "time": 1e300}), "layers_description[0] (name 'block') key 'time' is 1e+300; expected a number "
                                      "<= 1000000000000000 (sappkit.limits.MAX_TIME)"),
    (layers({**BODY, "k" * 100: 1}), "layers_description[0] (name 'block') has unknown key a str of 100 characters; "
                                     "see sappkit.read_layers_json for the keys it reads"),
    (layers({k: v for k, v in BODY.items() if k != "time"}),
     "layers_description[0] (name 'block') has no key 'time'; expected the layer's time (a number >= 0)"),
    (layers({k: v for k, v in BODY.items() if k != "memory_parameter"}),
     "layers_description[0] (name 'block') has no key 'memory_parameter'; expected the parameter memory in MB "
     "(a number >= 0)"),
    (layers({**BODY, "memory_recompute": -5}), "layers_description[0] (name 'block') key 'memory_recompute' is -5; "
                                               "expected a number >= 0"),
    (layers({**BODY, "memory_activation": "300"}), "layers_description[0] (name 'block') key 'memory_activation' is "
                                                   "'300'; expected a number >= 0"),
    (layers({**BODY, "time": True}), "layers_description[0] (name 'block') key 'time' is True; expected a number "
                                     ">= 0"),
    ('{"layers_description": [{"name": "b", "type": "BODY", "nb_layer": 1, "time": NaN, "memory_parameter": 1, '
     '"memory_activation": 1}]}', "layers_description[0] (name 'b') key 'time' is nan; expected a number >= 0"),
    (layers({**BODY, "recompute_coef": -0.5}), "layers_description[0] (name 'block') key 'recompute_coef' is -0.5; "
                                               "expected a number >= 0"),
    (layers({**BODY, "model_name": ""}), "layers_description[0] (name 'block') key 'model_name' is ''; expected a "
                                         "non-empty string (the submodule the layer belongs to)"),
    (layers({k: v for k, v in BODY.items() if not k.startswith("memory_") or k == "memory_parameter"}),
     "layers_description[0] (name 'block') has no activation memory; a BODY layer needs at least one of "
     "memory_activation, memory_select_rec, memory_select_comm, memory_both_comm_select, memory_recompute (absent "
     "or null means the option is not considered)"),
    (layers({**BODY, "select_rec_time": 3}), "layers_description[0] (name 'block') has key 'select_rec_time' but "
                                             "'memory_select_rec' is absent or null, so option 'selective' is not "
                                             "considered; give its memory or drop the time"),
    (layers({**BODY, "recompute_time": 3, "recompute_time ": 4}),
     "layers_description[0] (name 'block') gives 'recompute_time' = 3 and 'recompute_time ' = 4; they are one "
     "time, state it once"),
    (layers({**HEAD, "memory_recompute": 1}, BODY), "layers_description[0] (name 'embed') has key "
                                                    "'memory_recompute'; a HEAD layer has one option (none), so only "
                                                    "memory_activation, backward_time and backward_coef apply"),
    (layers(BODY, {**TAIL, "recompute_time ": 1}), "layers_description[1] (name 'head') has key 'recompute_time '; "
                                                   "a TAIL layer has one option (none), so only memory_activation, "
                                                   "backward_time and backward_coef apply"),
    (layers({**BODY, "working_mb": {"none": 1}}), "layers_description[0] (name 'block') key 'working_mb' is "
                                                  "{'none': 1}; expected a number or an object with exactly the "
                                                  "keys none, full"),
    (layers({**BODY, "grad_mb": {"none": 1, "full": -1}}), "layers_description[0] (name 'block') key "
                                                           "'grad_mb.full' is -1; expected a number >= 0"),
    (layers(BODY, BODY), "layers_description[1] (name 'block') repeats the name of layers_description[0]; each "
                         "layer kind appears once"),
    (layers(HEAD, {**HEAD, "name": "embed2"}, BODY), "layers has 2 head kinds ('embed', 'embed2'); at most one "
                                                     "head is allowed"),
    (layers(HEAD, TAIL), "layers has no body kind; a pipeline needs at least one row with role 'body'"),
]


@pytest.mark.parametrize("document, message", BAD_JSON)
def test_bad_json_names_the_path_and_the_key(tmp_path, document, message):
    path = write(tmp_path, document)
    with raises_exactly(f"{path}: {message}"):
        read_layers_json(path)


def test_unreadable_json_and_an_unknown_time_semantics(tmp_path):
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with raises_exactly(f"{binary}: not UTF-8 text; expected a MindFormers layer description object"):
        read_layers_json(binary)
    with raises_exactly("time_semantics must be one of 'current', 'legacy'; got 'old'"):
        read_layers_json(write(tmp_path, layers(BODY)), time_semantics="old")


def test_writer_refuses_what_the_json_cannot_hold(tmp_path):
    rows = [dict(kind="b", role="body", count=2, param_mb=1, option=option, forward_time=forward, backward_time=2,
                 activation_mb=1) for option, forward in [("none", 1), ("offload", 1)]]
    with raises_exactly("layers kind 'b' has option(s) 'offload'; the layer JSON holds only 'none', 'selective', "
                        "'comm', 'both', 'full'"):
        write_layers_json(LayerTable(pd.DataFrame(rows), custom_options=("offload",)), tmp_path / "m.json")
    rows[1].update(option="full", forward_time=1.5)
    with raises_exactly("layers kind 'b' has forward_time [1.0, 1.5] across its options; the layer JSON holds one "
                        "forward time per kind"):
        write_layers_json(pd.DataFrame(rows), tmp_path / "m.json")
