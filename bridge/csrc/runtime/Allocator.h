// SPDX-License-Identifier: Apache-2.0
// torch_hal allocators: the device caching allocator (c10::DeviceAllocator over hal_allocator_t,
// one per device, allocating on the current stream), the pinned host allocator
// (at::HostAllocator over a HAL_MEM_KIND_HOST_PINNED hal_allocator_t), and the CPU allocator
// routing that lets CPU kernels allocate their outputs in device memory (in-place fallback).
#pragma once

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>

#include <vector>

#include "runtime/Runtime.h"

namespace torch_hal
{

// ---- Device memory --------------------------------------------------------------------------

c10::DeviceAllocator *deviceAllocator();

// Allocates n bytes of device memory on `index` for its current stream. The DataPtr reports
// `report_device`: the device itself, or CPU for CPU storages that alias device memory.
c10::DataPtr allocateDeviceMemory(c10::DeviceIndex index, size_t n, c10::Device report_device);

// The HAL allocator of device `index` if anything was allocated there, else nullptr.
hal_allocator_t existingDeviceAllocator(c10::DeviceIndex index) noexcept;

// Every block of the device allocator of `index` (hal_allocator_snapshot: segments in address
// order, each tiled by its blocks); empty where nothing was allocated on the device. Throws
// the HAL's error. Thread safety: safe.
std::vector<hal_allocator_block_info_t> deviceAllocatorBlocks(c10::DeviceIndex index);

// The memory history (MemoryHistory.h): the device allocator's segments of device `index` as
// they are now, noted (note_only, when the recording starts) or compared with the last ones
// (segment_alloc / segment_free). Does nothing unless recording, or where nothing was
// allocated on the device. Thread safety: safe.
void recordDeviceSegments(c10::DeviceIndex index, bool note_only = false);

// Whether a DataPtr owns a block of the device allocator (whatever device it reports).
bool isDeviceBlock(const c10::DataPtr &data_ptr);

// Marks a device block as in use by `stream` (c10 recordStream); other pointers are ignored.
void recordDeviceBlockOnStream(const c10::DataPtr &data_ptr, const c10::Stream &stream);

// Grows or shrinks a device storage to `size_bytes`, keeping its contents (stream-ordered copy
// on the current stream). Used by resize_, set_ and UntypedStorage.resize_.
void resizeDeviceStorage(c10::StorageImpl *storage, size_t size_bytes);

// ---- Pinned host memory -----------------------------------------------------------------------

at::HostAllocator *hostAllocator();
bool isPinnedPointer(const void *ptr) noexcept;
bool isHostBlock(const c10::DataPtr &data_ptr);
// Keeps a pinned block (the context of a host allocator DataPtr) from being reused until the
// work enqueued on `stream` so far is done.
void recordHostBlockOnStream(void *block, const c10::Stream &stream);

// ---- CPU allocations in device memory ---------------------------------------------------------

// Installs (once) the CPU allocator wrapper that serves allocations from device memory while a
// DeviceCpuAllocationScope is active on the calling thread; all other allocations go to the
// CPU allocator that was installed before.
void installCpuAllocatorRouting();

// An allocator for CPU storages that alias memory of a host-addressable device: it allocates
// device memory of `index` (used when a CPU kernel resizes such a storage).
c10::Allocator *deviceBackedCpuAllocator(c10::DeviceIndex index);

// While alive, CPU allocations of this thread come from device `index` (no-op for -1).
class DeviceCpuAllocationScope
{
  public:
    explicit DeviceCpuAllocationScope(c10::DeviceIndex index);
    ~DeviceCpuAllocationScope();
    DeviceCpuAllocationScope(const DeviceCpuAllocationScope &) = delete;
    DeviceCpuAllocationScope &operator=(const DeviceCpuAllocationScope &) = delete;

  private:
    c10::DeviceIndex previous_;
};

} // namespace torch_hal
