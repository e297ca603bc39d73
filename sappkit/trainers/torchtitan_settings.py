"""The run settings a torchtitan config states beside its degrees: whether it compiles its model, FSDP's
resharding and async tensor parallelism (torchtitan's ``job_config.py`` and ``parallelize.py`` at 9dec370)."""

from __future__ import annotations

from .._check import short
from ..errors import InputError
from .config import flag, section

__all__ = ["compiled", "fsdp_and_async_tp"]

_WHAT = "torchtitan config"


def fsdp_and_async_tp(par: dict, p: int, t: int) -> dict:
    """FSDP's resharding (``fsdp_reshard_after_forward``: ``default`` reshards without a pipeline, torchtitan's
    ``parallelize`` at 9dec370) and async TP (``enable_async_tensor_parallel``: TP communication overlap)."""
    policy = par.get("fsdp_reshard_after_forward", "default")
    if policy not in ("default", "always", "never"):
        raise InputError(f"{_WHAT}: parallelism.fsdp_reshard_after_forward must be 'default', 'always' or 'never'; "
                         f"got {short(policy)}")
    return {"reshard_after_forward": policy == "always" or (policy == "default" and p == 1),
            "tp_comm_overlap": flag(_WHAT, par, "enable_async_tensor_parallel", False) and t > 1}


def compiled(settings: dict, training: dict) -> bool:
    """Whether the config compiles its model: ``[compile] enable`` with ``"model"`` among its ``components``
    (torchtitan's default ``["model", "loss"]``), or the older ``[training] compile``; off by default."""
    if "compile" in settings:
        compile_ = section(_WHAT, settings, "compile")
        components = compile_.get("components", ["model", "loss"])
        if not isinstance(components, list) or not all(isinstance(c, str) for c in components):
            raise InputError(f"{_WHAT}: compile.components must be a list of names; got {short(components)}")
        return flag(_WHAT, compile_, "enable", False) and "model" in components
    return flag(_WHAT, training, "compile", False)
