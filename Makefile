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

.PHONY: all deps build test test-default test-asan test-tsan conformance bench demo format \
	format-check clean

all: build

# Installs the Debian packages that are missing (apt-get update once, only if needed).
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi

build: deps
	$(BAZEL) build //...

# The test suite: format check, all tests, then the sanitizer runs; one summary line at the end.
test: deps
	@rm -rf $(OUT)/testlogs; mkdir -p $(OUT)/testlogs; rc=0; \
	$(MAKE) --no-print-directory format-check || rc=1; \
	$(MAKE) --no-print-directory test-default || rc=1; \
	$(MAKE) --no-print-directory test-asan || rc=1; \
	$(MAKE) --no-print-directory test-tsan || rc=1; \
	python3 tools/test_summary.py $(OUT)/testlogs || rc=1; \
	exit $$rc

# Runs one Bazel test configuration and keeps its JUnit logs under out/testlogs/<name>.
define bazel_test
	@echo "== bazel test $(2) ($(1))"
	@rc=0; $(BAZEL) test $(3) $(2) || rc=$$?; \
	rm -rf $(OUT)/testlogs/$(1); mkdir -p $(OUT)/testlogs/$(1); \
	cp -rL bazel-testlogs/. $(OUT)/testlogs/$(1)/ 2>/dev/null || true; \
	exit $$rc
endef

test-default: deps
	$(call bazel_test,default,//...,)

test-asan: deps
	$(call bazel_test,asan,$(SANITIZED),--config=asan)

test-tsan: deps
	$(call bazel_test,tsan,$(SANITIZED),--config=tsan)

# For BACKEND=trainium without a real Neuron runtime (no HAL_NEURON_LIBNRT and nothing in
# /opt/aws/neuron/lib), the libnrt emulator is built and used, on two emulated NeuronCores.
NEURON_RUNTIME := /opt/aws/neuron/lib/libnrt.so.1
conformance: deps
	$(BAZEL) build //conformance:hal_conformance //hal_backends/$(BACKEND):libhal_backend_$(BACKEND).so
	@if [ "$(BACKEND)" = trainium ] && [ -z "$$HAL_NEURON_LIBNRT" ] && [ ! -e $(NEURON_RUNTIME) ]; then \
	  $(BAZEL) build //hal_backends/trainium/emulator:libnrt.so.1 && \
	  echo "conformance: no Neuron runtime found; using the libnrt emulator on 2 NeuronCores"; \
	  export HAL_NEURON_LIBNRT=$$PWD/bazel-bin/hal_backends/trainium/emulator/libnrt.so.1; \
	  export NEURON_RT_NUM_CORES=$${NEURON_RT_NUM_CORES:-2}; \
	fi; \
	HAL_BACKEND_PATH=$$PWD/bazel-bin/hal_backends/$(BACKEND) \
	  ./bazel-bin/conformance/hal_conformance --backend=$(BACKEND) $(CONFORMANCE_ARGS)

bench: deps
	$(BAZEL) build //bench:hal_bench //hal_backends/cpu:libhal_backend_cpu.so
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
