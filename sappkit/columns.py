"""Column names, defined once, for every frame sappkit reads or returns.

Memory is in MB (MiB) in every ``*_mb`` column; times are in the input's own
unit in every ``*_time`` column (and ``time``, ``time_saved``, ``time_cost``):
the layer table's :attr:`~sappkit.LayerTable.time_unit`, which every frame
built from it carries in ``frame.attrs["time_unit"]``; a plain frame without
it is in ``"time units"`` (:mod:`sappkit.layers.units`).
"""

__all__ = [
    "KIND", "ROLE", "COUNT", "PARAM_MB", "OPTION", "FORWARD_TIME", "BACKWARD_TIME",
    "ACTIVATION_MB", "MODULE", "MEMORY_ONCE_MB", "WORKING_MB", "FIRST_WORKING_MB",
    "GRAD_MB", "BACKWARD_INPUT_TIME", "BACKWARD_WEIGHT_TIME", "WEIGHT_PASS_MB", "SPLIT_COLUMNS",
    "LAYER_REQUIRED", "LAYER_OPTIONAL", "LAYER_NUMERIC",
    "STAGE", "CHUNK", "IN_FLIGHT", "OVERHEAD_MB", "CONST_MB", "MEMORY_MB", "LIMIT_MB",
    "STAGE_MEMORY", "RECOMPUTE_TIME", "TIME", "LAYERS",
    "HEAD", "BODY", "TAIL", "ROLES", "SAPP_OPTIONS", "POSITIONAL_OPTIONS", "DEFAULT_MODES",
]

# The layer table (docs/design.md "The layer table").
KIND = "kind"
ROLE = "role"
COUNT = "count"
PARAM_MB = "param_mb"
OPTION = "option"
FORWARD_TIME = "forward_time"
BACKWARD_TIME = "backward_time"
ACTIVATION_MB = "activation_mb"
MODULE = "module"
MEMORY_ONCE_MB = "memory_once_mb"
WORKING_MB = "working_mb"
FIRST_WORKING_MB = "first_working_mb"
GRAD_MB = "grad_mb"
# Optional, for schedules that split the backward (not filled in when absent; the simulator's default split).
BACKWARD_INPUT_TIME = "backward_input_time"
BACKWARD_WEIGHT_TIME = "backward_weight_time"
WEIGHT_PASS_MB = "weight_pass_mb"
#: The split-backward columns.
SPLIT_COLUMNS = (BACKWARD_INPUT_TIME, BACKWARD_WEIGHT_TIME, WEIGHT_PASS_MB)

LAYER_REQUIRED = (KIND, ROLE, COUNT, PARAM_MB, OPTION, FORWARD_TIME, BACKWARD_TIME, ACTIVATION_MB)
#: Optional layer columns and their defaults (``first_working_mb`` defaults to ``working_mb``).
LAYER_OPTIONAL = {MODULE: "model", MEMORY_ONCE_MB: 0.0, WORKING_MB: 0.0, FIRST_WORKING_MB: None, GRAD_MB: 0.0}
#: The layer columns that hold numbers (checked finite and >= 0).
LAYER_NUMERIC = (COUNT, PARAM_MB, FORWARD_TIME, BACKWARD_TIME, ACTIVATION_MB, MEMORY_ONCE_MB, WORKING_MB,
                 FIRST_WORKING_MB, GRAD_MB)

# Pipeline cells and the shared per-stage memory schema (docs/design.md "One memory model").
STAGE = "stage"
CHUNK = "chunk"
IN_FLIGHT = "in_flight"
OVERHEAD_MB = "overhead_mb"
CONST_MB = "const_mb"
MEMORY_MB = "memory_mb"
LIMIT_MB = "limit_mb"
STAGE_MEMORY = (STAGE, PARAM_MB, ACTIVATION_MB, OVERHEAD_MB, WORKING_MB, CONST_MB, MEMORY_MB, LIMIT_MB)

RECOMPUTE_TIME = "recompute_time"
TIME = "time"
LAYERS = "layers"

# Roles and the SAPP recompute options, least to most recompute.
HEAD = "head"
BODY = "body"
TAIL = "tail"
ROLES = (HEAD, BODY, TAIL)
SAPP_OPTIONS = ("none", "selective", "comm", "both", "full")
#: The order MindFormers runs a cell's layers of one kind in: the most recomputed first, none last.
POSITIONAL_OPTIONS = ("full", "both", "selective", "comm", "none")
#: Which option each runtime mode runs, unless the caller says otherwise: a runtime's ``off`` is the option ``none``
#: (frames carry both, ``option`` and ``mode``; trainer plans name modes).
DEFAULT_MODES = {"off": "none", "selective": "selective", "full": "full"}
