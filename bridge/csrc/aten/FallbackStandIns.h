// SPDX-License-Identifier: Apache-2.0
// The CPU stand-ins the fallback gives a CPU kernel for device tensors on host-addressable
// devices, reused from call to call on a thread.
//
// Each argument's stand-in is a CPU TensorImpl with a CPU StorageImpl aliasing the device
// memory. Making and freeing the two took about a sixth of a trivial operator's bridge cost
// (two allocations and frees, their constructors and the TensorImpl's inference-mode checks).
// A stand-in that nothing else refers to after the call (neither the tensor nor its storage, no
// weak references either) is kept for the next call and pointed at the next argument's memory.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/SmallVector.h>

#include <cstddef>
#include <cstdint>

namespace torch_hal
{

// A thread's kept stand-ins (at most a list's worth, see FallbackStandIns.cpp).
struct StandInPool {
    c10::SmallVector<at::Tensor, 8> kept;
    // The dispatch keys a new stand-in gets outside inference mode (the TensorImpl adds
    // autograd's to the CPU key); a stand-in with others is not kept.
    c10::DispatchKeySet new_keys;
};

// This thread's pool, or null in inference mode (inference tensors have other dispatch keys,
// so stand-ins are then neither reused nor kept). One thread-local lookup: callers ask once per
// operator. Thread safety: per thread.
StandInPool *standInPool();

// A plain CPU tensor of the given dtype and geometry whose storage (of its own) aliases `data`
// (nbytes bytes; `allocator` and `resizable` as the storage's): one of `pool`'s kept stand-ins
// when there is one, else a new one (always new when `pool` is null).
at::Tensor aliasingStandIn(StandInPool *pool, void *data, size_t nbytes, c10::Allocator *allocator,
                           bool resizable, caffe2::TypeMeta dtype, c10::IntArrayRef sizes,
                           c10::IntArrayRef strides, int64_t storage_offset);

// Keeps a stand-in from aliasingStandIn in `pool` when nothing else refers to it or its storage,
// it is still a plain CPU tensor, and the pool has room; else lets it go.
void recycleStandIn(StandInPool *pool, at::Tensor &&stand_in);

} // namespace torch_hal
