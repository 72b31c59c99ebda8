/* SPDX-License-Identifier: Apache-2.0 */
/* Programs and kernels front end (since 1.2): the core checks handles, formats, launch shapes
 * and arguments, resolves pointer arguments through the allocation map, checks them against a
 * kernel's signature, and tracks live programs for backend close. Loading and launching are the
 * backend's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/src/core.h"

_Static_assert(sizeof(struct hal_program_s) <= HAL_HANDLE_MAX_SIZE, "handle size");
_Static_assert(sizeof(struct hal_kernel_s) <= HAL_HANDLE_MAX_SIZE, "handle size");

#define HAL_CHECK_PROGRAM(h, call) HAL_CHECK_HANDLE(h, HAL_MAGIC_PROGRAM, "hal_program_t", call)
#define HAL_CHECK_KERNEL(h, call)  HAL_CHECK_HANDLE(h, HAL_MAGIC_KERNEL, "hal_kernel_t", call)

static const char *const format_names[HAL_PROGRAM_FORMAT_COUNT] = {
    [HAL_PROGRAM_FORMAT_HOST_ELF] = "host_elf", [HAL_PROGRAM_FORMAT_PTX] = "ptx",
    [HAL_PROGRAM_FORMAT_CUBIN] = "cubin",       [HAL_PROGRAM_FORMAT_FATBIN] = "fatbin",
    [HAL_PROGRAM_FORMAT_NEFF] = "neff",         [HAL_PROGRAM_FORMAT_STABLEHLO] = "stablehlo",
};

static bool is_vendor_format(unsigned format)
{
    return format >= HAL_PROGRAM_FORMAT_VENDOR_FIRST && format <= HAL_PROGRAM_FORMAT_VENDOR_LAST;
}

const char *hal_program_format_name(hal_program_format_t format)
{
    if ((unsigned)format < HAL_PROGRAM_FORMAT_COUNT && format_names[format])
        return format_names[format];
    if (is_vendor_format((unsigned)format))
        return "vendor";
    return "unknown";
}

/* "host_elf, ptx" for a program_formats mask, or "none". */
static void format_list(uint32_t mask, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned f = 1; f < 32; f++)
        if (mask & (1u << f)) {
            if (f < HAL_PROGRAM_FORMAT_COUNT)
                used += (size_t)snprintf(buf + used, used < size ? size - used : 0, "%s%s",
                                         used ? ", " : "", format_names[f]);
            else
                used += (size_t)snprintf(buf + used, used < size ? size - used : 0, "%svendor %u",
                                         used ? ", " : "", f);
        }
    if (!buf[0])
        snprintf(buf, size, "none");
}

hal_status_t hal_program_create(hal_device_t device, hal_program_format_t format, const void *image,
                                size_t size, hal_program_t *program)
{
    static const char call[] = "hal_program_create";
    HAL_CHECK_DEVICE(device, call);
    const hal_backend_ops_t *ops = device->ops;
    HAL_CHECK_NOT_NULL(program, ops->name, call);
    HAL_CHECK_NOT_NULL(image, ops->name, call);
    if (size == 0)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call, "size is 0");
    /* Known and vendor formats only (device.c). */
    uint32_t formats = device->props.program_formats;
    bool known = (unsigned)format < HAL_PROGRAM_FORMAT_COUNT || is_vendor_format((unsigned)format);
    if (!known || !(formats & (1u << format))) {
        char list[160];
        format_list(formats, list, sizeof(list));
        return hal_error(HAL_ERROR_UNSUPPORTED, ops->name, call,
                         "device %u does not load programs of format %d (%s); it loads: %s",
                         device->index, (int)format, hal_program_format_name(format), list);
    }
    struct hal_program_s *p = hal_handle_alloc(sizeof(*p));
    if (!p)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
    hal_status_t st =
        HAL_SLOT_CALL(ops, program_create, device->impl, format, image, size, &p->impl);
    if (st != HAL_OK) {
        hal_handle_release(p, false);
        return hal_finish(st, ops, call);
    }
    p->ops = ops;
    p->device = device;
    p->format = format;
    pthread_mutex_init(&p->lock, NULL);
    p->obj.magic = HAL_MAGIC_PROGRAM;
    pthread_mutex_lock(&device->lock);
    hal_live_insert(&device->programs, &p->link, &p->obj);
    pthread_mutex_unlock(&device->lock);
    *program = p;
    return HAL_OK;
}

void hal_program_destroy_internal(struct hal_program_s *p)
{
    bool validate = p->device->backend->validate;
    struct hal_kernel_s *k = p->kernels;
    while (k) {
        struct hal_kernel_s *next = k->next;
        free(k->tensors);
        k->tensors = NULL;
        hal_handle_release(k, validate);
        k = next;
    }
    if (p->ops->program_destroy)
        p->ops->program_destroy(p->impl);
    pthread_mutex_destroy(&p->lock);
    hal_handle_release(p, validate);
}

hal_status_t hal_program_destroy(hal_program_t program)
{
    if (!program)
        return HAL_OK;
    HAL_CHECK_PROGRAM(program, "hal_program_destroy");
    struct hal_device_s *d = program->device;
    pthread_mutex_lock(&d->lock);
    hal_live_remove(&program->link);
    pthread_mutex_unlock(&d->lock);
    hal_program_destroy_internal(program);
    return HAL_OK;
}

/* Bytes of a dense tensor, or false when the descriptor is malformed or its size overflows. */
static bool tensor_bytes(const hal_tensor_desc_t *t, size_t *bytes)
{
    size_t n = hal_dtype_bytes(t->dtype);
    if (t->rank > HAL_TENSOR_RANK_MAX || n == 0)
        return false;
    for (uint32_t d = 0; d < t->rank; d++) {
        if (t->dims[d] < 0 || (t->dims[d] > 0 && n > SIZE_MAX / (uint64_t)t->dims[d]))
            return false;
        n *= (size_t)t->dims[d];
    }
    *bytes = n;
    return true;
}

/* "f32[4, 8]" */
static void tensor_text(const hal_tensor_desc_t *t, char *buf, size_t size)
{
    static const char *const names[] = {
        [HAL_DTYPE_I8] = "i8",     [HAL_DTYPE_U8] = "u8",          [HAL_DTYPE_I32] = "i32",
        [HAL_DTYPE_U32] = "u32",   [HAL_DTYPE_I64] = "i64",        [HAL_DTYPE_U64] = "u64",
        [HAL_DTYPE_F16] = "f16",   [HAL_DTYPE_F32] = "f32",        [HAL_DTYPE_F64] = "f64",
        [HAL_DTYPE_BF16] = "bf16", [HAL_DTYPE_F8_E4M3] = "f8e4m3", [HAL_DTYPE_F8_E5M2] = "f8e5m2",
        [HAL_DTYPE_BOOL] = "bool", [HAL_DTYPE_I16] = "i16",        [HAL_DTYPE_U16] = "u16",
    };
    unsigned dt = (unsigned)t->dtype;
    const char *name = dt < sizeof(names) / sizeof(names[0]) && names[dt] ? names[dt] : NULL;
    size_t used;
    if (name)
        used = (size_t)snprintf(buf, size, "%s[", name);
    else
        used = (size_t)snprintf(buf, size, "dtype %u[", dt);
    uint32_t rank = t->rank <= HAL_TENSOR_RANK_MAX ? t->rank : HAL_TENSOR_RANK_MAX;
    for (uint32_t d = 0; d < rank; d++)
        used += (size_t)snprintf(buf + used, used < size ? size - used : 0, "%s%lld", d ? ", " : "",
                                 (long long)t->dims[d]);
    snprintf(buf + used, used < size ? size - used : 0, "%s]", t->rank > rank ? ", ..." : "");
}

static bool same_tensor(const hal_tensor_desc_t *a, const hal_tensor_desc_t *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank)
        return false;
    for (uint32_t d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    return true;
}

/* For a kernel whose arguments are tensors: asks the backend for their descriptors once, checks
 * them against the argument list, and keeps them for launches. */
static hal_status_t fetch_tensor_info(struct hal_program_s *program, struct hal_kernel_s *k)
{
    static const char call[] = "hal_program_get_kernel";
    const hal_backend_ops_t *ops = program->ops;
    bool any = false;
    for (uint32_t i = 0; k->info.nargs != UINT32_MAX && i < k->info.nargs; i++)
        any |= k->info.args[i].kind == HAL_KERNEL_ARG_TENSOR;
    if (!any)
        return HAL_OK;
    hal_kernel_tensor_info_t *t = calloc(1, sizeof(*t));
    if (!t)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
    t->struct_size = sizeof(*t);
    for (uint32_t r = 0; r < HAL_KERNEL_ARGS_MAX; r++)
        t->aliases[r] = -1; /* a backend that writes none declares none */
    hal_status_t st = HAL_SLOT_CALL(ops, kernel_get_tensor_info, program->impl, k->impl, t);
    if (st == HAL_ERROR_UNSUPPORTED)
        st = hal_error(HAL_ERROR_INTERNAL, ops->name, call,
                       "kernel '%s' takes tensors but the backend does not describe them "
                       "(kernel_get_tensor_info)",
                       k->info.name);
    else if (st != HAL_OK)
        st = hal_finish(st, ops, call);
    t->struct_size = sizeof(*t);
    t->next = NULL;
    if (st == HAL_OK && (uint64_t)t->ninputs + t->noutputs != k->info.nargs)
        st = hal_error(HAL_ERROR_INTERNAL, ops->name, call,
                       "kernel '%s': %u parameters and %u results reported for %u arguments",
                       k->info.name, t->ninputs, t->noutputs, k->info.nargs);
    for (uint32_t i = 0; st == HAL_OK && i < k->info.nargs; i++) {
        size_t bytes;
        if (k->info.args[i].kind != HAL_KERNEL_ARG_TENSOR || !tensor_bytes(&t->tensors[i], &bytes))
            st = hal_error(HAL_ERROR_INTERNAL, ops->name, call,
                           "kernel '%s': argument %u is not a well-formed tensor", k->info.name, i);
        else
            k->info.args[i].size = bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)bytes;
    }
    for (uint32_t r = 0; st == HAL_OK && r < t->noutputs; r++)
        if (t->aliases[r] >= 0 &&
            ((uint32_t)t->aliases[r] >= t->ninputs ||
             !same_tensor(&t->tensors[t->aliases[r]], &t->tensors[t->ninputs + r])))
            st = hal_error(HAL_ERROR_INTERNAL, ops->name, call,
                           "kernel '%s': result %u aliases parameter %d, which is not a "
                           "parameter of the same tensor type",
                           k->info.name, r, t->aliases[r]);
    if (st != HAL_OK) {
        free(t);
        return st;
    }
    k->tensors = t;
    return HAL_OK;
}

hal_status_t hal_program_get_kernel(hal_program_t program, const char *name, hal_kernel_t *kernel)
{
    static const char call[] = "hal_program_get_kernel";
    HAL_CHECK_PROGRAM(program, call);
    const hal_backend_ops_t *ops = program->ops;
    HAL_CHECK_NOT_NULL(name, ops->name, call);
    HAL_CHECK_NOT_NULL(kernel, ops->name, call);
    size_t len = strnlen(name, HAL_KERNEL_NAME_MAX);
    if (len == 0 || len == HAL_KERNEL_NAME_MAX)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "the kernel name is empty or not shorter than %d bytes",
                         HAL_KERNEL_NAME_MAX);
    hal_status_t st = HAL_OK;
    pthread_mutex_lock(&program->lock);
    struct hal_kernel_s *k = program->kernels;
    while (k && strcmp(k->info.name, name) != 0)
        k = k->next;
    if (!k) {
        k = hal_handle_alloc(sizeof(*k));
        if (!k) {
            st = hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, ops->name, call, "out of host memory");
        } else {
            k->info.struct_size = sizeof(k->info);
            memcpy(k->info.name, name, len + 1);
            st = HAL_SLOT_CALL(ops, program_get_kernel, program->impl, name, &k->impl, &k->info);
            k->info.struct_size = sizeof(k->info);
            k->info.next = NULL;
            if (st == HAL_OK && k->info.nargs != UINT32_MAX && k->info.nargs > HAL_KERNEL_ARGS_MAX)
                st = hal_error(HAL_ERROR_INTERNAL, ops->name, call,
                               "the backend reports %u arguments for kernel '%s' (at most %d)",
                               k->info.nargs, name, HAL_KERNEL_ARGS_MAX);
            if (st == HAL_OK)
                st = fetch_tensor_info(program, k);
            if (st != HAL_OK) {
                free(k->tensors);
                hal_handle_release(k, false);
                k = NULL;
                st = hal_finish(st, ops, call);
            } else {
                k->program = program;
                k->obj.magic = HAL_MAGIC_KERNEL;
                k->next = program->kernels;
                program->kernels = k;
            }
        }
    }
    pthread_mutex_unlock(&program->lock);
    if (k)
        *kernel = k;
    return st;
}

hal_status_t hal_kernel_get_info(hal_kernel_t kernel, hal_kernel_info_t *info)
{
    static const char call[] = "hal_kernel_get_info";
    HAL_CHECK_KERNEL(kernel, call);
    const char *backend = kernel->program->ops->name;
    if (!info || info->struct_size < sizeof(hal_kernel_info_t))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "info is NULL or its struct_size is too small");
    size_t size = info->struct_size;
    const void *next = info->next;
    memcpy(info, &kernel->info, sizeof(*info));
    info->struct_size = size;
    info->next = next;
    return HAL_OK;
}

hal_status_t hal_kernel_get_tensor_info(hal_kernel_t kernel, hal_kernel_tensor_info_t *info)
{
    static const char call[] = "hal_kernel_get_tensor_info";
    HAL_CHECK_KERNEL(kernel, call);
    const char *backend = kernel->program->ops->name;
    if (!info || info->struct_size < sizeof(hal_kernel_tensor_info_t))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "info is NULL or its struct_size is too small");
    if (!kernel->tensors)
        return hal_error(HAL_ERROR_UNSUPPORTED, backend, call,
                         "the arguments of kernel '%s' are not tensors", kernel->info.name);
    size_t size = info->struct_size;
    const void *next = info->next;
    memcpy(info, kernel->tensors, sizeof(*info));
    info->struct_size = size;
    info->next = next;
    return HAL_OK;
}

/* "argument 3 (result 1)" for messages about tensor arguments. */
static void tensor_arg_name(const hal_kernel_tensor_info_t *t, uint32_t i, char *buf, size_t size)
{
    if (i < t->ninputs)
        snprintf(buf, size, "argument %u (parameter %u)", i, i);
    else
        snprintf(buf, size, "argument %u (result %u)", i, i - t->ninputs);
}

/* Checks a tensor argument against the kernel's tensor and resolves it into *out. */
static hal_status_t resolve_tensor_arg(const hal_kernel_arg_t *a, uint32_t i,
                                       struct hal_stream_s *s, const struct hal_kernel_s *k,
                                       hal_backend_kernel_arg_t *out)
{
    static const char call[] = "hal_kernel_launch";
    const char *backend = s->ops->name;
    const hal_kernel_tensor_info_t *t = k->tensors;
    char which[48], given[160], want[160];
    const hal_tensor_desc_t *d = a->value.tensor.desc;
    if (!t)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "argument %u of kernel '%s' is a tensor; the kernel takes a %s", i,
                         k->info.name,
                         k->info.nargs == UINT32_MAX                      ? "pointer or scalar"
                         : k->info.args[i].kind == HAL_KERNEL_ARG_POINTER ? "pointer"
                                                                          : "scalar");
    tensor_arg_name(t, i, which, sizeof(which));
    size_t bytes = 0;
    if (!d || !tensor_bytes(d, &bytes))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "%s of kernel '%s': the tensor descriptor is %s", which, k->info.name,
                         d ? "malformed (rank, dtype or a dimension out of range)" : "NULL");
    if (!same_tensor(d, &t->tensors[i])) {
        tensor_text(d, given, sizeof(given));
        tensor_text(&t->tensors[i], want, sizeof(want));
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "%s of kernel '%s' is %s; the module takes %s", which, k->info.name, given,
                         want);
    }
    if (a->size != 0 && a->size != bytes)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "%s of kernel '%s': size %u does not match the tensor's %zu bytes", which,
                         k->info.name, a->size, bytes);
    out->kind = HAL_KERNEL_ARG_TENSOR;
    out->size = bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)bytes;
    if (!a->value.tensor.ptr) {
        if (bytes == 0)
            return HAL_OK;
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "%s of kernel '%s' is NULL for a tensor of %zu bytes", which, k->info.name,
                         bytes);
    }
    struct hal_device_s *owner = NULL;
    HAL_CHECK(hal_mem_resolve(a->value.tensor.ptr, bytes, s, which, call, &out->ptr, &owner));
    if (!owner)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "%s of kernel '%s' (%p) is not memory allocated through the HAL", which,
                         k->info.name, a->value.tensor.ptr);
    if (out->ptr.kind == HAL_MEM_KIND_DEVICE && owner != s->device)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "%s of kernel '%s' is memory of device %u; the launch runs on device %u",
                         which, k->info.name, owner->index, s->device->index);
    return HAL_OK;
}

/* Checks that each result the module declares must-alias is passed its parameter's pointer. */
static hal_status_t check_aliases(const hal_kernel_arg_t *args, const struct hal_kernel_s *k,
                                  const char *backend)
{
    const hal_kernel_tensor_info_t *t = k->tensors;
    for (uint32_t r = 0; r < t->noutputs; r++) {
        int32_t p = t->aliases[r];
        if (p >= 0 && args[t->ninputs + r].value.tensor.ptr != args[p].value.tensor.ptr)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, "hal_kernel_launch",
                             "argument %u (result %u) of kernel '%s' must alias parameter %d "
                             "(the module declares it): pass that parameter's pointer",
                             t->ninputs + r, r, k->info.name, p);
    }
    return HAL_OK;
}

static const char *kind_name(hal_kernel_arg_kind_t kind)
{
    return kind == HAL_KERNEL_ARG_POINTER  ? "pointer"
           : kind == HAL_KERNEL_ARG_SCALAR ? "scalar"
           : kind == HAL_KERNEL_ARG_TENSOR ? "tensor"
                                           : "argument of unknown kind";
}

/* Checks one argument and resolves it into *out. */
static hal_status_t resolve_arg(const hal_kernel_arg_t *a, uint32_t i, struct hal_stream_s *s,
                                const hal_kernel_info_t *info, hal_backend_kernel_arg_t *out)
{
    static const char call[] = "hal_kernel_launch";
    const char *backend = s->ops->name;
    memset(out, 0, sizeof(*out));
    out->kind = a->kind;
    out->size = a->size;
    if (a->kind == HAL_KERNEL_ARG_SCALAR) {
        if (a->size == 0 || a->size > HAL_KERNEL_SCALAR_MAX)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                             "argument %u of kernel '%s': scalar size %u is not in 1..%d", i,
                             info->name, a->size, HAL_KERNEL_SCALAR_MAX);
        memcpy(out->bytes, a->value.bytes, a->size);
    } else if (a->kind == HAL_KERNEL_ARG_POINTER) {
        if (a->value.ptr) {
            char what[48];
            snprintf(what, sizeof(what), "argument %u", i);
            struct hal_device_s *owner = NULL;
            HAL_CHECK(hal_mem_resolve(a->value.ptr, a->size, s, what, call, &out->ptr, &owner));
            if (!owner)
                return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                                 "argument %u of kernel '%s' (%p) is not memory allocated "
                                 "through the HAL",
                                 i, info->name, a->value.ptr);
            if (out->ptr.kind == HAL_MEM_KIND_DEVICE && owner != s->device)
                return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                                 "argument %u of kernel '%s' is memory of device %u; the launch "
                                 "runs on device %u",
                                 i, info->name, owner->index, s->device->index);
        }
    } else {
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "argument %u of kernel '%s' has unknown kind %d", i, info->name,
                         (int)a->kind);
    }
    if (info->nargs == UINT32_MAX)
        return HAL_OK;
    if (info->args[i].kind != a->kind)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "argument %u of kernel '%s' is a %s; the kernel takes a %s", i, info->name,
                         kind_name(a->kind), kind_name(info->args[i].kind));
    if (a->kind == HAL_KERNEL_ARG_SCALAR && info->args[i].size != a->size)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, backend, call,
                         "argument %u of kernel '%s' has %u bytes; the kernel takes %u", i,
                         info->name, a->size, info->args[i].size);
    return HAL_OK;
}

hal_status_t hal_kernel_launch(hal_stream_t stream, hal_kernel_t kernel,
                               const hal_launch_config_t *config, const hal_kernel_arg_t *args,
                               uint32_t nargs)
{
    static const char call[] = "hal_kernel_launch";
    HAL_CHECK_STREAM(stream, call);
    HAL_CHECK_KERNEL(kernel, call);
    const hal_backend_ops_t *ops = stream->ops;
    struct hal_program_s *p = kernel->program;
    if (p->device != stream->device)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "the kernel is loaded on %sdevice %u, the stream belongs to device %u",
                         p->device->backend == stream->device->backend ? "" : "another backend's ",
                         p->device->index, stream->device->index);
    if (!config || config->struct_size < sizeof(hal_launch_config_t))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                         "config is NULL or its struct_size is too small");
    for (int d = 0; d < 3; d++)
        if (config->grid[d] == 0 || config->block[d] == 0)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                             "grid (%u, %u, %u) and block (%u, %u, %u) need every entry >= 1",
                             config->grid[0], config->grid[1], config->grid[2], config->block[0],
                             config->block[1], config->block[2]);
    if (kernel->tensors)
        for (int d = 0; d < 3; d++)
            if (config->grid[d] != 1 || config->block[d] != 1)
                return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                                 "kernel '%s' takes tensors and runs once per launch: grid and "
                                 "block must be (1, 1, 1)",
                                 kernel->info.name);
    if (nargs > HAL_KERNEL_ARGS_MAX)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call, "%u arguments (at most %d)",
                         nargs, HAL_KERNEL_ARGS_MAX);
    if (nargs && !args)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call, "args is NULL with nargs %u",
                         nargs);
    const hal_kernel_info_t *info = &kernel->info;
    if (info->nargs != UINT32_MAX && info->nargs != nargs)
        return hal_error(
            HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
            "kernel '%s' takes %u arguments%s, the launch passes %u", info->name, info->nargs,
            kernel->tensors ? " (the module's parameters, then its results)" : "", nargs);
    hal_backend_kernel_arg_t resolved[HAL_KERNEL_ARGS_MAX];
    for (uint32_t i = 0; i < nargs; i++) {
        if (args[i].kind == HAL_KERNEL_ARG_TENSOR) {
            memset(&resolved[i], 0, sizeof(resolved[i]));
            HAL_CHECK(resolve_tensor_arg(&args[i], i, stream, kernel, &resolved[i]));
        } else if (kernel->tensors) {
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, ops->name, call,
                             "argument %u of kernel '%s' is a %s; the kernel takes tensors "
                             "(HAL_KERNEL_ARG_TENSOR)",
                             i, info->name, kind_name(args[i].kind));
        } else {
            HAL_CHECK(resolve_arg(&args[i], i, stream, info, &resolved[i]));
        }
    }
    if (kernel->tensors)
        HAL_CHECK(check_aliases(args, kernel, ops->name));
    hal_backend_launch_t launch = {
        .grid = { config->grid[0], config->grid[1], config->grid[2] },
        .block = { config->block[0], config->block[1], config->block[2] },
        .shared_bytes = config->shared_bytes,
        .nargs = nargs,
        .args = resolved,
        .kernel_name = info->name,
    };
    return hal_finish(
        HAL_SLOT_CALL(ops, kernel_launch, stream->impl, p->impl, kernel->impl, &launch), ops, call);
}
