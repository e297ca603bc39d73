"""The demo on bundled data: even-placement simulations, the headline table, bundled files (and that the package
ships them)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from sappkit import InputError, cell_costs, even_assignment, simulate
from sappkit.demo import BUNDLED_DATA, bundled, headline, simulate_layers, tour_simulation

from .bundled import DATA

REPO = Path(__file__).resolve().parents[1]

PIPELINE = dict(stages=16, micro_batches=32)
LIMIT_MB = 58000


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


def test_bundled_names_a_missing_file():
    with pytest.raises(InputError) as caught:
        bundled("nope.json")
    assert str(caught.value) == (f"bundled data file 'nope.json' is not in {DATA}; the bundled data ships with "
                                 "sappkit (reinstall it: pip install sappkit, or pip install -e . from a clone)")


def test_a_source_checkout_reads_the_repositorys_data_folder():
    assert BUNDLED_DATA == DATA and bundled("vlm.json") == DATA / "vlm.json"


def test_the_wheel_ships_the_bundled_data_where_the_installed_package_looks(tmp_path):
    """Build the wheel ``pip install .`` installs from a copy of the sources, unpack it, and look from elsewhere."""
    source = tmp_path / "source"
    for folder in ("sappkit", "data"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run([sys.executable, "-c", "from setuptools import build_meta; build_meta.build_wheel('wheel')"],
                   cwd=source, check=True, capture_output=True)
    (wheel,) = (source / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "installed")
    # pyproject.toml lists the packages (data/ is mapped in): none may be missing.
    modules = {path.relative_to(REPO).as_posix() for path in (REPO / "sappkit").rglob("*.py")}
    assert modules <= names
    inputs = {f"sappkit/data/{path.name}" for path in DATA.iterdir() if path.suffix in {".json", ".csv", ".yaml"}}
    assert inputs | {"sappkit/data/README.md"} <= names and len(inputs) >= 7
    hardware = {path.relative_to(REPO).as_posix() for path in (REPO / "sappkit/hardware/presets").glob("*.toml")}
    assert hardware <= names and len(hardware) >= 10
    found = subprocess.run([sys.executable, "-c", "from sappkit.demo import bundled; print(bundled('vlm.json'))"],
                           cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "installed")}, check=True,
                           capture_output=True, text=True)
    assert found.stdout == f"{tmp_path / 'installed' / 'sappkit' / 'data' / 'vlm.json'}\n"


def test_demo_simulates_the_tours_two_schedules(demo, llama):
    assert demo.summary["run"].tolist() == ["1f1b", "interleaved x2"]
    for label, schedule, chunks in (("1f1b", "1f1b", 1), ("interleaved x2", "interleaved", 2)):
        expected = simulate_layers(llama, schedule=schedule, chunks=chunks, option="selective", limit_mb=LIMIT_MB,
                                   **PIPELINE)
        assert demo.simulations[label].step_time == expected.step_time
    lines = demo.describe().splitlines()
    assert lines[0] == ("data/llama2_70b.json: 16 stages, 32 micro-batches, selective recompute, layers placed "
                        "evenly, 58,000 MB devices (times in ms, memory in MB)")
    assert lines[1].split() == ["run", "schedule", "chunks", "step_time", "(ms)", "bubble/compute", "peak_mb", "peak_stage",
                                "fits"]
    assert lines[2].split()[3:5] == [f"{demo.summary['step_time'][0]:,.0f}", f"{demo.summary['bubble'][0]:.1%}"]
    gain = 1 - demo.summary["step_time"].iloc[1] / demo.summary["step_time"].iloc[0]
    assert lines[4] == f"interleaved x2 is {gain:.1%} faster than 1f1b" and gain > 0
    assert lines[5] == "" and lines[6:] == demo.loop.describe().splitlines()


def test_describe_reads_the_headline_numbers_off_the_frames(demo):
    loop = demo.loop
    lines = loop.describe().splitlines()
    assert lines[0] == ("The loop on data/llama2_70b_dryruns.csv and the times of data/llama2_70b.json: 1f1b, "
                        "16 stages, 32 micro-batches, 58,000 MB devices")
    assert lines[1] == f"1. memory fit: {loop.fit.describe(width=None)}"
    assert lines[2].split() == ["name", "value_mb", "stderr_mb"] and lines[3].split()[0] == "const_mb"
    worst = loop.agreement["difference_mb"].abs().max()
    assert 0 < worst < loop.fit.loo_error_mb
    assert lines[12] == ("   layer table: the fitted memory predicts the even partitions' stage memory within "
                         f"{worst:.1f} MB of the times table's own (leave-one-out error "
                         f"{loop.fit.loo_error_mb:.1f} MB)")
    step, even = loop.plans["step_time"].iloc[0], loop.even_baseline()["step_time"]
    assert lines[13] == (f"2. balance: optimal; simulated step time {step:,.0f} ms against {even:,.0f} ms for the "
                         f"even partition with selective recompute, the fastest even partition that fits: "
                         f"{1 - step / even:.1%} faster")
    assert lines[14].split() == ["plan", "status", "step_time", "(ms)", "peak_mb", "fits"]
    choices = loop.choices.set_index("choice")
    mine, one = choices.loc["a mode per layer"], choices.loc["one mode"]
    assert lines[-2] == (f"3. recompute, a mode per layer (off, selective, full): simulated step time "
                         f"{mine.step_time:,.0f} ms against {one.step_time:,.0f} ms with one mode (selective) on "
                         f"every layer: {1 - mine.step_time / one.step_time:.1%} faster; "
                         f"{mine.time_saved - one.time_saved:.1f} ms less forward + backward per micro-batch, summed "
                         f"over the stages")
    assert lines[-1] == (f"4. one more fully recomputed layer: {len(loop.alternatives.frame)} distinct plans still "
                         f"fit (stage {loop.alternatives.binding_stage} binds at {loop.choice.memory_mb:,.0f} MB)")
