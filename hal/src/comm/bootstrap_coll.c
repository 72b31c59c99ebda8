/* SPDX-License-Identifier: Apache-2.0 */
/* The bootstrap's collective helpers over its connections: allgather (ring), broadcast (binomial
 * tree) and barrier (dissemination). All ranks call them in the same order. */
#include <string.h>

#include "hal/src/comm/bootstrap.h"
#include "hal/src/comm/bootstrap_internal.h"
#include "hal/src/service.h"

static hal_status_t bs_exchange(hal_bootstrap_t *b, int to, const void *sbuf, int from, void *rbuf,
                                size_t size, uint32_t tag, int64_t deadline, const char *call)
{
    bs_xfer_t x[2];
    bs_xfer_init(&x[0], to, true, BS_FRAME_COLL, tag, sbuf, NULL, size);
    bs_xfer_init(&x[1], from, false, BS_FRAME_COLL, tag, NULL, rbuf, size);
    return bs_xfer_run(b, x, 2, deadline, call);
}

/* Ring allgather: n - 1 steps, each sending one block to the next rank while receiving one from the
 * previous; every rank keeps only two connections. */
hal_status_t bs_allgather(hal_bootstrap_t *b, const void *mine, size_t size, void *out,
                          const char *call)
{
    int n = b->nranks, me = b->rank;
    uint8_t *o = out;
    if (size > 0 && (const uint8_t *)mine != o + (size_t)me * size)
        memmove(o + (size_t)me * size, mine, size);
    int64_t deadline = bs_now_ms() + b->timeout_ms;
    for (int s = 0; s < n - 1; s++) {
        int sb = (me - s + n) % n, rb = (me - s - 1 + n) % n;
        HAL_CHECK(bs_exchange(b, (me + 1) % n, o + (size_t)sb * size, (me - 1 + n) % n,
                              o + (size_t)rb * size, size, BS_TAG_ALLGATHER, deadline, call));
    }
    return HAL_OK;
}

/* out[r * size ...] = rank r's `mine`, on every rank (mine may alias out's own block). Returns
 * HAL_OK or an error as hal_bootstrap_send (INVALID_ARGUMENT also when ranks pass different sizes).
 * Thread safety: one collective helper at a time per bootstrap. */
hal_status_t hal_bootstrap_allgather(hal_bootstrap_t *b, const void *mine, size_t size, void *out)
{
    const char *call = "bootstrap allgather";
    HAL_CHECK(bs_check_message(b, mine, size, call));
    HAL_CHECK(bs_check_message(b, out, size, call));
    return bs_allgather(b, mine, size, out, call);
}

/* Binomial tree from root: log2(nranks) rounds; a rank receives before it sends, so no cycle of
 * blocked sends can form. Returns as hal_bootstrap_allgather (INVALID_ARGUMENT also for a root out
 * of range). Thread safety: one collective helper at a time per bootstrap. */
hal_status_t hal_bootstrap_broadcast(hal_bootstrap_t *b, void *data, size_t size, int root)
{
    const char *call = "bootstrap broadcast";
    HAL_CHECK(bs_check_message(b, data, size, call));
    if (root < 0 || root >= b->nranks)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "root %d is not in 0..%d", root,
                         b->nranks - 1);
    int n = b->nranks, vr = (b->rank - root + n) % n, mask = 1;
    int64_t deadline = bs_now_ms() + b->timeout_ms;
    bs_xfer_t x;
    while (mask < n) {
        if (vr & mask) {
            bs_xfer_init(&x, (vr - mask + root) % n, false, BS_FRAME_COLL, BS_TAG_BROADCAST, NULL,
                         data, size);
            HAL_CHECK(bs_xfer_run(b, &x, 1, deadline, call));
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < n) {
            bs_xfer_init(&x, (vr + mask + root) % n, true, BS_FRAME_COLL, BS_TAG_BROADCAST, data,
                         NULL, size);
            HAL_CHECK(bs_xfer_run(b, &x, 1, deadline, call));
        }
    }
    return HAL_OK;
}

/* Dissemination barrier: ceil(log2(nranks)) rounds of empty messages to rank + 2^k. Returns as
 * hal_bootstrap_allgather. Thread safety: one collective helper at a time per bootstrap. */
hal_status_t hal_bootstrap_barrier(hal_bootstrap_t *b)
{
    const char *call = "bootstrap barrier";
    HAL_CHECK(bs_check_message(b, NULL, 0, call));
    int n = b->nranks, me = b->rank;
    int64_t deadline = bs_now_ms() + b->timeout_ms;
    for (int k = 1; k < n; k <<= 1)
        HAL_CHECK(bs_exchange(b, (me + k) % n, NULL, (me - k + n) % n, NULL, 0, BS_TAG_BARRIER,
                              deadline, call));
    return HAL_OK;
}
