"""Calibrate to the user's own cluster: fit the hardware's physical parameters to measured runs and kernels.

- :func:`calibrate`: a cluster fitted to runs (trainer config, model, training log), each run's error before
  and after, the values' uncertainty, and a refusal of what the runs cannot identify (:mod:`.fit`);
- :func:`read_kernel_times`: GEMMs, attention and collectives of a PyTorch profiler trace (:mod:`.kernels`);
- :func:`read_run` and :func:`read_step_times`: runs and step times from the files a user has (:mod:`.logs`).
"""

from .calibrate import Calibration, calibrate
from .fit import PARAMETERS
from .kernels import read_kernel_times
from .logs import LOG_FORMATS, measured_step_ms, read_step_times
from .runs import Run, read_run

__all__ = ["calibrate", "Calibration", "PARAMETERS", "Run", "read_run", "read_step_times", "measured_step_ms",
           "LOG_FORMATS", "read_kernel_times"]
