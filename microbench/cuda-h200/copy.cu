// Probe: copy ${bytes} bytes device to device (16-byte loads and stores, 4 in flight per thread,
// 4 blocks of 256 threads per SM). Bandwidth counts bytes read plus bytes written.
#include "npuopt_cuda.h"

#define BYTES ${bytes}LL

__global__ void fill(uint4* p, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = make_uint4(unsigned(i), unsigned(i * 7), unsigned(i * 13), unsigned(i ^ 0x5a5a5a5a));
}

__global__ void copy_probe(const uint4* __restrict__ src, uint4* __restrict__ dst, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = __ldcs(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < 4; ++u) __stcs(dst + i + u * stride, v[u]);
    }
    for (; i < n; i += stride) __stcs(dst + i, __ldcs(src + i));
}

NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx*) { return 2 * BYTES; }

NPUOPT_EXPORT int npuopt_launch(const NpuoptCtx* c) {
    static bool filled = false;
    uint4* p = static_cast<uint4*>(c->workspace);
    const long long n = BYTES / 16;
    if (!filled) { fill<<<c->sm_count * 8, 256, 0, c->stream>>>(p, n); filled = true; }
    copy_probe<<<c->sm_count * 4, 256, 0, c->stream>>>(p, p + n, n);
    return 0;
}
