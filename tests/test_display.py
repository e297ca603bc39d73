"""Results in a notebook: a one-line repr that leads with the headline, and an HTML display of the headline then
the key frame (not thousands of characters of dumped tables)."""

import pytest

from sappkit import Partition, alternatives, balance, choose_recompute, even_assignment

from .bundled import MODES


@pytest.fixture(scope="module")
def results(llama):
    plan = balance(llama, stages=8, micro_batches=16, memory_mb=60000)
    part = Partition.from_assignment(even_assignment(llama, stages=8), stages=8, micro_batches=16)
    choice = choose_recompute(llama, part, memory_mb=60000, modes=MODES, per_layer=True)
    found = alternatives(choice)
    return {"plan": plan, "choice": choice, "alternatives": found, "alternative plan": found.plans[0]}


@pytest.mark.parametrize("name", ["plan", "choice", "alternatives", "alternative plan"])
def test_a_result_reads_in_one_line_and_displays_its_headline_then_its_frame(results, name):
    result = results[name]
    text = repr(result)
    assert "\n" not in text and len(text) <= 120, text
    page = result._repr_html_()
    assert page.startswith("<p>") and page.index("</p>") < page.index("<table") and len(page) < 6000


def test_the_headlines_are_the_ones_the_library_prints(results):
    plan, choice, found = results["plan"], results["choice"], results["alternatives"]
    assert repr(plan) == f"<Plan {plan.headline()}>" and plan.describe().startswith(plan.headline())
    assert repr(choice) == f"<RecomputeChoice {choice.short_headline()}>"
    assert repr(found) == f"<Alternatives {len(found.frame)} plan(s) with one more layer at 'full'; stage 2 binds>"


def test_describe_writes_options_as_the_command_line_does(llama):
    plan = balance(llama, stages=4, micro_batches=8, memory_mb=60000, chunks=2)
    stage_line = next(line for line in plan.describe().splitlines() if line.startswith("stage  0:"))
    assert "chunk 0: selective x7, none x3; chunk 1: selective x7, none x3" in stage_line and "x7" in stage_line
    assert "c0:" not in plan.describe()


def test_balance_shows_its_arguments_only_and_names_every_schedule():
    import inspect

    from sappkit.pipeline.schedules import SCHEDULES

    assert not any(name.startswith("_") for name in inspect.signature(balance).parameters)
    assert all(f'``"{name}"``' in balance.__doc__ for name in SCHEDULES)
