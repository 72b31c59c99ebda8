"""Compiler flags shared by every C and C++ target of the project."""

HAL_C_COPTS = [
    "-std=c11",
    "-D_GNU_SOURCE",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
]

# The HAL's own libraries: libhal.so.1 exports only the public API (HAL_API, hal/libhal.map).
HAL_LIB_COPTS = HAL_C_COPTS + ["-fvisibility=hidden"]

# Backends export only their entry symbol (HAL_BACKEND_EXPORT).
HAL_BACKEND_COPTS = HAL_C_COPTS + ["-fvisibility=hidden"]

HAL_CXX_COPTS = [
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Werror",
]
