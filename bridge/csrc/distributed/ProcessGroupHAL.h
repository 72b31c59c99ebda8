// SPDX-License-Identifier: Apache-2.0
// c10d process group backend over the HAL's collectives (hal_comm.h): torch.distributed's
// backend "torch_hal", registered for the torch_hal device (torch_hal/distributed.py).
//
// Shape (as ProcessGroupNCCL):
//  - One HAL communicator per process group, created on first use for the device of the first
//    tensor. Rank 0 makes the unique id (HAL_COMM_ID_FLAG_STORE) and publishes it in the
//    process group's store; every rank then joins through the same store (hal_comm_store_t
//    over c10d::Store). The process group's timeout is the communicator's timeout, so a dead or
//    stuck peer becomes an error (HAL_ERROR_REMOTE / HAL_ERROR_TIMEOUT) within it.
//  - Collectives run on a communication stream of the device (a high-priority pool stream, one
//    per process group) that first waits for the caller's current stream; the tensors are
//    recorded on it (caching allocator record_stream) and an event is recorded after the
//    collective.
//  - Work::wait() makes the caller's current stream wait for that event, then waits on the host
//    until the collective finished and raises torch.distributed.DistBackendError naming the HAL
//    status and message if it failed. Work::synchronize() only orders the current stream.
//    getFuture() is completed when the collective is enqueued, with the communication stream's
//    event (consumers' streams wait for it), as CUDA futures are.
//  - startCoalescing/endCoalescing and the *_coalesced collectives enqueue one HAL group
//    (hal_group_begin/end); batch_isend_irecv uses this for deadlock-free exchanges.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/core/ivalue.h>
#include <c10/core/Stream.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/Runtime.h"

namespace torch_hal
{

constexpr const char *kProcessGroupBackendName = "torch_hal";

struct CommState;
struct CollectiveDescription; // runtime/DeviceActivity.h

// The end of one enqueued collective (or of one coalesced group): the event recorded on the
// communication stream after it, or the error that kept it from being enqueued.
struct Completion {
    std::shared_ptr<CommState> comm;
    hal_event_t event = nullptr; // recorded once the work is enqueued
    std::exception_ptr enqueue_error;
    std::string what; // "allreduce", ... for messages
    ~Completion();
};

class WorkHAL : public c10d::Work
{
  public:
    WorkHAL(int rank, c10d::OpType type, std::shared_ptr<Completion> completion,
            std::vector<at::Tensor> outputs, c10::intrusive_ptr<c10::ivalue::Future> future,
            std::chrono::milliseconds timeout);

    bool isCompleted() override;
    bool isSuccess() const override;
    std::exception_ptr exception() const override;
    std::vector<at::Tensor> result() override;
    void synchronize() override;
    void blockCurrentStream() override;
    bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
    void abort() override;
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  private:
    // The HAL status of the work so far: HAL_NOT_READY while it runs.
    hal_status_t query() const;
    [[noreturn]] void throwFailure(hal_status_t status, const char *call) const;

    std::shared_ptr<Completion> completion_;
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    std::chrono::milliseconds timeout_; // from the collective's options (<= 0: none)
};

class ProcessGroupHAL : public c10d::Backend
{
  public:
    // global_ranks: the group's ranks in the default group, as torch.distributed passes them
    // (empty for the default group itself); they name the group in torch.profiler.
    ProcessGroupHAL(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                    std::chrono::milliseconds timeout, std::string group_name,
                    const std::vector<uint64_t> &global_ranks = {});
    ~ProcessGroupHAL() override;

    const std::string getBackendName() const override
    {
        return kProcessGroupBackendName;
    }
    bool supportsCoalescing() const override
    {
        return true;
    }
    void setTimeout(std::chrono::milliseconds timeout) override;

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allreduce_coalesced(std::vector<at::Tensor> &tensors,
                        const c10d::AllreduceCoalescedOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allgather_coalesced(std::vector<std::vector<at::Tensor>> &output_lists,
                        std::vector<at::Tensor> &inputs,
                        const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                    std::vector<at::Tensor> &inputs,
                                    const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                         const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                    std::vector<at::Tensor> &inputs,
                                    const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &output_split_sizes,
                                                 std::vector<int64_t> &input_split_sizes,
                                                 const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst_rank,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src_rank,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                                 int tag) override;
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;

    void startCoalescing() override;
    c10::intrusive_ptr<c10d::Work> endCoalescing() override;

    void abort() override;
    void shutdown() override;
    c10d::ErrorType getError() override;

    // For Python: the communicator's device index (-1 before the first collective), and
    // whether one exists.
    int commDevice() const;
    // Creates the communicator now, for `device` (otherwise the first collective does).
    void connect(c10::DeviceIndex device);

  private:
    // What one collective enqueues, given the communicator and the communication stream (which
    // is the current stream while it runs, so that allocations and copies go there).
    using Enqueue = std::function<void(hal_comm_t, hal_stream_t)>;
    // Work to run on the communication stream after the collective (copies out of temporaries).
    using After = std::function<void()>;

    c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, const char *what, c10::Device device,
                                       const std::vector<at::Tensor> &inputs,
                                       const std::vector<at::Tensor> &outputs,
                                       std::chrono::milliseconds timeout, const Enqueue &enqueue,
                                       const After &after = nullptr, int peer = -1);
    std::shared_ptr<const CollectiveDescription>
    describeCollective(const char *what, at::ScalarType dtype, int64_t in_elems, int64_t out_elems,
                       int peer) const;
    std::shared_ptr<CommState> ensureComm(c10::DeviceIndex device);
    // Keeps a temporary of an enqueue function alive until its collective is enqueued (the end
    // of a coalesced group); outside coalescing the collective is enqueued already.
    void keep(const at::Tensor &t);
    std::chrono::milliseconds opTimeout(std::chrono::milliseconds requested) const;

    c10::intrusive_ptr<c10d::Store> store_;
    std::chrono::milliseconds timeout_;
    std::string group_name_;
    int global_rank_start_ = 0;          // record_param_comms: the group's first global rank
    int global_rank_stride_ = 1;         // and the stride between them (-1: not evenly spaced)
    std::vector<int64_t> global_ranks_;  // the group's ranks in the default group, by group rank
    int64_t profiled_seq_ = 0;           // collectives issued, as torch.profiler numbers them
    mutable std::recursive_mutex mutex_; // one thread at a time in the communicator
    std::shared_ptr<CommState> comm_;

    struct Coalescing {
        bool active = false;
        bool group_open = false; // hal_group_begin was called (after the communicator exists)
        std::thread::id thread;  // HAL groups are per thread
        std::shared_ptr<Completion> completion;
        std::vector<at::Tensor> outputs;
        std::vector<at::Tensor> inputs; // recorded on the stream once the group is enqueued
        std::vector<at::Tensor> temporaries;
        std::vector<After> after;
        std::vector<std::pair<c10::intrusive_ptr<c10::ivalue::Future>, std::vector<at::Tensor>>>
            futures;
        std::optional<c10::Device> device;
    } coalescing_;
};

} // namespace torch_hal
