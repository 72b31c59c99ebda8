/* SPDX-License-Identifier: Apache-2.0 */
/* The interposition mechanism of the layers (contract in layer.h): HAL_LAYERS parsing, the chain
 * the core installs at hal_backend_open, and one forwarding slot per entry of the backend table:
 * it wraps what the next level creates, unwraps what goes down, and runs the layer's hooks. */
#include <stdlib.h>
#include <string.h>

#include "hal/layers/layer.h"
#include "hal/src/core.h"

/* ---- the function registry ---- */

static const struct {
    const char *name;
    uint32_t flags;
} slot_info[HAL_LAYER_SLOT_COUNT] = {
#define HAL_LAYER_SLOT_INFO(name, flags) [HAL_LAYER_SLOT_##name] = { #name, flags },
    HAL_LAYER_SLOTS(HAL_LAYER_SLOT_INFO)
#undef HAL_LAYER_SLOT_INFO
};

const char *hal_layer_slot_name(hal_layer_slot_t slot)
{
    return (unsigned)slot < HAL_LAYER_SLOT_COUNT ? slot_info[slot].name : "unknown";
}

uint32_t hal_layer_slot_flags(hal_layer_slot_t slot)
{
    return (unsigned)slot < HAL_LAYER_SLOT_COUNT ? slot_info[slot].flags : 0;
}

bool hal_layer_slot_is_collective(hal_layer_slot_t slot)
{
    return slot >= HAL_LAYER_SLOT_allreduce && slot <= HAL_LAYER_SLOT_recv;
}

/* ---- HAL_LAYERS ---- */

static const hal_layer_t *const known_layers[] = { &hal_trace_layer, &hal_faults_layer };

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
        if (strcmp(tok, "validation") == 0) {
            out->validation = true;
            continue;
        }
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

static hal_status_t l_device_count(void *backend, uint32_t *count)
{
    hal_layer_obj_t *b = backend;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_device_count };
    hal_status_t st = run_before(b->inst, &c);
    if (st == HAL_OK)
        st = b->next->device_count(b->obj, count);
    if (st == HAL_OK)
        c.out = *count;
    return run_after(b->inst, &c, st);
}

static hal_status_t l_device_open(void *backend, uint32_t index, void **device)
{
    hal_layer_obj_t *b = backend;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_device_open, .arg = index };
    hal_layer_obj_t *d = wrapper_new(b->inst, HAL_LAYER_OBJ_DEVICE, NULL);
    if (!d)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    d->device = d;
    d->id = index;
    void *next_obj = NULL;
    hal_status_t st = run_before(b->inst, &c);
    if (st == HAL_OK)
        st = b->next->device_open(b->obj, index, &next_obj);
    if (st == HAL_OK) {
        wrapper_live(d, next_obj);
        c.created = c.device = d;
    }
    hal_status_t result = run_after(b->inst, &c, st);
    if (st == HAL_OK && result != HAL_OK && b->next->device_close)
        b->next->device_close(next_obj); /* a hook refused what the next level made */
    if (result != HAL_OK) {
        wrapper_free(d);
        return result;
    }
    *device = d;
    return HAL_OK;
}

static hal_status_t l_group(void *backend, hal_layer_slot_t slot)
{
    hal_layer_obj_t *b = backend;
    hal_layer_call_t c = { .slot = slot };
    hal_status_t pre = run_before(b->inst, &c), st;
    if (slot == HAL_LAYER_SLOT_group_begin) {
        st = pre == HAL_OK ? b->next->group_begin(b->obj) : pre;
    } else {
        st = b->next->group_end(b->obj); /* always: it closes what group_begin opened */
        if (st == HAL_OK)
            st = pre;
    }
    return run_after(b->inst, &c, st);
}

static hal_status_t l_group_begin(void *backend)
{
    return l_group(backend, HAL_LAYER_SLOT_group_begin);
}

static hal_status_t l_group_end(void *backend)
{
    return l_group(backend, HAL_LAYER_SLOT_group_end);
}

/* ---- devices ---- */

static void l_device_close(void *device)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_device_close, .device = d };
    run_before(d->inst, &c);
    if (d->next->device_close)
        d->next->device_close(d->obj);
    run_after(d->inst, &c, HAL_OK);
    wrapper_free(d);
}

static hal_status_t l_device_get_properties(void *device, hal_device_properties_t *props)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_device_get_properties, .device = d };
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->device_get_properties(d->obj, props);
    return run_after(d->inst, &c, st);
}

static hal_status_t l_device_synchronize(void *device)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_device_synchronize, .device = d };
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->device_synchronize(d->obj);
    return run_after(d->inst, &c, st);
}

static hal_status_t l_device_get_native_handle(void *device, uintptr_t *native)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_device_get_native_handle, .device = d };
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->device_get_native_handle(d->obj, native);
    return run_after(d->inst, &c, st);
}

static hal_status_t l_device_get_free_memory(void *device, uint64_t *free_bytes)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_device_get_free_memory, .device = d };
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->device_get_free_memory(d->obj, free_bytes);
    if (st == HAL_OK)
        c.out = *free_bytes;
    return run_after(d->inst, &c, st);
}

/* ---- memory ---- */

static hal_status_t l_mem_alloc(void *device, hal_mem_kind_t kind, size_t size, size_t alignment,
                                void **ptr, void **cookie)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_mem_alloc,
                           .device = d,
                           .kind = kind,
                           .size = size,
                           .arg = (int64_t)alignment };
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->mem_alloc(d->obj, kind, size, alignment, ptr, cookie);
    if (st == HAL_OK)
        c.ptr = *ptr;
    hal_status_t result = run_after(d->inst, &c, st);
    if (st == HAL_OK && result != HAL_OK)
        d->next->mem_free(d->obj, kind, *ptr, *cookie);
    return result;
}

static hal_status_t l_mem_free(void *device, hal_mem_kind_t kind, void *ptr, void *cookie)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_mem_free, .device = d, .kind = kind, .ptr = ptr };
    hal_status_t pre = run_before(d->inst, &c);
    hal_status_t st = d->next->mem_free(d->obj, kind, ptr, cookie);
    return run_after(d->inst, &c, st == HAL_OK ? pre : st);
}

static hal_status_t l_memcpy_async(void *stream, const hal_backend_ptr_t *dst,
                                   const hal_backend_ptr_t *src, size_t n)
{
    hal_layer_obj_t *s = stream;
    hal_backend_ptr_t d2, s2;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_memcpy_async,
                           .device = s->device,
                           .stream = s,
                           .kind = dst->kind,
                           .kind2 = src->kind,
                           .ptr = dst->ptr,
                           .ptr2 = src->ptr,
                           .size = n };
    hal_status_t st = run_before(s->inst, &c);
    if (st == HAL_OK)
        st = s->next->memcpy_async(s->obj, unwrap_ptr(dst, &d2), unwrap_ptr(src, &s2), n);
    return run_after(s->inst, &c, st);
}

static hal_status_t l_memset_async(void *stream, const hal_backend_ptr_t *dst, int value, size_t n)
{
    hal_layer_obj_t *s = stream;
    hal_backend_ptr_t d2;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_memset_async,
                           .device = s->device,
                           .stream = s,
                           .kind = dst->kind,
                           .ptr = dst->ptr,
                           .size = n,
                           .arg = value };
    hal_status_t st = run_before(s->inst, &c);
    if (st == HAL_OK)
        st = s->next->memset_async(s->obj, unwrap_ptr(dst, &d2), value, n);
    return run_after(s->inst, &c, st);
}

static hal_status_t l_mem_free_async(void *stream, void *device, hal_mem_kind_t kind, void *ptr,
                                     void *cookie)
{
    hal_layer_obj_t *s = stream, *d = device;
    hal_layer_call_t c = {
        .slot = HAL_LAYER_SLOT_mem_free_async, .device = d, .stream = s, .kind = kind, .ptr = ptr
    };
    /* Not a release: when it fails the core keeps the allocation, so nothing may have happened. */
    hal_status_t st = run_before(s->inst, &c);
    if (st == HAL_OK)
        st = s->next->mem_free_async(s->obj, d->obj, kind, ptr, cookie);
    return run_after(s->inst, &c, st);
}

static hal_status_t l_mem_ipc_export(void *device, const hal_backend_ptr_t *ptr,
                                     hal_ipc_handle_t *handle)
{
    hal_layer_obj_t *d = device;
    hal_backend_ptr_t p2;
    hal_layer_call_t c = {
        .slot = HAL_LAYER_SLOT_mem_ipc_export, .device = d, .kind = ptr->kind, .ptr = ptr->ptr
    };
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->mem_ipc_export(d->obj, unwrap_ptr(ptr, &p2), handle);
    return run_after(d->inst, &c, st);
}

static hal_status_t l_mem_ipc_open(void *device, const hal_ipc_handle_t *handle, void **ptr,
                                   size_t *size, void **cookie)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_mem_ipc_open, .device = d };
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->mem_ipc_open(d->obj, handle, ptr, size, cookie);
    if (st == HAL_OK) {
        c.ptr = *ptr;
        c.size = *size;
    }
    hal_status_t result = run_after(d->inst, &c, st);
    if (st == HAL_OK && result != HAL_OK)
        d->next->mem_ipc_close(d->obj, *ptr, *cookie);
    return result;
}

static hal_status_t l_mem_ipc_close(void *device, void *ptr, void *cookie)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_mem_ipc_close, .device = d, .ptr = ptr };
    hal_status_t pre = run_before(d->inst, &c);
    hal_status_t st = d->next->mem_ipc_close(d->obj, ptr, cookie);
    return run_after(d->inst, &c, st == HAL_OK ? pre : st);
}

/* ---- streams ---- */

static hal_status_t l_stream_create(void *device, int32_t priority, void **stream)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_stream_create, .device = d, .arg = priority };
    hal_layer_obj_t *s = wrapper_new(d->inst, HAL_LAYER_OBJ_STREAM, d);
    if (!s)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    s->priority = priority;
    void *next_obj = NULL;
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->stream_create(d->obj, priority, &next_obj);
    if (st == HAL_OK) {
        wrapper_live(s, next_obj);
        c.created = c.stream = s;
    }
    hal_status_t result = run_after(d->inst, &c, st);
    if (st == HAL_OK && result != HAL_OK)
        d->next->stream_destroy(next_obj);
    if (result != HAL_OK) {
        wrapper_free(s);
        return result;
    }
    *stream = s;
    return HAL_OK;
}

static hal_status_t l_stream_destroy(void *stream)
{
    hal_layer_obj_t *s = stream;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_stream_destroy,
                           .device = s->device,
                           .stream = s };
    hal_status_t pre = run_before(s->inst, &c);
    hal_status_t st = s->next->stream_destroy ? s->next->stream_destroy(s->obj) : HAL_OK;
    st = run_after(s->inst, &c, st == HAL_OK ? pre : st);
    wrapper_free(s);
    return st;
}

static hal_status_t l_stream_query(void *stream)
{
    hal_layer_obj_t *s = stream;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_stream_query, .device = s->device, .stream = s };
    hal_status_t st = run_before(s->inst, &c);
    if (st == HAL_OK)
        st = s->next->stream_query(s->obj);
    return run_after(s->inst, &c, st);
}

static hal_status_t l_stream_synchronize(void *stream)
{
    hal_layer_obj_t *s = stream;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_stream_synchronize,
                           .device = s->device,
                           .stream = s };
    hal_status_t st = run_before(s->inst, &c);
    if (st == HAL_OK)
        st = s->next->stream_synchronize(s->obj);
    return run_after(s->inst, &c, st);
}

static hal_status_t l_stream_wait_event(void *stream, void *event)
{
    hal_layer_obj_t *s = stream, *e = event;
    hal_layer_call_t c = {
        .slot = HAL_LAYER_SLOT_stream_wait_event, .device = s->device, .stream = s, .event = e
    };
    hal_status_t st = run_before(s->inst, &c);
    if (st == HAL_OK)
        st = s->next->stream_wait_event(s->obj, e->obj);
    return run_after(s->inst, &c, st);
}

static hal_status_t l_stream_add_callback(void *stream, hal_host_fn_t fn, void *user_data)
{
    hal_layer_obj_t *s = stream;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_stream_add_callback,
                           .device = s->device,
                           .stream = s,
                           .callback = fn,
                           .host_arg = user_data };
    hal_status_t st = run_before(s->inst, &c);
    if (st == HAL_OK)
        st = s->next->stream_add_callback(s->obj, c.callback, c.host_arg);
    return run_after(s->inst, &c, st);
}

static hal_status_t l_stream_launch_host_fn(void *stream, hal_stream_host_fn_t fn, void *arg)
{
    hal_layer_obj_t *s = stream;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_stream_launch_host_fn,
                           .device = s->device,
                           .stream = s,
                           .host_fn = fn,
                           .host_arg = arg };
    hal_status_t st = run_before(s->inst, &c);
    if (st == HAL_OK)
        st = s->next->stream_launch_host_fn(s->obj, c.host_fn, c.host_arg);
    return run_after(s->inst, &c, st);
}

static hal_status_t l_stream_get_native_handle(void *stream, uintptr_t *native)
{
    hal_layer_obj_t *s = stream;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_stream_get_native_handle,
                           .device = s->device,
                           .stream = s };
    hal_status_t st = run_before(s->inst, &c);
    if (st == HAL_OK)
        st = s->next->stream_get_native_handle(s->obj, native);
    return run_after(s->inst, &c, st);
}

/* ---- events ---- */

static hal_status_t l_event_create(void *device, uint32_t flags, void **event)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_event_create, .device = d, .arg = flags };
    hal_layer_obj_t *e = wrapper_new(d->inst, HAL_LAYER_OBJ_EVENT, d);
    if (!e)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    e->flags = flags;
    void *next_obj = NULL;
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->event_create(d->obj, flags, &next_obj);
    if (st == HAL_OK) {
        wrapper_live(e, next_obj);
        c.created = c.event = e;
    }
    hal_status_t result = run_after(d->inst, &c, st);
    if (st == HAL_OK && result != HAL_OK && d->next->event_destroy)
        d->next->event_destroy(next_obj);
    if (result != HAL_OK) {
        wrapper_free(e);
        return result;
    }
    *event = e;
    return HAL_OK;
}

static void l_event_destroy(void *event)
{
    hal_layer_obj_t *e = event;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_event_destroy, .device = e->device, .event = e };
    run_before(e->inst, &c);
    if (e->next->event_destroy)
        e->next->event_destroy(e->obj);
    run_after(e->inst, &c, HAL_OK);
    wrapper_free(e);
}

static hal_status_t l_event_record(void *event, void *stream)
{
    hal_layer_obj_t *e = event, *s = stream;
    hal_layer_call_t c = {
        .slot = HAL_LAYER_SLOT_event_record, .device = e->device, .stream = s, .event = e
    };
    hal_status_t st = run_before(e->inst, &c);
    if (st == HAL_OK)
        st = e->next->event_record(e->obj, s->obj);
    return run_after(e->inst, &c, st);
}

static hal_status_t l_event_query(void *event)
{
    hal_layer_obj_t *e = event;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_event_query, .device = e->device, .event = e };
    hal_status_t st = run_before(e->inst, &c);
    if (st == HAL_OK)
        st = e->next->event_query(e->obj);
    return run_after(e->inst, &c, st);
}

static hal_status_t l_event_synchronize(void *event)
{
    hal_layer_obj_t *e = event;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_event_synchronize,
                           .device = e->device,
                           .event = e };
    hal_status_t st = run_before(e->inst, &c);
    if (st == HAL_OK)
        st = e->next->event_synchronize(e->obj);
    return run_after(e->inst, &c, st);
}

static hal_status_t l_event_elapsed_ms(void *start, void *end, float *ms)
{
    hal_layer_obj_t *a = start, *b = end;
    hal_layer_call_t c = {
        .slot = HAL_LAYER_SLOT_event_elapsed_ms, .device = a->device, .event = a, .event2 = b
    };
    hal_status_t st = run_before(a->inst, &c);
    if (st == HAL_OK)
        st = a->next->event_elapsed_ms(a->obj, b->obj, ms);
    if (st == HAL_OK)
        c.out_ms = *ms;
    return run_after(a->inst, &c, st);
}

static hal_status_t l_event_get_native_handle(void *event, uintptr_t *native)
{
    hal_layer_obj_t *e = event;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_event_get_native_handle,
                           .device = e->device,
                           .event = e };
    hal_status_t st = run_before(e->inst, &c);
    if (st == HAL_OK)
        st = e->next->event_get_native_handle(e->obj, native);
    return run_after(e->inst, &c, st);
}

/* ---- communicators ---- */

static hal_status_t l_comm_init(void *device, const hal_backend_comm_args_t *args, void **comm)
{
    hal_layer_obj_t *d = device;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_comm_init, .device = d, .arg = args->rank };
    hal_layer_obj_t *m = wrapper_new(d->inst, HAL_LAYER_OBJ_COMM, d);
    if (!m)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    m->rank = args->rank;
    m->nranks = args->nranks;
    void *next_obj = NULL;
    hal_status_t st = run_before(d->inst, &c);
    if (st == HAL_OK)
        st = d->next->comm_init(d->obj, args, &next_obj);
    if (st == HAL_OK) {
        wrapper_live(m, next_obj);
        c.created = c.comm = m;
    }
    hal_status_t result = run_after(d->inst, &c, st);
    if (st == HAL_OK && result != HAL_OK && d->next->comm_destroy)
        d->next->comm_destroy(next_obj);
    if (result != HAL_OK) {
        wrapper_free(m);
        return result;
    }
    *comm = m;
    return HAL_OK;
}

static hal_status_t l_comm_destroy(void *comm)
{
    hal_layer_obj_t *m = comm;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_comm_destroy, .device = m->device, .comm = m };
    hal_status_t pre = run_before(m->inst, &c);
    hal_status_t st = m->next->comm_destroy(m->obj);
    st = run_after(m->inst, &c, st == HAL_OK ? pre : st);
    wrapper_free(m);
    return st;
}

static hal_status_t l_comm_abort(void *comm)
{
    hal_layer_obj_t *m = comm;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_comm_abort, .device = m->device, .comm = m };
    hal_status_t pre = run_before(m->inst, &c);
    hal_status_t st = m->next->comm_abort(m->obj);
    return run_after(m->inst, &c, st == HAL_OK ? pre : st);
}

static hal_status_t l_comm_get_async_error(void *comm)
{
    hal_layer_obj_t *m = comm;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_comm_get_async_error,
                           .device = m->device,
                           .comm = m };
    hal_status_t st = run_before(m->inst, &c);
    if (st == HAL_OK)
        st = m->next->comm_get_async_error(m->obj);
    return run_after(m->inst, &c, st);
}

static hal_status_t l_comm_get_native_handle(void *comm, uintptr_t *native)
{
    hal_layer_obj_t *m = comm;
    hal_layer_call_t c = { .slot = HAL_LAYER_SLOT_comm_get_native_handle,
                           .device = m->device,
                           .comm = m };
    hal_status_t st = run_before(m->inst, &c);
    if (st == HAL_OK)
        st = m->next->comm_get_native_handle(m->obj, native);
    return run_after(m->inst, &c, st);
}

/* The collective slots share one body: the call description, then a switch on the slot. */
typedef struct coll_args {
    const hal_backend_ptr_t *send, *recv;
    size_t count;
    hal_dtype_t dtype;
    hal_redop_t op;
    int root;
} coll_args_t;

static hal_status_t l_collective(hal_layer_slot_t slot, void *comm, void *stream,
                                 const coll_args_t *a)
{
    hal_layer_obj_t *m = comm, *s = stream;
    hal_backend_ptr_t sp, rp;
    const hal_backend_ptr_t *send = a->send ? unwrap_ptr(a->send, &sp) : NULL;
    const hal_backend_ptr_t *recv = a->recv ? unwrap_ptr(a->recv, &rp) : NULL;
    hal_layer_call_t c = { .slot = slot,
                           .device = m->device,
                           .stream = s,
                           .comm = m,
                           .ptr = a->send ? a->send->ptr : NULL,
                           .ptr2 = a->recv ? a->recv->ptr : NULL,
                           .size = a->count,
                           .dtype = a->dtype,
                           .op = a->op,
                           .arg = a->root };
    hal_status_t st = run_before(m->inst, &c);
    if (st == HAL_LAYER_HANDLED)
        st = HAL_OK;
    else if (st == HAL_OK)
        st = HAL_LAYER_HANDLED; /* not handled yet: call the next level below */
    if (st != HAL_LAYER_HANDLED)
        return run_after(m->inst, &c, st);
    const hal_backend_ops_t *n = m->next;
    void *nc = m->obj, *ns = s->obj;
    switch (slot) {
    case HAL_LAYER_SLOT_allreduce:
        st = n->allreduce(nc, ns, send, recv, a->count, a->dtype, a->op);
        break;
    case HAL_LAYER_SLOT_broadcast:
        st = n->broadcast(nc, ns, send, recv, a->count, a->dtype, a->root);
        break;
    case HAL_LAYER_SLOT_reduce:
        st = n->reduce(nc, ns, send, recv, a->count, a->dtype, a->op, a->root);
        break;
    case HAL_LAYER_SLOT_allgather:
        st = n->allgather(nc, ns, send, recv, a->count, a->dtype);
        break;
    case HAL_LAYER_SLOT_reduce_scatter:
        st = n->reduce_scatter(nc, ns, send, recv, a->count, a->dtype, a->op);
        break;
    case HAL_LAYER_SLOT_alltoall:
        st = n->alltoall(nc, ns, send, recv, a->count, a->dtype);
        break;
    case HAL_LAYER_SLOT_send:
        st = n->send(nc, ns, send, a->count, a->dtype, a->root);
        break;
    case HAL_LAYER_SLOT_recv:
        st = n->recv(nc, ns, recv, a->count, a->dtype, a->root);
        break;
    default:
        st = HAL_ERROR_INTERNAL;
        break;
    }
    return run_after(m->inst, &c, st);
}

static hal_status_t l_allreduce(void *comm, void *stream, const hal_backend_ptr_t *send,
                                const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                                hal_redop_t op)
{
    coll_args_t a = { send, recv, count, dtype, op, -1 };
    return l_collective(HAL_LAYER_SLOT_allreduce, comm, stream, &a);
}

static hal_status_t l_broadcast(void *comm, void *stream, const hal_backend_ptr_t *send,
                                const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                                int root)
{
    coll_args_t a = { send, recv, count, dtype, HAL_REDOP_SUM, root };
    return l_collective(HAL_LAYER_SLOT_broadcast, comm, stream, &a);
}

static hal_status_t l_reduce(void *comm, void *stream, const hal_backend_ptr_t *send,
                             const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype,
                             hal_redop_t op, int root)
{
    coll_args_t a = { send, recv, count, dtype, op, root };
    return l_collective(HAL_LAYER_SLOT_reduce, comm, stream, &a);
}

static hal_status_t l_allgather(void *comm, void *stream, const hal_backend_ptr_t *send,
                                const hal_backend_ptr_t *recv, size_t sendcount, hal_dtype_t dtype)
{
    coll_args_t a = { send, recv, sendcount, dtype, HAL_REDOP_SUM, -1 };
    return l_collective(HAL_LAYER_SLOT_allgather, comm, stream, &a);
}

static hal_status_t l_reduce_scatter(void *comm, void *stream, const hal_backend_ptr_t *send,
                                     const hal_backend_ptr_t *recv, size_t recvcount,
                                     hal_dtype_t dtype, hal_redop_t op)
{
    coll_args_t a = { send, recv, recvcount, dtype, op, -1 };
    return l_collective(HAL_LAYER_SLOT_reduce_scatter, comm, stream, &a);
}

static hal_status_t l_alltoall(void *comm, void *stream, const hal_backend_ptr_t *send,
                               const hal_backend_ptr_t *recv, size_t count, hal_dtype_t dtype)
{
    coll_args_t a = { send, recv, count, dtype, HAL_REDOP_SUM, -1 };
    return l_collective(HAL_LAYER_SLOT_alltoall, comm, stream, &a);
}

static hal_status_t l_send(void *comm, void *stream, const hal_backend_ptr_t *send, size_t count,
                           hal_dtype_t dtype, int peer)
{
    coll_args_t a = { send, NULL, count, dtype, HAL_REDOP_SUM, peer };
    return l_collective(HAL_LAYER_SLOT_send, comm, stream, &a);
}

static hal_status_t l_recv(void *comm, void *stream, const hal_backend_ptr_t *recv, size_t count,
                           hal_dtype_t dtype, int peer)
{
    coll_args_t a = { NULL, recv, count, dtype, HAL_REDOP_SUM, peer };
    return l_collective(HAL_LAYER_SLOT_recv, comm, stream, &a);
}

/* ---- the chain ---- */

static const hal_backend_ops_t forwarding_ops = {
    .fini = l_fini,
    .device_count = l_device_count,
    .device_open = l_device_open,
    .device_close = l_device_close,
    .device_get_properties = l_device_get_properties,
    .device_synchronize = l_device_synchronize,
    .device_get_native_handle = l_device_get_native_handle,
    .device_get_free_memory = l_device_get_free_memory,
    .mem_alloc = l_mem_alloc,
    .mem_free = l_mem_free,
    .memcpy_async = l_memcpy_async,
    .memset_async = l_memset_async,
    .stream_create = l_stream_create,
    .stream_destroy = l_stream_destroy,
    .stream_query = l_stream_query,
    .stream_synchronize = l_stream_synchronize,
    .stream_wait_event = l_stream_wait_event,
    .stream_add_callback = l_stream_add_callback,
    .stream_get_native_handle = l_stream_get_native_handle,
    .event_create = l_event_create,
    .event_destroy = l_event_destroy,
    .event_record = l_event_record,
    .event_query = l_event_query,
    .event_synchronize = l_event_synchronize,
    .event_elapsed_ms = l_event_elapsed_ms,
    .event_get_native_handle = l_event_get_native_handle,
    .mem_free_async = l_mem_free_async,
    .stream_launch_host_fn = l_stream_launch_host_fn,
    .mem_ipc_export = l_mem_ipc_export,
    .mem_ipc_open = l_mem_ipc_open,
    .mem_ipc_close = l_mem_ipc_close,
    .comm_init = l_comm_init,
    .comm_destroy = l_comm_destroy,
    .comm_abort = l_comm_abort,
    .comm_get_async_error = l_comm_get_async_error,
    .comm_get_native_handle = l_comm_get_native_handle,
    .allreduce = l_allreduce,
    .broadcast = l_broadcast,
    .reduce = l_reduce,
    .allgather = l_allgather,
    .reduce_scatter = l_reduce_scatter,
    .alltoall = l_alltoall,
    .send = l_send,
    .recv = l_recv,
    .group_begin = l_group_begin,
    .group_end = l_group_end,
};

/* This level's table: every forwarding slot whose next-level slot exists. */
static void build_table(hal_layer_inst_t *inst)
{
    const hal_backend_ops_t *next = inst->next;
    inst->ops = forwarding_ops;
    inst->ops.struct_size = sizeof(inst->ops);
    inst->ops.api_version = next->api_version;
    inst->ops.name = next->name;
    inst->ops.device_type_name = next->device_type_name;
    inst->ops.init = NULL; /* the core installs layers; it never calls their init */
#define HAL_LAYER_MIRROR(slot, flags) \
    if (!next->slot)                  \
        inst->ops.slot = NULL;
    HAL_LAYER_SLOTS(HAL_LAYER_MIRROR)
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

hal_layer_obj_t *hal_layer_find(const hal_layer_inst_t *inst, void *top)
{
    void *o = top;
    for (unsigned i = 0; i < inst->depth && o; i++)
        o = OBJ(o)->obj;
    return o;
}
