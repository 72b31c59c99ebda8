/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: programs (host shared objects) and kernel launches. An image is written to an
 * anonymous memfd and loaded from /proc/self/fd (the fd open while it is loaded), so it never lands
 * in a directory another user could write; its kernels follow the host calling convention of
 * hal_program.h. A launch is a work task on the stream: the worker that reaches it runs its blocks
 * with the device's block pool (cpu_blocks.c). A program stays loaded until it is destroyed and the
 * last launch that uses it has run. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hal/hal_kernel_signature.h"
#include "hal_backends/cpu/cpu_internal.h"

#if defined(__x86_64__)
#define CPU_ELF_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define CPU_ELF_MACHINE EM_AARCH64
#else
#define CPU_ELF_MACHINE EM_NONE /* unknown host: the machine is not checked */
#endif

/* Largest per-block scratch a launch may ask for (hal_launch_config_t.shared_bytes). */
#define CPU_SHARED_MAX (UINT32_C(1) << 20)

typedef struct cpu_kernel {
    struct cpu_kernel *next;
    hal_host_kernel_fn_t fn;
} cpu_kernel_t;

typedef struct cpu_program {
    cpu_device_t *device;
    void *dl;
    /* The image's memfd, open while the library is loaded: the dynamic loader knows a library
     * by its path, so two programs loaded at once must not both be /proc/self/fd/N. */
    int fd;
    char path[64];
    _Atomic uint32_t refs; /* the owner's, and one per launch not yet run */
    cpu_kernel_t *kernels; /* written by program_get_kernel, which the core serialises */
} cpu_program_t;

static void program_release(cpu_program_t *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    dlclose(p->dl);
    /* A library the loader keeps (one marked NODELETE, e.g. by C++ unique symbols) keeps its
     * path too: its fd stays open, so no later program gets that path and this library. */
    void *still = dlopen(p->path, RTLD_NOW | RTLD_NOLOAD);
    if (still)
        dlclose(still);
    else
        close(p->fd);
    for (cpu_kernel_t *k = p->kernels, *next; k; k = next) {
        next = k->next;
        free(k);
    }
    free(p);
}

/* Why the image is not a shared object for this host, or NULL. */
static const char *elf_problem(const void *image, size_t size)
{
    const unsigned char *b = image;
    if (size < sizeof(Elf64_Ehdr) || memcmp(b, ELFMAG, SELFMAG) != 0)
        return "it does not start with an ELF header";
    if (b[EI_CLASS] != ELFCLASS64)
        return "it is not a 64-bit ELF file (the cpu backend runs on 64-bit hosts)";
    Elf64_Ehdr hdr;
    memcpy(&hdr, image, sizeof(hdr)); /* the image need not be aligned */
    const Elf64_Ehdr *h = &hdr;
    if (h->e_type != ET_DYN)
        return "it is not a shared object (e_type is not ET_DYN)";
    if (CPU_ELF_MACHINE != EM_NONE && h->e_machine != CPU_ELF_MACHINE)
        return "it is built for another machine (e_machine)";
    /* The dynamic loader maps segments without checking them against the file's length: a
     * truncated image would fault (SIGBUS) on first touch instead of failing to load. */
    if (h->e_phentsize != sizeof(Elf64_Phdr) || h->e_phoff > size ||
        (size - h->e_phoff) / sizeof(Elf64_Phdr) < h->e_phnum)
        return "its program headers lie outside the image (truncated?)";
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(b + h->e_phoff);
    for (unsigned i = 0; i < h->e_phnum; i++) {
        Elf64_Phdr seg;
        memcpy(&seg, &ph[i], sizeof(seg)); /* the headers need not be aligned in the buffer */
        if (seg.p_type == PT_LOAD && (seg.p_offset > size || seg.p_filesz > size - seg.p_offset))
            return "a loadable segment lies outside the image (truncated?)";
    }
    return NULL;
}

hal_status_t cpu_program_create(void *device_, hal_program_format_t format, const void *image,
                                size_t size, void **out)
{
    cpu_device_t *device = device_;
    cpu_backend_t *backend = device->backend;
    (void)format; /* the core admits only HAL_PROGRAM_FORMAT_HOST_ELF */
    const char *problem = elf_problem(image, size);
    if (problem) {
        cpu_set_error(backend, "the image (%zu bytes) is not a host shared object: %s", size,
                      problem);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    cpu_program_t *p = calloc(1, sizeof(*p));
    if (!p) {
        cpu_set_error(backend, "calloc(%zu) failed for a program", sizeof(*p));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    int fd = memfd_create("hal-cpu-program", MFD_CLOEXEC);
    if (fd < 0) {
        cpu_set_error(backend, "memfd_create failed for a program image: %s", strerror(errno));
        free(p);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    size_t written = 0;
    while (written < size) {
        ssize_t n = write(fd, (const char *)image + written, size - written);
        if (n <= 0) {
            cpu_set_error(backend, "writing the program image to its memfd failed: %s",
                          n < 0 ? strerror(errno) : "no progress");
            close(fd);
            free(p);
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
        written += (size_t)n;
    }
    snprintf(p->path, sizeof(p->path), "/proc/self/fd/%d", fd);
    dlerror();
    p->dl = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
    if (!p->dl) {
        const char *why = dlerror();
        cpu_set_error(backend, "dlopen of the program image failed: %s", why ? why : "?");
        close(fd);
        free(p);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    p->fd = fd;
    p->device = device;
    atomic_init(&p->refs, 1);
    *out = p;
    return HAL_OK;
}

void cpu_program_destroy(void *program)
{
    program_release(program);
}

/* Parses "hal_signature_<name>" ("pp8": two pointers and an 8-byte scalar). */
static hal_status_t parse_signature(cpu_backend_t *backend, const char *name, const char *sig,
                                    hal_kernel_info_t *info)
{
    uint32_t bad = 0;
    if (hal_kernel_signature_parse(sig, info, &bad) == HAL_OK)
        return HAL_OK;
    if (bad == HAL_KERNEL_ARGS_MAX)
        cpu_set_error(backend, "hal_signature_%s has more than %d arguments", name,
                      HAL_KERNEL_ARGS_MAX);
    else
        cpu_set_error(backend, "hal_signature_%s is malformed at '%c' (argument %u): %s", name,
                      sig[bad], bad, HAL_KERNEL_SIGNATURE_HELP);
    return HAL_ERROR_INVALID_ARGUMENT;
}

hal_status_t cpu_program_get_kernel(void *program, const char *name, void **kernel,
                                    hal_kernel_info_t *info)
{
    cpu_program_t *p = program;
    cpu_backend_t *backend = p->device->backend;
    dlerror();
    void *sym = dlsym(p->dl, name);
    if (!sym) {
        const char *why = dlerror();
        cpu_set_error(backend, "dlsym(\"%s\") found no such kernel in the program: %s", name,
                      why ? why : "the symbol is NULL");
        return HAL_ERROR_NOT_FOUND;
    }
    char sig_name[HAL_KERNEL_NAME_MAX + 16];
    snprintf(sig_name, sizeof(sig_name), "hal_signature_%s", name);
    const char *sig = dlsym(p->dl, sig_name);
    info->nargs = UINT32_MAX;
    if (sig) {
        hal_status_t st = parse_signature(backend, name, sig, info);
        if (st != HAL_OK)
            return st;
    }
    cpu_kernel_t *k = calloc(1, sizeof(*k));
    if (!k) {
        cpu_set_error(backend, "calloc(%zu) failed for a kernel", sizeof(*k));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    /* POSIX guarantees that a dlsym result converts to a function pointer. */
    memcpy(&k->fn, &sym, sizeof(k->fn));
    k->next = p->kernels;
    p->kernels = k;
    *kernel = k;
    return HAL_OK;
}

/* What a queued launch holds until its worker runs it. */
typedef struct cpu_launch {
    cpu_program_t *program;
    hal_host_kernel_fn_t fn;
    uint32_t grid[3], block[3];
    uint32_t shared_bytes;
    uint32_t nargs;
    void *values[HAL_KERNEL_ARGS_MAX]; /* values[i] points into storage[i] */
    union {
        void *ptr;
        uint8_t bytes[HAL_KERNEL_SCALAR_MAX];
    } storage[HAL_KERNEL_ARGS_MAX];
    char name[HAL_KERNEL_NAME_MAX];
} cpu_launch_t;

static hal_status_t run_block(void *arg, uint64_t block, void *scratch)
{
    const cpu_launch_t *l = arg;
    uint64_t gx = l->grid[0], gy = l->grid[1];
    hal_host_kernel_ctx_t ctx = {
        .struct_size = sizeof(ctx),
        .block_index = { (uint32_t)(block % gx), (uint32_t)(block / gx % gy),
                         (uint32_t)(block / (gx * gy)) },
        .grid = { l->grid[0], l->grid[1], l->grid[2] },
        .block = { l->block[0], l->block[1], l->block[2] },
        .nargs = l->nargs,
        .shared = scratch,
        .set_error = cpu_block_set_error,
    };
    return l->fn(&ctx, l->values);
}

/* Starts the device's block pool at its first launch; NULL when out of host memory. */
static cpu_pool_t *device_pool(cpu_device_t *device)
{
    cpu_pool_t *pool = atomic_load_explicit(&device->pool, memory_order_acquire);
    if (pool)
        return pool;
    pthread_mutex_lock(&device->pool_lock);
    pool = atomic_load_explicit(&device->pool, memory_order_relaxed);
    if (!pool) {
        pool = cpu_pool_create(device->backend->config.kernel_threads, device->index);
        atomic_store_explicit(&device->pool, pool, memory_order_release);
    }
    pthread_mutex_unlock(&device->pool_lock);
    return pool;
}

static hal_status_t run_launch(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    cpu_launch_t *l = *(cpu_launch_t **)payload;
    hal_status_t st = stream_status;
    if (st == HAL_OK) {
        cpu_device_t *device = (cpu_device_t *)hq_stream_device(stream);
        cpu_job_t job = {
            .total = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2],
            .scratch_bytes = l->shared_bytes,
            .run = run_block,
            .arg = l,
        };
        cpu_pool_t *pool = device_pool(device);
        if (pool) {
            st = cpu_pool_run(pool, &job);
        } else {
            st = HAL_ERROR_OUT_OF_HOST_MEMORY;
            snprintf(job.msg, sizeof(job.msg), "the device's block pool could not be started");
        }
        if (st != HAL_OK)
            hq_task_error("kernel '%s' failed: %s", l->name, job.msg);
    }
    program_release(l->program);
    free(l);
    return st;
}

hal_status_t cpu_kernel_launch(void *stream, void *program, void *kernel,
                               const hal_backend_launch_t *launch)
{
    cpu_program_t *p = program;
    cpu_backend_t *backend = p->device->backend;
    if (launch->shared_bytes > CPU_SHARED_MAX) {
        cpu_set_error(backend, "shared_bytes %u exceeds the cpu backend's %u per block",
                      launch->shared_bytes, CPU_SHARED_MAX);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    /* A failed stream refuses the launch as it refuses copies (the task below would be run on
     * error only to release what it holds). */
    hal_status_t latched = hq_stream_latched(stream);
    if (latched != HAL_OK)
        return latched;
    cpu_launch_t *l = malloc(sizeof(*l));
    if (!l) {
        cpu_set_error(backend, "malloc(%zu) failed for a kernel launch", sizeof(*l));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    l->program = p;
    l->fn = ((cpu_kernel_t *)kernel)->fn;
    memcpy(l->grid, launch->grid, sizeof(l->grid));
    memcpy(l->block, launch->block, sizeof(l->block));
    l->shared_bytes = launch->shared_bytes;
    l->nargs = launch->nargs;
    for (uint32_t i = 0; i < launch->nargs; i++) {
        const hal_backend_kernel_arg_t *a = &launch->args[i];
        if (a->kind == HAL_KERNEL_ARG_POINTER)
            l->storage[i].ptr = a->ptr.ptr; /* host-addressable: the address itself */
        else
            memcpy(l->storage[i].bytes, a->bytes, sizeof(l->storage[i].bytes));
        l->values[i] = &l->storage[i];
    }
    snprintf(l->name, sizeof(l->name), "%s", launch->kernel_name ? launch->kernel_name : "?");
    atomic_fetch_add(&p->refs, 1);
    hal_status_t st = hq_stream_enqueue(stream, run_launch, &l, sizeof(l), HQ_TASK_RUN_ON_ERROR);
    if (st != HAL_OK) {
        program_release(p);
        free(l);
    }
    return st;
}
