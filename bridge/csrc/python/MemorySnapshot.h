// SPDX-License-Identifier: Apache-2.0
// Python bindings of the device memory history and snapshot (csrc/python/MemorySnapshot.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_hal
{

// Adds _memory_record_history and _memory_snapshot to `m`.
void initMemorySnapshotBindings(pybind11::module &m);

} // namespace torch_hal
