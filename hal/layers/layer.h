/* SPDX-License-Identifier: Apache-2.0 */
/* Layers that wrap a backend (HAL_LAYERS=trace,faults): the interposition mechanism. Internal to
 * the HAL (the core, the layers and their tests).
 *
 * A layer instance sits between the core and the next level (the backend, or the next layer). It
 * offers the core a complete hal_backend_ops_t whose slots forward to the next level's table.
 * Because a slot receives only its own level's objects, every object the instance hands upward
 * (backend, device, stream, event, communicator, program) is a wrapper, hal_layer_obj_t, that holds
 * the next level's table and object; the slots unwrap their arguments on the way down, including
 * hal_backend_ptr_t.device. Allocation cookies pass through untouched: mem_alloc and mem_ipc_open
 * return the next level's cookie, so mem_free and mem_ipc_close receive it back unchanged, and
 * so do the cookies inside hal_backend_ptr_t. A slot the next level leaves NULL is NULL in the
 * instance's table too, so the core's optional-slot fallbacks behave exactly as without layers.
 *
 * The forwarding itself is generic (layer_forward.inc, generated from the slot spec
 * hal/abi/slots.toml, and layer.c); what a layer does is in its hooks, called around
 * every slot with a description of the call (hal_layer_call_t): `before` may refuse the call
 * (it does not reach the next level; the hook left the detail through host->set_error) or
 * replace the host function being enqueued; `after` sees the status and may replace it. Slots
 * that release resources (HAL_SLOT_FLAG_RELEASES) always reach the next level: a hook may only
 * change the status they return. Calls a layer makes on its own behalf (hal_layer_internal_*)
 * pass through the levels below without running their hooks, so one layer never perturbs what
 * another one counts.
 *
 * The core installs the chain in hal_backend_open, in the order HAL_LAYERS lists the layers
 * (the first is outermost: the core calls it first). Collectives the HAL runs itself on its host
 * engine never reach a slot; the core reports them to the chain through
 * hal_layers_collective_begin/end. */
#ifndef HAL_LAYERS_LAYER_H
#define HAL_LAYERS_LAYER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hal/hal_backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hal_backend_s;

/* The slots, their names and flags (HAL_SLOT_<name>, HAL_SLOT_FLAG_*): the registry generated
 * from the slot spec, hal/abi/slots.toml. */
#include "hal/src/slots.h"

/* "mem_alloc" for HAL_SLOT_mem_alloc; "unknown" out of range. */
const char *hal_slot_name(hal_slot_t slot);
/* The slot's HAL_SLOT_FLAG_* bits (0 out of range). */
uint32_t hal_slot_flags(hal_slot_t slot);

typedef enum hal_layer_obj_type {
    HAL_LAYER_OBJ_BACKEND,
    HAL_LAYER_OBJ_DEVICE,
    HAL_LAYER_OBJ_STREAM,
    HAL_LAYER_OBJ_EVENT,
    HAL_LAYER_OBJ_COMM,
    HAL_LAYER_OBJ_PROGRAM,
} hal_layer_obj_type_t;

typedef struct hal_layer_inst hal_layer_inst_t;

#define HAL_LAYER_MAGIC 0x484c5931u /* "HLY1" */

/* What an instance hands upward in place of the next level's object. */
typedef struct hal_layer_obj {
    uint32_t magic; /* HAL_LAYER_MAGIC */
    hal_layer_obj_type_t type;
    uint32_t id; /* devices: their index; other objects: numbered from 1 per instance */
    hal_layer_inst_t *inst;
    const hal_backend_ops_t *next; /* the next level's table */
    void *obj;                     /* the next level's object */
    struct hal_layer_obj *device;  /* the device it belongs to (a device: itself) */
    int32_t priority;              /* streams */
    uint32_t flags;                /* events */
    int rank, nranks;              /* communicators */
    _Atomic uint64_t state;        /* free for the layer (e.g. a sticky failure) */
} hal_layer_obj_t;

/* One slot call, as the hooks see it. Which fields are set depends on the slot. */
typedef struct hal_layer_call {
    hal_slot_t slot;
    hal_layer_obj_t *device;  /* the device the call concerns (NULL for backend-wide slots) */
    hal_layer_obj_t *stream;  /* the stream it enqueues on or queries */
    hal_layer_obj_t *event;   /* the event (event_elapsed_ms: the start) */
    hal_layer_obj_t *event2;  /* event_elapsed_ms: the end */
    hal_layer_obj_t *comm;    /* the communicator */
    hal_layer_obj_t *program; /* program_*, kernel_launch: the program */
    hal_layer_obj_t *created; /* after: the object a create/open slot made (NULL on failure) */
    hal_mem_kind_t kind;      /* mem_*: the memory kind; memcpy_async: of dst */
    hal_mem_kind_t kind2;     /* memcpy_async: of src */
    const void *ptr;          /* mem_alloc (after), mem_free, dst, send buffer, ipc pointer */
    const void *ptr2;         /* src, recv buffer */
    uint64_t size;     /* bytes (mem_alloc, memcpy, memset, program_create), element count, or
                          kernel_launch's argument count */
    int64_t arg;       /* index, priority, flags, value, alignment, root or peer;
                          memcpy_async: 1 where its ends belong to different devices */
    int32_t dtype, op; /* collectives */
    uint64_t out;      /* after: device_count's count, device_get_free_memory's bytes */
    float out_ms;      /* after: event_elapsed_ms */
    const char *name;  /* program_get_kernel, kernel_launch: the kernel's name */
    /* stream_launch_host_fn / stream_add_callback: what is enqueued; `before` may replace it. */
    hal_stream_host_fn_t host_fn;
    hal_host_fn_t callback;
    void *host_arg;
    /* Scratch for the layer, from before to after. */
    uint64_t t0;
    void *scratch;
} hal_layer_call_t;

/* A collective the HAL runs on its host engine, as reported to the layers. */
typedef struct hal_host_collective {
    const char *name; /* "hal_allreduce" (the first operation of a group) */
    size_t ops;       /* operations in the job (a group is one job) */
    int rank, nranks;
    uint32_t device_index;
    void *device; /* the core's device object (the outermost level's) */
    size_t count;
    hal_dtype_t dtype;
    hal_redop_t op;
    int root;
} hal_host_collective_t;

/* What `before` returns, for the collective slots only, when it has dealt with the call itself:
 * the call does not reach the next level, and the slot returns HAL_OK. */
#define HAL_LAYER_HANDLED ((hal_status_t)0x7ffffff0)

typedef struct hal_layer {
    const char *name;
    /* Makes the layer's state for one instance (hal_backend_open, after the next level was
     * initialised). A failure (message set with hal_error) fails the open. */
    hal_status_t (*create)(hal_layer_inst_t *inst, void **ctx);
    /* Releases it (hal_backend_close, after the levels below were finished). */
    void (*destroy)(void *ctx);
    /* Around every slot; NULL hooks are skipped. */
    hal_status_t (*before)(void *ctx, hal_layer_call_t *call);
    hal_status_t (*after)(void *ctx, hal_layer_call_t *call, hal_status_t status);
    /* Around collectives on the host engine, on the thread that runs them (in stream order). A
     * failure of begin (message set with hal_error) fails the collective on this rank. */
    hal_status_t (*collective_begin)(void *ctx, const hal_host_collective_t *c);
    void (*collective_end)(void *ctx, const hal_host_collective_t *c, hal_status_t status);
    /* An object or allocation the application left behind, found by the core when the backend
     * closes (before it cleans it up): what ("hal_stream_t", "allocation", ...), the core's
     * handle or the allocation's base, and bytes (allocations) or 0. */
    void (*leak)(void *ctx, const char *what, const void *handle, size_t bytes);
    /* True: while the layer is installed the core never reuses the memory of a destroyed handle,
     * so that every later use of it is caught (hal/src/handle_pool.c). */
    bool keeps_handles;
} hal_layer_t;

struct hal_layer_inst {
    const hal_layer_t *layer;
    void *ctx;
    const hal_host_services_t *host;
    const hal_backend_ops_t *next; /* the next level's table */
    hal_backend_ops_t ops;         /* this level's table */
    hal_layer_obj_t backend;       /* wraps the next level's backend object */
    unsigned depth;                /* 0: outermost */
    hal_layer_inst_t *below;       /* the next instance down the chain, or NULL */
    _Atomic uint32_t seq;          /* ids of streams, events, communicators */
};

/* The layers HAL_LAYERS names. */
#define HAL_LAYERS_MAX 4
typedef struct hal_layer_list {
    uint32_t count;
    const hal_layer_t *layers[HAL_LAYERS_MAX]; /* outermost first */
} hal_layer_list_t;

extern const hal_layer_t hal_validation_layer;
extern const hal_layer_t hal_trace_layer;
extern const hal_layer_t hal_faults_layer;

/* Parses a HAL_LAYERS value (NULL or empty: no layers): names separated by commas or blanks,
 * each at most once. Pure apart from the thread-local error message.
 * Returns HAL_OK or HAL_ERROR_INVALID_ARGUMENT. */
hal_status_t hal_layers_parse(const char *value, hal_layer_list_t *out);

/* Wraps b's backend (b->ops and b->impl, already initialised) in the listed layers and points
 * b->ops/b->impl at the outermost. On failure the whole chain, the backend included, has been
 * finished (fini) and the status is returned with its message. */
hal_status_t hal_layers_install(struct hal_backend_s *b, const hal_layer_list_t *list,
                                const hal_host_services_t *host);

/* Host-engine collectives (called by the collectives front end when b->layers is set). */
hal_status_t hal_layers_collective_begin(struct hal_backend_s *b, const hal_host_collective_t *c);
void hal_layers_collective_end(struct hal_backend_s *b, const hal_host_collective_t *c,
                               hal_status_t status);

/* Whether a layer of the list keeps destroyed handles (hal_layer_t.keeps_handles). */
bool hal_layers_keep_handles(const hal_layer_list_t *list);

/* The wrapper `inst` made for an object that the core holds as `top` (an object of the
 * outermost level): unwraps inst->depth times. */
hal_layer_obj_t *hal_layer_find(const hal_layer_inst_t *inst, void *top);

/* Brackets calls a layer makes to the next level on its own behalf (marking a stream, enqueuing
 * a fault): the levels below forward them without running their hooks. */
void hal_layer_internal_begin(void);
void hal_layer_internal_end(void);

#ifdef __cplusplus
}
#endif

#endif /* HAL_LAYERS_LAYER_H */
