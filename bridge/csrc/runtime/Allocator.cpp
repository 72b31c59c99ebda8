// SPDX-License-Identifier: Apache-2.0
#include "runtime/Allocator.h"

#include "runtime/MemoryHistory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace torch_hal
{
namespace
{

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;

constexpr size_t kAggregate = static_cast<size_t>(StatType::AGGREGATE);

// One lazily created hal_allocator_t per device for one memory kind.
class PerDeviceAllocators
{
  public:
    explicit PerDeviceAllocators(hal_mem_kind_t kind)
        : kind_(kind), allocators_(static_cast<size_t>(deviceCount())),
          bookkeeping_streams_(static_cast<size_t>(deviceCount()))
    {
    }

    hal_allocator_t get(c10::DeviceIndex index)
    {
        checkDevice(index);
        auto &slot = allocators_[static_cast<size_t>(index)];
        hal_allocator_t a = slot.load(std::memory_order_acquire);
        if (a != nullptr)
            return a;
        std::lock_guard<std::mutex> lock(mutex_);
        a = slot.load(std::memory_order_acquire);
        if (a == nullptr) {
            auto config = halStruct<hal_allocator_config_t>();
            config.kind = kind_;
            TORCH_HAL_CHECK(hal_allocator_create(halDevice(index), &config, &a));
            if (kind_ == HAL_MEM_KIND_HOST_PINNED) {
                // Host memory is not ordered by any stream: the CPU may reuse a block as soon
                // as it is free. Allocating pinned blocks "for" a stream that never runs work
                // makes every real stream a foreign one, so a block recorded on a stream is
                // held back until that stream's work is done (hal_allocator_record_stream).
                hal_stream_t s = nullptr;
                TORCH_HAL_CHECK(hal_stream_create(halDevice(index), 0, &s));
                bookkeeping_streams_[static_cast<size_t>(index)] = s;
            }
            slot.store(a, std::memory_order_release);
        }
        return a;
    }

    // The allocator of a device if it was created, else nullptr.
    hal_allocator_t existing(c10::DeviceIndex index) const noexcept
    {
        if (index < 0 || static_cast<size_t>(index) >= allocators_.size())
            return nullptr;
        return allocators_[static_cast<size_t>(index)].load(std::memory_order_acquire);
    }

    hal_stream_t allocationStream(c10::DeviceIndex index) const
    {
        if (kind_ == HAL_MEM_KIND_HOST_PINNED)
            return bookkeeping_streams_[static_cast<size_t>(index)];
        return currentHalStream(index);
    }

    size_t size() const noexcept
    {
        return allocators_.size();
    }

  private:
    hal_mem_kind_t kind_;
    std::mutex mutex_;
    std::vector<std::atomic<hal_allocator_t>> allocators_;
    std::vector<hal_stream_t> bookkeeping_streams_;
};

hal_allocator_stats_t allocatorStats(hal_allocator_t a)
{
    auto stats = halStruct<hal_allocator_stats_t>();
    if (a != nullptr)
        TORCH_HAL_CHECK(hal_allocator_get_stats(a, &stats));
    return stats;
}

PerDeviceAllocators *g_device_allocators = nullptr;
PerDeviceAllocators *g_host_allocators = nullptr;

// Tells torch.profiler (profile_memory=True) that `bytes` were allocated (freed: negative) at
// ptr on the device, with the allocator's totals afterwards. Only called while it records.
void reportToProfiler(hal_allocator_t a, void *ptr, int64_t bytes, c10::DeviceIndex index)
{
    auto stats = halStruct<hal_allocator_stats_t>();
    if (hal_allocator_get_stats(a, &stats) != HAL_OK)
        return;
    c10::reportMemoryUsageToProfiler(ptr, bytes, static_cast<size_t>(stats.allocated_bytes),
                                     static_cast<size_t>(stats.reserved_bytes),
                                     c10::Device(kDeviceType, index));
}

void freeDeviceBlock(void *ptr)
{
    if (ptr == nullptr)
        return;
    c10::DeviceIndex index = deviceOfPointer(ptr);
    hal_allocator_t a =
        g_device_allocators != nullptr ? g_device_allocators->existing(index) : nullptr;
    if (a == nullptr) {
        warnHalError(HAL_ERROR_INVALID_ARGUMENT, "freeing device memory of an unknown device");
        return;
    }
    size_t size = 0;
    bool profiling = c10::memoryProfilingEnabled(), history = memoryHistoryRecording();
    bool known =
        (profiling || history) && hal_allocator_get_block(a, ptr, nullptr, &size) == HAL_OK;
    if (history && known)
        recordMemoryFree(index, ptr, size);
    TORCH_HAL_WARN_ON_ERROR(hal_allocator_free(a, ptr));
    if (profiling && known)
        reportToProfiler(a, ptr, -static_cast<int64_t>(size), index);
}

void freeHostBlock(void *ptr)
{
    if (ptr == nullptr || g_host_allocators == nullptr)
        return;
    auto info = halStruct<hal_mem_info_t>();
    c10::DeviceIndex index = -1;
    if (hal_mem_get_info(ptr, &info) == HAL_OK)
        index = deviceIndexOf(info.device);
    hal_allocator_t a = g_host_allocators->existing(index);
    if (a == nullptr) { // pinned memory may not name its device: ask every allocator
        for (size_t i = 0; i < g_host_allocators->size() && a == nullptr; ++i) {
            hal_allocator_t candidate =
                g_host_allocators->existing(static_cast<c10::DeviceIndex>(i));
            if (candidate != nullptr &&
                hal_allocator_get_block(candidate, ptr, nullptr, nullptr) == HAL_OK)
                a = candidate;
        }
    }
    if (a == nullptr) {
        warnHalError(HAL_ERROR_INVALID_ARGUMENT, "freeing pinned memory of no allocator");
        return;
    }
    TORCH_HAL_WARN_ON_ERROR(hal_allocator_free(a, ptr));
}

// Counters that reset_accumulated_memory_stats subtracts (the HAL only keeps totals).
struct Baseline {
    std::atomic<uint64_t> alloc{ 0 }, free{ 0 }, segment_alloc{ 0 }, segment_free{ 0 }, oom{ 0 };
};

class HalDeviceAllocator final : public c10::DeviceAllocator
{
  public:
    HalDeviceAllocator() : baselines_(static_cast<size_t>(deviceCount())) {}

    c10::DataPtr allocate(size_t n) override
    {
        c10::DeviceIndex index = currentDevice();
        return allocateDeviceMemory(index, n, c10::Device(kDeviceType, index));
    }

    c10::DeleterFnPtr raw_deleter() const override
    {
        return &freeDeviceBlock;
    }

    // Device-to-device byte copy (Storage clones); completed before returning.
    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        if (count == 0)
            return;
        c10::DeviceIndex index = deviceOfPointer(dest);
        if (index < 0)
            index = currentDevice();
        hal_stream_t s = currentHalStream(index);
        TORCH_HAL_CHECK(hal_memcpy_async(dest, src, count, s));
        TORCH_HAL_CHECK(hal_stream_synchronize(s));
    }

    bool initialized() override
    {
        return isBackendOpen();
    }

    void emptyCache(c10::MempoolId_t /*mempool_id*/) override
    {
        for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
            if (hal_allocator_t a = g_device_allocators->existing(i)) {
                TORCH_HAL_CHECK(hal_allocator_empty_cache(a));
                if (memoryHistoryRecording())
                    recordDeviceSegments(i);
            }
    }

    void recordStream(const c10::DataPtr &ptr, c10::Stream stream) override
    {
        recordDeviceBlockOnStream(ptr, stream);
    }

    // The statistics of what this process allocated: zero on a device of the node that another
    // process owns, as CUDA reports for a device the process has not used.
    DeviceStats getDeviceStats(c10::DeviceIndex index) override
    {
        checkDeviceIndex(index);
        hal_allocator_stats_t s = allocatorStats(g_device_allocators->existing(index));
        const Baseline &b = baselines_[static_cast<size_t>(index)];
        auto i64 = [](uint64_t v) { return static_cast<int64_t>(v); };
        DeviceStats out;
        auto fill_bytes = [&](c10::CachingDeviceAllocator::StatArray &stat, uint64_t current,
                              uint64_t peak) {
            stat[kAggregate].current = i64(current);
            stat[kAggregate].peak = i64(peak);
        };
        auto fill_count = [&](c10::CachingDeviceAllocator::StatArray &stat, uint64_t allocated,
                              uint64_t freed, uint64_t current) {
            stat[kAggregate].current = i64(current);
            stat[kAggregate].peak = i64(current); // the HAL keeps no peak for counts
            stat[kAggregate].allocated = i64(allocated);
            stat[kAggregate].freed = i64(freed);
        };
        fill_bytes(out.allocated_bytes, s.allocated_bytes, s.peak_allocated_bytes);
        fill_bytes(out.active_bytes, s.allocated_bytes, s.peak_allocated_bytes);
        fill_bytes(out.reserved_bytes, s.reserved_bytes, s.peak_reserved_bytes);
        fill_bytes(out.requested_bytes, s.requested_bytes, s.requested_bytes);
        fill_count(out.allocation, s.alloc_count - b.alloc, s.free_count - b.free, s.active_blocks);
        fill_count(out.active, s.alloc_count - b.alloc, s.free_count - b.free, s.active_blocks);
        fill_count(out.segment, s.segment_alloc_count - b.segment_alloc,
                   s.segment_free_count - b.segment_free,
                   s.segment_alloc_count - s.segment_free_count);
        out.num_ooms = i64(s.oom_count - b.oom);
        out.num_device_alloc = i64(s.segment_alloc_count - b.segment_alloc);
        out.num_device_free = i64(s.segment_free_count - b.segment_free);
        return out;
    }

    void resetAccumulatedStats(c10::DeviceIndex index) override
    {
        checkDeviceIndex(index);
        hal_allocator_stats_t s = allocatorStats(g_device_allocators->existing(index));
        Baseline &b = baselines_[static_cast<size_t>(index)];
        b.alloc = s.alloc_count;
        b.free = s.free_count;
        b.segment_alloc = s.segment_alloc_count;
        b.segment_free = s.segment_free_count;
        b.oom = s.oom_count;
    }

    void resetPeakStats(c10::DeviceIndex index) override
    {
        checkDeviceIndex(index);
        if (hal_allocator_t a = g_device_allocators->existing(index))
            TORCH_HAL_CHECK(hal_allocator_reset_peak_stats(a));
    }

    std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override
    {
        auto stats = halStruct<hal_mem_stats_t>();
        TORCH_HAL_CHECK(hal_device_get_mem_stats(halDevice(index), &stats));
        return { static_cast<size_t>(stats.device_bytes_free),
                 static_cast<size_t>(stats.device_bytes_limit) };
    }

  private:
    std::vector<Baseline> baselines_;
};

class HalHostAllocator final : public at::HostAllocator
{
  public:
    c10::DataPtr allocate(size_t n) override
    {
        void *ptr = nullptr;
        if (n > 0) {
            c10::DeviceIndex index = currentDevice();
            hal_allocator_t a = g_host_allocators->get(index);
            TORCH_HAL_CHECK(
                hal_allocator_alloc(a, n, g_host_allocators->allocationStream(index), &ptr));
        }
        return { ptr, ptr, &freeHostBlock, c10::Device(c10::DeviceType::CPU) };
    }

    c10::DeleterFnPtr raw_deleter() const override
    {
        return &freeHostBlock;
    }

    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        std::memcpy(dest, src, count);
    }

    bool record_event(void * /*ptr*/, void *ctx, c10::Stream stream) override
    {
        recordHostBlockOnStream(ctx, stream);
        return true;
    }

    void empty_cache() override
    {
        for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
            if (hal_allocator_t a = g_host_allocators->existing(i))
                TORCH_HAL_CHECK(hal_allocator_empty_cache(a));
    }

    at::HostStats get_stats() override
    {
        at::HostStats out;
        for (c10::DeviceIndex i = 0; i < deviceCount(); ++i) {
            hal_allocator_stats_t s = allocatorStats(g_host_allocators->existing(i));
            out.active_requests.current += static_cast<int64_t>(s.active_blocks);
            out.active_bytes.current += static_cast<int64_t>(s.allocated_bytes);
            out.active_bytes.peak += static_cast<int64_t>(s.peak_allocated_bytes);
            out.allocations.current += static_cast<int64_t>(s.active_blocks + s.cached_blocks);
            out.allocated_bytes.current += static_cast<int64_t>(s.reserved_bytes);
            out.allocated_bytes.peak += static_cast<int64_t>(s.peak_reserved_bytes);
            out.num_host_alloc += static_cast<int64_t>(s.segment_alloc_count);
            out.num_host_free += static_cast<int64_t>(s.segment_free_count);
        }
        return out;
    }

    void reset_accumulated_stats() override {}

    void reset_peak_stats() override
    {
        for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
            if (hal_allocator_t a = g_host_allocators->existing(i))
                TORCH_HAL_CHECK(hal_allocator_reset_peak_stats(a));
    }
};

HalDeviceAllocator *g_device_allocator = nullptr;
HalHostAllocator *g_host_allocator = nullptr;

// ---- CPU allocator routing --------------------------------------------------------------------

thread_local c10::DeviceIndex tl_cpu_allocation_device = -1;

c10::Allocator *g_base_cpu_allocator = nullptr;

void routedRawDelete(void *ptr)
{
    // raw_allocate()/raw_deallocate() pairs may come from either mode: ask the HAL.
    auto info = halStruct<hal_mem_info_t>();
    if (ptr != nullptr && hal_mem_get_info(ptr, &info) == HAL_OK &&
        info.kind != HAL_MEM_KIND_UNREGISTERED) {
        freeDeviceBlock(ptr);
        return;
    }
    g_base_cpu_allocator->raw_deleter()(ptr);
}

class RoutingCpuAllocator final : public c10::Allocator
{
  public:
    c10::DataPtr allocate(size_t n) override
    {
        c10::DeviceIndex index = tl_cpu_allocation_device;
        if (index < 0)
            return g_base_cpu_allocator->allocate(n);
        return allocateDeviceMemory(index, n, c10::Device(c10::DeviceType::CPU));
    }

    c10::DeleterFnPtr raw_deleter() const override
    {
        return &routedRawDelete;
    }

    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        g_base_cpu_allocator->copy_data(dest, src, count);
    }
};

class DeviceBackedCpuAllocator final : public c10::Allocator
{
  public:
    explicit DeviceBackedCpuAllocator(c10::DeviceIndex index) : index_(index) {}

    c10::DataPtr allocate(size_t n) override
    {
        return allocateDeviceMemory(index_, n, c10::Device(c10::DeviceType::CPU));
    }

    c10::DeleterFnPtr raw_deleter() const override
    {
        return &freeDeviceBlock;
    }

    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        std::memcpy(dest, src, count); // only used for host-addressable devices
    }

  private:
    c10::DeviceIndex index_;
};

std::vector<std::unique_ptr<DeviceBackedCpuAllocator>> g_device_backed_cpu_allocators;

} // namespace

// ---- Device memory ----------------------------------------------------------------------------

c10::DeviceAllocator *deviceAllocator()
{
    // Every device operator asks several times: once made, a function-local static costs a
    // load to read, where std::call_once wrote two thread-locals on every call. A throw (no
    // backend open) leaves it unmade, and the next call tries again.
    static HalDeviceAllocator *const allocator = [] {
        TORCH_CHECK(isBackendOpen(), "torch_hal: no HAL backend is open");
        g_device_allocators = new PerDeviceAllocators(HAL_MEM_KIND_DEVICE);
        g_device_allocator = new HalDeviceAllocator();
        return g_device_allocator;
    }();
    return allocator;
}

// The memory history's view of an allocation: the segments it made or released (the
// allocator frees cached segments and retries before it fails), then the allocation itself or,
// when it failed for want of memory, an "oom" with the device's free bytes.
void recordAllocationHistory(c10::DeviceIndex index, hal_allocator_t a, size_t n,
                             hal_stream_t stream, const hal_allocator_stats_t &before,
                             hal_status_t status, void *ptr)
{
    const auto at = reinterpret_cast<uintptr_t>(stream);
    hal_allocator_stats_t after = allocatorStats(a);
    if (after.segment_alloc_count != before.segment_alloc_count ||
        after.segment_free_count != before.segment_free_count)
        recordDeviceSegments(index);
    if (status == HAL_OK) {
        recordMemoryAllocation(index, ptr, n, at);
    } else if (status == HAL_ERROR_OUT_OF_DEVICE_MEMORY) {
        auto stats = halStruct<hal_mem_stats_t>();
        size_t device_free = 0;
        if (hal_device_get_mem_stats(halDevice(index), &stats) == HAL_OK)
            device_free = static_cast<size_t>(stats.device_bytes_free);
        recordMemoryOom(index, n, device_free, at);
    }
}

c10::DataPtr allocateDeviceMemory(c10::DeviceIndex index, size_t n, c10::Device report_device)
{
    deviceAllocator();
    void *ptr = nullptr;
    if (n > 0) {
        hal_allocator_t a = g_device_allocators->get(index);
        hal_stream_t stream = currentHalStream(index);
        if (!memoryHistoryRecording()) { // a relaxed atomic load while nothing records
            TORCH_HAL_CHECK(hal_allocator_alloc(a, n, stream, &ptr));
        } else {
            const hal_allocator_stats_t before = allocatorStats(a);
            hal_status_t st = hal_allocator_alloc(a, n, stream, &ptr);
            // The failure's message first: recording makes HAL calls of its own.
            const std::string failure =
                st == HAL_OK ? "" : halErrorMessage(st, "hal_allocator_alloc(a, n, stream, &ptr)");
            recordAllocationHistory(index, a, n, stream, before, st, ptr);
            if (st == HAL_ERROR_OUT_OF_DEVICE_MEMORY)
                TORCH_CHECK_WITH(OutOfMemoryError, false, failure);
            TORCH_CHECK(st == HAL_OK, failure);
        }
        if (c10::memoryProfilingEnabled()) // a thread-local check while nothing records
            reportToProfiler(a, ptr, static_cast<int64_t>(n), index);
    }
    return { ptr, ptr, &freeDeviceBlock, report_device };
}

std::vector<hal_allocator_block_info_t> deviceAllocatorBlocks(c10::DeviceIndex index)
{
    std::vector<hal_allocator_block_info_t> blocks;
    if (hal_allocator_t a = existingDeviceAllocator(index))
        TORCH_HAL_CHECK(hal_allocator_snapshot(
            a,
            [](const hal_allocator_block_info_t *info, void *user) {
                static_cast<std::vector<hal_allocator_block_info_t> *>(user)->push_back(*info);
            },
            &blocks));
    return blocks;
}

void recordDeviceSegments(c10::DeviceIndex index, bool note_only)
{
    if (existingDeviceAllocator(index) == nullptr || !memoryHistoryRecording())
        return;
    std::vector<MemorySegment> segments;
    for (const hal_allocator_block_info_t &b : deviceAllocatorBlocks(index))
        if (segments.empty() ||
            segments.back().address != reinterpret_cast<uintptr_t>(b.segment_address))
            segments.push_back({ reinterpret_cast<uintptr_t>(b.segment_address),
                                 static_cast<size_t>(b.segment_size),
                                 reinterpret_cast<uintptr_t>(b.stream) });
    recordMemorySegments(index, segments, note_only);
}

hal_allocator_t existingDeviceAllocator(c10::DeviceIndex index) noexcept
{
    return g_device_allocators != nullptr ? g_device_allocators->existing(index) : nullptr;
}

bool isDeviceBlock(const c10::DataPtr &data_ptr)
{
    return data_ptr.get_deleter() == &freeDeviceBlock;
}

void recordDeviceBlockOnStream(const c10::DataPtr &data_ptr, const c10::Stream &stream)
{
    if (!isDeviceBlock(data_ptr) || data_ptr.get() == nullptr)
        return;
    void *block = data_ptr.get_context();
    c10::DeviceIndex index = deviceOfPointer(block);
    hal_allocator_t a = g_device_allocators->existing(index);
    if (a == nullptr)
        return;
    hal_stream_t s = halStream(stream);
    hal_status_t st = hal_allocator_record_stream(a, block, s);
    if (st == HAL_ERROR_INVALID_ARGUMENT && stream.device_index() != index) {
        // A stream of another device cannot be recorded: wait for it instead.
        TORCH_HAL_CHECK(hal_stream_synchronize(s));
        return;
    }
    TORCH_HAL_CHECK(st);
}

void resizeDeviceStorage(c10::StorageImpl *storage, size_t size_bytes)
{
    TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
    c10::Device device = storage->device();
    c10::DeviceIndex index = device.index();
    c10::DataPtr data = allocateDeviceMemory(index, size_bytes, device);
    size_t keep = std::min(size_bytes, storage->nbytes());
    if (keep > 0 && storage->data() != nullptr) {
        c10::Stream stream = currentStream(index);
        TORCH_HAL_CHECK(hal_memcpy_async(data.get(), storage->data(), keep, halStream(stream)));
        // The old block goes back to its allocation stream's pool: keep it until the copy ran.
        recordDeviceBlockOnStream(storage->data_ptr(), stream);
    }
    storage->set_data_ptr_noswap(std::move(data));
    storage->set_nbytes(size_bytes);
}

// ---- Pinned host memory -----------------------------------------------------------------------

at::HostAllocator *hostAllocator()
{
    static std::once_flag once;
    std::call_once(once, [] {
        TORCH_CHECK(isBackendOpen(), "torch_hal: no HAL backend is open");
        g_host_allocators = new PerDeviceAllocators(HAL_MEM_KIND_HOST_PINNED);
        g_host_allocator = new HalHostAllocator();
    });
    return g_host_allocator;
}

bool isPinnedPointer(const void *ptr) noexcept
{
    auto info = halStruct<hal_mem_info_t>();
    return ptr != nullptr && hal_mem_get_info(ptr, &info) == HAL_OK &&
           info.kind == HAL_MEM_KIND_HOST_PINNED;
}

bool isHostBlock(const c10::DataPtr &data_ptr)
{
    return data_ptr.get_deleter() == &freeHostBlock;
}

void recordHostBlockOnStream(void *block, const c10::Stream &stream)
{
    if (block == nullptr || g_host_allocators == nullptr)
        return;
    hal_stream_t s = halStream(stream);
    hal_allocator_t a = g_host_allocators->existing(stream.device_index());
    if (a == nullptr || hal_allocator_get_block(a, block, nullptr, nullptr) != HAL_OK) {
        // The block belongs to another device's pinned allocator, whose allocator cannot
        // record this stream: make the copy complete before the block can be reused.
        TORCH_HAL_CHECK(hal_stream_synchronize(s));
        return;
    }
    TORCH_HAL_CHECK(hal_allocator_record_stream(a, block, s));
}

// ---- CPU allocations in device memory ---------------------------------------------------------

void installCpuAllocatorRouting()
{
    // Asked on every fallback call: std::call_once alone costs two thread-local writes a call.
    static std::atomic<bool> installed{ false };
    if (C10_LIKELY(installed.load(std::memory_order_acquire)))
        return;
    static std::once_flag once;
    std::call_once(once, [] {
        g_base_cpu_allocator = c10::GetCPUAllocator();
        static RoutingCpuAllocator routing;
        // Priority 0 is what the default CPU allocator has; a later allocator with a higher
        // priority simply disables routing, and the fallback then copies outputs instead.
        c10::SetCPUAllocator(&routing, /*priority=*/0);
        for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
            g_device_backed_cpu_allocators.push_back(std::make_unique<DeviceBackedCpuAllocator>(i));
        installed.store(true, std::memory_order_release);
    });
}

c10::Allocator *deviceBackedCpuAllocator(c10::DeviceIndex index)
{
    checkDevice(index);
    installCpuAllocatorRouting();
    return g_device_backed_cpu_allocators[static_cast<size_t>(index)].get();
}

DeviceCpuAllocationScope::DeviceCpuAllocationScope(c10::DeviceIndex index)
    : previous_(tl_cpu_allocation_device)
{
    tl_cpu_allocation_device = index;
}

DeviceCpuAllocationScope::~DeviceCpuAllocationScope()
{
    tl_cpu_allocation_device = previous_;
}

} // namespace torch_hal
