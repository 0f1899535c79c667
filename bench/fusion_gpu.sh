#!/usr/bin/env bash
# Issue 30, part 3 on one GPU: the residual after the MLP's output projection in that GEMM's
# epilogue (gpt_matmul_forward_residual), A/B in one call (bench/env_ab_gpu.sh): test_cuda,
# then megatron-lm l32 in bf16 and TF32 with AEBENCH_RESIDUAL_EPILOGUE on and off.
#   bash bench/fusion_gpu.sh "$OUT"
AB_VAR=AEBENCH_RESIDUAL_EPILOGUE AB_VALUES="on off" AB_NAME=fusion \
    AB_OPS="matmul_residual_forward+residual_forward,matmul_forward" exec bash bench/env_ab_gpu.sh "$@"
