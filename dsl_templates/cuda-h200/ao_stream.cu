// attention_output, design family "gemv_stream": out = residual + RMSNorm(wo · attn) * post_norm in
// ONE launch, with a block-tile GEMV body. A persistent grid of BPS blocks per SM; block g owns the
// contiguous rows [g·N/G, (g+1)·N/G) of wo, i.e. ONE contiguous stretch of weight bytes, which it
// streams tile by tile (SROWS whole rows per tile). All WARPS consumer warps split every row's K
// range: thread t takes the 16-byte vectors t, t + T, ... (T = WARPS·32) of each row, so a warp
// reads 512 contiguous bytes per row per step and attn's matching vectors stay in the thread's
// registers for the whole kernel. Each tile's partial sums are reduced by warp shuffles, one value
// per (row, warp) into shared memory, and added across warps in a fixed order at the end.
//   LOADER 1: a producer warp (one lane) keeps STAGES tiles in flight with bulk asynchronous
//     copies (cp.async.bulk, the Hopper copy engine behind TMA) into a ring of shared-memory
//     buffers; an mbarrier per buffer counts the bytes that arrived (full) and another the
//     consumer warps that are done with it (empty), so the copy of tile i + STAGES starts as soon
//     as tile i is consumed.
//   LOADER 0: no producer; every thread loads its 16-byte vectors of the next tile into registers
//     (ld.global.nc.L1::no_allocate) before it computes the current one (two tiles in flight).
// The epilogue is the distributed one of ao_gemv's EPI 1: every block keeps its rows' sums in
// shared memory, writes its rows' sum of squares into a slot, one grid barrier (all blocks are
// co-resident: launch checks the occupancy), every block adds all slots in one fixed order (the
// same total, bitwise, in every block and every launch) and normalises + adds the residual for its
// own rows. No atomics on data; the barrier (a 64-bit arrival count that only grows, release /
// acquire) leaves the workspace ready for the next launch. Each thread loads the residual and
// post_norm value of the output it finishes at the start, so they arrive while the weights stream.
#include "npuopt_cuda.h"

#define WARPS ${WARPS}
#define SROWS ${SROWS}
#define STAGES ${STAGES}
#define BPS ${BPS}
#define LOADER ${LOADER}
#define THREADS ((WARPS + (LOADER == 1 ? 1 : 0)) * 32)

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
    asm volatile(
        "{\n .reg .pred p;\n"
        "WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT;\n}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}
/// bytes from global src to shared dst by the copy engine; completion is counted on bar
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}
__device__ __forceinline__ uint4 load_w(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

/// Grid-wide barrier for a co-resident grid, one round trip to L2 per block: thread 0 adds 1 to a
/// 64-bit arrival count with release semantics (its own slot store before it) and waits with
/// acquire loads until the count reaches the next multiple of the grid size. The count only
/// grows (2^64 arrivals never wrap), so nothing is reset between launches. Only the slot written
/// by the arriving thread itself is exchanged; __syncwarp orders its lanes' reads after the wait.
__device__ __forceinline__ void grid_arrive_wait(unsigned long long* count) {  // by one thread of each block
    unsigned long long old, now;
    asm volatile("atom.add.release.gpu.global.u64 %0, [%1], 1;" : "=l"(old) : "l"(count) : "memory");
    const unsigned long long target = (old / gridDim.x + 1) * gridDim.x;
    do {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(count) : "memory");
    } while (now < target);
}

/// acc[r][b] += the tile's rows · attn over this thread's vectors (XV of them, t + i·T).
/// Row r's vector i comes from src(r, i) (shared memory or registers).
template <int NB, int XV, class Src>
__device__ __forceinline__ void tile_dot(const uint4 (&xr)[NB][XV], int t, int kvec, Src src, float (&acc)[SROWS][NB]) {
#pragma unroll
    for (int i = 0; i < XV; ++i) {
        if (t + i * (WARPS * 32) < kvec) {
            float xf[NB][8];
#pragma unroll
            for (int b = 0; b < NB; ++b) unpack8(xr[b][i], xf[b]);
#pragma unroll
            for (int r = 0; r < SROWS; ++r) {
                float wf[8];
                unpack8(src(r, i), wf);
#pragma unroll
                for (int b = 0; b < NB; ++b)
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[r][b] = fmaf(wf[e], xf[b][e], acc[r][b]);
            }
        }
    }
}

/// smem: [ring: STAGES · SROWS · K bf16 (LOADER 1)] [red: rows_max · NB · WARPS fp32] [ys: rows_max · NB fp32]
template <int NB, int XV>
__global__ void __launch_bounds__(THREADS, BPS) ao_stream(const __nv_bfloat16* __restrict__ attn, const __nv_bfloat16* __restrict__ residual,
                                                          const __nv_bfloat16* __restrict__ wo, const __nv_bfloat16* __restrict__ post_norm,
                                                          __nv_bfloat16* __restrict__ out, float* slots, unsigned long long* bar, int N, int K,
                                                          int rows_max) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    __shared__ float s_scale[NB];
    const int kvec = K / 8;
    uint4* ring = reinterpret_cast<uint4*>(smem);
    float* red = reinterpret_cast<float*>(smem + (LOADER == 1 ? size_t(STAGES) * SROWS * K * 2 : 0));
    float* ys = red + size_t(rows_max) * NB * WARPS;
    const int rbeg = int(long(blockIdx.x) * N / gridDim.x), rend = int(long(blockIdx.x + 1) * N / gridDim.x);
    const int nrows = rend - rbeg, ntiles = (nrows + SROWS - 1) / SROWS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = threadIdx.x;
    // the epilogue's inputs for the (row, batch) item t (t < nrows * NB), loaded now: they arrive
    // while the weights stream instead of costing a memory round trip after the grid barrier
    float pre_res = 0, pre_w = 0;
    if (t < nrows * NB) {
        const int r = t / NB, b = t - r * NB;
        pre_res = __bfloat162float(residual[size_t(b) * N + rbeg + r]);
        pre_w = __bfloat162float(post_norm[rbeg + r]);
    }

#if LOADER == 1
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == WARPS) {  // the producer warp: one lane issues the copies, tile by tile
        if (lane == 0) {
            for (int i = 0; i < ntiles; ++i) {
                const int s = i % STAGES;
                if (i >= STAGES) mbar_wait(&empty[s], ((i / STAGES) - 1) & 1);
                const int r0 = rbeg + i * SROWS, nr = min(SROWS, rend - r0);
                mbar_expect_tx(&full[s], unsigned(nr) * K * 2);
                for (int r = 0; r < nr; ++r)
                    bulk_copy(ring + (size_t(s) * SROWS + r) * kvec, wo + size_t(r0 + r) * K, unsigned(K) * 2, &full[s]);
            }
        }
        __syncwarp();
    } else {
#else
    {
        const uint4* wv = reinterpret_cast<const uint4*>(wo);
        uint4 wn[SROWS][XV];  // the next tile, in flight while the current one is computed
        auto load_tile = [&](int i) {
#pragma unroll
            for (int r = 0; r < SROWS; ++r) {
                const int row = min(rbeg + i * SROWS + r, rend - 1);
#pragma unroll
                for (int x = 0; x < XV; ++x) {
                    const int j = t + x * (WARPS * 32);
                    wn[r][x] = j < kvec ? load_w(wv + size_t(row) * kvec + j) : make_uint4(0, 0, 0, 0);
                }
            }
        };
        if (ntiles > 0) load_tile(0);
#endif
        uint4 xr[NB][XV];
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int x = 0; x < XV; ++x) {
                const int j = t + x * (WARPS * 32);
                xr[b][x] = j < kvec ? __ldg(reinterpret_cast<const uint4*>(attn + size_t(b) * K) + j) : make_uint4(0, 0, 0, 0);
            }
        for (int i = 0; i < ntiles; ++i) {
            float acc[SROWS][NB] = {};
            const int nr = min(SROWS, nrows - i * SROWS);
#if LOADER == 1
            const int s = i % STAGES;
            mbar_wait(&full[s], (i / STAGES) & 1);
            const uint4* buf = ring + size_t(s) * SROWS * kvec;
            tile_dot<NB, XV>(xr, t, kvec, [&](int r, int x) { return buf[r * kvec + t + x * (WARPS * 32)]; }, acc);
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);
#else
            uint4 wc[SROWS][XV];
#pragma unroll
            for (int r = 0; r < SROWS; ++r)
#pragma unroll
                for (int x = 0; x < XV; ++x) wc[r][x] = wn[r][x];
            if (i + 1 < ntiles) load_tile(i + 1);
            tile_dot<NB, XV>(xr, t, kvec, [&](int r, int x) { return wc[r][x]; }, acc);
#endif
#pragma unroll
            for (int r = 0; r < SROWS; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b)
#pragma unroll
                    for (int offset = 16; offset > 0; offset >>= 1) acc[r][b] += __shfl_xor_sync(0xffffffffu, acc[r][b], offset);
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < SROWS; ++r)
                    if (r < nr)
#pragma unroll
                        for (int b = 0; b < NB; ++b) red[(size_t(i * SROWS + r) * NB + b) * WARPS + warp] = acc[r][b];
        }
    }
    __syncthreads();
    // warp 0 alone from here to the scale (no block-wide step in between): the block's rows, the
    // warps' sums added in a fixed order; their sum of squares into the block's slot; the barrier;
    // all slots added in one fixed order (lane l takes l, l + 32, ..., then a fixed shuffle tree)
    if (warp == 0) {
        float ss[NB] = {};
        for (int idx = lane; idx < nrows * NB; idx += 32) {
            float y = 0;
#pragma unroll 4
            for (int w = 0; w < WARPS; ++w) y += red[size_t(idx) * WARPS + w];
            ys[idx] = y;
            const int b = idx % NB;
#pragma unroll
            for (int bb = 0; bb < NB; ++bb)
                if (bb == b) ss[bb] = fmaf(y, y, ss[bb]);
        }
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) ss[b] += __shfl_xor_sync(0xffffffffu, ss[b], offset);
        if (lane == 0) {
#pragma unroll
            for (int b = 0; b < NB; ++b) slots[size_t(blockIdx.x) * NB + b] = ss[b];
            grid_arrive_wait(bar);
        }
        __syncwarp();
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            float tot = 0;
            for (int j = lane; j < int(gridDim.x); j += 32) tot += __ldcg(slots + size_t(j) * NB + b);
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, offset);
            if (lane == 0) s_scale[b] = rsqrtf(tot / N + 1e-6f);
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nrows * NB; idx += blockDim.x) {
        const int r = idx / NB, b = idx - r * NB, i = rbeg + r;
        const size_t at = size_t(b) * N + i;
        const float res = idx == t ? pre_res : __bfloat162float(residual[at]);
        const float w = idx == t ? pre_w : __bfloat162float(post_norm[i]);
        out[at] = __float2bfloat16(res + ys[idx] * s_scale[b] * w);
    }
}

static size_t round256(size_t bytes) { return (bytes + 255) / 256 * 256; }
static size_t slot_bytes(const NpuoptCtx* c) { return round256(size_t(c->sm_count) * BPS * npuopt_shape(c, "batch") * 4); }

NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx* c) { return slot_bytes(c) + 256; }

template <int NB, int XV>
static int launch_xv(const NpuoptCtx* c) {
    const int N = int(npuopt_shape(c, "hidden")), K = int(npuopt_shape(c, "q_heads") * npuopt_shape(c, "head_dim"));
    const int grid = c->sm_count * BPS;
    const int rows_max = (N + grid - 1) / grid;
    const size_t smem = (LOADER == 1 ? size_t(STAGES) * SROWS * K * 2 : 0) + size_t(rows_max) * NB * (WARPS + 1) * 4;
    if (smem > c->smem_per_block_optin) return 3;
    static bool configured = false;
    static int resident = 0;
    if (!configured) {
        cudaFuncSetAttribute(ao_stream<NB, XV>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, ao_stream<NB, XV>, THREADS, smem);
        configured = true;
    }
    if (resident < BPS) return 4;  // the grid barrier needs every block resident at once
    char* ws = static_cast<char*>(c->workspace);
    ao_stream<NB, XV><<<grid, THREADS, smem, c->stream>>>(
        npuopt_tensor<__nv_bfloat16>(c, "attn"), npuopt_tensor<__nv_bfloat16>(c, "residual"), npuopt_tensor<__nv_bfloat16>(c, "wo"),
        npuopt_tensor<__nv_bfloat16>(c, "post_norm"), npuopt_tensor<__nv_bfloat16>(c, "out"), reinterpret_cast<float*>(ws),
        reinterpret_cast<unsigned long long*>(ws + slot_bytes(c)), N, K, rows_max);
    return 0;
}

template <int NB>
static int launch_nb(const NpuoptCtx* c) {
    const int K = int(npuopt_shape(c, "q_heads") * npuopt_shape(c, "head_dim"));
    if (K % 8 != 0) return 2;
    const int xv = (K / 8 + WARPS * 32 - 1) / (WARPS * 32);  // 16-byte vectors per thread per row
    if (xv <= 1) return launch_xv<NB, 1>(c);
    if (xv <= 2) return launch_xv<NB, 2>(c);
    if (xv <= 4) return launch_xv<NB, 4>(c);
    return 2;
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
