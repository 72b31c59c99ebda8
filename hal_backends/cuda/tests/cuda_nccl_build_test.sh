#!/usr/bin/env bash
# What //third_party:cuda_configure.bzl reported for NCCL is what the backend library was built
# with. With NCCL: NCCL_VERSION is the version in the nccl.h found (NCCL_MAJOR.MINOR.PATCH), the
# library carries the NCCL loader (its message) and the libnccl.so.2 path recorded at build time,
# and that file exists. Without: the reason is given and the library carries the message of a
# build without NCCL instead. No GPU and no CUDA library involved: the checks read files.
set -euo pipefail

lib=$CUDA_TEST_BACKEND
loader_msg="cannot load NCCL (libnccl.so.2)"
without_msg="the backend was built without NCCL headers"

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
# Whether the backend library contains a string (its messages and paths are literals in it).
has() { grep -qaF -- "$1" "$lib"; }

if [ "$CUDA_TEST_NCCL_FOUND" = 1 ]; then
    h=$CUDA_TEST_NCCL_H
    version=$(awk '$1 == "#define" && $2 ~ /^NCCL_(MAJOR|MINOR|PATCH)$/ { v[$2] = $3 }
        END { print v["NCCL_MAJOR"] "." v["NCCL_MINOR"] "." v["NCCL_PATCH"] }' "$h")
    [ "$version" = "$CUDA_TEST_NCCL_VERSION" ] ||
        fail "NCCL_VERSION is '$CUDA_TEST_NCCL_VERSION' but the nccl.h found says '$version'"
    has "$loader_msg" || fail "NCCL was found but the backend has no NCCL loader"
    ! has "$without_msg" || fail "NCCL was found but the backend says it was built without"
    if [ -n "$CUDA_TEST_NCCL_LIBRARY" ]; then
        has "$CUDA_TEST_NCCL_LIBRARY" ||
            fail "the backend does not record $CUDA_TEST_NCCL_LIBRARY (NCCL_LIBRARY)"
        [ -e "$CUDA_TEST_NCCL_LIBRARY" ] || fail "$CUDA_TEST_NCCL_LIBRARY, recorded at build" \
            "time, is gone: re-run the configuration (bazel sync --only=local_cuda)"
    fi
    echo "the backend is built with NCCL $version (nccl.h: $(readlink -f "$h"));" \
        "libnccl recorded at build time: ${CUDA_TEST_NCCL_LIBRARY:-(none)}"
else
    [ -n "$CUDA_TEST_NCCL_REASON" ] || fail "NCCL_FOUND is False without a reason"
    has "$without_msg" || fail "NCCL was not found but the backend does not say so"
    ! has "$loader_msg" || fail "NCCL was not found but the backend has an NCCL loader"
    echo "the backend is built without NCCL: $CUDA_TEST_NCCL_REASON"
fi
