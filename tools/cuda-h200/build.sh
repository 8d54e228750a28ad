#!/usr/bin/env bash
# Build cudac (the cuda-h200 toolchain) into PREFIX: PREFIX/bin/cudac, PREFIX/include/npuopt_cuda.h.
#
#   tools/cuda-h200/build.sh [PREFIX]     (default: build/cuda-h200)
#
# Needs nvcc (CUDA 12 or 13) and cuBLAS; $NVCC overrides the compiler. No GPU is needed to build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:-$here/../../build/cuda-h200}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "build.sh: nvcc not found (set NVCC or put it on PATH)" >&2; exit 1; }
nvcc=$(readlink -f "$nvcc")
cuda=$(dirname "$(dirname "$nvcc")")
mkdir -p "$prefix/bin" "$prefix/include"
cp "$here/include/npuopt_cuda.h" "$prefix/include/"
"$nvcc" -O2 -std=c++17 -gencode=arch=compute_90,code=sm_90 -I "$here/include" \
  -DCUDAC_NVCC_PATH="\"$nvcc\"" -Xlinker -rpath,"$cuda/lib64" \
  -o "$prefix/bin/cudac.tmp" "$here/cudac.cu" -lcublas -ldl
mv "$prefix/bin/cudac.tmp" "$prefix/bin/cudac"
echo "$prefix/bin/cudac"
