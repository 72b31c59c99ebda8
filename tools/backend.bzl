"""hal_backend_library: a backend shared library that exports its entry point only."""

load("//tools:copts.bzl", "HAL_BACKEND_COPTS")

def hal_backend_library(name, srcs = [], deps = [], copts = HAL_BACKEND_COPTS, linkopts = [], **kwargs):
    """A cc_binary(linkshared) named libhal_backend_<x>.so (or any name) linked with the version
    script //hal_backends:backend.map, so that hal_backend_get_ops is its one dynamic symbol.

    Args:
      name: the library's file name.
      srcs: sources (and private headers).
      deps: libraries linked in statically (//hal:headers at least).
      copts: compiler flags (HAL_BACKEND_COPTS: hidden visibility).
      linkopts: further linker flags.
      **kwargs: passed to cc_binary (visibility, data, ...).
    """
    native.cc_binary(
        name = name,
        srcs = srcs,
        deps = deps,
        copts = copts,
        additional_linker_inputs = ["//hal_backends:backend.map"],
        linkopts = linkopts + ["-Wl,--version-script,$(location //hal_backends:backend.map)"],
        linkshared = True,
        **kwargs
    )
