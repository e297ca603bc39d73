"""PyTorch in sappkit (the optional extra ``[torch]``): measured layer tables and the schedules PyTorch runs.

- :func:`measure_layers`: a layer table measured on a real block;
- :func:`schedule_orders`: the step orders ``torch.distributed.pipelining`` generates;
- :func:`benchmark_device`: a GEMM, attention and copy sweep that writes a hardware file;
- :func:`benchmark_collectives`: collectives over sizes in local processes, and the link they imply;
- :func:`measure_steps`: a small transformers Llama's training step measured (:class:`StepConfig`);
- :func:`close_loop`: benchmark, calibrate, predict that step with :func:`sappkit.evaluate_strategy`, measure it.

``import sappkit`` never imports this package; importing it without PyTorch
raises one ImportError that names the extra.
"""

try:
    import torch  # noqa: F401
except ImportError as error:
    raise ImportError("sappkit.torch needs PyTorch, which is not installed; install the extra: "
                      "pip install 'sappkit[torch]'") from error

from .measure import measure_layers  # noqa: E402
from .schedules import schedule_orders  # noqa: E402
from .benchmark import benchmark_device  # noqa: E402
from .collectives import benchmark_collectives  # noqa: E402
from .steps import StepConfig, measure_steps  # noqa: E402
from .closing import close_loop  # noqa: E402

__all__ = ["measure_layers", "schedule_orders", "benchmark_device", "benchmark_collectives", "StepConfig",
           "measure_steps", "close_loop"]
