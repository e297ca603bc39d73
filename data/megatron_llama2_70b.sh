#!/bin/bash
# Megatron-LM launch script for the bundled Llama-2-70B-class model (data/llama2_70b.json): 128 nodes of 8
# devices, tensor parallel 8, 16 pipeline stages, 256 sequences a step. `sappkit check-config` reads it.
GPUS_PER_NODE=8
NNODES=128
TP=8
PP=16

MODEL_ARGS=(
    --num-layers 80
    --hidden-size 8192
    --num-attention-heads 64
    --seq-length 4096
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP
    --pipeline-model-parallel-size $PP
    --sequence-parallel
    --use-distributed-optimizer
    --micro-batch-size 1
    --global-batch-size 256
    --bf16
)
RECOMPUTE_ARGS=(
    --recompute-granularity full
    --recompute-method block
    --recompute-num-layers 2
)

torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES pretrain_gpt.py \
    ${MODEL_ARGS[@]} ${PARALLEL_ARGS[@]} ${RECOMPUTE_ARGS[@]}
