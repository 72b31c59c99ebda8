"""Repository rule for a second C/C++ toolchain: Bazel's own autoconfiguration run with clang as
the compiler, for the libFuzzer build (`--config=fuzz` in .bazelrc, fuzz/BUILD).

Bazel 4.2.3 configures its C++ toolchain (@local_config_cc) from $CC when it first loads the
workspace. Setting CC=clang for a fuzz build would re-run that configuration and rebuild every
target, and again when switching back. This rule calls the same autoconfiguration
(cc_autoconf_impl of @bazel_tools//tools/cpp:cc_configure.bzl, the code behind
@local_config_cc) with clang in place of gcc and writes the result to a repository of its own,
so both toolchains stay configured side by side and `--crosstool_top` picks one per build.
Nothing is downloaded; the repository is only evaluated by builds that name it.

Environment (a change re-runs the rule):
  FUZZ_CC  the clang to use, a name on PATH or an absolute path (default: clang). libFuzzer's
           runtime comes with it (Debian: clang and libclang-rt-14-dev).
"""

load("@bazel_tools//tools/cpp:cc_configure.bzl", "cc_autoconf_impl")

def _clang_configure_impl(ctx):
    name = ctx.os.environ.get("FUZZ_CC", "").strip() or "clang"
    clang = ctx.path(name) if name.startswith("/") else ctx.which(name)
    if clang == None or not clang.exists:
        fail(("--config=fuzz builds with clang, and %s was not found: install clang and " +
              "libclang-rt-14-dev (make fuzz-build does), or set FUZZ_CC to a clang") % name)
    cc_autoconf_impl(ctx, overriden_tools = {"gcc": str(clang)})

clang_configure = repository_rule(
    implementation = _clang_configure_impl,
    environ = ["FUZZ_CC"],
    configure = True,
)
