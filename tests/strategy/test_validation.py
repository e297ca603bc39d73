"""The performance model against published runs: no row's error may grow past today's (a regression guard).

The bounds are each row's |error| when the A100 preset was calibrated (``data/calibrate.py``), rounded up to
the next 0.1% after adding 0.05%: a change to the model that moves any row further from its measurement fails
here. They are not a fit: lowering a bound needs a better model, not another knob.
"""

import pytest

from sappkit import InputError
from sappkit.strategy.validation import published_memory, published_runs, run_inputs, validate, validate_memory

#: Today's |error| per published run, rounded up (module docstring).
BOUNDS = {
    "sc21-1.7b": 0.006, "sc21-3.6b": 0.006, "sc21-7.5b": 0.015, "sc21-18b": 0.027, "sc21-39b": 0.019,
    "sc21-76b": 0.063, "sc21-145b": 0.030, "sc21-310b": 0.058, "sc21-530b": 0.049, "sc21-1t": 0.015,
    "mlsys23-22b-full": 0.064, "mlsys23-22b-seqsel": 0.008, "mlsys23-175b-full": 0.027,
    "mlsys23-175b-seqsel": 0.014, "mlsys23-530b-full": 0.046, "mlsys23-530b-seqsel": 0.009,
    "mlsys23-1t-full": 0.070, "mlsys23-1t-seqsel": 0.054,
}


@pytest.fixture(scope="module")
def validation():
    return validate()


def test_no_published_run_drifts_further_than_today(validation):
    errors = dict(zip(validation.frame["run"], validation.frame["error"].abs()))
    assert set(errors) == set(BOUNDS)
    grown = {run: round(error, 4) for run, error in errors.items() if error > BOUNDS[run]}
    assert not grown, f"error grew past today's on {grown}"


def test_the_issue_targets_hold(validation):
    assert validation.mean_error <= 0.035 and validation.worst_error <= 0.08


def test_per_device_memory_within_five_percent_of_the_published_figures():
    memory = validate_memory()
    assert len(memory.frame) == 12 and memory.worst_error < 0.05
    assert set(memory.frame["metric"]) == {"param_opt_gib", "activation_gib"}


def test_every_row_cites_its_table_and_prices_the_strategy_it_states():
    for frame in (published_runs(), published_memory()):
        assert frame["where"].str.contains("Table|Figure").all()
        assert frame["source"].str.contains(r"'2[13]").all()
        for _, row in frame.iterrows():
            model, strategy, batch = run_inputs(row)
            assert strategy.devices == row["devices"] and batch == row["global_batch"]
            assert strategy.micro_batches(batch) >= 1 and model.layers % (strategy.pipeline_parallel
                                                                         * strategy.virtual_stages) == 0


def test_the_frame_reads_in_100_columns(validation):
    lines = validation.describe().splitlines()
    assert all(len(line) <= 100 for line in lines) and lines[-1].startswith("mean |error|")
    assert repr(validation).startswith("Validation(18 runs: mean |error| ")


def test_bad_tables_are_refused(tmp_path):
    path = tmp_path / "runs.csv"
    published_runs().drop(columns="measured").to_csv(path, index=False)
    with pytest.raises(InputError, match=r"^runs is missing column\(s\) 'measured'; published runs needs run, "):
        published_runs(path)
    published_runs().assign(devices=7).iloc[:1].to_csv(path, index=False)
    with pytest.raises(InputError, match=r"^runs row 0 \('sc21-1.7b'\): t·cp·dp·p = 32 devices, but the row says 7$"):
        validate(published_runs(path))
