"""Megatron's pipeline layout strings: sappkit's writer and reader against Megatron's parsing rules.

``megatron_reference`` re-implements the rules Megatron-LM documents for
``--pipeline-model-parallel-layout`` (the argument's help and the docstring
of ``PipelineParallelLayerLayout.parse_str_to_list``): commas are cosmetic,
``(...)*n`` unrolls a parenthesised group, then ``x*n`` a character, stages
split at ``|``, chunk-major (stage ``i = vpp * pp + rank``), one character per
layer: E embedding, t decoder, m MTP, L loss.
"""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sappkit import InputError
from sappkit.trainers.megatron_layout import Layout, format_layout, parse_layout


def megatron_reference(text: str) -> list[str]:
    """The documented rules, written as the documentation states them (regular expressions)."""
    text = text.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    stages = text.split("|")
    return stages if all(set(stage) <= set("EtmL") for stage in stages) else None  # Megatron asserts


@pytest.mark.parametrize("text, stages", [
    ("Ettt|(tt|)*29,m|L", ["Ettt"] + ["tt"] * 29 + ["m", "L"]),
    ("E|(tt|)*2,(t|)*4,mL", ["E", "tt", "tt", "t", "t", "t", "t", "mL"]),
    ("Et*3|(tt|)*29,m|L", ["Ettt"] + ["tt"] * 29 + ["m", "L"]),
    ("E|(t|)*3,m|m||L", ["E", "t", "t", "t", "m", "m", "", "L"]),
])
def test_the_examples_megatron_documents_parse_as_it_says(text, stages):
    assert list(parse_layout(text).stages) == stages == megatron_reference(text)


layer_runs = st.lists(st.tuples(st.sampled_from("Etm L".replace(" ", "")), st.integers(0, 12)), max_size=5)
stage_text = layer_runs.map(lambda runs: "".join(char * n for char, n in runs))


@settings(max_examples=300, deadline=None)
@given(st.lists(stage_text, min_size=1, max_size=40))
def test_every_written_layout_reads_back_by_megatrons_rules_to_the_same_stages(stages):
    text = format_layout(stages)
    assert megatron_reference(text) == stages
    assert list(parse_layout(text).stages) == stages


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.sampled_from(list("EtmL|,")),
    st.tuples(st.sampled_from(list("Etm|")), st.integers(0, 9)).map(lambda t: f"{t[0]}*{t[1]}"),
    st.tuples(st.text("Etm|,", min_size=1, max_size=6), st.integers(0, 5)).map(lambda t: f"({t[0]})*{t[1]}"),
), max_size=12).map("".join))
def test_any_layout_string_parses_as_megatron_parses_it(text):
    parses_as_megatron_parses_it(text)


def parses_as_megatron_parses_it(text):
    expected = megatron_reference(text)
    if expected is None:
        with pytest.raises(InputError):
            parse_layout(text)
    else:
        assert list(parse_layout(text).stages) == expected


def test_the_cells_are_chunk_major_and_count_the_decoder_layers():
    layout = parse_layout("Ett|ttt|tt|ttL")
    assert layout.cells(2) == [["Ett", "ttt"], ["tt", "ttL"]]
    assert layout.decoder_counts(2) == [[2, 3], [2, 2]]
    with pytest.raises(InputError) as caught:
        layout.cells(3)
    assert str(caught.value) == ("--pipeline-model-parallel-layout lists 4 stages, which "
                                 "--pipeline-model-parallel-size 3 does not divide (Megatron needs a multiple)")


@pytest.mark.parametrize("text, p, layers, mtp, problems", [
    ("Ett|ttL", 2, 4, 0, []),
    ("tEt|ttL", 2, 4, 0, ["the embedding (E) must come first and exactly once"]),
    ("Ett|tLt", 2, 4, 0, ["the loss (L) must come last and exactly once"]),
    ("Ett|ttL", 2, 5, 0, ["it holds 4 decoder layers (t) but --num-layers is 5"]),
    ("Ett|tmtL", 2, 4, 1, ["decoder layers must all come before the MTP layers"]),
    ("Em|tt|tt|ttL", 2, 6, 1, ["decoder layers must all come before the MTP layers",
                                "MTP layers must sit in a rank's last chunk",
                                "MTP layers must not sit on the first rank"]),
    ("Et|tm|tt|tmL", 2, 5, 2, ["decoder layers must all come before the MTP layers",
                                "MTP layers must sit in a rank's last chunk"]),
])
def test_megatrons_layout_checks(text, p, layers, mtp, problems):
    assert parse_layout(text).problems(p, layers, mtp) == problems


@pytest.mark.parametrize("text, message", [
    ("Et|tX", "pipeline layout 'Et|tX': 'X' is not a layer character (Megatron knows E (embedding), t (decoder), "
              "m (mtp), L (loss))"),
    ("E|((t)*2)*2|L", "pipeline layout 'E|((t)*2)*2|L': '(' is not a layer character (Megatron knows E (embedding), "
                      "t (decoder), m (mtp), L (loss))"),
    ("E t|tL", "pipeline layout 'E t|tL': ' ' is not a layer character (Megatron knows E (embedding), t (decoder), "
               "m (mtp), L (loss))"),
    (7, "pipeline layout must be a string; got 7"),
    ("t*9999999", "pipeline layout 't*9999999' expands to more than 1000000 (sappkit.limits.MAX_EXPANDED_CHARS) "
                   "layer characters"),
    ("(t*999999|)*100000", "pipeline layout '(t*999999|)*100000' expands to more than 1000000 "
                            "(sappkit.limits.MAX_EXPANDED_CHARS) layer characters"),
])
def test_what_megatron_refuses_is_refused_with_the_character(text, message):
    with pytest.raises(InputError) as caught:
        parse_layout(text)
    assert str(caught.value) == message


def test_a_layout_is_a_value():
    assert parse_layout("E|tL") == Layout(("E", "tL"))


@pytest.mark.parametrize("text", ["E|*3t*0002L", "E(t*2|)*003L", "(t|m)*2,L", "E((t|)*2L", "Et*0|L", "E|t**2|L",
                                  "(Et*1)*1|L", "E|(t*)*2L"])
def test_counts_with_leading_zeros_and_repeated_separators_parse_as_megatron_parses_them(text):
    parses_as_megatron_parses_it(text)


def test_a_group_that_unrolls_to_nothing_is_measured_by_the_copies_it_makes():
    # Megatron copies "t*0" 9,999,999 times before its second pattern erases them: 30 MB per piece, and 7,692
    # pieces fit the 100,000-character limit. Bounded work: refused after measuring, having built almost nothing.
    import tracemalloc
    text = "(t*0)*9999999" * 7692
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as caught:
            parse_layout(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value) == (f"pipeline layout a str of {len(text)} characters expands to more than 1000000 "
                                 "(sappkit.limits.MAX_EXPANDED_CHARS) layer characters")
    assert peak < 20 * 2**20
    assert parse_layout("E|" + "(t*0)*99999" + "|tL").stages == ("E", "", "tL")  # within the limit: as Megatron


def test_a_count_of_thousands_of_digits_is_refused_before_it_is_read():
    text = "Et*" + "9" * 5000 + "|L"
    with pytest.raises(InputError) as caught:
        parse_layout(text)
    assert str(caught.value) == ("pipeline layout a str of 5005 characters: the repeat count a str of 5000 "
                                 "characters exceeds 1000000 (sappkit.limits.MAX_EXPANDED_CHARS)")
    assert parse_layout("Et*" + "0" * 5000 + "1|L").stages == ("Et", "L")
