"""``sappkit validate``: predicted against measured per published run, in 100 columns, with units."""

import json

import pytest

from sappkit.cli import main
from sappkit.strategy.validation import published_runs, validate, validate_memory


def test_cli_validate_prints_every_run_every_memory_row_and_the_errors(capsys):
    assert main(["validate"]) == 0
    out = capsys.readouterr().out.splitlines()
    runs, memory = validate(), validate_memory()
    run_groups = len(runs.by_group())
    assert out[0].split() == ["run", "metric", "measured", "predicted", "error"]
    text = "\n".join(out)
    runs_line = (f"mean |error| {runs.mean_error:.2%}, worst {runs.worst_error:.2%} over {len(runs.frame)} runs "
                 "(error = predicted / measured - 1; in-sample: data/calibrate.py fits the A100's five and the H100's "
                 "two efficiencies on these rows; data/README.md gives the held-out errors)")
    memory_line = (f"mean |error| {memory.mean_error:.2%}, worst {memory.worst_error:.2%} over 12 memory rows "
                   "(error = predicted / published - 1; the sources computed these from their formulas; none is a "
                   "measurement)")
    assert runs_line in " ".join(text.split()) and memory_line in " ".join(text.split())
    memory_header = next(line for line in out if line.startswith("run") and "published" in line)
    assert memory_header.split() == ["run", "metric", "published", "predicted", "error"]
    rows = out[out.index(memory_header) + 1:out.index(memory_header) + 13]
    first = memory.frame.iloc[0]
    # MB (MiB) as everywhere in sappkit, not GiB
    assert rows[0].split()[:4] == [first["run"], "param+opt", "MB", f"{first['measured'] * 1024:,.0f}"]
    assert "GiB" not in text
    assert out[1].split()[0] == "sc21-1.7b" and "TFLOP/s/GPU" in out[1] and "s/iteration" in out[18]
    n = len(runs.frame)
    # after each table, its error per device, family and precision, then over all
    assert out[n + 1].split() == ["device", "family", "precision", "runs", "mean_error", "worst_error"]
    assert out[n + 2].split()[:4] == ["a100-80g", "dense", "fp16", "18"]
    assert out[n + 1 + run_groups].split()[:4] == ["all", "all", "all", str(n)]
    assert all(len(line) <= 100 for line in out)


def test_cli_validate_reads_another_table_and_writes_json(tmp_path, capsys):
    runs = tmp_path / "runs.csv"
    published_runs().iloc[[0, 17]].to_csv(runs, index=False)
    assert main(["validate", "--runs", str(runs), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [row["run"] for row in document["runs"]] == ["sc21-1.7b", "mlsys23-1t-seqsel"]
    assert [row["runs"] for row in document["runs_by_group"]] == [2, 2]
    assert document["runs_worst_error"] == pytest.approx(max(abs(row["error"]) for row in document["runs"]))
    assert len(document["memory"]) == 12


def test_cli_validate_refuses_a_bad_table(tmp_path, capsys):
    runs = tmp_path / "runs.csv"
    published_runs().assign(metric="mfu").iloc[:1].to_csv(runs, index=False)
    assert main(["validate", "--runs", str(runs)]) == 2
    assert capsys.readouterr().err == ("sappkit validate: runs row 0 ('sc21-1.7b'): metric must be one of "
                                       "'tflops_sc21', 'iteration_s', 'tokens_per_s_per_gpu'; got 'mfu'\n")
