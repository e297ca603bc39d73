"""A failing fuzz case names the seed its examples came from, so it can be replayed (``SAPPKIT_FUZZ_SEED``)."""

import pytest

from .support import SEED


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        report.sections.append(("fuzz seed", f"examples drawn from seed {SEED}: replay with "
                                             f"SAPPKIT_FUZZ_SEED={SEED} pytest {item.nodeid}"))
    return report
