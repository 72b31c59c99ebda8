/* SPDX-License-Identifier: Apache-2.0 */
/* The slot registry (the list itself is generated from hal/abi/slots.toml: slots.h): names and
 * flags for the layers, and the checks the loader makes of a backend's table against it. */
#include <stddef.h>
#include <stdint.h>

#include "hal/hal_backend_abi.h"
#include "hal/src/slots.h"
#include "hal/src/slots_check.h"

static const struct {
    const char *name;
    uint32_t flags;
} slot_info[HAL_SLOT_COUNT] = {
#define HAL_SLOT_INFO(name, minor, required, flags, cap) [HAL_SLOT_##name] = { #name, flags },
    HAL_SLOTS(HAL_SLOT_INFO)
#undef HAL_SLOT_INFO
};

const char *hal_slot_name(hal_slot_t slot)
{
    return (unsigned)slot < HAL_SLOT_COUNT ? slot_info[slot].name : "unknown";
}

uint32_t hal_slot_flags(hal_slot_t slot)
{
    return (unsigned)slot < HAL_SLOT_COUNT ? slot_info[slot].flags : 0;
}

#define SLOT_END(name) (offsetof(hal_backend_ops_t, name) + sizeof(((hal_backend_ops_t *)0)->name))

size_t hal_slots_table_size(uint32_t minor)
{
    size_t size = offsetof(hal_backend_ops_t, init);
#define HAL_SLOT_SIZE(name, since, required, flags, cap) \
    if ((since) < minor + 1u && SLOT_END(name) > size)   \
        size = SLOT_END(name);
    HAL_SLOTS(HAL_SLOT_SIZE)
#undef HAL_SLOT_SIZE
    return size;
}

const char *hal_slots_missing_required(const hal_backend_ops_t *table, uint32_t minor,
                                       uint32_t *since)
{
#define HAL_SLOT_REQUIRED(name, since_minor, required, flags, cap)         \
    if ((required) && (since_minor) < minor + 1u && table->name == NULL) { \
        *since = (since_minor);                                            \
        return #name;                                                      \
    }
    HAL_SLOTS(HAL_SLOT_REQUIRED)
#undef HAL_SLOT_REQUIRED
    return NULL;
}

const char *hal_slots_missing_for_capability(const hal_backend_ops_t *table, uint64_t capabilities,
                                             const char **capability)
{
#define HAL_SLOT_CAPABILITY(name, since, required, flags, cap)                                  \
    if ((uint64_t)(cap) != 0 && (capabilities & (uint64_t)(cap)) != 0 && table->name == NULL) { \
        *capability = #cap;                                                                     \
        return #name;                                                                           \
    }
    HAL_SLOTS(HAL_SLOT_CAPABILITY)
#undef HAL_SLOT_CAPABILITY
    return NULL;
}
