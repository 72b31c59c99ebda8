/* SPDX-License-Identifier: Apache-2.0 */
/* The ops table of HAL 1.0, 1.1 and 1.2 keeps its layout: every slot of those versions at the
 * offset a backend built against them put it (LP64). The table is generated from
 * hal/abi/slots.toml; a spec edit that moves, removes or retypes a shipped slot fails to compile
 * here. New slots go at the end, after these. */
#include <stddef.h>

#include "hal/hal_backend_abi.h"
#include "tools/ctest/ctest.h"

#if defined(__LP64__)
#define SLOT_AT(name, index)                                                    \
    _Static_assert(offsetof(hal_backend_ops_t, name) == 32 + 8 * (index),       \
                   "slot " #name " moved: the 1.0-1.2 table layout is frozen"); \
    _Static_assert(sizeof(((hal_backend_ops_t *)0)->name) == 8, "slot " #name " resized");

/* The header: struct_size, api_version, flags (formerly reserved, always 0 before 1.1), name,
 * device_type_name. */
_Static_assert(offsetof(hal_backend_ops_t, struct_size) == 0, "header");
_Static_assert(offsetof(hal_backend_ops_t, api_version) == 8, "header");
_Static_assert(offsetof(hal_backend_ops_t, flags) == 12, "header");
_Static_assert(offsetof(hal_backend_ops_t, name) == 16, "header");
_Static_assert(offsetof(hal_backend_ops_t, device_type_name) == 24, "header");

/* HAL 1.0 */
SLOT_AT(init, 0)
SLOT_AT(fini, 1)
SLOT_AT(device_count, 2)
SLOT_AT(device_open, 3)
SLOT_AT(device_close, 4)
SLOT_AT(device_get_properties, 5)
SLOT_AT(device_synchronize, 6)
SLOT_AT(device_get_native_handle, 7)
SLOT_AT(device_get_free_memory, 8)
SLOT_AT(mem_alloc, 9)
SLOT_AT(mem_free, 10)
SLOT_AT(memcpy_async, 11)
SLOT_AT(memset_async, 12)
SLOT_AT(stream_create, 13)
SLOT_AT(stream_destroy, 14)
SLOT_AT(stream_query, 15)
SLOT_AT(stream_synchronize, 16)
SLOT_AT(stream_wait_event, 17)
SLOT_AT(stream_add_callback, 18)
SLOT_AT(stream_get_native_handle, 19)
SLOT_AT(event_create, 20)
SLOT_AT(event_destroy, 21)
SLOT_AT(event_record, 22)
SLOT_AT(event_query, 23)
SLOT_AT(event_synchronize, 24)
SLOT_AT(event_elapsed_ms, 25)
SLOT_AT(event_get_native_handle, 26)
SLOT_AT(mem_free_async, 27)
_Static_assert(HAL_BACKEND_OPS_SIZE_1_0 == 32 + 8 * 28, "a 1.0 table is 256 bytes");

/* HAL 1.1 */
SLOT_AT(stream_launch_host_fn, 28)
SLOT_AT(mem_ipc_export, 29)
SLOT_AT(mem_ipc_open, 30)
SLOT_AT(mem_ipc_close, 31)
SLOT_AT(comm_init, 32)
SLOT_AT(comm_destroy, 33)
SLOT_AT(comm_abort, 34)
SLOT_AT(comm_get_async_error, 35)
SLOT_AT(comm_get_native_handle, 36)
SLOT_AT(allreduce, 37)
SLOT_AT(broadcast, 38)
SLOT_AT(reduce, 39)
SLOT_AT(allgather, 40)
SLOT_AT(reduce_scatter, 41)
SLOT_AT(alltoall, 42)
SLOT_AT(send, 43)
SLOT_AT(recv, 44)
SLOT_AT(group_begin, 45)
SLOT_AT(group_end, 46)
_Static_assert(HAL_BACKEND_OPS_SIZE_1_1 == 32 + 8 * 47, "a 1.1 table is 408 bytes");

/* HAL 1.2 */
SLOT_AT(program_create, 47)
SLOT_AT(program_destroy, 48)
SLOT_AT(program_get_kernel, 49)
SLOT_AT(kernel_launch, 50)
_Static_assert(HAL_BACKEND_OPS_SIZE_1_2 == 32 + 8 * 51, "a 1.2 table is 440 bytes");

/* HAL 1.3 */
SLOT_AT(kernel_get_tensor_info, 51)
_Static_assert(HAL_BACKEND_OPS_SIZE_1_3 == 32 + 8 * 52, "a 1.3 table is 448 bytes");
#endif

/* The assertions above run at compile time; this case makes the target a test that reports. */
CTEST(abi, table_layout_of_1_0_to_1_3_is_frozen)
{
#if !defined(__LP64__)
    CTEST_SKIP("the frozen offsets are those of LP64 platforms");
#endif
    CTEST_CHECK(sizeof(hal_backend_ops_t) >= HAL_BACKEND_OPS_SIZE_1_3);
    return CTEST_PASS;
}
