// SPDX-License-Identifier: Apache-2.0
// WorkHAL, what a collective of the torch_hal process group returns: completion through the
// event recorded on the communication stream, waits with and without a timeout, and errors
// that name the HAL status and the communicator's state.
#include "distributed/ProcessGroupHALInternal.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace torch_hal
{

// ---- Work ---------------------------------------------------------------------------------------

Completion::~Completion()
{
    if (event != nullptr && comm)
        comm->giveEvent(event);
}

WorkHAL::WorkHAL(int rank, c10d::OpType type, std::shared_ptr<Completion> completion,
                 std::vector<at::Tensor> outputs, c10::intrusive_ptr<c10::ivalue::Future> future,
                 std::chrono::milliseconds timeout)
    : c10d::Work(rank, type), completion_(std::move(completion)), outputs_(std::move(outputs)),
      future_(std::move(future)), timeout_(timeout)
{
}

hal_status_t WorkHAL::query() const
{
    if (!completion_->comm) // nothing was enqueued (an empty coalesced group)
        return HAL_OK;
    if (completion_->event == nullptr)
        return HAL_NOT_READY; // its coalesced group has not ended yet
    return hal_event_query(completion_->event);
}

void WorkHAL::throwFailure(hal_status_t status, const char *call) const
{
    std::string message = halErrorMessage(status, call); // reads this thread's HAL message first
    message += " (" + completion_->what + " of the torch_hal process group";
    if (completion_->comm) {
        // The event only knows that its stream failed; the stream knows why.
        hal_status_t latched = hal_stream_query(completion_->comm->hal_stream);
        const char *why = hal_last_error_message();
        if (latched != HAL_OK && latched != HAL_NOT_READY && why != nullptr && why[0] != '\0')
            message += std::string("; the communication stream failed with ") +
                       hal_status_string(latched) + ": " + why;
        hal_status_t error = completion_->comm->asyncError();
        if (error != HAL_OK && error != status)
            message += std::string("; the communicator reports ") + hal_status_string(error);
    }
    message += ")";
    throwDist(message);
}

bool WorkHAL::isCompleted()
{
    if (completion_->enqueue_error)
        return true;
    return query() != HAL_NOT_READY;
}

bool WorkHAL::isSuccess() const
{
    return !completion_->enqueue_error && query() == HAL_OK;
}

std::exception_ptr WorkHAL::exception() const
{
    if (completion_->enqueue_error)
        return completion_->enqueue_error;
    hal_status_t st = query();
    if (st == HAL_OK || st == HAL_NOT_READY)
        return nullptr;
    try {
        throwFailure(st, "hal_event_query");
    } catch (...) {
        return std::current_exception();
    }
    return nullptr;
}

std::vector<at::Tensor> WorkHAL::result()
{
    return outputs_;
}

void WorkHAL::synchronize()
{
    if (completion_->enqueue_error)
        std::rethrow_exception(completion_->enqueue_error);
    if (!completion_->comm)
        return;
    TORCH_CHECK(completion_->event != nullptr,
                "torch_hal process group: a Work of a coalesced group was waited for before "
                "endCoalescing()");
    // The caller's current stream waits for the collective (device side, no host block).
    checkComm(
        hal_stream_wait_event(currentHalStream(completion_->comm->device), completion_->event),
        "hal_stream_wait_event");
}

void WorkHAL::blockCurrentStream()
{
    synchronize();
}

bool WorkHAL::wait(std::chrono::milliseconds timeout)
{
    synchronize();
    if (!completion_->comm)
        return true;
    std::chrono::milliseconds limit = timeout.count() > 0 ? timeout : timeout_;
    hal_status_t st;
    if (limit.count() <= 0) {
        // Bounded by the communicator's timeout: a dead or stuck peer fails the collective.
        st = hal_event_synchronize(completion_->event);
    } else {
        auto deadline = std::chrono::steady_clock::now() + limit;
        auto pause = std::chrono::microseconds(20);
        for (;;) {
            st = hal_event_query(completion_->event);
            if (st != HAL_NOT_READY)
                break;
            if (std::chrono::steady_clock::now() >= deadline) {
                // As ProcessGroupNCCL's blocking wait: the communicator cannot be trusted with
                // a collective still pending, so it is aborted (every rank then fails fast).
                completion_->comm->abort();
                throwDist("torch_hal process group: " + completion_->what +
                          " did not complete within " + std::to_string(limit.count()) +
                          " ms (Work.wait timeout); the communicator was aborted");
            }
            std::this_thread::sleep_for(pause);
            pause = std::min(pause * 2, std::chrono::microseconds(1000));
        }
    }
    if (st != HAL_OK)
        throwFailure(st, "hal_event_synchronize");
    return true;
}

void WorkHAL::abort()
{
    if (completion_->comm)
        completion_->comm->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> WorkHAL::getFuture()
{
    return future_;
}

} // namespace torch_hal
