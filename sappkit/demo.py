"""The main job on bundled data: what ``sappkit demo`` runs and ``notebooks/00_tour.ipynb`` shows.

:func:`simulate_layers` is the one call from a layer table to a simulated
step (even placement, cell costs, simulation) behind ``sappkit simulate``,
the tour and its dashboard. :func:`run_demo` simulates the bundled
Llama-2-70B-class model under 1F1B and interleaved 1F1B and returns the
headline numbers; later models add their own rows and frames to a
:class:`Demo`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .columns import MEMORY_MB, STAGE
from .errors import InputError
from .formats import read_layers_json
from .layers import LayerTable, as_layer_table
from .pipeline import cell_costs, even_assignment
from .simulator import Simulation, simulate

__all__ = ["BUNDLED_DATA", "DEMO_LAYERS", "Demo", "bundled", "headline", "run_demo", "simulate_layers",
           "tour_simulation"]

#: The repository's ``data/`` folder (bundled example inputs).
BUNDLED_DATA = Path(__file__).resolve().parent.parent / "data"
#: The model the demo and the tour load.
DEMO_LAYERS = "llama2_70b.json"


def bundled(name: str) -> Path:
    """The path of a bundled data file, or an error saying where it was looked for.

    Examples
    --------
    >>> bundled("llama2_70b.json").name
    'llama2_70b.json'
    """
    path = BUNDLED_DATA / name
    if not path.is_file():
        raise InputError(f"bundled data file {name!r} is not in {BUNDLED_DATA}; the bundled data ships with the "
                         "repository (install it with pip install -e . from a clone)")
    return path


def simulate_layers(layers, *, stages: int, micro_batches: int, schedule: str = "1f1b", chunks: int = 1,
                    option: str | Mapping[str, str] | None = None, less_memory: bool = False,
                    seq_split: int = 1, p2p_time: float = 0.0, limit_mb: float | None = None) -> Simulation:
    """Place the body layers evenly (:func:`sappkit.even_assignment`), cost the cells and simulate one step.

    Examples
    --------
    >>> table = pd.DataFrame([dict(kind="block", role="body", count=8, param_mb=100, option="none",
    ...                            forward_time=1, backward_time=2, activation_mb=10)])
    >>> simulate_layers(table, stages=4, micro_batches=8).step_time
    66.0
    """
    table = as_layer_table(layers)
    assignment = even_assignment(table, stages=stages, chunks=chunks, schedule=schedule, option=option)
    costs = cell_costs(table, assignment, stages=stages, chunks=chunks, schedule=schedule)
    return simulate(costs, schedule=schedule, micro_batches=micro_batches, less_memory=less_memory,
                    seq_split=seq_split, p2p_time=p2p_time, limit_mb=limit_mb)


def headline(simulations: Mapping[str, Simulation]) -> pd.DataFrame:
    """One row per labelled simulation: step time, the bubble split and the highest stage peak.

    Columns ``run``, ``schedule``, ``chunks``, ``step_time``, ``bubble``,
    ``ideal``, ``imbalance``, ``recompute`` (fractions of the compute),
    ``peak_mb``, ``peak_stage``, ``fits`` (peak within ``limit_mb``, or NA
    when there is no limit).
    """
    rows = []
    for label, sim in simulations.items():
        peak = sim.stages.loc[sim.stages[MEMORY_MB].idxmax()]
        limit = sim.stages["limit_mb"].iloc[0]
        rows.append(dict(run=label, schedule=sim.schedule, chunks=sim.chunks, step_time=sim.step_time,
                         bubble=sim.bubbles["real"], ideal=sim.bubbles["ideal"],
                         imbalance=sim.bubbles["imbalance"], recompute=sim.bubbles["recompute"],
                         peak_mb=peak[MEMORY_MB], peak_stage=int(peak[STAGE]),
                         fits=pd.NA if pd.isna(limit) else bool(peak[MEMORY_MB] <= limit)))
    return pd.DataFrame(rows)


@dataclass(frozen=True, eq=False)
class Demo:
    """What the demo ran: the setting in words, the layer table, each labelled simulation and their headlines."""

    setting: str
    layers: LayerTable
    simulations: dict[str, Simulation] = field(default_factory=dict)
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)

    def describe(self) -> str:
        """The setting, the headline table, and the step-time gain of the fastest run over the first."""
        table = self.summary.round({"step_time": 1, "bubble": 3, "ideal": 3, "imbalance": 3, "recompute": 3,
                                    "peak_mb": 0})
        first, fastest = self.summary.iloc[0], self.summary.loc[self.summary["step_time"].idxmin()]
        gain = 1 - fastest["step_time"] / first["step_time"]
        return "\n".join([self.setting, table.to_string(index=False),
                          f"{fastest['run']} is {gain:.1%} faster than {first['run']}"])


def run_demo(*, stages: int = 16, micro_batches: int = 32, chunks: int = 2, option: str = "selective",
             limit_mb: float = 58000.0) -> Demo:
    """Simulate the bundled Llama-2-70B-class model under 1F1B and interleaved 1F1B, evenly placed.

    Examples
    --------
    >>> demo = run_demo(stages=4, micro_batches=8)
    >>> demo.summary["run"].tolist()
    ['1f1b', 'interleaved x2']
    """
    layers = read_layers_json(bundled(DEMO_LAYERS))
    runs = {"1f1b": dict(schedule="1f1b", chunks=1),
            f"interleaved x{chunks}": dict(schedule="interleaved", chunks=chunks)}
    simulations = {label: simulate_layers(layers, stages=stages, micro_batches=micro_batches, option=option,
                                          limit_mb=limit_mb, **run) for label, run in runs.items()}
    setting = (f"data/{DEMO_LAYERS}: {stages} stages, {micro_batches} micro-batches, {option} recompute, "
               f"layers placed evenly, {limit_mb:g} MB devices")
    return Demo(setting=setting, layers=layers, simulations=simulations, summary=headline(simulations))


#: Chunks a schedule fixes; the others take the caller's.
_FIXED_CHUNKS = {"1f1b": 1, "dualpipev": 2}


def tour_simulation(layers, *, schedule: str, stages: int, micro_batches: int, chunks: int, option: str,
                    limit_mb: float | None = None) -> Simulation:
    """The tour dashboard's computation: :func:`simulate_layers` with the chunks the schedule fixes.

    ``chunks`` applies to ``interleaved`` only; ``1f1b`` runs one chunk and
    ``dualpipev`` two, whatever the chunk slider says.

    Examples
    --------
    >>> table = pd.DataFrame([dict(kind="block", role="body", count=8, param_mb=100, option="none",
    ...                            forward_time=1, backward_time=2, activation_mb=10)])
    >>> tour_simulation(table, schedule="dualpipev", stages=2, micro_batches=4, chunks=3, option="none").chunks
    2
    """
    return simulate_layers(layers, stages=stages, micro_batches=micro_batches, schedule=schedule,
                           chunks=_FIXED_CHUNKS.get(schedule, chunks), option=option, limit_mb=limit_mb)
