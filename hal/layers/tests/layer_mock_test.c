/* SPDX-License-Identifier: Apache-2.0 */
/* The interposition mechanism (hal/layers/layer.c) over a mock backend, without the core: each
 * slot receives the next level's own objects (hal_backend_ptr_t.device included) and the cookies
 * it handed out; slots the backend leaves empty stay empty; hooks run once per call and level,
 * may refuse a call, replace a status (undoing a creation) or handle a collective themselves;
 * releases always reach the backend; a layer's own calls bypass the hooks below; a failed install
 * finishes the backend. */
#include "hal/layers/faults.h"
#include "hal/layers/layer.h"
#include "hal/layers/tests/layer_test_util.h"
#include "hal/src/core.h"

/* ---- the mock backend: objects are tagged structs; every slot records what it received ---- */

enum { TAG_BACKEND = 0x4d424b31, TAG_DEVICE, TAG_STREAM, TAG_EVENT, TAG_COMM };

typedef struct mock_obj {
    uint32_t tag;
    int id;
} mock_obj_t;

static mock_obj_t mock_backend = { TAG_BACKEND, 0 };
static mock_obj_t mock_devices[2] = { { TAG_DEVICE, 0 }, { TAG_DEVICE, 1 } };

static struct {
    int calls[HAL_SLOT_COUNT];
    const void *obj, *obj2; /* the objects the last slot received */
    const void *ptr_device; /* hal_backend_ptr_t.device of the last pointer */
    const void *ptr_device2;
    const void *cookie;          /* the last cookie received */
    hal_status_t host_fn_status; /* what the last host function returned */
    int live;                    /* streams, events and communicators alive */
    int finis;
} mock;

#define MOCK_COOKIE ((void *)0xc00c1e)

static mock_obj_t *mock_new(uint32_t tag)
{
    mock_obj_t *o = malloc(sizeof(*o));
    o->tag = tag;
    o->id = ++mock.live;
    return o;
}

static void mock_delete(void *o)
{
    mock.live--;
    free(o);
}

#define SEEN(slot, o) (mock.calls[HAL_SLOT_##slot]++, mock.obj = (o))

static void m_fini(void *b)
{
    SEEN(fini, b);
    mock.finis++;
}
static hal_status_t m_device_count(void *b, uint32_t *n)
{
    SEEN(device_count, b);
    *n = 2;
    return HAL_OK;
}
static hal_status_t m_device_open(void *b, uint32_t i, void **d)
{
    SEEN(device_open, b);
    *d = &mock_devices[i];
    return HAL_OK;
}
static void m_device_close(void *d)
{
    SEEN(device_close, d);
}
static hal_status_t m_device_synchronize(void *d)
{
    SEEN(device_synchronize, d);
    return HAL_OK;
}
static hal_status_t m_mem_alloc(void *d, hal_mem_kind_t k, size_t n, size_t a, void **p, void **c)
{
    SEEN(mem_alloc, d);
    *p = malloc(n);
    *c = MOCK_COOKIE;
    return HAL_OK;
}
static hal_status_t m_mem_free(void *d, hal_mem_kind_t k, void *p, void *c)
{
    SEEN(mem_free, d);
    mock.cookie = c;
    free(p);
    return HAL_OK;
}
static hal_status_t m_memcpy_async(void *s, const hal_backend_ptr_t *dst,
                                   const hal_backend_ptr_t *src, size_t n)
{
    SEEN(memcpy_async, s);
    mock.ptr_device = dst->device;
    mock.ptr_device2 = src->device;
    mock.cookie = dst->cookie;
    return HAL_OK;
}
static hal_status_t m_stream_create(void *d, int32_t prio, void **s)
{
    SEEN(stream_create, d);
    *s = mock_new(TAG_STREAM);
    return HAL_OK;
}
static hal_status_t m_stream_destroy(void *s)
{
    SEEN(stream_destroy, s);
    mock_delete(s);
    return HAL_OK;
}
static hal_status_t m_stream_query(void *s)
{
    SEEN(stream_query, s);
    return HAL_OK;
}
static hal_status_t m_stream_wait_event(void *s, void *e)
{
    SEEN(stream_wait_event, s);
    mock.obj2 = e;
    return HAL_OK;
}
static hal_status_t m_event_create(void *d, uint32_t f, void **e)
{
    SEEN(event_create, d);
    *e = mock_new(TAG_EVENT);
    return HAL_OK;
}
static void m_event_destroy(void *e)
{
    SEEN(event_destroy, e);
    mock_delete(e);
}
static hal_status_t m_event_record(void *e, void *s)
{
    SEEN(event_record, e);
    mock.obj2 = s;
    return HAL_OK;
}
static hal_status_t m_event_elapsed_ms(void *a, void *b, float *ms)
{
    SEEN(event_elapsed_ms, a);
    mock.obj2 = b;
    *ms = 1.5f;
    return HAL_OK;
}
static hal_status_t m_mem_free_async(void *s, void *d, hal_mem_kind_t k, void *p, void *c)
{
    SEEN(mem_free_async, s);
    mock.obj2 = d;
    mock.cookie = c;
    free(p);
    return HAL_OK;
}
static hal_status_t m_launch_host_fn(void *s, hal_stream_host_fn_t fn, void *arg)
{
    SEEN(stream_launch_host_fn, s);
    mock.host_fn_status = fn(arg, HAL_OK); /* runs at once, like an idle stream */
    return HAL_OK;
}
static hal_status_t m_mem_ipc_export(void *d, const hal_backend_ptr_t *p, hal_ipc_handle_t *h)
{
    SEEN(mem_ipc_export, d);
    mock.ptr_device = p->device;
    mock.cookie = p->cookie;
    return HAL_OK;
}
static hal_status_t m_comm_init(void *d, const hal_backend_comm_args_t *a, void **c)
{
    SEEN(comm_init, d);
    *c = mock_new(TAG_COMM);
    return HAL_OK;
}
static hal_status_t m_comm_destroy(void *c)
{
    SEEN(comm_destroy, c);
    mock_delete(c);
    return HAL_OK;
}
static hal_status_t m_comm_abort(void *c)
{
    SEEN(comm_abort, c);
    return HAL_OK;
}
static hal_status_t m_comm_get_async_error(void *c)
{
    SEEN(comm_get_async_error, c);
    return HAL_OK;
}
static hal_status_t m_allreduce(void *c, void *s, const hal_backend_ptr_t *send,
                                const hal_backend_ptr_t *recv, size_t n, hal_dtype_t t,
                                hal_redop_t op)
{
    SEEN(allreduce, c);
    mock.obj2 = s;
    mock.ptr_device = send->device;
    mock.ptr_device2 = recv->device;
    return HAL_OK;
}
static hal_status_t m_group_begin(void *b)
{
    SEEN(group_begin, b);
    return HAL_OK;
}
static hal_status_t m_group_end(void *b)
{
    SEEN(group_end, b);
    return HAL_OK;
}

/* No stream_launch_host_fn, no event_query: those must stay empty above the mock. */
static const hal_backend_ops_t mock_ops = {
    .struct_size = sizeof(hal_backend_ops_t),
    .api_version = HAL_API_VERSION,
    .name = "mock",
    .device_type_name = "mockdev",
    .fini = m_fini,
    .device_count = m_device_count,
    .device_open = m_device_open,
    .device_close = m_device_close,
    .device_synchronize = m_device_synchronize,
    .mem_alloc = m_mem_alloc,
    .mem_free = m_mem_free,
    .memcpy_async = m_memcpy_async,
    .stream_create = m_stream_create,
    .stream_destroy = m_stream_destroy,
    .stream_query = m_stream_query,
    .stream_wait_event = m_stream_wait_event,
    .event_create = m_event_create,
    .event_destroy = m_event_destroy,
    .event_record = m_event_record,
    .event_elapsed_ms = m_event_elapsed_ms,
    .mem_free_async = m_mem_free_async,
    .mem_ipc_export = m_mem_ipc_export,
    .comm_init = m_comm_init,
    .comm_destroy = m_comm_destroy,
    .comm_abort = m_comm_abort,
    .comm_get_async_error = m_comm_get_async_error,
    .allreduce = m_allreduce,
    .group_begin = m_group_begin,
    .group_end = m_group_end,
};

static hal_backend_ops_t mock_ops_host_fn; /* mock_ops plus stream_launch_host_fn */

/* ---- a test layer that counts and can be told to misbehave ---- */

typedef struct test_ctx {
    int before[HAL_SLOT_COUNT], after[HAL_SLOT_COUNT];
    hal_slot_t refuse;     /* before refuses this slot with HAL_ERROR_BUSY */
    hal_slot_t replace;    /* after replaces this slot's status with HAL_ERROR_BUSY */
    hal_layer_call_t last; /* the last call `before` saw */
    hal_layer_inst_t *inst;
} test_ctx_t;

static test_ctx_t outer_ctx, inner_ctx;
static const hal_layer_t *fail_create; /* the layer whose create fails */

static const hal_layer_t outer_layer, inner_layer;

static hal_status_t t_create(hal_layer_inst_t *inst, void **ctx, test_ctx_t *t)
{
    if (fail_create == inst->layer)
        return hal_error(HAL_ERROR_BUSY, NULL, "hal_backend_open", "create refused");
    memset(t, 0, sizeof(*t));
    t->refuse = t->replace = HAL_SLOT_COUNT;
    t->inst = inst;
    *ctx = t;
    return HAL_OK;
}
static hal_status_t t_create_outer(hal_layer_inst_t *inst, void **ctx)
{
    return t_create(inst, ctx, &outer_ctx);
}
static hal_status_t t_create_inner(hal_layer_inst_t *inst, void **ctx)
{
    return t_create(inst, ctx, &inner_ctx);
}
static hal_status_t t_before(void *arg, hal_layer_call_t *c)
{
    test_ctx_t *t = arg;
    t->before[c->slot]++;
    t->last = *c;
    return c->slot == t->refuse ? HAL_ERROR_BUSY : HAL_OK;
}
static hal_status_t t_after(void *arg, hal_layer_call_t *c, hal_status_t st)
{
    test_ctx_t *t = arg;
    t->after[c->slot]++;
    return c->slot == t->replace ? HAL_ERROR_BUSY : st;
}

static const hal_layer_t outer_layer = {
    .name = "outer", .create = t_create_outer, .before = t_before, .after = t_after
};
static const hal_layer_t inner_layer = {
    .name = "inner", .create = t_create_inner, .before = t_before, .after = t_after
};

static const hal_host_services_t host = {
    .struct_size = sizeof(hal_host_services_t),
    .api_version = HAL_API_VERSION,
    .set_error = hal_host_set_error,
    .take_error = hal_host_take_error,
};

/* A "backend" wrapped in the given layers, as hal_backend_open would make it. */
static hal_status_t install(struct hal_backend_s *b, const hal_backend_ops_t *ops,
                            const hal_layer_t *outer, const hal_layer_t *inner)
{
    memset(b, 0, sizeof(*b));
    memset(&mock, 0, sizeof(mock));
    b->ops = ops;
    b->impl = &mock_backend;
    hal_layer_list_t list = { 0 };
    if (outer)
        list.layers[list.count++] = outer;
    if (inner)
        list.layers[list.count++] = inner;
    return hal_layers_install(b, &list, &host);
}

#define OPS(b) ((b)->ops)

CTEST(layer_mock, objects_and_pointers_are_unwrapped_cookies_pass_through)
{
    struct hal_backend_s b;
    CHECK_STATUS(install(&b, &mock_ops, &outer_layer, NULL), HAL_OK);
    /* The table: forwarding slots, except where the backend has none. */
    CTEST_CHECK(OPS(&b)->mem_alloc != mock_ops.mem_alloc);
    CTEST_CHECK(OPS(&b)->stream_launch_host_fn == NULL && OPS(&b)->event_query == NULL);
    CTEST_CHECK(OPS(&b)->init == NULL && !strcmp(OPS(&b)->name, "mock"));
    CTEST_CHECK(!strcmp(OPS(&b)->device_type_name, "mockdev"));
    CTEST_CHECK(OPS(&b)->api_version == HAL_API_VERSION);

    uint32_t n = 0;
    CHECK_STATUS(OPS(&b)->device_count(b.impl, &n), HAL_OK);
    CTEST_CHECK(n == 2 && mock.obj == &mock_backend);
    void *dev[2];
    for (uint32_t i = 0; i < 2; i++) {
        CHECK_STATUS(OPS(&b)->device_open(b.impl, i, &dev[i]), HAL_OK);
        CTEST_CHECK(dev[i] != &mock_devices[i] && mock.obj == &mock_backend);
    }
    CHECK_STATUS(OPS(&b)->device_synchronize(dev[1]), HAL_OK);
    CTEST_CHECK(mock.obj == &mock_devices[1]);
    CTEST_CHECK(outer_ctx.last.device && outer_ctx.last.device->id == 1);

    void *p = NULL, *cookie = NULL;
    CHECK_STATUS(OPS(&b)->mem_alloc(dev[0], HAL_MEM_KIND_DEVICE, 64, 0, &p, &cookie), HAL_OK);
    CTEST_CHECK(mock.obj == &mock_devices[0] && cookie == MOCK_COOKIE);

    void *s = NULL, *s2 = NULL, *e = NULL, *e2 = NULL;
    CHECK_STATUS(OPS(&b)->stream_create(dev[0], 0, &s), HAL_OK);
    CHECK_STATUS(OPS(&b)->stream_create(dev[0], 0, &s2), HAL_OK);
    CHECK_STATUS(OPS(&b)->event_create(dev[0], 0, &e), HAL_OK);
    CHECK_STATUS(OPS(&b)->event_create(dev[0], 0, &e2), HAL_OK);
    mock_obj_t *ms = ((hal_layer_obj_t *)s)->obj, *me = ((hal_layer_obj_t *)e)->obj;
    CTEST_CHECK(ms->tag == TAG_STREAM && me->tag == TAG_EVENT);
    CTEST_CHECK(((hal_layer_obj_t *)s)->device == dev[0]);

    hal_backend_ptr_t dst = { .ptr = p,
                              .kind = HAL_MEM_KIND_DEVICE,
                              .device = dev[0],
                              .base = p,
                              .size = 64,
                              .cookie = cookie };
    hal_backend_ptr_t src = { .ptr = &n, .kind = HAL_MEM_KIND_UNREGISTERED };
    CHECK_STATUS(OPS(&b)->memcpy_async(s, &dst, &src, 4), HAL_OK);
    CTEST_CHECK(mock.obj == ms && mock.ptr_device == &mock_devices[0] && mock.ptr_device2 == NULL);
    CTEST_CHECK(mock.cookie == MOCK_COOKIE);
    CTEST_CHECK(dst.device == dev[0]); /* the caller's copy is untouched */
    CHECK_STATUS(OPS(&b)->stream_wait_event(s2, e), HAL_OK);
    CTEST_CHECK(mock.obj == ((hal_layer_obj_t *)s2)->obj && mock.obj2 == me);
    CHECK_STATUS(OPS(&b)->event_record(e, s), HAL_OK);
    CTEST_CHECK(mock.obj == me && mock.obj2 == ms);
    float ms_out = 0;
    CHECK_STATUS(OPS(&b)->event_elapsed_ms(e, e2, &ms_out), HAL_OK);
    CTEST_CHECK(ms_out == 1.5f && mock.obj == me && mock.obj2 == ((hal_layer_obj_t *)e2)->obj);
    hal_ipc_handle_t handle;
    CHECK_STATUS(OPS(&b)->mem_ipc_export(dev[0], &dst, &handle), HAL_OK);
    CTEST_CHECK(mock.obj == &mock_devices[0] && mock.ptr_device == &mock_devices[0]);

    /* Native collectives: communicator, stream and buffers unwrapped. */
    hal_backend_comm_args_t args = { .struct_size = sizeof(args), .nranks = 2, .rank = 1 };
    void *comm = NULL;
    CHECK_STATUS(OPS(&b)->comm_init(dev[0], &args, &comm), HAL_OK);
    CTEST_CHECK(((hal_layer_obj_t *)comm)->rank == 1 && ((hal_layer_obj_t *)comm)->nranks == 2);
    mock_obj_t *mc = ((hal_layer_obj_t *)comm)->obj;
    CHECK_STATUS(OPS(&b)->allreduce(comm, s, &dst, &dst, 4, HAL_DTYPE_F32, HAL_REDOP_SUM), HAL_OK);
    CTEST_CHECK(mock.obj == mc && mock.obj2 == ms && mock.ptr_device == &mock_devices[0] &&
                mock.ptr_device2 == &mock_devices[0]);
    CTEST_CHECK(outer_ctx.last.comm == comm && outer_ctx.last.size == 4);
    CHECK_STATUS(OPS(&b)->group_begin(b.impl), HAL_OK);
    CHECK_STATUS(OPS(&b)->group_end(b.impl), HAL_OK);
    CTEST_CHECK(mock.obj == &mock_backend);

    /* The cookie comes back to the backend on free, stream-ordered or not. */
    CHECK_STATUS(OPS(&b)->mem_free_async(s, dev[0], HAL_MEM_KIND_DEVICE, p, cookie), HAL_OK);
    CTEST_CHECK(mock.obj == ms && mock.obj2 == &mock_devices[0] && mock.cookie == MOCK_COOKIE);
    CHECK_STATUS(OPS(&b)->mem_alloc(dev[1], HAL_MEM_KIND_DEVICE, 64, 0, &p, &cookie), HAL_OK);
    CHECK_STATUS(OPS(&b)->mem_free(dev[1], HAL_MEM_KIND_DEVICE, p, cookie), HAL_OK);
    CTEST_CHECK(mock.obj == &mock_devices[1] && mock.cookie == MOCK_COOKIE);

    /* One before and one after per call. */
    for (int i = 0; i < HAL_SLOT_COUNT; i++)
        CTEST_CHECK(outer_ctx.before[i] == outer_ctx.after[i] &&
                    outer_ctx.before[i] == mock.calls[i]);

    CHECK_STATUS(OPS(&b)->comm_destroy(comm), HAL_OK);
    OPS(&b)->event_destroy(e);
    OPS(&b)->event_destroy(e2);
    CHECK_STATUS(OPS(&b)->stream_destroy(s), HAL_OK);
    CHECK_STATUS(OPS(&b)->stream_destroy(s2), HAL_OK);
    OPS(&b)->device_close(dev[0]);
    OPS(&b)->device_close(dev[1]);
    CTEST_CHECK(mock.live == 0);
    OPS(&b)->fini(b.impl);
    CTEST_CHECK(mock.finis == 1 && mock.obj == &mock_backend);
    return CTEST_PASS;
}

CTEST(layer_mock, two_levels_each_with_its_own_wrappers)
{
    struct hal_backend_s b;
    CHECK_STATUS(install(&b, &mock_ops, &outer_layer, &inner_layer), HAL_OK);
    CTEST_CHECK(b.layers == outer_ctx.inst && outer_ctx.inst->below == inner_ctx.inst);
    CTEST_CHECK(outer_ctx.inst->depth == 0 && inner_ctx.inst->depth == 1);
    void *dev, *s;
    CHECK_STATUS(OPS(&b)->device_open(b.impl, 0, &dev), HAL_OK);
    CHECK_STATUS(OPS(&b)->stream_create(dev, 0, &s), HAL_OK);
    CHECK_STATUS(OPS(&b)->stream_query(s), HAL_OK);
    hal_layer_obj_t *outer_s = s, *inner_s = outer_s->obj;
    CTEST_CHECK(inner_s->magic == HAL_LAYER_MAGIC && inner_s->inst == inner_ctx.inst);
    CTEST_CHECK(inner_s->obj == mock.obj);
    /* Each level's hooks see that level's wrappers. */
    CTEST_CHECK(outer_ctx.last.stream == outer_s && inner_ctx.last.stream == inner_s);
    CTEST_CHECK(hal_layer_find(inner_ctx.inst, s) == inner_s);
    CTEST_CHECK(hal_layer_find(outer_ctx.inst, s) == outer_s);
    CTEST_CHECK(outer_ctx.before[HAL_SLOT_stream_query] == 1 &&
                inner_ctx.before[HAL_SLOT_stream_query] == 1);
    /* A layer's own call to the next level skips the hooks below it. */
    hal_layer_internal_begin();
    CHECK_STATUS(outer_s->next->stream_query(outer_s->obj), HAL_OK);
    hal_layer_internal_end();
    CTEST_CHECK(inner_ctx.before[HAL_SLOT_stream_query] == 1);
    CTEST_CHECK(mock.calls[HAL_SLOT_stream_query] == 2);
    CHECK_STATUS(OPS(&b)->stream_destroy(s), HAL_OK);
    OPS(&b)->device_close(dev);
    OPS(&b)->fini(b.impl);
    CTEST_CHECK(mock.finis == 1 && mock.live == 0);
    return CTEST_PASS;
}

CTEST(layer_mock, hooks_refuse_replace_and_releases_still_happen)
{
    struct hal_backend_s b;
    CHECK_STATUS(install(&b, &mock_ops, &outer_layer, NULL), HAL_OK);
    void *dev, *s, *e, *p, *cookie;
    CHECK_STATUS(OPS(&b)->device_open(b.impl, 0, &dev), HAL_OK);
    /* Refused: never reaches the backend, but `after` sees it. */
    outer_ctx.refuse = HAL_SLOT_mem_alloc;
    CHECK_STATUS(OPS(&b)->mem_alloc(dev, HAL_MEM_KIND_DEVICE, 64, 0, &p, &cookie), HAL_ERROR_BUSY);
    CTEST_CHECK(mock.calls[HAL_SLOT_mem_alloc] == 0 && outer_ctx.after[HAL_SLOT_mem_alloc] == 1);
    /* A creation whose status `after` replaces is undone. */
    outer_ctx.replace = HAL_SLOT_stream_create;
    CHECK_STATUS(OPS(&b)->stream_create(dev, 0, &s), HAL_ERROR_BUSY);
    CTEST_CHECK(mock.calls[HAL_SLOT_stream_create] == 1 &&
                mock.calls[HAL_SLOT_stream_destroy] == 1 && mock.live == 0);
    outer_ctx.replace = HAL_SLOT_mem_alloc;
    outer_ctx.refuse = HAL_SLOT_COUNT;
    CHECK_STATUS(OPS(&b)->mem_alloc(dev, HAL_MEM_KIND_DEVICE, 64, 0, &p, &cookie), HAL_ERROR_BUSY);
    CTEST_CHECK(mock.calls[HAL_SLOT_mem_free] == 1);
    outer_ctx.replace = HAL_SLOT_COUNT;
    /* Releases cannot be refused: the backend releases, the status is the hook's. */
    CHECK_STATUS(OPS(&b)->stream_create(dev, 0, &s), HAL_OK);
    CHECK_STATUS(OPS(&b)->event_create(dev, 0, &e), HAL_OK);
    outer_ctx.refuse = HAL_SLOT_stream_destroy;
    CHECK_STATUS(OPS(&b)->stream_destroy(s), HAL_ERROR_BUSY);
    outer_ctx.refuse = HAL_SLOT_event_destroy;
    OPS(&b)->event_destroy(e);
    CTEST_CHECK(mock.live == 0);
    outer_ctx.refuse = HAL_SLOT_device_close;
    OPS(&b)->device_close(dev);
    CTEST_CHECK(mock.calls[HAL_SLOT_device_close] == 1);
    outer_ctx.refuse = HAL_SLOT_group_end;
    CHECK_STATUS(OPS(&b)->group_end(b.impl), HAL_ERROR_BUSY);
    CTEST_CHECK(mock.calls[HAL_SLOT_group_end] == 1);
    OPS(&b)->fini(b.impl);
    return CTEST_PASS;
}

CTEST(layer_mock, a_failed_install_finishes_the_backend)
{
    struct hal_backend_s b;
    fail_create = &outer_layer;
    hal_status_t st = install(&b, &mock_ops, &outer_layer, NULL);
    CHECK_STATUS(st, HAL_ERROR_BUSY);
    CHECK_MESSAGE("create refused");
    CTEST_CHECK(mock.finis == 1 && b.layers == NULL);
    /* The inner level was built before the outer failed: both are finished (the sanitizer
     * build checks that the inner instance is freed). */
    st = install(&b, &mock_ops, &outer_layer, &inner_layer);
    fail_create = NULL;
    CHECK_STATUS(st, HAL_ERROR_BUSY);
    CTEST_CHECK(mock.finis == 1 && mock.calls[HAL_SLOT_fini] == 1);
    return CTEST_PASS;
}

/* The faults layer over native collectives: coll_timeout handles the call itself (the backend's
 * allreduce is not called), latches the timeout on the stream and the communicator, and aborts
 * the native communicator. */
CTEST(layer_mock, faults_on_native_collectives)
{
    struct hal_backend_s b;
    mock_ops_host_fn = mock_ops;
    mock_ops_host_fn.stream_launch_host_fn = m_launch_host_fn;
    setenv("HAL_FAULTS", "coll_timeout:after=1,rank=0", 1);
    hal_status_t st = install(&b, &mock_ops_host_fn, &hal_faults_layer, NULL);
    unsetenv("HAL_FAULTS");
    CHECK_STATUS(st, HAL_OK);
    void *dev, *s, *comm;
    CHECK_STATUS(OPS(&b)->device_open(b.impl, 0, &dev), HAL_OK);
    CHECK_STATUS(OPS(&b)->stream_create(dev, 0, &s), HAL_OK);
    hal_backend_comm_args_t args = { .struct_size = sizeof(args), .nranks = 2, .rank = 0 };
    CHECK_STATUS(OPS(&b)->comm_init(dev, &args, &comm), HAL_OK);
    hal_backend_ptr_t buf = { .ptr = &args, .kind = HAL_MEM_KIND_DEVICE, .device = dev };
    uint64_t before = hal_faults_injected(HAL_FAULT_COLL_TIMEOUT);
    CHECK_STATUS(OPS(&b)->allreduce(comm, s, &buf, &buf, 1, HAL_DTYPE_F32, HAL_REDOP_SUM), HAL_OK);
    CTEST_CHECK(mock.calls[HAL_SLOT_allreduce] == 1);
    CHECK_STATUS(OPS(&b)->comm_get_async_error(comm), HAL_OK);
    CHECK_STATUS(OPS(&b)->allreduce(comm, s, &buf, &buf, 1, HAL_DTYPE_F32, HAL_REDOP_SUM), HAL_OK);
    CTEST_CHECK(mock.calls[HAL_SLOT_allreduce] == 1); /* handled by the layer */
    CTEST_CHECK(hal_faults_injected(HAL_FAULT_COLL_TIMEOUT) == before + 1);
    CTEST_CHECK(mock.calls[HAL_SLOT_comm_abort] == 1);
    CTEST_CHECK(mock.host_fn_status == HAL_ERROR_TIMEOUT);
    CHECK_STATUS(OPS(&b)->comm_get_async_error(comm), HAL_ERROR_TIMEOUT);
    CHECK_STATUS(OPS(&b)->comm_destroy(comm), HAL_OK);
    CHECK_STATUS(OPS(&b)->stream_destroy(s), HAL_OK);
    OPS(&b)->device_close(dev);
    OPS(&b)->fini(b.impl);
    CTEST_CHECK(mock.live == 0 && mock.finis == 1);
    return CTEST_PASS;
}

CTEST(layer_mock, slot_registry)
{
    CTEST_CHECK(!strcmp(hal_slot_name(HAL_SLOT_mem_alloc), "mem_alloc"));
    CTEST_CHECK(!strcmp(hal_slot_name(HAL_SLOT_group_end), "group_end"));
    CTEST_CHECK(!strcmp(hal_slot_name(HAL_SLOT_COUNT), "unknown"));
    CTEST_CHECK(hal_slot_flags(HAL_SLOT_mem_free) & HAL_SLOT_FLAG_RELEASES);
    CTEST_CHECK(hal_slot_flags(HAL_SLOT_memcpy_async) & HAL_SLOT_FLAG_STREAM_ORDERED);
    CTEST_CHECK((hal_slot_flags(HAL_SLOT_recv) & HAL_SLOT_FLAG_COLLECTIVE));
    CTEST_CHECK(!(hal_slot_flags(HAL_SLOT_group_begin) & HAL_SLOT_FLAG_COLLECTIVE));
    /* The registry covers the table: one slot per function pointer from init on. */
    CTEST_CHECK(HAL_SLOT_COUNT ==
                (sizeof(hal_backend_ops_t) - offsetof(hal_backend_ops_t, init)) / sizeof(void *));
    return CTEST_PASS;
}
