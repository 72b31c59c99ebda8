"""nvcc_image: device code compiled at build time with the CUDA toolkit's nvcc.

Defined only where //third_party:cuda_configure.bzl found nvcc (NVCC, its path); elsewhere the
macro defines nothing, and NVCC_FOUND lets callers leave the images out of their data.
"""

load("@local_cuda//:defs.bzl", "NVCC")

NVCC_FOUND = NVCC != ""

def nvcc_image(name, src, out, flags):
    """A genrule `name` that compiles src into out with `nvcc <flags>` (e.g. "-ptx -arch=...")."""
    if not NVCC_FOUND:
        return
    native.genrule(
        name = name,
        srcs = [src],
        outs = [out],
        # A temporary directory of its own: nvcc names its files by process id, which repeats
        # across sandboxes sharing /tmp.
        cmd = ("t=$$(mktemp -d) && TMPDIR=$$t %s %s $< -o $@; r=$$?; rm -rf $$t; exit $$r" %
               (NVCC, flags)),
    )
