"""The demo, the tour's dashboard and the ``sappkit simulate`` / ``sappkit demo`` commands."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from sappkit import InputError, cell_costs, even_assignment, read_layers_json, simulate
from sappkit.cli import main
from sappkit.demo import bundled, headline, run_demo, simulate_layers, tour_simulation

LLAMA = "data/llama2_70b.json"


@pytest.fixture(scope="module")
def llama():
    return read_layers_json(LLAMA)


def test_simulate_layers_is_even_placement_costs_and_simulation(llama):
    sim = simulate_layers(llama, stages=8, micro_batches=16, schedule="interleaved", chunks=2, option="full",
                          limit_mb=50000)
    plan = even_assignment(llama, stages=8, chunks=2, schedule="interleaved", option="full")
    direct = simulate(cell_costs(llama, plan, stages=8, chunks=2, schedule="interleaved"), schedule="interleaved",
                      micro_batches=16, limit_mb=50000)
    assert sim.step_time == direct.step_time
    pd.testing.assert_frame_equal(sim.stages, direct.stages)


def test_tour_simulation_takes_the_chunks_the_schedule_fixes(llama):
    settings = dict(stages=4, micro_batches=8, chunks=3, option="selective")
    assert tour_simulation(llama, schedule="1f1b", **settings).chunks == 1
    assert tour_simulation(llama, schedule="dualpipev", **settings).chunks == 2
    assert tour_simulation(llama, schedule="interleaved", **settings).chunks == 3


def test_headline_reads_each_simulation(llama):
    sims = {"plain": simulate_layers(llama, stages=4, micro_batches=8, option="none", limit_mb=20000),
            "no limit": simulate_layers(llama, stages=4, micro_batches=8, option="full")}
    table = headline(sims)
    plain = sims["plain"]
    assert table.loc[0].to_dict() == dict(
        run="plain", schedule="1f1b", chunks=1, step_time=plain.step_time, bubble=plain.bubbles["real"],
        ideal=plain.bubbles["ideal"], imbalance=plain.bubbles["imbalance"], recompute=plain.bubbles["recompute"],
        peak_mb=plain.stages.memory_mb.max(), peak_stage=0, fits=False)
    assert table.loc[1, "fits"] is pd.NA


def test_demo_runs_the_tours_two_schedules():
    demo = run_demo(stages=4, micro_batches=8, chunks=2)
    assert demo.summary["run"].tolist() == ["1f1b", "interleaved x2"]
    assert demo.summary["step_time"].iloc[1] < demo.summary["step_time"].iloc[0]
    text = demo.describe()
    assert text.splitlines()[0] == ("data/llama2_70b.json: 4 stages, 8 micro-batches, selective recompute, "
                                    "layers placed evenly, 58000 MB devices")
    gain = 1 - demo.summary["step_time"].iloc[1] / demo.summary["step_time"].iloc[0]
    assert text.splitlines()[-1] == f"interleaved x2 is {gain:.1%} faster than 1f1b"


def test_bundled_names_a_missing_file():
    with pytest.raises(InputError) as caught:
        bundled("nope.json")
    assert str(caught.value).startswith("bundled data file 'nope.json' is not in ")


def test_cli_simulate_prints_the_stage_frame_and_saves_the_figure(tmp_path, capsys):
    figure = tmp_path / "sim.png"
    assert main(["simulate", LLAMA, "--stages", "4", "--micro-batches", "8", "--chunks", "2", "--schedule",
                 "interleaved", "--option", "full", "--limit-mb", "60000", "--save", str(figure)]) == 0
    out = capsys.readouterr().out.splitlines()
    sim = simulate_layers(read_layers_json(LLAMA), stages=4, micro_batches=8, schedule="interleaved", chunks=2,
                          option="full", limit_mb=60000)
    assert out[:4] == sim.describe().splitlines()
    assert out[4].split() == list(sim.stages.columns)
    assert len(out) == 4 + 1 + 4 + 1 and out[-1] == f"figure saved to {figure}"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == []


def test_cli_simulate_reads_csv_and_refuses_other_files(tmp_path, capsys):
    from sappkit import write_layers_csv

    write_layers_csv(read_layers_json(LLAMA), tmp_path / "layers.csv")
    assert main(["simulate", str(tmp_path / "layers.csv"), "--stages", "2", "--micro-batches", "2"]) == 0
    assert capsys.readouterr().out.startswith("1f1b: 2 stages")
    assert main(["simulate", "layers.txt", "--stages", "2", "--micro-batches", "2"]) == 2
    assert capsys.readouterr().err == ("sappkit simulate: LAYERS must be a .json (MindFormers layer description) "
                                       "or .csv layer table; got 'layers.txt'\n")
    assert main(["simulate", LLAMA, "--stages", "4", "--micro-batches", "4", "--schedule", "dualpipev"]) == 2
    assert capsys.readouterr().err == ("sappkit simulate: chunks must be 2 for schedule 'dualpipev' (the V); "
                                       "got 1\n")


def test_cli_demo_prints_the_headline(capsys):
    assert main(["demo"]) == 0
    assert capsys.readouterr().out == run_demo().describe() + "\n"


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
