// project_qkv baseline: what an eager framework does, as separate launches on one stream:
// RMSNorm kernel → three cuBLAS GEMMs (q, k, v) → one per-head RMSNorm + RoPE kernel for q and k.
#include <cublas_v2.h>

#include "npuopt_cuda.h"

typedef __nv_bfloat16 bf16;

/// Y[b][n] = sum_k W[n][k] X[b][k] through cuBLAS (bf16 in and out, fp32 compute), as torch's F.linear does.
static int linear(const NpuoptCtx* c, const bf16* w, int n, int k, const bf16* x, int batch, bf16* y) {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasGemmEx(static_cast<cublasHandle_t>(c->cublas), CUBLAS_OP_T, CUBLAS_OP_N, n, batch, k, &alpha, w, CUDA_R_16BF, k,
                        x, CUDA_R_16BF, k, &beta, y, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
}

__device__ float block_sum(float v) {
    __shared__ float partial[32];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) s += partial[w];
    return s;
}

/// out[b] = (residual[b] +) RMSNorm(in[b]) * w; one block per batch row.
__global__ void rmsnorm_kernel(const bf16* in, const bf16* w, const bf16* residual, bf16* out, int n) {
    const bf16* row = in + size_t(blockIdx.x) * n;
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = __bfloat162float(row[i]);
        ss += v * v;
    }
    const float scale = rsqrtf(block_sum(ss) / n + 1e-6f);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = __bfloat162float(row[i]) * scale * __bfloat162float(w[i]);
        if (residual) v += __bfloat162float(residual[size_t(blockIdx.x) * n + i]);
        out[size_t(blockIdx.x) * n + i] = __float2bfloat16(v);
    }
}

/// In place: per head RMSNorm (w) + RoPE at pos[b]; one block of head_dim / 2 threads per (b, head).
__global__ void head_norm_rope_kernel(bf16* y, const bf16* w, const int* pos, int heads, int d) {
    __shared__ float row[512];
    const int b = blockIdx.x / heads;
    bf16* p = y + size_t(blockIdx.x) * d;
    float ss = 0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        row[i] = __bfloat162float(p[i]);
        ss += row[i] * row[i];
    }
    const float scale = rsqrtf(block_sum(ss) / d + 1e-6f);
    for (int i = threadIdx.x; i < d / 2; i += blockDim.x) {
        const float a = row[i] * scale * __bfloat162float(w[i]), c2 = row[i + d / 2] * scale * __bfloat162float(w[i + d / 2]);
        float s, co;
        sincosf(float(pos[b]) * powf(10000.0f, -2.0f * i / d), &s, &co);
        p[i] = __float2bfloat16(a * co - c2 * s);
        p[i + d / 2] = __float2bfloat16(a * s + c2 * co);
    }
}

NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx* c) { return size_t(npuopt_shape(c, "batch")) * npuopt_shape(c, "hidden") * 2; }

NPUOPT_EXPORT int npuopt_launch(const NpuoptCtx* c) {
    const int B = int(npuopt_shape(c, "batch")), H = int(npuopt_shape(c, "hidden")), QH = int(npuopt_shape(c, "q_heads")),
              KH = int(npuopt_shape(c, "kv_heads")), D = int(npuopt_shape(c, "head_dim"));
    if (D > 512) return 2;
    bf16* xn = static_cast<bf16*>(c->workspace);
    bf16 *q = npuopt_tensor<bf16>(c, "q"), *k = npuopt_tensor<bf16>(c, "k");
    rmsnorm_kernel<<<B, 1024, 0, c->stream>>>(npuopt_tensor<bf16>(c, "x"), npuopt_tensor<bf16>(c, "attn_norm"), nullptr, xn, H);
    if (linear(c, npuopt_tensor<bf16>(c, "wq"), QH * D, H, xn, B, q)) return 3;
    if (linear(c, npuopt_tensor<bf16>(c, "wk"), KH * D, H, xn, B, k)) return 3;
    if (linear(c, npuopt_tensor<bf16>(c, "wv"), KH * D, H, xn, B, npuopt_tensor<bf16>(c, "v"))) return 3;
    head_norm_rope_kernel<<<B * QH, D / 2, 0, c->stream>>>(q, npuopt_tensor<bf16>(c, "q_norm"), npuopt_tensor<int>(c, "pos"), QH, D);
    head_norm_rope_kernel<<<B * KH, D / 2, 0, c->stream>>>(k, npuopt_tensor<bf16>(c, "k_norm"), npuopt_tensor<int>(c, "pos"), KH, D);
    return 0;
}
