// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the native kernels (Ops.cpp) and the CPU fallback (Fallback.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Storage.h>

#include <cstdint>

#include "runtime/Runtime.h"

namespace torch_hal
{

inline bool isDeviceTensor(const at::Tensor &t)
{
    return t.defined() && t.device().type() == kDeviceType;
}

// A device tensor viewing `storage` with the given geometry (no data is touched).
at::Tensor wrapDeviceStorage(c10::Storage storage, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                             int64_t storage_offset, caffe2::TypeMeta dtype,
                             c10::DispatchKeySet keys = c10::DispatchKeySet(kDeviceKey));

// An uninitialised device tensor from the device's caching allocator: the device's
// empty_strided kernel without the dispatcher (compiled graphs' buffers). Throws for a device
// this process does not own. Thread safety: safe.
at::Tensor emptyStridedOnDevice(c10::IntArrayRef size, c10::IntArrayRef stride,
                                c10::ScalarType dtype, c10::DeviceIndex index);

// Bytes of storage a strided tensor spans, from its first element; 0 when it is empty.
size_t spanBytes(const at::Tensor &t);

// Runs the operator's CPU kernel for device tensors (the boxed fallback of every operator
// torch_hal has no native kernel for). Host-addressable devices: CPU tensors alias the device
// memory and outputs allocated by the kernel are adopted without copies. Others: inputs are
// staged through pinned host memory and results copied back. In-place, out= and view
// semantics are kept exactly.
void cpuFallback(const c10::OperatorHandle &op, torch::jit::Stack *stack);

// The first time it runs on a thread of a host-addressable backend (not autograd's own), turns
// autograd's multithreading off for that thread, so that its backward runs on it as the CPU's
// does. The first time it runs inside a backward in this process, waits (at most 2 s) until
// autograd's device threads carry their names, which the engine does not wait for
// (FallbackThreads.cpp). Thread safety: safe; acts on the calling thread only.
void backwardOnCallingThread();

// On the autograd engine's device threads, sets the intra-op threads to those of the last
// other thread that ran a kernel on the device; elsewhere notes this thread's
// (FallbackThreads.cpp). Does backwardOnCallingThread()'s work as well (one thread-local
// lookup for both). Thread safety: safe.
void matchCallerThreads();

// Autograd's device threads release a backward's graph task after its caller has returned.
// The task's thread-local state holds the Python context that torch stashes for every backward
// (torch/autograd/graph.py); released during interpreter shutdown, that takes the GIL, Python
// ends the thread inside a noexcept destructor, and the process aborts ("terminate called
// without an active exception"). A device thread runs one task at a time, so this runs one
// backward on each initialised device of this process, from a thread of its own (whose
// thread-local state holds no Python object), and returns once each device's thread has taken
// it up: the tasks before it are released by then. torch_hal calls it at exit, while the
// interpreter is intact. Nothing is done when no backward ran in this process. Throws the
// device's error if a device operator fails (FallbackThreads.cpp). Thread safety: safe; call
// it without the GIL (the autograd engine requires that).
void releaseFinishedBackwards();

// Counters of what the fallback did (exposed as torch_hal._C._fallback_stats()).
struct FallbackStats {
    uint64_t calls;            // fallback invocations
    uint64_t in_place_calls;   // ... run on aliased device memory (host-addressable)
    uint64_t staged_calls;     // ... run on host copies
    uint64_t outputs_adopted;  // outputs allocated in device memory by the CPU kernel
    uint64_t outputs_aliased;  // outputs that are views of an input's device storage
    uint64_t outputs_copied;   // outputs copied to the device afterwards
    uint64_t bytes_staged_in;  // device -> host bytes
    uint64_t bytes_staged_out; // host -> device bytes (also those of host kernels, below)
};
FallbackStats fallbackStats();
void resetFallbackStats();

// Counts `bytes` that a native kernel computed on the host and copied to a device that stages
// (bernoulli_'s draws) with the fallback's host -> device bytes: they cross as a staged
// result's would. Thread safety: safe.
void countHostResultBytes(uint64_t bytes);

} // namespace torch_hal
