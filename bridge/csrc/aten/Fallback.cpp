// SPDX-License-Identifier: Apache-2.0
// The boxed fallback: every operator without a native torch_hal kernel runs its CPU kernel.
//
// Host-addressable devices (device_properties.host_addressable): each device storage an
// argument uses gets a CPU storage that aliases the same bytes, and CPU tensors with the
// arguments' exact geometry are built on it. The kernel then works on device memory in place;
// outputs that view an input become device views of that input's storage, and outputs the
// kernel allocates come from the device allocator (CPU allocations of this thread are routed
// to the device while the kernel runs) and are adopted without a copy.
//
// Other devices: the bytes of each storage an argument uses are staged into pinned host
// memory (the referenced range; the whole storage when the operator writes to it), the kernel
// runs on the host copies, written ranges are copied back and fresh outputs are copied to the
// device. Only the copies in are waited for: those back are queued on the current streams and
// their host buffers held until they ran (FallbackPendingCopies.h). Views of inputs are still
// returned as device views.
//
// Either way in-place, out= (including resizes) and view semantics match the CPU kernel's.
// Its registration is FallbackRegistration.cpp's; where autograd runs its backward and with how
// many intra-op threads, FallbackThreads.cpp's; the generators it lends CPU kernels,
// FallbackGenerators.cpp's; the stand-ins it reuses, FallbackStandIns.cpp's; its counters,
// FallbackStats.cpp's.
#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <typeinfo>
#include <vector>

#include "aten/Common.h"
#include "aten/FallbackContainers.h"
#include "aten/FallbackGenerators.h"
#include "aten/FallbackPendingCopies.h"
#include "aten/FallbackStandIns.h"
#include "aten/FallbackStats.h"
#include "runtime/Allocator.h"
#include "runtime/DeviceActivity.h"

namespace torch_hal
{
namespace
{

constexpr size_t kNoRange = SIZE_MAX;

// A device storage used by the arguments, and the CPU storage the kernel sees instead.
struct Mirror {
    c10::Storage device;
    c10::Storage cpu;
    c10::DeviceIndex index = -1;
    size_t begin = 0;     // byte offset of the CPU storage's first byte in the device storage
    bool written = false; // a mutable argument uses it
    size_t lo = kNoRange, hi = 0;   // bytes the arguments span (device storage offsets)
    size_t wlo = kNoRange, whi = 0; // bytes the mutable arguments span
    const void *cpu_data = nullptr; // to detect kernels that resized the storage
    size_t cpu_nbytes = 0;
    size_t uses = 0;      // arguments (and list elements) in this storage
    size_t first_ref = 0; // refs_ index of the first of them
};

// One device tensor argument (or list element) and its CPU stand-in.
struct Ref {
    size_t arg;
    bool write;
    // Borrowed from the call's arguments where it is one (a copy would cost two atomic
    // reference-count updates), owned where it is a list's element.
    c10::MaybeOwned<at::Tensor> device;
    at::Tensor cpu;
    size_t mirror;
    bool stand_in = false; // cpu is a reusable stand-in (FallbackStandIns.h)
};

bool isGeneratorArgument(const c10::Argument &argument)
{
    const c10::TypePtr &type = argument.real_type();
    if (type->kind() == c10::TypeKind::GeneratorType)
        return true;
    if (auto optional = type->cast<c10::OptionalType>())
        return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
    return false;
}

void extend(size_t &lo, size_t &hi, size_t from, size_t to)
{
    lo = std::min(lo, from);
    hi = std::max(hi, to);
}

class FallbackCall
{
  public:
    FallbackCall(const c10::OperatorHandle &op, torch::jit::Stack *stack)
        : op_(op), schema_(op.schema()), stack_(stack)
    {
    }

    void run()
    {
        g_fallback_counters.calls++;
        collectArguments();
        in_place_ = !devices_.empty();
        for (c10::DeviceIndex d : devices_)
            in_place_ = in_place_ && hostAddressable(d);
        (in_place_ ? g_fallback_counters.in_place_calls : g_fallback_counters.staged_calls)++;
        if (in_place_)
            pool_ = standInPool();
        const bool profiled = deviceActivityRecording();
        int64_t times[4] = {};
        if (profiled)
            times[0] = deviceActivityNow();
        setUpMirrors();
        substituteArguments();
        if (profiled)
            times[1] = deviceActivityNow();
        try {
            runCpuKernel();
        } catch (...) {
            generators_.restore();
            throw;
        }
        if (profiled)
            times[2] = deviceActivityNow();
        generators_.restore();
        writeBackMutations();
        convertReturns();
        finishCopies();
        if (profiled) {
            times[3] = deviceActivityNow();
            reportActivity(times);
        }
        recycleStandIns();
    }

  private:
    // torch.profiler: the operator as the device's kernel (it ran between times[1] and [2]),
    // and on devices staged through host memory the copies before and after it.
    void reportActivity(const int64_t times[4]) const
    {
        c10::DeviceIndex device = target_;
        if (device < 0 && !devices_.empty())
            device = *devices_.begin();
        if (device < 0)
            return;
        const c10::Stream stream = currentStream(device);
        const auto &name = schema_.operator_name();
        const std::string kernel =
            name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
        recordDeviceActivity({ DeviceActivityKind::Kernel, kernel.c_str(), stream, times[1],
                               times[2], "torch_hal operator", times[0], times[3], 0,
                               in_place_ ? "in place on host-addressable device memory"
                                         : "on the host, arguments staged" });
        if (staged_in_ > 0)
            recordDeviceActivity({ DeviceActivityKind::Memcpy, "Memcpy DtoH (staging)", stream,
                                   times[0], times[1], nullptr, 0, 0,
                                   static_cast<int64_t>(staged_in_),
                                   hal_copy_direction_name(HAL_COPY_DTOH) });
        if (staged_out_ > 0)
            recordDeviceActivity({ DeviceActivityKind::Memcpy, "Memcpy HtoD (staging)", stream,
                                   times[2], times[3], nullptr, 0, 0,
                                   static_cast<int64_t>(staged_out_),
                                   hal_copy_direction_name(HAL_COPY_HTOD) });
    }

    const c10::OperatorHandle &op_;
    const c10::FunctionSchema &schema_;
    torch::jit::Stack *stack_;
    bool in_place_ = false;
    size_t args_begin_ = 0;
    c10::DeviceIndex target_ = -1; // device of the results
    DeviceSet devices_;
    c10::SmallVector<c10::IValue, 8> original_args_;
    c10::SmallVector<Ref, 4> refs_;
    c10::SmallVector<Mirror, 4> mirrors_;
    StorageMap<size_t> mirror_of_device_;
    StorageMap<size_t> mirror_of_cpu_;
    StorageMap<c10::Storage> fresh_outputs_;
    c10::SmallVector<size_t, 2> device_args_;
    GeneratorLoans generators_;
    DeviceSet pending_copies_;                // devices whose current stream has H2D copies
    c10::Allocator *cpu_allocator_ = nullptr; // deviceBackedCpuAllocator(cpu_allocator_index_)
    StandInPool *pool_ = nullptr;             // standInPool() where in place
    c10::DeviceIndex cpu_allocator_index_ = -1;
    size_t staged_in_ = 0;  // bytes copied from the device for the kernel
    size_t staged_out_ = 0; // and back

    // Random fills write every element of self and read none of them.
    bool fillsSelf() const
    {
        const auto &name = schema_.operator_name().name;
        return name == "aten::bernoulli_" || name == "aten::uniform_" || name == "aten::normal_" ||
               name == "aten::random_" || name == "aten::exponential_" ||
               name == "aten::geometric_" || name == "aten::log_normal_" || name == "aten::cauchy_";
    }

    // Whether mirror m need not be copied from the device before the kernel: a random fill's
    // self is its only argument in that storage and covers all of it (a dropout mask drawn into
    // a new tensor), so every staged byte is overwritten. Anything else is staged in.
    bool fillsWholeStorage(size_t m) const
    {
        if (!fillsSelf())
            return false;
        const Ref *self = nullptr;
        for (const Ref &ref : refs_) {
            if (ref.mirror != m)
                continue;
            if (self != nullptr || ref.arg != 0 || !ref.write)
                return false;
            self = &ref;
        }
        if (self == nullptr)
            return false;
        const at::Tensor &t = *self->device;
        return t.storage_offset() == 0 && t.is_non_overlapping_and_dense() &&
               static_cast<size_t>(t.numel()) * t.itemsize() == t.storage().nbytes();
    }

    // The only argument in mirror m's storage, when a plain tensor (no zero, conjugate or
    // negative bit): its stand-in may be a reusable one.
    Ref *plainSoleRef(size_t m)
    {
        if (mirrors_[m].uses != 1)
            return nullptr;
        Ref &ref = refs_[mirrors_[m].first_ref];
        const at::Tensor &t = *ref.device;
        return !t._is_zerotensor() && !t.is_conj() && !t.is_neg() ? &ref : nullptr;
    }

    // After the call: stand-ins nothing else refers to serve the thread's next calls.
    void recycleStandIns()
    {
        for (Ref &ref : refs_) {
            if (!ref.stand_in)
                continue;
            mirrors_[ref.mirror].cpu = c10::Storage();
            recycleStandIn(pool_, std::move(ref.cpu));
        }
    }

    // Copies may legitimately mix devices; every other operator must not.
    bool mixesDevices() const
    {
        const auto &name = schema_.operator_name().name;
        return name == "aten::copy_" || name == "aten::_copy_from" ||
               name == "aten::_copy_from_and_resize";
    }

    // `t` is borrowed when `borrow` (it outlives the call: in original_args_ or a list there).
    void addRef(size_t arg, bool write, const at::Tensor &t, bool borrow = false)
    {
        if (!isDeviceTensor(t))
            return;
        TORCH_CHECK(t.layout() == c10::kStrided, "torch_hal: ", schema_.operator_name(), " on a ",
                    t.layout(), " tensor of device '", deviceTypeName(),
                    "' is not supported (only strided tensors are)");
        c10::DeviceIndex index = t.device().index();
        if (target_ < 0)
            target_ = index;
        TORCH_CHECK(index == target_ || mixesDevices(),
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, ",
                    c10::Device(kDeviceType, target_), " and ", t.device(), "! (in ",
                    schema_.operator_name(), ")");
        devices_.insert(index);

        const c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
        const size_t *found = mirror_of_device_.find(impl);
        size_t m;
        if (found == nullptr) {
            m = mirrors_.size();
            Mirror mirror;
            mirror.device = t.storage();
            mirror.index = index;
            mirror.first_ref = refs_.size();
            mirrors_.push_back(std::move(mirror));
            mirror_of_device_.insert(impl, m);
        } else {
            m = *found;
        }
        mirrors_[m].written = mirrors_[m].written || write;
        mirrors_[m].uses++;
        refs_.push_back(Ref{ arg, write,
                             borrow ? c10::MaybeOwned<at::Tensor>::borrowed(t)
                                    : c10::MaybeOwned<at::Tensor>::owned(std::in_place, t),
                             at::Tensor(), m });
    }

    // Staging: the bytes of each storage the arguments span, and those the mutable ones span.
    void measureSpans()
    {
        for (const Ref &ref : refs_) {
            size_t span = spanBytes(*ref.device);
            if (span == 0)
                continue;
            Mirror &mirror = mirrors_[ref.mirror];
            size_t from =
                static_cast<size_t>(ref.device->storage_offset()) * ref.device->itemsize();
            extend(mirror.lo, mirror.hi, from, from + span);
            if (ref.write)
                extend(mirror.wlo, mirror.whi, from, from + span);
        }
    }

    void collectArguments()
    {
        const auto &arguments = schema_.arguments();
        args_begin_ = stack_->size() - arguments.size();
        // Moved, not copied (no reference counts touched): substituteArguments() puts back
        // what the CPU kernel gets.
        original_args_.assign(
            std::make_move_iterator(stack_->begin() + static_cast<std::ptrdiff_t>(args_begin_)),
            std::make_move_iterator(stack_->end()));
        for (size_t i = 0; i < arguments.size(); ++i) {
            const c10::IValue &v = original_args_[i];
            const c10::AliasInfo *alias = arguments[i].alias_info();
            bool write = alias != nullptr && alias->isWrite();
            if (v.isTensor()) {
                addRef(i, write, v.toTensor(), /*borrow=*/true);
            } else if (v.isTensorList() || v.isOptionalTensorList()) {
                // Elements borrowed from the list original_args_ holds.
                const c10::ArrayRef<c10::IValue> elements = v.toListRef();
                refs_.reserve(refs_.size() + elements.size());
                for (const c10::IValue &element : elements)
                    if (element.isTensor())
                        addRef(i, write, element.toTensor(), /*borrow=*/true);
            } else if (v.isDevice() && v.toDevice().type() == kDeviceType) {
                device_args_.push_back(i);
                if (target_ < 0)
                    target_ = v.toDevice().has_index() ? v.toDevice().index() : currentDevice();
            }
        }
        if (target_ < 0)
            target_ = currentDevice();
    }

    void setUpMirrors()
    {
        // CPU code is about to read and write device memory: let queued work finish first.
        // Staged, it reads only what is copied in below (then waited for) and writes host
        // buffers, whose copies back are ordered after the queued work.
        if (in_place_) {
            for (c10::DeviceIndex d : devices_)
                synchronizeCurrentStream(d);
        } else {
            releaseCopiedBuffers();
        }

        if (!in_place_)
            measureSpans();
        DeviceSet staged_devices;
        for (size_t m = 0; m < mirrors_.size(); ++m) {
            Mirror &mirror = mirrors_[m];
            c10::StorageImpl *dev = mirror.device.unsafeGetStorageImpl();
            size_t nbytes = dev->nbytes();
            void *data = const_cast<void *>(dev->data());
            c10::intrusive_ptr<c10::StorageImpl> cpu;
            if (in_place_) {
                if (mirror.index != cpu_allocator_index_) {
                    cpu_allocator_ = deviceBackedCpuAllocator(mirror.index);
                    cpu_allocator_index_ = mirror.index;
                }
                if (Ref *only = plainSoleRef(m)) {
                    const at::Tensor &t = *only->device;
                    only->cpu =
                        aliasingStandIn(pool_, data, nbytes, cpu_allocator_, dev->resizable(),
                                        t.dtype(), t.sizes(), t.strides(), t.storage_offset());
                    only->stand_in = true;
                    mirror.cpu = only->cpu.storage();
                    mirror.cpu_data = mirror.cpu.data();
                    mirror.cpu_nbytes = mirror.cpu.nbytes();
                    mirror_of_cpu_.insert(mirror.cpu.unsafeGetStorageImpl(), m);
                    continue;
                }
                cpu = c10::make_intrusive<c10::StorageImpl>(
                    c10::StorageImpl::use_byte_size_t(), nbytes,
                    c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)), cpu_allocator_,
                    dev->resizable());
            } else {
                // Mutable storages are staged whole, so that a kernel that resizes one (out=)
                // sees exactly what it would see on CPU; others only over the bytes used.
                bool whole = mirror.written || mirror.lo == kNoRange;
                mirror.begin = whole ? 0 : (mirror.lo & ~static_cast<size_t>(63));
                size_t length = whole ? nbytes : mirror.hi - mirror.begin;
                c10::DataPtr buffer = hostAllocator()->allocate(length);
                if (length > 0 && data != nullptr && !fillsWholeStorage(m)) {
                    c10::DeviceGuard guard(c10::Device(kDeviceType, mirror.index));
                    TORCH_HAL_CHECK(hal_memcpy_async(buffer.get(),
                                                     static_cast<char *>(data) + mirror.begin,
                                                     length, currentHalStream(mirror.index)));
                    staged_devices.insert(mirror.index);
                    g_fallback_counters.bytes_staged_in += length;
                    staged_in_ += length;
                }
                cpu = c10::make_intrusive<c10::StorageImpl>(
                    c10::StorageImpl::use_byte_size_t(), length, std::move(buffer), hostAllocator(),
                    dev->resizable() && whole);
            }
            mirror.cpu = c10::Storage(std::move(cpu));
            mirror.cpu_data = mirror.cpu.data();
            mirror.cpu_nbytes = mirror.cpu.nbytes();
            mirror_of_cpu_.insert(mirror.cpu.unsafeGetStorageImpl(), m);
        }
        for (c10::DeviceIndex d : staged_devices)
            synchronizeCurrentStream(d);

        for (Ref &ref : refs_) {
            if (ref.stand_in)
                continue;
            const Mirror &mirror = mirrors_[ref.mirror];
            const at::Tensor &t = *ref.device;
            // Efficient zero tensors (no data) keep their ZeroTensor key.
            c10::DispatchKeySet keys(c10::DispatchKey::CPU);
            if (t._is_zerotensor())
                keys = keys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
            auto cpu =
                at::detail::make_tensor<c10::TensorImpl>(c10::Storage(mirror.cpu), keys, t.dtype());
            int64_t offset = t.storage_offset() - static_cast<int64_t>(mirror.begin) /
                                                      static_cast<int64_t>(t.itemsize());
            cpu.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), offset);
            if (t.is_conj())
                cpu._set_conj(true);
            if (t.is_neg())
                cpu._set_neg(true);
            ref.cpu = std::move(cpu);
        }
    }

    // Puts the CPU tensors, CPU devices and CPU generators on the stack.
    void substituteArguments()
    {
        const auto &arguments = schema_.arguments();
        size_t next = 0;
        for (size_t i = 0; i < arguments.size(); ++i) {
            c10::IValue &slot = (*stack_)[args_begin_ + i];
            const c10::IValue &v = original_args_[i];
            if (v.isTensor()) {
                if (next < refs_.size() && refs_[next].arg == i)
                    slot = refs_[next++].cpu;
                else
                    slot = v;
            } else if (v.isTensorList()) {
                const c10::ArrayRef<c10::IValue> elements = v.toListRef();
                c10::List<at::Tensor> list;
                list.reserve(elements.size());
                for (const c10::IValue &element : elements) {
                    const at::Tensor &t = element.toTensor();
                    list.push_back(isDeviceTensor(t) ? refs_[next++].cpu : t);
                }
                slot = c10::IValue(std::move(list));
            } else if (v.isOptionalTensorList()) {
                std::vector<std::optional<at::Tensor>> list = v.toOptionalTensorVector();
                for (auto &t : list)
                    if (t.has_value() && isDeviceTensor(*t))
                        t = refs_[next++].cpu;
                slot = c10::IValue(c10::List<std::optional<at::Tensor>>(list));
            } else {
                slot = v;
                if (isGeneratorArgument(arguments[i]))
                    generators_.substitute(slot, target_, schema_.operator_name());
            }
        }
        for (size_t i : device_args_)
            (*stack_)[args_begin_ + i] = c10::IValue(c10::Device(c10::DeviceType::CPU));
        if (op_.hasTag(at::Tag::nondeterministic_seeded))
            generators_.lendDefaultCpuGeneratorUnlessSubstituted(target_);
    }

    void runCpuKernel()
    {
        c10::OptionalDeviceGuard device_guard;
        if (currentDevice() != target_)
            device_guard.reset_device(c10::Device(kDeviceType, target_));
        DeviceCpuAllocationScope allocations(in_place_ ? target_ : -1);
        try {
            op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack_);
        } catch (const c10::NotImplementedError &e) {
            std::string what = e.what_without_backtrace();
            if (what.find("'CPU' backend") == std::string::npos)
                throw;
            TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_hal (backend '", backendName(),
                                        "'): the operator '", schema_.operator_name(),
                                        "' has no kernel for device '", deviceTypeName(),
                                        "' and no CPU kernel to fall back to.\n", what);
        }
    }

    // Device storage for a CPU storage the kernel created (fresh output).
    c10::Storage freshDeviceStorage(const c10::Storage &cpu)
    {
        c10::StorageImpl *impl = cpu.unsafeGetStorageImpl();
        if (const c10::Storage *found = fresh_outputs_.find(impl))
            return *found;
        size_t nbytes = impl->nbytes();
        c10::Storage storage;
        if (impl->data() == nullptr) {
            // Nothing to move (empty, or an efficient zero tensor's storage without data).
            storage = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
                c10::StorageImpl::use_byte_size_t(), nbytes,
                c10::DataPtr(nullptr, c10::Device(kDeviceType, target_)), deviceAllocator(),
                /*resizable=*/nbytes == 0));
        } else if (in_place_ && isDeviceBlock(impl->data_ptr())) {
            // Zero copy: the kernel allocated it in device memory; take ownership.
            // The kernel ran in target_'s allocation scope (runCpuKernel): its device's block.
            c10::DataPtr data = impl->set_data_ptr(c10::DataPtr(nullptr, cpu.device()));
            impl->set_nbytes(0);
            data.unsafe_set_device(c10::Device(kDeviceType, target_));
            storage = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
                c10::StorageImpl::use_byte_size_t(), nbytes, std::move(data), deviceAllocator(),
                /*resizable=*/true));
            g_fallback_counters.outputs_adopted++;
        } else {
            c10::Device device(kDeviceType, target_);
            c10::DeviceGuard guard(device);
            c10::DataPtr data = allocateDeviceMemory(target_, nbytes, device);
            if (nbytes > 0 && impl->data() != nullptr) {
                TORCH_HAL_CHECK(
                    hal_memcpy_async(data.get(), impl->data(), nbytes, currentHalStream(target_)));
                pending_copies_.insert(target_);
                g_fallback_counters.bytes_staged_out += nbytes;
                staged_out_ += nbytes;
            }
            storage = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
                c10::StorageImpl::use_byte_size_t(), nbytes, std::move(data), deviceAllocator(),
                /*resizable=*/true));
            keep_alive_.push_back(cpu); // until the copy ran
            g_fallback_counters.outputs_copied++;
        }
        fresh_outputs_.insert(impl, storage);
        return storage;
    }
    // A CPU storage the kernel allocated in device memory, which nothing else refers to,
    // made the device's: its device and allocator change, its bytes stay.
    c10::Storage adoptInPlace(const c10::Storage &cpu)
    {
        c10::StorageImpl *impl = cpu.unsafeGetStorageImpl();
        impl->mutable_data_ptr().unsafe_set_device(c10::Device(kDeviceType, target_));
        impl->set_allocator(deviceAllocator());
        g_fallback_counters.outputs_adopted++;
        return cpu;
    }

    // CPU storages of outputs that must outlive the call: those whose copy to the device may
    // still run, and those whose tensor became the device tensor (fresh_outputs_ is keyed by
    // their address).
    c10::SmallVector<c10::Storage, 2> keep_alive_;

    // Whether the kernel's output cpu can be turned into the device tensor itself: a plain
    // tensor that only the stack refers to.
    static bool canBecomeDeviceTensor(const at::Tensor &cpu)
    {
        const c10::TensorImpl *impl = cpu.unsafeGetTensorImpl();
        return cpu.use_count() == 1 && typeid(*impl) == typeid(c10::TensorImpl) &&
               !impl->is_wrapped_number() && !cpu._is_zerotensor() &&
               impl->allow_tensor_metadata_change() &&
               impl->key_set().highestBackendKey() == c10::BackendComponent::CPUBit;
    }

    // The device tensor standing for a CPU tensor the kernel returned or left in an argument.
    at::Tensor toDevice(const at::Tensor &cpu, bool is_output = true)
    {
        if (!cpu.defined() || cpu.device().type() != c10::DeviceType::CPU)
            return cpu;
        const c10::StorageImpl *impl = cpu.storage().unsafeGetStorageImpl();
        const size_t *found = mirror_of_cpu_.find(impl);
        c10::Storage storage;
        size_t begin = 0;
        if (found != nullptr) {
            const Mirror &mirror = mirrors_[*found];
            storage = mirror.device;
            begin = mirror.begin;
            if (is_output)
                g_fallback_counters.outputs_aliased++;
        } else {
            // Nothing else refers to the kernel's own output: it becomes the device tensor
            // (storage and dispatch keys swapped; sizes, strides and offset stay), rather than
            // a new one built beside it. Where its storage is its alone and in device memory,
            // that storage becomes the device's too.
            bool becomes = is_output && in_place_ && canBecomeDeviceTensor(cpu);
            if (becomes && cpu.storage().use_count() == 1 &&
                isDeviceBlock(cpu.storage().data_ptr()))
                storage = adoptInPlace(cpu.storage());
            else
                storage = freshDeviceStorage(cpu.storage());
            if (becomes) {
                c10::TensorImpl *impl = cpu.unsafeGetTensorImpl();
                if (!storage.is_alias_of(cpu.storage()))
                    keep_alive_.push_back(cpu.storage());
                impl->set_storage_keep_dtype(std::move(storage)); // the tensor's device follows
                impl->_change_backend_component_keys(c10::Device(kDeviceType, target_));
                return cpu;
            }
        }
        int64_t offset = cpu.storage_offset() +
                         static_cast<int64_t>(begin) / static_cast<int64_t>(cpu.itemsize());
        c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
        if (cpu._is_zerotensor())
            keys = keys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
        at::Tensor out = wrapDeviceStorage(std::move(storage), cpu.sizes(), cpu.strides(), offset,
                                           cpu.dtype(), keys);
        if (cpu.is_conj())
            out._set_conj(true);
        if (cpu.is_neg())
            out._set_neg(true);
        return out;
    }

    void writeBackMutations()
    {
        // Staged: mutable arguments may have grown within their storage (resize_ of an out=
        // tensor).
        for (const Ref &ref : refs_) {
            if (!ref.write || in_place_)
                continue;
            Mirror &mirror = mirrors_[ref.mirror];
            if (ref.cpu.storage().unsafeGetStorageImpl() != mirror.cpu.unsafeGetStorageImpl())
                continue;
            size_t span = spanBytes(ref.cpu);
            if (span > 0) {
                size_t from = mirror.begin +
                              static_cast<size_t>(ref.cpu.storage_offset()) * ref.cpu.itemsize();
                extend(mirror.wlo, mirror.whi, from, from + span);
            }
        }

        for (Mirror &mirror : mirrors_) {
            c10::StorageImpl *cpu = mirror.cpu.unsafeGetStorageImpl();
            c10::StorageImpl *dev = mirror.device.unsafeGetStorageImpl();
            bool resized = cpu->data() != mirror.cpu_data || cpu->nbytes() != mirror.cpu_nbytes;
            if (in_place_) {
                if (resized)
                    adoptResized(mirror);
                continue;
            }
            if (resized) {
                // Whole-storage mirror (only mutable storages are resizable): replace it all.
                c10::Device device = dev->device();
                c10::DeviceGuard guard(device);
                size_t nbytes = cpu->nbytes();
                c10::DataPtr data = allocateDeviceMemory(device.index(), nbytes, device);
                if (nbytes > 0)
                    copyToDevice(data.get(), cpu->data(), nbytes, device.index());
                dev->set_data_ptr_noswap(std::move(data));
                dev->set_nbytes(nbytes);
            } else if (mirror.written && mirror.wlo != kNoRange) {
                size_t from = mirror.wlo;
                size_t to = std::min(mirror.whi, mirror.begin + cpu->nbytes());
                if (to > from)
                    copyToDevice(static_cast<char *>(dev->mutable_data()) + from,
                                 static_cast<const char *>(cpu->data()) + (from - mirror.begin),
                                 to - from, mirror.index);
            }
        }

        // Geometry (and, rarely, storage) changes of mutable arguments.
        for (const Ref &ref : refs_) {
            if (!ref.write)
                continue;
            const at::Tensor &cpu = ref.cpu;
            at::Tensor converted = toDevice(cpu, /*is_output=*/false);
            c10::TensorImpl *impl = ref.device->unsafeGetTensorImpl();
            if (!impl->storage().is_alias_of(converted.storage()))
                impl->set_storage_keep_dtype(converted.storage());
            if (impl->sizes() != converted.sizes() || impl->strides() != converted.strides() ||
                impl->storage_offset() != converted.storage_offset())
                impl->set_sizes_and_strides(converted.sizes(), converted.strides(),
                                            converted.storage_offset());
        }
    }

    // In place: a kernel resized an aliasing CPU storage, so its new buffer came from the
    // device-backed CPU allocator. Move it into the device storage.
    void adoptResized(Mirror &mirror)
    {
        c10::StorageImpl *cpu = mirror.cpu.unsafeGetStorageImpl();
        c10::StorageImpl *dev = mirror.device.unsafeGetStorageImpl();
        size_t nbytes = cpu->nbytes();
        c10::Device device = dev->device();
        if (isDeviceBlock(cpu->data_ptr()) || cpu->data() == nullptr) {
            c10::DataPtr data = cpu->set_data_ptr(c10::DataPtr(nullptr, cpu->device()));
            data.unsafe_set_device(device);
            dev->set_data_ptr_noswap(std::move(data));
        } else {
            c10::DeviceGuard guard(device);
            c10::DataPtr data = allocateDeviceMemory(device.index(), nbytes, device);
            if (nbytes > 0)
                copyToDevice(data.get(), cpu->data(), nbytes, device.index());
            dev->set_data_ptr_noswap(std::move(data));
        }
        dev->set_nbytes(nbytes);
        // The CPU storage must keep standing for the device storage in toDevice().
        cpu->set_data_ptr_noswap(c10::DataPtr(const_cast<void *>(dev->data()), cpu->device()));
    }

    void copyToDevice(void *dst, const void *src, size_t n, c10::DeviceIndex index)
    {
        TORCH_HAL_CHECK(hal_memcpy_async(dst, src, n, currentHalStream(index)));
        pending_copies_.insert(index);
        g_fallback_counters.bytes_staged_out += n;
        staged_out_ += n;
    }

    void convertReturns()
    {
        const auto &returns = schema_.returns();
        const auto &arguments = schema_.arguments();
        size_t returns_begin = stack_->size() - returns.size();
        for (size_t k = 0; k < returns.size(); ++k) {
            c10::IValue &slot = (*stack_)[returns_begin + k];
            const c10::AliasInfo *alias = returns[k].alias_info();
            if (alias != nullptr && alias->isWrite()) {
                // In-place / out=: return the caller's own tensor (list).
                bool found = false;
                for (size_t i = 0; i < arguments.size() && !found; ++i) {
                    const c10::AliasInfo *in = arguments[i].alias_info();
                    if (in != nullptr && (in == alias || *in == *alias)) {
                        slot = original_args_[i];
                        found = true;
                    }
                }
                if (found)
                    continue;
            }
            if (slot.isTensor()) {
                slot = toDevice(slot.toTensor());
            } else if (slot.isTensorList()) {
                std::vector<at::Tensor> list = slot.toTensorVector();
                for (at::Tensor &t : list)
                    t = toDevice(t);
                slot = c10::IValue(c10::List<at::Tensor>(list));
            } else if (slot.isOptionalTensorList()) {
                std::vector<std::optional<at::Tensor>> list = slot.toOptionalTensorVector();
                for (auto &t : list)
                    if (t.has_value())
                        t = toDevice(*t);
                slot = c10::IValue(c10::List<std::optional<at::Tensor>>(list));
            }
        }
    }

    // Staging buffers are freed when this call returns: wait for the copies that read them.
    void finishCopies()
    {
        if (pending_copies_.empty())
            return;
        if (in_place_) {
            for (c10::DeviceIndex d : pending_copies_)
                synchronizeCurrentStream(d);
            return;
        }
        // Staged: the call returns without waiting for its copies to the device; their
        // sources (fresh outputs, the staging buffers written back) live until they ran.
        std::vector<c10::Storage> buffers(keep_alive_.begin(), keep_alive_.end());
        for (Mirror &mirror : mirrors_)
            if (mirror.cpu.unsafeGetStorageImpl() != nullptr)
                buffers.push_back(std::move(mirror.cpu));
        holdUntilCopied(pending_copies_, std::move(buffers));
    }
};

} // namespace

void cpuFallback(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
    matchCallerThreads(); // and, on a thread's first operator, backwardOnCallingThread()'s work
    FallbackCall(op, stack).run();
}

} // namespace torch_hal
