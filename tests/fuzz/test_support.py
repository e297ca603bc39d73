"""The fuzz suite's own rules: a check that finds a wrong result fails its case, and the seed is fresh in CI."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sappkit import InputError

from .support import LOCAL_SEED, fuzz, refused_or_valid

ROOT = Path(__file__).resolve().parents[2]


def test_a_check_that_returns_false_fails_instead_of_passing():
    with pytest.raises(AssertionError, match="the check returned False: a check asserts, it returns nothing"):
        refused_or_valid(lambda: 1, ["x"], lambda result: result == 2)


def test_a_check_that_asserts_fails_on_a_wrong_result():
    def two(result):
        assert result == 2

    with pytest.raises(AssertionError):
        refused_or_valid(lambda: 1, ["x"], two)


def test_a_refusal_must_name_a_culprit():
    def refuse():
        raise InputError("stages is 0; expected at least 1")

    assert refused_or_valid(refuse, ["stages"]) is None
    with pytest.raises(AssertionError):
        refused_or_valid(refuse, ["memory_mb"])


def test_a_fuzz_test_whose_check_fails_fails():
    @fuzz(5)
    @given(n=st.integers(0, 3))
    def case(n):
        refused_or_valid(lambda: n, ["n"], lambda result: result < 0)

    with pytest.raises(AssertionError):
        case()


def _seed(**env) -> int:
    """The fuzz seed a fresh interpreter draws in the environment ``env`` (beside this one, CI unset)."""
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "SAPPKIT_FUZZ_SEED")}
    out = subprocess.run([sys.executable, "-c", "from tests.fuzz.support import SEED; print(SEED)"], cwd=ROOT,
                         env={**base, **env}, capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_the_seed_is_fixed_locally_fresh_in_ci_and_replayable():
    assert _seed() == _seed(CI="false") == LOCAL_SEED
    assert len({_seed(CI="true") for _ in range(3)}) == 3
    assert _seed(CI="true", SAPPKIT_FUZZ_SEED="77") == 77
