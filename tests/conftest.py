"""Shared fixtures: a seeded random generator and figures closed after every test."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    """A seeded generator, so every random test is reproducible."""
    return np.random.default_rng(20261129)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")
