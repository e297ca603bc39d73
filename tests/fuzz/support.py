"""What every fuzz case asserts, and the values the strategies draw from.

A case runs one call on generated input and accepts exactly two outcomes:

- a :class:`sappkit.InputError` whose message is one line, of bounded length,
  naming what was corrupted (one of the case's *culprits*: the key, column,
  argument or file problem), or
- a result the case's check accepts (a plan within its memory limit, a table
  with bounded counts, ...).

Anything else — another exception, a check that fails, or a case still
running after :data:`CASE_SECONDS` (a hang; sizes are bounded so that no
valid case comes near) — fails the test, and hypothesis shrinks it to the
smallest input. A check asserts (or raises); one that returns a value instead
is a mistake that would pass whatever it found, and fails the case.

The examples come from :data:`SEED`: fixed on a developer's machine, so a run
repeats the last one; fresh in CI (``CI`` set), so every CI run tries new
inputs. The run's first lines print it (``tests/fuzz/conftest.py``);
``SAPPKIT_FUZZ_SEED=N pytest tests/fuzz`` replays the run that used seed N.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import signal
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st

from sappkit import InputError

from ..ci import in_ci

__all__ = ["CASE_SECONDS", "SEED", "fuzz", "fresh", "refused_or_valid", "BAD", "bad_or", "some_text"]

#: Where the examples come from on a developer's machine.
LOCAL_SEED = 20261129
#: This run's seed: ``SAPPKIT_FUZZ_SEED`` when set, else fresh in CI, else :data:`LOCAL_SEED`.
SEED = int(os.environ.get("SAPPKIT_FUZZ_SEED") or (secrets.randbelow(2**32) if in_ci() else LOCAL_SEED))

#: A case running this long is a hang (real cases take well under a second); generous so load never trips it.
CASE_SECONDS = 60
#: Longest message a refusal may have (a path of the test's temporary folder included).
MAX_MESSAGE = 900


def fuzz(examples: int):
    """A fuzz test's hypothesis settings, ``examples`` drawn from :data:`SEED`: no deadline, no example database."""
    tuned = settings(max_examples=examples, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                            HealthCheck.data_too_large, HealthCheck.filter_too_much])

    def decorate(test):
        return seed(SEED)(tuned(test))

    return decorate


def fresh(tmp_path: Path) -> Path:
    """A new folder for one example (hypothesis runs every example of a test in the same ``tmp_path``)."""
    return Path(tempfile.mkdtemp(dir=tmp_path))


class Hang(Exception):
    """A fuzz case ran past :data:`CASE_SECONDS`."""


@contextlib.contextmanager
def _within(seconds: float):
    """Raise :class:`Hang` in the test's (main) thread if the block runs past ``seconds``; no thread is started."""
    def stop(*_):
        raise Hang(f"the case ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refused_or_valid(call, culprits, check=None):
    """Run ``call``: a refusal must be one line naming one of ``culprits``; a result must pass ``check``.

    ``check`` asserts what a result must hold; it returns nothing (a returned
    value, a bool above all, would be a check that cannot fail, so it fails the
    case). Returns the result, or None when refused.
    """
    with _within(CASE_SECONDS):
        try:
            result = call()
        except InputError as error:
            message = str(error)
            assert "\n" not in message and "\r" not in message, message
            assert len(message) <= MAX_MESSAGE, message
            assert any(str(culprit) in message for culprit in culprits), (culprits, message)
            return None
    if check is not None:
        returned = check(result)
        assert returned is None, f"the check returned {returned!r}: a check asserts, it returns nothing"
    return result


#: Values that are wrong almost anywhere a number, a name or a list is expected.
BAD = (None, True, False, -1, 0, 0.5, -2.5, 1e300, -1e300, 10**30, 2**70, 10**400, math.nan, math.inf, -math.inf,
       "", " ", "x", "12", [], [1], [[1]], {}, {"a": 1}, b"x")


def bad_or(valid: st.SearchStrategy) -> st.SearchStrategy:
    """A valid value or one of :data:`BAD`."""
    return st.one_of(valid, st.sampled_from(BAD))


def some_text() -> st.SearchStrategy:
    """Short text with line breaks, quotes, NULs and non-ASCII: what a corrupted file or name may hold."""
    return st.text(alphabet=st.sampled_from(list("ab1 ,:[]{}\"'-\n\t\x00é")), max_size=12)
