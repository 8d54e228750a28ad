// attention_output, design family "gemv_lastblock": out = residual + RMSNorm(wo · attn) * post_norm
// in ONE launch. A persistent grid of BPS blocks per SM, WARPS warps each; the K dimension is cut
// into SPLITK chunks, every block owns one chunk and keeps attn's chunk in shared memory (bf16).
// Each warp streams ROWS rows of wo at a time with 16-byte loads, UNROLL loads per row in flight
// per lane (LOADHINT 0: __ldg, 1: L1::no_allocate, 2: + L2::256B prefetch); the warp's rows are a
// contiguous range, so every SM gets the same number of rows within ROWS. XSRC 1 reads attn
// through L1 instead of staging it in shared memory (no prologue barrier before the first loads). Partial sums go to an
// fp32 accumulator in the workspace (plain stores when SPLITK = 1, atomics otherwise); the last
// block to arrive (an atomic counter) applies RMSNorm + post_norm + residual, re-zeroes the
// accumulator and resets the counter, so the workspace is ready for the next launch.
// EPI 1 (the distributed epilogue) instead: partial sums are plain stores into one fp32 slice per
// K chunk (no atomics); when SPLITK > 1 a grid barrier lets every block add the SPLITK slices of
// its own rows in chunk order; every block writes its rows' sum of squares into a slot, a second
// grid barrier, then every block adds all slots in the same fixed order (bitwise the same total in
// every block and every launch) and normalises + adds the residual for its own rows. The grid is
// persistent and all blocks are co-resident (launch checks the occupancy), so the barrier (an
// arrival counter reset by its last arriver plus a generation word that only grows) cannot hang
// and leaves the workspace ready for the next launch.
#include "npuopt_cuda.h"

#define WARPS ${WARPS}
#define ROWS ${ROWS}
#define UNROLL ${UNROLL}
#define SPLITK ${SPLITK}
#define BPS ${BPS}
#define LOADHINT ${LOADHINT}
#define XSRC ${XSRC}
#define EPI ${EPI}

__device__ __forceinline__ uint4 load_w(const __nv_bfloat16* p) {
#if LOADHINT == 0
    return __ldg(reinterpret_cast<const uint4*>(p));
#elif LOADHINT == 1
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#else
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#endif
}

__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

/// acc[r][b] += rows[r][0..8*kvec) · xs[b][0..kvec) for one warp.
/// XS_GLOBAL: xs is device memory read through L1 (__ldg), else shared memory; row b of the
/// operand starts at xs + b * xstride. NORM_W: the operand is multiplied by nwv elementwise.
template <int NB, int NR, bool XS_GLOBAL, bool NORM_W>
__device__ __forceinline__ void gemv_rows(const __nv_bfloat16* const (&rows)[NR], const uint4* xs, int xstride,
                                          const uint4* nwv, int kvec, float (&acc)[NR][NB]) {
    const int lane = threadIdx.x & 31;
    for (int base = lane; base < kvec; base += 32 * UNROLL) {
        uint4 w[NR][UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int idx = base + u * 32;
#pragma unroll
            for (int r = 0; r < NR; ++r) w[r][u] = idx < kvec ? load_w(rows[r] + idx * 8) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int idx = base + u * 32;
            if (idx < kvec) {
                // the operand's 8 elements for every batch row, converted once for all NR rows
                float xf[NB][8];
                float nwf[8];
                if (NORM_W) unpack8(__ldg(nwv + idx), nwf);
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    unpack8(XS_GLOBAL ? __ldg(xs + b * xstride + idx) : xs[b * xstride + idx], xf[b]);
                    if (NORM_W)
#pragma unroll
                        for (int e = 0; e < 8; ++e) xf[b][e] *= nwf[e];
                }
                // each weight vector converted once for all NB batch rows
#pragma unroll
                for (int r = 0; r < NR; ++r) {
                    float wf[8];
                    unpack8(w[r][u], wf);
#pragma unroll
                    for (int b = 0; b < NB; ++b)
#pragma unroll
                        for (int e = 0; e < 8; ++e) acc[r][b] = fmaf(wf[e], xf[b][e], acc[r][b]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) acc[r][b] += __shfl_xor_sync(0xffffffffu, acc[r][b], offset);
}

/// rs[b] = 1 / sqrt(mean(x[b]^2) + eps) over K elements, by one warp (every lane gets it).
template <int NB>
__device__ __forceinline__ void warp_rms_scale(const __nv_bfloat16* x, int K, float (&rs)[NB]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        float s = 0;
#pragma unroll 8
        for (int i = lane; i < K / 8; i += 32) {
            float f[8];
            unpack8(__ldg(reinterpret_cast<const uint4*>(x + size_t(b) * K) + i), f);
#pragma unroll
            for (int e = 0; e < 8; ++e) s = fmaf(f[e], f[e], s);
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
        rs[b] = rsqrtf(s / K + 1e-6f);
    }
}

template <int NB>
__device__ void block_sums(float (&v)[NB]) {
    __shared__ float partial[32][NB];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) v[b] += __shfl_xor_sync(0xffffffffu, v[b], offset);
    __syncthreads();
    if (lane == 0)
#pragma unroll
        for (int b = 0; b < NB; ++b) partial[warp][b] = v[b];
    __syncthreads();
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        float s = 0;
        for (int w = 0; w < warps; ++w) s += partial[w][b];
        v[b] = s;
    }
}

/// Grid-wide barrier for a co-resident grid: bar[0] counts arrivals (reset by the last arriver),
/// bar[1] is a generation number that only grows, so no reset is needed between launches.
__device__ __forceinline__ void grid_barrier(unsigned* bar) {
    __threadfence();  // this thread's stores before the block's arrival
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* gen = bar + 1;
        const unsigned my_gen = *gen;
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            bar[0] = 0;
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (*gen == my_gen) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

/// EPI 1: the distributed epilogue (see the header). part: SPLITK slices of [NB][N] fp32; slots:
/// [gridDim.x][NB] fp32; bar: two words.
template <int NB>
__global__ void __launch_bounds__(WARPS * 32, BPS) ao_dist(const __nv_bfloat16* __restrict__ attn, const __nv_bfloat16* __restrict__ residual,
                                                         const __nv_bfloat16* __restrict__ wo, const __nv_bfloat16* __restrict__ post_norm,
                                                         __nv_bfloat16* __restrict__ out, float* part, float* slots, unsigned* bar, int N, int K) {
    extern __shared__ uint4 xs[];
    const int chunk = blockIdx.x % SPLITK, bi = blockIdx.x / SPLITK;
    const int bc = gridDim.x / SPLITK;
    const int kc = K / SPLITK, kbeg = chunk * kc, kvec = kc / 8;
    if (XSRC == 0) {
        for (int i = threadIdx.x; i < NB * kvec; i += blockDim.x) {
            const int b = i / kvec, j = i - b * kvec;
            xs[i] = __ldg(reinterpret_cast<const uint4*>(attn + size_t(b) * K + kbeg) + j);
        }
        __syncthreads();
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long wc = long(bc) * WARPS, gw = long(bi) * WARPS + warp, groups = N / ROWS;
    const long g0 = gw * groups / wc, g1 = (gw + 1) * groups / wc;
    float* my_part = part + size_t(chunk) * NB * N;
    for (long g = g0; g < g1; ++g) {
        const int r0 = int(g) * ROWS;
        const __nv_bfloat16* rows[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) rows[r] = wo + size_t(r0 + r) * K + kbeg;
        float acc[ROWS][NB] = {};
        gemv_rows<NB, ROWS, XSRC == 1, false>(rows, XSRC == 1 ? reinterpret_cast<const uint4*>(attn + kbeg) : xs,
                                              XSRC == 1 ? K / 8 : kvec, nullptr, kvec, acc);
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b) my_part[size_t(b) * N + r0 + r] = acc[r][b];
        }
    }
    // the rows this block normalises: with SPLITK 1 the ones its own warps computed (no barrier
    // needed to read them), otherwise an even share of all rows after the first barrier
    int rbeg, rend;
    if (SPLITK == 1) {
        rbeg = int(long(bi) * WARPS * groups / wc) * ROWS;
        rend = int(long(bi + 1) * WARPS * groups / wc) * ROWS;
        __syncthreads();
    } else {
        grid_barrier(bar);
        rbeg = int(long(blockIdx.x) * N / gridDim.x);
        rend = int(long(blockIdx.x + 1) * N / gridDim.x);
    }
    float ss[NB] = {};
    for (int i = rbeg + int(threadIdx.x); i < rend; i += blockDim.x)
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            float y = 0;
#pragma unroll
            for (int c = 0; c < SPLITK; ++c) y += __ldcg(part + (size_t(c) * NB + b) * N + i);
            ss[b] = fmaf(y, y, ss[b]);
        }
    block_sums<NB>(ss);
    if (threadIdx.x == 0)
#pragma unroll
        for (int b = 0; b < NB; ++b) slots[size_t(blockIdx.x) * NB + b] = ss[b];
    grid_barrier(bar + 2);
    __shared__ float s_scale[NB];
    if (warp == 0) {  // every block adds the slots in the same order: lane l takes l, l + 32, ...
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            float t = 0;
            for (int j = lane; j < int(gridDim.x); j += 32) t += __ldcg(slots + size_t(j) * NB + b);
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) t += __shfl_xor_sync(0xffffffffu, t, offset);
            if (lane == 0) s_scale[b] = rsqrtf(t / N + 1e-6f);
        }
    }
    __syncthreads();
    for (int i = rbeg + int(threadIdx.x); i < rend; i += blockDim.x) {
        const float w = __bfloat162float(post_norm[i]);
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const size_t at = size_t(b) * N + i;
            float y = 0;
#pragma unroll
            for (int c = 0; c < SPLITK; ++c) y += __ldcg(part + size_t(c) * NB * N + at);
            out[at] = __float2bfloat16(__bfloat162float(residual[at]) + y * s_scale[b] * w);
        }
    }
}

template <int NB>
__global__ void __launch_bounds__(WARPS * 32, BPS) ao_kernel(const __nv_bfloat16* __restrict__ attn, const __nv_bfloat16* __restrict__ residual,
                                                       const __nv_bfloat16* __restrict__ wo, const __nv_bfloat16* __restrict__ post_norm,
                                                       __nv_bfloat16* __restrict__ out, float* acc_buf, unsigned* counter, int N, int K) {
    extern __shared__ uint4 xs[];
    __shared__ int s_last;
    const int chunk = blockIdx.x % SPLITK, bi = blockIdx.x / SPLITK;
    const int bc = (gridDim.x - chunk + SPLITK - 1) / SPLITK;
    const int kc = K / SPLITK, kbeg = chunk * kc, kvec = kc / 8;
    if (XSRC == 0) {  // attn's chunk into shared memory; XSRC 1 reads it through L1 in the loop
        for (int i = threadIdx.x; i < NB * kvec; i += blockDim.x) {
            const int b = i / kvec, j = i - b * kvec;
            xs[i] = __ldg(reinterpret_cast<const uint4*>(attn + size_t(b) * K + kbeg) + j);
        }
        __syncthreads();
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long wc = long(bc) * WARPS, gw = long(bi) * WARPS + warp, groups = N / ROWS;
    const long g0 = gw * groups / wc, g1 = (gw + 1) * groups / wc;
    for (long g = g0; g < g1; ++g) {
        const int r0 = int(g) * ROWS;
        const __nv_bfloat16* rows[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) rows[r] = wo + size_t(r0 + r) * K + kbeg;
        float acc[ROWS][NB] = {};
        gemv_rows<NB, ROWS, XSRC == 1, false>(rows, XSRC == 1 ? reinterpret_cast<const uint4*>(attn + kbeg) : xs,
                                              XSRC == 1 ? K / 8 : kvec, nullptr, kvec, acc);
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    if (SPLITK == 1) acc_buf[size_t(b) * N + r0 + r] = acc[r][b];
                    else atomicAdd(acc_buf + size_t(b) * N + r0 + r, acc[r][b]);
                }
        }
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    float ss[NB] = {};
#pragma unroll 8
    for (int i = threadIdx.x; i < N; i += blockDim.x)
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const float y = __ldcg(acc_buf + size_t(b) * N + i);
            ss[b] = fmaf(y, y, ss[b]);
        }
    block_sums<NB>(ss);
#pragma unroll 4
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        const float w = __bfloat162float(post_norm[i]);
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const size_t at = size_t(b) * N + i;
            const float y = __ldcg(acc_buf + at);
            out[at] = __float2bfloat16(__bfloat162float(residual[at]) + y * rsqrtf(ss[b] / N + 1e-6f) * w);
            if (SPLITK > 1) acc_buf[at] = 0.0f;
        }
    }
    if (threadIdx.x == 0) *counter = 0;
}

static size_t round256(size_t bytes) { return (bytes + 255) / 256 * 256; }
// EPI 0: one [batch][hidden] fp32 accumulator; EPI 1: SPLITK slices of it, then the slots
static size_t acc_bytes(const NpuoptCtx* c) {
    return round256(size_t(EPI == 1 ? SPLITK : 1) * npuopt_shape(c, "batch") * npuopt_shape(c, "hidden") * 4);
}
static size_t slot_bytes(const NpuoptCtx* c) { return round256(size_t(c->sm_count) * BPS * npuopt_shape(c, "batch") * 4); }

NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx* c) { return acc_bytes(c) + slot_bytes(c) + 256; }

template <int NB>
static int launch_nb(const NpuoptCtx* c) {
    const int N = int(npuopt_shape(c, "hidden")), K = int(npuopt_shape(c, "q_heads") * npuopt_shape(c, "head_dim"));
    if (N % ROWS != 0 || K % (8 * SPLITK) != 0) return 2;
    const size_t smem = XSRC == 1 ? 0 : size_t(NB) * (K / SPLITK) * 2;
#if XSRC == 0
    if (smem > c->smem_per_block_optin) return 3;
#endif
    const void* kernel = EPI == 1 ? reinterpret_cast<const void*>(ao_dist<NB>) : reinterpret_cast<const void*>(ao_kernel<NB>);
    static bool configured = false;
    static int resident = 0;
    if (!configured) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, WARPS * 32, smem);
        configured = true;
    }
    // the distributed epilogue's grid barrier needs every block resident at once
    if (EPI == 1 && resident < BPS) return 4;
    int grid = c->sm_count * BPS;
    grid = grid < SPLITK ? SPLITK : grid / SPLITK * SPLITK;
    char* ws = static_cast<char*>(c->workspace);
    const auto* attn = npuopt_tensor<__nv_bfloat16>(c, "attn");
    const auto* residual = npuopt_tensor<__nv_bfloat16>(c, "residual");
    const auto* wo = npuopt_tensor<__nv_bfloat16>(c, "wo");
    const auto* post_norm = npuopt_tensor<__nv_bfloat16>(c, "post_norm");
    auto* out = npuopt_tensor<__nv_bfloat16>(c, "out");
    auto* acc = reinterpret_cast<float*>(ws);
    auto* tail = reinterpret_cast<unsigned*>(ws + acc_bytes(c) + slot_bytes(c));
    if (EPI == 1)
        ao_dist<NB><<<grid, WARPS * 32, smem, c->stream>>>(attn, residual, wo, post_norm, out, acc,
                                                          reinterpret_cast<float*>(ws + acc_bytes(c)), tail, N, K);
    else
        ao_kernel<NB><<<grid, WARPS * 32, smem, c->stream>>>(attn, residual, wo, post_norm, out, acc, tail, N, K);
    return 0;
}

NPUOPT_EXPORT int npuopt_launch(const NpuoptCtx* c) {
    switch (npuopt_shape(c, "batch")) {
        case 1: return launch_nb<1>(c);
        case 2: return launch_nb<2>(c);
        case 4: return launch_nb<4>(c);
        case 8: return launch_nb<8>(c);
        default: return 1;
    }
}
