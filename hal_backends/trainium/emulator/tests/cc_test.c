/* SPDX-License-Identifier: Apache-2.0 */
/* Contract tests of the out-of-NEFF collectives: nrt_cc_global_comm_init through
 * NEURON_RT_ROOT_COMM_ID, nrta_cc_prepare / nrta_cc_schedule / nrta_is_completed, error trackers
 * (async API 2) and status pointers (async API 3), among cores of one process (threads) and of
 * several processes; the statuses of bad arguments, disagreeing ranks, silent and departed peers,
 * a full queue and nrt_close. Tests of what only the emulator offers (its version switch, its
 * timeout variable) skip on another runtime. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"
#include "tools/ctest/ctest.h"

static nrt_api_t api;

/* ---- helpers ------------------------------------------------------------------------------- */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A port nobody listens on now, for the root. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void set_root(void)
{
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%d", free_port());
    setenv("NEURON_RT_ROOT_COMM_ID", text, 1);
}

/* Opens the library with collectives; skips on one without them. */
#define OPEN_CC()                                                                          \
    do {                                                                                   \
        CTEST_CHECK(nrt_test_open(&api));                                                  \
        if (api.cc_global_comm_init == NULL || api.cc_prepare == NULL ||                   \
            api.cc_schedule == NULL || api.is_completed == NULL) {                         \
            nrt_test_close(&api);                                                          \
            CTEST_SKIP("the library has no out-of-NEFF collectives (libnrt before 2.30)"); \
        }                                                                                  \
    } while (0)

#define OPEN_EMULATOR_CC()                                            \
    do {                                                              \
        OPEN_CC();                                                    \
        if (!nrt_test_is_emulator(&api)) {                            \
            nrt_test_close(&api);                                     \
            CTEST_SKIP("needs the emulator (NEURON_EMU_* settings)"); \
        }                                                             \
    } while (0)

typedef struct join_arg {
    uint32_t vnc, g, n;
    NRT_STATUS st;
} join_arg_t;

static void *join_main(void *p)
{
    join_arg_t *a = p;
    a->st = api.cc_global_comm_init(a->vnc, a->g, a->n);
    return NULL;
}

/* Cores 0..n-1 of this process become global devices 0..n-1, each from a thread of its own. */
static bool join_threads(uint32_t n)
{
    pthread_t t[8];
    join_arg_t a[8];
    bool ok = true;
    for (uint32_t i = 0; i < n; i++) {
        a[i] = (join_arg_t){ .vnc = i, .g = i, .n = n, .st = NRT_FAILURE };
        if (pthread_create(&t[i], NULL, join_main, &a[i]) != 0)
            return false;
    }
    for (uint32_t i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        if (a[i].st != NRT_SUCCESS) {
            fprintf(stderr, "nrt_cc_global_comm_init(%u, %u, %u) returned %d\n", i, i, n,
                    (int)a[i].st);
            ok = false;
        }
    }
    return ok;
}

static nrt_tensor_t *device_tensor(uint32_t vnc, size_t size, const void *init)
{
    nrt_tensor_t *t = NULL;
    if (api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, (int)vnc, size, "cc", &t) != NRT_SUCCESS)
        return NULL;
    if (init != NULL && api.tensor_write(t, init, 0, size) != NRT_SUCCESS)
        api.tensor_free(&t);
    return t;
}

/* One rank's request. */
typedef struct request {
    uint32_t group[8];
    nrt_cc_comm_t comm;
    nrt_tensor_t *in, *out;
    nrt_tensor_list_t in_list, out_list;
    nrta_error_tracker_t *tracker; /* async API 2 */
    NRT_STATUS ret;                /* async API 3 */
    bool v3;
    nrta_seq_t seq;
} request_t;

/* Rank `rank` of the group `group` (global device ids) on core vnc, which is global device
 * group[rank] of count. */
static void request_init(request_t *r, uint32_t vnc, const uint32_t *group, uint32_t n,
                         uint32_t rank, uint32_t count, nrt_tensor_t *in, nrt_tensor_t *out)
{
    memset(r, 0, sizeof(*r));
    memcpy(r->group, group, n * sizeof(*group));
    r->comm = (nrt_cc_comm_t){ .replica_group = r->group,
                               .rank = rank,
                               .rank_n = n,
                               .ctx_device_id = group[rank],
                               .ctx_device_count = count,
                               .vnc = vnc };
    r->in = in;
    r->out = out;
    r->in_list = (nrt_tensor_list_t){ .tensors = &r->in, .num_tensors = 1 };
    r->out_list = (nrt_tensor_list_t){ .tensors = &r->out, .num_tensors = 1 };
}

static NRT_STATUS request_submit(request_t *r, nrt_dtype_t dtype, nrt_op_type_t op,
                                 nrt_cc_op_type_t cc_op, bool v3)
{
    nrt_cc_context_t *ctx = NULL;
    NRT_STATUS st = api.cc_prepare(&r->comm, &r->in_list, &r->out_list, dtype, op, cc_op, &ctx);
    if (st != NRT_SUCCESS)
        return st;
    r->v3 = v3;
    if (v3)
        return api.cc_schedule_v3(&ctx, 0, &r->ret, &r->seq);
    if (r->tracker == NULL && api.error_tracker_create != NULL)
        api.error_tracker_create(r->comm.vnc, &r->tracker);
    return api.cc_schedule(&ctx, 0, r->tracker, &r->seq);
}

/* Waits (up to 30 s) for the request and returns its final status. */
static NRT_STATUS request_wait(request_t *r)
{
    double deadline = now_ms() + 30000;
    bool done = false;
    while (!done) {
        NRT_STATUS st = api.is_completed(r->seq, &done);
        if (st != NRT_SUCCESS)
            return st;
        if (!done && now_ms() > deadline)
            return NRT_COLL_PENDING;
        if (!done)
            sleep_ms(1);
    }
    if (r->v3)
        return r->ret;
    const nrta_error_t *list = NULL;
    size_t count = 0;
    if (r->tracker != NULL && api.error_tracker_get_list(r->tracker, &list, &count) == NRT_SUCCESS)
        for (size_t i = 0; i < count; i++)
            if (list[i].seq_id == r->seq)
                return (NRT_STATUS)list[i].error_code;
    return NRT_SUCCESS;
}

static void request_fini(request_t *r)
{
    if (r->tracker != NULL)
        api.error_tracker_destroy(r->tracker);
    r->tracker = NULL;
}

/* Element e of rank r's input of a test, as float: small integers, exact in every type tested. */
static float value_of(uint32_t r, size_t e)
{
    return (float)((int)((r * 7 + e * 3) % 23) - 11);
}

static void fill(void *buf, nrt_dtype_t dtype, size_t n, uint32_t rank)
{
    for (size_t e = 0; e < n; e++) {
        float v = value_of(rank, e);
        switch (dtype) {
        case NRT_DTYPE_FLOAT32:
            ((float *)buf)[e] = v;
            break;
        case NRT_DTYPE_INT32:
            ((int32_t *)buf)[e] = (int32_t)v;
            break;
        case NRT_DTYPE_UINT8:
            ((uint8_t *)buf)[e] = (uint8_t)(v + 11);
            break;
        case NRT_DTYPE_BFLOAT16: {
            uint32_t u;
            memcpy(&u, &v, sizeof(u));
            ((uint16_t *)buf)[e] = (uint16_t)(u >> 16); /* exact: small integers */
            break;
        }
        case NRT_DTYPE_FLOAT16: {
            /* Small integers: exponent and 10-bit mantissa, exactly. */
            uint16_t h = 0;
            if (v != 0) {
                float a = v < 0 ? -v : v;
                int exp = 0;
                while (a >= 2) {
                    a /= 2;
                    exp++;
                }
                h = (uint16_t)(((exp + 15) << 10) | (uint16_t)((a - 1) * 1024));
                if (v < 0)
                    h |= 0x8000u;
            }
            ((uint16_t *)buf)[e] = h;
            break;
        }
        default:
            break;
        }
    }
}

static float load(const void *buf, nrt_dtype_t dtype, size_t e)
{
    switch (dtype) {
    case NRT_DTYPE_FLOAT32:
        return ((const float *)buf)[e];
    case NRT_DTYPE_INT32:
        return (float)((const int32_t *)buf)[e];
    case NRT_DTYPE_UINT8:
        return (float)((const uint8_t *)buf)[e] - 11;
    case NRT_DTYPE_BFLOAT16: {
        uint32_t u = (uint32_t)((const uint16_t *)buf)[e] << 16;
        float f;
        memcpy(&f, &u, sizeof(f));
        return f;
    }
    case NRT_DTYPE_FLOAT16: {
        uint16_t h = ((const uint16_t *)buf)[e];
        if ((h & 0x7fffu) == 0)
            return 0;
        float m = 1 + (float)(h & 0x3ffu) / 1024;
        int exp = ((h >> 10) & 0x1f) - 15;
        while (exp-- > 0)
            m *= 2;
        return h & 0x8000u ? -m : m;
    }
    default:
        return 0;
    }
}

static size_t esize_of(nrt_dtype_t dtype)
{
    return dtype == NRT_DTYPE_FLOAT32 || dtype == NRT_DTYPE_INT32 ? 4
           : dtype == NRT_DTYPE_UINT8                             ? 1
                                                                  : 2;
}

/* What rank-ordered reduction of ranks 0..n-1 gives for element e. */
static float expected(nrt_op_type_t op, uint32_t n, size_t e, nrt_dtype_t dtype)
{
    float acc = value_of(0, e);
    for (uint32_t r = 1; r < n; r++) {
        float v = value_of(r, e);
        acc = op == NRT_OP_ADD   ? acc + v
              : op == NRT_OP_MAX ? (acc > v ? acc : v)
                                 : (acc < v ? acc : v);
    }
    if (dtype == NRT_DTYPE_UINT8 && op == NRT_OP_ADD) /* (a + 11) + (b + 11): wraps mod 256 */
        acc = (float)(uint8_t)((int)acc + 11 * (int)n) - 11;
    return acc;
}

/* Runs one collective on ranks 0..n-1 = cores 0..n-1 (global devices `group[rank]`) and checks
 * every rank's output. count: elements of each rank's input. */
static bool run_and_check(uint32_t n, const uint32_t *group, nrt_cc_op_type_t cc_op,
                          nrt_dtype_t dtype, nrt_op_type_t op, size_t count, bool v3)
{
    size_t es = esize_of(dtype), in_bytes = count * es;
    size_t out_bytes = cc_op == NRT_CC_ALLGATHER       ? in_bytes * n
                       : cc_op == NRT_CC_REDUCESCATTER ? in_bytes / n
                                                       : in_bytes;
    request_t req[8];
    unsigned char *host = malloc(in_bytes * n + 16);
    bool ok = host != NULL;
    for (uint32_t rank = 0; rank < n && ok; rank++) {
        uint32_t vnc = group[rank]; /* core v is global device v */
        fill(host, dtype, count, rank);
        nrt_tensor_t *in = device_tensor(vnc, in_bytes, host);
        nrt_tensor_t *out = device_tensor(vnc, out_bytes, NULL);
        request_init(&req[rank], vnc, group, n, rank, n, in, out);
        NRT_STATUS st = request_submit(&req[rank], dtype, op, cc_op, v3);
        if (in == NULL || out == NULL || st != NRT_SUCCESS) {
            fprintf(stderr, "rank %u: submit returned %d\n", rank, (int)st);
            ok = false;
        }
    }
    for (uint32_t rank = 0; rank < n && ok; rank++) {
        NRT_STATUS st = request_wait(&req[rank]);
        if (st != NRT_SUCCESS) {
            fprintf(stderr, "rank %u: %s completed with %d\n", rank,
                    cc_op == NRT_CC_ALLREDUCE ? "all-reduce" : "collective", (int)st);
            ok = false;
        }
    }
    for (uint32_t rank = 0; rank < n && ok; rank++) {
        if (api.tensor_read(req[rank].out, host, 0, out_bytes) != NRT_SUCCESS) {
            ok = false;
            break;
        }
        for (size_t e = 0; e < out_bytes / es && ok; e++) {
            float want, got = load(host, dtype, e);
            if (cc_op == NRT_CC_ALLGATHER)
                want = value_of((uint32_t)(e / count), e % count);
            else if (cc_op == NRT_CC_REDUCESCATTER)
                want = expected(op, n, rank * (count / n) + e, dtype);
            else
                want = expected(op, n, e, dtype);
            if (dtype == NRT_DTYPE_UINT8 && cc_op == NRT_CC_ALLGATHER)
                want = value_of((uint32_t)(e / count), e % count);
            if (got != want) {
                fprintf(stderr,
                        "rank %u element %zu: %g, expected %g (cc_op %d dtype 0x%x op %d)\n", rank,
                        e, (double)got, (double)want, (int)cc_op, (unsigned)dtype, (int)op);
                ok = false;
            }
        }
    }
    for (uint32_t rank = 0; rank < n; rank++) {
        api.tensor_free(&req[rank].in);
        api.tensor_free(&req[rank].out);
        request_fini(&req[rank]);
    }
    free(host);
    return ok;
}

/* ---- tests --------------------------------------------------------------------------------- */

/* Two cores of one process, each a global device from a thread of its own: every collective,
 * several types and operations, a replica group listed in another order. */
CTEST(Cc, CoresOfOneProcess)
{
    OPEN_CC();
    setenv("NEURON_RT_VISIBLE_CORES", "0-1", 1);
    set_root();
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_EXPECT(join_threads(2));
    static const uint32_t straight[] = { 0, 1 }, reversed[] = { 1, 0 };
    static const struct {
        nrt_cc_op_type_t cc_op;
        nrt_dtype_t dtype;
        nrt_op_type_t op;
    } cases[] = {
        { NRT_CC_ALLREDUCE, NRT_DTYPE_FLOAT32, NRT_OP_ADD },
        { NRT_CC_ALLREDUCE, NRT_DTYPE_INT32, NRT_OP_MAX },
        { NRT_CC_ALLREDUCE, NRT_DTYPE_BFLOAT16, NRT_OP_ADD },
        { NRT_CC_ALLREDUCE, NRT_DTYPE_FLOAT16, NRT_OP_MIN },
        { NRT_CC_ALLREDUCE, NRT_DTYPE_UINT8, NRT_OP_ADD },
        { NRT_CC_ALLGATHER, NRT_DTYPE_FLOAT32, NRT_OP_ADD },
        { NRT_CC_ALLGATHER, NRT_DTYPE_UINT8, NRT_OP_ADD },
        { NRT_CC_REDUCESCATTER, NRT_DTYPE_FLOAT32, NRT_OP_ADD },
        { NRT_CC_REDUCESCATTER, NRT_DTYPE_INT32, NRT_OP_MIN },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CTEST_EXPECT(
            run_and_check(2, straight, cases[i].cc_op, cases[i].dtype, cases[i].op, 1000, false));
        CTEST_EXPECT(
            run_and_check(2, reversed, cases[i].cc_op, cases[i].dtype, cases[i].op, 6, false));
    }
    /* A large one (several MiB through the sockets). */
    CTEST_EXPECT(run_and_check(2, straight, NRT_CC_ALLREDUCE, NRT_DTYPE_FLOAT32, NRT_OP_ADD,
                               (1u << 20) + 3, false));
    nrt_test_close(&api);
    return CTEST_PASS;
}

typedef struct child_arg {
    uint32_t g, n;
} child_arg_t;

/* A process of its own: core g of the machine as global device g of n. */
static int child_main(void *p)
{
    child_arg_t *a = p;
    char core[16];
    snprintf(core, sizeof(core), "%u", a->g);
    setenv("NEURON_RT_VISIBLE_CORES", core, 1);
    if (nrt_test_init(&api) != NRT_SUCCESS)
        return 10;
    if (api.cc_global_comm_init(0, a->g, a->n) != NRT_SUCCESS)
        return 11;
    uint32_t group[8];
    for (uint32_t i = 0; i < a->n; i++)
        group[i] = i;
    /* This process drives one rank only: run_and_check's loops over ranks would need every core
     * here, so do the rank's part by hand. */
    size_t count = 4097, bytes = count * 4;
    float *host = malloc(bytes * a->n);
    if (host == NULL)
        return 12;
    fill(host, NRT_DTYPE_FLOAT32, count, a->g);
    request_t r;
    request_init(&r, 0, group, a->n, a->g, a->n, device_tensor(0, bytes, host),
                 device_tensor(0, bytes, NULL));
    if (request_submit(&r, NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE, false) != NRT_SUCCESS ||
        request_wait(&r) != NRT_SUCCESS || api.tensor_read(r.out, host, 0, bytes) != NRT_SUCCESS)
        return 13;
    for (size_t e = 0; e < count; e++)
        if (host[e] != expected(NRT_OP_ADD, a->n, e, NRT_DTYPE_FLOAT32))
            return 14;
    /* All-gather into a tensor n times larger. */
    nrt_tensor_t *all = device_tensor(0, bytes * a->n, NULL);
    request_t g;
    request_init(&g, 0, group, a->n, a->g, a->n, r.in, all);
    g.tracker = r.tracker;
    r.tracker = NULL;
    if (request_submit(&g, NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLGATHER, false) != NRT_SUCCESS ||
        request_wait(&g) != NRT_SUCCESS ||
        api.tensor_read(all, host, 0, bytes * a->n) != NRT_SUCCESS)
        return 15;
    for (size_t e = 0; e < count * a->n; e++)
        if (host[e] != value_of((uint32_t)(e / count), e % count))
            return 16;
    request_fini(&g);
    free(host);
    api.close();
    return 0;
}

/* Three processes, one core each: the global communicator through NEURON_RT_ROOT_COMM_ID, an
 * all-reduce and an all-gather. */
CTEST(Cc, ProcessesOfOneHost)
{
    OPEN_CC();
    set_root();
    enum { N = 3 };
    pid_t pids[N];
    fflush(NULL);
    for (uint32_t g = 0; g < N; g++) {
        pids[g] = fork();
        if (pids[g] == 0) {
            child_arg_t a = { .g = g, .n = N };
            _exit(child_main(&a));
        }
        CTEST_CHECK(pids[g] > 0);
    }
    for (uint32_t g = 0; g < N; g++) {
        int status = 0;
        while (waitpid(pids[g], &status, 0) < 0) {
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fprintf(stderr, "process of global device %u: status 0x%x\n", g, status);
        CTEST_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* Every argument error is NRT_INVALID and prepares nothing. */
CTEST(Cc, ArgumentErrors)
{
    OPEN_CC();
    setenv("NEURON_RT_VISIBLE_CORES", "0-1", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_tensor_t *in = device_tensor(0, 64, NULL), *out = device_tensor(0, 64, NULL);
    nrt_tensor_t *big = device_tensor(0, 128, NULL), *other = device_tensor(1, 64, NULL);
    nrt_tensor_t *host = NULL;
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 64, "h", &host) ==
                NRT_SUCCESS);
    static const uint32_t group[] = { 0, 1 };
    request_t r;
    request_init(&r, 0, group, 2, 0, 2, in, out);
    nrt_cc_context_t *ctx = NULL;
    /* No global communicator yet. */
    CTEST_EXPECT(api.cc_prepare(&r.comm, &r.in_list, &r.out_list, NRT_DTYPE_FLOAT32, NRT_OP_ADD,
                                NRT_CC_ALLREDUCE, &ctx) == NRT_INVALID);
    /* The root must be named. */
    CTEST_EXPECT(api.cc_global_comm_init(0, 0, 2) == NRT_INVALID);
    CTEST_EXPECT(api.cc_global_comm_init(0, 2, 2) == NRT_INVALID); /* id out of range */
    CTEST_EXPECT(api.cc_global_comm_init(5, 0, 2) == NRT_INVALID); /* core not visible */
    set_root();
    CTEST_CHECK(join_threads(2));
    CTEST_EXPECT(api.cc_global_comm_init(0, 0, 2) == NRT_INVALID); /* joined already */

#define PREPARE(dt, op, cc) api.cc_prepare(&r.comm, &r.in_list, &r.out_list, dt, op, cc, &ctx)
    CTEST_EXPECT(api.cc_prepare(NULL, &r.in_list, &r.out_list, NRT_DTYPE_FLOAT32, NRT_OP_ADD,
                                NRT_CC_ALLREDUCE, &ctx) == NRT_INVALID);
    CTEST_EXPECT(api.cc_prepare(&r.comm, &r.in_list, &r.out_list, NRT_DTYPE_FLOAT32, NRT_OP_ADD,
                                NRT_CC_ALLREDUCE, NULL) == NRT_INVALID);
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_FMA, NRT_CC_ALLREDUCE) == NRT_INVALID);
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FP8_E4, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, (nrt_cc_op_type_t)7) == NRT_INVALID);
    /* The communicator. */
    r.comm.ctx_device_id = 1;
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    r.comm.ctx_device_id = 0;
    r.comm.ctx_device_count = 3;
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    r.comm.ctx_device_count = 2;
    r.comm.rank = 1; /* replica_group[1] is global device 1, not this core's 0 */
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    r.comm.rank = 2;
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    r.comm.rank = 0;
    r.group[1] = 0; /* twice */
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    r.group[1] = 9; /* not a global device */
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    r.group[1] = 1;
    /* The tensors. */
    r.out = big; /* all-reduce sizes differ */
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_REDUCESCATTER) == NRT_INVALID);
    r.out = other; /* another core's */
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    r.out = host; /* host memory */
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    r.out = out;
    r.out_list.num_tensors = 0;
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE) == NRT_INVALID);
    r.out_list.num_tensors = 1;
    CTEST_EXPECT(ctx == NULL);
    /* An all-gather into the larger tensor is fine; schedule rejects a queue other than 0,
     * NULLs, and a context it consumed already. */
    r.out = big;
    CTEST_EXPECT(PREPARE(NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLGATHER) == NRT_SUCCESS);
    nrta_seq_t seq = 0;
    nrt_cc_context_t *kept = ctx;
    CTEST_EXPECT(api.cc_schedule(&ctx, 1, NULL, &seq) == NRT_INVALID);
    CTEST_EXPECT(api.cc_schedule(&ctx, 0, NULL, NULL) == NRT_INVALID);
    CTEST_EXPECT(api.cc_schedule(NULL, 0, NULL, &seq) == NRT_INVALID);
    CTEST_EXPECT(ctx == kept);
    bool done = true;
    CTEST_EXPECT(api.is_completed(0x1234, &done) == NRT_INVALID);
    /* The context is consumed by the schedule (its collective waits for rank 1, which never
     * comes: nrt_close cancels it). */
    CTEST_EXPECT(api.cc_schedule(&ctx, 0, NULL, &seq) == NRT_SUCCESS);
    CTEST_EXPECT(ctx == NULL);
    CTEST_EXPECT(api.cc_schedule(&kept, 0, NULL, &seq) == NRT_INVALID);
    CTEST_EXPECT(api.is_completed(seq, NULL) == NRT_INVALID);
    CTEST_EXPECT(api.is_completed(seq, &done) == NRT_SUCCESS && !done);
    CTEST_EXPECT(api.is_completed(seq + 1, &done) == NRT_INVALID);
#undef PREPARE
    api.tensor_free(&in);
    api.tensor_free(&out);
    api.tensor_free(&big);
    api.tensor_free(&other);
    api.tensor_free(&host);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* Ranks that disagree all fail with NRT_INVALID and write nothing; the next collective they
 * agree on runs. */
CTEST(Cc, DisagreeingRanksFailAlike)
{
    OPEN_EMULATOR_CC();
    setenv("NEURON_RT_VISIBLE_CORES", "0-1", 1);
    set_root();
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(join_threads(2));
    static const uint32_t group[] = { 0, 1 };
    float one[16], zero[16];
    for (int i = 0; i < 16; i++)
        one[i] = 1, zero[i] = 0;
    request_t r[2];
    for (uint32_t k = 0; k < 2; k++) {
        request_init(&r[k], k, group, 2, k, 2, device_tensor(k, sizeof(one), one),
                     device_tensor(k, sizeof(zero), zero));
        CTEST_EXPECT(request_submit(&r[k], NRT_DTYPE_FLOAT32, k == 0 ? NRT_OP_ADD : NRT_OP_MAX,
                                    NRT_CC_ALLREDUCE, false) == NRT_SUCCESS);
    }
    for (uint32_t k = 0; k < 2; k++) {
        CTEST_EXPECT(request_wait(&r[k]) == NRT_INVALID);
        float got[16];
        CTEST_EXPECT(api.tensor_read(r[k].out, got, 0, sizeof(got)) == NRT_SUCCESS);
        CTEST_EXPECT(memcmp(got, zero, sizeof(got)) == 0);
    }
    for (uint32_t k = 0; k < 2; k++)
        CTEST_EXPECT(request_submit(&r[k], NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE,
                                    false) == NRT_SUCCESS);
    for (uint32_t k = 0; k < 2; k++) {
        CTEST_EXPECT(request_wait(&r[k]) == NRT_SUCCESS);
        float got[16];
        CTEST_EXPECT(api.tensor_read(r[k].out, got, 0, sizeof(got)) == NRT_SUCCESS);
        CTEST_EXPECT(got[0] == 2 && got[15] == 2);
        api.tensor_free(&r[k].in);
        api.tensor_free(&r[k].out);
        request_fini(&r[k]);
    }
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* Async API 3 (emulating libnrt 2.31): the status pointer holds NRT_COLL_PENDING until the final
 * status; in place is accepted (refused by 2.30); error trackers are gone. */
CTEST(Cc, AsyncApi3AndInPlace)
{
    OPEN_EMULATOR_CC();
    static const uint32_t group[] = { 0, 1 };
    for (int version = 0; version < 2; version++) {
        if (version == 1)
            setenv("NEURON_EMU_RUNTIME_VERSION", "2.31.24.0", 1);
        setenv("NEURON_RT_VISIBLE_CORES", "0-1", 1);
        set_root();
        CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
        nrt_version_t v;
        CTEST_EXPECT(api.get_version(&v, sizeof(v)) == NRT_SUCCESS);
        CTEST_EXPECT(v.rt_minor == (version == 0 ? 30u : 31u));
        if (version == 1)
            CTEST_EXPECT(strstr(v.rt_detail, "Neuron SDK 2.29.0") != NULL);
        CTEST_CHECK(join_threads(2));
        float data[8];
        for (int i = 0; i < 8; i++)
            data[i] = (float)i;
        request_t r[2];
        for (uint32_t k = 0; k < 2; k++) {
            nrt_tensor_t *t = device_tensor(k, sizeof(data), data);
            request_init(&r[k], k, group, 2, k, 2, t, t); /* in place */
        }
        NRT_STATUS st =
            request_submit(&r[0], NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE, version == 1);
        if (version == 0) {
            CTEST_EXPECT(st == NRT_INVALID);
            nrta_error_tracker_t *t = NULL;
            CTEST_EXPECT(api.error_tracker_create(0, &t) == NRT_SUCCESS && t != NULL);
            api.error_tracker_destroy(t);
        } else {
            CTEST_EXPECT(st == NRT_SUCCESS);
            /* Rank 1 has not come: pending. */
            sleep_ms(20);
            CTEST_EXPECT(r[0].ret == NRT_COLL_PENDING);
            CTEST_EXPECT(request_submit(&r[1], NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE,
                                        true) == NRT_SUCCESS);
            for (uint32_t k = 0; k < 2; k++) {
                CTEST_EXPECT(request_wait(&r[k]) == NRT_SUCCESS);
                float got[8];
                CTEST_EXPECT(api.tensor_read(r[k].out, got, 0, sizeof(got)) == NRT_SUCCESS);
                CTEST_EXPECT(got[3] == 6 && got[7] == 14);
            }
            nrta_error_tracker_t *t = NULL;
            CTEST_EXPECT(api.error_tracker_create(0, &t) == NRT_FAILURE);
        }
        for (uint32_t k = 0; k < 2; k++) {
            api.tensor_free(&r[k].in);
            request_fini(&r[k]);
        }
        api.close();
    }
    /* A runtime before 2.30 has no out-of-NEFF collectives. */
    setenv("NEURON_EMU_RUNTIME_VERSION", "2.29.40.0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_EXPECT(api.cc_global_comm_init(0, 0, 1) == NRT_FAILURE);
    api.close();
    setenv("NEURON_EMU_RUNTIME_VERSION", "3.x", 1);
    CTEST_EXPECT(nrt_test_init(&api) == NRT_INVALID);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* A peer that never takes part: NRT_TIMEOUT after NEURON_EMU_CC_TIMEOUT_MS (not before), and the
 * connection to it is then unusable; a global communicator that never fills up times out too. */
CTEST(Cc, SilentPeerTimesOut)
{
    OPEN_EMULATOR_CC();
    setenv("NEURON_RT_VISIBLE_CORES", "0-1", 1);
    setenv("NEURON_EMU_CC_TIMEOUT_MS", "300", 1);
    set_root();
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    double t0 = now_ms();
    CTEST_EXPECT(api.cc_global_comm_init(0, 0, 2) == NRT_TIMEOUT);
    CTEST_EXPECT(now_ms() - t0 >= 290);
    api.close();
    set_root();
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(join_threads(2));
    static const uint32_t group[] = { 0, 1 };
    float data[4] = { 1, 2, 3, 4 };
    request_t r[2];
    for (uint32_t k = 0; k < 2; k++)
        request_init(&r[k], k, group, 2, k, 2, device_tensor(k, sizeof(data), data),
                     device_tensor(k, sizeof(data), NULL));
    t0 = now_ms();
    CTEST_EXPECT(request_submit(&r[0], NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE, false) ==
                 NRT_SUCCESS);
    CTEST_EXPECT(request_wait(&r[0]) == NRT_TIMEOUT);
    CTEST_EXPECT(now_ms() - t0 >= 290);
    /* Rank 1 comes late: its connection to rank 0 was given up. */
    CTEST_EXPECT(request_submit(&r[1], NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE, false) ==
                 NRT_SUCCESS);
    NRT_STATUS late = request_wait(&r[1]);
    CTEST_EXPECT(late == NRT_FAILURE || late == NRT_TIMEOUT);
    for (uint32_t k = 0; k < 2; k++) {
        api.tensor_free(&r[k].in);
        api.tensor_free(&r[k].out);
        request_fini(&r[k]);
    }
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* A peer process that exits: NRT_FAILURE, not a hang. */
static int departing_child(void *p)
{
    (void)p;
    setenv("NEURON_RT_VISIBLE_CORES", "1", 1);
    if (nrt_test_init(&api) != NRT_SUCCESS || api.cc_global_comm_init(0, 1, 2) != NRT_SUCCESS)
        return 1;
    return 0; /* exits without taking part: its connections close */
}

CTEST(Cc, DepartedPeerFails)
{
    OPEN_CC();
    set_root();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(departing_child(NULL));
    CTEST_CHECK(pid > 0);
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_EXPECT(api.cc_global_comm_init(0, 0, 2) == NRT_SUCCESS);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    CTEST_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    static const uint32_t group[] = { 0, 1 };
    float data[4] = { 1, 2, 3, 4 };
    request_t r;
    request_init(&r, 0, group, 2, 0, 2, device_tensor(0, sizeof(data), data),
                 device_tensor(0, sizeof(data), NULL));
    CTEST_EXPECT(request_submit(&r, NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE, false) ==
                 NRT_SUCCESS);
    CTEST_EXPECT(request_wait(&r) == NRT_FAILURE);
    api.tensor_free(&r.in);
    api.tensor_free(&r.out);
    request_fini(&r);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* The queue holds 64 requests: the next schedule is NRT_QUEUE_FULL and changes nothing (the
 * context can be scheduled once there is room); nrt_close fails what is still queued with
 * NRT_CLOSED, and a new nrt_init starts without a global communicator. */
CTEST(Cc, QueueFullAndClose)
{
    OPEN_EMULATOR_CC();
    setenv("NEURON_EMU_RUNTIME_VERSION", "2.31.24.0", 1); /* status pointers */
    setenv("NEURON_RT_VISIBLE_CORES", "0-1", 1);
    set_root();
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(join_threads(2));
    static const uint32_t group[] = { 0, 1 };
    enum { N = 66 };
    static request_t r[N];
    nrt_tensor_t *in = device_tensor(0, 64, NULL), *out = device_tensor(0, 64, NULL);
    int accepted = 0, full = 0;
    nrt_cc_context_t *ctx = NULL;
    for (int i = 0; i < N; i++) {
        request_init(&r[i], 0, group, 2, 0, 2, in, out);
        CTEST_EXPECT(api.cc_prepare(&r[i].comm, &r[i].in_list, &r[i].out_list, NRT_DTYPE_FLOAT32,
                                    NRT_OP_ADD, NRT_CC_ALLREDUCE, &ctx) == NRT_SUCCESS);
        r[i].v3 = true;
        NRT_STATUS st = api.cc_schedule_v3(&ctx, 0, &r[i].ret, &r[i].seq);
        if (st == NRT_SUCCESS) {
            accepted++;
            CTEST_EXPECT(ctx == NULL);
        } else {
            CTEST_EXPECT(st == NRT_QUEUE_FULL);
            CTEST_EXPECT(ctx != NULL); /* still prepared */
            full++;
        }
    }
    /* The first one may have left the queue for the thread already. */
    CTEST_EXPECT(accepted == 64 || accepted == 65);
    CTEST_EXPECT(full == N - accepted);
    api.close(); /* cancels them */
    for (int i = 0; i < accepted; i++)
        CTEST_EXPECT(r[i].ret == NRT_CLOSED);
    bool done = false;
    CTEST_EXPECT(api.is_completed(r[0].seq, &done) == NRT_CLOSED);
    /* A fresh start: no global communicator until one is built again. */
    set_root();
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_tensor_t *a = device_tensor(0, 64, NULL), *b = device_tensor(0, 64, NULL);
    request_init(&r[0], 0, group, 2, 0, 2, a, b);
    CTEST_EXPECT(api.cc_prepare(&r[0].comm, &r[0].in_list, &r[0].out_list, NRT_DTYPE_FLOAT32,
                                NRT_OP_ADD, NRT_CC_ALLREDUCE, &ctx) == NRT_INVALID);
    CTEST_EXPECT(join_threads(2));
    CTEST_EXPECT(run_and_check(2, group, NRT_CC_ALLREDUCE, NRT_DTYPE_FLOAT32, NRT_OP_ADD, 5, true));
    api.tensor_free(&a);
    api.tensor_free(&b);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* nrt_close while a global communicator is being built ends the wait with NRT_CLOSED. */
static void *closer_main(void *p)
{
    (void)p;
    sleep_ms(200);
    api.close();
    return NULL;
}

CTEST(Cc, CloseCancelsTheRendezvous)
{
    OPEN_EMULATOR_CC();
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    set_root();
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    pthread_t t;
    CTEST_CHECK(pthread_create(&t, NULL, closer_main, NULL) == 0);
    CTEST_EXPECT(api.cc_global_comm_init(0, 0, 2) == NRT_CLOSED);
    pthread_join(t, NULL);
    nrt_test_close(&api);
    return CTEST_PASS;
}
