"""The recompute dashboard's view and controls, on the bundled models."""

import matplotlib.pyplot as plt
import pytest

from sappkit.errors import InputError
from sappkit.recompute.chooser import HostLink, choose_recompute
from sappkit.widgets.recompute import recompute_view

from ..bundled import MODES, even_partition


def test_dashboard_view_is_the_choice_and_the_curve(deepseek):
    part = even_partition(deepseek)
    view = recompute_view(deepseek, part, memory_mb=60000, modes="off / selective / full", per_layer=True)
    expected = choose_recompute(deepseek, part, memory_mb=60000, modes=MODES, per_layer=True)
    assert view.choice.to_records() == expected.to_records()
    assert len(view.curve) == 25 and view.curve["memory_mb"].iloc[0] == 30000
    assert view.text.splitlines()[-1].startswith(
        "trainer plan (HyperParallel activation_checkpoint): mode = ")
    again = recompute_view(deepseek, part, memory_mb=50000, modes="off / selective / full", per_layer=True,
                           curve=view.curve)
    assert again.curve is view.curve
    front = recompute_view(deepseek, part, memory_mb=60000, per_layer=True)
    assert front.choice.mode is None and "trainer plan" not in front.text
    with pytest.raises(InputError) as error:
        recompute_view(deepseek, part, memory_mb=60000, modes="everything")
    assert str(error.value) == ("modes must be one of 'front options', 'off / selective / full', "
                                "'selective / full', 'off / full'; got 'everything'")


def test_dashboard_with_a_host_link(llama):
    part = even_partition(llama)
    view = recompute_view(llama, part, memory_mb=45000, modes="off / full", per_layer=True, link_gbps=50)
    link = HostLink.from_gbps(50)
    expected = choose_recompute(llama, part, memory_mb=45000, modes=("off", "full"), per_layer=True, link=link)
    assert view.choice.to_records() == expected.to_records()
    assert (view.choice.layer_options["offloaded_mb"] > 0).any()


def test_dashboard_follows_its_controls(llama):
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.recompute import RecomputeDashboard

    dashboard = RecomputeDashboard(llama, even_partition(llama), memory_mb=50000)
    assert dashboard.last.choice.mode is None
    curve = dashboard.last.curve
    dashboard.controls["memory_mb"].value = 40000
    assert dashboard.last.curve is curve and dashboard.last.choice.pricing.memory_mb == 40000
    dashboard.controls["modes"].value = "selective / full"
    assert dashboard.last.curve is not curve
    assert set(dashboard.last.choice.layer_options["mode"]) <= {"selective", "full"}
    assert plt.get_fignums() == []
