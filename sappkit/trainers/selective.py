"""A runtime's own ``selective`` mode as the layer table prices it, or dropped where the table cannot.

A runtime's ``selective`` mode recomputes a set of op groups its policy
names. The layer table prices three recompute options below ``full``:
``selective`` re-runs the attention core, ``comm`` the layer norms and the
sequence-parallel all-gathers, ``both`` the two (:mod:`sappkit.layers.timing`).
:func:`policy_modes` maps the policy onto the option that re-runs exactly
those groups; a policy that also recomputes what no option prices (the
matmuls, say) has no price, so its mode is dropped and the note says so, as
SAPP's chooser drops ``selective`` where its profiles do not price the
policy's switches. Pass the result as ``modes`` to
:func:`sappkit.choose_recompute`.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._check import short
from ..errors import InputError
from ..layers.table import as_layer_table

__all__ = ["POLICY_GROUPS", "policy_modes"]

#: The op groups a selective policy may name, and what the table prices each in.
POLICY_GROUPS = ("attention_core", "norms_and_gathers", "matmuls")
_OPTION_OF = {frozenset({"attention_core"}): "selective", frozenset({"norms_and_gathers"}): "comm",
              frozenset({"attention_core", "norms_and_gathers"}): "both"}


def policy_modes(layers, recomputes: Iterable[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """``(modes, notes)``: ``off``, ``selective`` and ``full`` mapped to the table's options, ``selective`` to the
    option re-running exactly ``recomputes`` (a set of :data:`POLICY_GROUPS`), or left out with a note where no
    option prices it or a body kind lacks that option.

    Examples
    --------
    >>> import sappkit
    >>> from sappkit.demo import bundled
    >>> llama = sappkit.read_layers_json(bundled("llama2_70b.json"))
    >>> policy_modes(llama, {"attention_core", "norms_and_gathers"})
    ({'off': 'none', 'selective': 'both', 'full': 'full'}, ())
    >>> policy_modes(llama, {"attention_core", "matmuls"})[0]
    {'off': 'none', 'full': 'full'}
    """
    table = as_layer_table(layers)
    if isinstance(recomputes, str) or not isinstance(recomputes, Iterable):
        raise InputError(f"recomputes must be a set of op groups ({', '.join(POLICY_GROUPS)}); got "
                         f"{short(recomputes)}")
    groups = frozenset(recomputes)
    unknown = sorted(map(str, groups - set(POLICY_GROUPS)))
    if unknown:
        raise InputError(f"recomputes names {', '.join(map(repr, unknown))}; expected op groups among "
                         f"{', '.join(map(repr, POLICY_GROUPS))}")
    if not groups:
        raise InputError("recomputes is empty: a selective mode that recomputes nothing is 'off'")
    modes = {"off": "none", "selective": _OPTION_OF.get(groups), "full": "full"}
    notes = []
    if modes["selective"] is None:
        notes.append(f"the runtime's selective mode recomputes {', '.join(sorted(groups))}, which no option of the "
                     "layer table prices (it prices the attention core, the norms and all-gathers, or both): "
                     "mode 'selective' is left out")
    for mode, option in list(modes.items()):
        missing = [kind for kind in table.body_kinds if option is not None and option not in table.options(kind)]
        if missing:
            notes.append(f"mode {mode!r} runs option {option!r}, which kind(s) {', '.join(map(repr, missing))} do "
                         f"not price: mode {mode!r} is left out")
        if option is None or missing:
            del modes[mode]
    if not modes:
        raise InputError("no mode of the runtime is priced by the layer table: " + "; ".join(notes))
    return modes, tuple(notes)
