// SPDX-License-Identifier: Apache-2.0
// Host buffers that the staged fallback's copies to the device still read.
//
// On a device the host cannot address, a fallback call copies its written ranges and fresh
// outputs from host buffers to the device, in stream order. Rather than wait for those copies
// before it returns (a round trip to the device per operator), it hands the buffers here: each
// set stays alive until an event recorded after its copies has completed, as CUDA's caching
// host allocator keeps a pinned block that a queued copy reads.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <vector>

#include "aten/FallbackContainers.h"

namespace torch_hal
{

// Keeps `buffers` alive until the work queued so far on the current streams of `devices` has
// completed (one event per device, recorded now). Holds at most 256 sets and 256 MiB: past
// either, the oldest sets' copies are waited for (this one's too, if it alone is larger).
// Releases the sets whose copies have completed.
// Where an event cannot be created or recorded, it synchronizes the devices' current streams
// instead (throwing c10::Error as that does, for an error the stream reports).
// Thread safety: safe.
void holdUntilCopied(const DeviceSet &devices, std::vector<c10::Storage> buffers);

// Releases the held sets whose copies have completed (a query per set, oldest first, stopping
// at the first that has not). A copy that failed releases its set too: the failure is the
// stream's, reported by its next synchronisation. Thread safety: safe.
void releaseCopiedBuffers();

} // namespace torch_hal
