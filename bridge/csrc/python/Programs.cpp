// SPDX-License-Identifier: Apache-2.0
// torch_hal._C: programs and kernels (HAL 1.2, tensor arguments 1.3) for Python
// (torch_hal/programs.py). Handles are passed to Python as integers; the Python classes own them.
// A launch takes tensors (their data pointers, on the launch's device; with their dtype and shape
// where the kernel takes tensors, as a StableHLO program's `main` does) and scalars, and is
// enqueued on a stream of the device without waiting for it.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <string>
#include <vector>

#include "python/Programs.h"
#include "runtime/DeviceActivity.h"
#include "runtime/Runtime.h"

namespace py = pybind11;

namespace torch_hal
{
namespace
{

hal_program_t programOf(uintptr_t handle)
{
    return reinterpret_cast<hal_program_t>(handle);
}

hal_kernel_t kernelOf(uintptr_t handle)
{
    return reinterpret_cast<hal_kernel_t>(handle);
}

hal_kernel_info_t kernelInfo(hal_kernel_t kernel)
{
    auto info = halStruct<hal_kernel_info_t>();
    TORCH_HAL_CHECK(hal_kernel_get_info(kernel, &info));
    return info;
}

// The HAL's element type of a torch dtype, or false for one it has none for.
bool halDtypeOf(at::ScalarType t, hal_dtype_t *out)
{
    switch (t) {
    case at::kFloat:
        *out = HAL_DTYPE_F32;
        return true;
    case at::kHalf:
        *out = HAL_DTYPE_F16;
        return true;
    case at::kBFloat16:
        *out = HAL_DTYPE_BF16;
        return true;
    case at::kDouble:
        *out = HAL_DTYPE_F64;
        return true;
    case at::kChar:
        *out = HAL_DTYPE_I8;
        return true;
    case at::kByte:
        *out = HAL_DTYPE_U8;
        return true;
    case at::kShort:
        *out = HAL_DTYPE_I16;
        return true;
    case at::kInt:
        *out = HAL_DTYPE_I32;
        return true;
    case at::kLong:
        *out = HAL_DTYPE_I64;
        return true;
    case at::kBool:
        *out = HAL_DTYPE_BOOL;
        return true;
    case at::kFloat8_e4m3fn:
        *out = HAL_DTYPE_F8_E4M3;
        return true;
    case at::kFloat8_e5m2:
        *out = HAL_DTYPE_F8_E5M2;
        return true;
    default:
        return false;
    }
}

const char *dtypeName(hal_dtype_t t)
{
    switch (t) {
    case HAL_DTYPE_F32:
        return "float32";
    case HAL_DTYPE_F16:
        return "float16";
    case HAL_DTYPE_BF16:
        return "bfloat16";
    case HAL_DTYPE_F64:
        return "float64";
    case HAL_DTYPE_I8:
        return "int8";
    case HAL_DTYPE_U8:
        return "uint8";
    case HAL_DTYPE_I16:
        return "int16";
    case HAL_DTYPE_U16:
        return "uint16";
    case HAL_DTYPE_I32:
        return "int32";
    case HAL_DTYPE_U32:
        return "uint32";
    case HAL_DTYPE_I64:
        return "int64";
    case HAL_DTYPE_U64:
        return "uint64";
    case HAL_DTYPE_BOOL:
        return "bool";
    case HAL_DTYPE_F8_E4M3:
        return "float8_e4m3fn";
    case HAL_DTYPE_F8_E5M2:
        return "float8_e5m2";
    default:
        return "unknown";
    }
}

// A scalar of `size` bytes from a Python bool, int or float (the size the kernel's signature
// gives, or 8: int64 and double).
hal_kernel_arg_t scalarArg(py::handle value, uint32_t size, size_t index)
{
    hal_kernel_arg_t arg{};
    arg.kind = HAL_KERNEL_ARG_SCALAR;
    arg.size = size;
    if (py::isinstance<py::bytes>(value)) {
        std::string bytes = value.cast<std::string>();
        TORCH_CHECK(!bytes.empty() && bytes.size() <= HAL_KERNEL_SCALAR_MAX, "argument ", index,
                    ": a bytes scalar has 1 to ", HAL_KERNEL_SCALAR_MAX, " bytes, not ",
                    bytes.size());
        arg.size = static_cast<uint32_t>(bytes.size());
        std::memcpy(arg.value.bytes, bytes.data(), bytes.size());
        return arg;
    }
    if (py::isinstance<py::float_>(value)) {
        double v = value.cast<double>();
        TORCH_CHECK(size == 4 || size == 8, "argument ", index, ": the kernel takes a ", size,
                    "-byte scalar; a Python float passes as 4 (float) or 8 (double) bytes");
        if (size == 4)
            arg.value.f32 = static_cast<float>(v);
        else
            arg.value.f64 = v;
        return arg;
    }
    TORCH_CHECK(py::isinstance<py::int_>(value), "argument ", index,
                ": expected a tensor, an int, a float or bytes, got ",
                std::string(py::str(py::type::of(value))));
    TORCH_CHECK(size == 1 || size == 2 || size == 4 || size == 8, "argument ", index,
                ": an int passes as 1, 2, 4 or 8 bytes, the kernel takes ", size);
    int64_t v = value.cast<int64_t>(); // two's complement, little-endian hosts: truncation works
    std::memcpy(arg.value.bytes, &v, size);
    return arg;
}

void launch(uintptr_t kernel_handle, int device_index, int64_t stream_id, py::sequence grid,
            py::sequence block, uint32_t shared_bytes, py::sequence args)
{
    hal_kernel_t kernel = kernelOf(kernel_handle);
    hal_kernel_info_t info = kernelInfo(kernel);
    auto config = halStruct<hal_launch_config_t>();
    TORCH_CHECK(py::len(grid) >= 1 && py::len(grid) <= 3 && py::len(block) >= 1 &&
                    py::len(block) <= 3,
                "grid and block have 1 to 3 entries");
    for (int d = 0; d < 3; d++) {
        config.grid[d] = d < static_cast<int>(py::len(grid)) ? grid[d].cast<uint32_t>() : 1;
        config.block[d] = d < static_cast<int>(py::len(block)) ? block[d].cast<uint32_t>() : 1;
    }
    config.shared_bytes = shared_bytes;
    size_t n = py::len(args);
    TORCH_CHECK(n <= HAL_KERNEL_ARGS_MAX, "at most ", HAL_KERNEL_ARGS_MAX, " arguments, not ", n);
    bool typed = info.nargs != UINT32_MAX;
    TORCH_CHECK(!typed || info.nargs == n, "kernel '", info.name, "' takes ", info.nargs,
                " arguments, ", n, " given");
    auto device = static_cast<c10::DeviceIndex>(device_index);
    std::vector<hal_kernel_arg_t> hal_args(n);
    std::vector<hal_tensor_desc_t> descs(n); // read by hal_kernel_launch during the call
    for (size_t i = 0; i < n; i++) {
        py::handle a = args[i];
        if (THPVariable_Check(a.ptr())) {
            const at::Tensor &t = THPVariable_Unpack(a.ptr());
            TORCH_CHECK(t.device() == c10::Device(kDeviceType, device), "argument ", i,
                        ": the tensor is on ", t.device(), ", the launch runs on ",
                        c10::Device(kDeviceType, device));
            if (typed && info.args[i].kind == HAL_KERNEL_ARG_TENSOR) {
                TORCH_CHECK(t.is_contiguous(), "argument ", i, " of kernel '", info.name,
                            "': the kernel takes dense tensors; pass a contiguous one");
                TORCH_CHECK(t.dim() <= HAL_TENSOR_RANK_MAX, "argument ", i, ": rank ", t.dim(),
                            " (at most ", HAL_TENSOR_RANK_MAX, ")");
                TORCH_CHECK(halDtypeOf(t.scalar_type(), &descs[i].dtype), "argument ", i,
                            ": dtype ", t.scalar_type(), " has no HAL element type");
                descs[i].rank = static_cast<uint32_t>(t.dim());
                for (int64_t d = 0; d < t.dim(); d++)
                    descs[i].dims[d] = t.size(d);
                hal_args[i].kind = HAL_KERNEL_ARG_TENSOR;
                hal_args[i].size = 0; // the HAL computes the bytes from the descriptor
                hal_args[i].value.tensor.ptr = t.numel() ? t.data_ptr() : nullptr;
                hal_args[i].value.tensor.desc = &descs[i];
                continue;
            }
            uint32_t bytes = 0; // "inside its allocation" unless the extent is plain
            if (t.is_contiguous() && t.nbytes() <= UINT32_MAX)
                bytes = static_cast<uint32_t>(t.nbytes());
            hal_args[i].kind = HAL_KERNEL_ARG_POINTER;
            hal_args[i].size = bytes;
            hal_args[i].value.ptr = t.numel() ? t.data_ptr() : nullptr;
        } else {
            uint32_t size = typed ? info.args[i].size : 8;
            TORCH_CHECK(!typed || info.args[i].kind == HAL_KERNEL_ARG_SCALAR, "argument ", i,
                        " of kernel '", info.name, "' is a pointer: pass a tensor");
            hal_args[i] = scalarArg(a, size, i);
        }
    }
    c10::Stream stream = stream_id < 0 ? currentStream(device)
                                       : c10::Stream(c10::Stream::UNSAFE,
                                                     c10::Device(kDeviceType, device), stream_id);
    StreamActivity activity(DeviceActivityKind::Kernel, info.name, stream); // torch.profiler
    TORCH_HAL_CHECK(hal_kernel_launch(halStream(stream), kernel, &config, hal_args.data(),
                                      static_cast<uint32_t>(n)));
    activity.end();
}

} // namespace

void initProgramBindings(py::module &m)
{
    // torch.profiler for kernels run on the calling thread (compiler.InPlaceKernel): whether
    // the device's activity is recorded, the profiler's clock, and one run's record (a kernel
    // row on the device's current stream, issued by a "torch_hal kernel" runtime row).
    m.def("_device_activity_recording", [] { return deviceActivityRecording(); });
    m.def("_device_activity_now", [] { return deviceActivityNow(); });
    m.def("_record_in_place_kernel",
          [](const std::string &name, int device, int64_t start_ns, int64_t end_ns) {
              const auto index = static_cast<c10::DeviceIndex>(device);
              recordDeviceActivity({ DeviceActivityKind::Kernel, name.c_str(), currentStream(index),
                                     start_ns, end_ns, "torch_hal kernel", start_ns, end_ns, 0,
                                     "in place on host-addressable device memory" });
          });
    m.def(
        "_program_create",
        [](int device_index, int format, py::bytes image) {
            std::string bytes = image; // copied: the HAL may read it during the call only
            hal_program_t program = nullptr;
            // Creating a program may compile it (seconds): other Python threads run meanwhile.
            py::gil_scoped_release no_gil;
            TORCH_HAL_CHECK(hal_program_create(
                halDevice(static_cast<c10::DeviceIndex>(device_index)),
                static_cast<hal_program_format_t>(format), bytes.data(), bytes.size(), &program));
            return reinterpret_cast<uintptr_t>(program);
        },
        "Loads a program on a device; returns its handle.");
    m.def(
        "_program_destroy",
        [](uintptr_t program) { TORCH_HAL_CHECK(hal_program_destroy(programOf(program))); },
        "Destroys a program (queued launches still run).");
    m.def(
        "_program_get_kernel",
        [](uintptr_t program, const std::string &name) {
            hal_kernel_t kernel = nullptr;
            TORCH_HAL_CHECK(hal_program_get_kernel(programOf(program), name.c_str(), &kernel));
            return reinterpret_cast<uintptr_t>(kernel);
        },
        "Looks a kernel up by name; returns its handle.");
    m.def(
        "_kernel_signature",
        [](uintptr_t kernel) -> py::object {
            hal_kernel_info_t info = kernelInfo(kernelOf(kernel));
            if (info.nargs == UINT32_MAX)
                return py::none();
            py::list sig;
            for (uint32_t i = 0; i < info.nargs; i++) {
                hal_kernel_arg_kind_t kind = info.args[i].kind;
                sig.append(py::make_tuple(kind == HAL_KERNEL_ARG_POINTER  ? "pointer"
                                          : kind == HAL_KERNEL_ARG_TENSOR ? "tensor"
                                                                          : "scalar",
                                          kind == HAL_KERNEL_ARG_POINTER ? 0u : info.args[i].size));
            }
            return py::object(std::move(sig));
        },
        "The kernel's argument signature, [(\"pointer\", 0) | (\"scalar\", bytes) | "
        "(\"tensor\", bytes)], or None.");
    m.def(
        "_kernel_tensor_info",
        [](uintptr_t kernel) -> py::object {
            auto info = halStruct<hal_kernel_tensor_info_t>();
            hal_status_t st = hal_kernel_get_tensor_info(kernelOf(kernel), &info);
            if (st == HAL_ERROR_UNSUPPORTED)
                return py::none();
            TORCH_HAL_CHECK(st);
            py::list tensors, aliases;
            for (uint32_t i = 0; i < info.ninputs + info.noutputs; i++) {
                const hal_tensor_desc_t &t = info.tensors[i];
                py::list shape;
                for (uint32_t d = 0; d < t.rank; d++)
                    shape.append(t.dims[d]);
                tensors.append(py::make_tuple(dtypeName(t.dtype), py::tuple(shape)));
            }
            for (uint32_t r = 0; r < info.noutputs; r++)
                aliases.append(info.aliases[r]);
            return py::make_tuple(info.ninputs, info.noutputs, tensors, aliases);
        },
        "(ninputs, noutputs, [(dtype name, shape)], [parameter each result aliases or -1]) of a "
        "kernel that takes tensors, or None.");
    m.def("_kernel_launch", &launch,
          "Enqueues a launch: kernel, device index, stream id (-1: current), grid, block, "
          "shared bytes, arguments.");
    m.def("_program_format_name", [](int format) {
        return std::string(hal_program_format_name(static_cast<hal_program_format_t>(format)));
    });
}

} // namespace torch_hal
