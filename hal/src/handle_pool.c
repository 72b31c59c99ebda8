/* SPDX-License-Identifier: Apache-2.0 */
/* Memory for handles. A destroyed handle keeps its memory, marked dead, in a FIFO quarantine
 * before the memory is reused, so that a stale handle reads a dead magic number instead of freed
 * memory: using it yields HAL_ERROR_INVALID_HANDLE rather than a crash. With the validation
 * layer, released handles are never reused, which makes the detection certain.
 * Handle memory is never returned to malloc; it stays reachable from the pool. */
#include <stdlib.h>
#include <string.h>

#include "hal/src/core.h"

/* Destroyed handles that must be released before the oldest one is reused. */
#define HAL_QUARANTINE 4096

typedef struct pooled {
    struct pooled *next;
} pooled_t;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pooled_t *quarantine_head, *quarantine_tail;
static size_t quarantine_len;
static pooled_t *free_list; /* left the quarantine; ready for reuse */
/* Keeps never-reused handles reachable so that leak checkers see no leak. */
static pooled_t *kept_forever;

void *hal_handle_alloc(size_t size)
{
    if (size > HAL_HANDLE_MAX_SIZE)
        return NULL;
    pthread_mutex_lock(&pool_lock);
    pooled_t *link = free_list;
    if (link)
        free_list = link->next;
    pthread_mutex_unlock(&pool_lock);
    void *block = link ? (char *)link - sizeof(hal_object_t) : malloc(HAL_HANDLE_MAX_SIZE);
    if (block)
        memset(block, 0, size);
    return block;
}

void hal_handle_release(void *handle, bool keep_forever)
{
    hal_object_t *obj = handle;
    /* Only the header stays meaningful: the dead magic and what the handle was. */
    obj->dead_type = obj->magic;
    obj->magic = HAL_MAGIC_DEAD;
    /* The list link lives after the header so the dead magic survives in every state. */
    pooled_t *p = (pooled_t *)((char *)handle + sizeof(hal_object_t));
    _Static_assert(sizeof(hal_object_t) + sizeof(pooled_t) <= HAL_HANDLE_MAX_SIZE, "pool link");
    pthread_mutex_lock(&pool_lock);
    p->next = NULL;
    if (keep_forever) {
        p->next = kept_forever;
        kept_forever = p;
        pthread_mutex_unlock(&pool_lock);
        return;
    }
    if (quarantine_tail)
        quarantine_tail->next = p;
    else
        quarantine_head = p;
    quarantine_tail = p;
    if (++quarantine_len > HAL_QUARANTINE) {
        pooled_t *oldest = quarantine_head;
        quarantine_head = oldest->next;
        if (!quarantine_head)
            quarantine_tail = NULL;
        quarantine_len--;
        oldest->next = free_list;
        free_list = oldest;
    }
    pthread_mutex_unlock(&pool_lock);
}

void hal_handle_pool_reset_after_fork(void)
{
    pthread_mutex_init(&pool_lock, NULL);
}
