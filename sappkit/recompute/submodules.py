"""The mode a one-mode choice runs, stated on every submodule of a multimodal model.

A model of several submodules (a vision tower beside a language model) gets
no choice per layer: each stage's budget would be built from one submodule's
layers. It gets the fastest runtime mode that fits every stage with the
whole model priced under it, as SAPP's recompute chooser gives it, and that
mode is stated on every submodule (:func:`submodule_modes`).
"""

from __future__ import annotations

import pandas as pd

from ..columns import KIND, LAYERS, OPTION
from ..errors import InputError

__all__ = ["submodule_modes", "submodule_note", "MODULE_MODE_COLUMNS"]

MODULE = "module"
#: Columns of :func:`submodule_modes`.
MODULE_MODE_COLUMNS = (MODULE, KIND, LAYERS, "mode", OPTION)


def submodule_modes(choice) -> pd.DataFrame:
    """Per submodule and body kind, in model order: ``module``, ``kind``, ``layers``, ``mode``, ``option``.

    For a one-mode choice the mode is the same on every row; for a choice
    per layer a kind's rows are split by mode. Empty without a choice.

    Examples
    --------
    >>> import sappkit
    >>> from sappkit.demo import bundled
    >>> vlm = sappkit.read_layers_json(bundled("vlm.json"))
    >>> cells = sappkit.even_assignment(vlm, stages=4, option="full")
    >>> part = sappkit.Partition.from_assignment(cells, stages=4, micro_batches=8, kind_order=vlm.body_kinds)
    >>> choice = sappkit.choose_recompute(vlm, part, memory_mb=60_000, modes=("off", "selective", "full"))
    >>> submodule_modes(choice).values.tolist()
    [['vision', 'vit_block', 32, 'selective', 'selective'], ['language', 'decoder', 32, 'selective', 'selective']]
    """
    if not hasattr(choice, "layer_options"):
        raise InputError(f"choice must be a RecomputeChoice; got {type(choice).__name__}")
    rows = choice.layer_options
    if rows.empty:
        return pd.DataFrame({column: [] for column in MODULE_MODE_COLUMNS})
    table = choice.pricing.layers
    grouped = rows.groupby([KIND, "mode", OPTION], sort=False, dropna=False).size().rename(LAYERS).reset_index()
    grouped.insert(0, MODULE, [table.module(kind) for kind in grouped[KIND]])
    return grouped[list(MODULE_MODE_COLUMNS)]


def submodule_note(layers, mode: str) -> str:
    """The note a multimodal model's one-mode choice carries: the mode on every submodule, and why no choice
    per layer was made."""
    parts = []
    for module in layers.modules:
        kinds = [kind for kind in layers.body_kinds if layers.module(kind) == module]
        parts.append(f"{module} ({', '.join(f'{kind} x{layers.count(kind)}' for kind in kinds)})")
    return (f"multimodal: every submodule runs mode {mode!r}: {', '.join(parts)}; the whole model is priced under "
            "each mode (no choice per layer: its budgets would come from one submodule's layers)")
