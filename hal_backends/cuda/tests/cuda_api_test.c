/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend through the public HAL API, on a real NVIDIA GPU (at least one) through the
 * real CUDA runtime: HAL_BACKEND_PATH names the backend's directory, HAL_CUDA_LIBCUDART and
 * HAL_NCCL_LIBRARY may name the libraries (the test target, or conformance/gpu/run.sh). What the
 * conformance suite does not single out: the properties a CUDA device reports, the native
 * handles, stream order across host work (the deferred mode of cuda_stream.c), stream-ordered
 * frees, IPC handles, and the choice between NCCL and the HAL's host-staged collectives. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal_backends/cuda/tests/cuda_test_util.h"

/* Whether the backend should have loaded NCCL: 1 or 0 when HAL_NCCL_LIBRARY says (a path, or
 * "none"), -1 when it is unset and the backend's own search decides. */
static int nccl_expected(void)
{
#if HAL_CUDA_WITH_NCCL
    const char *v = getenv("HAL_NCCL_LIBRARY");
    if (v == NULL || v[0] == '\0')
        return -1;
    return strcmp(v, "none") != 0;
#else
    return 0; /* the backend was built without NCCL's headers */
#endif
}

static uint64_t device_caps(hal_device_t d)
{
    hal_device_properties_t p = HAL_DEVICE_PROPERTIES_INIT;
    return hal_device_get_properties(d, &p) == HAL_OK ? p.capabilities : 0;
}

CTEST(CudaApi, Properties)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    const char *name = NULL, *type = NULL;
    EXPECT_OK(hal_backend_get_info(b, &name, &type, NULL));
    CTEST_EXPECT(name != NULL && strcmp(name, "cuda") == 0);
    CTEST_EXPECT(type != NULL && strcmp(type, "cuda") == 0);
    uint32_t n = 0;
    EXPECT_OK(hal_device_count(b, &n));
    CTEST_EXPECT(n >= 1);
    EXPECT_OK(hal_device_get(b, 0, &d));
    hal_device_properties_t p = HAL_DEVICE_PROPERTIES_INIT;
    EXPECT_OK(hal_device_get_properties(d, &p));
    fprintf(stderr,
            "device 0 of %u: %s, %llu bytes, stream priorities %d..%d, capabilities 0x%llx\n", n,
            p.name, (unsigned long long)p.total_memory, p.stream_priority_least,
            p.stream_priority_greatest, (unsigned long long)p.capabilities);
    CTEST_EXPECT(p.name[0] != '\0');
    CTEST_EXPECT(strcmp(p.vendor, "NVIDIA") == 0);
    CTEST_EXPECT(p.host_addressable == 0);
    CTEST_EXPECT(p.total_memory > 0);
    /* CUDA: 0 is the least priority, greater ones are negative (-5 on Hopper). */
    CTEST_EXPECT(p.stream_priority_least == 0 && p.stream_priority_greatest <= 0);
    /* SHARED_MEMORY and IPC depend on the device and the runtime; the tests that need them
     * skip without them. */
    const uint64_t always = HAL_DEVICE_CAP_TIMING_EVENTS | HAL_DEVICE_CAP_HOST_CALLBACKS |
                            HAL_DEVICE_CAP_PEER_COPY | HAL_DEVICE_CAP_STREAM_FREE;
    CTEST_EXPECT((p.capabilities & always) == always);
    const bool native_coll = (p.capabilities & HAL_DEVICE_CAP_NATIVE_COLLECTIVES) != 0;
    if (nccl_expected() >= 0)
        CTEST_EXPECT(native_coll == (nccl_expected() == 1));
    uintptr_t native = 99;
    EXPECT_OK(hal_device_get_native_handle(d, &native));
    CTEST_EXPECT(native == 0);
    hal_stream_t s = NULL;
    hal_event_t e = NULL;
    EXPECT_OK(hal_stream_create(d, p.stream_priority_greatest, &s));
    uintptr_t ns = 0, ne1 = 0, ne2 = 0;
    EXPECT_OK(hal_stream_get_native_handle(s, &ns));
    CTEST_EXPECT(ns != 0);
    EXPECT_OK(hal_event_create(d, HAL_EVENT_FLAG_NONE, &e));
    EXPECT_OK(hal_event_get_native_handle(e, &ne1));
    EXPECT_OK(hal_event_record(e, s));
    EXPECT_OK(hal_event_synchronize(e));
    EXPECT_OK(hal_event_get_native_handle(e, &ne2));
    CTEST_EXPECT(ne1 != 0 && ne1 == ne2); /* the primary cudaEvent_t on the direct path */
    EXPECT_OK(hal_event_destroy(e));
    EXPECT_OK(hal_stream_destroy(s));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* Host work holds later work back (deferred mode), and the stream returns to direct mode. */
static void fill_fn(hal_status_t status, void *user)
{
    (void)status;
    memset(user, 0x3c, 4096);
}

CTEST(CudaApi, HostWorkOrdersLaterWork)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    CTEST_CHECK(hal_device_get(b, 0, &d) == HAL_OK);
    hal_stream_t s = NULL;
    unsigned char *pin = NULL, *back = NULL, *dev = NULL;
    EXPECT_OK(hal_stream_create(d, 0, &s));
    EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_HOST_PINNED, 4096, 0, (void **)&pin));
    EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_HOST_PINNED, 4096, 0, (void **)&back));
    EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 4096, 0, (void **)&dev));
    if (ctest_failures_so_far()) {
        hal_backend_close(b);
        return CTEST_PASS;
    }
    memset(pin, 0, 4096);
    memset(back, 0, 4096);
    ct_gate_t g;
    ct_gate_init(&g);
    EXPECT_OK(hal_stream_add_callback(s, ct_gate_fn, &g));
    EXPECT_OK(hal_stream_add_callback(s, fill_fn, pin)); /* host writes pin */
    EXPECT_OK(hal_memcpy_async(dev, pin, 4096, s));      /* then the device reads it */
    EXPECT_OK(hal_memset_async(back, 0x11, 100, s));     /* pinned memset: host work */
    EXPECT_OK(hal_memcpy_async(back + 100, dev + 100, 3996, s));
    ct_sleep_ms(20);
    EXPECT_STATUS(hal_stream_query(s), HAL_NOT_READY);
    CTEST_EXPECT(back[0] == 0);
    ct_gate_open(&g);
    EXPECT_OK(hal_stream_synchronize(s));
    CTEST_EXPECT(g.seen == HAL_OK);
    CTEST_EXPECT(back[0] == 0x11 && back[99] == 0x11 && back[100] == 0x3c && back[4095] == 0x3c);
    /* Back in direct mode: plain work completes without the worker. */
    EXPECT_OK(hal_memset_async(dev, 0x22, 4096, s));
    EXPECT_OK(hal_memcpy_async(back, dev, 4096, s));
    EXPECT_OK(hal_stream_synchronize(s));
    CTEST_EXPECT(back[0] == 0x22 && back[4095] == 0x22);
    EXPECT_OK(hal_stream_query(s));
    EXPECT_OK(hal_mem_free(dev));
    EXPECT_OK(hal_mem_free(back));
    EXPECT_OK(hal_mem_free(pin));
    EXPECT_OK(hal_stream_destroy(s));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* A callback on one stream that blocks holds back its own stream only: callbacks do not share
 * one thread (as CUDA's own host functions do). */
CTEST(CudaApi, BlockedCallbackHoldsOnlyItsStream)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    CTEST_CHECK(hal_device_get(b, 0, &d) == HAL_OK);
    hal_stream_t s1 = NULL, s2 = NULL;
    EXPECT_OK(hal_stream_create(d, 0, &s1));
    EXPECT_OK(hal_stream_create(d, 0, &s2));
    ct_gate_t g1, g2;
    ct_gate_init(&g1);
    ct_gate_init(&g2);
    EXPECT_OK(hal_stream_add_callback(s1, ct_gate_fn, &g1));
    CTEST_EXPECT(ct_gate_reached(&g1, 5000));
    EXPECT_OK(hal_stream_add_callback(s2, ct_gate_fn, &g2));
    CTEST_EXPECT(ct_gate_reached(&g2, 5000)); /* while g1 still blocks */
    ct_gate_open(&g2);
    EXPECT_OK(hal_stream_synchronize(s2));
    EXPECT_STATUS(hal_stream_query(s1), HAL_NOT_READY);
    ct_gate_open(&g1);
    EXPECT_OK(hal_stream_synchronize(s1));
    EXPECT_OK(hal_stream_destroy(s1));
    EXPECT_OK(hal_stream_destroy(s2));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* A stream-ordered free returns the memory once the stream passed the free. */
CTEST(CudaApi, FreeAsyncWaitsForStream)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    CTEST_CHECK(hal_device_get(b, 0, &d) == HAL_OK);
    hal_stream_t s = NULL;
    EXPECT_OK(hal_stream_create(d, 0, &s));
    hal_mem_stats_t before = HAL_MEM_STATS_INIT, held = HAL_MEM_STATS_INIT,
                    after = HAL_MEM_STATS_INIT;
    /* The device's free memory (cudaMemGetInfo) also moves with the runtime's own allocations
     * and CUDA's allocation granularity: compare within this. */
    const uint64_t slack = (uint64_t)4 << 20;
    EXPECT_OK(hal_device_get_mem_stats(d, &before));
    void *p = NULL;
    const size_t size = (size_t)32 << 20;
    EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, size, 0, &p));
    ct_gate_t g;
    ct_gate_init(&g);
    EXPECT_OK(hal_stream_add_callback(s, ct_gate_fn, &g));
    EXPECT_OK(hal_mem_free_async(p, s));
    EXPECT_OK(hal_device_get_mem_stats(d, &held));
    /* Counted as freed by the HAL at once; still held by the device until the gate opens. */
    CTEST_EXPECT(held.device_bytes_in_use == before.device_bytes_in_use);
    CTEST_EXPECT(held.device_bytes_free + size <= before.device_bytes_free + slack);
    ct_gate_open(&g);
    EXPECT_OK(hal_stream_synchronize(s));
    EXPECT_OK(hal_device_synchronize(d)); /* reaps */
    EXPECT_OK(hal_device_get_mem_stats(d, &after));
    CTEST_EXPECT(after.device_bytes_free + slack >= before.device_bytes_free);
    CTEST_EXPECT(after.device_bytes_free >= held.device_bytes_free + size - slack);
    EXPECT_OK(hal_stream_destroy(s));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* Large alignments come from a larger allocation; the address and the frees are right. */
CTEST(CudaApi, Alignment)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    CTEST_CHECK(hal_device_get(b, 0, &d) == HAL_OK);
    const hal_mem_kind_t kinds[] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED,
                                     HAL_MEM_KIND_SHARED };
    const size_t nkinds = (device_caps(d) & HAL_DEVICE_CAP_SHARED_MEMORY) ? 3 : 2;
    for (size_t k = 0; k < nkinds; k++) {
        for (size_t align = 1; align <= ((size_t)1 << 20); align <<= 5) {
            void *p = NULL;
            EXPECT_OK(hal_mem_alloc(d, kinds[k], 1000, align, &p));
            CTEST_EXPECT(((uintptr_t)p % align) == 0 && ((uintptr_t)p % 256) == 0);
            EXPECT_OK(hal_mem_free(p));
        }
    }
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* Managed memory is never asked for beyond the device's free memory. */
CTEST(CudaApi, SharedMemoryWithinFreeMemory)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    CTEST_CHECK(hal_device_get(b, 0, &d) == HAL_OK);
    if (!(device_caps(d) & HAL_DEVICE_CAP_SHARED_MEMORY)) {
        hal_backend_close(b);
        CTEST_SKIP("device 0 reports no SHARED_MEMORY (no concurrent managed access)");
    }
    /* Half of what is free goes to a device allocation; managed memory of three quarters of
     * it is then more than is left. */
    hal_mem_stats_t stats = HAL_MEM_STATS_INIT;
    EXPECT_OK(hal_device_get_mem_stats(d, &stats));
    void *big = NULL, *x = NULL;
    const uint64_t free_bytes = stats.device_bytes_free;
    EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, (size_t)(free_bytes / 2), 0, &big));
    EXPECT_STATUS(hal_mem_alloc(d, HAL_MEM_KIND_SHARED, (size_t)(free_bytes / 4 * 3), 0, &x),
                  HAL_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_MESSAGE("managed memory");
    if (big != NULL)
        EXPECT_OK(hal_mem_free(big));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* ---- IPC ------------------------------------------------------------------------------------- */

#define IPC_ENV "CUDA_TEST_IPC_HANDLE"

static void to_hex(const hal_ipc_handle_t *h, char *out)
{
    for (size_t i = 0; i < sizeof(h->bytes); i++)
        sprintf(out + 2 * i, "%02x", h->bytes[i]);
}

static bool from_hex(const char *in, hal_ipc_handle_t *h)
{
    if (strlen(in) != 2 * sizeof(h->bytes))
        return false;
    for (size_t i = 0; i < sizeof(h->bytes); i++) {
        unsigned v;
        if (sscanf(in + 2 * i, "%2x", &v) != 1)
            return false;
        h->bytes[i] = (uint8_t)v;
    }
    return true;
}

/* The importer: run by IpcAcrossProcesses in a child process (this binary, filtered to this
 * test, with the handle in the environment). Reads the 4 KiB after the exported address,
 * expects 0x5e, writes 0xa7 over it. Passes trivially when run on its own. */
CTEST(CudaIpc, Child)
{
    const char *hex = getenv(IPC_ENV);
    if (hex == NULL)
        CTEST_SKIP("runs as the importer of CudaApi.IpcAcrossProcesses");
    hal_ipc_handle_t h;
    CTEST_CHECK(from_hex(hex, &h));
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    CTEST_CHECK(hal_device_get(b, 0, &d) == HAL_OK);
    unsigned char *p = NULL;
    hal_stream_t s = NULL;
    static unsigned char buf[4096];
    EXPECT_OK(hal_mem_ipc_open_handle(d, &h, (void **)&p));
    EXPECT_OK(hal_stream_create(d, 0, &s));
    if (!ctest_failures_so_far()) {
        hal_mem_info_t info = HAL_MEM_INFO_INIT;
        EXPECT_OK(hal_mem_get_info(p, &info));
        CTEST_EXPECT(info.size == 8192 - 1024); /* from the exported address to the end */
        EXPECT_OK(hal_memcpy_async(buf, p, sizeof(buf), s));
        EXPECT_OK(hal_stream_synchronize(s));
        CTEST_EXPECT(buf[0] == 0x5e && buf[4095] == 0x5e);
        EXPECT_OK(hal_memset_async(p, 0xa7, 4096, s));
        EXPECT_OK(hal_stream_synchronize(s));
        EXPECT_OK(hal_mem_ipc_close_handle(p));
    }
    EXPECT_OK(hal_stream_destroy(s));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

CTEST(CudaApi, IpcAcrossProcesses)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    CTEST_CHECK(hal_device_get(b, 0, &d) == HAL_OK);
    if (!(device_caps(d) & HAL_DEVICE_CAP_IPC)) {
        hal_backend_close(b);
        CTEST_SKIP("device 0 reports no IPC (this runtime's handles leave no room for the "
                   "HAL's offset, or cudaIpcGetMemHandle fails)");
    }
    unsigned char *p = NULL;
    hal_stream_t s = NULL;
    static unsigned char buf[8192];
    EXPECT_OK(hal_stream_create(d, 0, &s));
    EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 8192, 0, (void **)&p));
    EXPECT_OK(hal_memset_async(p, 0x11, 8192, s));
    EXPECT_OK(hal_memset_async(p + 1024, 0x5e, 4096, s));
    EXPECT_OK(hal_stream_synchronize(s));
    hal_ipc_handle_t h;
    EXPECT_OK(hal_mem_ipc_get_handle(p + 1024, &h));
    /* This process cannot open its own handle (CUDA's rule); garbage is refused. */
    void *q = NULL;
    EXPECT_STATUS(hal_mem_ipc_open_handle(d, &h, &q), HAL_ERROR_INVALID_ARGUMENT);
    hal_ipc_handle_t junk;
    memset(&junk, 0x33, sizeof(junk));
    EXPECT_STATUS(hal_mem_ipc_open_handle(d, &junk, &q), HAL_ERROR_INVALID_ARGUMENT);
    if (!ctest_failures_so_far()) {
        char hex[2 * sizeof(h.bytes) + 1];
        to_hex(&h, hex);
        pid_t pid = fork();
        if (pid == 0) {
            setenv(IPC_ENV, hex, 1);
            char exe[4096];
            ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
            if (n > 0) {
                exe[n] = '\0';
                execl(exe, exe, "--gtest_filter=CudaIpc.Child", (char *)NULL);
            }
            _exit(127);
        }
        int status = 0;
        CTEST_EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid);
        CTEST_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        EXPECT_OK(hal_memcpy_async(buf, p, sizeof(buf), s));
        EXPECT_OK(hal_stream_synchronize(s));
        CTEST_EXPECT(buf[1023] == 0x11 && buf[1024] == 0xa7 && buf[5119] == 0xa7 &&
                     buf[5120] == 0x11);
    }
    EXPECT_OK(hal_mem_free(p));
    EXPECT_OK(hal_stream_destroy(s));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* ---- collectives ----------------------------------------------------------------------------- */

/* One rank: NCCL when it is loaded (a native communicator, and the device reports native
 * collectives), else the HAL's host collectives. */
CTEST(CudaApi, OneRankCollective)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    CTEST_CHECK(hal_device_get(b, 0, &d) == HAL_OK);
    hal_unique_id_t id;
    hal_comm_t c = NULL;
    hal_stream_t s = NULL;
    float *dev = NULL, *host = NULL;
    const size_t n = 1023;
    EXPECT_OK(hal_comm_get_unique_id(0, &id));
    EXPECT_OK(hal_comm_init(&id, 1, 0, d, NULL, &c));
    EXPECT_OK(hal_stream_create(d, 0, &s));
    EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_DEVICE, 2 * n * sizeof(float), 0, (void **)&dev));
    EXPECT_OK(hal_mem_alloc(d, HAL_MEM_KIND_HOST_PINNED, 2 * n * sizeof(float), 0, (void **)&host));
    if (ctest_failures_so_far()) {
        hal_backend_close(b);
        return CTEST_PASS;
    }
    uintptr_t native = 0;
    const bool native_coll = (device_caps(d) & HAL_DEVICE_CAP_NATIVE_COLLECTIVES) != 0;
    EXPECT_STATUS(hal_comm_get_native_handle(c, &native),
                  native_coll ? HAL_OK : HAL_ERROR_UNSUPPORTED);
    for (size_t i = 0; i < n; i++)
        host[i] = (float)i;
    EXPECT_OK(hal_memcpy_async(dev, host, n * sizeof(float), s));
    EXPECT_OK(hal_allreduce(dev, dev + n, n, HAL_DTYPE_F32, HAL_REDOP_SUM, c, s));
    EXPECT_OK(hal_memcpy_async(host + n, dev + n, n * sizeof(float), s));
    EXPECT_OK(hal_stream_synchronize(s));
    CTEST_EXPECT(host[n] == 0.0f && host[n + 7] == 7.0f && host[2 * n - 1] == (float)(n - 1));
    hal_status_t async = HAL_ERROR_INTERNAL;
    EXPECT_OK(hal_comm_get_async_error(c, &async));
    CTEST_EXPECT(async == HAL_OK);
    EXPECT_OK(hal_comm_finalize(c));
    EXPECT_OK(hal_comm_abort(c));
    EXPECT_OK(hal_comm_get_async_error(c, &async));
    CTEST_EXPECT(async == HAL_ERROR_ABORTED);
    EXPECT_OK(hal_comm_destroy(c));
    EXPECT_OK(hal_mem_free(dev));
    EXPECT_OK(hal_mem_free(host));
    EXPECT_OK(hal_stream_destroy(s));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* Two ranks on one GPU: NCCL refuses that, so the backend declines a native communicator and
 * the HAL's host collectives serve (every rank decides alike). */
typedef struct two_rank {
    hal_device_t d;
    hal_unique_id_t id;
    int rank;
    hal_status_t init, native, result;
    float got;
} two_rank_t;

static void *two_rank_main(void *p)
{
    two_rank_t *r = p;
    hal_comm_t c = NULL;
    hal_stream_t s = NULL;
    float *dev = NULL, *host = NULL;
    r->init = hal_comm_init(&r->id, 2, r->rank, r->d, NULL, &c);
    if (r->init != HAL_OK)
        return NULL;
    uintptr_t native = 0;
    r->native = hal_comm_get_native_handle(c, &native);
    hal_status_t st = hal_stream_create(r->d, 0, &s);
    if (st == HAL_OK)
        st = hal_mem_alloc(r->d, HAL_MEM_KIND_DEVICE, sizeof(float), 0, (void **)&dev);
    if (st == HAL_OK)
        st = hal_mem_alloc(r->d, HAL_MEM_KIND_HOST_PINNED, sizeof(float), 0, (void **)&host);
    if (st == HAL_OK) {
        *host = (float)(r->rank + 1);
        st = hal_memcpy_async(dev, host, sizeof(float), s);
    }
    if (st == HAL_OK)
        st = hal_allreduce(dev, dev, 1, HAL_DTYPE_F32, HAL_REDOP_SUM, c, s);
    if (st == HAL_OK)
        st = hal_memcpy_async(host, dev, sizeof(float), s);
    if (st == HAL_OK)
        st = hal_stream_synchronize(s);
    if (st == HAL_OK)
        r->got = *host;
    r->result = st;
    if (s != NULL)
        hal_stream_destroy(s);
    if (dev != NULL)
        hal_mem_free(dev);
    if (host != NULL)
        hal_mem_free(host);
    hal_comm_destroy(c);
    return NULL;
}

CTEST(CudaApi, RanksSharingAGpuUseHostCollectives)
{
    hal_backend_t b = NULL;
    hal_device_t d = NULL;
    CTEST_CHECK(hal_backend_open("cuda", &b) == HAL_OK);
    CTEST_CHECK(hal_device_get(b, 0, &d) == HAL_OK);
    two_rank_t r[2];
    memset(r, 0, sizeof(r));
    EXPECT_OK(hal_comm_get_unique_id(0, &r[0].id));
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        r[i].d = d;
        r[i].id = r[0].id;
        r[i].rank = i;
        CTEST_EXPECT(pthread_create(&t[i], NULL, two_rank_main, &r[i]) == 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        EXPECT_OK(r[i].init);
        EXPECT_STATUS(r[i].native, HAL_ERROR_UNSUPPORTED);
        EXPECT_OK(r[i].result);
        CTEST_EXPECT(r[i].got == 3.0f);
    }
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}
