/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator, out-of-NEFF collectives (emu_cc_internal.h has the overview): the completion
 * side of the async API, nrta_is_completed and the error trackers of async API 2. */
#include <stdlib.h>

#include "hal_backends/trainium/emulator/emu_cc_internal.h"

#define CC_TRACKER_MAGIC 0x4e434554u /* "NCET" */

/* ---- Completion ---------------------------------------------------------------------------- */

/* Whether request seq completed (a queue completes its requests in order). */
NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_is_completed(nrta_seq_t seq, bool *is_completed)
{
    static const char api[] = "nrta_is_completed";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    uint64_t xu = NRTA_SEQ_GET_XU_ID(seq), num = NRTA_SEQ_GET_SEQ_NUM(seq);
    uint32_t vnc = (uint32_t)(xu >> 8);
    if (st == NRT_SUCCESS && is_completed == NULL) {
        EMU_ERR(api, "is_completed is NULL");
        st = NRT_INVALID;
    }
    if (st == NRT_SUCCESS) {
        pthread_mutex_lock(&cc.lock);
        bool known = ((xu >> 4) & 0xf) == NRTA_XU_COLLECTIVES && (xu & 0xf) == 0 &&
                     vnc < emu_rt.vnc_count && num != 0 && num <= cc.m[vnc].issued;
        pthread_mutex_unlock(&cc.lock);
        if (!known) {
            EMU_ERR(api, "0x%llx is not a sequence number this runtime issued",
                    (unsigned long long)seq);
            st = NRT_INVALID;
        } else {
            *is_completed = atomic_load_explicit(&cc.m[vnc].done, memory_order_acquire) >= num;
        }
    }
    emu_leave();
    return st;
}

/* ---- Error trackers (async API 2) ---------------------------------------------------------- */

/* Async API 2: a tracker of core lnc_idx's failed requests. Gone in async API 3. */
NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_error_tracker_create(uint32_t lnc_idx,
                                                           nrta_error_tracker_t **error_tracker)
{
    static const char api[] = "nrta_error_tracker_create";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    st = cc_available(api);
    if (st == NRT_SUCCESS && emu_version_at_least(2, 31)) {
        EMU_ERR(api, "error trackers were removed in async API 3.0 (libnrt 2.31): pass an "
                     "NRT_STATUS * to the scheduling calls");
        st = NRT_FAILURE;
    }
    if (st == NRT_SUCCESS && (error_tracker == NULL || lnc_idx >= emu_rt.vnc_count)) {
        EMU_ERR(api, "error_tracker is NULL or lnc_idx %u is not visible", lnc_idx);
        st = NRT_INVALID;
    }
    struct nrta_error_tracker *t = st == NRT_SUCCESS ? calloc(1, sizeof(*t)) : NULL;
    if (st == NRT_SUCCESS && t == NULL)
        st = NRT_RESOURCE;
    if (st == NRT_SUCCESS) {
        t->magic = CC_TRACKER_MAGIC;
        t->lnc = lnc_idx;
        pthread_mutex_init(&t->lock, NULL);
        pthread_mutex_lock(&cc.lock);
        t->next = cc.trackers;
        cc.trackers = t;
        pthread_mutex_unlock(&cc.lock);
        *error_tracker = t;
    }
    emu_leave();
    return st;
}

/* Whether t is in cc.trackers. Caller holds cc.lock. */
bool cc_tracker_live(const struct nrta_error_tracker *t)
{
    for (const struct nrta_error_tracker *p = cc.trackers; p != NULL; p = p->next)
        if (p == t)
            return true;
    return false;
}

/* Frees a tracker already unlinked from cc.trackers. */
void cc_tracker_free(struct nrta_error_tracker *t)
{
    pthread_mutex_destroy(&t->lock);
    free(t->errors);
    t->magic = 0;
    free(t);
}

/* Unlinks and frees a tracker; an unknown one is logged and left alone. */
NRT_EMU_EXPORT_RECENT void nrta_error_tracker_destroy(nrta_error_tracker_t *error_tracker)
{
    if (error_tracker == NULL)
        return;
    pthread_mutex_lock(&cc.lock);
    bool found = false;
    for (struct nrta_error_tracker **p = &cc.trackers; *p != NULL; p = &(*p)->next) {
        if (*p == error_tracker) {
            *p = error_tracker->next;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&cc.lock);
    if (found)
        cc_tracker_free(error_tracker);
    else
        EMU_ERR("nrta_error_tracker_destroy",
                "%p is not a live error tracker (destroyed already, or freed by nrt_close)",
                (void *)error_tracker);
}

/* The failed requests recorded on a tracker so far, in completion order. */
NRT_EMU_EXPORT_RECENT NRT_STATUS nrta_error_tracker_get_list(nrta_error_tracker_t *error_tracker,
                                                             const nrta_error_t **list,
                                                             size_t *error_count)
{
    static const char api[] = "nrta_error_tracker_get_list";
    NRT_STATUS st = emu_enter(api);
    if (st != NRT_SUCCESS)
        return st;
    pthread_mutex_lock(&cc.lock);
    bool live = error_tracker != NULL && cc_tracker_live(error_tracker);
    pthread_mutex_unlock(&cc.lock);
    if (!live || list == NULL || error_count == NULL) {
        EMU_ERR(api, "not a live error tracker, or list / error_count NULL");
        st = NRT_INVALID;
    } else {
        /* The list stays valid until the next failure is recorded on the tracker. */
        pthread_mutex_lock(&error_tracker->lock);
        *list = error_tracker->errors;
        *error_count = error_tracker->count;
        pthread_mutex_unlock(&error_tracker->lock);
    }
    emu_leave();
    return st;
}

/* Appends a failed request to a tracker, growing its list (a failure to grow drops it). */
void cc_tracker_record(struct nrta_error_tracker *t, nrta_seq_t seq, NRT_STATUS status)
{
    pthread_mutex_lock(&t->lock);
    if (t->count == t->capacity) {
        size_t cap = t->capacity ? t->capacity * 2 : 16;
        nrta_error_t *grown = realloc(t->errors, cap * sizeof(*grown));
        if (grown == NULL) {
            pthread_mutex_unlock(&t->lock);
            return;
        }
        t->errors = grown;
        t->capacity = cap;
    }
    t->errors[t->count++] = (nrta_error_t){ .seq_id = seq, .error_code = (uint64_t)status };
    pthread_mutex_unlock(&t->lock);
}
