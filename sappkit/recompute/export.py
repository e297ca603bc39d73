"""A recompute choice as runtimes read it: HyperParallel's trainer, Megatron-LM, torchtitan.

- :func:`trainer_plan`: HyperParallel's ``activation_checkpoint.mode`` and
  ``.layers`` (a mode for every layer, and the layers that run another).
- :func:`megatron_setting`: Megatron-LM's ``--recompute-granularity``,
  ``--recompute-method`` and ``--recompute-num-layers``. They run one
  granularity for every layer; ``block`` recomputes the first ``N`` layers of
  every model chunk on every stage. A choice outside that shape is stated
  as not expressible, with the reason.
- :func:`torchtitan_setting`: torchtitan's ``[activation_checkpoint]``
  ``mode`` and ``selective_ac_option`` (``"op"``, or ``N``: every ``N``-th
  block of each model part, counted from 1, fully checkpointed).
- :func:`recompute_lists`: per option, the layer indices (always expressible).

Option names decide what a runtime runs: ``none``, ``selective``, ``full``.
Communication recompute (``comm``, ``both``) and host offload have no
counterpart in Megatron-LM's or torchtitan's recompute settings.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from ..columns import CHUNK, OPTION, STAGE
from ..errors import InputError

__all__ = ["RuntimeSetting", "trainer_plan", "recompute_lists", "megatron_setting", "torchtitan_setting",
           "torchtitan_layer_setting", "TRAINER_MODES"]

#: The modes HyperParallel's trainer runs, in the order it breaks a tie between the recomputing ones.
TRAINER_MODES = ("full", "selective", "off")
_RUNTIME_OPTIONS = ("none", "selective", "full")


@dataclass(frozen=True)
class RuntimeSetting:
    """A choice stated for one runtime.

    Attributes
    ----------
    runtime : str
        ``"megatron"`` or ``"torchtitan"``.
    expressible : bool
        Whether the runtime's settings can run the choice.
    settings : dict
        The settings (empty when not expressible, or when nothing recomputes).
    note : str
        What the settings do, or why the runtime cannot express the choice.
    """

    runtime: str
    expressible: bool
    settings: dict = field(default_factory=dict)
    note: str = ""


def _require_choice(choice, what: str) -> pd.DataFrame:
    if not choice.chosen:
        raise InputError(f"{what} needs a choice, and none was made: {choice.reason}")
    return choice.layer_options


def trainer_plan(choice) -> tuple[str, dict[str, str]]:
    """``(mode, layers)`` as HyperParallel's trainer reads ``activation_checkpoint.mode`` / ``.layers``.

    A one-mode choice gives its mode and no overrides. Otherwise the mode is
    whichever of ``full`` / ``selective`` the most layers run (``full`` on a
    tie, even when ``off`` is the majority), or ``off`` when no layer
    recomputes; ``layers`` names every other layer by index (``"7"``) or
    inclusive range (``"3-5"``), consecutive layers of one mode merged across
    kinds. Offloaded layers are named by their mode (``off``): the trainer
    does not offload.

    Raises
    ------
    InputError
        No choice was made; the choice is of per-kind front options (not
        modes); or it runs a mode the trainer does not have.
    """
    layers = _require_choice(choice, "trainer_plan")
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


def recompute_lists(choice) -> dict[str, list[int]]:
    """Per mode (for a choice among modes) or option, the body layer indices that run it, in order."""
    layers = _require_choice(choice, "recompute_lists")
    key = "mode" if layers["mode"].notna().all() and len(layers) else OPTION
    return {str(name): rows["layer"].astype(int).tolist() for name, rows in layers.groupby(key, sort=False)}


def _runtime_options(layers: pd.DataFrame, runtime: str) -> str | None:
    """Why ``runtime`` cannot run these options at all, or None."""
    other = sorted(set(layers[OPTION]) - set(_RUNTIME_OPTIONS))
    if other:
        return (f"{runtime} has no counterpart for option(s) {', '.join(map(repr, other))} "
                "(it recomputes none, selective or full)")
    if (layers["offloaded_mb"] > 0).any():
        return f"{runtime}'s recompute settings do not offload activations to the host"
    return None


def _cells(layers: pd.DataFrame):
    """Each cell's options in model order (the model parts a runtime builds per stage and chunk)."""
    return [rows[OPTION].tolist() for _, rows in layers.groupby([CHUNK, STAGE], sort=False)]


def megatron_setting(choice) -> RuntimeSetting:
    """The choice as Megatron-LM recompute arguments, or why they cannot express it.

    One option everywhere maps to ``full``/``uniform``/1, ``selective``, or
    no recompute. A mix of ``none`` and ``full`` maps to ``block`` with ``N``
    when every cell fully recomputes exactly its first ``min(N, layers)``
    layers.
    """
    layers = _require_choice(choice, "megatron")
    why = _runtime_options(layers, "Megatron-LM")
    if why:
        return RuntimeSetting("megatron", False, note=why)
    options = set(layers[OPTION])
    if options == {"none"}:
        return RuntimeSetting("megatron", True, note="no layer recomputes: leave --recompute-granularity unset")
    if options == {"full"}:
        return RuntimeSetting("megatron", True, {"recompute_granularity": "full", "recompute_method": "uniform",
                                                 "recompute_num_layers": 1}, "every layer fully recomputed")
    if options == {"selective"}:
        return RuntimeSetting("megatron", True, {"recompute_granularity": "selective"},
                              "every layer selectively recomputed")
    if "selective" in options:
        return RuntimeSetting("megatron", False, note="Megatron-LM runs one recompute granularity for every "
                                                      "layer; this choice mixes selective with other options")
    cells = _cells(layers)
    fulls = [cell.count("full") for cell in cells]
    prefix = all(cell[:count] == ["full"] * count for cell, count in zip(cells, fulls))
    n = max(fulls)
    if prefix and all(count == min(n, len(cell)) for cell, count in zip(cells, fulls)):
        return RuntimeSetting("megatron", True, {"recompute_granularity": "full", "recompute_method": "block",
                                                 "recompute_num_layers": n},
                              f"the first {n} layer(s) of every stage's model chunk fully recomputed")
    shape = "each cell's first layers" if prefix else "not each cell's first layers"
    return RuntimeSetting("megatron", False, note=f"the fully recomputed layers are {shape} (per cell: {fulls}); "
                                                  "--recompute-num-layers takes one count for every stage")


def torchtitan_setting(choice) -> RuntimeSetting:
    """The choice as torchtitan's ``[activation_checkpoint]`` settings, or why they cannot express it.

    One option everywhere maps to ``mode = "none"``, ``"full"`` or
    ``"selective"`` with ``selective_ac_option = "op"``. A mix of ``none`` and
    ``full`` maps to ``selective_ac_option = "N"`` when, in every cell (a
    model part), exactly the blocks at positions ``N, 2N, ...`` (from 1) are
    fully recomputed.
    """
    return torchtitan_layer_setting(_require_choice(choice, "torchtitan"))


def torchtitan_layer_setting(layers: pd.DataFrame) -> RuntimeSetting:
    """:func:`torchtitan_setting` for per-layer options: ``chunk``, ``stage``, ``option``, ``offloaded_mb``
    (one row per body layer in model order), as a choice or a plan gives them."""
    why = _runtime_options(layers, "torchtitan")
    if why:
        return RuntimeSetting("torchtitan", False, note=why)
    options = set(layers[OPTION])
    if len(options) == 1:
        option = options.pop()
        settings = {"mode": {"none": "none", "full": "full", "selective": "selective"}[option]}
        if option == "selective":
            settings["selective_ac_option"] = "op"
        return RuntimeSetting("torchtitan", True, settings, f"every block runs {option}")
    if "selective" in options:
        return RuntimeSetting("torchtitan", False, note="torchtitan runs op-level selective checkpointing on "
                                                        "every block or none; this choice mixes it with others")
    cells = _cells(layers)
    firsts = [cell.index("full") + 1 for cell in cells if "full" in cell]
    n = min(firsts)
    pattern = all(cell == ["full" if (i + 1) % n == 0 else "none" for i in range(len(cell))] for cell in cells)
    if pattern and n >= 2:
        return RuntimeSetting("torchtitan", True, {"mode": "selective", "selective_ac_option": str(n)},
                              f"every {n}th block of each model part fully checkpointed")
    return RuntimeSetting("torchtitan", False, note="torchtitan's layer-level checkpointing recomputes every N-th "
                                                    "block of each model part; this choice's fully recomputed "
                                                    "blocks follow no such pattern")
