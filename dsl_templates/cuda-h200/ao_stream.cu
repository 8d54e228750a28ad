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
// Run-17 parameters (defaults: the designs measured before):
//   ORD 1: rows interleaved over the grid (block g owns rows g, g + G, g + 2G, ...), so at every
//     tile step the whole grid reads one contiguous window of wo (the access order of a plain
//     grid-stride read) instead of G separate stretches.
//   FIN 1: no grid barrier: every block writes its rows' sums (fp32) and their sum of squares, one
//     atomic on a single counter; the last block to arrive adds the slots in block order and
//     normalises every row (its loads issued together, one round trip); it resets the counter.
//   EARLY 1 (LOADER 0): the first tile's loads are the first thing a thread issues (the epilogue's
//     residual / post_norm loads after them), the block's row range in 32-bit arithmetic.
//   MMA 1 (LOADER 0, SROWS 8): the tile's dot products on the tensor cores instead of CUDA-core
//     FMAs, so a batch of up to 8 costs what batch 1 does per weight byte (no bf16 -> fp32 unpack,
//     no FMA per batch row). One mma.sync m16n8k16 (bf16 in, fp32 accumulate) takes attn as A
//     (M = batch, rows NB..15 zero) and 16 k of the tile's 8 rows as B (N = rows): lane
//     (g = lane / 4, q = lane % 4) loads the 16-byte vectors 4 c + q of the tile's row g for its
//     warp's chunks c = warp, warp + WARPS, ... (four lanes read 64 contiguous bytes of a row) and
//     the same vectors of attn's batch row g, and feeds each vector to two mma steps. The k order
//     inside a 32-wide chunk is permuted the same way in A and B, so the dot product is unchanged.
//     The accumulator leaves lane (g, q) the sums of batch row g for tile rows 2q and 2q + 1.
//   MMA 2: MMA 1 with a thread's attn staging loads issued 8 at a time (one L2 round trip for
//     them, not one per 16-byte vector: at batch 8 a thread stages 8) and two accumulator chains
//     (the two mma steps of a vector independent).
#include "npuopt_cuda.h"

#define WARPS ${WARPS}
#define SROWS ${SROWS}
#define STAGES ${STAGES}
#define BPS ${BPS}
#define LOADER ${LOADER}
#define PF ${PF}
#define SYNC ${SYNC}
#define ORD ${ORD}
#define FIN ${FIN}
#define EARLY ${EARLY}
#define MMA ${MMA}
#define THREADS ((WARPS + (LOADER == 1 ? 1 : 0)) * 32)

/// d += A B on the tensor cores: m16n8k16, bf16 inputs, fp32 accumulators. A's rows 8..15 are
/// zero (a1 = a3 = 0): a0 holds A[g][2q, 2q + 1], a2 A[g][2q + 8, 2q + 9]; b0 holds B[2q, 2q + 1][g],
/// b1 B[2q + 8, 2q + 9][g]; d[0], d[1] come back as D[g][2q], D[g][2q + 1] (d[2], d[3]: rows 8..15).
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

/// One warp: every block's published sum of squares (fslots[block · NB + b]) added up per batch
/// row b, and the norm's scale 1 / rms into s_scale[b] (lane 0 writes).
template <int NB>
__device__ __forceinline__ void slot_scales(const float* fslots, int n, int lane, float* s_scale) {
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        float tot = 0;
        for (int j = lane; j < int(gridDim.x); j += 32) tot += __ldcg(fslots + size_t(j) * NB + b);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, offset);
        if (lane == 0) s_scale[b] = rsqrtf(tot / n + 1e-6f);
    }
}

/// smem: [ring: STAGES · SROWS · K bf16 (LOADER 1)] [red: rows_max · NB · WARPS fp32] [ys: rows_max · NB fp32]
template <int NB, int XV>
__global__ void __launch_bounds__(THREADS, BPS) ao_stream(const __nv_bfloat16* __restrict__ attn, const __nv_bfloat16* __restrict__ residual,
                                                          const __nv_bfloat16* __restrict__ wo, const __nv_bfloat16* __restrict__ post_norm,
                                                          __nv_bfloat16* __restrict__ out, unsigned long long* slots, unsigned long long* bar, int N, int K,
                                                          int rows_max, float* ybuf) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    __shared__ float s_scale[NB];
    __shared__ unsigned s_last;
    const int kvec = K / 8;
    uint4* ring = reinterpret_cast<uint4*>(smem);
#if MMA >= 1 && LOADER == 0
    // attn staged in shared memory, one row of kvec + 4 vectors per batch row (the four extra
    // vectors put the two batch rows a quarter-warp reads on different banks)
    uint4* xsv = reinterpret_cast<uint4*>(smem);
#endif
    float* red = reinterpret_cast<float*>(smem + (LOADER == 1 ? size_t(STAGES) * SROWS * K * 2 : 0) +
                                          (MMA >= 1 && LOADER == 0 ? size_t(NB) * (kvec + 4) * 16 : 0));
    float* ys = red + size_t(rows_max) * NB * WARPS;
#if ORD == 1
    const int nrows = int(blockIdx.x) < N ? (N - 1 - int(blockIdx.x)) / int(gridDim.x) + 1 : 0;
    auto row_of = [&](int r) { return int(blockIdx.x) + r * int(gridDim.x); };  // the block's r-th row
#else
#if EARLY == 1
    const int rbeg = int(blockIdx.x * unsigned(N) / gridDim.x), rend = int((blockIdx.x + 1) * unsigned(N) / gridDim.x);
#else
    const int rbeg = int(long(blockIdx.x) * N / gridDim.x), rend = int(long(blockIdx.x + 1) * N / gridDim.x);
#endif
    const int nrows = rend - rbeg;
    auto row_of = [&](int r) { return rbeg + r; };
#endif
    const int ntiles = (nrows + SROWS - 1) / SROWS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = threadIdx.x;
    // the epilogue's inputs for the (row, batch) item t (t < nrows * NB), loaded now: they arrive
    // while the weights stream instead of costing a memory round trip after the grid barrier
    float pre_res = 0, pre_w = 0;
    unsigned epoch = 0;
    auto load_pre = [&] {
        if (t < nrows * NB) {
            const int r = t / NB, b = t - r * NB;
            pre_res = __bfloat162float(residual[size_t(b) * N + row_of(r)]);
            pre_w = __bfloat162float(post_norm[row_of(r)]);
        }
        if (SYNC == 1 && warp == 0) epoch = slot_next_epoch(slots + size_t(blockIdx.x) * NB);
    };
#if EARLY == 0
    load_pre();
#endif
    // PF > 0: the copy engine brings the block's rows from SROWS on, PF rows ahead of the tile being
    // loaded, into L2 (a block's rows are one contiguous stretch of wo), so the memory system holds
    // the block's requests from the start instead of one tile's at a time
    auto prefetch_rows = [&](int r0, int r1) {  // rows rbeg + [r0, r1), by warp 0, one row per lane
        if (PF > 0 && warp == 0)
            for (int r = r0 + lane; r < min(r1, nrows); r += 32) prefetch_l2(wo + size_t(row_of(r)) * K, unsigned(K) * 2);
    };

#if LOADER == 1
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
#if EARLY == 1
    load_pre();
#endif
    prefetch_rows(STAGES * SROWS, STAGES * SROWS + PF);
    if (warp == WARPS) {  // the producer warp: one lane issues the copies, tile by tile
        if (lane == 0) {
            for (int i = 0; i < ntiles; ++i) {
                const int s = i % STAGES;
                if (i >= STAGES) mbar_wait(&empty[s], ((i / STAGES) - 1) & 1);
                const int nr = min(SROWS, nrows - i * SROWS);
                mbar_expect_tx(&full[s], unsigned(nr) * K * 2);
                for (int r = 0; r < nr; ++r)
                    bulk_copy(ring + (size_t(s) * SROWS + r) * kvec, wo + size_t(row_of(i * SROWS + r)) * K, unsigned(K) * 2, &full[s]);
            }
        }
        __syncwarp();
    } else {
#elif MMA >= 1
    {
        const uint4* wv = reinterpret_cast<const uint4*>(wo);
        const int g = lane >> 2, q = lane & 3;
        auto vec_of = [&](int u) { return 4 * (warp + WARPS * u) + q; };  // this lane's u-th vector of a row
        uint4 wn[XV];  // row g of the next tile, in flight while the current one is computed
        auto load_tile = [&](int i) {
            const int row = row_of(min(i * SROWS + g, nrows - 1));
#pragma unroll
            for (int u = 0; u < XV; ++u) {
                const int j = vec_of(u);
                wn[u] = j < kvec ? ld_stream(wv + size_t(row) * kvec + j) : make_uint4(0, 0, 0, 0);
            }
        };
        if (ntiles > 0) load_tile(0);
#if EARLY == 1
        load_pre();
#endif
        prefetch_rows(SROWS, 2 * SROWS + PF);
        // attn into shared memory; MMA 2: XS loads of a thread issued together (one L2 round trip per
        // XS vectors instead of one per vector: at batch 8 a thread stages 8 of them)
        constexpr int XS = MMA == 2 ? 8 : 1;
        for (int base = t; base < NB * kvec; base += XS * WARPS * 32) {
            uint4 v[XS];
#pragma unroll
            for (int e = 0; e < XS; ++e) {
                const int idx = base + e * WARPS * 32;
                v[e] = idx < NB * kvec ? __ldg(reinterpret_cast<const uint4*>(attn) + idx) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int e = 0; e < XS; ++e) {
                const int idx = base + e * WARPS * 32;
                if (idx < NB * kvec) xsv[size_t(idx / kvec) * (kvec + 4) + idx % kvec] = v[e];
            }
        }
        __syncthreads();
        for (int i = 0; i < ntiles; ++i) {
            const int nr = min(SROWS, nrows - i * SROWS);
            uint4 wc[XV];
#pragma unroll
            for (int u = 0; u < XV; ++u) wc[u] = wn[u];
            if (i + 1 < ntiles) load_tile(i + 1);
            prefetch_rows((i + 2) * SROWS + PF, (i + 3) * SROWS + PF);
            // MMA 2: two accumulator chains, so that consecutive mma steps do not wait for each other
            float d[4] = {}, d2[4] = {};
#pragma unroll
            for (int u = 0; u < XV; ++u) {
                const int j = vec_of(u);  // attn's batch row g at the lane's vector (zero for g >= NB)
                const uint4 x = g < NB && j < kvec ? xsv[size_t(g) * (kvec + 4) + j] : make_uint4(0, 0, 0, 0);
                mma_bf16_m16n8k16(d, x.x, x.y, wc[u].x, wc[u].y);
                mma_bf16_m16n8k16(MMA == 2 ? d2 : d, x.z, x.w, wc[u].z, wc[u].w);
            }
            d[0] += d2[0];
            d[1] += d2[1];
            if (g < NB)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    if (2 * q + e < nr) red[(size_t(i * SROWS + 2 * q + e) * NB + g) * WARPS + warp] = d[e];
        }
#else
    {
        const uint4* wv = reinterpret_cast<const uint4*>(wo);
        uint4 wn[SROWS][XV];  // the next tile, in flight while the current one is computed
        auto load_tile = [&](int i) {
#pragma unroll
            for (int r = 0; r < SROWS; ++r) {
                const int row = row_of(min(i * SROWS + r, nrows - 1));
#pragma unroll
                for (int x = 0; x < XV; ++x) {
                    const int j = t + x * (WARPS * 32);
                    wn[r][x] = j < kvec ? ld_stream(wv + size_t(row) * kvec + j) : make_uint4(0, 0, 0, 0);
                }
            }
        };
        if (ntiles > 0) load_tile(0);
#if EARLY == 1
        load_pre();
#endif
        prefetch_rows(SROWS, 2 * SROWS + PF);
#endif
#if LOADER == 1 || MMA == 0
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
            tile_dot<NB, XV, SROWS, WARPS * 32>(xr, t, kvec, [&](int r, int x) { return buf[r * kvec + t + x * (WARPS * 32)]; }, acc);
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);
#else
            uint4 wc[SROWS][XV];
#pragma unroll
            for (int r = 0; r < SROWS; ++r)
#pragma unroll
                for (int x = 0; x < XV; ++x) wc[r][x] = wn[r][x];
            if (i + 1 < ntiles) load_tile(i + 1);
            prefetch_rows((i + 2) * SROWS + PF, (i + 3) * SROWS + PF);
            tile_dot<NB, XV, SROWS, WARPS * 32>(xr, t, kvec, [&](int r, int x) { return wc[r][x]; }, acc);
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
#endif
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
#if FIN == 1
            ybuf[size_t(b) * N + row_of(idx / NB)] = y;
#endif
#pragma unroll
            for (int bb = 0; bb < NB; ++bb)
                if (bb == b) ss[bb] = fmaf(y, y, ss[bb]);
        }
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) ss[b] += __shfl_xor_sync(0xffffffffu, ss[b], offset);
#if SYNC == 1
        // epoch-tagged slots: the value is its own "ready" flag; one store, then every block's
        // warp 0 reads all slots (waiting on the ones not yet written): one round trip to L2
        if (lane == 0)
#pragma unroll
            for (int b = 0; b < NB; ++b) slot_put(slots + size_t(blockIdx.x) * NB + b, epoch, ss[b]);
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const float tot = slots_sum<16>(slots + b, int(gridDim.x), NB, epoch);
            if (lane == 0) s_scale[b] = rsqrtf(tot / N + 1e-6f);
        }
#elif FIN == 1
        // the rows' sums (above) and their sum of squares published, one arrival on the counter:
        // the block that arrives last finishes every row below, the others are done
        float* fslots = reinterpret_cast<float*>(slots);
        if (lane == 0)
#pragma unroll
            for (int b = 0; b < NB; ++b) fslots[size_t(blockIdx.x) * NB + b] = ss[b];
        __threadfence();
        __syncwarp();
        unsigned last = 0;
        if (lane == 0) last = atomicAdd(reinterpret_cast<unsigned*>(bar), 1u) == gridDim.x - 1;
        if (lane == 0) s_last = last;
#else
        float* fslots = reinterpret_cast<float*>(slots);
        if (lane == 0) {
#pragma unroll
            for (int b = 0; b < NB; ++b) fslots[size_t(blockIdx.x) * NB + b] = ss[b];
            grid_arrive_wait(bar);
        }
        __syncwarp();
        slot_scales<NB>(fslots, N, lane, s_scale);
#endif
    }
    __syncthreads();
#if FIN == 1
    if (!s_last) return;
    // the last block: every row. Each thread's loads of a chunk of FCH items are issued together
    // (one round trip to L2; the residual and post_norm were read by their blocks at the start),
    // warp 0 adds the slots in block order meanwhile
    __threadfence();
    constexpr int FCH = 16;
    const int total = N * NB;
    float* fslots = reinterpret_cast<float*>(slots);
    for (int base = 0; base < total; base += FCH * int(blockDim.x)) {
        float yv[FCH], rv[FCH], wv[FCH];
#pragma unroll
        for (int c = 0; c < FCH; ++c) {
            const int idx = base + c * int(blockDim.x) + t;
            if (idx < total) {
                const int b = idx / N, i = idx - b * N;
                yv[c] = __ldcg(ybuf + idx);
                rv[c] = __bfloat162float(residual[idx]);
                wv[c] = __bfloat162float(post_norm[i]);
            }
        }
        if (base == 0) {
            if (warp == 0) {
                slot_scales<NB>(fslots, N, lane, s_scale);
                if (lane == 0) *reinterpret_cast<unsigned*>(bar) = 0;  // ready for the next launch
            }
            __syncthreads();
        }
#pragma unroll
        for (int c = 0; c < FCH; ++c) {
            const int idx = base + c * int(blockDim.x) + t;
            if (idx < total) out[idx] = __float2bfloat16(rv[c] + yv[c] * s_scale[idx / N] * wv[c]);
        }
    }
    (void)pre_res;
    (void)pre_w;
#else
    for (int idx = threadIdx.x; idx < nrows * NB; idx += blockDim.x) {
        const int r = idx / NB, b = idx - r * NB, i = row_of(r);
        const size_t at = size_t(b) * N + i;
        const float res = idx == t ? pre_res : __bfloat162float(residual[at]);
        const float w = idx == t ? pre_w : __bfloat162float(post_norm[i]);
        out[at] = __float2bfloat16(res + ys[idx] * s_scale[b] * w);
    }
#endif
}

static size_t round256(size_t bytes) { return (bytes + 255) / 256 * 256; }
static size_t slot_bytes(const NpuoptCtx* c) { return round256(size_t(c->sm_count) * BPS * npuopt_shape(c, "batch") * 8); }

static size_t ybuf_bytes(const NpuoptCtx* c) {  // FIN 1: every row's sum, fp32
    return FIN == 1 ? round256(size_t(npuopt_shape(c, "hidden")) * npuopt_shape(c, "batch") * 4) : 0;
}

// [slots] [barrier count (FIN 1: the arrival counter)] [ybuf (FIN 1)]
NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx* c) { return slot_bytes(c) + 256 + ybuf_bytes(c); }

template <int NB, int XV>
static int launch_xv(const NpuoptCtx* c) {
    const int N = int(npuopt_shape(c, "hidden")), K = int(npuopt_shape(c, "q_heads") * npuopt_shape(c, "head_dim"));
    const int grid = c->sm_count * BPS;
    const int rows_max = (N + grid - 1) / grid;
    const size_t smem = (LOADER == 1 ? size_t(STAGES) * SROWS * K * 2 : 0) + (MMA >= 1 && LOADER == 0 ? size_t(NB) * (K / 8 + 4) * 16 : 0) +
                        size_t(rows_max) * NB * (WARPS + 1) * 4;
    if (smem > c->smem_per_block_optin) return 3;
    static bool configured = false;
    static int resident = 0;
    if (!configured) {
        cudaFuncSetAttribute(ao_stream<NB, XV>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, ao_stream<NB, XV>, THREADS, smem);
        configured = true;
    }
    if (resident < BPS) return 4;  // the grid barrier needs every block resident at once
    if (SYNC == 1 && grid > 32 * 16) return 2;  // slots_sum<16>: at most 512 blocks
    char* ws = static_cast<char*>(c->workspace);
    ao_stream<NB, XV><<<grid, THREADS, smem, c->stream>>>(
        npuopt_tensor<__nv_bfloat16>(c, "attn"), npuopt_tensor<__nv_bfloat16>(c, "residual"), npuopt_tensor<__nv_bfloat16>(c, "wo"),
        npuopt_tensor<__nv_bfloat16>(c, "post_norm"), npuopt_tensor<__nv_bfloat16>(c, "out"), reinterpret_cast<unsigned long long*>(ws),
        reinterpret_cast<unsigned long long*>(ws + slot_bytes(c)), N, K, rows_max,
        FIN == 1 ? reinterpret_cast<float*>(ws + slot_bytes(c) + 256) : nullptr);
    return 0;
}

template <int NB>
static int launch_nb(const NpuoptCtx* c) {
    const int K = int(npuopt_shape(c, "q_heads") * npuopt_shape(c, "head_dim"));
    if (K % 8 != 0) return 2;
#if MMA >= 1 && LOADER == 0
    const int xv = (K / 8 + WARPS * 4 - 1) / (WARPS * 4);  // 16-byte vectors per lane per tile (one row)
    if (xv <= 4) return launch_xv<NB, 4>(c);
    if (xv <= 8) return launch_xv<NB, 8>(c);
    if (xv <= 16) return launch_xv<NB, 16>(c);
    return 2;
#else
    const int xv = (K / 8 + WARPS * 32 - 1) / (WARPS * 32);  // 16-byte vectors per thread per row
    if (xv <= 1) return launch_xv<NB, 1>(c);
    if (xv <= 2) return launch_xv<NB, 2>(c);
    if (xv <= 4) return launch_xv<NB, 4>(c);
    return 2;
#endif
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
