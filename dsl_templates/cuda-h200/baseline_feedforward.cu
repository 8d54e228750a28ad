// feedforward baseline: what an eager framework does, as separate launches on one stream:
// RMSNorm kernel → cuBLAS GEMM gate → cuBLAS GEMM up → GeGLU kernel → cuBLAS GEMM down →
// RMSNorm + post_norm + residual kernel.
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

__global__ void geglu_kernel(const bf16* g, const bf16* u, bf16* h, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float x = __bfloat162float(g[i]);
        const float gelu = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
        h[i] = __float2bfloat16(gelu * __bfloat162float(u[i]));
    }
}

NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx* c) {
    const size_t b = size_t(npuopt_shape(c, "batch"));
    return b * (2 * npuopt_shape(c, "hidden") + 3 * npuopt_shape(c, "ffn")) * 2;
}

NPUOPT_EXPORT int npuopt_launch(const NpuoptCtx* c) {
    const int B = int(npuopt_shape(c, "batch")), H = int(npuopt_shape(c, "hidden")), F = int(npuopt_shape(c, "ffn"));
    bf16* xn = static_cast<bf16*>(c->workspace);
    bf16* y = xn + size_t(B) * H;
    bf16* g = y + size_t(B) * H;
    bf16* u = g + size_t(B) * F;
    bf16* h = u + size_t(B) * F;
    const bf16* x = npuopt_tensor<bf16>(c, "x");
    rmsnorm_kernel<<<B, 1024, 0, c->stream>>>(x, npuopt_tensor<bf16>(c, "ffn_norm"), nullptr, xn, H);
    if (linear(c, npuopt_tensor<bf16>(c, "w_gate"), F, H, xn, B, g)) return 3;
    if (linear(c, npuopt_tensor<bf16>(c, "w_up"), F, H, xn, B, u)) return 3;
    geglu_kernel<<<(B * F + 255) / 256, 256, 0, c->stream>>>(g, u, h, int64_t(B) * F);
    if (linear(c, npuopt_tensor<bf16>(c, "w_down"), H, F, h, B, y)) return 3;
    rmsnorm_kernel<<<B, 1024, 0, c->stream>>>(y, npuopt_tensor<bf16>(c, "post_norm"), x, npuopt_tensor<bf16>(c, "out"), H);
    return 0;
}
