/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: programs (PTX, cubin, fatbin) and kernel launches.
 *
 * Through the CUDA runtime's library API (cudaLibraryLoadData, cudaLibraryGetKernel, and
 * cudaLaunchKernelExC, which takes the cudaKernel_t as its function): the runtime the backend
 * already loads, with context-independent loading, so the backend opens no second library.
 *
 * Loading is eager for the device: after cudaLibraryLoadData the program's kernels are loaded
 * into the device's context (cudaFuncGetAttributes), so that a PTX that does not compile or a
 * cubin for another architecture fails hal_program_create and not the first launch (the runtime
 * loads lazily by default).
 *
 * Signatures: a program may carry, for a kernel k, a device global "hal_signature_k" holding
 * the signature string of hal_program.h (`extern "C" __device__ char hal_signature_k[] = "p88";`).
 * Without one the kernel has no HAL signature; its launches are still checked against the
 * parameter sizes the runtime reports (cudaFuncGetParamInfo): a pointer is 8 bytes.
 *
 * Launches go to the stream like copies (cuda_stream.c): issued at once in direct mode, queued
 * as a node in deferred mode. Destroying a program does not wait: it records a mark on every
 * stream of the device (behind every launch enqueued so far, which can only be on those
 * streams) and the library is unloaded once all of them were reached (cuda_reap_unloads, run
 * from later program calls, device synchronisation and device close). */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/hal_kernel_signature.h"
#include "hal_backends/cuda/cuda_internal.h"

/* The dynamic shared memory a kernel gets without opting in (cudaFuncSetAttribute). */
#define CUDA_DEFAULT_DYNAMIC_SHARED (48u * 1024u)

typedef struct cuda_kernel {
    cudaKernel_t h;
    uint32_t nparams; /* cudaFuncGetParamInfo */
    uint32_t param_size[HAL_KERNEL_ARGS_MAX];
    int max_threads;                /* cudaFuncAttributes.maxThreadsPerBlock */
    size_t static_shared;           /* cudaFuncAttributes.sharedSizeBytes */
    pthread_mutex_t opt_in_lock;    /* launches on several streams may opt in at once */
    _Atomic uint32_t shared_opt_in; /* dynamic shared bytes set with cudaFuncSetAttribute */
    struct cuda_kernel *next;
} cuda_kernel_t;

typedef struct cuda_program {
    cuda_device_t *device;
    cudaLibrary_t lib;
    pthread_mutex_t lock; /* kernels */
    cuda_kernel_t *kernels;
} cuda_program_t;

/* A destroyed program waiting for its launches (cuda_device_t.unloads). */
typedef struct cuda_pending_unload {
    cudaLibrary_t lib;
    size_t nmarks;
    cuda_mark_t **marks; /* one per stream of the device at destroy time; NULL: not recorded */
    struct cuda_pending_unload *next;
} cuda_pending_unload_t;

/* A launch as issued, or as queued in deferred mode (then it may run after the program was
 * destroyed: it holds the native kernel, alive until the library is unloaded, which waits for
 * the launch, and a copy of the name, made only when queued). */
struct cuda_launch {
    cudaKernel_t kernel;
    char name[HAL_KERNEL_NAME_MAX]; /* for messages of a queued launch */
    cudaLaunchConfig_t config;
    uint32_t nargs;
    void *argv[HAL_KERNEL_ARGS_MAX];
    uint8_t values[HAL_KERNEL_ARGS_MAX][HAL_KERNEL_SCALAR_MAX];
};

/* ---- images -------------------------------------------------------------------------------- */

/* A fatbin's header (fatbinary.h of the toolkit; the layout nvcc writes). */
#define CUDA_FATBIN_MAGIC 0xBA55ED50u
typedef struct cuda_fatbin_header {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
} cuda_fatbin_header_t;

hal_status_t cuda_image_check(hal_program_format_t format, const void *image, size_t size,
                              char *msg, size_t msg_size)
{
    if (format == HAL_PROGRAM_FORMAT_FATBIN) {
        cuda_fatbin_header_t h;
        if (size < sizeof(h)) {
            snprintf(msg, msg_size, "a fatbin of %zu bytes is shorter than its header", size);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
        memcpy(&h, image, sizeof(h));
        if (h.magic != CUDA_FATBIN_MAGIC) {
            snprintf(msg, msg_size, "not a fatbin: magic 0x%08x, expected 0x%08x", h.magic,
                     CUDA_FATBIN_MAGIC);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
        uint64_t whole = (uint64_t)h.header_size + h.fat_size;
        if (h.fat_size > UINT64_MAX - h.header_size || whole > size) {
            snprintf(msg, msg_size, "the fatbin's header declares %llu bytes; the image has %zu",
                     (unsigned long long)whole, size);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
        return HAL_OK;
    }
    if (format == HAL_PROGRAM_FORMAT_CUBIN) {
        Elf64_Ehdr e;
        if (size < sizeof(e) || memcmp(image, ELFMAG, SELFMAG) != 0) {
            snprintf(msg, msg_size, "not a cubin: no ELF header in %zu bytes", size);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
        memcpy(&e, image, sizeof(e));
        if (e.e_ident[EI_CLASS] != ELFCLASS64) {
            snprintf(msg, msg_size, "not a cubin: ELF class %u, cubins are ELFCLASS64",
                     (unsigned)e.e_ident[EI_CLASS]);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
        /* The section and program header tables end the file (nvcc's layout); both must fit. */
        uint64_t sections = e.e_shoff + (uint64_t)e.e_shnum * e.e_shentsize;
        uint64_t segments = e.e_phoff + (uint64_t)e.e_phnum * e.e_phentsize;
        uint64_t whole = sections > segments ? sections : segments;
        if (e.e_shoff > size || e.e_phoff > size || whole > size) {
            snprintf(msg, msg_size, "the cubin's ELF header declares %llu bytes; the image has %zu",
                     (unsigned long long)whole, size);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
        return HAL_OK;
    }
    return HAL_OK;
}

static const char *format_name(hal_program_format_t format)
{
    switch (format) {
    case HAL_PROGRAM_FORMAT_PTX:
        return "PTX";
    case HAL_PROGRAM_FORMAT_CUBIN:
        return "cubin";
    case HAL_PROGRAM_FORMAT_FATBIN:
        return "fatbin";
    default:
        return "unknown";
    }
}

/* A runtime error while loading or looking up: a bad image is the caller's. */
static hal_status_t load_status(hal_status_t mapped, cudaError_t err)
{
    switch (err) {
    case cudaErrorInvalidPtx:
    case cudaErrorInvalidKernelImage:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorInvalidSource:
    case cudaErrorSharedObjectInitFailed:
    case cudaErrorInvalidValue:
        return HAL_ERROR_INVALID_ARGUMENT;
    case cudaErrorSymbolNotFound:
        return HAL_ERROR_NOT_FOUND;
    case cudaErrorJitCompilerNotFound:
    case cudaErrorJitCompilationDisabled:
        return HAL_ERROR_UNSUPPORTED;
    default:
        return mapped;
    }
}

/* ---- programs ------------------------------------------------------------------------------ */

/* Loads every kernel of the library into the current device's context (see the top). */
static hal_status_t load_into_device(const cuda_backend_t *b, cudaLibrary_t lib, int ordinal)
{
    unsigned int count = 0;
    cudaError_t err = b->rt.LibraryGetKernelCount(&count, lib);
    if (err != cudaSuccess)
        return load_status(cuda_fail(b, err, CUDA_OP_OTHER, "cudaLibraryGetKernelCount"), err);
    if (count == 0)
        return HAL_OK;
    cudaKernel_t *kernels = calloc(count, sizeof(*kernels));
    if (kernels == NULL) {
        cuda_set_error(b, "calloc(%u kernels) failed while loading a program", count);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    hal_status_t st = HAL_OK;
    err = b->rt.LibraryEnumerateKernels(kernels, count, lib);
    if (err != cudaSuccess)
        st = load_status(cuda_fail(b, err, CUDA_OP_OTHER, "cudaLibraryEnumerateKernels"), err);
    for (unsigned int i = 0; i < count && st == HAL_OK; i++) {
        struct cudaFuncAttributes attr;
        err = b->rt.FuncGetAttributes(&attr, (const void *)kernels[i]);
        if (err != cudaSuccess)
            st = load_status(cuda_fail(b, err, CUDA_OP_OTHER,
                                       "cudaFuncGetAttributes (loading kernel %u of %u of the "
                                       "program on device %d)",
                                       i, count, ordinal),
                             err);
    }
    free(kernels);
    return st;
}

hal_status_t cuda_program_create(void *device, hal_program_format_t format, const void *image,
                                 size_t size, void **out)
{
    cuda_device_t *d = device;
    const cuda_backend_t *b = d->backend;
    char msg[CUDA_MSG_MAX];
    if (cuda_image_check(format, image, size, msg, sizeof(msg)) != HAL_OK) {
        cuda_set_error(b, "%s (checked before cudaLibraryLoadData)", msg);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    cuda_reap_unloads(d, false);
    /* PTX is read up to its NUL: a copy with one stops the runtime at the image's end. */
    char *text = NULL;
    const void *code = image;
    if (format == HAL_PROGRAM_FORMAT_PTX && memchr(image, '\0', size) == NULL) {
        text = malloc(size + 1);
        if (text == NULL) {
            cuda_set_error(b, "malloc(%zu) failed for a copy of the PTX", size + 1);
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
        memcpy(text, image, size);
        text[size] = '\0';
        code = text;
    }
    cuda_program_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        free(text);
        cuda_set_error(b, "calloc(%zu) failed for a program", sizeof(*p));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    int prev;
    hal_status_t st = HAL_OK;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = b->rt.LibraryLoadData(&p->lib, code, NULL, NULL, 0, NULL, NULL, 0);
    if (err != cudaSuccess) {
        st = load_status(cuda_fail(b, err, CUDA_OP_OTHER,
                                   "cudaLibraryLoadData(%s image of %zu bytes, device %d)",
                                   format_name(format), size, d->ordinal),
                         err);
    } else {
        st = load_into_device(b, p->lib, d->ordinal);
        if (st != HAL_OK)
            b->rt.LibraryUnload(p->lib);
    }
    cuda_guard_leave(d, prev);
    b->rt.GetLastError();
    free(text);
    if (st != HAL_OK) {
        free(p);
        return st;
    }
    p->device = d;
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return HAL_OK;
}

/* Unloads one library (its launches completed). */
static void unload(cuda_device_t *d, cudaLibrary_t lib)
{
    int prev;
    if (cuda_guard_enter(d, &prev) == cudaSuccess)
        d->backend->rt.LibraryUnload(lib);
    cuda_guard_leave(d, prev);
    d->backend->rt.GetLastError();
}

void cuda_reap_unloads(cuda_device_t *d, bool wait)
{
    pthread_mutex_lock(&d->free_lock);
    cuda_pending_unload_t **pos = &d->unloads;
    while (*pos != NULL) {
        cuda_pending_unload_t *u = *pos;
        bool reached = true;
        for (size_t i = 0; i < u->nmarks && reached; i++) {
            /* A mark that could not be recorded: only the device's end is known to be past
             * the launches. */
            if (u->marks[i] == NULL)
                reached = wait;
            else
                reached = cuda_mark_reached(d, u->marks[i], wait);
        }
        if (!reached) {
            pos = &u->next;
            continue;
        }
        *pos = u->next;
        for (size_t i = 0; i < u->nmarks; i++)
            cuda_mark_destroy(d, u->marks[i]);
        unload(d, u->lib);
        free(u->marks);
        free(u);
    }
    pthread_mutex_unlock(&d->free_lock);
}

void cuda_program_destroy(void *program)
{
    cuda_program_t *p = program;
    cuda_device_t *d = p->device;
    const cuda_backend_t *b = d->backend;
    cuda_stream_t **pinned = NULL;
    size_t n = 0;
    cuda_pending_unload_t *u = calloc(1, sizeof(*u));
    bool tracked = u != NULL && cuda_device_pin_streams(d, &pinned, &n) == HAL_OK;
    if (tracked && n > 0) {
        u->marks = calloc(n, sizeof(*u->marks));
        tracked = u->marks != NULL;
    }
    if (tracked) {
        u->lib = p->lib;
        u->nmarks = n;
        for (size_t i = 0; i < n; i++)
            if (cuda_mark_record_free(pinned[i], &u->marks[i]) != HAL_OK)
                u->marks[i] = NULL; /* unloaded at device close */
        pthread_mutex_lock(&d->free_lock);
        u->next = d->unloads;
        d->unloads = u;
        pthread_mutex_unlock(&d->free_lock);
    } else {
        /* Without memory to track its launches the library stays loaded for the life of the
         * process: unloading it under launches not yet run would fault them. */
        free(u);
    }
    cuda_device_unpin_streams(d, pinned, n);
    b->rt.GetLastError();
    cuda_kernel_t *k = p->kernels;
    while (k != NULL) {
        cuda_kernel_t *next = k->next;
        pthread_mutex_destroy(&k->opt_in_lock);
        free(k);
        k = next;
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
    cuda_reap_unloads(d, false);
}

/* ---- kernels ------------------------------------------------------------------------------- */

/* Reads the program's "hal_signature_<name>" into info; HAL_OK when it has none. */
static hal_status_t read_signature(const cuda_program_t *p, const char *name,
                                   hal_kernel_info_t *info)
{
    const cuda_backend_t *b = p->device->backend;
    char sym[HAL_KERNEL_NAME_MAX + 16];
    snprintf(sym, sizeof(sym), "hal_signature_%s", name);
    void *dptr = NULL;
    size_t bytes = 0;
    cudaError_t err = b->rt.LibraryGetGlobal(&dptr, &bytes, p->lib, sym);
    if (err == cudaErrorSymbolNotFound) {
        b->rt.GetLastError();
        return HAL_OK;
    }
    if (err != cudaSuccess)
        return cuda_fail(b, err, CUDA_OP_OTHER, "cudaLibraryGetGlobal(\"%s\")", sym);
    char sig[HAL_KERNEL_ARGS_MAX + 2];
    if (bytes == 0 || bytes > sizeof(sig)) {
        cuda_set_error(b, "%s has %zu bytes; a signature has 0..%d letters and a NUL", sym, bytes,
                       HAL_KERNEL_ARGS_MAX);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    err = b->rt.Memcpy(sig, dptr, bytes, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess)
        return cuda_fail(b, err, CUDA_OP_OTHER, "cudaMemcpy(%s, %zu bytes)", sym, bytes);
    sig[bytes] = '\0';
    uint32_t bad = 0;
    if (hal_kernel_signature_parse(sig, info, &bad) != HAL_OK) {
        if (bad == HAL_KERNEL_ARGS_MAX)
            cuda_set_error(b, "%s has more than %d arguments", sym, HAL_KERNEL_ARGS_MAX);
        else
            cuda_set_error(b, "%s is malformed at '%c' (argument %u): %s", sym, sig[bad], bad,
                           HAL_KERNEL_SIGNATURE_HELP);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    return HAL_OK;
}

/* Counts the kernel's parameters and their sizes: the runtime answers until the index passes
 * the last one. */
static hal_status_t read_params(const cuda_backend_t *b, cuda_kernel_t *k, const char *name)
{
    for (uint32_t i = 0;; i++) {
        size_t offset = 0, size = 0;
        cudaError_t err = b->rt.FuncGetParamInfo((const void *)k->h, i, &offset, &size);
        if (err == cudaErrorInvalidValue) {
            b->rt.GetLastError();
            k->nparams = i;
            return HAL_OK;
        }
        if (err != cudaSuccess)
            return cuda_fail(b, err, CUDA_OP_OTHER, "cudaFuncGetParamInfo(\"%s\", %u)", name, i);
        if (i == HAL_KERNEL_ARGS_MAX) {
            cuda_set_error(b, "kernel \"%s\" has more than %d parameters (cudaFuncGetParamInfo)",
                           name, HAL_KERNEL_ARGS_MAX);
            return HAL_ERROR_UNSUPPORTED;
        }
        k->param_size[i] = (uint32_t)size;
    }
}

/* Whether a signature agrees with the runtime's parameter list. */
static hal_status_t check_signature(const cuda_backend_t *b, const cuda_kernel_t *k,
                                    const char *name, const hal_kernel_info_t *info)
{
    if (info->nargs != k->nparams) {
        cuda_set_error(b,
                       "hal_signature_%s declares %u arguments; cudaFuncGetParamInfo counts %u "
                       "parameters",
                       name, info->nargs, k->nparams);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    for (uint32_t i = 0; i < info->nargs; i++) {
        uint32_t want = info->args[i].kind == HAL_KERNEL_ARG_POINTER ? (uint32_t)sizeof(void *)
                                                                     : info->args[i].size;
        if (want != k->param_size[i]) {
            cuda_set_error(b,
                           "hal_signature_%s: argument %u has %u bytes; cudaFuncGetParamInfo "
                           "says the parameter has %u",
                           name, i, want, k->param_size[i]);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
    }
    return HAL_OK;
}

hal_status_t cuda_program_get_kernel(void *program, const char *name, void **out,
                                     hal_kernel_info_t *info)
{
    cuda_program_t *p = program;
    cuda_device_t *d = p->device;
    const cuda_backend_t *b = d->backend;
    cuda_reap_unloads(d, false);
    cuda_kernel_t *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        cuda_set_error(b, "calloc(%zu) failed for a kernel", sizeof(*k));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    int prev;
    hal_status_t st = HAL_OK;
    cudaError_t err = cuda_guard_enter(d, &prev);
    if (err == cudaSuccess)
        err = b->rt.LibraryGetKernel(&k->h, p->lib, name);
    if (err != cudaSuccess) {
        st = load_status(
            cuda_fail(b, err, CUDA_OP_OTHER,
                      "cudaLibraryGetKernel(\"%s\") found no such kernel in the program", name),
            err);
        goto out;
    }
    struct cudaFuncAttributes attr;
    err = b->rt.FuncGetAttributes(&attr, (const void *)k->h);
    if (err != cudaSuccess) {
        st = load_status(cuda_fail(b, err, CUDA_OP_OTHER, "cudaFuncGetAttributes(\"%s\")", name),
                         err);
        goto out;
    }
    k->max_threads = attr.maxThreadsPerBlock;
    k->static_shared = attr.sharedSizeBytes;
    st = read_params(b, k, name);
    if (st != HAL_OK)
        goto out;
    info->nargs = UINT32_MAX;
    st = read_signature(p, name, info);
    if (st == HAL_OK && info->nargs != UINT32_MAX)
        st = check_signature(b, k, name, info);
out:
    cuda_guard_leave(d, prev);
    b->rt.GetLastError();
    if (st != HAL_OK) {
        free(k);
        return st;
    }
    atomic_init(&k->shared_opt_in, CUDA_DEFAULT_DYNAMIC_SHARED);
    pthread_mutex_init(&k->opt_in_lock, NULL);
    pthread_mutex_lock(&p->lock);
    k->next = p->kernels;
    p->kernels = k;
    pthread_mutex_unlock(&p->lock);
    *out = k;
    return HAL_OK;
}

/* ---- launches ------------------------------------------------------------------------------ */

/* Checks the launch against what the runtime says of the kernel and the device, and opts the
 * kernel in to more dynamic shared memory when asked for. */
static hal_status_t check_launch(const cuda_device_t *d, cuda_kernel_t *k,
                                 const hal_backend_launch_t *l)
{
    const cuda_backend_t *b = d->backend;
    if (l->nargs != k->nparams) {
        cuda_set_error(
            b, "kernel \"%s\" has %u parameters (cudaFuncGetParamInfo); the launch passes %u",
            l->kernel_name, k->nparams, l->nargs);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    for (uint32_t i = 0; i < l->nargs; i++) {
        uint32_t size =
            l->args[i].kind == HAL_KERNEL_ARG_POINTER ? (uint32_t)sizeof(void *) : l->args[i].size;
        if (size != k->param_size[i]) {
            cuda_set_error(b,
                           "argument %u of kernel \"%s\" has %u bytes; its parameter has %u "
                           "(cudaFuncGetParamInfo)",
                           i, l->kernel_name, size, k->param_size[i]);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
    }
    uint64_t threads = (uint64_t)l->block[0] * l->block[1] * l->block[2];
    if (threads > (uint64_t)k->max_threads) {
        cuda_set_error(b,
                       "a block of %llu threads; kernel \"%s\" allows %d (cudaFuncGetAttributes)",
                       (unsigned long long)threads, l->kernel_name, k->max_threads);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    uint64_t shared = (uint64_t)l->shared_bytes + k->static_shared;
    if (shared > d->prop.sharedMemPerBlockOptin) {
        cuda_set_error(b,
                       "%u bytes of dynamic shared memory and %zu static for kernel \"%s\"; "
                       "device %d has %zu per block",
                       l->shared_bytes, k->static_shared, l->kernel_name, d->ordinal,
                       d->prop.sharedMemPerBlockOptin);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (l->shared_bytes > atomic_load_explicit(&k->shared_opt_in, memory_order_acquire)) {
        pthread_mutex_lock(&k->opt_in_lock);
        cudaError_t err = cudaSuccess;
        if (l->shared_bytes > atomic_load_explicit(&k->shared_opt_in, memory_order_relaxed)) {
            err = b->rt.FuncSetAttribute((const void *)k->h,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)l->shared_bytes);
            if (err == cudaSuccess)
                atomic_store_explicit(&k->shared_opt_in, l->shared_bytes, memory_order_release);
        }
        pthread_mutex_unlock(&k->opt_in_lock);
        if (err != cudaSuccess)
            return cuda_fail(b, err, CUDA_OP_OTHER,
                             "cudaFuncSetAttribute(\"%s\", "
                             "cudaFuncAttributeMaxDynamicSharedMemorySize, %u)",
                             l->kernel_name, l->shared_bytes);
    }
    return HAL_OK;
}

/* Fills a launch record: the configuration and a copy of the arguments. */
static void launch_fill(cuda_launch_t *r, cuda_kernel_t *k, const hal_backend_launch_t *l,
                        cudaStream_t stream)
{
    r->kernel = k->h;
    r->config = (cudaLaunchConfig_t){
        .gridDim = { l->grid[0], l->grid[1], l->grid[2] },
        .blockDim = { l->block[0], l->block[1], l->block[2] },
        .dynamicSmemBytes = l->shared_bytes,
        .stream = stream,
    };
    r->nargs = l->nargs;
    for (uint32_t i = 0; i < l->nargs; i++) {
        if (l->args[i].kind == HAL_KERNEL_ARG_POINTER)
            memcpy(r->values[i], &l->args[i].ptr.ptr, sizeof(void *));
        else
            memcpy(r->values[i], l->args[i].bytes, l->args[i].size);
        r->argv[i] = r->values[i];
    }
}

static cudaError_t launch_issue(const cuda_backend_t *b, cuda_launch_t *r)
{
    return b->rt.LaunchKernelExC(&r->config, (const void *)r->kernel, r->argv);
}

/* The status of a failed launch: a configuration the kernel or device cannot run is the
 * caller's. */
static hal_status_t launch_fail(const cuda_backend_t *b, cudaError_t err, const cuda_launch_t *r,
                                const char *name, char *buf, size_t size)
{
    const cudaLaunchConfig_t *c = &r->config;
    hal_status_t st =
        cuda_fail_msg(b, err, CUDA_OP_OTHER, buf, size,
                      "cudaLaunchKernelExC(kernel \"%s\", grid %u x %u x %u, block %u x %u x %u, "
                      "%zu bytes of shared memory)",
                      name, c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y,
                      c->blockDim.z, c->dynamicSmemBytes);
    if (err == cudaErrorInvalidConfiguration || err == cudaErrorLaunchOutOfResources ||
        err == cudaErrorInvalidValue)
        return HAL_ERROR_INVALID_ARGUMENT;
    return st;
}

hal_status_t cuda_kernel_launch(void *stream, void *program, void *kernel,
                                const hal_backend_launch_t *l)
{
    cuda_stream_t *s = stream;
    cuda_device_t *d = s->device;
    const cuda_backend_t *b = d->backend;
    cuda_kernel_t *k = kernel;
    (void)program;
    hal_status_t st = check_launch(d, k, l);
    if (st != HAL_OK)
        return st;
    uint32_t state = atomic_load_explicit(&s->state, memory_order_acquire);
    if (state & CUDA_STREAM_LATCHED)
        return cuda_stream_latched(s);
    if (state == 0) {
        cuda_launch_t r;
        launch_fill(&r, k, l, s->h);
        int prev;
        cudaError_t err = cuda_guard_enter(d, &prev);
        if (err == cudaSuccess)
            err = launch_issue(b, &r);
        cuda_guard_leave(d, prev);
        if (err == cudaSuccess)
            return HAL_OK;
        char msg[CUDA_MSG_MAX];
        st = launch_fail(b, err, &r, l->kernel_name, msg, sizeof(msg));
        cuda_set_error(b, "%s", msg);
        b->rt.GetLastError();
        return st;
    }
    cuda_launch_t *r = malloc(sizeof(*r));
    cuda_node_t *node = calloc(1, sizeof(*node));
    if (r == NULL || node == NULL) {
        free(r);
        free(node);
        cuda_set_error(b, "allocating a queued kernel launch (%zu bytes) failed", sizeof(*r));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    launch_fill(r, k, l, s->h);
    snprintf(r->name, sizeof(r->name), "%s", l->kernel_name);
    node->kind = CUDA_NODE_LAUNCH;
    node->u.launch = r;
    return cuda_stream_push(s, node);
}

void cuda_launch_run(cuda_stream_t *s, cuda_launch_t *r)
{
    const cuda_backend_t *b = s->device->backend;
    pthread_mutex_lock(&s->lock);
    hal_status_t latched = s->latched;
    pthread_mutex_unlock(&s->lock);
    if (latched == HAL_OK) {
        cudaError_t err = launch_issue(b, r);
        if (err != cudaSuccess) {
            char msg[CUDA_MSG_MAX];
            hal_status_t st = launch_fail(b, err, r, r->name, msg, sizeof(msg));
            b->rt.GetLastError();
            cuda_stream_latch(s, st, msg);
        }
    }
    free(r);
}
