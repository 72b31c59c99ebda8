/* SPDX-License-Identifier: Apache-2.0 */
/* Test fixture of the host collective engine (see engine_test_util.h). */
#include "hal/tests/comm/engine_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ET_MAX_RANKS     16
#define ET_STORE_ENTRIES 128
#define ET_STORE_VALUE   8192
#define ET_DEADLINE_MS   120000.0

/* ---- a key-value store in shared memory (rendezvous without threads before fork) ---- */

typedef struct et_store {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int count;
    struct {
        char key[128];
        size_t size;
        unsigned char value[ET_STORE_VALUE];
    } entries[ET_STORE_ENTRIES];
} et_store_t;

static void store_lock(et_store_t *s)
{
    if (pthread_mutex_lock(&s->lock) == EOWNERDEAD)
        pthread_mutex_consistent(&s->lock); /* a killed rank held it; the data is intact */
}

static hal_status_t store_set(void *user, const char *key, const void *value, size_t size)
{
    et_store_t *s = user;
    if (strlen(key) >= sizeof(s->entries[0].key) || size > ET_STORE_VALUE)
        return HAL_ERROR_INVALID_ARGUMENT;
    store_lock(s);
    int i = 0;
    while (i < s->count && strcmp(s->entries[i].key, key) != 0)
        i++;
    if (i == ET_STORE_ENTRIES) {
        pthread_mutex_unlock(&s->lock);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    if (i == s->count)
        s->count++;
    strcpy(s->entries[i].key, key);
    memcpy(s->entries[i].value, value, size);
    s->entries[i].size = size;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return HAL_OK;
}

static hal_status_t store_get(void *user, const char *key, void *value, size_t capacity,
                              size_t *size, uint32_t timeout_ms)
{
    et_store_t *s = user;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    store_lock(s);
    for (;;) {
        for (int i = 0; i < s->count; i++) {
            if (strcmp(s->entries[i].key, key) == 0) {
                size_t n = s->entries[i].size;
                memcpy(value, s->entries[i].value, n < capacity ? n : capacity);
                *size = n;
                pthread_mutex_unlock(&s->lock);
                return HAL_OK;
            }
        }
        int e = pthread_cond_timedwait(&s->cond, &s->lock, &deadline);
        if (e == EOWNERDEAD)
            pthread_mutex_consistent(&s->lock);
        else if (e == ETIMEDOUT) {
            pthread_mutex_unlock(&s->lock);
            return HAL_ERROR_TIMEOUT;
        }
    }
}

static et_store_t *store_create(void)
{
    et_store_t *s =
        mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED)
        return NULL;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&s->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    return s;
}

/* ---- IPC over memfd: what the cpu backend's mem_ipc slots will provide ---- */

#define ET_IPC_MAGIC 0x45544950u
#define ET_MAX_BUFS  64
#define ET_MAX_MAPS  1024

typedef struct et_handle {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    uint32_t reserved;
    uint64_t offset;
    uint64_t size;
} et_handle_t;

struct et_ipc {
    hal_engine_ipc_t table;
    struct {
        unsigned char *ptr;
        size_t size;
        int fd; /* -1: plain heap memory */
    } bufs[ET_MAX_BUFS];
    int nbufs;
    struct {
        void *ptr, *base;
        size_t len;
    } maps[ET_MAX_MAPS];
    int nmaps;
};

static hal_status_t ipc_open(void *ctx, const hal_ipc_handle_t *handle, void **ptr)
{
    et_ipc_t *ipc = ctx;
    et_handle_t h;
    memcpy(&h, handle->bytes, sizeof(h));
    if (h.magic != ET_IPC_MAGIC || h.pid == getpid() || ipc->nmaps == ET_MAX_MAPS)
        return HAL_ERROR_INVALID_ARGUMENT;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", h.pid, h.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return HAL_ERROR_NOT_FOUND;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t delta = h.offset % page;
    size_t len = h.size + delta;
    void *base = mmap(NULL, len ? len : page, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                      (off_t)(h.offset - delta));
    close(fd);
    if (base == MAP_FAILED)
        return HAL_ERROR_NOT_FOUND;
    ipc->maps[ipc->nmaps].base = base;
    ipc->maps[ipc->nmaps].len = len ? len : page;
    ipc->maps[ipc->nmaps].ptr = (unsigned char *)base + delta;
    *ptr = ipc->maps[ipc->nmaps++].ptr;
    return HAL_OK;
}

static void ipc_close(void *ctx, void *ptr)
{
    et_ipc_t *ipc = ctx;
    for (int i = 0; i < ipc->nmaps; i++) {
        if (ipc->maps[i].ptr == ptr) {
            munmap(ipc->maps[i].base, ipc->maps[i].len);
            ipc->maps[i] = ipc->maps[--ipc->nmaps];
            return;
        }
    }
    fprintf(stderr, "ipc_close: %p was not opened\n", ptr);
    abort();
}

void *et_alloc(et_rank_t *r, size_t bytes)
{
    et_ipc_t *ipc = r->ipc;
    size_t size = (bytes + 4095) / 4096 * 4096;
    if (!size)
        size = 4096;
    if (ipc->nbufs == ET_MAX_BUFS)
        return NULL;
    int fd = -1;
    void *p;
    if (r->opts->ipc) {
        fd = memfd_create("engine-test", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
            return NULL;
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return NULL;
        }
    } else {
        p = aligned_alloc(4096, size);
        if (!p)
            return NULL;
    }
    ipc->bufs[ipc->nbufs].ptr = p;
    ipc->bufs[ipc->nbufs].size = size;
    ipc->bufs[ipc->nbufs++].fd = fd;
    return p;
}

void et_free(et_rank_t *r, void *ptr)
{
    et_ipc_t *ipc = r->ipc;
    for (int i = 0; i < ipc->nbufs; i++) {
        if (ipc->bufs[i].ptr != ptr)
            continue;
        if (ipc->bufs[i].fd >= 0) {
            munmap(ptr, ipc->bufs[i].size);
            close(ipc->bufs[i].fd);
        } else {
            free(ptr);
        }
        ipc->bufs[i] = ipc->bufs[--ipc->nbufs];
        return;
    }
}

static bool make_handle(const et_rank_t *r, const void *ptr, hal_ipc_handle_t *out)
{
    const et_ipc_t *ipc = r->ipc;
    for (int i = 0; i < ipc->nbufs; i++) {
        const unsigned char *b = ipc->bufs[i].ptr;
        if (ipc->bufs[i].fd >= 0 && (const unsigned char *)ptr >= b &&
            (const unsigned char *)ptr < b + ipc->bufs[i].size) {
            et_handle_t h = { .magic = ET_IPC_MAGIC,
                              .pid = getpid(),
                              .fd = ipc->bufs[i].fd,
                              .offset = (uint64_t)((const unsigned char *)ptr - b),
                              .size =
                                  ipc->bufs[i].size - (size_t)((const unsigned char *)ptr - b) };
            memset(out, 0, sizeof(*out));
            memcpy(out->bytes, &h, sizeof(h));
            return true;
        }
    }
    return false;
}

void et_attach_ipc(et_rank_t *r, hal_engine_op_t *op)
{
    if (!r->opts->ipc)
        return;
    bool ok = true;
    if (op->sendbuf)
        ok = ok && make_handle(r, op->sendbuf, &op->send_ipc);
    if (op->recvbuf)
        ok = ok && make_handle(r, op->recvbuf, &op->recv_ipc);
    op->has_ipc = ok;
}

int et_ipc_open_count(const et_rank_t *r)
{
    return r->ipc->nmaps;
}

/* ---- running a job ---- */

typedef struct et_job {
    const et_opts_t *opts;
    et_body_fn body;
    void *arg;
    hal_unique_id_t id;
    hal_comm_store_t store;
    int *results; /* shared with children */
} et_job_t;

typedef struct et_thread_arg {
    et_job_t *job;
    int rank;
} et_thread_arg_t;

double et_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int et_fail_impl(const et_rank_t *r, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s:%d: rank %d (pid %d): %s\n", file, line, r ? r->rank : -1, (int)getpid(),
            msg);
    return 1;
}

static int rank_main(et_job_t *job, int rank)
{
    const et_opts_t *opts = job->opts;
    et_rank_t r = { .rank = rank, .nranks = opts->nranks, .opts = opts, .arg = job->arg };
    et_ipc_t *ipc = calloc(1, sizeof(*ipc));
    if (!ipc)
        return ET_FAIL(&r, "out of memory");
    ipc->table = (hal_engine_ipc_t){ ipc, ipc_open, ipc_close };
    r.ipc = ipc;
    uint32_t timeout = opts->timeout_ms ? opts->timeout_ms : 20000;
    int ret = 0;
    hal_status_t st =
        hal_bootstrap_connect(&job->id, opts->nranks, rank, &job->store, 30000, &r.boot);
    if (st != HAL_OK) {
        ret = ET_FAIL(&r, "bootstrap connect: %s: %s", hal_status_string(st),
                      hal_last_error_message());
        goto out;
    }
    r.config = (hal_engine_config_t){ .bootstrap = r.boot,
                                      .timeout_ms = timeout,
                                      .ipc = opts->ipc ? &ipc->table : NULL };
    if (!opts->no_engine) {
        st = hal_engine_init(&r.config, &r.comm);
        if (st != HAL_OK) {
            ret =
                ET_FAIL(&r, "engine init: %s: %s", hal_status_string(st), hal_last_error_message());
            goto out_boot;
        }
    }
    ret = job->body(&r);
    if (r.comm)
        hal_engine_destroy(r.comm);
    if (ret == 0 && ipc->nmaps != 0)
        ret = ET_FAIL(&r, "%d IPC mappings left open after destroy", ipc->nmaps);
out_boot:
    hal_bootstrap_destroy(r.boot);
out:
    while (ipc->nbufs)
        et_free(&r, ipc->bufs[0].ptr);
    free(ipc);
    return ret;
}

static void *thread_main(void *p)
{
    et_thread_arg_t *a = p;
    a->job->results[a->rank] = rank_main(a->job, a->rank);
    return NULL;
}

/* Runs the ranks r with r % stride == first as threads of this process. */
static int run_threads(et_job_t *job, int first, int stride)
{
    pthread_t threads[ET_MAX_RANKS];
    et_thread_arg_t args[ET_MAX_RANKS];
    int started = 0;
    for (int r = first; r < job->opts->nranks; r += stride) {
        args[started] = (et_thread_arg_t){ job, r };
        if (pthread_create(&threads[started], NULL, thread_main, &args[started]) != 0)
            return 1;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    return 0;
}

/* Waits for the children until the deadline; kills what is left. */
static void reap(pid_t *pids, int n, int *status_out)
{
    double deadline = et_now_ms() + ET_DEADLINE_MS;
    int left = n;
    for (int i = 0; i < n; i++)
        status_out[i] = -1;
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int i = 0; i < n; i++) {
                if (pids[i] == pid) {
                    status_out[i] = WIFEXITED(status)     ? WEXITSTATUS(status)
                                    : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                                          : -1;
                    pids[i] = 0;
                    left--;
                }
            }
            continue;
        }
        if (et_now_ms() > deadline) {
            for (int i = 0; i < n; i++) {
                if (pids[i] > 0) {
                    fprintf(stderr, "child %d (pid %d) did not finish: killing it\n", i,
                            (int)pids[i]);
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], NULL, 0);
                    pids[i] = 0;
                    left--;
                }
            }
            break;
        }
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
}

static int shm_leftovers(const uint8_t *nonce)
{
    char hex[2 * HAL_BOOTSTRAP_NONCE_BYTES + 1];
    for (int i = 0; i < HAL_BOOTSTRAP_NONCE_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", nonce[i]);
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strstr(e->d_name, hex)) {
            fprintf(stderr, "shared memory left behind: /dev/shm/%s\n", e->d_name);
            found++;
        }
    }
    closedir(d);
    return found;
}

int et_run(const et_opts_t *opts, et_body_fn body, void *arg, int *results)
{
    int n = opts->nranks;
    if (n < 1 || n > ET_MAX_RANKS)
        return 1;
    et_store_t *store = store_create();
    int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!store || shared == MAP_FAILED)
        return 1;
    et_job_t job = { .opts = opts, .body = body, .arg = arg, .results = shared };
    job.store = (hal_comm_store_t){ sizeof(hal_comm_store_t), store, store_set, store_get };
    for (int i = 0; i < n; i++)
        shared[i] = -1;
    if (hal_bootstrap_new_id(HAL_COMM_ID_FLAG_STORE, 30000, &job.id) != HAL_OK) {
        fprintf(stderr, "new id: %s\n", hal_last_error_message());
        return 1;
    }
    uint8_t nonce[HAL_BOOTSTRAP_NONCE_BYTES];
    hal_bootstrap_parse_id(&job.id, nonce);
    if (opts->no_shm)
        setenv("HAL_COMM_SHM_DISABLE", "1", 1);
    int ret = 0;
    if (opts->mode == ET_THREADS) {
        ret = run_threads(&job, 0, 1);
    } else {
        int nproc = opts->mode == ET_PROCESSES ? n : (n < 2 ? n : 2);
        pid_t pids[ET_MAX_RANKS];
        int status[ET_MAX_RANKS];
        fflush(NULL);
        for (int p = 0; p < nproc; p++) {
            pids[p] = fork();
            if (pids[p] == 0) {
                int code;
                if (opts->mode == ET_PROCESSES) {
                    code = rank_main(&job, p);
                    shared[p] = code;
                } else {
                    code = run_threads(&job, p, nproc);
                }
                fflush(NULL);
                _exit(code > 127 ? 127 : code);
            }
            if (pids[p] < 0)
                return 1;
        }
        reap(pids, nproc, status);
        for (int p = 0; p < nproc; p++) {
            if (opts->mode == ET_PROCESSES && status[p] != 0 && shared[p] <= 0)
                shared[p] = status[p]; /* killed, or died before reporting */
            if (opts->mode == ET_MIXED && status[p] != 0) {
                for (int r = p; r < n; r += nproc)
                    if (shared[r] <= 0)
                        shared[r] = status[p];
            }
        }
    }
    if (opts->no_shm)
        unsetenv("HAL_COMM_SHM_DISABLE");
    ret = ret ? ET_RANK_FAILED : 0;
    for (int i = 0; i < n; i++) {
        if (results)
            results[i] = shared[i];
        if (shared[i] != 0)
            ret |= ET_RANK_FAILED;
    }
    if (shm_leftovers(nonce))
        ret |= ET_SHM_LEFT;
    munmap(shared, 4096);
    munmap(store, sizeof(*store));
    return ret;
}

/* ---- element codecs ---- */

static const size_t sizes[HAL_DTYPE_COUNT] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };

size_t et_dtype_size(hal_dtype_t dtype)
{
    return sizes[dtype];
}

/* Narrow float formats: exponent bits, mantissa bits, bias. */
typedef struct fmt {
    int e, m, bias;
    bool e4m3;
} fmt_t;

static bool narrow(hal_dtype_t dtype, fmt_t *f)
{
    switch (dtype) {
    case HAL_DTYPE_F16:
        *f = (fmt_t){ 5, 10, 15, false };
        return true;
    case HAL_DTYPE_BF16:
        *f = (fmt_t){ 8, 7, 127, false };
        return true;
    case HAL_DTYPE_F8_E4M3:
        *f = (fmt_t){ 4, 3, 7, true };
        return true;
    case HAL_DTYPE_F8_E5M2:
        *f = (fmt_t){ 5, 2, 15, false };
        return true;
    default:
        return false;
    }
}

static uint32_t narrow_encode(const fmt_t *f, double v)
{
    uint32_t sign = signbit(v) ? 1u : 0u;
    double a = fabs(v);
    uint32_t bits = sign << (f->e + f->m);
    if (a == 0)
        return bits;
    int e;
    double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    int biased = e - 1 + f->bias;
    if (biased <= 0) /* subnormal */
        return bits | (uint32_t)lround(a / ldexp(1.0, 1 - f->bias - f->m));
    uint32_t mant = (uint32_t)lround((m * 2 - 1) * ldexp(1.0, f->m));
    return bits | ((uint32_t)biased << f->m) | mant;
}

static double narrow_decode(const fmt_t *f, uint32_t bits)
{
    uint32_t sign = (bits >> (f->e + f->m)) & 1u;
    uint32_t e = (bits >> f->m) & ((1u << f->e) - 1);
    uint32_t m = bits & ((1u << f->m) - 1);
    double v;
    if (f->e4m3 && e == 15 && m == 7)
        v = NAN;
    else if (!f->e4m3 && e == (1u << f->e) - 1)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = m * ldexp(1.0, 1 - f->bias - f->m);
    else
        v = (1 + m * ldexp(1.0, -f->m)) * ldexp(1.0, (int)e - f->bias);
    return sign ? -v : v;
}

void et_encode(hal_dtype_t dtype, double v, void *dst)
{
    fmt_t f;
    if (narrow(dtype, &f)) {
        uint32_t b = narrow_encode(&f, v);
        if (sizes[dtype] == 1) {
            uint8_t x = (uint8_t)b;
            memcpy(dst, &x, 1);
        } else {
            uint16_t x = (uint16_t)b;
            memcpy(dst, &x, 2);
        }
        return;
    }
    switch (dtype) {
#define ET_ENC(D, T)                \
    case D: {                       \
        T x = (T)v;                 \
        memcpy(dst, &x, sizeof(x)); \
        return;                     \
    }
        ET_ENC(HAL_DTYPE_I8, int8_t)
        ET_ENC(HAL_DTYPE_U8, uint8_t)
        ET_ENC(HAL_DTYPE_I32, int32_t)
        ET_ENC(HAL_DTYPE_U32, uint32_t)
        ET_ENC(HAL_DTYPE_I64, int64_t)
        ET_ENC(HAL_DTYPE_U64, uint64_t)
        ET_ENC(HAL_DTYPE_F32, float)
        ET_ENC(HAL_DTYPE_F64, double)
#undef ET_ENC
    default:
        return;
    }
}

double et_decode(hal_dtype_t dtype, const void *src)
{
    fmt_t f;
    if (narrow(dtype, &f)) {
        if (sizes[dtype] == 1) {
            uint8_t x;
            memcpy(&x, src, 1);
            return narrow_decode(&f, x);
        }
        uint16_t x;
        memcpy(&x, src, 2);
        return narrow_decode(&f, x);
    }
    switch (dtype) {
#define ET_DEC(D, T)                \
    case D: {                       \
        T x;                        \
        memcpy(&x, src, sizeof(x)); \
        return (double)x;           \
    }
        ET_DEC(HAL_DTYPE_I8, int8_t)
        ET_DEC(HAL_DTYPE_U8, uint8_t)
        ET_DEC(HAL_DTYPE_I32, int32_t)
        ET_DEC(HAL_DTYPE_U32, uint32_t)
        ET_DEC(HAL_DTYPE_I64, int64_t)
        ET_DEC(HAL_DTYPE_U64, uint64_t)
        ET_DEC(HAL_DTYPE_F32, float)
        ET_DEC(HAL_DTYPE_F64, double)
#undef ET_DEC
    default:
        return NAN;
    }
}

double et_ulp(hal_dtype_t dtype, double v)
{
    fmt_t f;
    int m, bias;
    if (narrow(dtype, &f)) {
        m = f.m;
        bias = f.bias;
    } else if (dtype == HAL_DTYPE_F32) {
        m = 23;
        bias = 127;
    } else if (dtype == HAL_DTYPE_F64) {
        m = 52;
        bias = 1023;
    } else {
        return 1;
    }
    int e = v == 0 ? 1 - bias : (int)floor(log2(fabs(v)));
    if (e < 1 - bias)
        e = 1 - bias;
    return ldexp(1.0, e - m);
}
