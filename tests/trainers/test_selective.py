"""A runtime's selective policy priced as the option re-running its op groups, or dropped where none does."""

import pandas as pd
import pytest

from sappkit import InputError, LayerTable, Partition, choose_recompute
from sappkit.trainers.selective import policy_modes

OPTIONS = (("none", 40.0, 2.0), ("selective", 20.0, 2.5), ("both", 15.0, 2.7), ("full", 5.0, 3.0))


@pytest.fixture
def case():
    rows = [dict(kind="b", role="body", count=4, param_mb=100.0, option=option, forward_time=1.0,
                 backward_time=backward, activation_mb=activation) for option, activation, backward in OPTIONS]
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    return LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=2, cells=cells)


def test_a_policy_of_the_attention_core_and_the_norms_runs_both(case):
    # p = 2, m = 2, one mode for every layer at 290 MB: off 400 | 320; the policy's 'both'
    # 200 + 2 x 2 x 15 + 15 = 275 | 200 + 30 + 15 = 245 fits, and is faster than full.
    modes, notes = policy_modes(case[0], {"attention_core", "norms_and_gathers"})
    assert modes == {"off": "none", "selective": "both", "full": "full"} and notes == ()
    choice = choose_recompute(*case, memory_mb=290, modes=modes)
    assert (choice.mode, choice.stages["memory_mb"].tolist()) == ("selective", [275.0, 245.0])


def test_a_policy_that_recomputes_matmuls_has_no_price_and_is_left_out(case):
    modes, notes = policy_modes(case[0], {"attention_core", "matmuls"})
    assert modes == {"off": "none", "full": "full"}
    assert notes == ("the runtime's selective mode recomputes attention_core, matmuls, which no option of the layer "
                     "table prices (it prices the attention core, the norms and all-gathers, or both): mode "
                     "'selective' is left out",)
    assert choose_recompute(*case, memory_mb=290, modes=modes).mode == "full"


def test_a_kind_without_the_policy_s_option_drops_the_mode(case):
    modes, notes = policy_modes(case[0], {"norms_and_gathers"})
    assert modes == {"off": "none", "full": "full"}
    assert notes == ("mode 'selective' runs option 'comm', which kind(s) 'b' do not price: mode 'selective' is "
                     "left out",)


@pytest.mark.parametrize("recomputes, message", [
    ("attention_core", "recomputes must be a set of op groups (attention_core, norms_and_gathers, matmuls); got "
                       "'attention_core'"),
    ({"softmax"}, "recomputes names 'softmax'; expected op groups among 'attention_core', 'norms_and_gathers', "
                  "'matmuls'"),
    (set(), "recomputes is empty: a selective mode that recomputes nothing is 'off'"),
])
def test_bad_policies(case, recomputes, message):
    with pytest.raises(InputError) as error:
        policy_modes(case[0], recomputes)
    assert str(error.value) == message
