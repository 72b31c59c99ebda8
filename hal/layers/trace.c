/* SPDX-License-Identifier: Apache-2.0 */
/* The trace layer (HAL_LAYERS=trace): every slot call becomes a Chrome trace "complete" event
 * on the calling thread, with an argument summary, its status and duration; the work a call
 * enqueues becomes a second event on its stream's track, from the moment the stream reaches it
 * to the moment it is done. Those device-side spans are measured by host functions the layer
 * enqueues around the work (stream_launch_host_fn, else stream_add_callback), only while tracing;
 * host functions and callbacks the core enqueues are timed by a trampoline around them, and a
 * collective run on the host engine is named after its operation ("hal_allreduce"). Device-side
 * spans are named and classified as hal/include/hal/hal_activity.h says, as profilers built on
 * the HAL name their rows ("Memcpy HtoD" in "gpu_memcpy", a kernel's name in "kernel", ...).
 * The file is trace_file.c's. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/hal_activity.h"
#include "hal/layers/layer.h"
#include "hal/layers/trace.h"
#include "hal/src/core.h"

#define ARGS_MAX 400

typedef struct trace_ctx {
    hal_layer_inst_t *inst;
    char backend[64]; /* the backend's name, JSON-escaped */
    bool spans;       /* the next level can run host functions in stream order */
} trace_ctx_t;

/* Stream tracks are numbered per process, so that streams of two backends never share one. */
static _Atomic uint32_t next_track;

static uint32_t stream_track(const hal_layer_obj_t *s)
{
    return s ? (uint32_t)atomic_load(&((hal_layer_obj_t *)s)->state) : 0;
}

/* ---- formatting ---- */

typedef struct text {
    char *p;
    size_t n, cap;
    bool truncated; /* something did not fit: the text must not be used as JSON */
} text_t;

__attribute__((format(printf, 2, 3))) static void put(text_t *t, const char *fmt, ...)
{
    if (t->truncated)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= t->cap - t->n) {
        t->truncated = true;
        t->p[t->n] = '\0';
        return;
    }
    t->n += (size_t)k;
}

static void json_escape(const char *in, char *out, size_t size)
{
    size_t n = 0;
    for (; *in && n + 7 < size; in++) {
        unsigned char ch = (unsigned char)*in;
        if (ch == '"' || ch == '\\') {
            out[n++] = '\\';
            out[n++] = (char)ch;
        } else if (ch < 0x20) {
            n += (size_t)snprintf(out + n, size - n, "\\u%04x", ch);
        } else {
            out[n++] = (char)ch;
        }
    }
    out[n] = '\0';
}

static const char *kind_name(hal_mem_kind_t kind)
{
    switch (kind) {
    case HAL_MEM_KIND_DEVICE:
        return "device";
    case HAL_MEM_KIND_HOST_PINNED:
        return "pinned";
    case HAL_MEM_KIND_SHARED:
        return "shared";
    default:
        return "pageable";
    }
}

static const char *dtype_name(int32_t dtype)
{
    static const char *const names[HAL_DTYPE_COUNT] = {
        "i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8_e4m3", "f8_e5m2",
    };
    return dtype >= 0 && dtype < HAL_DTYPE_COUNT ? names[dtype] : "unknown";
}

static const char *op_name(int32_t op)
{
    static const char *const names[HAL_REDOP_COUNT] = { "sum", "prod", "max", "min", "avg" };
    return op >= 0 && op < HAL_REDOP_COUNT ? names[op] : "unknown";
}

static bool on_device(hal_mem_kind_t kind)
{
    return kind == HAL_MEM_KIND_DEVICE || kind == HAL_MEM_KIND_SHARED;
}

static hal_copy_direction_t copy_direction(const hal_layer_call_t *c)
{
    return hal_copy_direction_of(on_device(c->kind), on_device(c->kind2), c->arg == 0);
}

/* ts and dur: microseconds with nanosecond digits. */
static void put_us(text_t *t, const char *key, uint64_t ns)
{
    put(t, ",\"%s\":%" PRIu64 ".%03u", key, ns / 1000u, (unsigned)(ns % 1000u));
}

/* The argument summary of a slot call (without braces). */
static void format_args(const trace_ctx_t *ctx, const hal_layer_call_t *c, hal_status_t st,
                        text_t *t)
{
    put(t, "\"backend\":\"%s\",\"status\":\"%s\"", ctx->backend, hal_status_string(st));
    if (c->device)
        put(t, ",\"device\":%u", c->device->id);
    if (c->stream)
        put(t, ",\"stream\":%u", stream_track(c->stream));
    if (c->event)
        put(t, ",\"event\":%u", c->event->id);
    if (c->comm)
        put(t, ",\"comm\":%u,\"rank\":%d,\"nranks\":%d", c->comm->id, c->comm->rank,
            c->comm->nranks);
    bool ok = st == HAL_OK;
    switch (c->slot) {
    case HAL_SLOT_device_count:
        if (ok)
            put(t, ",\"count\":%" PRIu64, c->out);
        break;
    case HAL_SLOT_device_open:
        put(t, ",\"index\":%" PRId64, c->arg);
        break;
    case HAL_SLOT_device_get_free_memory:
        if (ok)
            put(t, ",\"free_bytes\":%" PRIu64, c->out);
        break;
    case HAL_SLOT_mem_alloc:
        put(t, ",\"kind\":\"%s\",\"bytes\":%" PRIu64 ",\"alignment\":%" PRId64, kind_name(c->kind),
            c->size, c->arg);
        if (ok)
            put(t, ",\"ptr\":\"%p\"", c->ptr);
        break;
    case HAL_SLOT_mem_free:
    case HAL_SLOT_mem_free_async:
        put(t, ",\"kind\":\"%s\",\"ptr\":\"%p\"", kind_name(c->kind), c->ptr);
        break;
    case HAL_SLOT_memcpy_async:
        put(t,
            ",\"bytes\":%" PRIu64
            ",\"dst\":\"%p\",\"src\":\"%p\",\"dst_kind\":\"%s\",\"src_kind\":\"%s\"",
            c->size, c->ptr, c->ptr2, kind_name(c->kind), kind_name(c->kind2));
        put(t, ",\"" HAL_ACTIVITY_ARG_DIRECTION "\":\"%s\"",
            hal_copy_direction_name(copy_direction(c)));
        break;
    case HAL_SLOT_memset_async:
        put(t, ",\"bytes\":%" PRIu64 ",\"dst\":\"%p\",\"value\":%" PRId64, c->size, c->ptr, c->arg);
        break;
    case HAL_SLOT_stream_create:
        put(t, ",\"priority\":%" PRId64, c->arg);
        if (c->created)
            put(t, ",\"new_stream\":%u", stream_track(c->created));
        break;
    case HAL_SLOT_event_create:
        put(t, ",\"flags\":%" PRId64, c->arg);
        if (c->created)
            put(t, ",\"new_event\":%u", c->created->id);
        break;
    case HAL_SLOT_event_elapsed_ms:
        put(t, ",\"end_event\":%u", c->event2 ? c->event2->id : 0);
        if (ok)
            put(t, ",\"ms\":%.6f", (double)c->out_ms);
        break;
    case HAL_SLOT_mem_ipc_export:
    case HAL_SLOT_mem_ipc_close:
        put(t, ",\"ptr\":\"%p\"", c->ptr);
        break;
    case HAL_SLOT_mem_ipc_open:
        if (ok)
            put(t, ",\"ptr\":\"%p\",\"bytes\":%" PRIu64, c->ptr, c->size);
        break;
    case HAL_SLOT_comm_init:
        put(t, ",\"rank\":%" PRId64, c->arg);
        if (c->created)
            put(t, ",\"new_comm\":%u", c->created->id);
        break;
    default:
        if (hal_slot_flags(c->slot) & HAL_SLOT_FLAG_COLLECTIVE) {
            put(t, ",\"count\":%" PRIu64 ",\"dtype\":\"%s\"", c->size, dtype_name(c->dtype));
            if (c->slot == HAL_SLOT_allreduce || c->slot == HAL_SLOT_reduce ||
                c->slot == HAL_SLOT_reduce_scatter)
                put(t, ",\"op\":\"%s\"", op_name(c->op));
            if (c->slot == HAL_SLOT_broadcast || c->slot == HAL_SLOT_reduce)
                put(t, ",\"root\":%" PRId64, c->arg);
            if (c->slot == HAL_SLOT_send || c->slot == HAL_SLOT_recv)
                put(t, ",\"peer\":%" PRId64, c->arg);
        }
        break;
    }
}

/* Emits one complete event. tid is a thread id or a stream track. */
static void emit(const char *name, const char *cat, uint64_t start_ns, uint64_t end_ns,
                 uint32_t tid, const char *args)
{
    char event[2 * ARGS_MAX + HAL_KERNEL_NAME_MAX]; /* room for a kernel name too */
    text_t t = { event, 0, sizeof(event), false };
    put(&t, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\"", name, cat);
    put_us(&t, "ts", start_ns);
    put_us(&t, "dur", end_ns > start_ns ? end_ns - start_ns : 0);
    put(&t, ",\"pid\":%d,\"tid\":%u,\"args\":{%s}}", hal_trace_pid(), tid, args);
    if (t.truncated) /* cannot happen with the sizes above; never write half an event */
        hal_trace_file_emit(NULL, SIZE_MAX);
    else
        hal_trace_file_emit(event, t.n);
}

/* Names a stream's track (a "thread" of the trace) once, when the stream is created. */
static void name_track(const trace_ctx_t *ctx, const hal_layer_obj_t *s)
{
    char event[384];
    uint32_t track = stream_track(s);
    uint32_t tid = HAL_TRACE_STREAM_TID_BASE + track;
    int n = snprintf(event, sizeof(event),
                     "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"args\":{"
                     "\"name\":\"%s device %u stream %u (priority %d)\"}}",
                     hal_trace_pid(), tid, ctx->backend, s->device->id, track, (int)s->priority);
    hal_trace_file_emit(event, (size_t)n);
    n = snprintf(event, sizeof(event),
                 "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"args\":{"
                 "\"sort_index\":%u}}",
                 hal_trace_pid(), tid, tid);
    hal_trace_file_emit(event, (size_t)n);
}

/* ---- device-side spans of enqueued work ---- */

typedef struct span {
    _Atomic int refs;  /* the start and end marks */
    uint64_t start_ns; /* set by the start mark */
    uint32_t track;
    bool enqueued; /* the work itself was enqueued */
    /* The record's name and category (hal_activity.h), JSON-escaped. */
    char name[HAL_KERNEL_NAME_MAX + 8];
    const char *cat;
    char args[ARGS_MAX];
} span_t;

static void span_unref(span_t *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1)
        free(s);
}

static hal_status_t mark_start(void *arg, hal_status_t stream_status)
{
    span_t *s = arg;
    s->start_ns = hal_trace_now_ns();
    span_unref(s);
    return HAL_OK;
}

static hal_status_t mark_end(void *arg, hal_status_t stream_status)
{
    span_t *s = arg;
    if (s->enqueued) {
        char args[ARGS_MAX + 64];
        snprintf(args, sizeof(args), "%s%s%s%s", s->args,
                 stream_status != HAL_OK ? ",\"stream_status\":\"" : "",
                 stream_status != HAL_OK ? hal_status_string(stream_status) : "",
                 stream_status != HAL_OK ? "\"" : "");
        emit(s->name, s->cat, s->start_ns, hal_trace_now_ns(), HAL_TRACE_STREAM_TID_BASE + s->track,
             args);
    }
    span_unref(s);
    return HAL_OK;
}

static void mark_start_cb(hal_status_t stream_status, void *arg)
{
    mark_start(arg, stream_status);
}

static void mark_end_cb(hal_status_t stream_status, void *arg)
{
    mark_end(arg, stream_status);
}

/* Names the work a span measures as hal_activity.h does: copies "Memcpy HtoD" and the like,
 * fills "Memset (Device)", launches after their kernel, collectives "hal_<operation>"; the
 * rest (event records and waits, asynchronous frees) after their slot, as stream bookkeeping. */
static void name_span(span_t *s, const hal_layer_call_t *c)
{
    hal_activity_kind_t kind = HAL_ACTIVITY_STREAM;
    const char *name = hal_slot_name(c->slot);
    if (c->slot == HAL_SLOT_memcpy_async) {
        kind = HAL_ACTIVITY_MEMCPY;
        name = hal_copy_activity_name(copy_direction(c));
    } else if (c->slot == HAL_SLOT_memset_async) {
        kind = HAL_ACTIVITY_MEMSET;
        name = HAL_ACTIVITY_MEMSET_NAME;
    } else if (c->slot == HAL_SLOT_kernel_launch && c->name != NULL) {
        kind = HAL_ACTIVITY_KERNEL;
        name = c->name;
    } else if (hal_slot_flags(c->slot) & HAL_SLOT_FLAG_COLLECTIVE) {
        kind = HAL_ACTIVITY_COLLECTIVE;
    }
    s->cat = hal_activity_category(kind);
    if (kind == HAL_ACTIVITY_COLLECTIVE) {
        char full[64];
        snprintf(full, sizeof(full), HAL_ACTIVITY_COLLECTIVE_PREFIX "%s", name);
        json_escape(full, s->name, sizeof(s->name));
    } else {
        json_escape(name, s->name, sizeof(s->name));
    }
}

/* Enqueues a mark on the next level (a call of the layer's own, invisible to layers below). */
static hal_status_t enqueue_mark(hal_layer_obj_t *s, hal_stream_host_fn_t fn, hal_host_fn_t cb,
                                 void *arg)
{
    hal_layer_internal_begin();
    hal_status_t st = s->next->stream_launch_host_fn
                          ? s->next->stream_launch_host_fn(s->obj, fn, arg)
                          : s->next->stream_add_callback(s->obj, cb, arg);
    hal_layer_internal_end();
    if (st != HAL_OK)
        hal_host_take_error(); /* not the application's error */
    return st;
}

/* ---- host functions and callbacks the core enqueues ---- */

/* Set by collective_begin on the thread that runs a host-engine collective, read by the
 * trampoline that runs it. */
static _Thread_local struct {
    bool active;
    char args[ARGS_MAX];
    const char *name;
} current_collective;

typedef struct wrapped_fn {
    hal_stream_host_fn_t fn;
    hal_host_fn_t cb;
    void *arg;
    uint32_t track;
    char args[160];
} wrapped_fn_t;

static void emit_host_fn(wrapped_fn_t *w, uint64_t t0, hal_status_t rc)
{
    uint64_t t1 = hal_trace_now_ns();
    char args[ARGS_MAX + 200];
    const char *name = w->cb ? "callback" : "host_fn";
    hal_activity_kind_t kind = HAL_ACTIVITY_STREAM;
    if (current_collective.active) {
        name = current_collective.name; /* "hal_allreduce": hal_activity.h's form already */
        kind = HAL_ACTIVITY_COLLECTIVE;
        snprintf(args, sizeof(args), "%s,%s", w->args, current_collective.args);
    } else {
        snprintf(args, sizeof(args), "%s,\"status\":\"%s\"", w->args, hal_status_string(rc));
    }
    current_collective.active = false;
    emit(name, hal_activity_category(kind), t0, t1, HAL_TRACE_STREAM_TID_BASE + w->track, args);
}

static hal_status_t trampoline(void *arg, hal_status_t stream_status)
{
    wrapped_fn_t *w = arg;
    current_collective.active = false;
    uint64_t t0 = hal_trace_now_ns();
    hal_status_t rc = w->fn(w->arg, stream_status);
    emit_host_fn(w, t0, rc);
    free(w);
    return rc;
}

static void trampoline_cb(hal_status_t stream_status, void *arg)
{
    wrapped_fn_t *w = arg;
    current_collective.active = false;
    uint64_t t0 = hal_trace_now_ns();
    w->cb(stream_status, w->arg);
    emit_host_fn(w, t0, HAL_OK);
    free(w);
}

/* ---- hooks ---- */

static hal_status_t trace_before(void *arg, hal_layer_call_t *c)
{
    trace_ctx_t *ctx = arg;
    c->t0 = hal_trace_now_ns();
    c->scratch = NULL;
    if (c->slot == HAL_SLOT_stream_launch_host_fn || c->slot == HAL_SLOT_stream_add_callback) {
        wrapped_fn_t *w = calloc(1, sizeof(*w));
        if (!w)
            return HAL_OK; /* untraced, but the work goes ahead */
        w->fn = c->host_fn;
        w->cb = c->callback;
        w->arg = c->host_arg;
        w->track = stream_track(c->stream);
        snprintf(w->args, sizeof(w->args), "\"backend\":\"%s\",\"device\":%u,\"stream\":%u",
                 ctx->backend, c->device->id, w->track);
        if (c->host_fn)
            c->host_fn = trampoline;
        else
            c->callback = trampoline_cb;
        c->host_arg = w;
        c->scratch = w;
        return HAL_OK;
    }
    if ((hal_slot_flags(c->slot) & HAL_SLOT_FLAG_STREAM_ORDERED) && c->stream && ctx->spans) {
        span_t *s = calloc(1, sizeof(*s));
        if (!s)
            return HAL_OK;
        atomic_init(&s->refs, 2);
        s->track = stream_track(c->stream);
        if (enqueue_mark(c->stream, mark_start, mark_start_cb, s) != HAL_OK) {
            free(s);
            return HAL_OK;
        }
        c->scratch = s;
    }
    return HAL_OK;
}

static hal_status_t trace_after(void *arg, hal_layer_call_t *c, hal_status_t st)
{
    trace_ctx_t *ctx = arg;
    uint64_t t1 = hal_trace_now_ns();
    char args[ARGS_MAX];
    text_t t = { args, 0, sizeof(args), false };
    format_args(ctx, c, st, &t);
    if (t.truncated) { /* keep the event, without the summary that did not fit */
        t = (text_t){ args, 0, sizeof(args), false };
        put(&t, "\"backend\":\"%s\",\"status\":\"%s\"", ctx->backend, hal_status_string(st));
    }
    emit(hal_slot_name(c->slot), "hal", c->t0, t1, hal_trace_tid(), args);
    if (c->slot == HAL_SLOT_stream_create && c->created)
        name_track(ctx, c->created);
    if (c->slot == HAL_SLOT_stream_launch_host_fn || c->slot == HAL_SLOT_stream_add_callback) {
        if (st != HAL_OK)
            free(c->scratch); /* never enqueued */
        return st;
    }
    span_t *s = c->scratch;
    if (s) {
        s->enqueued = st == HAL_OK;
        name_span(s, c);
        memcpy(s->args, args, t.n + 1);
        if (enqueue_mark(c->stream, mark_end, mark_end_cb, s) != HAL_OK)
            span_unref(s);
    }
    return st;
}

/* Streams get their track numbers before anything can be enqueued on them: stream_create's
 * `after` runs before the core returns the stream. */
static hal_status_t trace_after_first(void *arg, hal_layer_call_t *c, hal_status_t st)
{
    if (c->slot == HAL_SLOT_stream_create && c->created)
        atomic_store(&c->created->state, atomic_fetch_add(&next_track, 1) + 1);
    return trace_after(arg, c, st);
}

static hal_status_t trace_collective_begin(void *arg, const hal_host_collective_t *c)
{
    current_collective.active = true;
    current_collective.name = c->name;
    snprintf(current_collective.args, sizeof(current_collective.args),
             "\"rank\":%d,\"nranks\":%d,\"ops\":%zu,\"count\":%zu,\"dtype\":\"%s\"", c->rank,
             c->nranks, c->ops, c->count, dtype_name(c->dtype));
    return HAL_OK;
}

static void trace_collective_end(void *arg, const hal_host_collective_t *c, hal_status_t st)
{
    size_t n = strlen(current_collective.args);
    snprintf(current_collective.args + n, sizeof(current_collective.args) - n, ",\"status\":\"%s\"",
             hal_status_string(st));
}

static hal_status_t trace_create(hal_layer_inst_t *inst, void **out)
{
    trace_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, inst->next->name, "hal_backend_open",
                         "out of host memory for the trace layer");
    hal_status_t st = hal_trace_file_acquire("hal_backend_open");
    if (st != HAL_OK) {
        free(ctx);
        return st;
    }
    ctx->inst = inst;
    json_escape(inst->next->name ? inst->next->name : "?", ctx->backend, sizeof(ctx->backend));
    ctx->spans = inst->next->stream_launch_host_fn || inst->next->stream_add_callback;
    *out = ctx;
    return HAL_OK;
}

static void trace_destroy(void *arg)
{
    free(arg);
    hal_trace_file_release(); /* the file is complete once its backend closed */
}

const hal_layer_t hal_trace_layer = {
    .name = "trace",
    .create = trace_create,
    .destroy = trace_destroy,
    .before = trace_before,
    .after = trace_after_first,
    .collective_begin = trace_collective_begin,
    .collective_end = trace_collective_end,
};
