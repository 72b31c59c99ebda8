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
    const hal_backend_ops_t *ops = load_ops();
    CTEST_CHECK(ops != NULL && ops->stream_launch_host_fn != NULL);
    void *backend = NULL, *dev = NULL, *s = NULL, *ev = NULL;
    CTEST_CHECK(ops->init(&ctest_host_services, &backend) == HAL_OK);
    CTEST_CHECK(ops->device_open(backend, 0, &dev) == HAL_OK);
    EXPECT_OK(ops->stream_create(dev, 0, &s));
    EXPECT_OK(ops->event_create(dev, HAL_EVENT_FLAG_NONE, &ev));
    void *d = NULL, *dc = NULL, *p = NULL, *pc = NULL;
    EXPECT_OK(ops->mem_alloc(dev, HAL_MEM_KIND_DEVICE, 4096, 0, &d, &dc));
    EXPECT_OK(ops->mem_alloc(dev, HAL_MEM_KIND_HOST_PINNED, 4096, 0, &p, &pc));
    if (ctest_failures_so_far())
        return CTEST_PASS;
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
    EXPECT_OK(ops->memset_async(s, &bd, 0x77, 4096));
    ct_gate_t g;
    ct_gate_init(&g);
    EXPECT_OK(ops->stream_launch_host_fn(s, failing_fn, &g));
    /* Queued behind the function, as the HAL's staged collectives copy results back: skipped
     * once the function failed. */
    EXPECT_OK(ops->memcpy_async(s, &bp, &bd, 4096));
    EXPECT_OK(ops->event_record(ev, s));
    EXPECT_OK(ops->stream_add_callback(s, status_cb, NULL));
    EXPECT_STATUS(ops->stream_query(s), HAL_NOT_READY);
    EXPECT_STATUS(ops->event_query(ev), HAL_NOT_READY);
    ct_gate_open(&g);
    EXPECT_STATUS(ops->stream_synchronize(s), HAL_ERROR_REMOTE);
    const char *why = ctest_host_services.take_error();
    CTEST_EXPECT(why != NULL && strstr(why, "peer 3 went away") != NULL);
    CTEST_EXPECT(((unsigned char *)p)[0] == 0x44 && ((unsigned char *)p)[4095] == 0x44);
    CTEST_EXPECT(seen_status == HAL_ERROR_REMOTE);
    EXPECT_STATUS(ops->event_query(ev), HAL_ERROR_REMOTE);
    EXPECT_STATUS(ops->event_synchronize(ev), HAL_ERROR_REMOTE);
    EXPECT_STATUS(ops->stream_query(s), HAL_ERROR_REMOTE);
    EXPECT_STATUS(ops->memcpy_async(s, &bp, &bd, 4096), HAL_ERROR_REMOTE);
    EXPECT_STATUS(ops->memset_async(s, &bd, 1, 16), HAL_ERROR_REMOTE);
    /* A record on the failed stream completes with the error too. */
    EXPECT_OK(ops->event_record(ev, s));
    EXPECT_STATUS(ops->event_synchronize(ev), HAL_ERROR_REMOTE);
    /* The device reports it, and other streams are unaffected. */
    void *s2 = NULL;
    EXPECT_OK(ops->stream_create(dev, 0, &s2));
    EXPECT_OK(ops->memcpy_async(s2, &bp, &bd, 4096));
    EXPECT_OK(ops->stream_synchronize(s2));
    CTEST_EXPECT(((unsigned char *)p)[0] == 0x77);
    EXPECT_STATUS(ops->device_synchronize(dev), HAL_ERROR_REMOTE);
    EXPECT_OK(ops->stream_destroy(s2));
    EXPECT_STATUS(ops->stream_destroy(s), HAL_ERROR_REMOTE);
    ops->event_destroy(ev);
    EXPECT_OK(ops->mem_free(dev, HAL_MEM_KIND_DEVICE, d, dc));
    EXPECT_OK(ops->mem_free(dev, HAL_MEM_KIND_HOST_PINNED, p, pc));
    ops->device_close(dev);
    ops->fini(backend);
    return CTEST_PASS;
}

/* An event recorded behind host work and then again on an idle stream follows the newer record;
 * a wait queued on the old version stays bound to it. */
CTEST(CudaSlots, VersionsAcrossDeferredRecords)
{
    const hal_backend_ops_t *ops = load_ops();
    CTEST_CHECK(ops != NULL);
    void *backend = NULL, *dev = NULL, *a = NULL, *bs = NULL, *c = NULL, *ev = NULL, *eb = NULL;
    CTEST_CHECK(ops->init(&ctest_host_services, &backend) == HAL_OK);
    CTEST_CHECK(ops->device_open(backend, 0, &dev) == HAL_OK);
    EXPECT_OK(ops->stream_create(dev, 0, &a));
    EXPECT_OK(ops->stream_create(dev, 0, &bs));
    EXPECT_OK(ops->stream_create(dev, 0, &c));
    EXPECT_OK(ops->event_create(dev, HAL_EVENT_FLAG_TIMING, &ev));
    EXPECT_OK(ops->event_create(dev, HAL_EVENT_FLAG_NONE, &eb));
    if (ctest_failures_so_far())
        return CTEST_PASS;
    uintptr_t primary = 0, again = 0;
    EXPECT_OK(ops->event_get_native_handle(ev, &primary));
    ct_gate_t g;
    ct_gate_init(&g);
    EXPECT_OK(ops->stream_add_callback(a, ct_gate_fn, &g));
    EXPECT_OK(ops->event_record(ev, a));      /* v1: queued behind the gate */
    EXPECT_OK(ops->stream_wait_event(c, ev)); /* bound to v1 */
    EXPECT_OK(ops->event_record(eb, c));
    EXPECT_OK(ops->event_record(ev, bs)); /* v2 on an idle stream: another cudaEvent_t */
    EXPECT_OK(ops->event_synchronize(ev));
    EXPECT_OK(ops->event_query(ev));
    ct_sleep_ms(20);
    EXPECT_STATUS(ops->event_query(eb), HAL_NOT_READY);
    ct_gate_open(&g);
    EXPECT_OK(ops->event_synchronize(eb));
    EXPECT_OK(ops->stream_synchronize(a));
    /* Once nothing holds the primary, records use it again. */
    EXPECT_OK(ops->event_record(ev, bs));
    EXPECT_OK(ops->event_synchronize(ev));
    EXPECT_OK(ops->event_get_native_handle(ev, &again));
    CTEST_EXPECT(primary == again);
    ops->event_destroy(ev);
    ops->event_destroy(eb);
    EXPECT_OK(ops->stream_destroy(a));
    EXPECT_OK(ops->stream_destroy(bs));
    EXPECT_OK(ops->stream_destroy(c));
    ops->device_close(dev);
    ops->fini(backend);
    return CTEST_PASS;
}
