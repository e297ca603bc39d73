"""The main job on bundled data: what ``sappkit demo`` prints and ``notebooks/00_tour.ipynb`` shows.

:func:`simulate_layers` is the one call from a layer table to a simulated
step (even placement, cell costs, simulation) behind ``sappkit simulate``,
the tour and its dashboard. :func:`run_demo` simulates the bundled
Llama-2-70B-class model under 1F1B and interleaved 1F1B and runs the
engineer's loop (:func:`sappkit.loop.run_loop`) on its bundled dry runs;
:meth:`Demo.describe` is the demo's headline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from .columns import MEMORY_MB, STAGE
from ._files import BUNDLED_DATA, bundled
from .layers.mindformers import read_layers_json
from .layers.table import LayerTable, as_layer_table
from .layers.units import UNSTATED, format_mb, format_share, text_table, with_time_unit
from .loop import Loop, run_loop
from .memfit.dryruns import read_dryrun_csv
from .pipeline.costs import cell_costs, even_assignment
from .pipeline.schedules import schedule_chunks
from .pipeline.simulator import Simulation, simulate

__all__ = ["BUNDLED_DATA", "DEMO_LAYERS", "DEMO_DRYRUNS", "Demo", "bundled", "headline", "run_demo",
           "simulate_layers", "tour_simulation"]

#: The model the demo and the tour load, and its dry-run observations.
DEMO_LAYERS = "llama2_70b.json"
DEMO_DRYRUNS = "llama2_70b_dryruns.csv"


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

    Columns ``run``, ``schedule``, ``chunks``, ``step_time`` (in the
    simulations' unit, ``attrs["time_unit"]``), ``bubble``, ``ideal``,
    ``imbalance``, ``recompute`` (fractions of the compute), ``peak_mb``,
    ``peak_stage``, ``fits`` (peak within ``limit_mb``, or NA when there is
    no limit).
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
    units = {sim.time_unit for sim in simulations.values()}
    return with_time_unit(pd.DataFrame(rows), units.pop() if len(units) == 1 else UNSTATED)


@dataclass(frozen=True, eq=False)
class Demo:
    """What the demo ran: the schedules on the even placement, and the loop on the bundled dry runs."""

    setting: str
    layers: LayerTable
    simulations: dict[str, Simulation] = field(default_factory=dict)
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    loop: Loop | None = None

    def describe(self) -> str:
        """The setting, the headline table (times in the table's unit, the bubble as a share of the compute), the
        step-time gain of the fastest run over the first, then the loop."""
        table = self.summary[["run", "schedule", "chunks", "step_time", "bubble", "peak_mb", "peak_stage", "fits"]]
        table = table.assign(bubble=[format_share(share) for share in table["bubble"]]).rename(
            columns={"bubble": "bubble/compute"})
        first, fastest = self.summary.iloc[0], self.summary.loc[self.summary["step_time"].idxmin()]
        lines = [self.setting, text_table(table, self.layers.time_unit),
                 f"{fastest['run']} is {1 - fastest['step_time'] / first['step_time']:.1%} faster than {first['run']}"]
        if self.loop is not None:
            lines += ["", self.loop.describe()]
        return "\n".join(lines)


def run_demo(*, micro_batches: int = 32, chunks: int = 2, option: str = "selective",
             limit_mb: float = 58000.0) -> Demo:
    """The bundled Llama-2-70B-class model: 1F1B against interleaved 1F1B evenly placed, then the loop.

    The pipeline has the bundled dry runs' 16 stages; times are in ms, memory in MB.

    Examples
    --------
    >>> demo = run_demo(micro_batches=16)
    >>> demo.summary["run"].tolist(), demo.loop.plan.status
    (['1f1b', 'interleaved x2'], 'optimal')
    """
    layers = read_layers_json(bundled(DEMO_LAYERS))
    observations = read_dryrun_csv(bundled(DEMO_DRYRUNS))
    stages = int(observations["stages"].iloc[0])
    runs = {"1f1b": dict(schedule="1f1b", chunks=1),
            f"interleaved x{chunks}": dict(schedule="interleaved", chunks=chunks)}
    simulations = {label: simulate_layers(layers, stages=stages, micro_batches=micro_batches, option=option,
                                          limit_mb=limit_mb, **run) for label, run in runs.items()}
    setting = (f"data/{DEMO_LAYERS}: {stages} stages, {micro_batches} micro-batches, {option} recompute, "
               f"layers placed evenly, {format_mb(limit_mb)} devices (times in {layers.time_unit}, memory in MB)")
    loop = run_loop(observations, layers, micro_batches=micro_batches, memory_mb=limit_mb,
                    setting=f"The loop on data/{DEMO_DRYRUNS} and the times of data/{DEMO_LAYERS}: 1f1b, "
                            f"{stages} stages, {micro_batches} micro-batches, {format_mb(limit_mb)} devices")
    return Demo(setting=setting, layers=layers, simulations=simulations, summary=headline(simulations), loop=loop)


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
                           chunks=schedule_chunks(schedule, chunks), option=option, limit_mb=limit_mb)
