"""sappkit: plan pipeline-parallel training of large models.

The public contract of DESIGN.md, imported lazily so that ``import sappkit``
stays cheap (the solver and plotting stacks load on first use).
"""

from importlib import import_module

from .errors import InputError

#: Public name -> the module that defines it.
_EXPORTS = {
    "LayerTable": "layers", "as_layer_table": "layers",
    "in_flight": "schedules", "forward_in_backward": "schedules",
    "read_layers_json": "formats", "write_layers_json": "formats",
    "read_layers_csv": "formats", "write_layers_csv": "formats",
    "estimate_layers": "estimate", "TransformerConfig": "estimate", "ParallelConfig": "estimate",
    "DeviceConfig": "estimate",
    "even_assignment": "pipeline", "cell_costs": "pipeline", "stage_memory": "pipeline",
    "simulate": "simulator", "Simulation": "simulator",
    "plot_schedule": "plots.pipeline", "plot_memory_timeline": "plots.pipeline",
    "plot_simulation": "plots.pipeline", "plot_stage_memory": "plots.pipeline",
    "read_dryrun_yaml": "dryruns", "read_dryrun_logs": "dryruns", "read_dryrun_csv": "dryruns",
    "fit_memory": "memfit", "MemoryFit": "memfit", "plan_dryruns": "dryrun_plan",
    "DryRunPlan": "dryrun_plan", "DryRunWarning": "dryruns", "dryrun_config": "stage_config",
    "synthetic_dryruns": "memmodel", "expected_params": "memmodel",
    "plot_fit": "plots.fit", "plot_fit_params": "plots.fit", "plot_fit_observations": "plots.fit",
    "plot_fit_residuals": "plots.fit",
    "balance": "balancer", "Plan": "plan", "SolverOptions": "solver",
    "plan_from_offsets": "plan", "sweep_memory": "balance_views",
    "compare_plans": "balance_views", "even_plan": "balance_views", "plot_stage_times": "plots.balance",
    "plot_memory_sweep": "plots.balance", "plot_plan_comparison": "plots.balance",
    "Partition": "partition",
    "choose_recompute": "recompute", "RecomputeChoice": "recompute", "HostLink": "recompute",
    "sweep_recompute": "recompute",
    "plot_time_saved": "plots.recompute", "plot_before_after": "plots.recompute",
    "plot_layer_options": "plots.recompute",
    "RecomputeAnalysis": "one_more", "alternatives": "one_more",
    "plot_alternatives": "plots.alternatives",
}

__all__ = ["InputError", *_EXPORTS]
__version__ = "0.1.0"


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sappkit' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
