// SPDX-License-Identifier: Apache-2.0
// The torch_hal c10d backend (see ProcessGroupHAL.h for the design): construction, run(),
// which every collective enqueues through, coalescing, and lifetime. The rest is in
// ProcessGroupHAL*.cpp (ProcessGroupHALInternal.h lists the files).
#include "distributed/ProcessGroupHAL.h"

#include <ATen/ATen.h>
#include <ATen/core/jit_type.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ParamCommsUtils.hpp>
#include <torch/csrc/distributed/c10d/Utils.hpp>

#include <atomic>

#include "distributed/ProcessGroupHALInternal.h"
#include "runtime/DeviceActivity.h"

namespace torch_hal
{

// ---- Process group ------------------------------------------------------------------------------

ProcessGroupHAL::ProcessGroupHAL(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                 std::chrono::milliseconds timeout, std::string group_name,
                                 const std::vector<uint64_t> &global_ranks)
    : c10d::Backend(rank, size), store_(std::move(store)), timeout_(timeout),
      group_name_(std::move(group_name))
{
    TORCH_CHECK(isBackendOpen(), "torch_hal process group: no HAL backend is open");
    // As NCCL's process group computes them (0 and 1 for the default group).
    c10d::getGlobalRankStartAndStride(global_ranks, global_rank_start_, global_rank_stride_);
    for (int r = 0; r < size; ++r)
        global_ranks_.push_back(static_cast<size_t>(r) < global_ranks.size()
                                    ? static_cast<int64_t>(global_ranks[static_cast<size_t>(r)])
                                    : r);
    init();
}

ProcessGroupHAL::~ProcessGroupHAL()
{
    if (coalescing_.group_open && coalescing_.thread == std::this_thread::get_id())
        (void)hal_group_end();
    std::shared_ptr<CommState> comm = std::atomic_exchange(&comm_, std::shared_ptr<CommState>());
    if (comm)
        comm->close();
}

void ProcessGroupHAL::setTimeout(std::chrono::milliseconds timeout)
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    TORCH_CHECK(!std::atomic_load(&comm_),
                "torch_hal process group: the timeout is the HAL communicator's and cannot "
                "change once it exists (set it in init_process_group / new_group)");
    timeout_ = timeout;
}

std::chrono::milliseconds ProcessGroupHAL::opTimeout(std::chrono::milliseconds requested) const
{
    return requested.count() > 0 ? requested : std::chrono::milliseconds(0);
}

int ProcessGroupHAL::commDevice() const
{
    std::shared_ptr<CommState> comm = std::atomic_load(&comm_);
    return comm ? static_cast<int>(comm->device) : -1;
}

void ProcessGroupHAL::connect(c10::DeviceIndex device)
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    ensureComm(device);
}

void ProcessGroupHAL::keep(const at::Tensor &t)
{
    if (coalescing_.active)
        coalescing_.temporaries.push_back(t);
}

// A collective's device row for torch.profiler: what record_param_comms says of it, and the
// global rank of a send's or receive's peer.
std::shared_ptr<const CollectiveDescription>
ProcessGroupHAL::describeCollective(const char *what, at::ScalarType dtype, int64_t in_elems,
                                    int64_t out_elems, int peer) const
{
    auto c = std::make_shared<CollectiveDescription>();
    c->name = what;
    c->dtype = c10::toString(dtype);
    c->in_elements = in_elems;
    c->out_elements = out_elems;
    c->group_name = getGroupUid();
    c->group_desc = getGroupDesc();
    c->group_ranks = "[";
    for (size_t i = 0; i < global_ranks_.size(); ++i)
        c->group_ranks += (i ? ", " : "") + std::to_string(global_ranks_[i]);
    c->group_ranks += "]";
    c->group_size = size_;
    c->rank = rank_;
    if (peer >= 0 && static_cast<size_t>(peer) < global_ranks_.size())
        c->peer = global_ranks_[static_cast<size_t>(peer)];
    return c;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::run(c10d::OpType type, const char *what, c10::Device device,
                     const std::vector<at::Tensor> &inputs, const std::vector<at::Tensor> &outputs,
                     std::chrono::milliseconds timeout, const Enqueue &enqueue, const After &after,
                     int peer)
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    // torch.profiler sees the call as it sees NCCL's (a record_param_comms op: collective,
    // element counts, dtype, group, rank, size, the group's global ranks).
    int64_t in_elems = 0, out_elems = 0;
    for (const at::Tensor &t : inputs)
        in_elems += t.numel();
    for (const at::Tensor &t : outputs)
        out_elems += t.numel();
    const at::ScalarType dtype = !inputs.empty()    ? inputs[0].scalar_type()
                                 : !outputs.empty() ? outputs[0].scalar_type()
                                                    : at::kByte;
    RECORD_PARAM_COMMS_DATA(profiled_seq_++, std::make_tuple(getGroupUid(), getGroupDesc()), inputs,
                            outputs, rank_, std::string(what), in_elems, out_elems, dtype,
                            std::vector<int64_t>(), std::vector<int64_t>(), global_rank_start_,
                            global_rank_stride_, size_);
    const bool coalesced = coalescing_.active;
    if (coalesced) {
        TORCH_CHECK(coalescing_.thread == std::this_thread::get_id(),
                    "torch_hal process group: collectives of a coalesced group must be issued by "
                    "the thread that called startCoalescing()");
        if (coalescing_.device)
            TORCH_CHECK_VALUE(*coalescing_.device == device, "torch_hal process group: a "
                                                             "coalesced group uses one device");
        coalescing_.device = device;
    }
    std::shared_ptr<CommState> comm = ensureComm(device.index());
    c10::DeviceGuard device_guard(device);
    // The collectives below operate on raw tensors, outside autograd.
    at::AutoDispatchBelowADInplaceOrView below_autograd;

    // The communication stream waits for what the caller's stream has queued so far.
    TORCH_HAL_CHECK(hal_event_record(comm->ready, currentHalStream(device.index())));
    TORCH_HAL_CHECK(hal_stream_wait_event(comm->hal_stream, comm->ready));
    for (const at::Tensor &t : inputs)
        recordOnStream(t, comm->stream);
    for (const at::Tensor &t : outputs)
        recordOnStream(t, comm->stream);

    std::shared_ptr<Completion> completion =
        coalesced ? coalescing_.completion : std::make_shared<Completion>();
    completion->comm = comm;
    if (!coalesced)
        completion->what = what;
    auto future = makeFuture(device);
    {
        // Temporaries and copies of the collective go on the communication stream.
        c10::StreamGuard stream_guard(comm->stream);
        if (coalesced && !coalescing_.group_open) {
            checkComm(hal_group_begin(), "hal_group_begin");
            coalescing_.group_open = true;
        }
        // torch.profiler: the collective as a kernel row on the communication stream (a
        // coalesced group's calls are enqueued together when it ends).
        const std::string row =
            deviceActivityRecording() ? std::string(HAL_ACTIVITY_COLLECTIVE_PREFIX) + what : "";
        StreamActivity activity(DeviceActivityKind::Kernel, row.c_str(), comm->stream,
                                in_elems * static_cast<int64_t>(c10::elementSize(dtype)),
                                coalesced ? "collective (coalesced: enqueued at the group's end)"
                                          : "collective");
        if (!row.empty())
            activity.describe(describeCollective(what, dtype, in_elems, out_elems, peer));
        enqueue(comm->comm, comm->hal_stream);
        activity.end();
        if (coalesced) {
            if (after)
                coalescing_.after.push_back(after);
            coalescing_.outputs.insert(coalescing_.outputs.end(), outputs.begin(), outputs.end());
            coalescing_.inputs.insert(coalescing_.inputs.end(), inputs.begin(), inputs.end());
            coalescing_.futures.emplace_back(future, outputs);
        } else {
            if (after)
                after();
            completion->event = comm->takeEvent();
            TORCH_HAL_CHECK(hal_event_record(completion->event, comm->hal_stream));
            // As CUDA futures: complete now, with an event on the communication stream that
            // the streams of the future's users wait for.
            future->markCompleted(at::IValue(outputs));
        }
    }
    return c10::make_intrusive<WorkHAL>(rank_, type, std::move(completion), outputs,
                                        std::move(future), opTimeout(timeout));
}

// ---- Coalescing ---------------------------------------------------------------------------------

void ProcessGroupHAL::startCoalescing()
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    TORCH_CHECK(!coalescing_.active,
                "torch_hal process group: startCoalescing() while a coalesced group is open");
    coalescing_ = Coalescing{};
    coalescing_.active = true;
    coalescing_.thread = std::this_thread::get_id();
    coalescing_.completion = std::make_shared<Completion>();
    coalescing_.completion->what = "coalesced collectives";
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::endCoalescing()
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    TORCH_CHECK(coalescing_.active,
                "torch_hal process group: endCoalescing() without startCoalescing()");
    TORCH_CHECK(coalescing_.thread == std::this_thread::get_id(),
                "torch_hal process group: endCoalescing() on another thread than "
                "startCoalescing()");
    Coalescing c = std::move(coalescing_);
    coalescing_ = Coalescing{};
    if (!c.group_open) { // nothing was issued
        auto future =
            c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
        future->markCompleted(at::IValue(std::vector<at::Tensor>{}));
        return c10::make_intrusive<WorkHAL>(rank_, c10d::OpType::COALESCED, c.completion,
                                            std::vector<at::Tensor>{}, std::move(future),
                                            std::chrono::milliseconds(0));
    }
    std::shared_ptr<CommState> comm = c.completion->comm;
    c10::Device device = *c.device;
    c10::DeviceGuard device_guard(device);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    c10::StreamGuard stream_guard(comm->stream);
    hal_status_t st = hal_group_end();
    if (st != HAL_OK) {
        auto error = std::make_exception_ptr(distError(halErrorMessage(st, "hal_group_end")));
        c.completion->enqueue_error = error;
        for (auto &f : c.futures)
            f.first->setError(error);
        std::rethrow_exception(error);
    }
    for (const After &after : c.after)
        after();
    // Tensors freed from now on stay reserved until the group's work is done.
    for (const at::Tensor &t : c.inputs)
        recordOnStream(t, comm->stream);
    for (const at::Tensor &t : c.outputs)
        recordOnStream(t, comm->stream);
    c.completion->event = comm->takeEvent();
    TORCH_HAL_CHECK(hal_event_record(c.completion->event, comm->hal_stream));
    for (auto &f : c.futures)
        f.first->markCompleted(at::IValue(f.second));
    auto future = makeFuture(device);
    future->markCompleted(at::IValue(c.outputs));
    return c10::make_intrusive<WorkHAL>(rank_, c10d::OpType::COALESCED, c.completion, c.outputs,
                                        std::move(future), std::chrono::milliseconds(0));
}

// ---- Lifetime -----------------------------------------------------------------------------------

void ProcessGroupHAL::abort()
{
    // Safe while another thread is blocked in the communicator: no lock.
    if (std::shared_ptr<CommState> comm = std::atomic_load(&comm_))
        comm->abort();
}

void ProcessGroupHAL::shutdown()
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    std::shared_ptr<CommState> comm = std::atomic_exchange(&comm_, std::shared_ptr<CommState>());
    if (comm)
        comm->close();
}

c10d::ErrorType ProcessGroupHAL::getError()
{
    std::shared_ptr<CommState> comm = std::atomic_load(&comm_);
    switch (comm ? comm->asyncError() : HAL_OK) {
    case HAL_OK:
        return c10d::ErrorType::SUCCESS;
    case HAL_ERROR_TIMEOUT:
        return c10d::ErrorType::TIMEOUT;
    case HAL_ERROR_REMOTE:
        return c10d::ErrorType::REMOTE_ERROR;
    default:
        return c10d::ErrorType::COMM_ERROR;
    }
}

} // namespace torch_hal
