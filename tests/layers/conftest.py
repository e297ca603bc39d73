"""Fixtures both layer file-format test modules use."""

import pandas as pd
import pytest

from sappkit import LayerTable
from sappkit.columns import SAPP_OPTIONS


@pytest.fixture
def extended_table() -> LayerTable:
    """Two modules, per-option working sets, a first working set that differs, kept-once memory and grads."""
    rows = []
    for kind, module, options in [("vit", "vision", ("none", "full")), ("decoder", "language", SAPP_OPTIONS)]:
        for i, option in enumerate(options):
            rows.append(dict(kind=kind, role="body", count=6, param_mb=123.25, option=option, forward_time=1 / 3,
                             backward_time=0.7 + i / 7, activation_mb=400 / (i + 1), module=module,
                             memory_once_mb=5.5, working_mb=30 + i,
                             first_working_mb=50 + i if kind == "vit" else 30 + i,
                             grad_mb=2.0 if kind == "decoder" else 0.0))
    rows.insert(0, dict(kind="patches", role="head", count=1, param_mb=77.0, option="none", forward_time=0.1,
                        backward_time=0.25, activation_mb=3.0, module="vision", working_mb=1.5))
    rows.append(dict(kind="lm_head", role="tail", count=1, param_mb=88.0, option="none", forward_time=0.2,
                     backward_time=0.4, activation_mb=9.0, module="language"))
    return LayerTable(pd.DataFrame(rows), const_mb=1234.5)
