// project_qkv, design family "gemv_stream": q, k, v = the three projections of
// xn = RMSNorm(x) * attn_norm; q and k then get a per-head RMSNorm (q_norm, k_norm) and RoPE
// (theta 10000, rotate-half pairs (i, i + head_dim/2), at position pos[b]); all in ONE launch, with
// the block-tile GEMV body of ao_stream. The rows of wq | wk | wv are one range of
// (q_heads + 2 kv_heads) * head_dim rows; a persistent grid of BPS blocks per SM, block g owns the
// contiguous rows [g·N/G, (g+1)·N/G) and streams them SROWS rows per tile; its WARPS consumer warps
// split every row's K range (16-byte vectors; x * attn_norm for the thread's vectors stays in its
// registers as bf16, the 1/rms(x) of the fused norm is applied to each row's sum at the end; every
// block gets the sum of squares of x from the vectors its threads hold, reduced after the main
// loop). Warp sums are reduced in shared memory in a fixed order.
//   LOADER 1: a producer warp keeps STAGES tiles in flight with bulk asynchronous copies
//     (cp.async.bulk) into a shared-memory ring with full/empty mbarriers per buffer.
//   LOADER 0: 16-byte register loads, the next tile in flight while the current one is computed.
// Epilogue: v rows are written at once (bf16); q and k rows go to an fp32 buffer and a per-head
// counter (one atomic per head the block touches) names the block that completed a head: that
// block applies the head's RMSNorm + RoPE, writes bf16 and resets the counter, so the workspace is
// ready for the next launch. The norm weights and positions the epilogue needs are loaded at the
// start, so they arrive while the weights stream.
// QKF 1 (run 17; EPI 0, LOADER 0): every block streams its share of the q/k rows first and its
// share of the v rows last (two contiguous stretches: q/k rows [g·QK/G, (g+1)·QK/G), v rows likewise),
// so heads complete while the v rows still stream: after the tile with the block's last q/k row,
// warp 0 alone publishes those rows (fp32), counts them on their heads' counters and, where it
// completed a head, applies the head's RMSNorm + RoPE by itself (warp shuffles, no block-wide
// step) while the other warps go on streaming; 1/rms(x) is reduced before the loop.
// QKF 2: the same order, but the publishing and the head epilogue are an extra warp's (it loads no
// weights): the consumer warps arrive on a named barrier after the tile with the block's last q/k
// row and stream on, never stopping; the extra warp waits there, publishes, counts and finishes
// the heads it completed. (QKF 1's warp 0 fenced with its next tile's loads in flight: run 17.)
#include "npuopt_cuda.h"

#include <cooperative_groups.h>
#include <cstdio>

#define WARPS ${WARPS}
#define SROWS ${SROWS}
#define STAGES ${STAGES}
#define BPS ${BPS}
#define LOADER ${LOADER}
#define EPI ${EPI}
#define CL ${CL}
#define PF ${PF}
#define QKF ${QKF}
#if QKF != 0 && (EPI != 0 || LOADER != 0)
#error "QKF 1 and 2 need EPI 0 and LOADER 0"
#endif
// named barrier 1 (QKF 2): the consumer warps arrive, the epilogue warp waits (shared memory
// written before the arrival is visible to the waiting warp)
__device__ __forceinline__ void named_arrive(int n) { asm volatile("bar.arrive 1, %0;" ::"r"(n) : "memory"); }
__device__ __forceinline__ void named_sync(int n) { asm volatile("bar.sync 1, %0;" ::"r"(n) : "memory"); }
#define THREADS ((WARPS + (LOADER == 1 || QKF == 2 ? 1 : 0)) * 32)

/// ss[b] += ys[idx]^2 over this thread's share of idx in [lo, hi) (ys: rows x NB, b = idx % NB)
template <int NB>
__device__ __forceinline__ void add_squares(const float* ys, int lo, int hi, float (&ss)[NB]) {
    for (int idx = lo + int(threadIdx.x); idx < hi; idx += blockDim.x) {
        const float y = ys[idx];
        const int b = idx % NB;
#pragma unroll
        for (int bb = 0; bb < NB; ++bb)
            if (bb == b) ss[bb] = fmaf(y, y, ss[bb]);
    }
}

/// smem: [ring: STAGES · SROWS · H bf16 (LOADER 1)] [red: rows_max · NB · WARPS fp32] [ys: max(rows_max, D) · NB fp32]
template <int NB, int XV>
__global__ void __launch_bounds__(THREADS, BPS) qkv_stream(const __nv_bfloat16* __restrict__ x, const int* __restrict__ pos,
                                                           const __nv_bfloat16* __restrict__ attn_norm, const __nv_bfloat16* __restrict__ wq,
                                                           const __nv_bfloat16* __restrict__ wk, const __nv_bfloat16* __restrict__ wv,
                                                           const __nv_bfloat16* __restrict__ q_norm, const __nv_bfloat16* __restrict__ k_norm,
                                                           __nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k,
                                                           __nv_bfloat16* __restrict__ v, float* acc_buf, unsigned* head_count, float* slots,
                                                           unsigned long long* hcount, int H, int QH, int KH, int D, int rows_max) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    __shared__ int s_done[8];
    const int N = (QH + 2 * KH) * D, q_rows = QH * D, k_rows = KH * D;
    const int kvec = H / 8;
    uint4* ring = reinterpret_cast<uint4*>(smem);
    float* red = reinterpret_cast<float*>(smem + (LOADER == 1 ? size_t(STAGES) * SROWS * H * 2 : 0));
    float* ys = red + size_t(rows_max) * NB * WARPS;
#if EPI == 1
    // rows in pair order: logical row 2m (2m + 1) of a head is its row m (m + D/2), so every block
    // holds whole RoPE pairs; blocks start on even logical rows
    const int P = N / 2;
    auto blk_beg = [&](int g) { return 2 * int(long(g) * P / gridDim.x); };
    auto phys = [&](int lrow) { const int h = lrow / D, qq = lrow - h * D; return h * D + (qq >> 1) + (qq & 1) * (D / 2); };
#elif EPI == 2
    // a cluster of CL blocks per head, D / CL rows per block: block c of a head holds the pairs
    // m in [c·RB/2, (c+1)·RB/2), its logical row lr < RB/2 being row m = c·RB/2 + lr of the head and
    // lr >= RB/2 row m + D/2 (two contiguous stretches of weights per block)
    const int RB = D / CL;
    auto blk_beg = [&](int g) { return g * RB; };
    auto phys = [&](int lrow) {
        const int h = lrow / D, qq = lrow - h * D, c = qq / RB, lr = qq - c * RB;
        return h * D + c * (RB / 2) + (lr < RB / 2 ? lr : D / 2 + lr - RB / 2);
    };
#else
    auto blk_beg = [&](int g) { return int(long(g) * N / gridDim.x); };
    auto phys = [&](int lrow) { return lrow; };
#endif
#if QKF >= 1
    // the block's q/k rows [qb, qe), then its v rows [vb, ve); its r-th row is lrow_of(r)
    const int qk_all = q_rows + k_rows;
    const int qb = int(blockIdx.x * unsigned(qk_all) / gridDim.x), qe = int((blockIdx.x + 1) * unsigned(qk_all) / gridDim.x);
    const int vb = qk_all + int(blockIdx.x * unsigned(k_rows) / gridDim.x), ve = qk_all + int((blockIdx.x + 1) * unsigned(k_rows) / gridDim.x);
    const int nqk = qe - qb, nrows = nqk + (ve - vb), ntiles = (nrows + SROWS - 1) / SROWS;
    const int ipub = nqk > 0 ? (nqk - 1) / SROWS : -1;  // the tile with the block's last q/k row
    auto lrow_of = [&](int r) { return r < nqk ? qb + r : vb + (r - nqk); };
#else
    const int rbeg = blk_beg(blockIdx.x), rend = blk_beg(blockIdx.x + 1);
    const int nrows = rend - rbeg, ntiles = (nrows + SROWS - 1) / SROWS;
    auto lrow_of = [&](int r) { return rbeg + r; };
#endif
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = threadIdx.x;
    auto row_ptr = [&](int lrow) {
        const int row = phys(lrow);
        return row < q_rows ? wq + size_t(row) * H : row < q_rows + k_rows ? wk + size_t(row - q_rows) * H : wv + size_t(row - q_rows - k_rows) * H;
    };
    (void)ring;
    // PF > 0: the copy engine brings the block's rows into L2 PF rows ahead of the tile being loaded
    // (warp 0, one row per lane), so the memory system holds more of the block's requests early
    auto prefetch_rows = [&](int r0, int r1) {
        if (PF > 0 && warp == 0)
            for (int r = r0 + lane; r < min(r1, nrows); r += 32) prefetch_l2(row_ptr(lrow_of(r)), unsigned(H) * 2);
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
    auto issue = [&](int i) {  // tile i into buffer i % STAGES (one copy per row: wq, wk, wv are separate tensors)
        const int s = i % STAGES;
        const int nr = min(SROWS, nrows - i * SROWS);
        mbar_expect_tx(&full[s], unsigned(nr) * H * 2);
        for (int r = 0; r < nr; ++r) bulk_copy(ring + (size_t(s) * SROWS + r) * kvec, row_ptr(lrow_of(i * SROWS + r)), unsigned(H) * 2, &full[s]);
    };
    if (warp == WARPS && lane == 0)
        for (int i = 0; i < min(STAGES, ntiles); ++i) issue(i);
    prefetch_rows(STAGES * SROWS, STAGES * SROWS + PF);
#else
    uint4 wn[SROWS][XV];  // the next tile, in flight while the current one is computed
    auto load_tile = [&](int i) {
#pragma unroll
        for (int r = 0; r < SROWS; ++r) {
            const uint4* p = reinterpret_cast<const uint4*>(row_ptr(lrow_of(min(i * SROWS + r, nrows - 1))));
#pragma unroll
            for (int xi = 0; xi < XV; ++xi) {
                const int j = t + xi * (WARPS * 32);
                wn[r][xi] = j < kvec ? ld_stream(p + j) : make_uint4(0, 0, 0, 0);
            }
        }
    };
    if (ntiles > 0 && (QKF != 2 || warp < WARPS)) load_tile(0);  // QKF 2: the epilogue warp loads no weights
    prefetch_rows(SROWS, 2 * SROWS + PF);
#endif
    // the fused norm: each consumer thread adds the squares of its own vectors of x (together they
    // cover x once), reduced over the block after the main loop: no pass over x of its own
    float rs[NB] = {};
    // the head epilogue's inputs for pair i = t, loaded now: they arrive while the weights stream
    float pre_qa = 0, pre_qb = 0, pre_ka = 0, pre_kb = 0;
#if EPI == 1
    if (2 * t < nrows) {  // pair t of this block: its head's norm weights at m and m + D/2
        const int lrow = rbeg + 2 * t, h = lrow / D, m = (lrow - h * D) / 2;
        if (h < QH + KH) {
            const __nv_bfloat16* nw = h < QH ? q_norm : k_norm;
            pre_qa = __bfloat162float(nw[m]);
            pre_qb = __bfloat162float(nw[m + D / 2]);
        }
    }
#elif EPI == 2
    if (t < RB / 2 && rbeg / D < QH + KH) {  // pair t of this block
        const int h = rbeg / D, m = (rbeg - h * D) / 2 + t;
        const __nv_bfloat16* nw = h < QH ? q_norm : k_norm;
        pre_qa = __bfloat162float(nw[m]);
        pre_qb = __bfloat162float(nw[m + D / 2]);
    }
#else
    if (t < D / 2) {
        pre_qa = __bfloat162float(q_norm[t]);
        pre_qb = __bfloat162float(q_norm[t + D / 2]);
        pre_ka = __bfloat162float(k_norm[t]);
        pre_kb = __bfloat162float(k_norm[t + D / 2]);
    }
#endif
    int pre_pos[NB];
#pragma unroll
    for (int b = 0; b < NB; ++b) pre_pos[b] = pos[b];
#if QKF >= 1
    // warp 0's head epilogue reads q_norm / k_norm: their lines into L2 now (128 bytes a thread)
    if (t < (D + 63) / 64) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(q_norm + t * 64));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(k_norm + t * 64));
    }
    // warp 0 publishes the block's q/k rows and finishes the heads it completes (see the top)
    auto head_epilogue = [&](int h) {  // warp 0 alone; the head's D sums of every batch row staged in ys
        const bool isq = h < QH;
        const __nv_bfloat16* nw = isq ? q_norm : k_norm;
        __nv_bfloat16* dst_base = isq ? q + size_t(h) * D : k + size_t(h - QH) * D;
        const int dst_stride = isq ? QH * D : KH * D;
        float ss[NB] = {};
#pragma unroll 8
        for (int idx = lane; idx < NB * D; idx += 32) {
            const int b = idx / D, i = idx - b * D;
            const float y = __ldcg(acc_buf + size_t(b) * N + size_t(h) * D + i);
            ys[idx] = y;
#pragma unroll
            for (int bb = 0; bb < NB; ++bb)
                if (bb == b) ss[bb] = fmaf(y, y, ss[bb]);
        }
#pragma unroll
        for (int b = 0; b < NB; ++b) {
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) ss[b] += __shfl_xor_sync(0xffffffffu, ss[b], offset);
            ss[b] = rsqrtf(ss[b] / D + 1e-6f);
        }
        __syncwarp();
        for (int i = lane; i < D / 2; i += 32) {
            const float wa = __bfloat162float(nw[i]), wb = __bfloat162float(nw[i + D / 2]);
            const float freq = exp2f(-(2.0f * i / D) * 13.287712379549449f);  // log2(10000)
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const float a = ys[b * D + i] * ss[b] * wa;
                const float c2 = ys[b * D + i + D / 2] * ss[b] * wb;
                float sn, co;
                sincosf(float(pre_pos[b]) * freq, &sn, &co);
                __nv_bfloat16* dst = dst_base + size_t(b) * dst_stride;
                dst[i] = __float2bfloat16(a * co - c2 * sn);
                dst[i + D / 2] = __float2bfloat16(a * sn + c2 * co);
            }
        }
        if (lane == 0) head_count[h] = 0;  // ready for the next launch
        __syncwarp();                      // ys is reused by the next head
    };
    auto publish = [&]() {  // warp 0, once every warp's sums of the block's q/k rows are in red
        for (int idx = lane; idx < nqk * NB; idx += 32) {
            float y = 0;
#pragma unroll 4
            for (int w = 0; w < WARPS; ++w) y += red[size_t(idx) * WARPS + w];
            const int r = idx / NB, b = idx - r * NB;
            float scale = 0;
#pragma unroll
            for (int bb = 0; bb < NB; ++bb)
                if (bb == b) scale = rs[bb];
            acc_buf[size_t(b) * N + qb + r] = y * scale;
        }
        __threadfence();
        __syncwarp();
        // lane j counts the block's rows of head h0 + j; a lane that completes its head says so
        const int h0 = qb / D, h = h0 + lane;
        bool completed = false;
        if (h <= (qe - 1) / D) {
            const int lo = max(qb, h * D), hi = min(qe, (h + 1) * D);
            completed = atomicAdd(head_count + h, unsigned(hi - lo)) + unsigned(hi - lo) == unsigned(D);
        }
        unsigned done = __ballot_sync(0xffffffffu, completed);
        if (done) __threadfence();
        for (; done; done &= done - 1) head_epilogue(h0 + __ffs(done) - 1);
    };
#endif
#if LOADER == 1
    if (warp == WARPS) {  // the producer warp: one lane issues the remaining copies as buffers free up
        if (lane == 0)
            for (int i = STAGES; i < ntiles; ++i) {
                mbar_wait(&empty[i % STAGES], ((i / STAGES) - 1) & 1);
                issue(i);
            }
        __syncwarp();
    } else
#endif
    {
        uint4 xr[NB][XV];  // x * attn_norm (bf16) for this thread's vectors
#pragma unroll
        for (int xi = 0; xi < XV; ++xi) {
            const int j = QKF == 2 && warp >= WARPS ? kvec : t + xi * (WARPS * 32);  // QKF 2: not the epilogue warp
            float nw[8];
            unpack8(j < kvec ? __ldg(reinterpret_cast<const uint4*>(attn_norm) + j) : make_uint4(0, 0, 0, 0), nw);
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                float f[8];
                unpack8(j < kvec ? __ldg(reinterpret_cast<const uint4*>(x + size_t(b) * H) + j) : make_uint4(0, 0, 0, 0), f);
#pragma unroll
                for (int e = 0; e < 8; ++e) rs[b] = fmaf(f[e], f[e], rs[b]);
                __nv_bfloat162 o[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) o[e] = __floats2bfloat162_rn(f[2 * e] * nw[2 * e], f[2 * e + 1] * nw[2 * e + 1]);
                xr[b][xi] = *reinterpret_cast<uint4*>(o);
            }
        }
#if QKF >= 1
        block_sums<NB>(rs);
#pragma unroll
        for (int b = 0; b < NB; ++b) rs[b] = rsqrtf(rs[b] / H + 1e-6f);
#endif
#if QKF == 2
        if (warp == WARPS) {  // the epilogue warp
            if (ipub >= 0 && ipub < ntiles) {  // (ntiles: the consumers arrive only in the tile loop)
                named_sync(THREADS);
                publish();
            }
        } else
#endif
        for (int i = 0; i < ntiles; ++i) {
            float acc[SROWS][NB] = {};
            const int nr = min(SROWS, nrows - i * SROWS);
#if LOADER == 1
            const int s = i % STAGES;
            mbar_wait(&full[s], (i / STAGES) & 1);
            const uint4* buf = ring + size_t(s) * SROWS * kvec;
            tile_dot<NB, XV, SROWS, WARPS * 32>(xr, t, kvec, [&](int r, int xi) { return buf[r * kvec + t + xi * (WARPS * 32)]; }, acc);
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);
#else
            uint4 wc[SROWS][XV];
#pragma unroll
            for (int r = 0; r < SROWS; ++r)
#pragma unroll
                for (int xi = 0; xi < XV; ++xi) wc[r][xi] = wn[r][xi];
            if (i + 1 < ntiles) load_tile(i + 1);
            prefetch_rows((i + 2) * SROWS + PF, (i + 3) * SROWS + PF);
            tile_dot<NB, XV, SROWS, WARPS * 32>(xr, t, kvec, [&](int r, int xi) { return wc[r][xi]; }, acc);
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
#if QKF >= 1
#if QKF == 1
            if (i == ipub) {
                __syncthreads();  // every warp's sums of the q/k rows are in red
                if (warp == 0) publish();
            }
#elif QKF == 2
            if (i == ipub) named_arrive(THREADS);  // the q/k rows' sums are in red: on to the next tile
#endif
#endif
        }
    }
#if QKF >= 1
    __syncthreads();  // publish red (rs was reduced before the loop)
    // the block's v rows (its q/k rows were published mid-stream)
    for (int idx = nqk * NB + int(threadIdx.x); idx < nrows * NB; idx += blockDim.x) {
#else
    block_sums<NB>(rs);  // its __syncthreads also publish red
#pragma unroll
    for (int b = 0; b < NB; ++b) rs[b] = rsqrtf(rs[b] / H + 1e-6f);
    // the block's rows: warps' sums added in a fixed order, scaled by 1/rms(x); v rows are final
    for (int idx = threadIdx.x; idx < nrows * NB; idx += blockDim.x) {
#endif
        float y = 0;
#pragma unroll 4
        for (int w = 0; w < WARPS; ++w) y += red[size_t(idx) * WARPS + w];
        const int r = idx / NB, b = idx - r * NB, row = lrow_of(r);
        float scale = 0;
#pragma unroll
        for (int bb = 0; bb < NB; ++bb)
            if (bb == b) scale = rs[bb];
        y *= scale;
        if (row >= q_rows + k_rows) v[size_t(b) * k_rows + (phys(row) - q_rows - k_rows)] = __float2bfloat16(y);
        else if (EPI != 0) ys[idx] = y;
        else acc_buf[size_t(b) * N + row] = y;
    }
#if EPI == 1
    // per q/k head this block touches (at most two): its rows' sum of squares into the block's slot,
    // one arrival on the head's 64-bit count (release; it only grows), a wait for the head's other
    // blocks (all co-resident: launch checks), the head's slots added in block order (the same total
    // in every block and launch), then every block normalises and rotates its own pairs
    __shared__ float s_hscale[2][NB];
    const int hq = QH + KH, h0 = rbeg / D, h1 = min((rend - 1) / D, hq - 1);
    auto block_of = [&](int lrow) {  // the block whose range holds logical row lrow
        int g = int(long(lrow / 2) * gridDim.x / P);
        while (g + 1 < int(gridDim.x) && blk_beg(g + 1) <= lrow) ++g;
        while (g > 0 && blk_beg(g) > lrow) --g;
        return g;
    };
    __syncthreads();
#pragma unroll
    for (int which = 0; which < 2; ++which) {
        const int h = h0 + which;
        float ss[NB] = {};
        if (h <= h1) {
            const int lo = max(rbeg, h * D) - rbeg, hi = min(rend, (h + 1) * D) - rbeg;
            add_squares<NB>(ys, lo * NB, hi * NB, ss);
        }
        block_sums<NB>(ss);
        if (threadIdx.x == 0)
#pragma unroll
            for (int b = 0; b < NB; ++b) slots[(size_t(blockIdx.x) * 2 + which) * NB + b] = ss[b];
    }
    if (threadIdx.x == 0) {
        unsigned long long old[2] = {0, 0};
        for (int h = h0; h <= h1; ++h)
            asm volatile("atom.add.release.gpu.global.u64 %0, [%1], 1;" : "=l"(old[h - h0]) : "l"(hcount + h) : "memory");
        for (int h = h0; h <= h1; ++h) {
            const unsigned long long nc = unsigned(block_of(h * D + D - 1) - block_of(h * D) + 1);
            const unsigned long long target = (old[h - h0] / nc + 1) * nc;
            unsigned long long now;
            do {
                asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(hcount + h) : "memory");
            } while (now < target);
        }
    }
    __syncthreads();
    if (threadIdx.x < 2 * NB) {
        const int which = threadIdx.x / NB, b = threadIdx.x - which * NB, h = h0 + which;
        if (h <= h1) {
            float tot = 0;
            for (int g = block_of(h * D), gl = block_of(h * D + D - 1); g <= gl; ++g)
                tot += __ldcg(slots + (size_t(g) * 2 + (blk_beg(g) / D == h ? 0 : 1)) * NB + b);
            s_hscale[which][b] = rsqrtf(tot / D + 1e-6f);
        }
    }
    __syncthreads();
    for (int lp = threadIdx.x; lp < nrows / 2; lp += blockDim.x) {
        const int lrow = rbeg + 2 * lp, h = lrow / D;
        if (h >= hq) continue;  // v: written above
        const int m = (lrow - h * D) / 2;
        const __nv_bfloat16* nw = h < QH ? q_norm : k_norm;
        const float wa = lp == t ? pre_qa : __bfloat162float(nw[m]);
        const float wb = lp == t ? pre_qb : __bfloat162float(nw[m + D / 2]);
        const float freq = exp2f(-(2.0f * m / D) * 13.287712379549449f);  // log2(10000)
        __nv_bfloat16* dst_base = h < QH ? q + size_t(h) * D : k + size_t(h - QH) * D;
        const int dst_stride = h < QH ? QH * D : KH * D;
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const float scale = s_hscale[h - h0][b];
            const float a = ys[size_t(2 * lp) * NB + b] * scale * wa;
            const float c2 = ys[size_t(2 * lp + 1) * NB + b] * scale * wb;
            float sn, co;
            sincosf(float(pre_pos[b]) * freq, &sn, &co);
            __nv_bfloat16* dst = dst_base + size_t(b) * dst_stride;
            dst[m] = __float2bfloat16(a * co - c2 * sn);
            dst[m + D / 2] = __float2bfloat16(a * sn + c2 * co);
        }
    }
#elif EPI == 2
    // the head's sum of squares over its cluster: each block's own in its shared memory, one
    // cluster barrier, every block adds the CL values in rank order through distributed shared
    // memory (the same total in every block), then normalises and rotates its own pairs. A second
    // barrier (arrive now, wait at the end) keeps every block's shared memory alive while read.
    __shared__ float s_ss[NB], s_hs[NB];
    const int h = rbeg / D;
    if (h < QH + KH) {  // the same for the whole cluster (one head)
        float ss[NB] = {};
        add_squares<NB>(ys, 0, nrows * NB, ss);
        block_sums<NB>(ss);
        if (threadIdx.x < NB) s_ss[threadIdx.x] = ss[threadIdx.x];
        cluster_arrive();
        cluster_wait();
        if (threadIdx.x < NB) {
            cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
            float tot = 0;
#pragma unroll
            for (int r = 0; r < CL; ++r) tot += *cluster.map_shared_rank(s_ss + threadIdx.x, r);
            s_hs[threadIdx.x] = rsqrtf(tot / D + 1e-6f);
        }
        cluster_arrive();
        __syncthreads();
        const __nv_bfloat16* nw = h < QH ? q_norm : k_norm;
        __nv_bfloat16* dst_base = h < QH ? q + size_t(h) * D : k + size_t(h - QH) * D;
        const int dst_stride = h < QH ? QH * D : KH * D;
        for (int lp = threadIdx.x; lp < RB / 2; lp += blockDim.x) {
            const int m = (rbeg - h * D) / 2 + lp;
            const float wa = lp == t ? pre_qa : __bfloat162float(nw[m]);
            const float wb = lp == t ? pre_qb : __bfloat162float(nw[m + D / 2]);
            const float freq = exp2f(-(2.0f * m / D) * 13.287712379549449f);  // log2(10000)
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const float a = ys[size_t(lp) * NB + b] * s_hs[b] * wa;
                const float c2 = ys[size_t(lp + RB / 2) * NB + b] * s_hs[b] * wb;
                float sn, co;
                sincosf(float(pre_pos[b]) * freq, &sn, &co);
                __nv_bfloat16* dst = dst_base + size_t(b) * dst_stride;
                dst[m] = __float2bfloat16(a * co - c2 * sn);
                dst[m + D / 2] = __float2bfloat16(a * sn + c2 * co);
            }
        }
        cluster_wait();
    }
#elif QKF == 0
    __threadfence();
    __syncthreads();
    // per-head counters of the q and k heads this block touched: who completes a head finishes it
    const int h0 = rbeg / D, h1 = min((rend - 1) / D, QH + KH - 1);
    if (threadIdx.x == 0)
        for (int h = h0; h <= h1 && h - h0 < 8; ++h) {
            const int lo = max(rbeg, h * D), hi = min(rend, (h + 1) * D);
            s_done[h - h0] = atomicAdd(head_count + h, unsigned(hi - lo)) + unsigned(hi - lo) == unsigned(D);
        }
    __syncthreads();
    for (int h = h0; h <= h1 && h - h0 < 8; ++h) {
        if (!s_done[h - h0]) continue;
        __threadfence();
        const __nv_bfloat16* nw = h < QH ? q_norm : k_norm;
        __nv_bfloat16* dst_base = h < QH ? q + size_t(h) * D : k + size_t(h - QH) * D;
        const int dst_stride = h < QH ? QH * D : KH * D;
        float ss[NB] = {};
        for (int idx = threadIdx.x; idx < NB * D; idx += blockDim.x) {
            const int b = idx / D, i = idx - b * D;
            const float y = __ldcg(acc_buf + size_t(b) * N + size_t(h) * D + i);
            ys[idx] = y;
#pragma unroll
            for (int bb = 0; bb < NB; ++bb)
                if (bb == b) ss[bb] = fmaf(y, y, ss[bb]);
        }
        block_sums<NB>(ss);  // its __syncthreads also publishes ys
        for (int i = threadIdx.x; i < D / 2; i += blockDim.x) {
            const float wa = i == t ? (h < QH ? pre_qa : pre_ka) : __bfloat162float(nw[i]);
            const float wb = i == t ? (h < QH ? pre_qb : pre_kb) : __bfloat162float(nw[i + D / 2]);
            const float freq = exp2f(-(2.0f * i / D) * 13.287712379549449f);  // log2(10000)
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const float scale = rsqrtf(ss[b] / D + 1e-6f);
                const float a = ys[b * D + i] * scale * wa;
                const float c2 = ys[b * D + i + D / 2] * scale * wb;
                float sn, co;
                sincosf(float(pre_pos[b]) * freq, &sn, &co);
                __nv_bfloat16* dst = dst_base + size_t(b) * dst_stride;
                dst[i] = __float2bfloat16(a * co - c2 * sn);
                dst[i + D / 2] = __float2bfloat16(a * sn + c2 * co);
            }
        }
        if (threadIdx.x == 0) head_count[h] = 0;
        __syncthreads();  // ys is reused by the next head
    }
#endif
}

static size_t acc_bytes(const NpuoptCtx* c) {
    const size_t n = size_t(npuopt_shape(c, "q_heads") + 2 * npuopt_shape(c, "kv_heads")) * npuopt_shape(c, "head_dim");
    return (size_t(npuopt_shape(c, "batch")) * n * 4 + 255) / 256 * 256;
}

static size_t count_bytes(const NpuoptCtx* c) {  // EPI 0: one 32-bit counter per head
    return (size_t(npuopt_shape(c, "q_heads") + 2 * npuopt_shape(c, "kv_heads")) * 4 + 255) / 256 * 256;
}
static size_t slot_bytes(const NpuoptCtx* c) {  // EPI 1: two slots of [batch] fp32 per block
    return (size_t(c->sm_count) * BPS * 2 * npuopt_shape(c, "batch") * 4 + 255) / 256 * 256;
}

// [acc (EPI 0)] [counters (EPI 0)] [slots (EPI 1)] [64-bit arrival counts per head (EPI 1)]
NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx* c) {
    return acc_bytes(c) + count_bytes(c) + slot_bytes(c) + (size_t(npuopt_shape(c, "q_heads") + 2 * npuopt_shape(c, "kv_heads")) * 8 + 255) / 256 * 256;
}

template <int NB, int XV>
static int launch_xv(const NpuoptCtx* c) {
    const int H = int(npuopt_shape(c, "hidden")), QH = int(npuopt_shape(c, "q_heads")), KH = int(npuopt_shape(c, "kv_heads")),
              D = int(npuopt_shape(c, "head_dim"));
    const int N = (QH + 2 * KH) * D, grid = EPI == 2 ? N / (D / CL) : c->sm_count * BPS;
    // EPI 1: blocks start on even rows (whole pairs), every block holds a pair, a block spans <= 2 heads
    // QKF 1: a block's q/k rows and its v rows are two shares: up to one row more than N / grid
    const int rows_max = EPI == 1 ? 2 * ((N / 2 + grid - 1) / grid)
                         : QKF >= 1 ? ((QH + KH) * D + grid - 1) / grid + (KH * D + grid - 1) / grid : (N + grid - 1) / grid;
    if (EPI == 2 && (D % CL != 0 || (D / CL) % 2 != 0)) return 2;
    if (D % 2 != 0 || rows_max / D + 2 > 8) return 2;
    if (EPI == 1 && (N / 2 < grid || rows_max > D)) return 2;
    const size_t smem = (LOADER == 1 ? size_t(STAGES) * SROWS * H * 2 : 0) + size_t(rows_max) * NB * WARPS * 4 +
                        size_t(rows_max > D ? rows_max : D) * NB * 4;
    if (smem > c->smem_per_block_optin) return 3;
    static bool configured = false;
    static int resident = 0;
    if (!configured) {
        cudaFuncSetAttribute(qkv_stream<NB, XV>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, qkv_stream<NB, XV>, THREADS, smem);
        configured = true;
    }
    if (EPI == 1 && resident < BPS) return 4;  // the per-head waits need every block resident at once
    char* ws = static_cast<char*>(c->workspace);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = EPI == 2 ? CL : 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = EPI == 2 ? 1 : 0;
    static bool told = false;
    if (EPI == 2 && !told) {  // how many clusters fit at once (one wave needs grid / CL): said once, on stderr
        if (CL > 8) cudaFuncSetAttribute(qkv_stream<NB, XV>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        int clusters = 0;
        cudaOccupancyMaxActiveClusters(&clusters, qkv_stream<NB, XV>, &cfg);
        std::fprintf(stderr, "qkv_stream: %d clusters of %d resident at once, the grid has %d\n", clusters, CL, grid / CL);
        told = true;
    }
    cudaLaunchKernelEx(&cfg, qkv_stream<NB, XV>,
        npuopt_tensor<__nv_bfloat16>(c, "x"), npuopt_tensor<int>(c, "pos"), npuopt_tensor<__nv_bfloat16>(c, "attn_norm"),
        npuopt_tensor<__nv_bfloat16>(c, "wq"), npuopt_tensor<__nv_bfloat16>(c, "wk"), npuopt_tensor<__nv_bfloat16>(c, "wv"),
        npuopt_tensor<__nv_bfloat16>(c, "q_norm"), npuopt_tensor<__nv_bfloat16>(c, "k_norm"), npuopt_tensor<__nv_bfloat16>(c, "q"),
        npuopt_tensor<__nv_bfloat16>(c, "k"), npuopt_tensor<__nv_bfloat16>(c, "v"), reinterpret_cast<float*>(ws),
        reinterpret_cast<unsigned*>(ws + acc_bytes(c)), reinterpret_cast<float*>(ws + acc_bytes(c) + count_bytes(c)),
        reinterpret_cast<unsigned long long*>(ws + acc_bytes(c) + count_bytes(c) + slot_bytes(c)), H, QH, KH, D, rows_max);
    return 0;
}

template <int NB>
static int launch_nb(const NpuoptCtx* c) {
    const int H = int(npuopt_shape(c, "hidden"));
    if (H % 8 != 0) return 2;
    const int xv = (H / 8 + WARPS * 32 - 1) / (WARPS * 32);  // 16-byte vectors per thread per row
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
