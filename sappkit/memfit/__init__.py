"""Memory fit: per-layer parameter and activation memory, head, tail and constant, from dry runs.

Reads the stages' peak memory of a few dry runs, fits the memory model by
least squares, and plans the dry runs that identify every parameter.
"""

from .dryruns import DryRunWarning, read_dryrun_csv, read_dryrun_logs, read_dryrun_yaml
from .fit import MemoryFit, fit_memory
from .model import expected_params, synthetic_dryruns
from .planner import DryRunPlan, plan_dryruns
from .stage_config import dryrun_config

__all__ = ["read_dryrun_yaml", "read_dryrun_logs", "read_dryrun_csv", "DryRunWarning", "dryrun_config",
           "synthetic_dryruns", "expected_params", "fit_memory", "MemoryFit", "plan_dryruns", "DryRunPlan"]
