// SPDX-License-Identifier: Apache-2.0
// Buffer allocation for Inductor's generated wrappers: a compiled graph allocates most of its
// buffers on every call, and torch.empty_strided (Python argument parsing, a device object, the
// dispatcher) cost about 2 us each, which Inductor itself avoids for CPU and CUDA graphs with
// empty_strided_cpu/_cuda. This is the device's equivalent.
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <c10/util/SmallVector.h>

#include "aten/Common.h"
#include "python/CompiledAllocation.h"
#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

void readInts(PyObject *tuple, const char *what, c10::SmallVector<int64_t, 8> &out)
{
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    out.resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
        if (v == -1 && PyErr_Occurred())
            throw python_error();
        TORCH_CHECK(v >= 0, "torch_hal (backend '", backendName(), "'): _empty_strided: negative ",
                    what, " ", v);
        out[static_cast<size_t>(i)] = static_cast<int64_t>(v);
    }
}

PyObject *emptyStrided(PyObject * /*module*/, PyObject *args)
{
    HANDLE_TH_ERRORS
    PyObject *size = nullptr;
    PyObject *stride = nullptr;
    PyObject *dtype = nullptr;
    int index = 0;
    if (!PyArg_ParseTuple(args, "O!O!O!i", &PyTuple_Type, &size, &PyTuple_Type, &stride,
                          &THPDtypeType, &dtype, &index))
        return nullptr;
    c10::SmallVector<int64_t, 8> sizes;
    c10::SmallVector<int64_t, 8> strides;
    readInts(size, "size", sizes);
    readInts(stride, "stride", strides);
    TORCH_CHECK(sizes.size() == strides.size(), "torch_hal (backend '", backendName(),
                "'): _empty_strided: ", sizes.size(), " sizes and ", strides.size(), " strides");
    return THPVariable_Wrap(emptyStridedOnDevice(sizes, strides,
                                                 reinterpret_cast<THPDtype *>(dtype)->scalar_type,
                                                 static_cast<c10::DeviceIndex>(index)));
    END_HANDLE_TH_ERRORS
}

PyMethodDef kMethods[] = {
    { "_empty_strided", emptyStrided, METH_VARARGS,
      "_empty_strided(size, stride, dtype, device_index): an uninitialised device tensor "
      "(compiled graphs' buffers)." },
    { nullptr, nullptr, 0, nullptr },
};

} // namespace

void initCompiledAllocationBindings(pybind11::module &m)
{
    if (PyModule_AddFunctions(m.ptr(), kMethods) != 0)
        throw pybind11::error_already_set();
}

} // namespace torch_hal
