"""The readers on the largest inputs within the limits (``sappkit bench --only inputs``): what each read returns,
and a bound on the memory it takes (bytes, traced), never on its time."""

import pytest

from sappkit.bench import inputs
from sappkit.limits import MAX_EXPANDED_CHARS

#: The most Python memory one read of a case may trace: well under the 2 GiB the bad-input pass promised.
BOUND = 256 * 2**20


@pytest.mark.slow
def test_each_largest_input_is_read_within_a_bounded_memory(tmp_path):
    results = {}
    for case, build in inputs.CASES:
        read = build(tmp_path)
        results[case] = read()
        assert inputs.peak_bytes(read) < BOUND, case
    yaml, trace, script, arithmetic, layout, group_bomb, doubling_bomb = results.values()
    assert (yaml.strategy.pipeline_parallel, yaml.num_layers, yaml.micro_batches) == (4, 32, 8)
    assert len(trace) == inputs.TRACE_SPANS == 38_000
    assert script.strategy.pipeline_parallel == 2 and arithmetic.num_layers == 32
    assert len("|".join(layout.stages)) == MAX_EXPANDED_CHARS and len(layout.stages) == 1000
    assert group_bomb == (f"pipeline layout a str of {13 * 7692} characters expands to more than 1000000 "
                          "(sappkit.limits.MAX_EXPANDED_CHARS) layer characters")
    assert doubling_bomb == ("the launch script expands to more than 1000000 (sappkit.limits.MAX_EXPANDED_CHARS) "
                             "characters once its variables are substituted; sappkit reads scripts within that")


def test_the_bench_table_has_a_row_per_case_with_its_memory(monkeypatch):
    monkeypatch.setattr(inputs, "CASES", inputs.CASES[3:5])  # the two quick ones
    rows = inputs.measure(quick=True)
    assert [row["case"] for row in rows] == ["$((...)) of 3,000 terms", "layout expanding to 1,000,000 characters"]
    assert all(row["passed"] and row["target_ms"] == 10_000 and row["detail"].startswith("peak ") for row in rows)
