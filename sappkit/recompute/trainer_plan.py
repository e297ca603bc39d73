"""A recompute choice in trainer-neutral terms: one mode and the layers that run another, and per-layer lists.

The seed's trainer plan (:meth:`~sappkit.RecomputeChoice.trainer_plan`):
``(mode, layers)``, where ``mode`` is whichever of ``full`` / ``selective``
the most layers run (``full`` on a tie, even when ``off`` is the majority),
or ``off`` when none recomputes, and ``layers`` names every other layer by
index (``"7"``) or inclusive range (``"3-5"``), consecutive layers of one
mode merged. HyperParallel's trainer reads exactly this as
``activation_checkpoint.mode`` / ``.layers`` (:mod:`sappkit.trainers.hyperparallel`
writes it into its YAML). Per-layer lists (:func:`recompute_lists`) name the
body layers that run each mode or option. The runtimes' own settings
(Megatron-LM's and torchtitan's) are stated in :mod:`sappkit.trainers.recompute`,
above this folder.
"""

from __future__ import annotations

from collections import Counter

from ..columns import OPTION
from ..errors import InputError

__all__ = ["TRAINER_MODES", "layer_plan", "trainer_plan", "trainer_plan_line", "recompute_lists", "chosen_layers"]

#: The modes of a trainer plan, in the order a tie between the recomputing ones is broken.
TRAINER_MODES = ("full", "selective", "off")


def layer_plan(modes: list[str]) -> tuple[str, dict[str, str]]:
    """``(mode, layers)`` for per-layer modes: the mode of the most layers that recompute, the others named.

    Examples
    --------
    >>> layer_plan(["full", "full", "off", "off", "selective"])
    ('full', {'2-3': 'off', '4': 'selective'})
    """
    unknown = sorted(set(modes) - set(TRAINER_MODES))
    if unknown:
        raise InputError(f"the trainer runs modes {', '.join(map(repr, TRAINER_MODES))}; the plan runs "
                         f"{', '.join(map(repr, unknown))}")
    counts = Counter(modes)
    recomputing = [mode for mode in TRAINER_MODES[:2] if counts[mode]]
    if not recomputing:
        return "off", {}
    mode = max(recomputing, key=lambda name: counts[name])
    plan: dict[str, str] = {}
    first = 0
    for index in range(1, len(modes) + 1):
        if index == len(modes) or modes[index] != modes[first]:
            if modes[first] != mode:
                last = index - 1
                plan[str(first) if first == last else f"{first}-{last}"] = modes[first]
            first = index
    return mode, plan


def chosen_layers(choice, what: str):
    """The choice's ``layer_options`` frame, or an InputError saying that ``what`` needs a choice."""
    if not choice.chosen:
        raise InputError(f"{what} needs a choice, and none was made: {choice.reason}")
    return choice.layer_options


def trainer_plan(choice) -> tuple[str, dict[str, str]]:
    """``(mode, layers)`` of a :class:`~sappkit.RecomputeChoice` (module docstring).

    A one-mode choice gives its mode and no overrides; otherwise
    :func:`layer_plan` of the layers' modes (offloaded layers are named by
    their mode: the trainer does not offload).
    """
    layers = chosen_layers(choice, "trainer_plan")
    if choice.mode is not None:
        return choice.mode, {}
    modes = layers["mode"].tolist()
    if any(mode is None for mode in modes):
        raise InputError("trainer_plan needs a choice among modes: this choice gives layers options from their "
                         "kinds' fronts, which the trainer cannot name; choose with "
                         "modes=('off', 'selective', 'full') and per_layer=True")
    unknown = sorted(set(modes) - set(TRAINER_MODES))
    if unknown:
        raise InputError(f"trainer_plan: the trainer runs modes {', '.join(map(repr, TRAINER_MODES))}; "
                         f"this choice runs {', '.join(map(repr, unknown))}")
    return layer_plan(modes)


def trainer_plan_line(mode: str, layers: dict[str, str]) -> str:
    """The trainer plan as people read it, named for the trainer that reads it (HyperParallel).

    Examples
    --------
    >>> trainer_plan_line("selective", {"1-3": "off"})
    "trainer plan (HyperParallel activation_checkpoint): mode = 'selective', layers = {'1-3': 'off'}"
    """
    return f"trainer plan (HyperParallel activation_checkpoint): mode = {mode!r}, layers = {layers}"


def recompute_lists(choice) -> dict[str, list[int]]:
    """Per mode (for a choice among modes) or option, the body layer indices that run it, in order."""
    layers = chosen_layers(choice, "recompute_lists")
    key = "mode" if layers["mode"].notna().all() and len(layers) else OPTION
    return {str(name): rows["layer"].astype(int).tolist() for name, rows in layers.groupby(key, sort=False)}
