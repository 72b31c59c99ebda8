/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: programs (NEFF) and their launches. A program is a model loaded with
 * nrt_load on the device's NeuronCore; it has one kernel, "main", whose arguments are the
 * model's tensors in the order nrt_get_model_tensor_info lists them, each a pointer to device
 * memory of that core holding at least the tensor's bytes. A launch is a work task: on the
 * stream's worker it binds a slice of each allocation (nrt_tensor_allocate_slice) into an input
 * and an output tensor set and calls nrt_execute, which blocks until the outputs are written.
 * The model stays loaded until the program was destroyed and the last launch using it ran.
 * Real NEFF execution needs Neuron hardware; the libnrt emulator loads only its own program
 * container (emulator/README.md, "Programs"). */
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
} trn_program_t;

static void program_release(trn_program_t *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    p->device->backend->nrt.unload(p->model);
    free(p);
}

hal_status_t trn_program_create(void *device_, hal_program_format_t format, const void *image,
                                size_t size, void **out)
{
    trn_device_t *device = device_;
    trn_backend_t *b = device->backend;
    (void)format; /* the core admits only HAL_PROGRAM_FORMAT_NEFF */
    hal_status_t lost = trn_device_check_lost(device);
    if (lost != HAL_OK)
        return lost;
    trn_program_t *p = calloc(1, sizeof(*p));
    if (!p) {
        trn_set_error(b, "calloc(%zu) failed for a program", sizeof(*p));
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    char msg[TRN_MSG_MAX];
    NRT_STATUS rc = b->nrt.load(image, size, (int32_t)device->index, -1, &p->model);
    if (rc != NRT_SUCCESS) {
        hal_status_t st =
            trn_status_format(&b->nrt, rc, TRN_OP_ALLOC, msg, sizeof(msg),
                              "nrt_load(%zu bytes, NeuronCore %u)", size, device->index);
        if (b->nrt.is_emulator && rc == NRT_UNSUPPORTED_NEFF_VERSION)
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
        info->args[i].kind = HAL_KERNEL_ARG_POINTER;
        info->args[i].size = 0;
    }
    *kernel = p;
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
