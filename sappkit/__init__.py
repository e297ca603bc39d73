"""sappkit: plan pipeline-parallel training of large models.

The public face (docs/design.md walks through the models), imported lazily so that ``import sappkit``
stays cheap (the solver and plotting stacks load on first use).
"""

from importlib import import_module

from .errors import InputError

#: Public name -> the sub-package (one per model) or plotting module that exports it.
_EXPORTS = {
    **dict.fromkeys(("Cluster",), "hardware"),
    **dict.fromkeys(("LayerTable", "as_layer_table", "read_layers_json", "write_layers_json", "read_layers_csv",
                     "write_layers_csv", "estimate_layers", "TransformerConfig", "ParallelConfig", "DeviceConfig",
                     "KernelConfig", "model_flops"),
                    "layers"),
    "read_model_config": "models",
    **dict.fromkeys(("in_flight", "forward_in_backward", "even_assignment", "cell_costs", "stage_memory",
                     "simulate", "Simulation"), "pipeline"),
    **dict.fromkeys(("read_dryrun_yaml", "read_dryrun_logs", "read_dryrun_csv", "DryRunWarning", "fit_memory",
                     "MemoryFit", "plan_dryruns", "DryRunPlan", "dryrun_config", "synthetic_dryruns",
                     "expected_params"), "memfit"),
    **dict.fromkeys(("Partition", "choose_recompute", "RecomputeChoice", "HostLink", "sweep_recompute"),
                    "recompute"),
    **dict.fromkeys(("RecomputeAnalysis", "alternatives"), "one_more"),
    **dict.fromkeys(("balance", "Plan", "SolverOptions", "plan_from_offsets", "sweep_memory", "compare_plans",
                     "even_plan"), "balancer"),
    **dict.fromkeys(("Strategy", "evaluate_strategy", "StrategyEvaluation", "validate", "search_strategies",
                     "StrategySearch"), "strategy"),
    **dict.fromkeys(("read_trainer_config", "check_config", "export_config", "read_profile_times",
                     "profile_layer_table", "TrainerConfig", "ConfigCheck", "TrainerExport", "torchtitan_config",
                     "TorchtitanConfig"),
                    "trainers"),
    **dict.fromkeys(("calibrate", "Calibration", "read_run", "read_step_times", "read_kernel_times"), "calibration"),
    **dict.fromkeys(("plot_schedule", "plot_memory_timeline", "plot_simulation", "plot_stage_memory",
                     "plot_plan"),
                    "plots.pipeline"),
    **dict.fromkeys(("plot_fit", "plot_fit_params", "plot_fit_observations", "plot_fit_residuals"), "plots.fit"),
    **dict.fromkeys(("plot_stage_times", "plot_memory_sweep", "plot_plan_comparison"), "plots.balance"),
    **dict.fromkeys(("plot_time_saved", "plot_before_after", "plot_layer_options"), "plots.recompute"),
    "plot_alternatives": "plots.alternatives",
    **dict.fromkeys(("plot_validation", "plot_step_breakdown", "plot_step_terms"), "plots.strategy"),
    **dict.fromkeys(("plot_strategy_pareto", "plot_step_bands"), "plots.search"),
}

__all__ = ["InputError", *_EXPORTS]
__version__ = "0.1.0"


#: Sub-packages reachable as attributes without an import (``sappkit.models.get(...)``); not in ``__all__``.
_SUBPACKAGES = ("models", "hardware", "calibration")


def __getattr__(name):
    if name in _SUBPACKAGES:
        return import_module(f".{name}", __name__)
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sappkit' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
