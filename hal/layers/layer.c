/* SPDX-License-Identifier: Apache-2.0 */
/* The interposition mechanism of the layers (contract in layer.h): HAL_LAYERS parsing, the chain
 * the core installs at hal_backend_open, and the helpers of the forwarding slots. The forwarding
 * slots themselves, one per entry of the backend table, are generated from the slot spec
 * (layer_forward.inc): each wraps what the next level creates, unwraps what goes down, and runs
 * the layer's hooks. */
#include <stdlib.h>
#include <string.h>

#include "hal/layers/layer.h"
#include "hal/src/core.h"

/* ---- HAL_LAYERS ---- */

static const hal_layer_t *const known_layers[] = { &hal_validation_layer, &hal_trace_layer,
                                                   &hal_faults_layer };

hal_status_t hal_layers_parse(const char *value, hal_layer_list_t *out)
{
    static const char call[] = "hal_backend_open";
    memset(out, 0, sizeof(*out));
    if (!value || !*value)
        return HAL_OK;
    char copy[256];
    if (strlen(value) >= sizeof(copy))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "HAL_LAYERS is too long");
    memcpy(copy, value, strlen(value) + 1);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ", \t\n", &save); tok; tok = strtok_r(NULL, ", \t\n", &save)) {
        const hal_layer_t *layer = NULL;
        for (size_t i = 0; i < sizeof(known_layers) / sizeof(known_layers[0]); i++)
            if (strcmp(tok, known_layers[i]->name) == 0)
                layer = known_layers[i];
        if (!layer)
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "unknown layer '%s' in HAL_LAYERS (known: validation, trace, faults)",
                             tok);
        for (uint32_t i = 0; i < out->count; i++)
            if (out->layers[i] == layer)
                return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                                 "layer '%s' is listed twice in HAL_LAYERS", tok);
        if (out->count == HAL_LAYERS_MAX) /* unreachable while fewer layers exist */
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "too many layers in HAL_LAYERS");
        out->layers[out->count++] = layer;
    }
    return HAL_OK;
}

/* ---- calls of a layer's own ---- */

static _Thread_local unsigned internal_depth;

void hal_layer_internal_begin(void)
{
    internal_depth++;
}

void hal_layer_internal_end(void)
{
    internal_depth--;
}

static hal_status_t run_before(hal_layer_inst_t *inst, hal_layer_call_t *c)
{
    if (internal_depth || !inst->layer->before)
        return HAL_OK;
    return inst->layer->before(inst->ctx, c);
}

static hal_status_t run_after(hal_layer_inst_t *inst, hal_layer_call_t *c, hal_status_t st)
{
    if (internal_depth || !inst->layer->after)
        return st;
    return inst->layer->after(inst->ctx, c, st);
}

/* ---- wrappers ---- */

#define OBJ(p) ((hal_layer_obj_t *)(p))

static hal_layer_obj_t *wrapper_new(hal_layer_inst_t *inst, hal_layer_obj_type_t type,
                                    hal_layer_obj_t *device)
{
    hal_layer_obj_t *o = calloc(1, sizeof(*o));
    if (!o) {
        inst->host->set_error("out of host memory (layer '%s')", inst->layer->name);
        return NULL;
    }
    o->type = type;
    o->inst = inst;
    o->next = inst->next;
    o->device = device;
    o->rank = -1;
    return o;
}

/* Publishes a wrapper whose next-level object now exists. */
static void wrapper_live(hal_layer_obj_t *o, void *next_obj)
{
    o->obj = next_obj;
    if (o->type != HAL_LAYER_OBJ_DEVICE)
        o->id = atomic_fetch_add(&o->inst->seq, 1) + 1;
    o->magic = HAL_LAYER_MAGIC;
}

static void wrapper_free(hal_layer_obj_t *o)
{
    o->magic = 0;
    free(o);
}

static const hal_backend_ptr_t *unwrap_ptr(const hal_backend_ptr_t *in, hal_backend_ptr_t *tmp)
{
    if (!in)
        return NULL;
    *tmp = *in;
    if (tmp->device)
        tmp->device = OBJ(tmp->device)->obj;
    return tmp;
}

/* ---- backend ---- */

static void l_fini(void *backend)
{
    hal_layer_inst_t *inst = OBJ(backend)->inst;
    if (inst->next->fini)
        inst->next->fini(inst->backend.obj);
    if (inst->layer->destroy)
        inst->layer->destroy(inst->ctx);
    free(inst);
}

/* ---- kernel launches ---- */

/* Written by hand: the resolved pointers inside the argument list are unwrapped one by one. */
static hal_status_t l_kernel_launch(void *stream, void *program, void *kernel,
                                    const hal_backend_launch_t *launch)
{
    hal_layer_obj_t *o = stream;
    hal_layer_call_t c = { .slot = HAL_SLOT_kernel_launch,
                           .device = o->device,
                           .stream = o,
                           .program = OBJ(program),
                           .name = launch->kernel_name,
                           .size = launch->nargs };
    hal_backend_kernel_arg_t args[HAL_KERNEL_ARGS_MAX];
    hal_backend_launch_t next_launch = *launch;
    for (uint32_t i = 0; i < launch->nargs && i < HAL_KERNEL_ARGS_MAX; i++) {
        args[i] = launch->args[i];
        if (args[i].kind == HAL_KERNEL_ARG_POINTER && args[i].ptr.device)
            args[i].ptr.device = OBJ(args[i].ptr.device)->obj;
    }
    next_launch.args = args;
    hal_status_t st = run_before(o->inst, &c);
    if (st == HAL_OK)
        st = o->next->kernel_launch(o->obj, OBJ(program)->obj, kernel, &next_launch);
    return run_after(o->inst, &c, st);
}

/* Every other slot's forwarder, and the table of them all. */
#include "hal/layers/layer_forward.inc"

/* ---- the chain ---- */

/* This level's table: every forwarding slot whose next-level slot exists. */
static void build_table(hal_layer_inst_t *inst)
{
    const hal_backend_ops_t *next = inst->next;
    inst->ops = forwarding_ops;
    inst->ops.struct_size = sizeof(inst->ops);
    inst->ops.api_version = next->api_version;
    inst->ops.name = next->name;
    inst->ops.device_type_name = next->device_type_name;
    inst->ops.flags = next->flags;
    inst->ops.init = NULL; /* the core installs layers; it never calls their init */
#define HAL_LAYER_MIRROR(slot, minor, required, flags, cap) \
    if (!next->slot)                                        \
        inst->ops.slot = NULL;
    HAL_SLOTS(HAL_LAYER_MIRROR)
#undef HAL_LAYER_MIRROR
}

hal_status_t hal_layers_install(struct hal_backend_s *b, const hal_layer_list_t *list,
                                const hal_host_services_t *host)
{
    hal_layer_inst_t *below = NULL;
    hal_status_t st = HAL_OK;
    for (uint32_t k = list->count; k-- > 0;) {
        const hal_layer_t *layer = list->layers[k];
        hal_layer_inst_t *inst = calloc(1, sizeof(*inst));
        if (!inst) {
            st = hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, b->ops->name, "hal_backend_open",
                           "out of host memory for layer '%s'", layer->name);
            goto out_fini;
        }
        inst->layer = layer;
        inst->host = host;
        inst->next = b->ops;
        inst->below = below;
        atomic_init(&inst->seq, 0);
        build_table(inst);
        inst->backend = (hal_layer_obj_t){ .magic = HAL_LAYER_MAGIC,
                                           .type = HAL_LAYER_OBJ_BACKEND,
                                           .inst = inst,
                                           .next = b->ops,
                                           .obj = b->impl,
                                           .rank = -1 };
        if (layer->create) {
            st = layer->create(inst, &inst->ctx);
            if (st != HAL_OK) {
                free(inst);
                goto out_fini;
            }
        }
        b->ops = &inst->ops;
        b->impl = &inst->backend;
        below = inst;
    }
    unsigned depth = 0;
    for (hal_layer_inst_t *inst = below; inst; inst = inst->below)
        inst->depth = depth++;
    b->layers = below;
    return HAL_OK;

out_fini:
    /* Finishes every level built so far, the backend last. */
    if (b->ops->fini)
        b->ops->fini(b->impl);
    b->layers = NULL;
    return st;
}

hal_status_t hal_layers_collective_begin(struct hal_backend_s *b, const hal_host_collective_t *c)
{
    for (hal_layer_inst_t *inst = b->layers; inst; inst = inst->below) {
        if (!inst->layer->collective_begin)
            continue;
        hal_status_t st = inst->layer->collective_begin(inst->ctx, c);
        if (st != HAL_OK)
            return st;
    }
    return HAL_OK;
}

void hal_layers_collective_end(struct hal_backend_s *b, const hal_host_collective_t *c,
                               hal_status_t status)
{
    for (hal_layer_inst_t *inst = b->layers; inst; inst = inst->below)
        if (inst->layer->collective_end)
            inst->layer->collective_end(inst->ctx, c, status);
}

bool hal_layers_keep_handles(const hal_layer_list_t *list)
{
    for (uint32_t i = 0; i < list->count; i++)
        if (list->layers[i]->keeps_handles)
            return true;
    return false;
}

void hal_layers_report_leak(struct hal_backend_s *b, const char *what, const void *handle,
                            size_t bytes)
{
    for (hal_layer_inst_t *inst = b->layers; inst; inst = inst->below)
        if (inst->layer->leak)
            inst->layer->leak(inst->ctx, what, handle, bytes);
}

hal_layer_obj_t *hal_layer_find(const hal_layer_inst_t *inst, void *top)
{
    void *o = top;
    for (unsigned i = 0; i < inst->depth && o; i++)
        o = OBJ(o)->obj;
    return o;
}
