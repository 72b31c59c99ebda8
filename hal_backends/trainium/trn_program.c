/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: programs (NEFF, StableHLO) and their launches. A program is a model loaded with
 * nrt_load on the device's NeuronCore; it has one kernel, "main", whose arguments are the
 * model's tensors in the order nrt_get_model_tensor_info lists them, each a pointer to device
 * memory of that core holding at least the tensor's bytes. A launch is a work task: on the
 * stream's worker it binds a slice of each allocation (nrt_tensor_allocate_slice) into an input
 * and an output tensor set and calls nrt_execute, which blocks until the outputs are written.
 * The model stays loaded until the program was destroyed and the last launch using it ran.
 * Real NEFF execution needs Neuron hardware; the libnrt emulator loads only its own program
 * container (emulator/README.md, "Programs").
 *
 * A StableHLO program (hal_program.h) is compiled to a NEFF by the Neuron compiler where one is
 * installed (trn_compile.c) and loaded as above; on the libnrt emulator without a compiler the
 * module itself is loaded, which the emulator executes with XLA's CPU compiler. Either way the
 * model's tensors are named input<i> and output<i> (as neuronx-cc names a module's parameters
 * and results), and the kernel's arguments are tensors: the inputs in order, then the outputs,
 * with the dtype and shape the runtime reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/trn_internal.h"

/* The one kernel of a NEFF program. */
#define TRN_KERNEL_NAME "main"

typedef struct trn_program {
    trn_device_t *device;
    nrt_model_t *model;
    _Atomic uint32_t refs; /* the owner's, and one per launch not yet run */
    uint32_t ntensors;
    struct {
        char name[NRT_TENSOR_NAME_MAX];
        bool input;
        size_t size;
    } tensors[HAL_KERNEL_ARGS_MAX];
    /* StableHLO: the tensors (kernel argument order, the same as tensors[] once sorted). */
    bool stablehlo;
    hal_kernel_tensor_info_t *tensor_info;
} trn_program_t;

static void program_release(trn_program_t *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    p->device->backend->nrt.unload(p->model);
    free(p->tensor_info);
    free(p);
}

/* The HAL dtype of a runtime dtype (HAL_DTYPE_COUNT for none). */
static hal_dtype_t hal_dtype_of(nrt_dtype_t dtype, size_t elem_bytes)
{
    switch (dtype) {
    case NRT_DTYPE_FLOAT32:
        return HAL_DTYPE_F32;
    case NRT_DTYPE_FLOAT16:
        return HAL_DTYPE_F16;
    case NRT_DTYPE_BFLOAT16:
        return HAL_DTYPE_BF16;
    case NRT_DTYPE_INT8:
        return HAL_DTYPE_I8;
    case NRT_DTYPE_UINT8:
        return elem_bytes == 1 ? HAL_DTYPE_U8 : HAL_DTYPE_COUNT;
    case NRT_DTYPE_INT16:
        return HAL_DTYPE_I16;
    case NRT_DTYPE_UINT16:
        return HAL_DTYPE_U16;
    case NRT_DTYPE_INT32:
        return HAL_DTYPE_I32;
    case NRT_DTYPE_UINT32:
        return HAL_DTYPE_U32;
    case NRT_DTYPE_INT64:
        return HAL_DTYPE_I64;
    case NRT_DTYPE_UINT64:
        return HAL_DTYPE_U64;
    case NRT_DTYPE_FP8_E4:
        return HAL_DTYPE_F8_E4M3;
    case NRT_DTYPE_FP8_E5:
        return HAL_DTYPE_F8_E5M2;
    default:
        return HAL_DTYPE_COUNT;
    }
}

/* The index in "input<i>" / "output<i>", or -1. */
static long tensor_position(const char *name, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || name[n] == '\0')
        return -1;
    long v = 0;
    for (const char *c = name + n; *c; c++) {
        if (*c < '0' || *c > '9' || v > HAL_KERNEL_ARGS_MAX)
            return -1;
        v = v * 10 + (*c - '0');
    }
    return v;
}

/* Orders a StableHLO model's tensors as the kernel takes them (input0.., then output0..) and
 * describes them; which results alias parameters comes from the module's text. */
static hal_status_t describe_stablehlo(trn_program_t *p, const nrt_tensor_info_array_t *info,
                                       const void *image, size_t size)
{
    trn_backend_t *b = p->device->backend;
    hal_kernel_tensor_info_t *t = calloc(1, sizeof(*t));
    if (!t) {
        trn_set_error(b, "calloc(%zu) failed for a program's tensors", sizeof(*t));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    uint32_t n = (uint32_t)info->tensor_count, nin = 0;
    for (uint32_t i = 0; i < n; i++)
        nin += info->tensor_array[i].usage == NRT_TENSOR_USAGE_INPUT;
    int8_t seen[HAL_KERNEL_ARGS_MAX] = { 0 };
    for (uint32_t i = 0; i < n; i++) {
        const nrt_tensor_info_t *x = &info->tensor_array[i];
        bool input = x->usage == NRT_TENSOR_USAGE_INPUT;
        long pos = tensor_position(x->name, input ? "input" : "output");
        uint32_t slot = (uint32_t)pos + (input ? 0 : nin);
        size_t elems = 1;
        for (uint32_t d = 0; d < x->ndim && x->shape; d++)
            elems *= x->shape[d];
        hal_dtype_t dtype = hal_dtype_of(x->dtype, elems ? x->size / elems : 0);
        size_t elem_bytes = trn_dtype_size(dtype);
        if (pos < 0 || slot >= n || seen[slot] || x->ndim > HAL_TENSOR_RANK_MAX ||
            (x->ndim && !x->shape) || elem_bytes == 0 || elems * elem_bytes != x->size) {
            trn_set_error(b,
                          "the compiled module's tensor '%s' (%s, %zu bytes, dtype %d, rank %u) is "
                          "not a parameter input<i> or result output<i> of a dense type the HAL "
                          "knows",
                          x->name, input ? "input" : "output", x->size, (int)x->dtype, x->ndim);
            free(t);
            return HAL_ERROR_UNSUPPORTED;
        }
        seen[slot] = 1;
        snprintf(p->tensors[slot].name, sizeof(p->tensors[slot].name), "%s", x->name);
        p->tensors[slot].input = input;
        p->tensors[slot].size = x->size;
        t->tensors[slot].dtype = dtype;
        t->tensors[slot].rank = x->ndim;
        for (uint32_t d = 0; d < x->ndim; d++)
            t->tensors[slot].dims[d] = x->shape[d];
    }
    t->struct_size = sizeof(*t);
    t->ninputs = nin;
    t->noutputs = n - nin;
    bool is_bool[HAL_KERNEL_ARGS_MAX];
    trn_stablehlo_signature(image, size, nin, n - nin, t->aliases, is_bool);
    for (uint32_t i = 0; i < n; i++)
        if (is_bool[i] && t->tensors[i].dtype == HAL_DTYPE_U8)
            t->tensors[i].dtype = HAL_DTYPE_BOOL;
    p->tensor_info = t;
    return HAL_OK;
}

/* For a StableHLO module: *neff the compiled NEFF where the Neuron compiler is installed; NULL
 * on the libnrt emulator, which loads the module itself. */
static hal_status_t load_stablehlo(trn_device_t *device, const void *image, size_t size,
                                   void **neff, size_t *neff_size)
{
    trn_backend_t *b = device->backend;
    *neff = NULL;
    if (!trn_stablehlo_looks_like_module(image, size)) {
        trn_set_error(b,
                      "the image (%zu bytes) is not a StableHLO module: neither MLIR bytecode "
                      "nor text with a module or func.func",
                      size);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (b->compiler.found)
        return trn_compile_stablehlo(device, image, size, neff, neff_size);
    char why[512] = "";
    if (b->nrt.emu_stablehlo_status &&
        b->nrt.emu_stablehlo_status(why, sizeof(why)) != NRT_SUCCESS) {
        trn_set_error(b, "the libnrt emulator cannot execute StableHLO: %s", why);
        return HAL_ERROR_UNSUPPORTED;
    }
    return HAL_OK;
}

hal_status_t trn_program_create(void *device_, hal_program_format_t format, const void *image,
                                size_t size, void **out)
{
    trn_device_t *device = device_;
    trn_backend_t *b = device->backend;
    hal_status_t lost = trn_device_check_lost(device);
    if (lost == HAL_OK)
        lost = trn_runtime_require(b);
    if (lost != HAL_OK)
        return lost;
    const void *module = image;
    size_t module_size = size;
    void *neff = NULL;
    if (format == HAL_PROGRAM_FORMAT_STABLEHLO) {
        hal_status_t st = load_stablehlo(device, image, size, &neff, &size);
        if (st != HAL_OK)
            return st;
        if (neff)
            image = neff;
    }
    trn_program_t *p = calloc(1, sizeof(*p));
    if (!p) {
        trn_set_error(b, "calloc(%zu) failed for a program", sizeof(*p));
        free(neff);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    p->stablehlo = format == HAL_PROGRAM_FORMAT_STABLEHLO;
    char msg[TRN_MSG_MAX];
    NRT_STATUS rc = b->nrt.load(image, size, (int32_t)device->index, -1, &p->model);
    free(neff);
    image = NULL;
    if (rc != NRT_SUCCESS) {
        hal_status_t st =
            trn_status_format(&b->nrt, rc, TRN_OP_ALLOC, msg, sizeof(msg),
                              "nrt_load(%zu bytes, NeuronCore %u)", size, device->index);
        if (b->nrt.is_emulator && rc == NRT_UNSUPPORTED_NEFF_VERSION && !p->stablehlo)
            trn_set_error(b,
                          "%s; the libnrt emulator does not execute NEFF (it loads only its own "
                          "test container, hal_backends/trainium/emulator/README.md)",
                          msg);
        else
            trn_set_error(b, "%s", msg);
        free(p);
        /* The runtime refusing the image is a bad image; memory and lost cores stay what
         * they are. */
        return st == HAL_ERROR_BACKEND_SPECIFIC ? HAL_ERROR_INVALID_ARGUMENT : st;
    }
    nrt_tensor_info_array_t *info = NULL;
    rc = b->nrt.get_model_tensor_info(p->model, &info);
    hal_status_t st = HAL_OK;
    if (rc != NRT_SUCCESS) {
        st = trn_status_format(&b->nrt, rc, TRN_OP_OTHER, msg, sizeof(msg),
                               "nrt_get_model_tensor_info(NeuronCore %u)", device->index);
        trn_set_error(b, "%s", msg);
    } else if (info->tensor_count > HAL_KERNEL_ARGS_MAX) {
        trn_set_error(b, "the model has %llu tensors; a launch passes at most %d",
                      (unsigned long long)info->tensor_count, HAL_KERNEL_ARGS_MAX);
        st = HAL_ERROR_UNSUPPORTED;
    } else if (p->stablehlo) {
        p->device = device;
        p->ntensors = (uint32_t)info->tensor_count;
        st = describe_stablehlo(p, info, module, module_size);
    } else {
        p->ntensors = (uint32_t)info->tensor_count;
        for (uint32_t i = 0; i < p->ntensors; i++) {
            const nrt_tensor_info_t *t = &info->tensor_array[i];
            snprintf(p->tensors[i].name, sizeof(p->tensors[i].name), "%s", t->name);
            p->tensors[i].input = t->usage == NRT_TENSOR_USAGE_INPUT;
            p->tensors[i].size = t->size;
        }
    }
    if (info)
        b->nrt.free_model_tensor_info(info);
    if (st != HAL_OK) {
        b->nrt.unload(p->model);
        free(p);
        return st;
    }
    p->device = device;
    atomic_init(&p->refs, 1);
    *out = p;
    return HAL_OK;
}

void trn_program_destroy(void *program)
{
    program_release(program);
}

hal_status_t trn_program_get_kernel(void *program, const char *name, void **kernel,
                                    hal_kernel_info_t *info)
{
    trn_program_t *p = program;
    if (strcmp(name, TRN_KERNEL_NAME) != 0) {
        trn_set_error(p->device->backend,
                      "a NEFF program has one kernel, \"%s\" (nrt_execute runs the whole model); "
                      "there is no kernel \"%s\"",
                      TRN_KERNEL_NAME, name);
        return HAL_ERROR_NOT_FOUND;
    }
    info->nargs = p->ntensors;
    for (uint32_t i = 0; i < p->ntensors; i++) {
        info->args[i].kind = p->stablehlo ? HAL_KERNEL_ARG_TENSOR : HAL_KERNEL_ARG_POINTER;
        info->args[i].size = p->stablehlo ? (uint32_t)p->tensors[i].size : 0;
    }
    *kernel = p;
    return HAL_OK;
}

hal_status_t trn_kernel_get_tensor_info(void *program, void *kernel, hal_kernel_tensor_info_t *info)
{
    (void)kernel; /* the program itself */
    trn_program_t *p = program;
    if (!p->tensor_info) {
        trn_set_error(p->device->backend, "a NEFF program's arguments are pointers, not tensors");
        return HAL_ERROR_UNSUPPORTED;
    }
    size_t size = info->struct_size;
    memcpy(info, p->tensor_info, sizeof(*info));
    info->struct_size = size;
    return HAL_OK;
}

/* What a queued launch holds until its worker runs it. */
typedef struct trn_launch {
    trn_program_t *program;
    struct {
        nrt_tensor_t *tensor; /* the allocation's tensor */
        size_t offset;
    } args[HAL_KERNEL_ARGS_MAX];
} trn_launch_t;

/* Binds the arguments into tensor sets, executes, and releases what it made. */
static hal_status_t execute(const trn_launch_t *l, char *msg, size_t size)
{
    const trn_program_t *p = l->program;
    const trn_nrt_t *nrt = &p->device->backend->nrt;
    nrt_tensor_set_t *sets[2] = { NULL, NULL }; /* inputs, outputs */
    nrt_tensor_t *slices[HAL_KERNEL_ARGS_MAX] = { NULL };
    NRT_STATUS rc = NRT_SUCCESS;
    const char *call = "nrt_allocate_tensor_set";
    for (int s = 0; s < 2 && rc == NRT_SUCCESS; s++)
        rc = nrt->allocate_tensor_set(&sets[s]);
    for (uint32_t i = 0; i < p->ntensors && rc == NRT_SUCCESS; i++) {
        call = "nrt_tensor_allocate_slice";
        rc = nrt->tensor_allocate_slice(l->args[i].tensor, l->args[i].offset, p->tensors[i].size,
                                        p->tensors[i].name, &slices[i]);
        if (rc == NRT_SUCCESS) {
            call = "nrt_add_tensor_to_tensor_set";
            rc = nrt->add_tensor_to_tensor_set(sets[p->tensors[i].input ? 0 : 1],
                                               p->tensors[i].name, slices[i]);
        }
    }
    if (rc == NRT_SUCCESS) {
        call = "nrt_execute";
        rc = nrt->execute(p->model, sets[0], sets[1]);
    }
    for (uint32_t i = 0; i < p->ntensors; i++)
        if (slices[i])
            nrt->tensor_free(&slices[i]);
    for (int s = 0; s < 2; s++)
        if (sets[s])
            nrt->destroy_tensor_set(&sets[s]);
    if (rc == NRT_SUCCESS)
        return HAL_OK;
    hal_status_t st = trn_status_format(nrt, rc, TRN_OP_OTHER, msg, size, "%s(NeuronCore %u)", call,
                                        p->device->index);
    if (trn_status_is_device_loss(rc))
        trn_device_mark_lost(p->device, msg);
    return st;
}

static hal_status_t run_launch(hq_stream_t *stream, void *payload, hal_status_t stream_status)
{
    (void)stream;
    trn_launch_t *l = *(trn_launch_t **)payload;
    hal_status_t st = stream_status;
    if (st == HAL_OK) {
        char msg[TRN_MSG_MAX] = "";
        st = execute(l, msg, sizeof(msg));
        if (st != HAL_OK)
            hq_task_error("%s", msg);
    }
    program_release(l->program);
    free(l);
    return st;
}

hal_status_t trn_kernel_launch(void *stream, void *program, void *kernel,
                               const hal_backend_launch_t *launch)
{
    (void)kernel; /* the program itself */
    trn_program_t *p = program;
    trn_backend_t *b = p->device->backend;
    for (int d = 0; d < 3; d++)
        if (launch->grid[d] != 1 || launch->block[d] != 1) {
            trn_set_error(b, "a NEFF launch runs the model once: grid and block must be (1, 1, 1)");
            return HAL_ERROR_INVALID_ARGUMENT;
        }
    for (uint32_t i = 0; i < launch->nargs; i++) {
        const hal_backend_ptr_t *a = &launch->args[i].ptr;
        size_t need = p->tensors[i].size;
        if (need == 0) {
            trn_set_error(b,
                          "argument %u ('%s') is a tensor of 0 bytes, which nrt_execute cannot "
                          "bind",
                          i, p->tensors[i].name);
            return HAL_ERROR_UNSUPPORTED;
        }
        if (a->ptr == NULL || a->kind != HAL_MEM_KIND_DEVICE) {
            trn_set_error(b, "argument %u ('%s') must be device memory of NeuronCore %u", i,
                          p->tensors[i].name, p->device->index);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
        if (a->size - a->offset < need) {
            trn_set_error(b,
                          "argument %u ('%s') needs %zu bytes; its allocation has %zu from the "
                          "pointer",
                          i, p->tensors[i].name, need, a->size - a->offset);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
    }
    hal_status_t refused = hq_stream_latched(stream);
    if (refused == HAL_OK)
        refused = trn_device_check_lost(p->device);
    if (refused != HAL_OK)
        return refused;
    trn_launch_t *l = malloc(sizeof(*l));
    if (!l) {
        trn_set_error(b, "malloc(%zu) failed for a launch", sizeof(*l));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    l->program = p;
    for (uint32_t i = 0; i < launch->nargs; i++) {
        l->args[i].tensor = launch->args[i].ptr.cookie;
        l->args[i].offset = launch->args[i].ptr.offset;
    }
    atomic_fetch_add(&p->refs, 1);
    hal_status_t st = hq_stream_enqueue(stream, run_launch, &l, sizeof(l), HQ_TASK_RUN_ON_ERROR);
    if (st != HAL_OK) {
        program_release(p);
        free(l);
    }
    return st;
}
