"""Where each published strategy lands in the search of its own setup: status, rank, and the best's lead.

    python docs/scripts/published_in_search.py                          # every run of data/published_runs.csv
    python docs/scripts/published_in_search.py --runs dgxc-llama31-70b-bf16-64 --top 10
    python docs/scripts/published_in_search.py --max-devices 128        # the smaller setups only

For each run (data/published_runs.csv, read by sappkit.strategy.validation.run_inputs) it searches the run's
model on its devices, global batch, cluster, precision and attention kernels, in the default space, and prints
the published strategy's status and rank there, the search's best, the best's step over the published one's
(the published strategy priced at the run's own recompute on the even placement, as sappkit validate prices
it, whether or not sappkit's memory model lets it fit; the best as the search priced it), whether the two lie within the model's error of each other, and the
two side by side term by term (Comparison.describe). --top also prints the search's fastest rows with their
bands. Searches are CPU-heavy: the largest setups take minutes each.
"""

import argparse
import time

import numpy as np
import pandas as pd

from sappkit.strategy.search import search_strategies
from sappkit.strategy.search.space import DIMENSIONS, canonical_settings
from sappkit.strategy.validation import published_runs, run_inputs, run_kernels

#: The columns of a search's table printed under --top.
TOP_COLUMNS = ["rank", "label", "step_ms", "step_low_ms", "step_high_ms", "within_error"]


def published_row(frame: pd.DataFrame, strategy) -> pd.Series | None:
    """The search's row of ``strategy`` (its searched fields, settings without effect as the space writes them)."""
    wanted = canonical_settings(pd.DataFrame([{key: getattr(strategy, key)
                                               for key in (*DIMENSIONS, "schedule")}])).iloc[0]
    match = frame[np.logical_and.reduce([frame[key] == wanted[key] for key in (*DIMENSIONS, "schedule")])]
    return None if match.empty else match.iloc[0]


def search_of(run: pd.Series):
    """The default-space search of a published run's setup, with its model and published strategy."""
    model, strategy, batch = run_inputs(run)
    kernels = run_kernels(run)
    recipe = run.get("fp8_recipe")
    found = search_strategies(model, devices=strategy.devices, global_batch=batch, cluster=run["cluster"],
                              dtype=strategy.dtype, fp8_recipe=None if pd.isna(recipe) else str(recipe),
                              kernels=kernels, progress=False)
    return found, strategy


def report(run: pd.Series, top: int) -> None:
    started = time.perf_counter()
    found, strategy = search_of(run)
    seconds = time.perf_counter() - started
    row = published_row(found.frame, strategy)
    where = "not in the space" if row is None else (
        f"{row['status']}" + ("" if pd.isna(row["rank"]) else f", rank {row['rank']:.0f}"))
    print(f"## {run['run']}: {strategy.label} ({len(found.frame):,} strategies, {seconds:.0f} s wall here)")
    if found.best is None:
        print("nothing fits\n")
        return
    comparison = found.compare(strategy, recompute=str(run["recompute"]))
    within = comparison.a.step_ms / (1 + found.best["model_error"]) <= found.best["step_high_ms"]
    print(f"published: {where}; best: {found.best['label']}; best / published step "
          f"{1 / comparison.speedup:.3f} ({'within' if within else 'outside'} the model's error)")
    print(comparison.describe())
    if top:
        print(found.frame.dropna(subset=["rank"]).sort_values("rank").head(top)[TOP_COLUMNS].round(1)
              .to_string(index=False))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=None, help="run names (default every run)")
    parser.add_argument("--max-devices", type=int, default=None, help="only runs on at most this many devices")
    parser.add_argument("--top", type=int, default=0, help="also print the search's fastest rows")
    args = parser.parse_args()
    runs = published_runs()
    if args.runs:
        unknown = sorted(set(args.runs) - set(runs["run"]))
        if unknown:
            parser.error(f"--runs: {', '.join(unknown)} not in data/published_runs.csv")
        runs = runs[runs["run"].isin(args.runs)]
    if args.max_devices is not None:
        runs = runs[runs["devices"] <= args.max_devices]
    for _, run in runs.iterrows():
        report(run, args.top)


if __name__ == "__main__":
    main()
