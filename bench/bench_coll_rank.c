/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "coll": the rank mode (hal_bench --coll-rank), one rank of the HAL's side. The
 * driver starts N of them with the job's unique id in the environment (hex, ID_ENV); each opens
 * the backend, joins the communicator, runs the plan on one device and stream and prints its
 * result lines (format in coll_common.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_coll.h"
#include "bench/bench_parts.h"
#include "bench/bench_util.h"
#include "bench/coll_common.h"
#include "hal/hal.h"

/* ==== rank mode: one rank of the HAL's side ================================================== */

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static bool id_from_hex(const char *hex, hal_unique_id_t *id)
{
    if (!hex || strlen(hex) != 2 * sizeof(id->internal))
        return false;
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        id->internal[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

void id_to_hex(const hal_unique_id_t *id, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        hex[2 * i] = digits[id->internal[i] >> 4];
        hex[2 * i + 1] = digits[id->internal[i] & 15];
    }
    hex[2 * sizeof(id->internal)] = '\0';
}

typedef struct rank_env {
    int rank, nranks;
    hal_comm_t comm;
    hal_stream_t stream;
    void *send, *recv; /* device memory */
    float *host;       /* pinned host memory, for inputs and checks */
} rank_env_t;

static hal_status_t rank_op(rank_env_t *e, coll_kind_t kind, const coll_shape_t *sh)
{
    switch (kind) {
    case COLL_ALLREDUCE:
        return hal_allreduce(e->send, e->recv, sh->count, HAL_DTYPE_F32, HAL_REDOP_SUM, e->comm,
                             e->stream);
    case COLL_ALLGATHER:
        return hal_allgather(e->send, e->recv, sh->count, HAL_DTYPE_F32, e->comm, e->stream);
    case COLL_REDUCE_SCATTER:
        return hal_reduce_scatter(e->send, e->recv, sh->count, HAL_DTYPE_F32, HAL_REDOP_SUM,
                                  e->comm, e->stream);
    case COLL_BROADCAST:
        return hal_broadcast(e->send, e->recv, sh->count, HAL_DTYPE_F32, 0, e->comm, e->stream);
    case COLL_ALLTOALL:
        return hal_alltoall(e->send, e->recv, sh->count, HAL_DTYPE_F32, e->comm, e->stream);
    default:
        return HAL_ERROR_INVALID_ARGUMENT;
    }
}

/* Every rank enqueues a barrier and waits for it: all leave within a wake-up of each other. */
static hal_status_t rank_barrier(rank_env_t *e)
{
    hal_status_t st = hal_barrier(e->comm, e->stream);
    return st == HAL_OK ? hal_stream_synchronize(e->stream) : st;
}

static int rank_step(rank_env_t *e, coll_kind_t kind, const coll_step_t *step)
{
    coll_shape_t sh = coll_shape_of(kind, step->bytes, e->nranks);
    double ns[COLL_MAX_REPS];
    const char *what = coll_kind_names[kind];

    coll_fill_send(e->rank, e->host, sh.send_elems);
    BENCH_HAL_CHECK_GOTO(
        hal_memcpy_async(e->send, e->host, sh.send_elems * sizeof(float), e->stream), fail);
    BENCH_HAL_CHECK_GOTO(hal_memset_async(e->recv, 0xff, sh.recv_elems * sizeof(float), e->stream),
                         fail);
    BENCH_HAL_CHECK_GOTO(rank_barrier(e), fail);
    for (uint32_t w = 0; w < step->warmup; w++)
        BENCH_HAL_CHECK_GOTO(rank_op(e, kind, &sh), fail);
    BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(e->stream), fail);
    for (uint32_t r = 0; r < step->reps; r++) {
        BENCH_HAL_CHECK_GOTO(rank_barrier(e), fail);
        uint64_t t0 = bench_now_ns();
        for (uint32_t it = 0; it < step->iters; it++)
            BENCH_HAL_CHECK_GOTO(rank_op(e, kind, &sh), fail);
        BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(e->stream), fail);
        ns[r] = (double)(bench_now_ns() - t0) / (double)step->iters;
    }
    BENCH_HAL_CHECK_GOTO(
        hal_memcpy_async(e->host, e->recv, sh.recv_elems * sizeof(float), e->stream), fail);
    BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(e->stream), fail);
    uint64_t wrong = coll_count_wrong(kind, e->rank, e->nranks, &sh, e->host);
    coll_print_result("hal", kind, "-", &sh, step->iters, wrong, ns, step->reps);
    return 0;
fail:
    fprintf(stderr, "hal-bench: rank %d of %d: %s of %llu bytes failed\n", e->rank, e->nranks, what,
            (unsigned long long)sh.bytes);
    return 1;
}

int bench_coll_rank_main(int argc, char **argv)
{
    coll_plan_t plan;
    memset(&plan, 0, sizeof(plan));
    const char *backend_name = "cpu";
    rank_env_t e = { .rank = -1, .nranks = 0 };
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int r = coll_plan_arg(&plan, a);
        if (r == 1)
            continue;
        if (r == 0 && strncmp(a, "--backend=", 10) == 0)
            backend_name = a + 10;
        else if (r == 0 && strncmp(a, "--rank=", 7) == 0)
            e.rank = atoi(a + 7);
        else if (r == 0 && strncmp(a, "--nranks=", 9) == 0)
            e.nranks = atoi(a + 9);
        else {
            fprintf(stderr, "hal-bench: rank mode: bad argument '%s'\n", a);
            return 2;
        }
    }
    hal_unique_id_t id;
    if (e.nranks < 1 || e.rank < 0 || e.rank >= e.nranks || plan.nsteps == 0 || plan.ncolls == 0 ||
        !id_from_hex(getenv(ID_ENV), &id)) {
        fprintf(stderr, "hal-bench: rank mode needs --rank, --nranks, --plan, --colls and %s\n",
                ID_ENV);
        return 2;
    }

    int rc = 1;
    hal_backend_t backend = NULL;
    hal_device_t device = NULL;
    uint32_t ndev = 0;
    size_t max_send, max_recv;
    coll_plan_max_elems(&plan, e.nranks, &max_send, &max_recv);
    size_t host_elems = max_send > max_recv ? max_send : max_recv;

    BENCH_HAL_CHECK_GOTO(hal_backend_open(backend_name, &backend), out);
    BENCH_HAL_CHECK_GOTO(hal_device_count(backend, &ndev), out_backend);
    if (ndev == 0) {
        fprintf(stderr, "hal-bench: backend %s has no device\n", backend_name);
        goto out_backend;
    }
    BENCH_HAL_CHECK_GOTO(hal_device_get(backend, (uint32_t)e.rank % ndev, &device), out_backend);
    BENCH_HAL_CHECK_GOTO(hal_set_current_device(device), out_backend);
    hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
    BENCH_HAL_CHECK_GOTO(hal_comm_init(&id, e.nranks, e.rank, device, &config, &e.comm),
                         out_backend);
    /* Whether the backend runs this communicator's collectives (for the driver's report). */
    uintptr_t native = 0;
    printf("path %s\n", hal_comm_get_native_handle(e.comm, &native) == HAL_OK ? "native" : "host");
    BENCH_HAL_CHECK_GOTO(hal_stream_create(device, 0, &e.stream), out_comm);
    BENCH_HAL_CHECK_GOTO(
        hal_mem_alloc(device, HAL_MEM_KIND_DEVICE, max_send * sizeof(float), 0, &e.send), out_mem);
    BENCH_HAL_CHECK_GOTO(
        hal_mem_alloc(device, HAL_MEM_KIND_DEVICE, max_recv * sizeof(float), 0, &e.recv), out_mem);
    void *host = NULL;
    BENCH_HAL_CHECK_GOTO(
        hal_mem_alloc(device, HAL_MEM_KIND_HOST_PINNED, host_elems * sizeof(float), 0, &host),
        out_mem);
    e.host = host;
    /* Fault every page in before any timing. */
    memset(e.host, 0, host_elems * sizeof(float));
    BENCH_HAL_CHECK_GOTO(hal_memset_async(e.send, 0, max_send * sizeof(float), e.stream), out_mem);
    BENCH_HAL_CHECK_GOTO(hal_memset_async(e.recv, 0, max_recv * sizeof(float), e.stream), out_mem);
    BENCH_HAL_CHECK_GOTO(hal_stream_synchronize(e.stream), out_mem);

    rc = 0;
    for (int c = 0; c < plan.ncolls && rc == 0; c++)
        for (int s = 0; s < plan.nsteps && rc == 0; s++)
            rc = rank_step(&e, plan.coll[c], &plan.step[s]);
    if (rc == 0)
        BENCH_HAL_CHECK_GOTO(hal_comm_finalize(e.comm), out_fail);

out_mem:
    if (e.stream)
        hal_stream_synchronize(e.stream);
    hal_mem_free(e.host);
    hal_mem_free(e.recv);
    hal_mem_free(e.send);
    if (e.stream)
        hal_stream_destroy(e.stream);
out_comm:
    if (rc != 0)
        hal_comm_abort(e.comm);
    hal_comm_destroy(e.comm);
out_backend:
    hal_backend_close(backend);
out:
    return rc;
out_fail:
    rc = 1;
    goto out_mem;
}
