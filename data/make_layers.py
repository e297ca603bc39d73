"""Write the bundled layer tables (data/README.md says what each is).

Run from the repository root: ``python data/make_layers.py``. Uses only
sappkit's public API; the numbers come from the analytic model of
``sappkit.estimate_layers`` (Korthikanti et al. 2022 activations, ZeRO
parameter memory, 6·P·tokens time: ``time_model="flops"``, the paper's count
the bundled tables were made with) at 300 TFLOP/s and 40% MFU.
"""

from pathlib import Path

import sappkit
from sappkit import DeviceConfig, ParallelConfig, TransformerConfig

HERE = Path(__file__).resolve().parent
DEVICE = DeviceConfig(tflops=300.0, mfu=0.4, link_gbs=50.0, hbm_gbs=1600.0)

LLAMA2_70B = TransformerConfig(
    layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, ffn_size=28672, vocab_size=32000,
    seq_length=4096, gated_mlp=True, name="decoder")
LLAMA2_70B_PARALLEL = ParallelConfig(
    micro_batch_size=1, tensor_parallel=8, sequence_parallel=True, data_parallel=8, zero=1, dtype="bf16")

DEEPSEEK_V3 = TransformerConfig(
    layers=61, dense_layers=3, hidden_size=7168, num_heads=128, head_dim=192, v_head_dim=128,
    q_lora_rank=1536, kv_lora_rank=512, rope_head_dim=64, ffn_size=18432, experts=256, top_k=8,
    shared_experts=1, expert_ffn_size=2048, vocab_size=129280, seq_length=4096, gated_mlp=True,
    name="dense_decoder", moe_name="moe_decoder")
DEEPSEEK_V3_PARALLEL = ParallelConfig(
    micro_batch_size=1, tensor_parallel=4, sequence_parallel=True, data_parallel=16, expert_parallel=64,
    zero=1, dtype="bf16")

VISION = TransformerConfig(
    layers=32, hidden_size=1280, num_heads=16, ffn_size=5120, seq_length=4096, patch_size=14,
    name="vit_block", module="vision")
LANGUAGE = TransformerConfig(
    layers=32, hidden_size=4096, num_heads=32, ffn_size=11008, vocab_size=32000, seq_length=4096,
    gated_mlp=True, name="decoder", module="language")
VLM_PARALLEL = ParallelConfig(micro_batch_size=1, tensor_parallel=1, data_parallel=16, zero=1, dtype="bf16")


def main() -> None:
    sappkit.write_layers_json(
        sappkit.estimate_layers(LLAMA2_70B, parallel=LLAMA2_70B_PARALLEL, device=DEVICE, time_model="flops", const_mb=3000),
        HERE / "llama2_70b.json")
    sappkit.write_layers_json(
        sappkit.estimate_layers(DEEPSEEK_V3, parallel=DEEPSEEK_V3_PARALLEL, device=DEVICE, time_model="flops", const_mb=4000),
        HERE / "deepseek_v3.json")
    sappkit.write_layers_json(
        sappkit.estimate_layers(VISION, LANGUAGE, parallel=VLM_PARALLEL, device=DEVICE, time_model="flops", const_mb=3000),
        HERE / "vlm.json")


if __name__ == "__main__":
    main()
