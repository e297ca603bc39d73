"""SeqPipe: what cutting each micro-batch into ``k`` sequence slices does to a layer table.

SAPP's pipeline balancer's rescaling (docs/design.md "SeqPipe"), with ``K`` the fp16 key (or
value) cache of one layer for a whole micro-batch,
``K = 2 B heads seq head_dim / mp / 2**20`` MB:

- body activation per option ``(act - 2K) / k + 2K`` (the keys and values
  of earlier slices stay; the rest shrinks with the slice), body
  parameters ``param + 4K`` (the key/value caches and their gradients);
- head parameters ``param - (1 - 1/k) (C + G)`` where for ``mp > 1``
  ``C = 2 B seq hidden 2 / mp`` bytes (receive + reduce-scatter) and
  ``G = 2 B seq hidden`` (strided-slice gradient), and for ``mp = 1``
  ``C = 2 B seq hidden`` and ``G = 2 B seq ffn_size`` (a matmul gradient);
- tail parameters ``param - (3 - 3/k) L + (k - 1) L / k`` with the fp32
  loss buffer ``L = 4 B seq vocab / mp`` bytes;
- every forward and backward time divided by ``k``;
- the ``full`` option dropped (SeqPipe cannot run full recompute).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from .._check import check_int
from ..columns import ACTIVATION_MB, BACKWARD_TIME, BODY, FORWARD_TIME, HEAD, KIND, OPTION, PARAM_MB, ROLE, TAIL
from ..errors import InputError
from ..layers.table import LayerTable

__all__ = ["SEQ_PARAMS", "rescale_for_seqpipe"]

#: The keys of ``seq_params`` and their defaults (None: required).
SEQ_PARAMS = {"batch_size": None, "num_heads": None, "seq_length": None, "head_dim": None,
              "hidden_size": None, "vocab_size": None, "model_parallel": None, "ffn_size": 11008}
_MB = 2**20
_FP16 = 2
_FP32 = 4


def _checked_params(seq_params) -> dict[str, int]:
    if not isinstance(seq_params, Mapping):
        raise InputError(f"seq_params must be a mapping with keys {', '.join(SEQ_PARAMS)}; "
                         f"got {type(seq_params).__name__} (schedule 'seqpipe' with seq_split > 1 needs it)")
    unknown = sorted(set(seq_params) - set(SEQ_PARAMS))
    if unknown:
        raise InputError(f"seq_params has unknown key(s) {', '.join(map(repr, unknown))}; "
                         f"expected keys {', '.join(SEQ_PARAMS)}")
    params = {}
    for key, default in SEQ_PARAMS.items():
        if key not in seq_params and default is None:
            raise InputError(f"seq_params is missing {key!r}; SeqPipe's rescaling needs "
                             f"{', '.join(k for k, d in SEQ_PARAMS.items() if d is None)}")
        params[key] = check_int(f"seq_params[{key!r}]", seq_params.get(key, default), minimum=1)
    return params


def _kv_mb(params: dict[str, int]) -> float:
    """One layer's fp16 key (or value) cache for a whole micro-batch, MB."""
    return (_FP16 * params["batch_size"] * params["num_heads"] * params["seq_length"]
            * params["head_dim"] / params["model_parallel"] / _MB)


def _head_saving_mb(params: dict[str, int]) -> float:
    """What the head stops holding for the whole micro-batch (before the ``1 - 1/k`` factor), MB."""
    tokens = params["batch_size"] * params["seq_length"]
    mp = params["model_parallel"]
    if mp > 1:
        comm = 2 * _FP16 * tokens * params["hidden_size"] / mp
        strided_slice = _FP16 * tokens * params["hidden_size"]
        return (comm + strided_slice) / _MB
    comm = _FP16 * tokens * params["hidden_size"]
    matmul_grad = _FP16 * tokens * params["ffn_size"]
    return (comm + matmul_grad) / _MB


def _loss_mb(params: dict[str, int]) -> float:
    """The tail's fp32 loss buffer for a whole micro-batch, MB."""
    return _FP32 * params["batch_size"] * params["seq_length"] * params["vocab_size"] / params["model_parallel"] / _MB


def rescale_for_seqpipe(layers: LayerTable, seq_split: int, seq_params) -> tuple[LayerTable, tuple[str, ...]]:
    """The layer table a SeqPipe step with ``seq_split`` slices per micro-batch sees, and warnings.

    Examples
    --------
    >>> rows = [dict(kind="block", role="body", count=4, param_mb=100, option=o,
    ...              forward_time=2, backward_time=b, activation_mb=a)
    ...         for o, b, a in (("none", 4, 80), ("full", 6, 8))]
    >>> params = dict(batch_size=1, num_heads=8, seq_length=4096, head_dim=128,
    ...               hidden_size=1024, vocab_size=32000, model_parallel=8)
    >>> table, notes = rescale_for_seqpipe(LayerTable(pd.DataFrame(rows)), 2, params)
    >>> table.frame[[OPTION, PARAM_MB, ACTIVATION_MB, FORWARD_TIME]].values.tolist()
    [['none', 104.0, 41.0, 1.0]]
    >>> notes
    ("SeqPipe cannot run full recompute: option 'full' dropped for kind 'block'",)
    """
    k = check_int("seq_split", seq_split, minimum=2)
    params = _checked_params(seq_params)
    kv = _kv_mb(params)
    frame = layers.frame.copy()
    notes = []
    body = frame[ROLE] == BODY
    full = body & (frame[OPTION] == "full")
    for kind in frame.loc[full, KIND].unique():
        notes.append(f"SeqPipe cannot run full recompute: option 'full' dropped for kind {kind!r}")
        if (body & (frame[KIND] == kind) & ~full).sum() == 0:
            raise InputError(f"layers kind {kind!r} has only option 'full', which SeqPipe cannot run; "
                             "give it another recompute option or use another schedule")
    frame = frame[~full].copy()
    body = frame[ROLE] == BODY
    frame.loc[body, ACTIVATION_MB] = (frame.loc[body, ACTIVATION_MB] - 2 * kv) / k + 2 * kv
    frame.loc[body, PARAM_MB] = frame.loc[body, PARAM_MB] + 4 * kv
    savings = {HEAD: (1 - 1 / k) * _head_saving_mb(params),
               TAIL: (3 - 3 / k) * _loss_mb(params) - (k - 1) * _loss_mb(params) / k}
    for role, saving in savings.items():
        rows = frame[ROLE] == role
        if not rows.any():
            continue
        param = float(frame.loc[rows, PARAM_MB].iloc[0])
        if param - saving < 0:
            raise InputError(f"seq_params make the {role}'s SeqPipe memory negative: its param_mb {param:g} "
                             f"minus the saving {saving:g} MB; check seq_params against the layer table")
        frame.loc[rows, PARAM_MB] = param - saving
    frame[[FORWARD_TIME, BACKWARD_TIME]] = frame[[FORWARD_TIME, BACKWARD_TIME]] / k
    return layers.with_frame(pd.DataFrame(frame).reset_index(drop=True)), tuple(notes)
