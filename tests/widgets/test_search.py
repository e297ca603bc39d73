"""The strategy search's dashboard: each setting searched once and kept, the chosen row redrawn with its step's
terms beside the best's (and the user's config's) and the ten fastest's error bands, its report states one
search per device count."""

import matplotlib.pyplot as plt
import pytest

from sappkit import TransformerConfig
from sappkit.trainers import read_trainer_config

GPT = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048, vocab_size=32000)
DIMS = {"tensor_parallel": [1, 2], "context_parallel": [1], "micro_batch_size": [1], "zero": [1]}
#: Megatron-LM's arguments for a strategy of the small search (p2, dp8, no recompute), on 16 devices.
ARGS = ["--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048",
        "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1",
        "--global-batch-size", "64", "--use-distributed-optimizer", "--bf16", "--sequence-parallel"]


@pytest.fixture
def dashboard():
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.search import StrategySearchDashboard

    return StrategySearchDashboard(GPT, devices=(16, 8, 32), global_batch=(64, 32), seq_length=(2048,),
                                   device=("a100-80g", "h100-sxm"), dims=DIMS, memory_mb=1500, balance_top=2)


def test_the_dashboard_searches_each_setting_once_and_draws_the_chosen_row(dashboard):
    first = dashboard.last
    assert first.devices == 16 and dashboard.row.value == first.best.name
    assert dashboard.table.value.count("<tr>") == min(10, int(first.frame["step_ms"].notna().sum()))
    assert "best: " in dashboard.status_html.value and plt.get_fignums() == []
    dashboard.controls["devices"].value = 8
    assert dashboard.last.devices == 8 and dashboard.last is not first
    dashboard.controls["devices"].value = 16
    assert dashboard.last is first and len(dashboard.searches) == 2
    other = dashboard.row.options[1][1]
    shown = dashboard.show(row=other, **dashboard.settings())
    label = first.frame.at[other, "label"]
    assert label in shown.text and len(shown.figures) == (3 if first.frame.at[other, "pipeline_parallel"] > 1 else 2)
    bands, terms = shown.figures[1].axes
    assert [tick.get_text() for tick in terms.get_yticklabels()] == [f"best: {first.best['label']}",
                                                                     f"chosen: {label}"]
    ranked = first.table(10)
    assert len(bands.get_yticklabels()) == len(ranked)
    assert bands.get_yticklabels()[0].get_text().endswith(first.best["label"])
    for figure in shown.figures:
        plt.close(figure)
    dashboard.row.value = other
    assert plt.get_fignums() == []


def test_the_report_shows_one_state_per_device_count(dashboard):
    fragment = dashboard.report_html()
    assert fragment.count('class="sappkit-state"') == 3 and "16 devices" in fragment
    assert 'value="0"' in fragment and len(dashboard.searches) == 3 and plt.get_fignums() == []


def test_a_setting_where_nothing_fits_says_so_in_red_and_draws_nothing():
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.search import StrategySearchDashboard

    tight = StrategySearchDashboard(GPT, devices=(16,), global_batch=(64,), seq_length=(2048,), device=("a100-80g",),
                                    dims=DIMS, memory_mb=10, balance_top=2)
    assert tight.last.best is None and tight.row.options == () and tight.table.value == ""
    assert tight.status_html.value == '<b style="color:red">no strategy fits</b>'
    shown = tight.show(**tight.settings())
    assert shown.alert and shown.figures == () and shown.text == tight.last.describe()
    assert "no strategy fits the device" in shown.text and plt.get_fignums() == []


def test_the_users_config_is_searched_against_where_the_devices_are_its_own():
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.search import StrategySearchDashboard

    config = read_trainer_config(ARGS, world_size=16)
    mine = StrategySearchDashboard(GPT, devices=(16, 8), global_batch=(64,), seq_length=(2048,), device=("a100-80g",),
                                   baseline=config, dims=DIMS, memory_mb=1500, balance_top=2)
    found = mine.last
    assert found.baseline is not None and found.baseline.placement == "config"
    shown = mine.show(**mine.settings())
    assert "your config (a) against the best (b):" in shown.text
    assert found.against_baseline().describe() in shown.text
    terms = shown.figures[1].axes[1]
    assert [tick.get_text() for tick in terms.get_yticklabels()] == [f"your config: {found.baseline.label}",
                                                                     f"best: {found.best['label']}"]
    mine.controls["devices"].value = 8  # not the config's devices: searched without it
    assert mine.last.baseline is None and "your config" not in mine.show(**mine.settings()).text
    plt.close("all")
