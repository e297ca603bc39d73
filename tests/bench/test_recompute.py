"""The recompute bench's dense dynamic program agrees with the knapsack."""

import pytest

from sappkit.bench.recompute import _dense_least_time
from sappkit.recompute.knapsack import build_front
from sappkit.recompute.pricing import price

from ..bundled import MODES, even_partition


def test_bench_dynamic_program_agrees_with_the_knapsack(deepseek):
    pricing = price(deepseek, even_partition(deepseek), memory_mb=60000, modes=MODES)
    for groups, budget in zip(pricing.groups, pricing.budgets[0]):
        assert _dense_least_time(groups, int(budget)) == pytest.approx(build_front(groups).least_time(int(budget)))
