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
