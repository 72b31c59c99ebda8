// SPDX-License-Identifier: Apache-2.0
// torch_hal runtime: the open HAL backend, its devices, the current device, streams and error
// reporting. Everything above (guard, allocators, hooks, operators, Python bindings, and later
// c10d process groups) reaches the HAL through these functions.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <hal/hal.h>

#include <cstdint>
#include <string>

namespace torch_hal
{

constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
constexpr c10::DispatchKey kDeviceKey = c10::DispatchKey::PrivateUse1;

// A zeroed HAL descriptor with struct_size set (the C *_INIT macros use designated
// initializers, which C++17 does not have).
template <typename T> T halStruct()
{
    T value{};
    value.struct_size = sizeof(T);
    return value;
}

// ---- Errors ---------------------------------------------------------------------------------

// Throws a c10::Error (c10::OutOfMemoryError for out-of-memory statuses) whose message names the
// backend, the failed call and hal_last_error_message().
[[noreturn]] void throwHalError(hal_status_t status, const char *call);

// Formats the same message without throwing (for noexcept paths and warnings).
std::string halErrorMessage(hal_status_t status, const char *call);

#define TORCH_HAL_CHECK(expr)                                     \
    do {                                                          \
        hal_status_t torch_hal_status_ = (expr);                  \
        if (C10_UNLIKELY(torch_hal_status_ != HAL_OK))            \
            ::torch_hal::throwHalError(torch_hal_status_, #expr); \
    } while (0)

// For destructors and deleters, which must not throw: reports the failure as a warning.
#define TORCH_HAL_WARN_ON_ERROR(expr)                            \
    do {                                                         \
        hal_status_t torch_hal_status_ = (expr);                 \
        if (C10_UNLIKELY(torch_hal_status_ != HAL_OK))           \
            ::torch_hal::warnHalError(torch_hal_status_, #expr); \
    } while (0)

void warnHalError(hal_status_t status, const char *call) noexcept;

// ---- Backend and devices --------------------------------------------------------------------

// Opens the backend (once per process). On failure returns false and sets *error to a message
// naming the backend and hal_last_error_message(); nothing else is touched.
bool openBackend(const std::string &name, std::string *error);
bool isBackendOpen() noexcept;
const std::string &backendName();    // e.g. "cpu", "trainium"
const std::string &deviceTypeName(); // the name PyTorch shows, e.g. "hal", "neuron"

// Device indices are node-local (hal_device_properties_t.node_index): deviceCount() is the
// node's count, of which this process may own only some.
c10::DeviceIndex deviceCount() noexcept; // 0 while no backend is open
// Throws unless the index names a device of the node.
void checkDeviceIndex(c10::DeviceIndex index);
namespace detail
{
// Bit i: this process owns device i. Written once when the backend opens, before any device
// is visible, then read-only. Read inline: every device operator asks several times.
extern uint64_t g_owned_devices[2];
[[noreturn]] void throwNotOwned(c10::DeviceIndex index);
} // namespace detail

// Whether the index names a device of this process. Thread safety: safe.
inline bool ownsDevice(c10::DeviceIndex index) noexcept
{
    auto i = static_cast<uint8_t>(index); // negative indices become 128 and above: not owned
    return i < 128 && ((detail::g_owned_devices[i >> 6] >> (i & 63)) & 1) != 0;
}
// Throws unless the index names a device of this process (naming the owner otherwise).
inline void checkDevice(c10::DeviceIndex index)
{
    if (C10_UNLIKELY(!ownsDevice(index)))
        detail::throwNotOwned(index);
}
hal_device_t halDevice(c10::DeviceIndex index);
const hal_device_properties_t &deviceProperties(c10::DeviceIndex index);
// Whether the host may dereference this device's memory (CPU kernels then run in place).
bool hostAddressable(c10::DeviceIndex index);
// The index of a HAL device of the open backend, or -1.
c10::DeviceIndex deviceIndexOf(hal_device_t device) noexcept;
// The device owning a pointer (device or shared memory of the open backend), or -1.
c10::DeviceIndex deviceOfPointer(const void *ptr) noexcept;

// ---- Current device (per thread, like CUDA; starts at the process's first device) -----------

c10::DeviceIndex currentDevice() noexcept;
// -1 (a device given without an index, as torch.Stream("<device>") passes it) is the current
// device; any other index is returned unchanged, to be checked by the caller.
c10::DeviceIndex resolveDevice(c10::DeviceIndex index) noexcept;
void setCurrentDevice(c10::DeviceIndex index);
void setCurrentDeviceUnchecked(c10::DeviceIndex index) noexcept;
c10::DeviceIndex exchangeDevice(c10::DeviceIndex index); // returns the previous device
bool deviceInitialized(c10::DeviceIndex index) noexcept; // set once a device was used

// ---- Streams ---------------------------------------------------------------------------------
// Stream ids: 0 is the device's default stream; 1..kStreamsPerPool are the low-priority pool,
// kStreamsPerPool+1..2*kStreamsPerPool the high-priority pool. Pool streams are created lazily
// with hal_stream_create and handed out round-robin, as CUDA does.

constexpr int kStreamsPerPool = 8;

c10::Stream defaultStream(c10::DeviceIndex index);
c10::Stream streamFromPool(c10::DeviceIndex index, bool high_priority);
c10::Stream currentStream(c10::DeviceIndex index);
// Makes `stream` current for its device on this thread; returns the previous current stream.
c10::Stream exchangeStream(c10::Stream stream);
hal_stream_t halStream(const c10::Stream &stream);
hal_stream_t currentHalStream(c10::DeviceIndex index);
int32_t streamPriority(const c10::Stream &stream); // the HAL priority (0 default, < 0 higher)

// Blocks until the current stream of the device is idle (before CPU code touches its memory).
void synchronizeCurrentStream(c10::DeviceIndex index);

} // namespace torch_hal
