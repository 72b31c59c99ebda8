# torch-hal front door. Every target installs what it needs on a fresh Debian 12 machine, then
# delegates to Bazel.
#
#   make demo                       the main job (see README)
#   make test                       every test, including the sanitizer runs
#   make conformance BACKEND=cpu    the conformance suite on one backend
#   make bench                      benchmarks with figures and targets
#   make format / format-check      clang-format the C/C++ sources / check them

SHELL := /bin/bash
BACKEND ?= cpu
BAZEL ?= bazel
OUT := out
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := bazel-bootstrap bazel-rules-java googletest libgtest-dev clang-format python3
C_SOURCES = $(shell git ls-files '*.c' '*.h' '*.cc' '*.cpp')
# Packages of C/C++ targets exercised by the sanitizer runs.
SANITIZED := //hal/... //hal_backends/... //conformance/...


.PHONY: all deps deps-bench build test test-default test-asan test-tsan conformance bench demo format \
	format-check clean

all: build

# Installs the Debian packages that are missing (apt-get update once, only if needed).
define apt_install
	@missing=""; for p in $(1); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing$$missing"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi
endef

deps:
	$(call apt_install,$(APT_PACKAGES))

# The collectives benchmark's peers: Open MPI and Gloo from Debian.
BENCH_APT_PACKAGES := openmpi-bin libopenmpi-dev libgloo-dev
deps-bench: deps-bench
	$(BAZEL) build //bench:hal_bench //bench:coll_peers //hal_backends/cpu:libhal_backend_cpu.so
	HAL_BACKEND_PATH=$$PWD/bazel-bin/hal_backends/cpu ./bazel-bin/bench/hal_bench $(BENCH_ARGS)

# The main job. Until the PyTorch bridge exists: the conformance suite and the benchmarks on the
# cpu reference backend, with their summaries.
demo: deps
	@$(MAKE) --no-print-directory conformance BACKEND=cpu
	@$(MAKE) --no-print-directory bench

format:
	clang-format -i $(C_SOURCES)

format-check:
	@mkdir -p $(OUT)/testlogs/format
	@python3 tools/format_check.py --junit $(OUT)/testlogs/format/test.xml

clean:
	$(BAZEL) clean
	rm -rf $(OUT)
