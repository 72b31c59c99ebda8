/* SPDX-License-Identifier: Apache-2.0 */
/* Intrusive circular lists of the live streams and events of a device, so that closing a
 * backend can find and destroy what the application left behind. */
#include "hal/src/core.h"

void hal_live_init(hal_live_link_t *sentinel)
{
    sentinel->prev = sentinel->next = sentinel;
}

void hal_live_insert(hal_live_link_t *sentinel, hal_live_link_t *link, hal_object_t *owner)
{
    link->owner = owner;
    link->next = sentinel->next;
    link->prev = sentinel;
    sentinel->next->prev = link;
    sentinel->next = link;
}

void hal_live_remove(hal_live_link_t *link)
{
    link->prev->next = link->next;
    link->next->prev = link->prev;
    link->prev = link->next = link;
}
