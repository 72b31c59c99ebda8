/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API, since 1.2: programs and kernels. A program is code loaded on one device
 * from an image in a named format (a host shared object, PTX, cubin, fatbin, NEFF; since 1.3 the
 * portable StableHLO and formats a backend names itself); a kernel is an entry point of a
 * program, looked up by name; a launch runs a kernel on a stream, in stream order, over a grid of
 * blocks, with a typed argument list.
 *
 * Lifetime: a kernel belongs to its program and becomes invalid when the program is destroyed.
 * Launches already enqueued when a program is destroyed still run: the backend keeps the code
 * until the last of them completed. Closing a backend destroys the programs left on its devices
 * (the validation layer reports them as leaks).
 *
 * Errors: a launch that fails while it runs (a kernel returned an error, the runtime failed)
 * latches on its stream like every other asynchronous error; enqueueing never waits for the
 * device. */
#ifndef HAL_PROGRAM_H
#define HAL_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "hal/hal_comm.h" /* hal_dtype_t */
#include "hal/hal_status.h"
#include "hal/hal_types.h"
#include "hal/hal_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Image formats. A device lists those it loads in hal_device_properties_t.program_formats, bit
 * (1u << format). Values are never reused.
 *
 * Native formats (host ELF, PTX, cubin, fatbin, NEFF) hold code built for one kind of device.
 * HAL_PROGRAM_FORMAT_STABLEHLO (since 1.3) is the portable one: a backend whose compiler takes
 * StableHLO (XLA-based stacks, IREE, Neuron's neuronx-cc) lists it and compiles on create, so a
 * framework that lowers its graphs to StableHLO runs them on any such device. See "StableHLO
 * programs" below.
 *
 * Vendor formats (since 1.3): values
 * HAL_PROGRAM_FORMAT_VENDOR_FIRST..HAL_PROGRAM_FORMAT_VENDOR_LAST name whatever a backend documents
 * (a new instruction set, an IR of its own) without an ABI change. The core checks only that the
 * device lists the value and passes the image through; the same value means different things on
 * different backends. */
typedef enum hal_program_format {
    HAL_PROGRAM_FORMAT_NONE = 0,
    /* A shared object (ELF) for the host's ABI whose kernels follow the host calling convention
     * below: for backends whose device memory the host addresses (host_addressable). */
    HAL_PROGRAM_FORMAT_HOST_ELF = 1,
    HAL_PROGRAM_FORMAT_PTX = 2,    /* NUL-terminated PTX text (cuda) */
    HAL_PROGRAM_FORMAT_CUBIN = 3,  /* a cubin for the device's architecture (cuda) */
    HAL_PROGRAM_FORMAT_FATBIN = 4, /* a fatbin (cuda) */
    HAL_PROGRAM_FORMAT_NEFF = 5,   /* a Neuron executable file (trainium) */
    /* Since 1.3: a StableHLO module, MLIR text or bytecode (see "StableHLO programs"). */
    HAL_PROGRAM_FORMAT_STABLEHLO = 6,
    HAL_PROGRAM_FORMAT_COUNT, /* one past the last format the core knows by name */
    /* Since 1.3: formats a backend names itself, opaque to the core. */
    HAL_PROGRAM_FORMAT_VENDOR_FIRST = 24,
    HAL_PROGRAM_FORMAT_VENDOR_LAST = 31,
    HAL_PROGRAM_FORMAT_FORCE_U32 = 0x7fffffff
} hal_program_format_t;

/* Kernel arguments. */
typedef enum hal_kernel_arg_kind {
    HAL_KERNEL_ARG_NONE = 0,
    HAL_KERNEL_ARG_POINTER = 1, /* memory allocated through the HAL on the stream's backend */
    HAL_KERNEL_ARG_SCALAR = 2,  /* bytes passed by value */
    HAL_KERNEL_ARG_TENSOR = 3,  /* since 1.3: a pointer with the tensor it holds (value.tensor) */
    HAL_KERNEL_ARG_FORCE_U32 = 0x7fffffff
} hal_kernel_arg_kind_t;

#define HAL_KERNEL_SCALAR_MAX 16  /* bytes of the largest scalar argument */
#define HAL_TENSOR_RANK_MAX   8   /* dimensions of a tensor argument (since 1.3) */
#define HAL_KERNEL_ARGS_MAX   64  /* arguments of one launch */
#define HAL_KERNEL_NAME_MAX   256 /* bytes of a kernel name, NUL included */

/* Since 1.3: a dense tensor in row-major order (the last dimension varies fastest, no padding),
 * as a StableHLO program's parameters and results are. dtype is one of the collectives' types or
 * HAL_DTYPE_BOOL / HAL_DTYPE_I16 / HAL_DTYPE_U16 (one, two and two bytes per element); rank 0 is a
 * scalar. */
typedef struct hal_tensor_desc {
    hal_dtype_t dtype;
    uint32_t rank;
    int64_t dims[HAL_TENSOR_RANK_MAX]; /* dims[0..rank-1], each >= 0 */
} hal_tensor_desc_t;

typedef struct hal_kernel_arg {
    hal_kernel_arg_kind_t kind;
    /* Scalars: bytes of value.bytes that are passed (1..HAL_KERNEL_SCALAR_MAX). Pointers: 0 for
     * "somewhere inside its allocation", or the bytes from value.ptr the kernel may touch
     * (checked against the allocation). Tensors: 0, or the tensor's bytes (the core computes
     * them from the descriptor and checks them against the allocation either way). */
    uint32_t size;
    union {
        void *ptr; /* POINTER: a HAL allocation of the stream's backend (interior pointers too),
                    * or NULL */
        uint8_t bytes[HAL_KERNEL_SCALAR_MAX]; /* SCALAR, in the host's byte order */
        int64_t i64;
        uint64_t u64;
        double f64;
        float f32;
        int32_t i32;
        struct {
            void *ptr;                     /* as for POINTER; NULL only for a 0-byte tensor */
            const hal_tensor_desc_t *desc; /* read during hal_kernel_launch only */
        } tensor;                          /* TENSOR */
    } value;
} hal_kernel_arg_t;

/* Initialisers: HAL_KERNEL_ARG_PTR(p, bytes), HAL_KERNEL_ARG_I64(v), ... */
#define HAL_KERNEL_ARG_PTR(p, bytes) \
    ((hal_kernel_arg_t){ .kind = HAL_KERNEL_ARG_POINTER, .size = (bytes), .value.ptr = (p) })
#define HAL_KERNEL_ARG_I64(v) \
    ((hal_kernel_arg_t){ .kind = HAL_KERNEL_ARG_SCALAR, .size = 8, .value.i64 = (v) })
#define HAL_KERNEL_ARG_U64(v) \
    ((hal_kernel_arg_t){ .kind = HAL_KERNEL_ARG_SCALAR, .size = 8, .value.u64 = (v) })
#define HAL_KERNEL_ARG_F64(v) \
    ((hal_kernel_arg_t){ .kind = HAL_KERNEL_ARG_SCALAR, .size = 8, .value.f64 = (v) })
#define HAL_KERNEL_ARG_F32(v) \
    ((hal_kernel_arg_t){ .kind = HAL_KERNEL_ARG_SCALAR, .size = 4, .value.f32 = (v) })
#define HAL_KERNEL_ARG_I32(v) \
    ((hal_kernel_arg_t){ .kind = HAL_KERNEL_ARG_SCALAR, .size = 4, .value.i32 = (v) })
#define HAL_KERNEL_ARG_TENSOR_OF(p, d)                  \
    ((hal_kernel_arg_t){ .kind = HAL_KERNEL_ARG_TENSOR, \
                         .size = 0,                     \
                         .value.tensor.ptr = (p),       \
                         .value.tensor.desc = (d) })

/* What is known of a kernel (hal_kernel_get_info). */
typedef struct hal_kernel_info {
    size_t struct_size;
    const void *next;
    char name[HAL_KERNEL_NAME_MAX];
    /* Arguments the format declares, or UINT32_MAX when the format carries no signature (then
     * launches are not checked against one). */
    uint32_t nargs;
    uint32_t reserved;
    struct {
        hal_kernel_arg_kind_t kind;
        uint32_t size; /* scalars: bytes; pointers: 0; tensors: the tensor's bytes */
    } args[HAL_KERNEL_ARGS_MAX];
} hal_kernel_info_t;

/* Since 1.3: the tensors of a kernel whose arguments are tensors (a StableHLO program's `main`),
 * from hal_kernel_get_tensor_info. */
typedef struct hal_kernel_tensor_info {
    size_t struct_size;
    const void *next;
    uint32_t ninputs;  /* arguments [0, ninputs) are the function's parameters */
    uint32_t noutputs; /* arguments [ninputs, ninputs + noutputs) are its results */
    hal_tensor_desc_t tensors[HAL_KERNEL_ARGS_MAX]; /* argument i's tensor */
    /* For result r (index r, not ninputs + r): the parameter whose buffer it must be written to
     * (the module declared it must-alias: pass that parameter's pointer for it), or -1. */
    int32_t aliases[HAL_KERNEL_ARGS_MAX];
} hal_kernel_tensor_info_t;

#define HAL_KERNEL_TENSOR_INFO_INIT                     \
    {                                                   \
        .struct_size = sizeof(hal_kernel_tensor_info_t) \
    }

#define HAL_KERNEL_INFO_INIT                     \
    {                                            \
        .struct_size = sizeof(hal_kernel_info_t) \
    }

/* How a launch is shaped: grid[i] blocks of block[i] threads along each axis (every entry at
 * least 1). Host kernels run each block once and see block[] as a hint; shared_bytes is
 * per-block scratch memory (0 on backends without it). */
typedef struct hal_launch_config {
    size_t struct_size;
    const void *next;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_bytes;
    uint32_t reserved;
} hal_launch_config_t;

#define HAL_LAUNCH_CONFIG_INIT(gx, gy, gz)                                                   \
    {                                                                                        \
        .struct_size = sizeof(hal_launch_config_t), .grid = { (gx), (gy), (gz) }, .block = { \
            1,                                                                               \
            1,                                                                               \
            1                                                                                \
        }                                                                                    \
    }

/* ---- The host calling convention (HAL_PROGRAM_FORMAT_HOST_ELF) ------------------------------
 * A kernel is an exported C function of type hal_host_kernel_fn_t. A launch calls it once per
 * block, possibly from several threads at once (blocks of one launch run concurrently and in no
 * particular order; the next launch on the stream starts after every block returned).
 * - ctx describes the block: its index, the grid, the block shape, and set_error.
 * - args[i] points to argument i: for a pointer argument to a `void *` holding the pointer, for a
 *   scalar to its bytes (as cuLaunchKernel's kernelParams). The argument array and what it
 *   points to are valid during the call only.
 * - A block returns HAL_OK, or an error status after calling ctx->set_error with the detail: the
 *   launch's later blocks may be skipped, and the first error latches on the stream.
 * - A kernel must not call the HAL on the stream it runs on, and must not block waiting for
 *   later work of that stream.
 * A program may export, for a kernel `k`, a NUL-terminated string `hal_signature_k`: one letter
 * per argument, 'p' a pointer, or a scalar size in bytes as a digit ('1', '2', '4', '8') or
 * 'x' (16 bytes). hal_kernel_get_info reports it and launches are checked against it.
 * GPU images (PTX, cubin, fatbin) carry the same string as a device global of that name
 * (`extern "C" __device__ char hal_signature_k[] = "p88";`); hal/hal_kernel_signature.h parses
 * it for backends. */
typedef struct hal_host_kernel_ctx {
    size_t struct_size;
    uint32_t block_index[3];
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t nargs;
    void *shared; /* shared_bytes of scratch memory for this block, or NULL */
    /* Leaves the detail of the error the block is about to return, printf-style. */
    void (*set_error)(const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 1, 2)))
#endif
        ;
} hal_host_kernel_ctx_t;

typedef hal_status_t (*hal_host_kernel_fn_t)(const hal_host_kernel_ctx_t *ctx, void *const *args);

/* ---- StableHLO programs (HAL_PROGRAM_FORMAT_STABLEHLO, since 1.3) ----------------------------
 * The image is a StableHLO module, as MLIR text (UTF-8, NUL terminator optional) or MLIR bytecode,
 * with one public function `main` whose parameters and results are tensors (no tuples, no
 * tokens, static shapes). A result the module declares must-alias to a parameter
 * (`tf.aliasing_output = <result index>` among the parameter's attributes, the convention XLA
 * reads) is written to that parameter's buffer: in-place updates of optimizer state and buffers.
 * - Creating the program compiles the module, which may take seconds; backends cache compiled
 *   code (the trainium backend keeps NEFFs on disk, keyed by the module, the compiler flags and
 *   the compiler's version). A module the compiler refuses is HAL_ERROR_INVALID_ARGUMENT with
 *   the compiler's message, or where it wrote one, the path of its log.
 * - The program has one kernel, "main". hal_kernel_get_info reports nargs = parameters +
 *   results, every argument of kind HAL_KERNEL_ARG_TENSOR with its bytes;
 *   hal_kernel_get_tensor_info gives each tensor's dtype and shape and the aliases.
 * - Binding: a launch passes the parameters in order, then the results in order, each as a
 *   HAL_KERNEL_ARG_TENSOR (HAL_KERNEL_ARG_TENSOR_OF) whose descriptor matches the module's:
 *   same dtype, rank and dimensions. A mismatch is HAL_ERROR_INVALID_ARGUMENT naming the argument
 *   (its index, parameter or result, the tensor given and the tensor expected), and nothing is
 *   launched. An aliased result is passed its parameter's pointer (checked).
 * - The grid and block are (1, 1, 1): one launch runs the function once. Results are written
 *   when the launch completes in stream order, like any kernel's stores; a parameter not aliased
 *   is only read. Results that are not aliased must not overlap parameters or each other. */

/* ---- Functions ----------------------------------------------------------------------------- */

/* Loads a program on a device.
 * [in]  device   the device.
 * [in]  format   the image's format; the device must list it in program_formats.
 * [in]  image    the image bytes (copied or consumed during the call: the caller may free it
 *                afterwards).
 * [in]  size     bytes of image (> 0).
 * [out] program  the new program.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (NULL image or program,
 * size 0, a corrupt image: the detail names the native call that refused it);
 * HAL_ERROR_UNSUPPORTED (a format the device does not load, or a device without
 * HAL_DEVICE_CAP_PROGRAMS: nothing is created); HAL_ERROR_OUT_OF_HOST_MEMORY,
 * HAL_ERROR_OUT_OF_DEVICE_MEMORY; HAL_ERROR_DEVICE_LOST. On failure *program is untouched.
 * Thread safety: safe. */
HAL_API hal_status_t hal_program_create(hal_device_t device, hal_program_format_t format,
                                        const void *image, size_t size, hal_program_t *program);

/* Destroys a program and its kernels. Launches already enqueued still run (see the top of
 * this header); the handles are invalid at once.
 * [in] program  the program (NULL is a no-op).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE.
 * Thread safety: safe, but not concurrently with calls that use the program or its kernels. */
HAL_API hal_status_t hal_program_destroy(hal_program_t program);

/* Looks up a kernel by name. The same name returns the same handle each time.
 * [in]  program  the program.
 * [in]  name     the kernel's name (shorter than HAL_KERNEL_NAME_MAX).
 * [out] kernel   the kernel, valid until the program is destroyed.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (NULL name or kernel, a
 * name too long); HAL_ERROR_NOT_FOUND (the program has no such kernel: the detail names the
 * native call).
 * Thread safety: safe. */
HAL_API hal_status_t hal_program_get_kernel(hal_program_t program, const char *name,
                                            hal_kernel_t *kernel);

/* Describes a kernel: its name and, where the format carries one, its argument signature.
 * [in]     kernel  the kernel.
 * [in,out] info    struct_size must be set (HAL_KERNEL_INFO_INIT).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (info NULL or too small).
 * Thread safety: safe. */
HAL_API hal_status_t hal_kernel_get_info(hal_kernel_t kernel, hal_kernel_info_t *info);

/* Enqueues a launch of a kernel. Pointer arguments are resolved like every other pointer of the
 * API: each must lie in memory allocated through the HAL on the stream's backend (and, with
 * size > 0, its range inside that allocation); arguments are copied, so the array may be reused
 * at once.
 * [in] stream  a stream of the kernel's device.
 * [in] kernel  the kernel.
 * [in] config  the grid (HAL_LAUNCH_CONFIG_INIT).
 * [in] args    nargs arguments (NULL when nargs is 0).
 * [in] nargs   at most HAL_KERNEL_ARGS_MAX.
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (a stream of another
 * device, config NULL or too small, a zero grid or block dimension, too many arguments, an
 * unknown kind, a scalar size out of range, a pointer outside the HAL's memory, memory of another
 * backend or device memory of another device, a range past its allocation, an argument list
 * that does not match the kernel's signature, a request the backend cannot meet such as too
 * many shared_bytes); a sticky error already latched on the stream.
 * Thread safety: safe for different streams; calls on one stream need external ordering. */
HAL_API hal_status_t hal_kernel_launch(hal_stream_t stream, hal_kernel_t kernel,
                                       const hal_launch_config_t *config,
                                       const hal_kernel_arg_t *args, uint32_t nargs);

/* Since 1.3: the tensors of a kernel whose arguments are tensors (a StableHLO program's `main`).
 * [in]     kernel  the kernel.
 * [in,out] info    struct_size must be set (HAL_KERNEL_TENSOR_INFO_INIT).
 * Returns: HAL_OK; HAL_ERROR_INVALID_HANDLE; HAL_ERROR_INVALID_ARGUMENT (info NULL or too small);
 * HAL_ERROR_UNSUPPORTED (a kernel whose arguments are not tensors: nothing written).
 * Thread safety: safe. */
HAL_API hal_status_t hal_kernel_get_tensor_info(hal_kernel_t kernel,
                                                hal_kernel_tensor_info_t *info);

/* "host_elf", "ptx", "cubin", "fatbin", "neff", "stablehlo"; "vendor" for the vendor range;
 * "unknown" for other values.
 * Thread safety: safe. */
HAL_API const char *hal_program_format_name(hal_program_format_t format);

#ifdef __cplusplus
}
#endif

#endif /* HAL_PROGRAM_H */
