/* SPDX-License-Identifier: Apache-2.0 */
/* A backend for the loader's tests: the template backend's table with one slot set to NULL, the
 * slot HAL_TEST_NULL_SLOT names. HAL_TEST_TEMPLATE is the template library's path. The template
 * library stays loaded: the copied table points into it. HAL_TEST_NODE_POSITION="F,C" makes
 * device i report node position F + i of C devices. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/hal_backend_abi.h"
#include "hal/src/slots.h"

static hal_backend_ops_t table;
static hal_status_t (*template_get_properties)(void *device, hal_device_properties_t *props);

static hal_status_t get_properties_at_node_position(void *device, hal_device_properties_t *props)
{
    hal_status_t st = template_get_properties(device, props);
    unsigned first = 0, count = 0;
    const char *position = getenv("HAL_TEST_NODE_POSITION");
    if (st == HAL_OK && position && sscanf(position, "%u,%u", &first, &count) == 2) {
        props->node_index = first + props->index;
        props->node_device_count = count;
    }
    return st;
}

HAL_BACKEND_EXPORT hal_status_t hal_backend_get_ops(uint32_t host_api_version,
                                                    const hal_backend_ops_t **ops)
{
    const char *path = getenv("HAL_TEST_TEMPLATE");
    void *dl = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    hal_backend_entry_fn entry =
        dl ? (hal_backend_entry_fn)dlsym(dl, HAL_BACKEND_ENTRY_SYMBOL) : NULL;
    const hal_backend_ops_t *template_ops = NULL;
    if (!entry || entry(host_api_version, &template_ops) != HAL_OK)
        return HAL_ERROR_NOT_FOUND;
    table = *template_ops;
    const char *slot = getenv("HAL_TEST_NULL_SLOT");
#define NULL_SLOT(name, minor, required, flags, cap) \
    if (slot && strcmp(slot, #name) == 0)            \
        table.name = NULL;
    HAL_SLOTS(NULL_SLOT)
#undef NULL_SLOT
    if (table.device_get_properties) {
        template_get_properties = table.device_get_properties;
        table.device_get_properties = get_properties_at_node_position;
    }
    *ops = &table;
    return HAL_OK;
}
