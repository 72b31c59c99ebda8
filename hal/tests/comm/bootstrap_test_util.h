/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the bootstrap tests: ranks run as threads, an in-process key-value store standing in
 * for torch.distributed's, and the internal entry points the tests reach past bootstrap.h. */
#ifndef HAL_TESTS_COMM_BOOTSTRAP_TEST_UTIL_H
#define HAL_TESTS_COMM_BOOTSTRAP_TEST_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/hal.h"
#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "tools/ctest/ctest.h"

/* Every job in these tests gives up after this long. Checks never bound how late a failure
 * comes (a loaded machine decides that); they check the status and that a timeout did not
 * strike before its time. */
#define TEST_TIMEOUT_MS 2000

static inline int64_t test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void test_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* ---- ranks as threads ---- */

typedef struct test_rank test_rank_t;
typedef int (*test_body_fn)(test_rank_t *r, hal_bootstrap_t *b);

struct test_rank {
    /* in */
    hal_unique_id_t id;
    int nranks, rank;
    const hal_comm_store_t *store;
    uint32_t timeout_ms;
    test_body_fn body; /* runs after a successful connect; returns CTEST_PASS or CTEST_FAIL */
    void *ctx;
    /* out */
    hal_status_t status; /* of hal_bootstrap_connect */
    char message[1024];  /* hal_last_error_message() after a failed connect */
    int result;          /* of body */
    int64_t elapsed_ms;  /* of connect */
    atomic_bool finished;
    pthread_t thread;
};

static void *test_rank_main(void *arg)
{
    test_rank_t *r = arg;
    hal_bootstrap_t *b = NULL;
    int64_t t0 = test_now_ms();
    r->status = hal_bootstrap_connect(&r->id, r->nranks, r->rank, r->store,
                                      r->timeout_ms ? r->timeout_ms : TEST_TIMEOUT_MS, &b);
    r->elapsed_ms = test_now_ms() - t0;
    if (r->status != HAL_OK)
        snprintf(r->message, sizeof(r->message), "%s", hal_last_error_message());
    r->result = CTEST_PASS;
    if (r->status == HAL_OK && r->body != NULL)
        r->result = r->body(r, b);
    hal_bootstrap_destroy(b);
    atomic_store(&r->finished, true);
    return NULL;
}

static inline void test_rank_init(test_rank_t *r, const hal_unique_id_t *id, int nranks, int rank,
                                  test_body_fn body)
{
    memset(r, 0, sizeof(*r));
    r->id = *id;
    r->nranks = nranks;
    r->rank = rank;
    r->body = body;
    atomic_init(&r->finished, false);
}

static inline void test_rank_start(test_rank_t *r)
{
    pthread_create(&r->thread, NULL, test_rank_main, r);
}

static inline void test_rank_join(test_rank_t *r)
{
    pthread_join(r->thread, NULL);
    if (r->status != HAL_OK)
        fprintf(stderr, "rank %d: %s: %s\n", r->rank, hal_status_string(r->status), r->message);
}

/* Runs n ranks of one job (ranks 0..n-1 of n) as threads, each running body after connect. */
static inline void test_run_job(test_rank_t *ranks, int n, const hal_unique_id_t *id,
                                test_body_fn body, void *ctx, const hal_comm_store_t *store)
{
    for (int i = 0; i < n; i++) {
        test_rank_init(&ranks[i], id, n, i, body);
        ranks[i].ctx = ctx;
        ranks[i].store = store;
    }
    for (int i = 0; i < n; i++)
        test_rank_start(&ranks[i]);
    for (int i = 0; i < n; i++)
        test_rank_join(&ranks[i]);
}

/* ---- an in-process store (a mutex, a condition and a list) ---- */

typedef struct test_kv {
    struct test_kv *next;
    char *key;
    size_t size;
    uint8_t value[];
} test_kv_t;

typedef struct test_store {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    test_kv_t *head;
    atomic_int sets, gets;
    hal_comm_store_t api;
} test_store_t;

static test_kv_t *test_store_find(test_store_t *s, const char *key)
{
    for (test_kv_t *kv = s->head; kv != NULL; kv = kv->next)
        if (strcmp(kv->key, key) == 0)
            return kv;
    return NULL;
}

static hal_status_t test_store_set(void *user, const char *key, const void *value, size_t size)
{
    test_store_t *s = user;
    test_kv_t *kv = malloc(sizeof(*kv) + size);
    if (kv == NULL)
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    kv->key = strdup(key);
    kv->size = size;
    memcpy(kv->value, value, size);
    atomic_fetch_add(&s->sets, 1);
    pthread_mutex_lock(&s->mu);
    /* Replace: the newest value wins, as in torch.distributed's stores. */
    for (test_kv_t **pp = &s->head; *pp != NULL; pp = &(*pp)->next) {
        if (strcmp((*pp)->key, key) == 0) {
            test_kv_t *old = *pp;
            *pp = old->next;
            free(old->key);
            free(old);
            break;
        }
    }
    kv->next = s->head;
    s->head = kv;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return HAL_OK;
}

static hal_status_t test_store_get(void *user, const char *key, void *value, size_t capacity,
                                   size_t *size, uint32_t timeout_ms)
{
    test_store_t *s = user;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    atomic_fetch_add(&s->gets, 1);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        test_kv_t *kv = test_store_find(s, key);
        if (kv != NULL) {
            *size = kv->size;
            memcpy(value, kv->value, kv->size < capacity ? kv->size : capacity);
            pthread_mutex_unlock(&s->mu);
            return HAL_OK;
        }
        if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) != 0 && test_store_find(s, key) == NULL)
            break;
    }
    pthread_mutex_unlock(&s->mu);
    return HAL_ERROR_TIMEOUT;
}

static inline void test_store_init(test_store_t *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->api.struct_size = sizeof(s->api);
    s->api.user_data = s;
    s->api.set = test_store_set;
    s->api.get = test_store_get;
}

static inline void test_store_destroy(test_store_t *s)
{
    for (test_kv_t *kv = s->head, *next; kv != NULL; kv = next) {
        next = kv->next;
        free(kv->key);
        free(kv);
    }
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

#endif /* HAL_TESTS_COMM_BOOTSTRAP_TEST_UTIL_H */
