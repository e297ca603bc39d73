"""Close the loop on this machine: benchmark its device, calibrate, predict a small Llama's step, measure it.

    python docs/scripts/close_loop.py                      # this CPU, one core (a few minutes)
    python docs/scripts/close_loop.py --device cuda        # a GPU: the GPU version (two GPUs for dp 2)

On a CPU it runs sappkit.torch.close_loop on the configurations of docs/calibration.md's table (2 layers of
hidden 512). On a GPU it runs benchmark_device("cuda"), the collectives over NCCL (two GPUs) and the same loop on a
larger Llama (4 layers of hidden 2048, sequences of 1024 and 2048) in bf16 autocast; with one GPU the
data-parallel configurations are left out. It prints the device's fitted values and predicted against measured
per configuration, with the one-minute load average beside each; --out writes the calibrated cluster as a hardware
file.
"""

import argparse

from sappkit.torch.closing import CONFIGS, close_loop
from sappkit.torch.steps import LLAMA, StepConfig

#: The GPU's Llama: big enough that its kernels, not their launches, take most of the step.
GPU_LLAMA = {**LLAMA, "num_hidden_layers": 4, "hidden_size": 2048, "num_attention_heads": 16,
             "num_key_value_heads": 16, "intermediate_size": 5504, "vocab_size": 32000,
             "max_position_embeddings": 2048}
#: The CPU's configurations at the GPU's sequence lengths (1024 and 2048 for 128 and 256).
GPU_CONFIGS = tuple(StepConfig(config.seq_length * 8, config.micro_batch_size, config.recompute,
                               config.data_parallel) for config in CONFIGS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per configuration (median)")
    parser.add_argument("--out", default=None, help="write the calibrated cluster here (.toml)")
    args = parser.parse_args()
    keys, configs = LLAMA, CONFIGS
    if args.device == "cuda":
        import torch

        keys, configs = GPU_LLAMA, GPU_CONFIGS
        if torch.cuda.device_count() < 2:
            print("one GPU: the data-parallel configurations are left out")
            configs = tuple(config for config in configs if config.data_parallel == 1)
    closing = close_loop(configs, keys, device=args.device, repeats=args.repeats)
    print(closing.describe())
    print(closing.calibration.describe())
    if args.out:
        print(f"wrote {closing.write(args.out)}")


if __name__ == "__main__":
    main()
