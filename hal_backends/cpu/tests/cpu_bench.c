/* SPDX-License-Identifier: Apache-2.0 */
/* Measures the cpu backend's per-task overhead: the enqueue-to-completion round trip of an empty
 * task, and the bandwidth of pipelined memcpy_async against plain memcpy. Prints one line per
 * measurement; the targets are a p50 round trip <= 5 us and a copy ratio >= 0.95 for chunks of
 * 1 MiB and more. Usage: cpu_bench [round-trip iterations] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cpu/cpu_internal.h"

static void bench_set_error(const char *fmt, ...)
{
    (void)fmt;
}

static const hal_host_services_t host = {
    .struct_size = sizeof(hal_host_services_t),
    .api_version = HAL_API_VERSION,
    .set_error = bench_set_error,
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void noop_cb(hal_status_t status, void *arg)
{
    (void)status;
    (void)arg;
}

static void report(const char *what, uint64_t *ns, int n)
{
    qsort(ns, (size_t)n, sizeof(*ns), cmp_u64);
    printf("%-34s p50 %6.2f us  p90 %6.2f us  p99 %7.2f us\n", what, ns[n / 2] / 1e3,
           ns[n * 9 / 10] / 1e3, ns[n * 99 / 100] / 1e3);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 100000;
    if (iters < 100)
        iters = 100;
    const hal_backend_ops_t *ops;
    void *backend, *dev, *s, *ev;
    if (hal_backend_get_ops(HAL_API_VERSION, &ops) != HAL_OK || ops->init(&host, &backend) ||
        ops->device_open(backend, 0, &dev) || ops->stream_create(dev, 0, &s) ||
        ops->event_create(dev, 0, &ev)) {
        fprintf(stderr, "cpu_bench: backend setup failed\n");
        return 1;
    }
    const cpu_config_t *cfg = &((cpu_backend_t *)backend)->config;
    printf("cpu backend: %u slots per device, spin %u us\n", cfg->concurrency, cfg->spin_us);

    uint64_t *ns = malloc(sizeof(uint64_t) * (size_t)iters);
    for (int i = 0; i < iters; i++) {
        uint64_t t0 = hq_now_ns();
        ops->stream_add_callback(s, noop_cb, NULL);
        ops->stream_synchronize(s);
        ns[i] = hq_now_ns() - t0;
    }
    report("callback + stream_synchronize", ns, iters);
    for (int i = 0; i < iters; i++) {
        uint64_t t0 = hq_now_ns();
        ops->event_record(ev, s);
        ops->event_synchronize(ev);
        ns[i] = hq_now_ns() - t0;
    }
    report("event_record + event_synchronize", ns, iters);
    free(ns);

    /* Bandwidth: the same sequence of chunk copies, plain and through the stream. */
    const size_t total = (size_t)256 << 20;
    char *src = malloc(total), *dst = malloc(total);
    memset(src, 1, total);
    memset(dst, 2, total);
    static const size_t chunks[] = { (size_t)1 << 20, (size_t)4 << 20, (size_t)16 << 20 };
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        size_t chunk = chunks[c];
        double best_plain = 1e30, best_stream = 1e30;
        for (int rep = 0; rep < 11; rep++) {
            uint64_t t0 = hq_now_ns();
            for (size_t off = 0; off < total; off += chunk)
                memcpy(dst + off, src + off, chunk);
            uint64_t t1 = hq_now_ns();
            for (size_t off = 0; off < total; off += chunk) {
                hal_backend_ptr_t d = { .ptr = dst + off }, sp = { .ptr = src + off };
                ops->memcpy_async(s, &d, &sp, chunk);
            }
            ops->stream_synchronize(s);
            uint64_t t2 = hq_now_ns();
            if ((double)(t1 - t0) < best_plain)
                best_plain = (double)(t1 - t0);
            if ((double)(t2 - t1) < best_stream)
                best_stream = (double)(t2 - t1);
        }
        printf("memcpy %2zu MiB chunks: plain %6.2f GB/s  stream %6.2f GB/s  ratio %.3f\n",
               chunk >> 20, total / best_plain, total / best_stream, best_plain / best_stream);
    }
    free(src);
    free(dst);
    ops->event_destroy(ev);
    ops->stream_destroy(s);
    ops->device_close(dev);
    ops->fini(backend);
    return 0;
}
