"""The layer table: validation messages, defaults, model order and option fronts."""

import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, LayerTable, as_layer_table


def _rows():
    return [
        dict(kind="embed", role="head", count=1, param_mb=500, option="none",
             forward_time=1, backward_time=2, activation_mb=100),
        dict(kind="vit", role="body", count=4, param_mb=300, option="none", module="vision",
             forward_time=2, backward_time=4, activation_mb=200),
        dict(kind="vit", role="body", count=4, param_mb=300, option="full", module="vision",
             forward_time=2, backward_time=6, activation_mb=10),
        dict(kind="block", role="body", count=8, param_mb=900, option="none", module="language",
             forward_time=4, backward_time=8, activation_mb=300, working_mb=50),
        dict(kind="block", role="body", count=8, param_mb=900, option="selective", module="language",
             forward_time=4, backward_time=9, activation_mb=120, working_mb=50),
        dict(kind="block", role="body", count=8, param_mb=900, option="slow", module="language",
             forward_time=4, backward_time=13, activation_mb=150, working_mb=50),
        dict(kind="block", role="body", count=8, param_mb=900, option="full", module="language",
             forward_time=4, backward_time=12, activation_mb=20, working_mb=50),
        dict(kind="lm_head", role="tail", count=1, param_mb=700, option="none", module="language",
             forward_time=3, backward_time=6, activation_mb=400),
    ]


def _frame(rows=None):
    """The rows as a frame that declares their custom option ``slow`` (and ``keep``, which tests add)."""
    frame = pd.DataFrame(_rows() if rows is None else rows)
    frame.attrs["custom_options"] = ("slow", "keep")
    return frame


def _table(changes=None):
    frame = _frame().astype({"count": float, "activation_mb": float})
    for (row, column), value in (changes or {}).items():
        frame.loc[row, column] = value
    return LayerTable(frame)


def test_roles_order_and_counts():
    table = _table()
    assert table.body_kinds == ("vit", "block")
    assert table.head["kind"] == "embed" and table.tail["kind"] == "lm_head"
    assert table.modules == ("vision", "language") and table.multimodal
    assert table.body_layers == 12
    assert table.count("block") == 8 and table.param_mb("vit") == 300.0
    assert table.options("block") == ("none", "selective", "slow", "full")


def test_defaults_fill_optional_columns():
    frame = LayerTable(_frame()).frame
    assert frame["memory_once_mb"].eq(0).all() and frame["grad_mb"].eq(0).all()
    # first_working_mb defaults to working_mb row by row
    np.testing.assert_array_equal(frame["first_working_mb"].fillna(-1), frame["working_mb"].fillna(0))


def test_split_backward_columns_stay_absent_unless_given_and_blanks_stay_blank():
    assert "backward_weight_time" not in _table().frame.columns
    frame = _frame().assign(backward_weight_time=[None, 1, 2, 3, 3, 3, None, 2])
    table = LayerTable(frame)
    assert table.frame["backward_weight_time"].tolist()[:3] == [pytest.approx(np.nan, nan_ok=True), 1.0, 2.0]
    with pytest.raises(InputError) as err:
        LayerTable(frame.assign(weight_pass_mb=-1))
    assert str(err.value) == "layers row 0 (kind 'embed') column 'weight_pass_mb' is -1; expected a finite number >= 0"


def test_single_module_is_not_multimodal():
    rows = [r for r in _rows() if r["kind"] != "vit"]
    table = LayerTable(_frame(rows).assign(module="lm"))
    assert not table.multimodal and table.modules == ("lm",)


def test_front_drops_dominated_options_fastest_first():
    # 'slow' keeps more than 'selective' and is slower: dominated.
    assert _table().front("block") == ("none", "selective", "full")


def test_front_keeps_first_of_identical_options():
    frame = _frame()
    frame.loc[4, ["backward_time", "activation_mb"]] = [12, 20]
    assert LayerTable(frame).front("block") == ("none", "selective")


def test_plain_is_none_when_the_kind_has_it():
    table = _table()
    assert (table.plain("block"), table.plain("vit"), table.plain("lm_head")) == ("none", "none", "none")


def test_plain_without_none_keeps_the_most_then_is_fastest_then_first():
    frame = _frame()
    # 'none' renamed 'keep'; most activation wins whatever its table position.
    frame.loc[3, "option"] = "keep"
    frame = pd.concat([frame.iloc[4:7], frame.iloc[[3]], frame.iloc[[0, 1, 2, 7]]], ignore_index=True)
    assert LayerTable(frame).plain("block") == "keep"
    # A tie in activation: the faster one (less recompute), wherever it sits.
    tied = frame.copy()
    tied.loc[tied.option == "slow", "activation_mb"] = 300
    assert LayerTable(tied).plain("block") == "keep"
    tied.loc[tied.option == "slow", "backward_time"] = 7
    assert LayerTable(tied).plain("block") == "slow"
    # A full tie: the first in table order ('slow' now precedes 'keep').
    tied.loc[tied.option == "slow", "backward_time"] = 8
    assert LayerTable(tied).plain("block") == "slow"


def test_working_set_is_kept_at_one_micro_batch_plus_the_backward_extra():
    frame = _frame().assign(memory_once_mb=[0, 0, 0, 7, 3, 5, 1, 9],
                                         working_mb=[0, 0, 0, 50, 40, 30, 20, 6],
                                         first_working_mb=[0, 0, 0, 11, 12, 13, 14, 2])
    table = LayerTable(frame)
    # Own option's activation + memory_once + working_mb ...
    assert table.working_set_mb("block", "none") == 300 + 7 + 50
    assert table.working_set_mb("block", "selective") == 120 + 3 + 40
    assert table.working_set_mb("block", "slow", first=True) == 150 + 5 + 13
    # ... but a fully recomputed layer rebuilds the plain one: its activation and memory_once, own extra.
    assert table.working_set_mb("block", "full") == 300 + 7 + 20
    assert table.working_set_mb("block", "full", first=True) == 300 + 7 + 14
    assert table.working_set_mb("lm_head", "none") == 400 + 9 + 6
    with pytest.raises(InputError) as err:
        table.working_set_mb("block", "both")
    assert str(err.value) == "kind 'block' has no option 'both'; its options are 'none', 'selective', 'slow', 'full'"
    with pytest.raises(InputError) as err:
        table.working_set_mb("mlp", "none")
    assert str(err.value) == "kind 'mlp' is not in the layer table; its kinds are 'embed', 'vit', 'block', 'lm_head'"


def test_as_layer_table_accepts_frames_and_tables():
    table = _table()
    assert as_layer_table(table) is table
    assert as_layer_table(_frame()).body_kinds == ("vit", "block")
    with pytest.raises(InputError) as err:
        as_layer_table([1, 2])
    assert str(err.value) == (
        "layers must be a LayerTable or a DataFrame with columns kind, role, count, param_mb, "
        "option, forward_time, backward_time, activation_mb; got list")


@pytest.mark.parametrize("change, message", [
    ({(1, "activation_mb"): -5.0},
     "layers row 1 (kind 'vit') column 'activation_mb' is -5.0; expected a finite number >= 0"),
    ({(3, "forward_time"): np.nan},
     "layers row 3 (kind 'block') column 'forward_time' is nan; expected a finite number >= 0"),
    ({(2, "role"): "tail"},
     "layers kind 'vit' has different 'role' on its rows [1, 2]: ['body', 'tail']; a kind's role is one value"),
    ({(4, "param_mb"): 901.0},
     "layers kind 'block' has different 'param_mb' on its rows [3, 4, 5, 6]: [900.0, 901.0]; "
     "a kind's param_mb is one value"),
    ({(1, "count"): 2.5, (2, "count"): 2.5},
     "layers row 1 (kind 'vit') column 'count' is 2.5; expected a whole number >= 1"),
    ({(5, "option"): "full"},
     "layers row 6 repeats (kind, option) = ('block', 'full'); each pair may appear once"),
])
def test_bad_rows_are_named(change, message):
    with pytest.raises(InputError) as err:
        _table(change)
    assert str(err.value) == message


def test_unknown_role_is_named():
    frame = _frame()
    frame.loc[0, "role"] = "neck"
    with pytest.raises(InputError) as err:
        LayerTable(frame)
    assert str(err.value) == ("layers row 0 (kind 'embed') column 'role' is 'neck'; "
                              "expected one of 'head', 'body', 'tail'")


def test_missing_columns_are_listed():
    with pytest.raises(InputError) as err:
        LayerTable(_frame().drop(columns=["param_mb", "option"]))
    assert str(err.value) == (
        "layers is missing column(s) 'param_mb', 'option'; a layer table needs kind, role, count, "
        "param_mb, option, forward_time, backward_time, activation_mb")


def test_no_body_kind():
    rows = [r for r in _rows() if r["role"] != "body"]
    with pytest.raises(InputError) as err:
        LayerTable(_frame(rows))
    assert str(err.value) == "layers has no body kind; a pipeline needs at least one row with role 'body'"


def test_head_with_two_options():
    rows = _rows() + [dict(_rows()[0], option="full")]
    with pytest.raises(InputError) as err:
        LayerTable(_frame(rows))
    assert str(err.value) == "layers head kind 'embed' has 2 option rows (none, full); a head has exactly one"


def test_two_tails():
    rows = _rows() + [dict(_rows()[-1], kind="loss")]
    with pytest.raises(InputError) as err:
        LayerTable(_frame(rows))
    assert str(err.value) == "layers has 2 tail kinds ('lm_head', 'loss'); at most one tail is allowed"


def test_unknown_kind_lookup():
    with pytest.raises(InputError) as err:
        _table().options("mlp")
    assert str(err.value) == "kind 'mlp' is not in the layer table; its kinds are 'embed', 'vit', 'block', 'lm_head'"


def test_a_typo_of_an_option_is_named_with_the_known_ones():
    frame = pd.DataFrame(_rows()).replace({"option": {"slow": "fulll"}})
    with pytest.raises(InputError) as raised:
        LayerTable(frame)
    assert str(raised.value) == ("layers row 5 (kind 'block') column 'option' is 'fulll'; expected a recompute "
                                 "option, one of 'none', 'selective', 'comm', 'both', 'full' (declare others with "
                                 "custom_options=...)")
    declared = LayerTable(frame, custom_options=("fulll",))
    assert declared.options("block") == ("none", "selective", "fulll", "full")
    assert declared.custom_options == ("fulll",) == declared.with_frame(declared.frame).custom_options
    assert LayerTable(declared.frame).custom_options == ("fulll",)  # the frame carries them on
    with pytest.raises(InputError) as raised:
        LayerTable(frame, custom_options=("fulll", ""))
    assert str(raised.value) == ("custom_options[1] is ''; expected an option name (a non-empty string on one line, "
                                 "without leading or trailing spaces)")


def test_negative_constant():
    with pytest.raises(InputError) as err:
        LayerTable(_frame(), const_mb=-1)
    assert str(err.value) == "const_mb must be a finite number >= 0; got -1"
