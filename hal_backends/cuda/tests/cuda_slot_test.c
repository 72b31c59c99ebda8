/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend's slots driven directly (the backend library's ops table with test host
 * services), on a real NVIDIA GPU (at least one) through the real CUDA runtime; HAL_BACKEND_PATH
 * names the directory of libhal_backend_cuda.so. What the public API reaches only through the
 * HAL's collectives. A HAL host function that fails latches on the stream: work queued behind it
 * is skipped, later copies are refused, events recorded after it and callbacks after it are
 * told, query, synchronize and destroy report it with the function's message. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/hal_backend_abi.h"
#include "hal_backends/cuda/tests/cuda_test_util.h"
#include "tools/ctest/ctest_host.h"

static const hal_backend_ops_t *load_ops(void)
{
    const char *dir = getenv("HAL_BACKEND_PATH");
    char path[4096];
    snprintf(path, sizeof(path), "%s/libhal_backend_cuda.so", dir != NULL ? dir : ".");
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
        return NULL;
    }
    hal_backend_entry_fn entry;
    void *sym = dlsym(dl, HAL_BACKEND_ENTRY_SYMBOL);
    memcpy(&entry, &sym, sizeof(sym));
    const hal_backend_ops_t *ops = NULL;
    if (entry == NULL || entry(HAL_API_VERSION, &ops) != HAL_OK)
        return NULL;
    return ops;
}

static hal_status_t failing_fn(void *arg, hal_status_t stream_status)
{
    (void)stream_status;
    ct_gate_t *g = arg;
    ct_gate_fn(HAL_OK, g);
    ctest_host_services.set_error("peer 3 went away");
    return HAL_ERROR_REMOTE;
}

static hal_status_t seen_status;
static void status_cb(hal_status_t status, void *user)
{
    (void)user;
    seen_status = status;
}

CTEST(CudaSlots, HostFunctionFailureLatches)
{
    int ct_failed = 0;
    const hal_backend_ops_t *ops = load_ops();
    CTEST_CHECK(ops != NULL && ops->stream_launch_host_fn != NULL);
    void *backend = NULL, *dev = NULL, *s = NULL, *ev = NULL;
    CTEST_CHECK(ops->init(&ctest_host_services, &backend) == HAL_OK);
    CTEST_CHECK(ops->device_open(backend, 0, &dev) == HAL_OK);
    CT_EXPECT_OK(ops->stream_create(dev, 0, &s));
    CT_EXPECT_OK(ops->event_create(dev, HAL_EVENT_FLAG_NONE, &ev));
    void *d = NULL, *dc = NULL, *p = NULL, *pc = NULL;
    CT_EXPECT_OK(ops->mem_alloc(dev, HAL_MEM_KIND_DEVICE, 4096, 0, &d, &dc));
    CT_EXPECT_OK(ops->mem_alloc(dev, HAL_MEM_KIND_HOST_PINNED, 4096, 0, &p, &pc));
    if (ct_failed)
        CT_RESULT();
    hal_backend_ptr_t bd = {
        .ptr = d, .kind = HAL_MEM_KIND_DEVICE, .device = dev, .base = d, .size = 4096, .cookie = dc
    };
    hal_backend_ptr_t bp = { .ptr = p,
                             .kind = HAL_MEM_KIND_HOST_PINNED,
                             .device = dev,
                             .base = p,
                             .size = 4096,
                             .cookie = pc };
    memset(p, 0x44, 4096);
    CT_EXPECT_OK(ops->memset_async(s, &bd, 0x77, 4096));
    ct_gate_t g;
    ct_gate_init(&g);
    CT_EXPECT_OK(ops->stream_launch_host_fn(s, failing_fn, &g));
    /* Queued behind the function, as the HAL's staged collectives copy results back: skipped
     * once the function failed. */
    CT_EXPECT_OK(ops->memcpy_async(s, &bp, &bd, 4096));
    CT_EXPECT_OK(ops->event_record(ev, s));
    CT_EXPECT_OK(ops->stream_add_callback(s, status_cb, NULL));
    CT_EXPECT_STATUS(ops->stream_query(s), HAL_NOT_READY);
    CT_EXPECT_STATUS(ops->event_query(ev), HAL_NOT_READY);
    ct_gate_open(&g);
    CT_EXPECT_STATUS(ops->stream_synchronize(s), HAL_ERROR_REMOTE);
    const char *why = ctest_host_services.take_error();
    CT_EXPECT(why != NULL && strstr(why, "peer 3 went away") != NULL);
    CT_EXPECT(((unsigned char *)p)[0] == 0x44 && ((unsigned char *)p)[4095] == 0x44);
    CT_EXPECT(seen_status == HAL_ERROR_REMOTE);
    CT_EXPECT_STATUS(ops->event_query(ev), HAL_ERROR_REMOTE);
    CT_EXPECT_STATUS(ops->event_synchronize(ev), HAL_ERROR_REMOTE);
    CT_EXPECT_STATUS(ops->stream_query(s), HAL_ERROR_REMOTE);
    CT_EXPECT_STATUS(ops->memcpy_async(s, &bp, &bd, 4096), HAL_ERROR_REMOTE);
    CT_EXPECT_STATUS(ops->memset_async(s, &bd, 1, 16), HAL_ERROR_REMOTE);
    /* A record on the failed stream completes with the error too. */
    CT_EXPECT_OK(ops->event_record(ev, s));
    CT_EXPECT_STATUS(ops->event_synchronize(ev), HAL_ERROR_REMOTE);
    /* The device reports it, and other streams are unaffected. */
    void *s2 = NULL;
    CT_EXPECT_OK(ops->stream_create(dev, 0, &s2));
    CT_EXPECT_OK(ops->memcpy_async(s2, &bp, &bd, 4096));
    CT_EXPECT_OK(ops->stream_synchronize(s2));
    CT_EXPECT(((unsigned char *)p)[0] == 0x77);
    CT_EXPECT_STATUS(ops->device_synchronize(dev), HAL_ERROR_REMOTE);
    CT_EXPECT_OK(ops->stream_destroy(s2));
    CT_EXPECT_STATUS(ops->stream_destroy(s), HAL_ERROR_REMOTE);
    ops->event_destroy(ev);
    CT_EXPECT_OK(ops->mem_free(dev, HAL_MEM_KIND_DEVICE, d, dc));
    CT_EXPECT_OK(ops->mem_free(dev, HAL_MEM_KIND_HOST_PINNED, p, pc));
    ops->device_close(dev);
    ops->fini(backend);
    CT_RESULT();
}

/* An event recorded behind host work and then again on an idle stream follows the newer record;
 * a wait queued on the old version stays bound to it. */
CTEST(CudaSlots, VersionsAcrossDeferredRecords)
{
    int ct_failed = 0;
    const hal_backend_ops_t *ops = load_ops();
    CTEST_CHECK(ops != NULL);
    void *backend = NULL, *dev = NULL, *a = NULL, *bs = NULL, *c = NULL, *ev = NULL, *eb = NULL;
    CTEST_CHECK(ops->init(&ctest_host_services, &backend) == HAL_OK);
    CTEST_CHECK(ops->device_open(backend, 0, &dev) == HAL_OK);
    CT_EXPECT_OK(ops->stream_create(dev, 0, &a));
    CT_EXPECT_OK(ops->stream_create(dev, 0, &bs));
    CT_EXPECT_OK(ops->stream_create(dev, 0, &c));
    CT_EXPECT_OK(ops->event_create(dev, HAL_EVENT_FLAG_TIMING, &ev));
    CT_EXPECT_OK(ops->event_create(dev, HAL_EVENT_FLAG_NONE, &eb));
    if (ct_failed)
        CT_RESULT();
    uintptr_t primary = 0, again = 0;
    CT_EXPECT_OK(ops->event_get_native_handle(ev, &primary));
    ct_gate_t g;
    ct_gate_init(&g);
    CT_EXPECT_OK(ops->stream_add_callback(a, ct_gate_fn, &g));
    CT_EXPECT_OK(ops->event_record(ev, a));      /* v1: queued behind the gate */
    CT_EXPECT_OK(ops->stream_wait_event(c, ev)); /* bound to v1 */
    CT_EXPECT_OK(ops->event_record(eb, c));
    CT_EXPECT_OK(ops->event_record(ev, bs)); /* v2 on an idle stream: another cudaEvent_t */
    CT_EXPECT_OK(ops->event_synchronize(ev));
    CT_EXPECT_OK(ops->event_query(ev));
    ct_sleep_ms(20);
    CT_EXPECT_STATUS(ops->event_query(eb), HAL_NOT_READY);
    ct_gate_open(&g);
    CT_EXPECT_OK(ops->event_synchronize(eb));
    CT_EXPECT_OK(ops->stream_synchronize(a));
    /* Once nothing holds the primary, records use it again. */
    CT_EXPECT_OK(ops->event_record(ev, bs));
    CT_EXPECT_OK(ops->event_synchronize(ev));
    CT_EXPECT_OK(ops->event_get_native_handle(ev, &again));
    CT_EXPECT(primary == again);
    ops->event_destroy(ev);
    ops->event_destroy(eb);
    CT_EXPECT_OK(ops->stream_destroy(a));
    CT_EXPECT_OK(ops->stream_destroy(bs));
    CT_EXPECT_OK(ops->stream_destroy(c));
    ops->device_close(dev);
    ops->fini(backend);
    CT_RESULT();
}
