"""The tour's dashboard: its controls re-simulate through the library."""

import matplotlib.pyplot as plt
import pytest

from sappkit.demo import tour_simulation


def test_tour_dashboard_follows_its_controls(llama):
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.tour import TourDashboard

    dashboard = TourDashboard(llama, stages=4, micro_batches=8, option="selective", limit_mb=58000)
    assert dashboard.last.schedule == "interleaved" and dashboard.last.chunks == 2
    dashboard.controls["schedule"].value = "dualpipev"
    assert dashboard.last.schedule == "dualpipev" and dashboard.last.micro_batches == 8
    dashboard.controls["micro_batches"].value = 6
    assert dashboard.last is None
    assert dashboard.message == ("micro_batches must be >= 2 * stages = 8 for schedule 'dualpipev'; got 6 "
                                 "(DualPipeV's step order needs two micro-batches per stage)")
    dashboard.controls["micro_batches"].value = 12
    assert dashboard.last.schedule == "dualpipev" and dashboard.last.micro_batches == 12 and dashboard.message == ""
    expected = tour_simulation(llama, schedule="dualpipev", stages=4, micro_batches=12, chunks=2, option="selective",
                               limit_mb=58000)
    assert dashboard.last.step_time == expected.step_time
    assert plt.get_fignums() == []


def test_every_dashboard_label_shows_whole(llama):
    """ipywidgets cuts a label past its default width: the tour's and the balance dashboard's slider read
    'micro-bat…' (issue 39)."""
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.balance import BalanceDashboard
    from sappkit.widgets.tour import TourDashboard

    for dashboard in (TourDashboard(llama, stages=4, micro_batches=8, option="selective", limit_mb=58000),
                      BalanceDashboard(llama, stages=4, micro_batches=8)):
        widths = {name: control.style.description_width for name, control in dashboard.controls.items()}
        assert widths["micro_batches"] == "initial" and set(widths.values()) == {"initial"}, widths
    plt.close("all")
