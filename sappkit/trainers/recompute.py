"""A recompute choice stated for runtimes: Megatron-LM's recompute arguments and torchtitan's checkpointing.

:func:`megatron_setting` and :func:`torchtitan_setting` take a
:class:`~sappkit.RecomputeChoice` (its trainer-neutral statements, the
seed's ``trainer_plan()`` and ``recompute_lists()``, live beside it in
:mod:`sappkit.recompute.trainer_plan`). A runtime runs a choice
when its grammar (:mod:`sappkit.balancer.grammar`) has a policy giving each
cell the choice's count of fully recomputed layers: one option everywhere;
Megatron-LM's ``block N`` (the first ``N`` layers of every chunk);
torchtitan's every ``N``-th block a rank builds. Where none does, the
:class:`RuntimeSetting` says why. Communication recompute (``comm``,
``both``) and host offload have no counterpart in Megatron-LM's or
torchtitan's settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..balancer.grammar import matching_policy
from ..columns import OPTION
from ..pipeline.schedules import model_order
from ..recompute.trainer_plan import chosen_layers
from .config import pipeline_of

__all__ = ["RuntimeSetting", "megatron_setting", "torchtitan_setting"]

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


def _unsupported(layers, runtime: str) -> str | None:
    """Why ``runtime`` cannot run these options at all, or None."""
    other = sorted(set(layers[OPTION]) - set(_RUNTIME_OPTIONS))
    if other:
        return (f"{runtime} has no counterpart for option(s) {', '.join(map(repr, other))} "
                "(it recomputes none, selective or full)")
    if (layers["offloaded_mb"] > 0).any():
        return f"{runtime}'s recompute settings do not offload activations to the host"
    return None


def _fulls(pipe) -> list[int]:
    cells = model_order(pipe.schedule, pipe.stages, pipe.chunks)
    sizes = [pipe.layer_counts[c][s] for c, s in cells]
    ends = [sum(sizes[:i + 1]) for i in range(len(sizes))]
    return [pipe.options[end - size:end].count("full") for end, size in zip(ends, sizes)]


def _matched(choice, runtime: str, name: str, mixed: str, unmatched: str):
    """``(policy, None)`` when the runtime's grammar runs the choice, else ``(None, RuntimeSetting)`` saying why."""
    why = _unsupported(chosen_layers(choice, runtime), name)
    if why:
        return None, RuntimeSetting(runtime, False, note=why)
    pipe = pipeline_of(choice)
    policy = matching_policy(runtime, pipe.schedule, pipe.layer_counts, pipe.options)
    if policy is not None:
        return policy, None
    note = mixed if "selective" in pipe.options else unmatched.format(fulls=_fulls(pipe))
    return None, RuntimeSetting(runtime, False, note=note)


def megatron_setting(choice) -> RuntimeSetting:
    """The choice as Megatron-LM recompute arguments (``recompute_granularity``, ``recompute_method``,
    ``recompute_num_layers``), or why they cannot express it."""
    policy, refused = _matched(choice, "megatron", "Megatron-LM",
                               "Megatron-LM runs one recompute granularity for every layer; this choice mixes "
                               "selective with other options",
                               "the fully recomputed layers per cell ({fulls}) are not the first N of every cell for "
                               "one N: --recompute-num-layers takes one count for every stage")
    if refused:
        return refused
    if policy.family == "block":
        return RuntimeSetting("megatron", True, {"recompute_granularity": "full", "recompute_method": "block",
                                                 "recompute_num_layers": policy.n},
                              f"the first {policy.n} layer(s) of every stage's model chunk fully recomputed")
    return {"none": RuntimeSetting("megatron", True, note="no layer recomputes: leave --recompute-granularity unset"),
            "full": RuntimeSetting("megatron", True, {"recompute_granularity": "full", "recompute_method": "uniform",
                                                      "recompute_num_layers": 1}, "every layer fully recomputed"),
            "selective": RuntimeSetting("megatron", True, {"recompute_granularity": "selective"},
                                        "every layer selectively recomputed")}[policy.option]


def torchtitan_setting(choice) -> RuntimeSetting:
    """The choice as torchtitan's ``[activation_checkpoint]`` settings, or why they cannot express it."""
    policy, refused = _matched(choice, "torchtitan", "torchtitan",
                               "torchtitan runs op-level selective checkpointing on every block or none; this choice "
                               "mixes it with others",
                               "torchtitan's layer-level checkpointing recomputes the blocks at positions N, 2N, ... "
                               "of those a rank builds; this choice's fully recomputed blocks per cell ({fulls}) "
                               "follow no such pattern")
    if refused:
        return refused
    if policy.family == "every":
        return RuntimeSetting("torchtitan", True, {"mode": "selective", "selective_ac_option": str(policy.n)},
                              f"the blocks at positions {policy.n}, {2 * policy.n}, ... of those a rank builds "
                              "fully checkpointed")
    settings = {"mode": policy.option} | ({"selective_ac_option": "op"} if policy.option == "selective" else {})
    return RuntimeSetting("torchtitan", True, settings, f"every block runs {policy.option}")
