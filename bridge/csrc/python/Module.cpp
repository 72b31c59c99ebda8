// SPDX-License-Identifier: Apache-2.0
// torch_hal._C: opening the backend, registering with PyTorch, and what the Python device
// module (torch.<device>) needs beyond torch's generic APIs.
#include <ATen/Context.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include "aten/Common.h"
#include "distributed/Bindings.h"
#include "python/CompiledAllocation.h"
#include "python/MemorySnapshot.h"
#include "python/Programs.h"
#include "runtime/Register.h"
#include "runtime/Runtime.h"

namespace py = pybind11;

namespace torch_hal
{

void registerAll()
{
    static std::once_flag once;
    std::call_once(once, [] {
        TORCH_CHECK(isBackendOpen(), "torch_hal: open a backend before registering it");
        registerGuard();
        registerHooks();
        registerOperators();
        registerFallback();
        registerAutocast();
        registerRnnCells();
        registerAttention();
        registerDropout();
        registerBernoulli();
        registerProfilerStubs();
        // TORCH_HAL_KINETO_PROFILER=0 leaves the device out of torch.profiler: the bench
        // measures what a registered but idle profiler costs against that.
        const char *kineto = std::getenv("TORCH_HAL_KINETO_PROFILER");
        if (kineto == nullptr || std::string(kineto) != "0")
            registerKinetoProfiler();
    });
}

namespace
{

py::dict devicePropertiesDict(c10::DeviceIndex index)
{
    const hal_device_properties_t &p = torch_hal::deviceProperties(index);
    py::dict d;
    d["name"] = std::string(p.name);
    d["vendor"] = std::string(p.vendor);
    d["index"] = p.index;
    d["host_addressable"] = p.host_addressable != 0;
    d["total_memory"] = p.total_memory;
    d["capabilities"] = p.capabilities;
    d["stream_priority_least"] = p.stream_priority_least;
    d["stream_priority_greatest"] = p.stream_priority_greatest;
    d["alignment"] = p.alignment;
    d["program_formats"] = p.program_formats;
    d["node_index"] = p.node_index;
    return d;
}

py::dict halMemStats(c10::DeviceIndex index)
{
    auto s = halStruct<hal_mem_stats_t>();
    TORCH_HAL_CHECK(hal_device_get_mem_stats(halDevice(index), &s));
    py::dict d;
    d["device_bytes_in_use"] = s.device_bytes_in_use;
    d["device_peak_bytes_in_use"] = s.device_peak_bytes_in_use;
    d["device_allocations"] = s.device_allocations;
    d["host_pinned_bytes_in_use"] = s.host_pinned_bytes_in_use;
    d["shared_bytes_in_use"] = s.shared_bytes_in_use;
    d["total_alloc_calls"] = s.total_alloc_calls;
    d["total_free_calls"] = s.total_free_calls;
    d["device_bytes_limit"] = s.device_bytes_limit;
    d["device_bytes_free"] = s.device_bytes_free;
    return d;
}

py::dict fallbackStatsDict()
{
    FallbackStats s = fallbackStats();
    py::dict d;
    d["calls"] = s.calls;
    d["in_place_calls"] = s.in_place_calls;
    d["staged_calls"] = s.staged_calls;
    d["outputs_adopted"] = s.outputs_adopted;
    d["outputs_aliased"] = s.outputs_aliased;
    d["outputs_copied"] = s.outputs_copied;
    d["bytes_staged_in"] = s.bytes_staged_in;
    d["bytes_staged_out"] = s.bytes_staged_out;
    return d;
}

c10::Stream streamOf(c10::DeviceIndex index, int64_t stream_id)
{
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, index), stream_id);
}

} // namespace
} // namespace torch_hal

PYBIND11_MODULE(_C, m)
{
    using namespace torch_hal;
    m.doc() = "torch_hal native runtime (HAL backend as PyTorch's PrivateUse1 device)";

    m.def(
        "_open_backend",
        [](const std::string &name) {
            std::string error;
            bool ok = openBackend(name, &error);
            return py::make_tuple(ok, error);
        },
        "Opens a HAL backend; returns (ok, error message).");
    m.def(
        "_probe_backend",
        [](const std::string &name) -> py::tuple {
            hal_backend_info_t info{};
            info.struct_size = sizeof(info);
            hal_status_t st = hal_backend_probe(name.c_str(), &info);
            if (st != HAL_OK)
                return py::make_tuple(false,
                                      "backend '" + name + "': hal_backend_probe failed with " +
                                          hal_status_string(st) + ": " + hal_last_error_message(),
                                      py::none());
            py::dict d;
            d["name"] = std::string(info.name);
            d["device_type_name"] = std::string(info.device_type_name);
            d["api_version"] = info.api_version;
            d["exclusive_devices"] = (info.flags & HAL_BACKEND_FLAG_EXCLUSIVE_DEVICES) != 0;
            return py::make_tuple(true, std::string(), std::move(d));
        },
        "What a HAL backend says of itself, without opening it: (ok, error message, dict).");
    m.def("_register", &registerAll, "Registers the open backend as PyTorch's PrivateUse1.");
    m.def("_backend_name", [] { return backendName(); });
    m.def("_device_type_name", [] { return deviceTypeName(); });
    m.def("_device_count", [] { return static_cast<int>(deviceCount()); });
    m.def("_get_device", [] { return static_cast<int>(currentDevice()); });
    m.def("_set_device", [](int index) {
        if (index >= 0)
            setCurrentDevice(static_cast<c10::DeviceIndex>(index));
    });
    m.def("_exchange_device", [](int index) {
        if (index < 0)
            return -1;
        return static_cast<int>(exchangeDevice(static_cast<c10::DeviceIndex>(index)));
    });
    m.def("_device_properties",
          [](int index) { return devicePropertiesDict(static_cast<c10::DeviceIndex>(index)); });
    m.def("_hal_mem_stats",
          [](int index) { return halMemStats(static_cast<c10::DeviceIndex>(index)); });
    m.def(
        "_synchronize",
        [](int index) {
            c10::DeviceIndex d = static_cast<c10::DeviceIndex>(index);
            hal_device_t device = halDevice(d);
            py::gil_scoped_release no_gil;
            TORCH_HAL_CHECK(hal_device_synchronize(device));
        },
        "Waits for all work on all streams of a device.");
    m.def("_stream_priority", [](int index, int64_t stream_id) {
        return streamPriority(streamOf(static_cast<c10::DeviceIndex>(index), stream_id));
    });
    m.def("_stream_native_handle", [](int index, int64_t stream_id) {
        return reinterpret_cast<uintptr_t>(
            halStream(streamOf(static_cast<c10::DeviceIndex>(index), stream_id)));
    });
    m.def(
        "_event_elapsed_time",
        [](py::handle start, py::handle end) {
            // torch.Event.elapsed_time() insists on the exact torch.Event type, so subclasses
            // (torch.<device>.Event) measure through here.
            TORCH_CHECK_TYPE(THPEvent_Check(start.ptr()) && THPEvent_Check(end.ptr()),
                             "expected torch.Event objects");
            const c10::Event &a = reinterpret_cast<THPEvent *>(start.ptr())->event;
            const c10::Event &b = reinterpret_cast<THPEvent *>(end.ptr())->event;
            py::gil_scoped_release no_gil;
            return a.elapsedTime(b);
        },
        "Milliseconds between two recorded timing events.");
    m.def("_get_default_generator", [](int index) {
        const at::Generator &gen = defaultGenerator(static_cast<c10::DeviceIndex>(index));
        return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
    });
    m.def("_init", [] {
        torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
        at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
    });
    m.def("_is_in_bad_fork", [] { return torch::utils::is_device_in_bad_fork(at::kPrivateUse1); });
    m.def("_fallback_stats", &fallbackStatsDict,
          "Counters of the CPU fallback: calls, in-place vs staged, outputs adopted/aliased/"
          "copied, bytes staged in and out.");
    m.def("_reset_fallback_stats", &resetFallbackStats);
    m.def("_release_finished_backwards", &releaseFinishedBackwards,
          py::call_guard<py::gil_scoped_release>(),
          "Returns once autograd's device threads have released the backwards that ran before "
          "(torch_hal calls it at exit).");
    m.def("_last_error_message", [] { return std::string(hal_last_error_message()); });
    initProgramBindings(m);
    initMemorySnapshotBindings(m);
    initCompiledAllocationBindings(m);
    m.def(
        "_init_distributed",
        [] {
            py::module self = py::module::import("torch_hal._C");
            initDistributedBindings(self);
        },
        "Adds ProcessGroupHAL (the c10d backend) to this module; needs torch.distributed.");
}
