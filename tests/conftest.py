"""Shared fixtures: a seeded random generator and the bundled inputs; the run's first lines name the fuzz tests'
seed. (Figures are closed after every test, doctests included, by the root conftest.py.)"""

import os

import numpy as np
import pytest

from sappkit import read_dryrun_csv, read_layers_json
from sappkit.demo import run_demo

from .bundled import DATA
from .fuzz.support import SEED


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
