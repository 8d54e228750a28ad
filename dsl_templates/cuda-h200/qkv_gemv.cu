// project_qkv, design family "gemv_head_epilogue": q, k, v = the three projections of
// xn = RMSNorm(x) * attn_norm; q and k then get a per-head RMSNorm (q_norm, k_norm) and RoPE
// (theta 10000, rotate-half pairs (i, i + head_dim/2), at position pos[b]); all in ONE launch.
// The rows of wq | wk | wv are one range of (q_heads + 2 kv_heads) * head_dim rows. A persistent
// grid of BPS blocks per SM, WARPS warps each; K (= hidden) cut into SPLITK chunks, every block
// normalises its chunk of x into shared memory (the norm fused as a prologue; the sum of squares
// over all of x is computed by each block). Each warp streams ROWS rows at a time (16-byte loads,
// UNROLL in flight per row per lane, LOADHINT as in ao_gemv) over a contiguous range; partial sums
// go to an fp32 accumulator (XSRC 1: no prologue; x * attn_norm is read through L1 in the loop and
// each warp scales its sums by 1/rms(x) afterwards), and a per-head counter says which warp completed a head: that warp
// applies the head's norm + RoPE (or copies v), writes bf16, and resets the accumulator and counter.
#include "npuopt_cuda.h"

#define WARPS ${WARPS}
#define ROWS ${ROWS}
#define UNROLL ${UNROLL}
#define SPLITK ${SPLITK}
#define BPS ${BPS}
#define LOADHINT ${LOADHINT}
#define XSRC ${XSRC}


template <int NB>
__global__ void __launch_bounds__(WARPS * 32, BPS) qkv_kernel(const __nv_bfloat16* __restrict__ x, const int* __restrict__ pos,
                                                        const __nv_bfloat16* __restrict__ attn_norm, const __nv_bfloat16* __restrict__ wq,
                                                        const __nv_bfloat16* __restrict__ wk, const __nv_bfloat16* __restrict__ wv,
                                                        const __nv_bfloat16* __restrict__ q_norm, const __nv_bfloat16* __restrict__ k_norm,
                                                        __nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k,
                                                        __nv_bfloat16* __restrict__ v, float* acc_buf, unsigned* head_count, int H,
                                                        int QH, int KH, int D) {
    extern __shared__ uint4 xs[];
    __shared__ float s_scale[NB];
    __shared__ float s_head[WARPS][512];
    const int N = (QH + 2 * KH) * D;
    const int chunk = blockIdx.x % SPLITK, bi = blockIdx.x / SPLITK;
    const int bc = (gridDim.x - chunk + SPLITK - 1) / SPLITK;
    const int kc = H / SPLITK, kbeg = chunk * kc, kvec = kc / 8;
    if (XSRC == 0) {  // the norm as a prologue: x's chunk normalised into shared memory
    float ss[NB] = {};
    for (int i = threadIdx.x; i < H / 8; i += blockDim.x) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            float f[8];
            unpack8(__ldg(reinterpret_cast<const uint4*>(x + size_t(b) * H) + i), f);
#pragma unroll
            for (int e = 0; e < 8; ++e) ss[b] = fmaf(f[e], f[e], ss[b]);
        }
    }
    block_sums<NB>(ss);
    if (threadIdx.x == 0)
#pragma unroll
        for (int b = 0; b < NB; ++b) s_scale[b] = rsqrtf(ss[b] / H + 1e-6f);
    __syncthreads();
    for (int i = threadIdx.x; i < NB * kvec; i += blockDim.x) {
        const int b = i / kvec, j = i - b * kvec;
        const float scale = s_scale[b];
        float f[8], w[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(x + size_t(b) * H + kbeg) + j), f);
        unpack8(__ldg(reinterpret_cast<const uint4*>(attn_norm + kbeg) + j), w);
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
    const long wc = long(bc) * WARPS, gw = long(bi) * WARPS + warp, groups = N / ROWS;
    const long g0 = gw * groups / wc, g1 = (gw + 1) * groups / wc;
    const int q_rows = QH * D, k_rows = KH * D;
    for (long g = g0; g < g1; ++g) {
        const int r0 = int(g) * ROWS;
        const __nv_bfloat16* rows[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int row = r0 + r;
            const __nv_bfloat16* base = row < q_rows ? wq + size_t(row) * H
                                       : row < q_rows + k_rows ? wk + size_t(row - q_rows) * H
                                                               : wv + size_t(row - q_rows - k_rows) * H;
            rows[r] = base + kbeg;
        }
        float acc[ROWS][NB] = {};
        gemv_rows<UNROLL, LOADHINT, NB, ROWS, XSRC == 1, XSRC == 1>(rows, XSRC == 1 ? reinterpret_cast<const uint4*>(x + kbeg) : xs,
                                                  XSRC == 1 ? H / 8 : kvec,
                                                  reinterpret_cast<const uint4*>(attn_norm + kbeg), kvec, acc);
        if (XSRC == 1) {  // the norm folded in: rows · (x * attn_norm), scaled by each row's 1/rms afterwards
            if (!have_rs) { warp_rms_scale<NB>(x, H, rs); have_rs = true; }
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b) acc[r][b] *= rs[b];
        }
        const int head = r0 / D;
        int last = 0;
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    if (SPLITK == 1) acc_buf[size_t(b) * N + r0 + r] = acc[r][b];
                    else atomicAdd(acc_buf + size_t(b) * N + r0 + r, acc[r][b]);
                }
            __threadfence();
            last = atomicAdd(head_count + head, unsigned(ROWS)) + ROWS == unsigned(D * SPLITK);
        }
        last = __shfl_sync(0xffffffffu, last, 0);
        if (!last) continue;
        __threadfence();
        // this warp completed `head`: its epilogue
        const bool rope = head < QH + KH;
        const __nv_bfloat16* nw = head < QH ? q_norm : k_norm;
        __nv_bfloat16* dst_base = head < QH ? q + size_t(head) * D : head < QH + KH ? k + size_t(head - QH) * D : v + size_t(head - QH - KH) * D;
        const int dst_stride = head < QH ? QH * D : KH * D;
        float* sh = s_head[warp];
        for (int b = 0; b < NB; ++b) {
            float* src = acc_buf + size_t(b) * N + size_t(head) * D;
            float part = 0;
#pragma unroll 8
            for (int i = lane; i < D; i += 32) {
                const float y = __ldcg(src + i);
                sh[i] = y;
                part = fmaf(y, y, part);
                if (SPLITK > 1) src[i] = 0.0f;
            }
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) part += __shfl_xor_sync(0xffffffffu, part, offset);
            __syncwarp();
            __nv_bfloat16* dst = dst_base + size_t(b) * dst_stride;
            if (!rope) {
                for (int i = lane; i < D; i += 32) dst[i] = __float2bfloat16(sh[i]);
            } else {
                const float scale = rsqrtf(part / D + 1e-6f);
                const float p = float(pos[b]);
#pragma unroll 4
                for (int i = lane; i < D / 2; i += 32) {
                    const float a = sh[i] * scale * __bfloat162float(nw[i]);
                    const float c2 = sh[i + D / 2] * scale * __bfloat162float(nw[i + D / 2]);
                    const float freq = exp2f(-(2.0f * i / D) * 13.287712379549449f);  // log2(10000)
                    float s, co;
                    sincosf(p * freq, &s, &co);
                    dst[i] = __float2bfloat16(a * co - c2 * s);
                    dst[i + D / 2] = __float2bfloat16(a * s + c2 * co);
                }
            }
            __syncwarp();
        }
        if (lane == 0) head_count[head] = 0;
    }
}

static size_t acc_bytes(const NpuoptCtx* c) {
    const size_t n = size_t(npuopt_shape(c, "q_heads") + 2 * npuopt_shape(c, "kv_heads")) * npuopt_shape(c, "head_dim");
    return (size_t(npuopt_shape(c, "batch")) * n * 4 + 255) / 256 * 256;
}

NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx* c) {
    return acc_bytes(c) + (size_t(npuopt_shape(c, "q_heads") + 2 * npuopt_shape(c, "kv_heads")) * 4 + 255) / 256 * 256;
}

template <int NB>
static int launch_nb(const NpuoptCtx* c) {
    const int H = int(npuopt_shape(c, "hidden")), QH = int(npuopt_shape(c, "q_heads")), KH = int(npuopt_shape(c, "kv_heads")),
              D = int(npuopt_shape(c, "head_dim"));
    if (H % (8 * SPLITK) != 0 || D % ROWS != 0 || D % 2 != 0 || D > 512) return 2;
    const size_t smem = XSRC == 1 ? 0 : size_t(NB) * (H / SPLITK) * 2;
#if XSRC == 0
    if (smem > c->smem_per_block_optin) return 3;
#endif
    static bool configured = false;
    if (!configured) {
        cudaFuncSetAttribute(qkv_kernel<NB>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        configured = true;
    }
    int grid = c->sm_count * BPS;
    grid = grid < SPLITK ? SPLITK : grid / SPLITK * SPLITK;
    char* ws = static_cast<char*>(c->workspace);
    qkv_kernel<NB><<<grid, WARPS * 32, smem, c->stream>>>(
        npuopt_tensor<__nv_bfloat16>(c, "x"), npuopt_tensor<int>(c, "pos"), npuopt_tensor<__nv_bfloat16>(c, "attn_norm"),
        npuopt_tensor<__nv_bfloat16>(c, "wq"), npuopt_tensor<__nv_bfloat16>(c, "wk"), npuopt_tensor<__nv_bfloat16>(c, "wv"),
        npuopt_tensor<__nv_bfloat16>(c, "q_norm"), npuopt_tensor<__nv_bfloat16>(c, "k_norm"), npuopt_tensor<__nv_bfloat16>(c, "q"),
        npuopt_tensor<__nv_bfloat16>(c, "k"), npuopt_tensor<__nv_bfloat16>(c, "v"), reinterpret_cast<float*>(ws),
        reinterpret_cast<unsigned*>(ws + acc_bytes(c)), H, QH, KH, D);
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
