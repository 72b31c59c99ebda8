// SPDX-License-Identifier: Apache-2.0
// The torch_hal process group's collectives and point-to-point operations: each checks its
// tensors and enqueues its HAL calls through ProcessGroupHAL::run.
#include "distributed/ProcessGroupHALInternal.h"

#include <algorithm>
#include <numeric>

namespace torch_hal
{

// ---- Collectives --------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::broadcast(std::vector<at::Tensor> &tensors,
                                                          const c10d::BroadcastOptions &opts)
{
    TORCH_CHECK_VALUE(!tensors.empty(), "torch_hal process group: broadcast of no tensors");
    TORCH_CHECK_VALUE(opts.rootTensor == 0, "torch_hal process group: rootTensor must be 0");
    TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_,
                      "torch_hal process group: invalid root rank ", opts.rootRank);
    c10::Device device = tensors[0].device();
    for (const at::Tensor &t : tensors) {
        checkDense(t, "the broadcast tensor");
        checkSameDevice(t, device, "a broadcast tensor");
    }
    const int root = static_cast<int>(opts.rootRank);
    return run(c10d::OpType::BROADCAST, "broadcast", device, tensors, tensors, opts.timeout,
               [&](hal_comm_t comm, hal_stream_t stream) {
                   grouped([&] {
                       for (const at::Tensor &t : tensors) {
                           Payload p = movePayload(t);
                           checkComm(
                               hal_broadcast(p.ptr, p.ptr, p.count, p.dtype, root, comm, stream),
                               "hal_broadcast");
                       }
                   });
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::allreduce(std::vector<at::Tensor> &tensors,
                                                          const c10d::AllreduceOptions &opts)
{
    TORCH_CHECK_VALUE(!tensors.empty(), "torch_hal process group: allreduce of no tensors");
    TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(),
                      "torch_hal process group: sparse allreduce is not supported");
    c10::Device device = tensors[0].device();
    std::vector<at::Tensor> views;
    for (const at::Tensor &t : tensors) {
        checkDense(t, "the allreduce tensor");
        checkSameDevice(t, device, "an allreduce tensor");
        views.push_back(reducible(t, opts.reduceOp));
    }
    std::vector<hal_redop_t> ops;
    for (const at::Tensor &v : views)
        ops.push_back(halRedop(opts.reduceOp, v.scalar_type()));
    return run(c10d::OpType::ALLREDUCE, "allreduce", device, tensors, tensors, opts.timeout,
               [&](hal_comm_t comm, hal_stream_t stream) {
                   grouped([&] {
                       for (size_t i = 0; i < views.size(); ++i) {
                           Payload p = reducePayload(views[i]);
                           checkComm(
                               hal_allreduce(p.ptr, p.ptr, p.count, p.dtype, ops[i], comm, stream),
                               "hal_allreduce");
                       }
                   });
               });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                     const c10d::AllreduceCoalescedOptions &opts)
{
    // allreduce() already enqueues its tensors as one HAL group.
    c10d::AllreduceOptions single;
    single.reduceOp = opts.reduceOp;
    single.timeout = opts.timeout;
    single.asyncOp = opts.asyncOp;
    auto work = allreduce(tensors, single);
    return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::reduce(std::vector<at::Tensor> &tensors,
                                                       const c10d::ReduceOptions &opts)
{
    checkSingle(tensors, "reduce");
    TORCH_CHECK_VALUE(opts.rootTensor == 0, "torch_hal process group: rootTensor must be 0");
    TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_,
                      "torch_hal process group: invalid root rank ", opts.rootRank);
    checkDense(tensors[0], "the reduce tensor");
    at::Tensor view = reducible(tensors[0], opts.reduceOp);
    hal_redop_t op = halRedop(opts.reduceOp, view.scalar_type());
    const int root = static_cast<int>(opts.rootRank);
    return run(c10d::OpType::REDUCE, "reduce", view.device(), tensors, tensors, opts.timeout,
               [&](hal_comm_t comm, hal_stream_t stream) {
                   Payload p = reducePayload(view);
                   checkComm(hal_reduce(p.ptr, p.ptr, p.count, p.dtype, op, root, comm, stream),
                             "hal_reduce");
               });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                           std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &opts)
{
    checkSingle(inputs, "allgather");
    TORCH_CHECK_VALUE(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_),
                      "torch_hal process group: allgather needs one list of ", size_,
                      " output tensors");
    return allgather_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::allgather_coalesced(std::vector<std::vector<at::Tensor>> &output_lists,
                                     std::vector<at::Tensor> &inputs,
                                     const c10d::AllgatherOptions &opts)
{
    TORCH_CHECK_VALUE(!inputs.empty() && output_lists.size() == inputs.size(),
                      "torch_hal process group: allgather needs one output list per input");
    c10::Device device = inputs[0].device();
    for (size_t i = 0; i < inputs.size(); ++i) {
        checkContiguous(inputs[i], "the allgather input");
        checkSameDevice(inputs[i], device, "an allgather input");
        TORCH_CHECK_VALUE(output_lists[i].size() == static_cast<size_t>(size_),
                          "torch_hal process group: allgather needs ", size_,
                          " output tensors per input, got ", output_lists[i].size());
        for (const at::Tensor &o : output_lists[i]) {
            checkDeviceTensor(o, "an allgather output");
            checkSameDevice(o, device, "an allgather output");
            TORCH_CHECK_VALUE(o.numel() == inputs[i].numel() &&
                                  o.scalar_type() == inputs[i].scalar_type(),
                              "torch_hal process group: allgather outputs must have the input's "
                              "size and dtype");
        }
    }
    // Gathered into one flat temporary per input, then copied out (on the communication
    // stream, after the collective).
    auto flats = std::make_shared<std::vector<at::Tensor>>();
    std::vector<at::Tensor> all_outputs = flatten(output_lists);
    return run(
        c10d::OpType::ALLGATHER, "allgather", device, inputs, all_outputs, opts.timeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            for (const at::Tensor &in : inputs)
                flats->push_back(at::empty({ size_, in.numel() }, in.options()));
            grouped([&] {
                for (size_t i = 0; i < inputs.size(); ++i) {
                    Payload src = movePayload(inputs[i]);
                    checkComm(hal_allgather(src.ptr, (*flats)[i].data_ptr(), src.count, src.dtype,
                                            comm, stream),
                              "hal_allgather");
                }
            });
        },
        [flats, output_lists] {
            for (size_t i = 0; i < output_lists.size(); ++i)
                for (size_t r = 0; r < output_lists[i].size(); ++r)
                    output_lists[i][r].copy_(
                        (*flats)[i][static_cast<int64_t>(r)].view(output_lists[i][r].sizes()));
        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::_allgather_base(at::Tensor &output,
                                                                at::Tensor &input,
                                                                const c10d::AllgatherOptions &opts)
{
    std::vector<at::Tensor> outputs{ output }, inputs{ input };
    return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                 std::vector<at::Tensor> &inputs,
                                                 const c10d::AllgatherOptions &opts)
{
    TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(),
                      "torch_hal process group: all_gather_into_tensor needs one output per "
                      "input");
    c10::Device device = inputs[0].device();
    for (size_t i = 0; i < inputs.size(); ++i) {
        checkContiguous(inputs[i], "the all_gather_into_tensor input");
        checkContiguous(outputs[i], "the all_gather_into_tensor output");
        checkSameDevice(inputs[i], device, "an all_gather_into_tensor input");
        checkSameDevice(outputs[i], device, "an all_gather_into_tensor output");
        TORCH_CHECK_VALUE(outputs[i].scalar_type() == inputs[i].scalar_type(),
                          "torch_hal process group: all_gather_into_tensor output and input "
                          "dtypes differ");
        TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * size_,
                          "torch_hal process group: all_gather_into_tensor output must have "
                          "world_size (",
                          size_, ") times the input's elements, got ", outputs[i].numel(),
                          " for an input of ", inputs[i].numel());
    }
    return run(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", device, inputs, outputs,
               opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                   grouped([&] {
                       for (size_t i = 0; i < inputs.size(); ++i) {
                           Payload src = movePayload(inputs[i]);
                           checkComm(hal_allgather(src.ptr, outputs[i].data_ptr(), src.count,
                                                   src.dtype, comm, stream),
                                     "hal_allgather");
                       }
                   });
               });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::reduce_scatter(std::vector<at::Tensor> &outputs,
                                std::vector<std::vector<at::Tensor>> &inputs,
                                const c10d::ReduceScatterOptions &opts)
{
    checkSingle(outputs, "reduce_scatter");
    TORCH_CHECK_VALUE(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_),
                      "torch_hal process group: reduce_scatter needs one list of ", size_,
                      " input tensors");
    at::Tensor output = outputs[0];
    checkContiguous(output, "the reduce_scatter output");
    c10::Device device = output.device();
    for (const at::Tensor &in : inputs[0]) {
        checkDeviceTensor(in, "a reduce_scatter input");
        checkSameDevice(in, device, "a reduce_scatter input");
        TORCH_CHECK_VALUE(in.numel() == output.numel() && in.scalar_type() == output.scalar_type(),
                          "torch_hal process group: reduce_scatter inputs must have the output's "
                          "size and dtype");
    }
    at::Tensor out_view = reducible(output, opts.reduceOp);
    hal_redop_t op = halRedop(opts.reduceOp, out_view.scalar_type());
    std::vector<at::Tensor> input_list = inputs[0];
    return run(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", device, input_list, outputs,
               opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                   // The inputs are packed into one flat temporary first (on this stream).
                   at::Tensor flat = at::empty({ size_, output.numel() }, output.options());
                   for (int r = 0; r < size_; ++r)
                       flat[r].copy_(input_list[static_cast<size_t>(r)].reshape({ -1 }));
                   keep(flat);
                   at::Tensor flat_view = reducible(flat, opts.reduceOp);
                   Payload dst = reducePayload(out_view);
                   checkComm(hal_reduce_scatter(flat_view.data_ptr(), dst.ptr, dst.count, dst.dtype,
                                                op, comm, stream),
                             "hal_reduce_scatter");
               });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                      const c10d::ReduceScatterOptions &opts)
{
    std::vector<at::Tensor> outputs{ output }, inputs{ input };
    return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                 std::vector<at::Tensor> &inputs,
                                                 const c10d::ReduceScatterOptions &opts)
{
    TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(),
                      "torch_hal process group: reduce_scatter_tensor needs one output per input");
    c10::Device device = outputs[0].device();
    std::vector<at::Tensor> in_views, out_views;
    std::vector<hal_redop_t> ops;
    for (size_t i = 0; i < inputs.size(); ++i) {
        checkContiguous(inputs[i], "the reduce_scatter_tensor input");
        checkContiguous(outputs[i], "the reduce_scatter_tensor output");
        checkSameDevice(inputs[i], device, "a reduce_scatter_tensor input");
        checkSameDevice(outputs[i], device, "a reduce_scatter_tensor output");
        TORCH_CHECK_VALUE(outputs[i].scalar_type() == inputs[i].scalar_type(),
                          "torch_hal process group: reduce_scatter_tensor output and input "
                          "dtypes differ");
        TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * size_,
                          "torch_hal process group: reduce_scatter_tensor input must have "
                          "world_size (",
                          size_, ") times the output's elements, got ", inputs[i].numel(),
                          " for an output of ", outputs[i].numel());
        in_views.push_back(reducible(inputs[i], opts.reduceOp));
        out_views.push_back(reducible(outputs[i], opts.reduceOp));
        ops.push_back(halRedop(opts.reduceOp, out_views.back().scalar_type()));
    }
    return run(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", device, inputs, outputs,
               opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                   grouped([&] {
                       for (size_t i = 0; i < in_views.size(); ++i) {
                           Payload dst = reducePayload(out_views[i]);
                           checkComm(hal_reduce_scatter(in_views[i].data_ptr(), dst.ptr, dst.count,
                                                        dst.dtype, ops[i], comm, stream),
                                     "hal_reduce_scatter");
                       }
                   });
               });
}

namespace
{

// Elements per index of dimension 0.
int64_t rowElements(const at::Tensor &t)
{
    if (t.dim() == 0)
        return 1;
    int64_t n = 1;
    for (int64_t d = 1; d < t.dim(); ++d)
        n *= t.size(d);
    return n;
}

size_t unitsPerElement(const at::Tensor &t, const Payload &p)
{
    return t.numel() == 0 ? 1 : p.count / static_cast<size_t>(t.numel());
}

// Split sizes along dimension 0 (an empty list: equal splits), checked against the tensor.
std::vector<int64_t> splits(const std::vector<int64_t> &given, const at::Tensor &t, int size,
                            const char *what)
{
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (given.empty()) {
        TORCH_CHECK_VALUE(rows % size == 0, "torch_hal process group: all_to_all ", what, " has ",
                          rows, " rows, not divisible by the world size ", size);
        return std::vector<int64_t>(static_cast<size_t>(size), rows / size);
    }
    TORCH_CHECK_VALUE(given.size() == static_cast<size_t>(size), "torch_hal process group: ", what,
                      " split sizes must have world_size (", size, ") entries, got ", given.size());
    int64_t total = 0;
    for (int64_t s : given) {
        TORCH_CHECK_VALUE(s >= 0, "torch_hal process group: negative split size");
        total += s;
    }
    TORCH_CHECK_VALUE(total == rows, "torch_hal process group: ", what, " split sizes add up to ",
                      total, ", but dimension 0 has ", rows);
    return given;
}

} // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::alltoall_base(
    at::Tensor &output, at::Tensor &input, std::vector<int64_t> &output_split_sizes,
    std::vector<int64_t> &input_split_sizes, const c10d::AllToAllOptions &opts)
{
    checkContiguous(input, "the all_to_all input");
    checkContiguous(output, "the all_to_all output");
    c10::Device device = input.device();
    checkSameDevice(output, device, "the all_to_all output");
    TORCH_CHECK_VALUE(input.scalar_type() == output.scalar_type(),
                      "torch_hal process group: all_to_all output and input dtypes differ");
    const bool equal = output_split_sizes.empty() && input_split_sizes.empty();
    std::vector<at::Tensor> inputs{ input }, outputs{ output };
    if (equal) {
        TORCH_CHECK_VALUE(input.numel() == output.numel() && input.numel() % size_ == 0,
                          "torch_hal process group: all_to_all with equal splits needs input "
                          "and output of the same size, divisible by the world size");
        return run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", device, inputs, outputs,
                   opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                       Payload src = movePayload(input);
                       checkComm(hal_alltoall(src.ptr, output.data_ptr(), src.count / size_,
                                              src.dtype, comm, stream),
                                 "hal_alltoall");
                   });
    }
    // Unequal splits: one HAL group of sends and receives, one pair per peer.
    std::vector<int64_t> in_splits = splits(input_split_sizes, input, size_, "input");
    std::vector<int64_t> out_splits = splits(output_split_sizes, output, size_, "output");
    const int64_t in_row = rowElements(input), out_row = rowElements(output);
    return run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", device, inputs, outputs,
               opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                   Payload in = movePayload(input), out = movePayload(output);
                   // HAL elements per tensor element: 1, or the element size when the payload
                   // moves bytes.
                   const size_t in_unit = unitsPerElement(input, in);
                   const size_t out_unit = unitsPerElement(output, out);
                   auto *src = static_cast<char *>(in.ptr);
                   auto *dst = static_cast<char *>(out.ptr);
                   grouped([&] {
                       int64_t in_off = 0, out_off = 0;
                       for (int r = 0; r < size_; ++r) {
                           const int64_t n_in = in_splits[static_cast<size_t>(r)] * in_row;
                           const int64_t n_out = out_splits[static_cast<size_t>(r)] * out_row;
                           if (n_in > 0)
                               checkComm(hal_send(src + in_off * input.element_size(),
                                                  static_cast<size_t>(n_in) * in_unit, in.dtype, r,
                                                  comm, stream),
                                         "hal_send");
                           if (n_out > 0)
                               checkComm(hal_recv(dst + out_off * output.element_size(),
                                                  static_cast<size_t>(n_out) * out_unit, out.dtype,
                                                  r, comm, stream),
                                         "hal_recv");
                           in_off += n_in;
                           out_off += n_out;
                       }
                   });
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::alltoall(std::vector<at::Tensor> &outputs,
                                                         std::vector<at::Tensor> &inputs,
                                                         const c10d::AllToAllOptions &opts)
{
    TORCH_CHECK_VALUE(outputs.size() == static_cast<size_t>(size_) &&
                          inputs.size() == static_cast<size_t>(size_),
                      "torch_hal process group: all_to_all needs world_size (", size_,
                      ") input and output tensors");
    c10::Device device = inputs[0].device();
    for (int r = 0; r < size_; ++r) {
        const at::Tensor &in = inputs[static_cast<size_t>(r)];
        const at::Tensor &out = outputs[static_cast<size_t>(r)];
        checkContiguous(in, "an all_to_all input");
        checkContiguous(out, "an all_to_all output");
        checkSameDevice(in, device, "an all_to_all input");
        checkSameDevice(out, device, "an all_to_all output");
        TORCH_CHECK_VALUE(in.scalar_type() == out.scalar_type(),
                          "torch_hal process group: all_to_all output and input dtypes differ");
    }
    return run(
        c10d::OpType::ALLTOALL, "all_to_all", device, inputs, outputs, opts.timeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            grouped([&] {
                for (int r = 0; r < size_; ++r) {
                    const at::Tensor &in = inputs[static_cast<size_t>(r)];
                    const at::Tensor &out = outputs[static_cast<size_t>(r)];
                    if (in.numel() > 0) {
                        Payload p = movePayload(in);
                        checkComm(hal_send(p.ptr, p.count, p.dtype, r, comm, stream), "hal_send");
                    }
                    if (out.numel() > 0) {
                        Payload p = movePayload(out);
                        checkComm(hal_recv(p.ptr, p.count, p.dtype, r, comm, stream), "hal_recv");
                    }
                }
            });
        });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::gather(std::vector<std::vector<at::Tensor>> &outputs,
                        std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts)
{
    checkSingle(inputs, "gather");
    TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_,
                      "torch_hal process group: invalid root rank ", opts.rootRank);
    const int root = static_cast<int>(opts.rootRank);
    const at::Tensor &input = inputs[0];
    checkContiguous(input, "the gather input");
    c10::Device device = input.device();
    std::vector<at::Tensor> gathered;
    if (rank_ == root) {
        TORCH_CHECK_VALUE(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_),
                          "torch_hal process group: gather needs one list of ", size_,
                          " output tensors on the root");
        gathered = outputs[0];
        for (const at::Tensor &o : gathered) {
            checkContiguous(o, "a gather output");
            checkSameDevice(o, device, "a gather output");
            TORCH_CHECK_VALUE(o.numel() == input.numel() && o.scalar_type() == input.scalar_type(),
                              "torch_hal process group: gather outputs must have the input's "
                              "size and dtype");
        }
    } else {
        TORCH_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                          "torch_hal process group: gather outputs are given only on the root");
    }
    return run(
        c10d::OpType::GATHER, "gather", device, inputs, gathered, opts.timeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            Payload in = movePayload(input);
            grouped([&] {
                checkComm(hal_send(in.ptr, in.count, in.dtype, root, comm, stream), "hal_send");
                for (int r = 0; r < static_cast<int>(gathered.size()); ++r) {
                    Payload out = movePayload(gathered[static_cast<size_t>(r)]);
                    checkComm(hal_recv(out.ptr, out.count, out.dtype, r, comm, stream), "hal_recv");
                }
            });
        });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::scatter(std::vector<at::Tensor> &outputs,
                         std::vector<std::vector<at::Tensor>> &inputs,
                         const c10d::ScatterOptions &opts)
{
    checkSingle(outputs, "scatter");
    TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_,
                      "torch_hal process group: invalid root rank ", opts.rootRank);
    const int root = static_cast<int>(opts.rootRank);
    const at::Tensor &output = outputs[0];
    checkContiguous(output, "the scatter output");
    c10::Device device = output.device();
    std::vector<at::Tensor> pieces;
    if (rank_ == root) {
        TORCH_CHECK_VALUE(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_),
                          "torch_hal process group: scatter needs one list of ", size_,
                          " input tensors on the root");
        pieces = inputs[0];
        for (const at::Tensor &p : pieces) {
            checkContiguous(p, "a scatter input");
            checkSameDevice(p, device, "a scatter input");
            TORCH_CHECK_VALUE(p.numel() == output.numel() &&
                                  p.scalar_type() == output.scalar_type(),
                              "torch_hal process group: scatter inputs must have the output's "
                              "size and dtype");
        }
    } else {
        TORCH_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                          "torch_hal process group: scatter inputs are given only on the root");
    }
    return run(
        c10d::OpType::SCATTER, "scatter", device, pieces, outputs, opts.timeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            Payload out = movePayload(output);
            grouped([&] {
                for (int r = 0; r < static_cast<int>(pieces.size()); ++r) {
                    Payload in = movePayload(pieces[static_cast<size_t>(r)]);
                    checkComm(hal_send(in.ptr, in.count, in.dtype, r, comm, stream), "hal_send");
                }
                checkComm(hal_recv(out.ptr, out.count, out.dtype, root, comm, stream), "hal_recv");
            });
        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::send(std::vector<at::Tensor> &tensors, int dst_rank,
                                                     int /*tag*/)
{
    checkSingle(tensors, "send");
    checkContiguous(tensors[0], "the send tensor");
    TORCH_CHECK_VALUE(dst_rank >= 0 && dst_rank < size_,
                      "torch_hal process group: invalid destination rank ", dst_rank);
    const at::Tensor &t = tensors[0];
    return run(
        c10d::OpType::SEND, "send", t.device(), tensors, {}, c10d::kUnsetTimeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            Payload p = movePayload(t);
            checkComm(hal_send(p.ptr, p.count, p.dtype, dst_rank, comm, stream), "hal_send");
        },
        nullptr, dst_rank);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::recv(std::vector<at::Tensor> &tensors, int src_rank,
                                                     int /*tag*/)
{
    checkSingle(tensors, "recv");
    checkContiguous(tensors[0], "the recv tensor");
    TORCH_CHECK_VALUE(src_rank >= 0 && src_rank < size_,
                      "torch_hal process group: invalid source rank ", src_rank);
    const at::Tensor &t = tensors[0];
    return run(
        c10d::OpType::RECV, "recv", t.device(), {}, tensors, c10d::kUnsetTimeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            Payload p = movePayload(t);
            checkComm(hal_recv(p.ptr, p.count, p.dtype, src_rank, comm, stream), "hal_recv");
        },
        nullptr, src_rank);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::recvAnysource(std::vector<at::Tensor> & /*tensors*/,
                                                              int /*tag*/)
{
    notImplemented("torch_hal process group: recv from any source is not supported (HAL "
                   "point-to-point names its peer)");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::barrier(const c10d::BarrierOptions &opts)
{
    c10::DeviceIndex index = -1;
    if (opts.device.has_value() && opts.device->type() == kDeviceType && opts.device->has_index())
        index = opts.device->index();
    else if (!opts.device_ids.empty())
        index = static_cast<c10::DeviceIndex>(opts.device_ids[0]);
    else if (std::shared_ptr<CommState> comm = std::atomic_load(&comm_))
        index = comm->device;
    else if (bound_device_id_.has_value() && bound_device_id_->type() == kDeviceType)
        index = bound_device_id_->index();
    else
        index = currentDevice();
    return run(c10d::OpType::BARRIER, "barrier", c10::Device(kDeviceType, index), {}, {},
               opts.timeout, [](hal_comm_t comm, hal_stream_t stream) {
                   checkComm(hal_barrier(comm, stream), "hal_barrier");
               });
}

} // namespace torch_hal
