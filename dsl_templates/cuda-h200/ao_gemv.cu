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
        gemv_rows<UNROLL, LOADHINT, NB, ROWS, XSRC == 1, false>(rows, XSRC == 1 ? reinterpret_cast<const uint4*>(attn + kbeg) : xs,
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
        gemv_rows<UNROLL, LOADHINT, NB, ROWS, XSRC == 1, false>(rows, XSRC == 1 ? reinterpret_cast<const uint4*>(attn + kbeg) : xs,
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
