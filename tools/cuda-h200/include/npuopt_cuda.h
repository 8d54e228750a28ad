// npuopt_cuda.h — what a cuda-h200 design sees of the runner (ABI 1).
//
// A design is one .cu file that defines
//
//   NPUOPT_EXPORT int npuopt_launch(const NpuoptCtx* ctx);            // required: enqueue the kernel on ctx->stream
//   NPUOPT_EXPORT size_t npuopt_workspace_bytes(const NpuoptCtx* ctx); // optional: scratch it needs (default 0)
//
// cudac compiles it into a shared object; `cudac run` loads it, owns every buffer, generates the
// inputs from the seed, poisons the outputs, flushes L2, times the launch with CUDA events and
// checks the outputs against its own float32 reference. The design sees shapes, tensor pointers,
// a workspace that is zeroed once per process (the design must leave it as it needs it for the
// next launch), the stream, a cuBLAS handle bound to that stream and public device properties.
// It never sees the seed, the reference or the timing. npuopt_launch returns 0, or non-zero when
// it cannot run this shape (reported as a device error).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#define NPUOPT_ABI 1
#define NPUOPT_EXPORT extern "C" __attribute__((visibility("default")))

enum NpuoptDtype { NPUOPT_BF16 = 0, NPUOPT_F32 = 1, NPUOPT_I32 = 2 };

struct NpuoptTensor {
    const char* name;
    void* data;         // device memory
    int64_t elements;
    int dtype;          // NpuoptDtype
};

struct NpuoptCtx {
    int abi;                        // NPUOPT_ABI
    const char* kernel;             // the kernel name of kernels.yaml
    int shape_count;
    const char* const* shape_names;
    const int64_t* shape_values;
    int tensor_count;
    const NpuoptTensor* tensors;
    void* workspace;                // null when npuopt_workspace_bytes is asked
    size_t workspace_bytes;
    cudaStream_t stream;
    void* cublas;                   // cublasHandle_t on `stream`
    int sm_count;                   // multiprocessors
    size_t l2_bytes;                // L2 cache size
    size_t smem_per_block_optin;    // largest dynamic shared memory a block may ask for
};

/// A shape variable; -1 when the shape does not name it.
static inline int64_t npuopt_shape(const NpuoptCtx* ctx, const char* name) {
    for (int index = 0; index < ctx->shape_count; ++index) {
        if (std::strcmp(ctx->shape_names[index], name) == 0) return ctx->shape_values[index];
    }
    return -1;
}

/// A tensor's device pointer; null when the kernel has no such tensor.
template <class T>
static inline T* npuopt_tensor(const NpuoptCtx* ctx, const char* name) {
    for (int index = 0; index < ctx->tensor_count; ++index) {
        if (std::strcmp(ctx->tensors[index].name, name) == 0) return static_cast<T*>(ctx->tensors[index].data);
    }
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Device helpers the templates share (the header is part of cudac's version, so a change here
// changes every design's compile key). Names without a prefix: they are the templates' words.
#ifdef __CUDACC__

/// Eight bf16 of a 16-byte vector as fp32 (a bf16 is the high half of an fp32).
__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

/// A 16-byte load of streamed weights through the non-coherent path, no L1 allocation; volatile,
/// so it is issued where it is written (the stream templates order their loads on purpose).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

/// The GEMV templates' LOADHINT: 0 __ldg, 1 no L1 allocation, 2 no L1 allocation and a 256-byte
/// L2 fetch (plain asm: the compiler may schedule these loads freely).
template <int HINT>
__device__ __forceinline__ uint4 ld_hint(const void* p) {
    if constexpr (HINT == 0) {
        return __ldg(reinterpret_cast<const uint4*>(p));
    } else if constexpr (HINT == 1) {
        uint4 v;
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
        return v;
    } else {
        uint4 v;
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
        return v;
    }
}

/// Every thread of the block gets the block's sums of v (warp shuffles, then one value per warp
/// in shared memory added in warp order: the same bits in every thread). Two __syncthreads.
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

/// acc[r][b] += rows[r][0..8*kvec) · xs[b][0..kvec) for one warp, U 16-byte loads per row in
/// flight per lane (ld_hint<HINT>), then reduced over the warp (every lane gets the sums).
/// XS_GLOBAL: xs is device memory read through L1 (__ldg), else shared memory; row b of the
/// operand starts at xs + b * xstride. NORM_W: the operand is multiplied by nwv elementwise.
template <int U, int HINT, int NB, int NR, bool XS_GLOBAL, bool NORM_W>
__device__ __forceinline__ void gemv_rows(const __nv_bfloat16* const (&rows)[NR], const uint4* xs, int xstride,
                                          const uint4* nwv, int kvec, float (&acc)[NR][NB]) {
    const int lane = threadIdx.x & 31;
    for (int base = lane; base < kvec; base += 32 * U) {
        uint4 w[NR][U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int idx = base + u * 32;
#pragma unroll
            for (int r = 0; r < NR; ++r) w[r][u] = idx < kvec ? ld_hint<HINT>(rows[r] + idx * 8) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
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

/// The stream templates' tile: acc[r][b] += the tile's SR rows · the operand over this thread's
/// vectors (XV of them: t + i·T, T threads splitting each row); xr holds the operand's vectors, row
/// r's vector i comes from src(r, i) (shared memory or registers).
template <int NB, int XV, int SR, int T, class Src>
__device__ __forceinline__ void tile_dot(const uint4 (&xr)[NB][XV], int t, int kvec, Src src, float (&acc)[SR][NB]) {
#pragma unroll
    for (int i = 0; i < XV; ++i) {
        if (t + i * (T) < kvec) {
            float xf[NB][8];
#pragma unroll
            for (int b = 0; b < NB; ++b) unpack8(xr[b][i], xf[b]);
#pragma unroll
            for (int r = 0; r < SR; ++r) {
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

// --- mbarriers and bulk asynchronous copies (sm_90) ---
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
/// Asks the copy engine to bring bytes (a multiple of 16, 16-byte aligned) from src into L2; no
/// completion to wait for: later loads of those lines hit L2 or join the fetch in flight.
__device__ __forceinline__ void prefetch_l2(const void* src, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

// --- grid-wide exchange for a co-resident grid (launch checks the occupancy) ---

/// Barrier, one thread per block: a 64-bit arrival count that only grows (never reset between
/// launches); the add is a release (this thread's stores before it), the polling loads acquire.
__device__ __forceinline__ void grid_arrive_wait(unsigned long long* count) {
    unsigned long long old, now;
    asm volatile("atom.add.release.gpu.global.u64 %0, [%1], 1;" : "=l"(old) : "l"(count) : "memory");
    const unsigned long long target = (old / gridDim.x + 1) * gridDim.x;
    do {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(count) : "memory");
    } while (now < target);
}

/// Barrier for the whole block: bar[0] counts arrivals (reset by the last arriver), bar[1] is a
/// generation number that only grows, so no reset is needed between launches.
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

/// Epoch-tagged slots: one 64-bit word per value, (epoch << 32) | fp32 bits, written with one
/// relaxed store, so the value and its "ready" flag arrive together and a reader needs no fence
/// and no second load: one round trip to L2 instead of store, fence, count, poll, load. Every
/// launch writes every slot once with the epoch of the last launch + 1 (all slots hold the same
/// epoch between launches; the workspace starts zeroed), so nothing is reset.
__device__ __forceinline__ unsigned long long ld_relaxed_u64(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void slot_put(unsigned long long* slot, unsigned epoch, float v) {
    const unsigned long long w = (static_cast<unsigned long long>(epoch) << 32) | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(slot), "l"(w) : "memory");
}
/// The epoch this launch writes: read from a slot of the caller's own (early, off the critical path).
__device__ __forceinline__ unsigned slot_next_epoch(const unsigned long long* own) { return unsigned(ld_relaxed_u64(own) >> 32) + 1; }
/// Sum over slots[j * stride], j < n, by one warp (lane l takes l, l + 32, ... in order, then a
/// fixed shuffle tree: the same bits in every block), waiting for each to carry `epoch`. All the
/// lane's loads are issued before the first wait (n <= 32 * MAXJ).
template <int MAXJ>
__device__ __forceinline__ float slots_sum(const unsigned long long* slots, int n, int stride, unsigned epoch) {
    const int lane = threadIdx.x & 31;
    unsigned long long v[MAXJ];
#pragma unroll
    for (int q = 0; q < MAXJ; ++q) {
        const int j = lane + 32 * q;
        v[q] = j < n ? ld_relaxed_u64(slots + size_t(j) * stride) : (static_cast<unsigned long long>(epoch) << 32);
    }
    float tot = 0;
#pragma unroll
    for (int q = 0; q < MAXJ; ++q) {
        const int j = lane + 32 * q;
        while (unsigned(v[q] >> 32) != epoch) v[q] = ld_relaxed_u64(slots + size_t(j) * stride);
        tot += __uint_as_float(unsigned(v[q]));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, offset);
    return tot;
}

// --- thread block clusters (sm_90): split barrier over every thread of the cluster ---
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// --- programmatic dependent launch (sm_90): no-ops for a launch without the attribute ---
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

#endif  // __CUDACC__
