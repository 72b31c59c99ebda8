// SPDX-License-Identifier: Apache-2.0
// Native PrivateUse1 kernels: what tensors themselves need (creation, copies in every
// direction, resizing, storage (re)binding, views, fill, scalar reads, record_stream). All
// other operators go through the fallback (Fallback.cpp).
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>

#include "aten/Common.h"
#include "runtime/Allocator.h"
#include "runtime/DeviceActivity.h"
#include "runtime/Register.h"

namespace torch_hal
{

at::Tensor wrapDeviceStorage(c10::Storage storage, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                             int64_t storage_offset, caffe2::TypeMeta dtype,
                             c10::DispatchKeySet keys)
{
    auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, dtype);
    t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, storage_offset);
    return t;
}

size_t spanBytes(const at::Tensor &t)
{
    if (t.numel() == 0)
        return 0;
    int64_t extent = 1; // in elements; PyTorch strides are never negative
    for (int64_t d = 0; d < t.dim(); ++d)
        extent += (t.size(d) - 1) * t.stride(d);
    return static_cast<size_t>(extent) * t.itemsize();
}

namespace
{

constexpr c10::DispatchKeySet kDeviceKeys(c10::DispatchKey::PrivateUse1);

// The operators these kernels hand on to the fallback are looked up by name once per call site
// (a function-local static): a lookup costs as much as copying a small tensor.
c10::OperatorHandle findOperator(const char *name, const char *overload)
{
    return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

void runFallback(const c10::OperatorHandle &op, torch::jit::Stack stack)
{
    cpuFallback(op, &stack);
}

// ---- Creation -------------------------------------------------------------------------------

void checkFactoryOptions(std::optional<c10::Layout> layout, std::optional<bool> pin_memory)
{
    TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "torch_hal: only strided ",
                deviceTypeName(), " tensors are supported");
    TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format)
{
    checkFactoryOptions(layout, pin_memory);
    backwardOnCallingThread(); // compiled graphs allocate on the device without the fallback
    const c10::DeviceGuard guard(c10::device_or_default(device));
    return at::detail::empty_generic(size, deviceAllocator(), kDeviceKeys,
                                     c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory)
{
    checkFactoryOptions(layout, pin_memory);
    backwardOnCallingThread();
    const c10::DeviceGuard guard(c10::device_or_default(device));
    return at::detail::empty_strided_generic(size, stride, deviceAllocator(), kDeviceKeys,
                                             c10::dtype_or_default(dtype));
}

} // namespace

at::Tensor emptyStridedOnDevice(c10::IntArrayRef size, c10::IntArrayRef stride,
                                c10::ScalarType dtype, c10::DeviceIndex index)
{
    return empty_strided(size, stride, dtype, std::nullopt, c10::Device(kDeviceType, index),
                         std::nullopt);
}

namespace
{

// ---- Copies ---------------------------------------------------------------------------------

// Same sizes and the same strides wherever they matter (dimensions longer than 1).
bool sameGeometry(const at::Tensor &a, const at::Tensor &b)
{
    if (a.sizes() != b.sizes())
        return false;
    for (int64_t d = 0; d < a.dim(); ++d)
        if (a.size(d) > 1 && a.stride(d) != b.stride(d))
            return false;
    return true;
}

bool bytesOverlap(const at::Tensor &a, const at::Tensor &b)
{
    if (!a.storage().is_alias_of(b.storage()))
        return false;
    auto begin_a = static_cast<const char *>(a.data_ptr());
    auto begin_b = static_cast<const char *>(b.data_ptr());
    return begin_a < begin_b + spanBytes(b) && begin_b < begin_a + spanBytes(a);
}

bool hasPeerCopy(c10::DeviceIndex index)
{
    return (deviceProperties(index).capabilities & HAL_DEVICE_CAP_PEER_COPY) != 0;
}

// A device-to-device copy between two devices, ordered after the work queued on both current
// streams and before work queued on them afterwards (what CUDA's peer copies guarantee).
void peerCopy(void *dst, c10::DeviceIndex dst_index, const void *src, c10::DeviceIndex src_index,
              size_t n)
{
    hal_stream_t src_stream = currentHalStream(src_index);
    hal_stream_t dst_stream = currentHalStream(dst_index);
    if (!hasPeerCopy(src_index) || !hasPeerCopy(dst_index)) {
        c10::DataPtr staging = hostAllocator()->allocate(n);
        TORCH_HAL_CHECK(hal_memcpy_async(staging.get(), src, n, src_stream));
        TORCH_HAL_CHECK(hal_stream_synchronize(src_stream));
        TORCH_HAL_CHECK(hal_memcpy_async(dst, staging.get(), n, dst_stream));
        TORCH_HAL_CHECK(hal_stream_synchronize(dst_stream));
        return;
    }
    hal_event_t src_ready = nullptr;
    hal_event_t copy_done = nullptr;
    TORCH_HAL_CHECK(hal_event_create(halDevice(src_index), HAL_EVENT_FLAG_NONE, &src_ready));
    hal_status_t st = hal_event_create(halDevice(dst_index), HAL_EVENT_FLAG_NONE, &copy_done);
    if (st == HAL_OK)
        st = hal_event_record(src_ready, src_stream);
    if (st == HAL_OK)
        st = hal_stream_wait_event(dst_stream, src_ready);
    if (st == HAL_OK)
        st = hal_memcpy_async(dst, src, n, dst_stream);
    if (st == HAL_OK)
        st = hal_event_record(copy_done, dst_stream);
    if (st == HAL_OK)
        st = hal_stream_wait_event(src_stream, copy_done);
    // Streams already waiting on an event are not affected by its destruction.
    hal_event_destroy(src_ready);
    if (copy_done != nullptr)
        hal_event_destroy(copy_done);
    TORCH_HAL_CHECK(st);
}

// Work on host-addressable device memory runs on the calling thread once the current stream's
// earlier work is done, as the fallback runs every other operator there: queued on the stream,
// it would cost a hand-off to the stream's worker that the next operator (which synchronizes
// before it runs) waits for, tens of microseconds where the worker sleeps. Reported to
// torch.profiler as the device's activity on that stream, issued by "memcpy" or "memset".
template <typename Work>
void onCallingThread(DeviceActivityKind kind, const char *name, const char *detail,
                     c10::DeviceIndex index, int64_t bytes, Work work)
{
    synchronizeCurrentStream(index);
    if (!deviceActivityRecording()) {
        work();
        return;
    }
    const int64_t start = deviceActivityNow();
    work();
    const int64_t end = deviceActivityNow();
    const char *call = kind == DeviceActivityKind::Memset ? "memset" : "memcpy";
    recordDeviceActivity(
        { kind, name, currentStream(index), start, end, call, start, end, bytes, detail });
}

// Copies the bytes of `src` to `dst` (same dtype and geometry, both dense). Device work is
// ordered on the current streams (on one host-addressable device: after their work, on the
// calling thread). Host memory takes part asynchronously only when
// non_blocking is set and it is pinned; pageable memory is always done with on return.
void copyDenseBytes(const at::Tensor &dst, const at::Tensor &src, bool non_blocking)
{
    size_t n = static_cast<size_t>(dst.numel()) * dst.itemsize();
    if (n == 0)
        return;
    void *dst_ptr = dst.data_ptr();
    const void *src_ptr = src.const_data_ptr();
    bool dst_dev = isDeviceTensor(dst);
    bool src_dev = isDeviceTensor(src);
    const auto bytes = static_cast<int64_t>(n);
    const at::Tensor &either = dst_dev ? dst : src;
    if (hostAddressable(either.device().index()) &&
        (!dst_dev || !src_dev || dst.device() == src.device())) {
        const hal_copy_direction_t direction = hal_copy_direction_of(dst_dev, src_dev, true);
        onCallingThread(DeviceActivityKind::Memcpy, hal_copy_activity_name(direction),
                        hal_copy_direction_name(direction), either.device().index(), bytes,
                        [&] { std::memmove(dst_ptr, src_ptr, n); });
        return;
    }
    if (dst_dev && src_dev) {
        c10::DeviceIndex d = dst.device().index();
        c10::DeviceIndex s = src.device().index();
        const hal_copy_direction_t direction = hal_copy_direction_of(true, true, d == s);
        StreamActivity activity(DeviceActivityKind::Memcpy, hal_copy_activity_name(direction),
                                currentStream(d), bytes, hal_copy_direction_name(direction));
        if (d == s)
            TORCH_HAL_CHECK(hal_memcpy_async(dst_ptr, src_ptr, n, currentHalStream(d)));
        else
            peerCopy(dst_ptr, d, src_ptr, s, n);
        activity.end();
        return;
    }
    const at::Tensor &dev = dst_dev ? dst : src;
    const at::Tensor &host = dst_dev ? src : dst;
    c10::Stream stream = currentStream(dev.device().index());
    hal_stream_t hal_stream = halStream(stream);
    const hal_copy_direction_t direction = hal_copy_direction_of(dst_dev, src_dev, false);
    StreamActivity activity(DeviceActivityKind::Memcpy, hal_copy_activity_name(direction), stream,
                            bytes, hal_copy_direction_name(direction));
    TORCH_HAL_CHECK(hal_memcpy_async(dst_ptr, src_ptr, n, hal_stream));
    activity.end();
    if (non_blocking) {
        const c10::DataPtr &host_data = host.storage().data_ptr();
        if (isHostBlock(host_data)) {
            // The pinned block must not be reused before the copy ran.
            recordHostBlockOnStream(host_data.get_context(), stream);
            return;
        }
        if (isPinnedPointer(host_data.get()))
            return;
    }
    TORCH_HAL_CHECK(hal_stream_synchronize(hal_stream));
}

// A CPU tensor over a host-addressable device tensor's memory (same bytes, geometry, conj and
// neg bits); the device tensor keeps the memory alive while it is used.
at::Tensor aliasOnCpu(const at::Tensor &t)
{
    c10::StorageImpl *dev = t.storage().unsafeGetStorageImpl();
    auto storage = c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), dev->nbytes(),
        c10::DataPtr(const_cast<void *>(dev->data()), c10::Device(c10::DeviceType::CPU)),
        /*allocator=*/nullptr, /*resizable=*/false);
    auto cpu = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(std::move(storage)), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    cpu.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    if (t.is_conj())
        cpu._set_conj(true);
    if (t.is_neg())
        cpu._set_neg(true);
    return cpu;
}

at::Tensor copy_from(const at::Tensor &self, const at::Tensor &dst, bool non_blocking)
{
    const at::Tensor &src = self;
    if (dst.numel() == 0)
        return dst;
    bool plain = src.dtype() == dst.dtype() && src.is_conj() == dst.is_conj() &&
                 src.is_neg() == dst.is_neg();
    if (plain && sameGeometry(src, dst) && src.is_non_overlapping_and_dense() &&
        dst.is_non_overlapping_and_dense() && !bytesOverlap(src, dst)) {
        copyDenseBytes(dst, src, non_blocking);
        return dst;
    }
    bool src_dev = isDeviceTensor(src);
    bool dst_dev = isDeviceTensor(dst);
    bool plain_dst = !dst.is_conj() && !dst.is_neg();
    bool plain_src = !src.is_conj() && !src.is_neg();
    // Devices without host access: convert on the host, then move the bytes once.
    if (dst_dev && !src_dev && !hostAddressable(dst.device().index()) &&
        dst.is_non_overlapping_and_dense() && plain_dst) {
        at::Tensor staged = at::empty_strided(dst.sizes(), dst.strides(),
                                              dst.options().device(c10::DeviceType::CPU));
        staged.copy_(src);
        copyDenseBytes(dst, staged, /*non_blocking=*/false);
        return dst;
    }
    if (src_dev && !dst_dev && !hostAddressable(src.device().index()) &&
        src.is_non_overlapping_and_dense() && plain_src) {
        at::Tensor staged = at::empty_strided(src.sizes(), src.strides(),
                                              src.options().device(c10::DeviceType::CPU));
        copyDenseBytes(staged, src, /*non_blocking=*/false);
        dst.copy_(staged);
        return dst;
    }
    // A conversion within one host-addressable device (autocast's casts, .float()): the CPU's
    // copy_ on CPU tensors aliasing both, once the stream's earlier work is done; what the
    // fallback would do, without its bookkeeping for arbitrary operators.
    if (src_dev && dst_dev && src.device() == dst.device() &&
        hostAddressable(dst.device().index()) && !src._is_zerotensor() && !dst._is_zerotensor()) {
        synchronizeCurrentStream(dst.device().index());
        aliasOnCpu(dst).copy_(aliasOnCpu(src));
        return dst;
    }
    // Everything else (broadcasting between devices, layouts that differ, overlap, memory the
    // host cannot address): CPU's copy_ through the fallback, in place where the device allows.
    static const c10::OperatorHandle copy = findOperator("aten::copy_", "");
    runFallback(copy, { dst, src, non_blocking });
    return dst;
}

// aten::copy_ where either side is a device tensor. PyTorch's own copy_ sends every such copy on
// to _copy_from through the dispatcher, a second operator per copy (a third of the bench
// model's training step's copies: autocast's casts); this calls it directly, after the checks
// copy_ makes first (aten/src/ATen/native/Copy.cpp).
at::Tensor &copy_(at::Tensor &self, const at::Tensor &src, bool non_blocking)
{
    TORCH_CHECK(self.defined(), "self is undefined");
    TORCH_CHECK(src.defined(), "src is undefined");
    TORCH_CHECK(!self._is_zerotensor(), "ZeroTensors are immutable. Please materialize the tensor "
                                        "using `.clone()`, if you want a mutable tensor.");
    if (src._is_zerotensor())
        return self.zero_();
    if (self.is_same(src) || self.is_meta())
        return self;
    TORCH_CHECK_NOT_IMPLEMENTED(!src.is_meta(), "Cannot copy out of meta tensor; no data!");
    copy_from(src, self, non_blocking);
    return self;
}

void resizeImpl(c10::TensorImpl *self, c10::IntArrayRef size, at::OptionalIntArrayRef stride);

at::Tensor copy_from_and_resize(const at::Tensor &self, const at::Tensor &dst)
{
    {
        const c10::DeviceGuard guard(dst.device());
        resizeImpl(dst.unsafeGetTensorImpl(), self.sizes(), std::nullopt);
    }
    return copy_from(self, dst, false);
}

// ---- Resizing and storage binding -------------------------------------------------------------

void resizeImpl(c10::TensorImpl *self, c10::IntArrayRef size, at::OptionalIntArrayRef stride)
{
    if (self->sizes() == size && (!stride || self->strides() == stride.value()))
        return;
    const size_t itemsize = self->dtype().itemsize();
    const auto offset = static_cast<size_t>(self->storage_offset());
    size_t nbytes = 0;
    if (stride) {
        self->set_sizes_and_strides(size, *stride);
        nbytes = at::detail::computeStorageNbytes(size, *stride, itemsize, offset);
    } else {
        self->set_sizes_contiguous(size);
        nbytes = at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
    }
    if (self->numel() == 0)
        return;
    const c10::Storage &storage = self->unsafe_storage();
    if (!storage) {
        self->set_storage_keep_dtype(c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                                                  deviceAllocator(), /*resizable=*/true));
    } else if (nbytes > storage.nbytes()) {
        resizeDeviceStorage(storage.unsafeGetStorageImpl(), nbytes);
    }
}

const at::Tensor &resize_(const at::Tensor &self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format)
{
    const c10::DeviceGuard guard(self.device());
    c10::TensorImpl *impl = self.unsafeGetTensorImpl();
    resizeImpl(impl, C10_AS_INTARRAYREF_SLOW(size), std::nullopt);
    if (memory_format) {
        TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ",
                    *memory_format);
        impl->empty_tensor_restride(*memory_format);
    }
    return self;
}

at::Tensor &set_storage(at::Tensor &result, c10::Storage storage, int64_t storage_offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride)
{
    at::native::checkSetStorage(result, storage, storage_offset, size, stride);
    result.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
    at::OptionalIntArrayRef stride_opt =
        stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt;
    const c10::DeviceGuard guard(result.device());
    resizeImpl(result.unsafeGetTensorImpl(), size, stride_opt);
    return result;
}

at::Tensor &set_empty(at::Tensor &result)
{
    const c10::DeviceGuard guard(result.device());
    c10::Storage storage(c10::Storage::use_byte_size_t(), 0, deviceAllocator(), true);
    return set_storage(result, std::move(storage), 0, { 0 }, {});
}

// ---- Values ---------------------------------------------------------------------------------

at::Tensor &fill_scalar(at::Tensor &self, const at::Scalar &value)
{
    if (self.numel() == 0)
        return self;
    if (!hostAddressable(self.device().index()) && self.is_non_overlapping_and_dense() &&
        !self.is_conj() && !self.is_neg()) {
        // Filled in pinned memory and copied in stream order, without waiting for the
        // stream's earlier work (as a fill kernel would not): autograd's first gradient
        // (ones_like) would otherwise drain the stream behind a compiled forward.
        // The block comes from this device's pinned allocator, so that it can be held for
        // the copy on the stream (whichever accelerator PyTorch would pin memory for).
        const c10::DeviceGuard guard(self.device());
        at::Tensor staged = at::detail::empty_strided_generic(
            self.sizes(), self.strides(), hostAllocator(),
            c10::DispatchKeySet(c10::DispatchKey::CPU), self.scalar_type());
        staged.fill_(value);
        copyDenseBytes(self, staged, /*non_blocking=*/true);
        return self;
    }
    static const c10::OperatorHandle fill = findOperator("aten::fill_", "Scalar");
    runFallback(fill, { self, value });
    return self;
}

at::Tensor &zero_(at::Tensor &self)
{
    if (self.numel() == 0)
        return self;
    if (self.is_non_overlapping_and_dense()) {
        // All-zero bytes are zero in every dtype: one memset, ordered on the current stream.
        const c10::DeviceGuard guard(self.device());
        size_t n = static_cast<size_t>(self.numel()) * self.itemsize();
        c10::DeviceIndex index = self.device().index();
        if (hostAddressable(index)) {
            void *data = self.data_ptr();
            onCallingThread(DeviceActivityKind::Memset, HAL_ACTIVITY_MEMSET_NAME, nullptr, index,
                            static_cast<int64_t>(n), [&] { std::memset(data, 0, n); });
            return self;
        }
        c10::Stream stream = currentStream(self.device().index());
        StreamActivity activity(DeviceActivityKind::Memset, HAL_ACTIVITY_MEMSET_NAME, stream,
                                static_cast<int64_t>(n)); // torch.profiler
        TORCH_HAL_CHECK(hal_memset_async(self.data_ptr(), 0, n, halStream(stream)));
        activity.end();
        return self;
    }
    static const c10::OperatorHandle zero = findOperator("aten::zero_", "");
    runFallback(zero, { self });
    return self;
}

at::Scalar local_scalar_dense(const at::Tensor &self)
{
    TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
                " elements cannot be converted to Scalar");
    if (self.is_conj() || self.is_neg()) {
        torch::jit::Stack stack{ self };
        cpuFallback(c10::Dispatcher::singleton().findSchemaOrThrow("aten::_local_scalar_dense", ""),
                    &stack);
        return stack.back().toScalar();
    }
    c10::DeviceIndex index = self.device().index();
    if (hostAddressable(index)) {
        // Read in place once the stream's earlier work is done: no copy through the stream
        // (a hand-off to its worker and back for one element).
        synchronizeCurrentStream(index);
        return at::native::_local_scalar_dense_cpu(aliasOnCpu(self));
    }
    at::Tensor host = at::empty({}, self.options().device(c10::DeviceType::CPU));
    hal_stream_t stream = currentHalStream(index);
    TORCH_HAL_CHECK(
        hal_memcpy_async(host.data_ptr(), self.const_data_ptr(), self.itemsize(), stream));
    TORCH_HAL_CHECK(hal_stream_synchronize(stream));
    return at::native::_local_scalar_dense_cpu(host);
}

void record_stream(at::Tensor &self, c10::Stream stream)
{
    TORCH_CHECK(stream.device_type() == kDeviceType, "torch_hal: record_stream expects a ",
                deviceTypeName(), " stream, got one of ", stream.device());
    recordDeviceBlockOnStream(self.storage().data_ptr(), stream);
}

// ---- Convolutions ------------------------------------------------------------------------------
// at::convolution sends backends other than CPU/CUDA/MKLDNN to convolution_overrideable, whose
// default kernel throws. Run PyTorch's generic convolution on the CPU instead (it picks the CPU
// algorithms), through the fallback.

at::Tensor convolution_overrideable(const at::Tensor &input, const at::Tensor &weight,
                                    const std::optional<at::Tensor> &bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool transposed, c10::IntArrayRef output_padding,
                                    int64_t groups)
{
    torch::jit::Stack stack{ input,         weight,         bias,       stride.vec(),
                             padding.vec(), dilation.vec(), transposed, output_padding.vec(),
                             groups };
    cpuFallback(c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", ""), &stack);
    return stack.back().toTensor();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor &grad_output, const at::Tensor &input, const at::Tensor &weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask)
{
    std::optional<std::vector<int64_t>> bias_sizes;
    if (output_mask[2])
        bias_sizes = std::vector<int64_t>{ transposed ? weight.size(1) * groups : weight.size(0) };
    c10::List<bool> mask({ output_mask[0], output_mask[1], output_mask[2] });
    torch::jit::Stack stack{ grad_output,    input,        weight,
                             bias_sizes,     stride.vec(), padding.vec(),
                             dilation.vec(), transposed,   output_padding.vec(),
                             groups,         mask };
    cpuFallback(c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", ""),
                &stack);
    return { stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor() };
}

// ---- Shallow copies between the CPU and the device ------------------------------------------

// Module.to(), .cuda()-style moves and `tensor.data = other` keep the tensor object (and so a
// module's Parameter objects: weights tied across modules, optimizers made before the move)
// only where _has_compatible_shallow_copy_type says the two tensors' types are compatible;
// otherwise Module._apply makes a new Parameter per module, and weights tied across two modules
// (GPT-2's embedding and output layer) become two parameters on the device. PyTorch 2.13's
// TensorImpl answer lists the dense CPU, CUDA, MPS, HIP, XPU, HPU and MTIA tensors, not
// PrivateUse1 ones, and leaves PrivateUse1 backends to register this operator: the device's
// dense tensors are compatible with each other and with dense CPU tensors, as CUDA's are.
bool hasCompatibleShallowCopyType(const at::Tensor &self, const at::Tensor &from)
{
    if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()))
        return true;
    auto dense = [](const at::Tensor &t) {
        constexpr auto backends = c10::DispatchKeySet(
            { c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit });
        c10::DispatchKeySet keys = t.key_set();
        return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && keys.has_any(backends);
    };
    return dense(self) && dense(from);
}

// ---- Quantized tensors: refused -------------------------------------------------------------

// A quantized tensor needs the QuantizedPrivateUse1 kernels, which neither PyTorch nor the
// fallback has: one would be created and then fail on every use. Creating one fails instead.
void refuseQuantized(const c10::OperatorHandle &op, torch::jit::Stack * /*stack*/)
{
    TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_hal (backend '", backendName(),
                                "'): ", op.schema().name(),
                                ": quantized tensors are not supported on ", deviceTypeName(),
                                " devices; quantize on the CPU (tensor.cpu()) instead");
}

constexpr const char *kQuantizedFactories[] = {
    "quantize_per_tensor",
    "quantize_per_tensor.tensor_qparams",
    "quantize_per_tensor.tensors",
    "quantize_per_tensor_dynamic",
    "quantize_per_channel",
    "_empty_affine_quantized",
    "_empty_per_channel_affine_quantized",
    "empty_quantized",
};

} // namespace

void registerOperators()
{
    static auto *m = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                        __FILE__, __LINE__);
    m->impl("empty.memory_format", TORCH_FN(empty_memory_format));
    m->impl("empty_strided", TORCH_FN(empty_strided));
    m->impl("copy_", TORCH_FN(copy_));
    m->impl("_copy_from", TORCH_FN(copy_from));
    m->impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
    m->impl("resize_", TORCH_FN(resize_));
    m->impl("set_", TORCH_FN(set_empty));
    m->impl("set_.source_Storage", TORCH_FN(at::native::set_));
    m->impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
    m->impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
    m->impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
    m->impl("view", TORCH_FN(at::native::view));
    m->impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
    m->impl("unfold", TORCH_FN(at::native::unfold));
    m->impl("view_as_real", TORCH_FN(at::native::view_as_real));
    m->impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
    m->impl("fill_.Scalar", TORCH_FN(fill_scalar));
    m->impl("zero_", TORCH_FN(zero_));
    m->impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
    m->impl("record_stream", TORCH_FN(record_stream));
    m->impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
    m->impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
    m->impl("_has_compatible_shallow_copy_type", TORCH_FN(hasCompatibleShallowCopyType));
    for (const char *name : kQuantizedFactories)
        m->impl(name, torch::CppFunction::makeFromBoxedFunction<&refuseQuantized>());
    // What dispatches on a quantized device tensor, such as the empty_quantized that
    // quantized_cpu_tensor.to("<device>") calls, is refused the same way.
    static auto *quantized = new torch::Library(
        torch::Library::IMPL, "_", c10::DispatchKey::QuantizedPrivateUse1, __FILE__, __LINE__);
    quantized->fallback(torch::CppFunction::makeFromBoxedFunction<&refuseQuantized>());

    // The conjugate and negative-bit fallbacks materialise lazily conjugated/negated inputs
    // with clone(), which copies through _copy_from again: endless recursion. The copy kernels
    // honour both bits themselves (like copy_, which those fallbacks already let through).
    for (c10::DispatchKey key : { c10::DispatchKey::Conjugate, c10::DispatchKey::Negative }) {
        auto *bits = new torch::Library(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
        bits->impl("_copy_from", torch::CppFunction::makeFallthrough());
        bits->impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
    }
}

} // namespace torch_hal
