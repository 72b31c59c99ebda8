// SPDX-License-Identifier: Apache-2.0
// Python binding of the torch_hal process group: torch_hal._C.ProcessGroupHAL, a subclass of
// torch.distributed's Backend. torch_hal/distributed.py registers it with
// torch.distributed.Backend.register_backend.
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <mutex>

#include "distributed/Bindings.h"
#include "distributed/ProcessGroupHAL.h"

namespace torch_hal
{
namespace
{

// The holder of ProcessGroupHAL objects in Python: an intrusive_ptr (the layout torch's own
// Backend binding uses, so torch's functions taking a Backend accept ours) whose destructor
// releases the GIL, because destroying a process group waits for its communicator.
template <typename T> class GilReleasingPtr
{
  public:
    GilReleasingPtr() = default;
    GilReleasingPtr(const GilReleasingPtr &) = default;
    GilReleasingPtr(GilReleasingPtr &&) noexcept = default;
    GilReleasingPtr &operator=(const GilReleasingPtr &) = default;
    GilReleasingPtr &operator=(GilReleasingPtr &&) noexcept = default;
    /* implicit */ GilReleasingPtr(c10::intrusive_ptr<T> ptr) : ptr_(std::move(ptr)) {}
    // pybind11 constructs holders from raw pointers it owns.
    explicit GilReleasingPtr(T *raw) : ptr_(c10::intrusive_ptr<T>::unsafe_steal_from_new(raw)) {}
    ~GilReleasingPtr()
    {
        if (ptr_ && PyGILState_Check()) {
            pybind11::gil_scoped_release no_gil;
            ptr_.reset();
        }
    }
    T *get() const noexcept
    {
        return ptr_.get();
    }
    T &operator*() const noexcept
    {
        return *ptr_;
    }
    T *operator->() const noexcept
    {
        return ptr_.get();
    }

  private:
    c10::intrusive_ptr<T> ptr_;
};

} // namespace
} // namespace torch_hal

PYBIND11_DECLARE_HOLDER_TYPE(T, torch_hal::GilReleasingPtr<T>, true);

namespace torch_hal
{

void initDistributedBindings(pybind11::module &m)
{
    namespace py = pybind11;
    static std::once_flag once;
    std::call_once(once, [&] {
        // torch.distributed's Backend class: imported so that its type is registered.
        py::object backend = py::module::import("torch._C._distributed_c10d").attr("Backend");
        py::class_<ProcessGroupHAL, GilReleasingPtr<ProcessGroupHAL>>(m, "ProcessGroupHAL", backend,
                                                                      R"(
c10d backend over the HAL's collectives (torch.distributed backend "torch_hal").

Created by torch.distributed.init_process_group / new_group through the creator that
torch_hal.distributed registers; construct it directly only for tests.)")
            .def(py::init([](const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                             int64_t timeout_ms, const std::string &group_name,
                             const std::vector<uint64_t> &global_ranks) {
                     return GilReleasingPtr<ProcessGroupHAL>(c10::make_intrusive<ProcessGroupHAL>(
                         store, rank, size, std::chrono::milliseconds(timeout_ms), group_name,
                         global_ranks));
                 }),
                 py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_ms"),
                 py::arg("group_name") = "", py::arg("global_ranks") = std::vector<uint64_t>(),
                 py::call_guard<py::gil_scoped_release>())
            .def_property_readonly("comm_device", &ProcessGroupHAL::commDevice,
                                   "Index of the device of the group's HAL communicator, or -1 "
                                   "before the first collective created it.")
            .def(
                "_connect",
                [](ProcessGroupHAL &self, int device) {
                    self.connect(static_cast<c10::DeviceIndex>(device));
                },
                py::arg("device"), py::call_guard<py::gil_scoped_release>(),
                "Creates the HAL communicator now, on the given device index (collective "
                "across the group).");
    });
}

} // namespace torch_hal
