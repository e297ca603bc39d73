"""What dry-run observations can identify: the options to fit, the stages they must observe, and which
parameters a design matrix leaves undetermined, with refusals that name the dry run that would fix it.

:func:`~sappkit.memfit.fit.fit_memory` refuses through these checks, and
:func:`~sappkit.plan_dryruns` plans dry runs that pass them.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from .._check import short
from ..columns import LAYERS, STAGE
from ..errors import InputError
from .dryruns import count_columns
from .model import CONST, HEAD, TAIL, YAML_KEY, Param, observed_options
from .stage_config import RUN, STAGES

__all__ = ["considered", "check_ends", "identifiability", "unidentified", "column_norms"]

#: Singular values below this fraction of the largest count as zero (the scaled matrix's numerical rank).
_RANK_TOL = 1e-9


def considered(obs: pd.DataFrame, options) -> dict:
    """Per kind, the options to fit: refuse options asked for but never run, and runs of options not asked for."""
    observed = observed_options(obs)
    if options is None:
        return observed
    given = tuple(options) if isinstance(options, Iterable) and not isinstance(options, str) else None
    if given is None or not all(isinstance(o, str) for o in given) or len(set(given)) != len(given):
        raise InputError(f"options must be a sequence of distinct option names; got {short(options)}")
    options = given
    for kind, used in observed.items():
        of_kind = f" of kind {kind!r}" if kind is not None else ""
        for option in options:
            if option not in used:
                key = f" ({YAML_KEY[option]})" if option in YAML_KEY else ""
                raise InputError(f"fit_memory cannot fit activation_mb for option {option!r}{of_kind}: no observed "
                                 f"stage runs a layer{of_kind} under it; add a dry run in which some stages run "
                                 f"layers under {option!r}{key}")
    for column in count_columns(obs):
        running = np.flatnonzero(obs[column].to_numpy() > 0)
        if column[2:] not in options and running.size:
            row = running[0]
            raise InputError(f"observations row {row} (run {obs.at[row, RUN]!r}, stage {obs.at[row, STAGE]}) runs "
                             f"{obs.at[row, column]} layer(s) under {column[2:]!r}, which is not in options "
                             f"{tuple(options)!r}; leave those stages out or add {column[2:]!r} to options")
    return observed


def check_ends(obs: pd.DataFrame) -> None:
    """Refuse observations that leave out stage 0 or the last stage: head and tail are fitted from them."""
    for role, at, what, layer in ((HEAD, 0, "stage 0", "the embedding"),
                                  (TAIL, obs[STAGES] - 1, "the last stage", "the LM head and loss")):
        if not (obs[STAGE] == at).any():
            raise InputError(f"fit_memory cannot fit {role} ({layer}): no run observes {what}; "
                             f"add {what}'s peak memory to a dry run")


def identifiability(obs, matrix, row_of, params, *, const_requested: bool) -> tuple[str, str] | None:
    """None when every parameter is identifiable, else (refusal message, short reason)."""
    n, k = matrix.shape
    if n < k:
        names = ", ".join(p.name for p in params)
        return (f"fit_memory needs at least {k} observed stages to fit {k} parameters ({names}); got {n}; add "
                "dry-run stages (sappkit.plan_dryruns proposes a set that identifies every parameter)",
                f"{n} observed stages cannot determine {k} parameters")
    totals = np.bincount(row_of, weights=obs[LAYERS].to_numpy())
    if params[0].role == CONST and (totals == totals[0]).all():
        reason = f"every observed stage holds the same number of layers ({int(totals[0])})"
        return (f"fit_memory cannot fit const_mb{' (const=True)' if const_requested else ''}: {reason}, so the "
                "constant cannot be told apart from param_mb; add a dry run whose stages hold different numbers "
                "of layers (a non-zero offset), or pass const=False", reason)
    lost, rank = unidentified(matrix, params)
    if not lost:
        return None
    names = ", ".join(p.name for p in lost)
    hints = "; ".join(f"{p.name} needs {p.hint()}" for p in lost)
    return (f"fit_memory cannot identify {names} from these observations (rank {rank} of {k}): {hints}; "
            "sappkit.plan_dryruns proposes dry runs that identify every parameter",
            f"{names} cannot be told apart (rank {rank} of {k})")


def unidentified(matrix: np.ndarray, params: list[Param]) -> tuple[list[Param], int]:
    """The parameters a design matrix does not identify (those the null space touches), and its rank."""
    _, singular, vt = np.linalg.svd(matrix / column_norms(matrix), full_matrices=True)
    rank = int((singular > _RANK_TOL * singular[0]).sum())
    null = vt[rank:]
    return [p for j, p in enumerate(params) if np.linalg.norm(null[:, j]) > 1e-6], rank


def column_norms(matrix: np.ndarray) -> np.ndarray:
    """Each column's 2-norm (1 for an all-zero column): the fit works on the matrix scaled by them."""
    norms = np.linalg.norm(matrix, axis=0)
    return np.where(norms > 0, norms, 1.0)
