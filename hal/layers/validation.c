/* SPDX-License-Identifier: Apache-2.0 */
/* The validation layer (HAL_LAYERS=validation). The core always checks NULL and magic numbers;
 * with this layer in the chain it also never reuses the memory of destroyed handles (so every
 * use-after-destroy is caught, not only recent ones: keeps_handles), tells a double free from a
 * foreign pointer (the layer remembers what reached the backend's free slots), reports every
 * object and allocation still alive when a backend closes (the core finds them, the leak hook
 * reports and counts them), and checks that every object the core hands a slot is a live object
 * of the level below, of the right type. */
#include <stdio.h>
#include <stdlib.h>

#include "hal/layers/layer.h"
#include "hal/src/core.h"

/* Recently freed base addresses, to tell a double free from a foreign pointer. Process-wide: a
 * bad free names no backend. */
#define FREED_RING 16384

static pthread_mutex_t freed_lock = PTHREAD_MUTEX_INITIALIZER;
static const void *freed_ring[FREED_RING];
static size_t freed_next;
static bool freed_any;
static _Atomic uint64_t leak_count;

typedef struct validation_ctx {
    hal_layer_inst_t *inst;
} validation_ctx_t;

static void note_freed(const void *ptr)
{
    pthread_mutex_lock(&freed_lock);
    freed_ring[freed_next] = ptr;
    freed_next = (freed_next + 1) % FREED_RING;
    freed_any = true;
    pthread_mutex_unlock(&freed_lock);
}

void hal_validation_on_free_failure(const void *ptr, const char *call)
{
    bool was_freed = false, tracking;
    pthread_mutex_lock(&freed_lock);
    tracking = freed_any;
    for (size_t i = 0; i < FREED_RING && !was_freed; i++)
        was_freed = freed_ring[i] == ptr;
    pthread_mutex_unlock(&freed_lock);
    if (was_freed)
        hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "double free of %p", ptr);
    else if (tracking)
        hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                  "%p was never allocated through the HAL (foreign pointer)", ptr);
    else
        hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                  "%p is not a live HAL allocation (a double free or a foreign pointer; "
                  "HAL_LAYERS=validation tells which)",
                  ptr);
}

hal_status_t hal_validation_get_leak_count(uint64_t *count)
{
    HAL_CHECK_NOT_NULL(count, NULL, "hal_validation_get_leak_count");
    *count = atomic_load(&leak_count);
    return HAL_OK;
}

/* ---- the layer ---- */

static hal_status_t validation_create(hal_layer_inst_t *inst, void **out)
{
    validation_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, inst->next->name, "hal_backend_open",
                         "out of host memory for the validation layer");
    ctx->inst = inst;
    *out = ctx;
    return HAL_OK;
}

static void validation_destroy(void *ctx)
{
    free(ctx);
}

/* A live wrapper of this level's own, of the given type (NULL: the call has no such object). */
static bool live(const hal_layer_obj_t *o, hal_layer_obj_type_t type)
{
    return !o || (o->magic == HAL_LAYER_MAGIC && o->type == type);
}

static hal_status_t validation_before(void *arg, hal_layer_call_t *c)
{
    validation_ctx_t *ctx = arg;
    if (live(c->device, HAL_LAYER_OBJ_DEVICE) && live(c->stream, HAL_LAYER_OBJ_STREAM) &&
        live(c->event, HAL_LAYER_OBJ_EVENT) && live(c->event2, HAL_LAYER_OBJ_EVENT) &&
        live(c->comm, HAL_LAYER_OBJ_COMM))
        return HAL_OK;
    /* Only a defect of the core (or of a layer above) gets here: the application's handles were
     * checked before any slot was called. Releases cannot be refused; they still report it. */
    ctx->inst->host->set_error("validation: %s was handed an object that is not live at this "
                               "level (a HAL defect)",
                               hal_slot_name(c->slot));
    return HAL_ERROR_INTERNAL;
}

static hal_status_t validation_after(void *arg, hal_layer_call_t *c, hal_status_t st)
{
    if (st == HAL_OK && (c->slot == HAL_SLOT_mem_free || c->slot == HAL_SLOT_mem_free_async))
        note_freed(c->ptr);
    return st;
}

static void validation_leak(void *arg, const char *what, const void *handle, size_t bytes)
{
    validation_ctx_t *ctx = arg;
    atomic_fetch_add(&leak_count, 1);
    if (bytes)
        fprintf(stderr, "hal validation: %s: leaked %s %p (%zu bytes) at backend close\n",
                ctx->inst->next->name, what, handle, bytes);
    else
        fprintf(stderr, "hal validation: %s: leaked %s %p at backend close\n",
                ctx->inst->next->name, what, handle);
}

const hal_layer_t hal_validation_layer = {
    .name = "validation",
    .create = validation_create,
    .destroy = validation_destroy,
    .before = validation_before,
    .after = validation_after,
    .leak = validation_leak,
    .keeps_handles = true,
};
