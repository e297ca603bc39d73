"""Shared fixtures: a seeded random generator, figures closed after every test, the bundled inputs; the run's
first lines name the fuzz tests' seed."""

import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from sappkit import read_dryrun_csv, read_layers_json  # noqa: E402
from sappkit.demo import run_demo  # noqa: E402

from .bundled import DATA  # noqa: E402
from .fuzz.support import SEED  # noqa: E402


def pytest_report_header():
    return f"fuzz seed: {SEED} (fresh in CI, fixed elsewhere; replay a run with SAPPKIT_FUZZ_SEED={SEED})"


def pytest_configure():
    """The run's seed for pytest-xdist's workers too: they inherit the environment, so each draws this seed
    rather than a fresh one of its own (the header's seed replays the whole run)."""
    os.environ.setdefault("SAPPKIT_FUZZ_SEED", str(SEED))


@pytest.fixture
def rng():
    """A seeded generator, so every random test is reproducible."""
    return np.random.default_rng(20261129)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="session")
def llama():
    """The bundled Llama-2-70B-class layer table (read once per run; tests must not change it)."""
    return read_layers_json(DATA / "llama2_70b.json")


@pytest.fixture(scope="session")
def deepseek():
    """The bundled DeepSeek-V3-class layer table (dense then MoE layers)."""
    return read_layers_json(DATA / "deepseek_v3.json")


@pytest.fixture(scope="session")
def observed():
    """The bundled Llama-2-70B-class dry-run observations."""
    return read_dryrun_csv(DATA / "llama2_70b_dryruns.csv")


@pytest.fixture(scope="session")
def demo():
    """``run_demo()`` computed once for every test that reads it."""
    return run_demo()
