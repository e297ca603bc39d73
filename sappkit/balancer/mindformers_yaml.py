"""MindFormers' pipeline sections of a plan, as SAPP's balancer writes them (its output is MindFormers YAML).

:meth:`sappkit.Plan.to_yaml` writes these sections from :meth:`~sappkit.Plan.offsets`;
:func:`sappkit.trainers.mindformers.mindformers_config` writes the same
sections for a plan or a recompute choice and adds a strategy's parallel
degrees. The keys and defaults follow MindFormers' ``ParallelConfig`` and
``RecomputeConfig`` (``mindformers/tools/register/template.py``, commit
``fd4deebc1606``).
"""

from __future__ import annotations

import yaml

from ..errors import InputError

__all__ = ["RECOMPUTE_FIELDS", "SCHEDULERS", "check_scheduler", "pipeline_sections", "sections_yaml"]

#: ``recompute_config`` fields and the defaults MindFormers' template gives them.
RECOMPUTE_FIELDS = {"recompute": False, "select_recompute": False, "parallel_optimizer_comm_recompute": False,
                    "select_comm_recompute": False, "mp_comm_recompute": True, "recompute_slice_activation": False,
                    "select_recompute_exclude": False, "select_comm_recompute_exclude": False}
#: sappkit schedule -> ``pipeline_scheduler`` (one chunk, more chunks).
SCHEDULERS = {"1f1b": ("1f1b", "1f1b"), "interleaved": ("1f1b", "1f1b"), "seqpipe": ("seqpipe", "seqvpp"),
              "zbv": ("zero_bubble_v", "zero_bubble_v")}
_LISTS = ("recompute", "select_recompute", "select_comm_recompute")


def check_scheduler(schedule: str) -> None:
    """An InputError unless MindFormers runs ``schedule``."""
    if schedule not in SCHEDULERS:
        raise InputError(f"MindFormers runs no {schedule!r} schedule; plan for one of "
                         f"{', '.join(map(repr, SCHEDULERS))}")


def pipeline_sections(*, schedule: str, chunks: int, num_layers: int, lists: dict, parallel: dict) -> dict:
    """The ``parallel_config``, ``parallel``, ``model`` and ``recompute_config`` sections.

    ``lists`` holds ``offset`` and the cumulative recompute counts (:meth:`sappkit.Plan.offsets`),
    ``parallel`` the ``parallel_config`` entries.

    Examples
    --------
    >>> lists = {"offset": [1, -1], "recompute": [2, 0], "select_recompute": [2, 0], "select_comm_recompute": [2, 0]}
    >>> sections = pipeline_sections(schedule="1f1b", chunks=1, num_layers=8, lists=lists,
    ...                              parallel={"pipeline_stage": 2, "micro_batch_num": 4})
    >>> sections["model"], sections["parallel"]
    ({'model_config': {'num_layers': 8, 'pp_interleave_num': 1, 'offset': [1, -1]}}, \
{'pipeline_config': {'pipeline_interleave': False, 'pipeline_scheduler': '1f1b'}})
    """
    check_scheduler(schedule)
    return {"parallel_config": parallel,
            "parallel": {"pipeline_config": {"pipeline_interleave": chunks > 1,
                                             "pipeline_scheduler": SCHEDULERS[schedule][chunks > 1]}},
            "model": {"model_config": {"num_layers": num_layers, "pp_interleave_num": chunks,
                                       "offset": lists["offset"]}},
            "recompute_config": {**RECOMPUTE_FIELDS, **{key: lists[key] for key in _LISTS}}}


def sections_yaml(document: dict) -> str:
    """MindFormers sections as YAML, ready to merge into a config."""
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None)
