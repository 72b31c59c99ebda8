// SPDX-License-Identifier: Apache-2.0
// Internal to the torch_hal process group (ProcessGroupHAL*.cpp): how it reports errors, checks
// tensors and hands them to HAL calls, and the communicator state that the process group, its
// collectives and its Works share. Its files:
//   ProcessGroupHAL.cpp             the process group: construction, run(), coalescing, lifetime
//   ProcessGroupHALRendezvous.cpp   the communicator's creation through the store (StoreAdapter)
//   ProcessGroupHALCollectives.cpp  the collectives and point-to-point operations
//   ProcessGroupHALWork.cpp         WorkHAL: completion, waits, errors
//   ProcessGroupHALTensors.cpp      errors, tensor checks, HAL dtypes and payloads
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distributed/ProcessGroupHAL.h"

namespace torch_hal
{

// ---- Errors -----------------------------------------------------------------------------------

// torch.distributed.DistBackendError with `message`, and throwing it.
c10::DistBackendError distError(const std::string &message);
[[noreturn]] void throwDist(const std::string &message);
// NotImplementedError, for what the HAL cannot do.
[[noreturn]] void notImplemented(const std::string &message);

// A failed HAL call of the process group: torch.distributed.DistBackendError naming the HAL
// status, the call and hal_last_error_message().
void checkComm(hal_status_t status, const char *call);

// ---- Tensors ------------------------------------------------------------------------------------

void checkDeviceTensor(const at::Tensor &t, const char *what);
// Element-wise collectives only need the elements to fill their storage range.
void checkDense(const at::Tensor &t, const char *what);
void checkContiguous(const at::Tensor &t, const char *what);
void checkSameDevice(const at::Tensor &t, c10::Device device, const char *what);
void checkSingle(const std::vector<at::Tensor> &tensors, const char *op);
// The HAL dtype of a scalar type, if the HAL has one.
std::optional<hal_dtype_t> halDtype(at::ScalarType type);

// What a tensor is to a HAL call: address, element count and element type.
struct Payload {
    void *ptr;
    size_t count;
    hal_dtype_t dtype;
};

// Data movement (broadcast, gathers, all-to-all, point to point): any dtype; one the HAL has
// no type for moves as bytes.
Payload movePayload(const at::Tensor &t);
// Reductions: the element type must be one the HAL reduces.
Payload reducePayload(const at::Tensor &t);
hal_redop_t halRedop(const c10d::ReduceOp &op, at::ScalarType type);
// Complex tensors reduce as their real views for the element-wise sums (as torch does).
at::Tensor reducible(const at::Tensor &t, const c10d::ReduceOp &op);

// Enqueues `body`'s HAL calls as one group (they run concurrently: point-to-point exchanges
// cannot deadlock). A failure ends the group before it is reported.
template <typename Body> void grouped(Body &&body)
{
    checkComm(hal_group_begin(), "hal_group_begin");
    try {
        body();
    } catch (...) {
        (void)hal_group_end();
        throw;
    }
    checkComm(hal_group_end(), "hal_group_end");
}

// Marks a device tensor's memory as used by the communication stream (caching allocator).
void recordOnStream(const at::Tensor &t, const c10::Stream &stream);
c10::intrusive_ptr<c10::ivalue::Future> makeFuture(c10::Device device);
std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>> &lists);

// ---- The communicator ---------------------------------------------------------------------------

// hal_comm_store_t over a c10d::Store (ProcessGroupHALRendezvous.cpp).
struct StoreAdapter;

// One HAL communicator and what runs with it. Shared by the process group and its Works, so
// that a Work can still be queried after the process group is gone.
struct CommState {
    hal_comm_t comm = nullptr;
    c10::DeviceIndex device = -1;
    c10::Stream stream;                  // the communication stream
    hal_stream_t hal_stream = nullptr;   // ... as a HAL stream
    hal_event_t ready = nullptr;         // recorded on the caller's stream, waited for by `stream`
    std::unique_ptr<StoreAdapter> store; // for hal_comm_init
    std::mutex mutex;                    // guards `pool` and `comm` against close()
    std::vector<hal_event_t> pool;

    explicit CommState(c10::Stream s);

    hal_event_t takeEvent()
    {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (!pool.empty()) {
                hal_event_t e = pool.back();
                pool.pop_back();
                return e;
            }
        }
        hal_event_t e = nullptr;
        TORCH_HAL_CHECK(hal_event_create(halDevice(device), HAL_EVENT_FLAG_NONE, &e));
        return e;
    }

    void giveEvent(hal_event_t e) noexcept
    {
        try {
            std::lock_guard<std::mutex> lock(mutex);
            pool.push_back(e);
        } catch (...) {
            TORCH_HAL_WARN_ON_ERROR(hal_event_destroy(e));
        }
    }

    hal_status_t asyncError() const
    {
        hal_status_t error = HAL_OK;
        if (comm == nullptr || hal_comm_get_async_error(comm, &error) != HAL_OK)
            return HAL_OK;
        return error == HAL_IN_PROGRESS ? HAL_OK : error;
    }

    void abort() noexcept
    {
        if (comm != nullptr)
            TORCH_HAL_WARN_ON_ERROR(hal_comm_abort(comm));
    }

    // Releases the communicator (after its queued work, or at once if it failed).
    void close() noexcept
    {
        hal_comm_t c = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex);
            std::swap(c, comm);
        }
        if (c == nullptr)
            return;
        hal_status_t error = HAL_OK;
        if (hal_comm_get_async_error(c, &error) == HAL_OK && error != HAL_OK &&
            error != HAL_IN_PROGRESS)
            (void)hal_comm_abort(c);
        hal_status_t st = hal_comm_destroy(c);
        // A communicator that failed reports its error again here; that was reported already.
        if (st != HAL_OK && st != error)
            warnHalError(st, "hal_comm_destroy");
    }

    // Closes the communicator and destroys the events. Both are defined in
    // ProcessGroupHALRendezvous.cpp, where StoreAdapter is complete.
    ~CommState();
};

} // namespace torch_hal
