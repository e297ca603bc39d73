"""Write the bundled dry-run observations (``python data/make_dryruns.py``; see data/README.md).

Each model's peaks come from its layer JSON through the memory fit's own
forward model (``sappkit.synthetic_dryruns``) at a few dry-run
configurations, plus Gaussian noise (standard deviation ``NOISE_MB``, seeded)
and rounding to whole MB as MindSpore's logs print them.
"""

from pathlib import Path

import pandas as pd

from sappkit import dryrun_config, plan_dryruns, read_layers_json, synthetic_dryruns

HERE = Path(__file__).parent
NOISE_MB = 30.0


def rounds(layers: int, stages: int, held: list[list[int]], recompute: list[list[int]],
           select_recompute=None, kinds=None) -> pd.DataFrame:
    """Dry-run rounds stated as layers per stage and cumulative recompute counts."""
    base = layers // stages
    select_recompute = select_recompute or [0] * len(held)
    return pd.concat([dryrun_config(stages=stages, layers=layers, offset=[n - base for n in per_stage],
                                    recompute=full, select_recompute=select, kinds=kinds, run=f"round{r + 1}")
                      for r, (per_stage, full, select) in enumerate(zip(held, recompute, select_recompute))],
                     ignore_index=True)


def llama() -> None:
    """Llama-2-70B at PP 16, all five options: the planned run plus a hand-stated second round."""
    table = read_layers_json(HERE / "llama2_70b.json")
    planned = plan_dryruns(16, 80, ["none", "selective", "comm", "both", "full"]).configs
    second = dryrun_config(stages=16, layers=80, offset=[-1, 1] * 8,
                           recompute=[1, 0, 2, 1, 0, 3, 1, 0, 2, 1, 0, 2, 1, 0, 1, 2],
                           select_recompute=[2, 3, 2, 4, 1, 5, 3, 2, 2, 3, 1, 4, 2, 1, 3, 4],
                           select_comm_recompute=[1, 0, 3, 1, 2, 3, 1, 3, 2, 5, 0, 2, 1, 2, 1, 2], run="round2")
    configs = pd.concat([planned, second], ignore_index=True)
    synthetic_dryruns(table, configs, noise_mb=NOISE_MB, seed=1, round_mb=True).to_csv(
        HERE / "llama2_70b_dryruns.csv", index=False)
    # The MindFormers YAML demo: the planned dry run for three options, read back by read_dryrun_yaml.
    plan = plan_dryruns(16, 80, ["none", "selective", "full"])
    observed = synthetic_dryruns(table, plan.configs, noise_mb=NOISE_MB, seed=2, round_mb=True)
    (HERE / "llama2_70b_dryrun.yaml").write_text(plan.to_yaml(observed), encoding="utf-8")


def deepseek() -> None:
    """DeepSeek-V3 at PP 16: three rounds that put its three dense layers on early stages in varying numbers."""
    table = read_layers_json(HERE / "deepseek_v3.json")
    configs = rounds(61, 16, kinds={"dense_decoder": 3, "moe_decoder": 58},
                     held=[[1, 1, 3, 4, 5, 4, 4, 4, 4, 4, 5, 4, 5, 4, 5, 4],
                           [1, 1, 1, 5, 4, 5, 4, 5, 4, 4, 5, 4, 5, 5, 4, 4],
                           [2, 1, 1, 4, 5, 5, 4, 4, 4, 4, 4, 4, 5, 5, 5, 4]],
                     recompute=[[0, 0, 2, 4, 5, 2, 1, 4, 4, 1, 4, 4, 2, 3, 0, 0],
                                [0, 1, 1, 2, 4, 1, 4, 2, 0, 3, 3, 4, 0, 3, 3, 4],
                                [2, 0, 1, 1, 3, 2, 2, 4, 2, 0, 3, 3, 1, 4, 2, 3]])
    synthetic_dryruns(table, configs, noise_mb=NOISE_MB, seed=3, round_mb=True).to_csv(
        HERE / "deepseek_v3_dryruns.csv", index=False)


def vlm() -> None:
    """The vision-language model at PP 8: three rounds, options none, selective and full for both kinds."""
    table = read_layers_json(HERE / "vlm.json")
    configs = rounds(64, 8, kinds={"vit_block": 32, "decoder": 32},
                     held=[[5, 5, 5, 7, 11, 11, 9, 11], [6, 10, 6, 9, 10, 5, 10, 8], [6, 9, 5, 10, 6, 9, 9, 10]],
                     recompute=[[2, 2, 5, 3, 11, 4, 4, 11], [3, 4, 4, 8, 4, 1, 3, 3], [3, 9, 1, 5, 4, 0, 2, 6]],
                     select_recompute=[[3, 2, 5, 4, 11, 10, 8, 11], [4, 5, 4, 8, 5, 4, 6, 7],
                                       [6, 9, 4, 9, 5, 2, 4, 9]])
    synthetic_dryruns(table, configs, noise_mb=NOISE_MB, seed=4, round_mb=True).to_csv(
        HERE / "vlm_dryruns.csv", index=False)


if __name__ == "__main__":
    llama()
    deepseek()
    vlm()
