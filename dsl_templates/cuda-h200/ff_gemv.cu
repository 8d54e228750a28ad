// feedforward, design family "two_pass_gemv": out = x + RMSNorm(w_down · (gelu_tanh(w_gate · xn) * (w_up · xn))) * post_norm,
// xn = RMSNorm(x) * ffn_norm, in TWO launches on one stream.
// Pass 1 (up): a persistent grid of BPS blocks per SM, WARPS warps each; every block normalises x
// into shared memory (bf16, the norm fused as a prologue), each warp streams ROWS gate rows and the
// same ROWS up rows at a time (16-byte loads, UNROLL in flight per row per lane; LOADHINT as in
// ao_gemv) over a contiguous range of rows, and writes h = GeGLU(g, u) in bf16 (the epilogue fused).
// Pass 2 (down): DBPS blocks per SM; K (= ffn) cut into DSPLITK chunks, each block keeps its chunk of
// h in shared memory; DROWS rows per warp at a time; partial sums into an fp32 accumulator; the last
// block applies RMSNorm + post_norm + residual and leaves the workspace zeroed. XSRC 1 (both passes):
// no shared-memory prologue; the operand (x * ffn_norm, h) is read through L1 in the loop, and pass
// 1's warps scale their sums by 1/rms(x) afterwards.
// EPI 1 (the down pass's distributed epilogue, as in ao_gemv): plain stores per K chunk, grid
// barriers over the co-resident grid, every block adds the DSPLITK slices of its own rows in chunk
// order, writes its rows' sum of squares into a slot, and after the second barrier adds all slots
// in one fixed order (bitwise deterministic) and normalises + adds the residual for its own rows.
// PDL (EPI 1): 1 launches the down pass as a programmatic dependent of the up pass (its launch
// and block start-up overlap the up pass's end; it waits for the up pass (griddepcontrol.wait)
// before it reads h), 2 also lets the up pass trigger that launch at its start, so down-pass
// blocks start on the SMs the up pass leaves first. DPF 1: before that wait, each down-pass warp
// has the copy engine bring its first rows of w_down into L2 (weights do not depend on h).
#include "npuopt_cuda.h"

#define WARPS ${WARPS}
#define ROWS ${ROWS}
#define UNROLL ${UNROLL}
#define BPS ${BPS}
#define DROWS ${DROWS}
#define DSPLITK ${DSPLITK}
#define DBPS ${DBPS}
#define LOADHINT ${LOADHINT}
#define XSRC ${XSRC}
#define EPI ${EPI}
#define PDL ${PDL}
#define DPF ${DPF}


__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

template <int NB>
__global__ void __launch_bounds__(WARPS * 32, BPS) ff_up(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ ffn_norm,
                                                   const __nv_bfloat16* __restrict__ w_gate, const __nv_bfloat16* __restrict__ w_up,
                                                   __nv_bfloat16* __restrict__ h, int F, int H) {
    extern __shared__ uint4 xs[];
    if (PDL == 2) pdl_launch_dependents();
    const int kvec = H / 8;
    if (XSRC == 0) {  // the norm as a prologue: x normalised into shared memory
    float ss[NB] = {};
    for (int i = threadIdx.x; i < kvec; i += blockDim.x) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            float f[8];
            unpack8(__ldg(reinterpret_cast<const uint4*>(x + size_t(b) * H) + i), f);
#pragma unroll
            for (int e = 0; e < 8; ++e) ss[b] = fmaf(f[e], f[e], ss[b]);
        }
    }
    block_sums<NB>(ss);
    __shared__ float s_scale[NB];
    if (threadIdx.x == 0)
#pragma unroll
        for (int b = 0; b < NB; ++b) s_scale[b] = rsqrtf(ss[b] / H + 1e-6f);
    __syncthreads();
    for (int i = threadIdx.x; i < NB * kvec; i += blockDim.x) {
        const int b = i / kvec, j = i - b * kvec;
        const float scale = s_scale[b];
        float f[8], w[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(x + size_t(b) * H) + j), f);
        unpack8(__ldg(reinterpret_cast<const uint4*>(ffn_norm) + j), w);
        __nv_bfloat162 o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) o[e] = __floats2bfloat162_rn(f[2 * e] * scale * w[2 * e], f[2 * e + 1] * scale * w[2 * e + 1]);
        xs[i] = *reinterpret_cast<uint4*>(o);
    }
    __syncthreads();
    }
    float rs[NB];
    bool have_rs = false;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long wc = long(gridDim.x) * WARPS, gw = long(blockIdx.x) * WARPS + warp, groups = F / ROWS;
    const long g0 = gw * groups / wc, g1 = (gw + 1) * groups / wc;
    for (long g = g0; g < g1; ++g) {
        const int r0 = int(g) * ROWS;
        const __nv_bfloat16* rows[2 * ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            rows[r] = w_gate + size_t(r0 + r) * H;
            rows[ROWS + r] = w_up + size_t(r0 + r) * H;
        }
        float acc[2 * ROWS][NB] = {};
        gemv_rows<UNROLL, LOADHINT, NB, 2 * ROWS, XSRC == 1, XSRC == 1>(rows, XSRC == 1 ? reinterpret_cast<const uint4*>(x) : xs, kvec,
                                                      reinterpret_cast<const uint4*>(ffn_norm), kvec, acc);
        if (XSRC == 1) {  // the norm folded in: rows · (x * ffn_norm), scaled by 1/rms(x) afterwards
            if (!have_rs) { warp_rms_scale<NB>(x, H, rs); have_rs = true; }
#pragma unroll
            for (int r = 0; r < 2 * ROWS; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b) acc[r][b] *= rs[b];
        }
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b) h[size_t(b) * F + r0 + r] = __float2bfloat16(gelu_tanh(acc[r][b]) * acc[ROWS + r][b]);
        }
    }
}

/// EPI 1: the down pass with the distributed epilogue (see the header); h is the up pass's output. part: DSPLITK slices of [NB][N] fp32; slots:
/// [gridDim.x][NB] fp32; bar: tw_down w_downrds.
template <int NB>
__global__ void __launch_bounds__(WARPS * 32, DBPS) ff_dist(const __nv_bfloat16* __restrict__ h, const __nv_bfloat16* __restrict__ residual,
                                                         const __nv_bfloat16* __restrict__ w_down, const __nv_bfloat16* __restrict__ post_norm,
                                                         __nv_bfloat16* __restrict__ out, float* part, float* slots, unsigned* bar, int N, int K) {
    extern __shared__ uint4 xs[];
    const int chunk = blockIdx.x % DSPLITK, bi = blockIdx.x / DSPLITK;
    const int bc = gridDim.x / DSPLITK;
    const int kc = K / DSPLITK, kbeg = chunk * kc, kvec = kc / 8;
    if (DPF == 1) {  // this warp's first row group into L2 (one row per lane)
        const int lane = threadIdx.x & 31;
        const long wc = long(bc) * WARPS, gw = long(bi) * WARPS + (threadIdx.x >> 5), groups = N / DROWS;
        const long g0 = gw * groups / wc, g1 = (gw + 1) * groups / wc;
        if (g0 < g1 && lane < DROWS) prefetch_l2(w_down + size_t(g0 * DROWS + lane) * K + kbeg, unsigned(kc) * 2);
    }
    if (PDL > 0) pdl_wait();  // h (and anything else the up pass wrote) only after this
    if (XSRC == 0) {
        for (int i = threadIdx.x; i < NB * kvec; i += blockDim.x) {
            const int b = i / kvec, j = i - b * kvec;
            xs[i] = __ldcg(reinterpret_cast<const uint4*>(h + size_t(b) * K + kbeg) + j);
        }
        __syncthreads();
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long wc = long(bc) * WARPS, gw = long(bi) * WARPS + warp, groups = N / DROWS;
    const long g0 = gw * groups / wc, g1 = (gw + 1) * groups / wc;
    float* my_part = part + size_t(chunk) * NB * N;
    for (long g = g0; g < g1; ++g) {
        const int r0 = int(g) * DROWS;
        const __nv_bfloat16* rows[DROWS];
#pragma unroll
        for (int r = 0; r < DROWS; ++r) rows[r] = w_down + size_t(r0 + r) * K + kbeg;
        float acc[DROWS][NB] = {};
        gemv_rows<UNROLL, LOADHINT, NB, DROWS, XSRC == 1, false>(rows, XSRC == 1 ? reinterpret_cast<const uint4*>(h + kbeg) : xs,
                                              XSRC == 1 ? K / 8 : kvec, nullptr, kvec, acc);
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < DROWS; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b) my_part[size_t(b) * N + r0 + r] = acc[r][b];
        }
    }
    // the rows this block normalises: with DSPLITK 1 the ones its own warps computed (no barrier
    // needed to read them), otherwise an even share of all rows after the first barrier
    int rbeg, rend;
    if (DSPLITK == 1) {
        rbeg = int(long(bi) * WARPS * groups / wc) * DROWS;
        rend = int(long(bi + 1) * WARPS * groups / wc) * DROWS;
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
            for (int c = 0; c < DSPLITK; ++c) y += __ldcg(part + (size_t(c) * NB + b) * N + i);
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
            for (int c = 0; c < DSPLITK; ++c) y += __ldcg(part + size_t(c) * NB * N + at);
            out[at] = __float2bfloat16(__bfloat162float(residual[at]) + y * s_scale[b] * w);
        }
    }
}

template <int NB>
__global__ void __launch_bounds__(WARPS * 32, DBPS) ff_down(const __nv_bfloat16* __restrict__ h, const __nv_bfloat16* __restrict__ x,
                                                     const __nv_bfloat16* __restrict__ w_down, const __nv_bfloat16* __restrict__ post_norm,
                                                     __nv_bfloat16* __restrict__ out, float* acc_buf, unsigned* counter, int N, int K) {
    extern __shared__ uint4 xs[];
    __shared__ int s_last;
    const int chunk = blockIdx.x % DSPLITK, bi = blockIdx.x / DSPLITK;
    const int bc = (gridDim.x - chunk + DSPLITK - 1) / DSPLITK;
    const int kc = K / DSPLITK, kbeg = chunk * kc, kvec = kc / 8;
    if (XSRC == 0) {
        for (int i = threadIdx.x; i < NB * kvec; i += blockDim.x) {
            const int b = i / kvec, j = i - b * kvec;
            xs[i] = __ldcg(reinterpret_cast<const uint4*>(h + size_t(b) * K + kbeg) + j);
        }
        __syncthreads();
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long wc = long(bc) * WARPS, gw = long(bi) * WARPS + warp, groups = N / DROWS;
    const long g0 = gw * groups / wc, g1 = (gw + 1) * groups / wc;
    for (long g = g0; g < g1; ++g) {
        const int r0 = int(g) * DROWS;
        const __nv_bfloat16* rows[DROWS];
#pragma unroll
        for (int r = 0; r < DROWS; ++r) rows[r] = w_down + size_t(r0 + r) * K + kbeg;
        float acc[DROWS][NB] = {};
        gemv_rows<UNROLL, LOADHINT, NB, DROWS, XSRC == 1, false>(rows, XSRC == 1 ? reinterpret_cast<const uint4*>(h + kbeg) : xs,
                                               XSRC == 1 ? K / 8 : kvec, nullptr, kvec, acc);
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < DROWS; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    if (DSPLITK == 1) acc_buf[size_t(b) * N + r0 + r] = acc[r][b];
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
            out[at] = __float2bfloat16(__bfloat162float(x[at]) + y * rsqrtf(ss[b] / N + 1e-6f) * w);
            if (DSPLITK > 1) acc_buf[at] = 0.0f;
        }
    }
    if (threadIdx.x == 0) *counter = 0;
}

static size_t round256(size_t bytes) { return (bytes + 255) / 256 * 256; }
static size_t h_bytes(const NpuoptCtx* c) { return round256(size_t(npuopt_shape(c, "batch")) * npuopt_shape(c, "ffn") * 2); }
// EPI 0: one [batch][hidden] fp32 accumulator; EPI 1: DSPLITK slices of it, then the slots
static size_t acc_bytes(const NpuoptCtx* c) {
    return round256(size_t(EPI == 1 ? DSPLITK : 1) * npuopt_shape(c, "batch") * npuopt_shape(c, "hidden") * 4);
}
static size_t slot_bytes(const NpuoptCtx* c) { return round256(size_t(c->sm_count) * DBPS * npuopt_shape(c, "batch") * 4); }

NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx* c) { return h_bytes(c) + acc_bytes(c) + slot_bytes(c) + 256; }

template <int NB>
static int launch_nb(const NpuoptCtx* c) {
    const int H = int(npuopt_shape(c, "hidden")), F = int(npuopt_shape(c, "ffn"));
    if (H % 8 != 0 || F % ROWS != 0 || H % DROWS != 0 || F % (8 * DSPLITK) != 0) return 2;
    const size_t smem_up = XSRC == 1 ? 0 : size_t(NB) * H * 2, smem_down = XSRC == 1 ? 0 : size_t(NB) * (F / DSPLITK) * 2;
#if XSRC == 0
    if (smem_up > c->smem_per_block_optin || smem_down > c->smem_per_block_optin) return 3;
#endif
    const void* down = EPI == 1 ? reinterpret_cast<const void*>(ff_dist<NB>) : reinterpret_cast<const void*>(ff_down<NB>);
    static bool configured = false;
    static int resident = 0;
    if (!configured) {
        cudaFuncSetAttribute(ff_up<NB>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_up));
        cudaFuncSetAttribute(down, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_down));
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, down, WARPS * 32, smem_down);
        configured = true;
    }
    // the distributed epilogue's grid barrier needs every block of the down pass resident at once
    if (EPI == 1 && resident < DBPS) return 4;
    char* ws = static_cast<char*>(c->workspace);
    auto* h = reinterpret_cast<__nv_bfloat16*>(ws);
    const auto* x = npuopt_tensor<__nv_bfloat16>(c, "x");
    ff_up<NB><<<c->sm_count * BPS, WARPS * 32, smem_up, c->stream>>>(x, npuopt_tensor<__nv_bfloat16>(c, "ffn_norm"),
                                                                     npuopt_tensor<__nv_bfloat16>(c, "w_gate"),
                                                                     npuopt_tensor<__nv_bfloat16>(c, "w_up"), h, F, H);
    int grid = c->sm_count * DBPS;
    grid = grid < DSPLITK ? DSPLITK : grid / DSPLITK * DSPLITK;
    const auto* w_down = npuopt_tensor<__nv_bfloat16>(c, "w_down");
    const auto* post_norm = npuopt_tensor<__nv_bfloat16>(c, "post_norm");
    auto* out = npuopt_tensor<__nv_bfloat16>(c, "out");
    auto* acc = reinterpret_cast<float*>(ws + h_bytes(c));
    auto* tail = reinterpret_cast<unsigned*>(ws + h_bytes(c) + acc_bytes(c) + slot_bytes(c));
    if (EPI == 1) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(grid);
        cfg.blockDim = dim3(WARPS * 32);
        cfg.dynamicSmemBytes = smem_down;
        cfg.stream = c->stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = PDL > 0 ? 1 : 0;
        cudaLaunchKernelEx(&cfg, ff_dist<NB>, static_cast<const __nv_bfloat16*>(h), x, w_down, post_norm, out, acc,
                           reinterpret_cast<float*>(ws + h_bytes(c) + acc_bytes(c)), tail, H, F);
    } else
        ff_down<NB><<<grid, WARPS * 32, smem_down, c->stream>>>(h, x, w_down, post_norm, out, acc, tail, H, F);
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
