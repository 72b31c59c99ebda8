/* SPDX-License-Identifier: Apache-2.0 */
/* How readers of versioned structs test what a writer filled in: HAL_STRUCT_HAS on struct_size,
 * and hal_extension_find along a `next` chain. */
#include <stddef.h>

#include "hal/hal.h"
#include "tools/ctest/ctest.h"

/* Types a test chain carries; real extensions get values of their own in hal_types.h. */
#define EXT_WANTED  ((hal_extension_type_t)0x1001)
#define EXT_UNKNOWN ((hal_extension_type_t)0x1002)

CTEST(struct_versioning, struct_has_counts_the_whole_field)
{
    size_t end = offsetof(hal_device_properties_t, alignment) + sizeof(uint32_t);
    CTEST_CHECK(HAL_STRUCT_HAS(hal_device_properties_t, alignment, end));
    CTEST_CHECK(
        HAL_STRUCT_HAS(hal_device_properties_t, alignment, sizeof(hal_device_properties_t)));
    /* A writer compiled before the field, or one byte short of it, does not have it. */
    CTEST_CHECK(!HAL_STRUCT_HAS(hal_device_properties_t, alignment, end - 1));
    CTEST_CHECK(!HAL_STRUCT_HAS(hal_device_properties_t, alignment, 0));
    return CTEST_PASS;
}

/* The 1.0 size of the device properties is frozen: 1.2 appended the node position after it. */
CTEST(struct_versioning, device_properties_sizes)
{
    CTEST_CHECK(HAL_STRUCT_SIZE(hal_device_properties_t, alignment) ==
                offsetof(hal_device_properties_t, alignment) + sizeof(uint32_t));
    CTEST_CHECK(HAL_DEVICE_PROPERTIES_SIZE_1_0 ==
                offsetof(hal_device_properties_t, program_formats) + sizeof(uint32_t));
    CTEST_CHECK(offsetof(hal_device_properties_t, node_index) == HAL_DEVICE_PROPERTIES_SIZE_1_0);
    CTEST_CHECK(
        !HAL_STRUCT_HAS(hal_device_properties_t, node_index, HAL_DEVICE_PROPERTIES_SIZE_1_0));
    CTEST_CHECK(HAL_STRUCT_HAS(hal_device_properties_t, node_device_count,
                               sizeof(hal_device_properties_t)));
#if defined(__x86_64__) || defined(__aarch64__)
    CTEST_CHECK(HAL_DEVICE_PROPERTIES_SIZE_1_0 == 376);
#endif
    return CTEST_PASS;
}

CTEST(struct_versioning, extension_find_walks_the_chain)
{
    hal_extension_t wanted = { sizeof(hal_extension_t), EXT_WANTED, 0, NULL };
    hal_extension_t unknown = { sizeof(hal_extension_t), EXT_UNKNOWN, 0, &wanted };
    hal_extension_t none = { sizeof(hal_extension_t), HAL_EXTENSION_TYPE_NONE, 0, &unknown };
    CTEST_CHECK(hal_extension_find(&none, EXT_WANTED) == &wanted);
    CTEST_CHECK(hal_extension_find(&wanted, EXT_WANTED) == &wanted);
    /* The first of two with the same type. */
    hal_extension_t first = { sizeof(hal_extension_t), EXT_WANTED, 0, &none };
    CTEST_CHECK(hal_extension_find(&first, EXT_WANTED) == &first);
    return CTEST_PASS;
}

CTEST(struct_versioning, extension_find_absent_or_truncated)
{
    CTEST_CHECK(hal_extension_find(NULL, EXT_WANTED) == NULL);
    hal_extension_t unknown = { sizeof(hal_extension_t), EXT_UNKNOWN, 0, NULL };
    CTEST_CHECK(hal_extension_find(&unknown, EXT_WANTED) == NULL);
    /* An extension whose struct_size does not cover the header is malformed: it is not
     * matched, and its `next` (beyond the size its writer declared) is not followed. */
    hal_extension_t wanted = { sizeof(hal_extension_t), EXT_WANTED, 0, NULL };
    hal_extension_t short_one = { offsetof(hal_extension_t, next), EXT_WANTED, 0, &wanted };
    CTEST_CHECK(hal_extension_find(&short_one, EXT_WANTED) == NULL);
    hal_extension_t zero = { 0, EXT_UNKNOWN, 0, &wanted };
    CTEST_CHECK(hal_extension_find(&zero, EXT_WANTED) == NULL);
    return CTEST_PASS;
}
