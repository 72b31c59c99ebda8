// SPDX-License-Identifier: Apache-2.0
#include "runtime/Runtime.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace torch_hal
{
namespace
{

struct DeviceState {
    hal_device_t handle = nullptr;
    hal_device_properties_t props{};
    hal_stream_t default_stream = nullptr;
    int32_t pool_priority[2] = { 0, 0 }; // HAL priority of the low and high pools
    std::mutex pool_mutex;               // serialises lazy creation of pool streams
    std::array<std::atomic<hal_stream_t>, 2 * kStreamsPerPool> pool{};
    std::array<std::atomic<uint32_t>, 2> next{};
    std::atomic<bool> initialized{ false };
};

// PyTorch's device indices are node-local, as CUDA's are: index i is the node's i-th device of
// the backend (hal_device_properties_t.node_index), so that under a launcher that starts one
// process per device `torch.device(type, local_rank)` names each process's own device. A
// process opens only the devices the backend gives it; the others are entries without a handle,
// counted by device_count() and refused by name when used.
struct BackendState {
    hal_backend_t backend = nullptr;
    std::string name;
    std::string device_type_name;
    std::vector<std::unique_ptr<DeviceState>> devices; // by node index; handle null: not ours
    c10::DeviceIndex first_owned = 0;                  // the current device until one is set
    c10::DeviceIndex owned_count = 0;
};

// Written once by openBackend before any other function can see a device, then read-only. The
// backend is never closed: tensors may be freed during interpreter shutdown, after any hook
// that could close it, and the HAL drains and frees everything when the process exits anyway.
BackendState *g_state = nullptr;
std::mutex g_open_mutex;

// -1 until the thread sets one: the current device is then the process's first device.
thread_local c10::DeviceIndex tl_current_device = -1;
// Current stream id per device for this thread (0 = default stream). A plain array (device
// indices are below 128): read on every device operator, without a thread-local constructor's
// guard.
thread_local c10::StreamId tl_current_streams[128] = {};

// The name PyTorch's PrivateUse1 device takes: the backend's device-type name, unless that is
// one of PyTorch's own device types (the cuda backend's "cuda"), which PrivateUse1 cannot be
// renamed to; such a backend's device is "hal", as is a backend's that names none.
std::string torchDeviceTypeName(const char *backend_device_name)
{
    if (backend_device_name == nullptr || backend_device_name[0] == '\0')
        return "hal";
    for (int t = 0; t < c10::COMPILE_TIME_MAX_DEVICE_TYPES; t++) {
        auto type = static_cast<c10::DeviceType>(t);
        if (type != c10::DeviceType::PrivateUse1 &&
            c10::DeviceTypeName(type, /*lower_case=*/true) == backend_device_name)
            return "hal";
    }
    return backend_device_name;
}

DeviceState &state(c10::DeviceIndex index)
{
    checkDevice(index);
    return *g_state->devices[static_cast<size_t>(index)];
}

} // namespace

// ---- Errors ---------------------------------------------------------------------------------

std::string halErrorMessage(hal_status_t status, const char *call)
{
    const char *detail = hal_last_error_message();
    std::string backend = g_state != nullptr ? g_state->name : std::string("?");
    std::string msg = "torch_hal (backend '" + backend + "'): " + call + " failed with " +
                      hal_status_string(status);
    if (detail != nullptr && detail[0] != '\0')
        msg += std::string(": ") + detail;
    return msg;
}

void throwHalError(hal_status_t status, const char *call)
{
    std::string msg = halErrorMessage(status, call);
    if (status == HAL_ERROR_OUT_OF_DEVICE_MEMORY)
        TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    TORCH_CHECK(false, msg);
}

void warnHalError(hal_status_t status, const char *call) noexcept
{
    try {
        TORCH_WARN(halErrorMessage(status, call));
    } catch (...) {
        // Warnings turned into errors must not escape a deleter.
    }
}

// ---- Backend and devices --------------------------------------------------------------------

namespace
{

// Puts the opened devices at their node indices (the HAL has checked that they are distinct,
// increasing and below the node's count). Where the node's count does not fit PyTorch's int8
// indices, the process's own numbering is kept.
void placeOnNode(BackendState &st, std::vector<std::unique_ptr<DeviceState>> opened)
{
    constexpr uint32_t kMaxIndex = std::numeric_limits<c10::DeviceIndex>::max();
    uint32_t node_count = opened.empty() ? 0 : opened.front()->props.node_device_count;
    st.owned_count = static_cast<c10::DeviceIndex>(opened.size());
    if (node_count <= opened.size() || node_count > kMaxIndex) {
        st.devices = std::move(opened);
        st.first_owned = 0;
        return;
    }
    st.devices.resize(node_count);
    for (auto &dev : opened) {
        size_t at = dev->props.node_index;
        st.devices[at] = std::move(dev);
    }
    st.first_owned = static_cast<c10::DeviceIndex>(st.devices.size());
    for (size_t i = st.devices.size(); i-- > 0;) {
        if (st.devices[i] == nullptr)
            st.devices[i] = std::make_unique<DeviceState>();
        else
            st.first_owned = static_cast<c10::DeviceIndex>(i);
    }
}

// Which process owns a node device this process does not, as far as the launcher's variables
// tell: under torchrun, with every local rank owning the same number n of consecutive devices
// and this one owning the block of its LOCAL_RANK, device k belongs to local rank k / n.
std::string ownerOf(c10::DeviceIndex index)
{
    const char *local_rank = std::getenv("LOCAL_RANK");
    const char *local_world = std::getenv("LOCAL_WORLD_SIZE");
    long n = g_state->owned_count;
    if (local_rank == nullptr || local_world == nullptr || n <= 0)
        return "another process";
    char *end = nullptr;
    long rank = std::strtol(local_rank, &end, 10);
    if (end == local_rank || *end != '\0')
        return "another process";
    long world = std::strtol(local_world, &end, 10);
    if (end == local_world || *end != '\0' || g_state->first_owned != rank * n)
        return "another process";
    long owner = index / n;
    if (owner >= world)
        return "no process of this job (LOCAL_WORLD_SIZE=" + std::to_string(world) + ")";
    return "the process of local rank " + std::to_string(owner);
}

} // namespace

bool openBackend(const std::string &name, std::string *error)
{
    std::lock_guard<std::mutex> lock(g_open_mutex);
    if (g_state != nullptr) {
        if (g_state->name == name)
            return true;
        *error = "torch_hal: backend '" + g_state->name + "' is already open; cannot open '" +
                 name + "' in the same process";
        return false;
    }
    auto fail = [&](hal_status_t status, const char *call) {
        const char *detail = hal_last_error_message();
        *error = "backend '" + name + "': " + call + " failed with " + hal_status_string(status);
        if (detail != nullptr && detail[0] != '\0')
            *error += std::string(": ") + detail;
        return false;
    };

    auto st = std::make_unique<BackendState>();
    hal_status_t s = hal_backend_open(name.c_str(), &st->backend);
    if (s != HAL_OK)
        return fail(s, "hal_backend_open");
    const char *backend_name = nullptr;
    const char *device_name = nullptr;
    s = hal_backend_get_info(st->backend, &backend_name, &device_name, nullptr);
    if (s != HAL_OK) {
        fail(s, "hal_backend_get_info");
        hal_backend_close(st->backend);
        return false;
    }
    st->name = backend_name;
    st->device_type_name = torchDeviceTypeName(device_name);

    uint32_t count = 0;
    s = hal_device_count(st->backend, &count);
    if (s != HAL_OK) {
        fail(s, "hal_device_count");
        hal_backend_close(st->backend);
        return false;
    }
    // PyTorch device indices are int8.
    count = std::min<uint32_t>(count, std::numeric_limits<c10::DeviceIndex>::max());
    std::vector<std::unique_ptr<DeviceState>> opened;
    for (uint32_t i = 0; i < count; ++i) {
        auto dev = std::make_unique<DeviceState>();
        dev->props.struct_size = sizeof(dev->props);
        s = hal_device_get(st->backend, i, &dev->handle);
        if (s == HAL_OK)
            s = hal_device_get_properties(dev->handle, &dev->props);
        if (s == HAL_OK)
            s = hal_device_get_default_stream(dev->handle, &dev->default_stream);
        if (s != HAL_OK) {
            fail(s, "opening a device");
            hal_backend_close(st->backend);
            return false;
        }
        dev->pool_priority[0] = 0;
        dev->pool_priority[1] = dev->props.stream_priority_greatest;
        opened.push_back(std::move(dev));
    }
    placeOnNode(*st, std::move(opened));
    for (size_t i = 0; i < st->devices.size() && i < 128; ++i)
        if (st->devices[i]->handle != nullptr)
            detail::g_owned_devices[i >> 6] |= uint64_t{ 1 } << (i & 63);
    g_state = st.release();
    return true;
}

bool isBackendOpen() noexcept
{
    return g_state != nullptr;
}

const std::string &backendName()
{
    TORCH_CHECK(g_state != nullptr, "torch_hal: no HAL backend is open");
    return g_state->name;
}

const std::string &deviceTypeName()
{
    TORCH_CHECK(g_state != nullptr, "torch_hal: no HAL backend is open");
    return g_state->device_type_name;
}

c10::DeviceIndex deviceCount() noexcept
{
    return g_state == nullptr ? 0 : static_cast<c10::DeviceIndex>(g_state->devices.size());
}

void checkDeviceIndex(c10::DeviceIndex index)
{
    TORCH_CHECK(g_state != nullptr, "torch_hal: no HAL backend is open");
    TORCH_CHECK(index >= 0 && index < deviceCount(), "torch_hal (backend '", g_state->name,
                "'): invalid device index ", static_cast<int>(index), " for device type '",
                g_state->device_type_name, "' (", static_cast<int>(deviceCount()),
                " devices available)");
}

namespace detail
{
uint64_t g_owned_devices[2] = { 0, 0 };

void throwNotOwned(c10::DeviceIndex index)
{
    checkDeviceIndex(index);
    const std::string &type = g_state->device_type_name;
    std::string mine = type + ":" + std::to_string(g_state->first_owned);
    if (g_state->owned_count > 1)
        mine += "-" + std::to_string(g_state->first_owned + g_state->owned_count - 1);
    TORCH_CHECK(false, "torch_hal (backend '", g_state->name, "'): ", type, ":",
                static_cast<int>(index), " belongs to ", ownerOf(index),
                ": each device of this node is used by one process, and this process has ", mine,
                " (of ", static_cast<int>(deviceCount()),
                " on the node). Use the device of this process's local rank, "
                "torch.device(\"",
                type, "\", int(os.environ[\"LOCAL_RANK\"])), or \"", type, "\" alone.");
}

} // namespace detail

hal_device_t halDevice(c10::DeviceIndex index)
{
    return state(index).handle;
}

const hal_device_properties_t &deviceProperties(c10::DeviceIndex index)
{
    return state(index).props;
}

bool hostAddressable(c10::DeviceIndex index)
{
    return state(index).props.host_addressable != 0;
}

c10::DeviceIndex deviceIndexOf(hal_device_t device) noexcept
{
    if (g_state == nullptr || device == nullptr)
        return -1;
    for (size_t i = 0; i < g_state->devices.size(); ++i)
        if (g_state->devices[i]->handle == device)
            return static_cast<c10::DeviceIndex>(i);
    return -1;
}

c10::DeviceIndex deviceOfPointer(const void *ptr) noexcept
{
    auto info = halStruct<hal_mem_info_t>();
    if (ptr == nullptr || hal_mem_get_info(ptr, &info) != HAL_OK)
        return -1;
    if (info.kind != HAL_MEM_KIND_DEVICE && info.kind != HAL_MEM_KIND_SHARED)
        return -1;
    return deviceIndexOf(info.device);
}

// ---- Current device -------------------------------------------------------------------------

c10::DeviceIndex currentDevice() noexcept
{
    if (tl_current_device >= 0)
        return tl_current_device;
    return g_state != nullptr ? g_state->first_owned : 0;
}

c10::DeviceIndex resolveDevice(c10::DeviceIndex index) noexcept
{
    return index == -1 ? currentDevice() : index;
}

void setCurrentDevice(c10::DeviceIndex index)
{
    DeviceState &dev = state(index);
    dev.initialized.store(true, std::memory_order_relaxed);
    tl_current_device = index;
}

void setCurrentDeviceUnchecked(c10::DeviceIndex index) noexcept
{
    if (ownsDevice(index))
        tl_current_device = index;
}

c10::DeviceIndex exchangeDevice(c10::DeviceIndex index)
{
    c10::DeviceIndex previous = currentDevice();
    if (index != previous)
        setCurrentDevice(index);
    return previous;
}

bool deviceInitialized(c10::DeviceIndex index) noexcept
{
    if (index < 0 || index >= deviceCount())
        return false;
    return g_state->devices[static_cast<size_t>(index)]->initialized.load();
}

// ---- Streams --------------------------------------------------------------------------------

namespace
{

c10::Stream makeStream(c10::DeviceIndex index, c10::StreamId id)
{
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, index), id);
}

hal_stream_t poolStream(DeviceState &dev, c10::StreamId id)
{
    auto slot = static_cast<size_t>(id - 1);
    hal_stream_t s = dev.pool[slot].load(std::memory_order_acquire);
    if (s != nullptr)
        return s;
    std::lock_guard<std::mutex> lock(dev.pool_mutex);
    s = dev.pool[slot].load(std::memory_order_acquire);
    if (s == nullptr) {
        int32_t priority = dev.pool_priority[slot / kStreamsPerPool];
        TORCH_HAL_CHECK(hal_stream_create(dev.handle, priority, &s));
        dev.pool[slot].store(s, std::memory_order_release);
    }
    return s;
}

c10::StreamId *threadStreams()
{
    return tl_current_streams;
}

} // namespace

c10::Stream defaultStream(c10::DeviceIndex index)
{
    index = resolveDevice(index);
    checkDevice(index);
    return makeStream(index, 0);
}

c10::Stream streamFromPool(c10::DeviceIndex index, bool high_priority)
{
    index = resolveDevice(index);
    DeviceState &dev = state(index);
    dev.initialized.store(true, std::memory_order_relaxed);
    size_t level = high_priority ? 1 : 0;
    uint32_t n = dev.next[level].fetch_add(1, std::memory_order_relaxed) % kStreamsPerPool;
    c10::StreamId id = 1 + static_cast<c10::StreamId>(level * kStreamsPerPool + n);
    poolStream(dev, id); // create it now, so that errors surface here
    return makeStream(index, id);
}

c10::Stream currentStream(c10::DeviceIndex index)
{
    index = resolveDevice(index);
    checkDevice(index);
    return makeStream(index, threadStreams()[static_cast<size_t>(index)]);
}

c10::Stream exchangeStream(c10::Stream stream)
{
    c10::DeviceIndex index = stream.device_index();
    checkDevice(index);
    TORCH_CHECK(stream.device_type() == kDeviceType, "torch_hal: expected a ", deviceTypeName(),
                " stream, got a stream of ", stream.device());
    halStream(stream); // validates the id
    c10::StreamId *streams = threadStreams();
    c10::Stream previous = makeStream(index, streams[static_cast<size_t>(index)]);
    streams[static_cast<size_t>(index)] = stream.id();
    return previous;
}

hal_stream_t halStream(const c10::Stream &stream)
{
    DeviceState &dev = state(stream.device_index());
    c10::StreamId id = stream.id();
    if (id == 0)
        return dev.default_stream;
    TORCH_CHECK(id > 0 && id <= 2 * kStreamsPerPool, "torch_hal (backend '", g_state->name,
                "'): unknown stream id ", id, " on ", stream.device());
    return poolStream(dev, id);
}

hal_stream_t currentHalStream(c10::DeviceIndex index)
{
    // Every device operator asks (the fallback synchronises first): the current stream's id
    // and handle straight from the tables, once the index is known to be this process's.
    index = resolveDevice(index);
    checkDevice(index);
    DeviceState &dev = *g_state->devices[static_cast<size_t>(index)];
    c10::StreamId id = threadStreams()[static_cast<size_t>(index)];
    if (id == 0)
        return dev.default_stream;
    return halStream(makeStream(index, id));
}

int32_t streamPriority(const c10::Stream &stream)
{
    DeviceState &dev = state(stream.device_index());
    c10::StreamId id = stream.id();
    if (id <= 0)
        return 0;
    return dev.pool_priority[static_cast<size_t>(id - 1) / kStreamsPerPool];
}

void synchronizeCurrentStream(c10::DeviceIndex index)
{
    TORCH_HAL_CHECK(hal_stream_synchronize(currentHalStream(index)));
}

} // namespace torch_hal
