/* SPDX-License-Identifier: Apache-2.0 */
/* What a forked child makes of the parent's HAL objects: none of them can work there (the
 * backends' threads were not forked), so each is marked HAL_MAGIC_FORKED and every call given
 * one fails its handle check with HAL_ERROR_INVALID_HANDLE, naming fork(). Their memory is
 * never freed in the child: the parent's state is only copied, not owned. */
#include "hal/src/core.h"

static void mark(hal_object_t *obj)
{
    if (obj->magic == HAL_MAGIC_DEAD || obj->magic == HAL_MAGIC_FORKED)
        return;
    obj->dead_type = obj->magic;
    obj->magic = HAL_MAGIC_FORKED;
}

static void mark_list(hal_live_link_t *sentinel)
{
    for (hal_live_link_t *l = sentinel->next; l != sentinel; l = l->next) {
        if (!l->owner)
            continue;
        if (l->owner->magic == HAL_MAGIC_PROGRAM) {
            struct hal_program_s *p = (struct hal_program_s *)l->owner;
            for (struct hal_kernel_s *k = p->kernels; k; k = k->next)
                mark(&k->obj);
        }
        mark(l->owner);
    }
}

void hal_forget_objects_after_fork(struct hal_backend_s *open_backends)
{
    /* Only the forking thread exists in the child, so no lock is taken (another thread may have
     * held one at the fork). */
    for (struct hal_backend_s *b = open_backends; b; b = b->next_open) {
        for (uint32_t i = 0; i < b->device_count; i++) {
            struct hal_device_s *d = b->devices ? b->devices[i] : NULL;
            if (!d)
                continue;
            mark_list(&d->streams);
            mark_list(&d->events);
            mark_list(&d->comms);
            mark_list(&d->programs);
            if (d->default_stream)
                mark(&d->default_stream->obj);
            mark(&d->obj);
        }
        mark(&b->obj);
    }
}
