# torch-hal front door. Every target installs what it needs on a fresh Debian 12 machine (Debian
# packages, the torch 2.13.0 wheel, the bridge), then delegates to Bazel and the project's scripts.
#
#   make demo                       the main job: examples/demo.sh (DDP training on the emulated
#                                   Trainium device and on the CPU, losses compared)
#   make test                       every test; ends with "N passed, N failed[, N skipped]"
#   make conformance BACKEND=cpu    the conformance suite on one backend (cpu, trainium, cuda)
#   make bench                      benchmarks with figures, ratios and targets; writes
#                                   out/bench/report.html and the JSON results behind it
#   make bench-compare OLD=a.json NEW=b.json   two results figure by figure, against the noise
#   make bench-screenshot           bench/report.png: the report as headless Chromium shows it
#   make patches-check              the PyTorch patch series: lint, apply check, per-patch tests,
#                                   the CUDA-style acceptance scripts on hal and neuron (table)
#   make census                     CUDA hardcoding in torch before and after the series
#   make soak                       randomized fault campaign (HAL_LAYERS=faults) over the
#                                   conformance suite and DDP training
#   make fuzz / fuzz-smoke          libFuzzer targets (fuzz/README.md)
#   make format / format-check      clang-format the C/C++ sources / check them
#   make gpu-bundle                 binaries for conformance/gpu/run.sh on a GPU machine

SHELL := /bin/bash
BACKEND ?= cpu
BAZEL ?= bazel
PYTHON ?= python3
OUT := out
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# ninja-build: torch's extension builder compiles the bridge's sources in parallel with it (one
# at a time without it).
APT_PACKAGES := bazel-bootstrap bazel-rules-java googletest libgtest-dev clang-format python3 \
	python3-venv quilt ninja-build
TORCH_VERSION := 2.13.0
# The newer supported release: the bridge is also built and tested against the unmodified torch
# 2.14.1 wheel (the CUDA 13 build, the only 2.14.1 wheel) in a virtual environment of its own.
TORCH_NEXT_VERSION := 2.14.1
VENV_NEXT := $(OUT)/venv-$(TORCH_NEXT_VERSION)
# What the bridge's and the patch series' tests import besides torch (transformers: the
# third-party model the bridge's tests train on the device and on the CPU; no weights are
# downloaded).
PY_TEST_PACKAGES := pytest expecttest transformers==5.25.0
# What draws the plots (examples/compare_losses.py: make demo) and its test.
PY_PLOT_PACKAGES := matplotlib
# What compiles the conformance suite's Triton kernel for GPUs ahead of time (tools/triton_aot.py,
# //conformance:triton_aot_test, make gpu-bundle); no GPU is needed.
PY_COMPILE_PACKAGES := triton
# What torch.compile on devices that take StableHLO (neuron) lowers graphs with (torch-mlir, the
# build for torch 2.13), and what the libnrt emulator executes the modules with in place of the
# Neuron compiler (XLA's CPU compiler from jaxlib; stablehlo_executor.py uses a private jaxlib
# API, hence the pin). Optional at run time: without them torch.compile on neuron warns and
# behaves as before.
PY_STABLEHLO_PACKAGES := torch-mlir==20261001 jax==0.10.2 jaxlib==0.10.2
# The viewers whose own loaders the profiler tests read the device's traces with
# (bridge/tests/test_profiler.py, test_distributed.py): TensorBoard's profiler plugin and
# Holistic Trace Analysis (which imports psutil without declaring it).
PY_PROFILER_PACKAGES := torch-tb-profiler==0.4.3 HolisticTraceAnalysis==0.5.0 psutil
C_SOURCES = $(shell git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cc' '*.cpp')
# C/C++ targets exercised by the sanitizer runs: every C unit test and the conformance suite on
# the cpu and trainium backends, on each backend's device 0 (SANITIZER_TEST_FLAGS: the second
# device runs the same code). Left to the default configuration, for CI time: the suite under the
# validation and trace layers, on the template backends (their code is the toolkit's, hq.c and
# the HAL's host-staged collectives, which the cpu backend's run covers), and on trainium with its
# native collectives off (the same host-staged engine, which the cpu run covers; the trainium
# run covers the backend); the script-driven checks (generated ABI, exported symbols, trace
# merging, the summary tool, the harness's handling of crashes and hangs, the Triton
# ahead-of-time compile).
SANITIZED := -- //hal/... //hal_backends/... //conformance/... //tools/... \
	-//conformance:conformance_cpu_validation -//conformance:conformance_cpu_trace \
	-//conformance:conformance_trainium_validation -//conformance:conformance_template \
	-//conformance:conformance_template_required_only -//conformance:conformance_trainium_host_comm \
	-//conformance:harness_test -//conformance:triton_aot_test -//hal/abi:generated_test \
	-//hal/tests/abi:symbols_test \
	-//hal/layers/tests:merge_traces_test -//tools:test_summary_test
SANITIZER_TEST_FLAGS := --test_env=HAL_CTS_DEVICE=0
TESTLOGS := $(OUT)/testlogs
JUNIT := $(PYTHON) tools/junit.py

.PHONY: all deps deps-python deps-bench bridge build test test-default test-asan test-tsan test-zoo \
	test-bridge-next bridge-next \
	test-openreg \
	test-default-bazel test-bridge test-patches test-fuzz test-soak conformance bench bench-compare \
	bench-screenshot demo patches-check census soak fuzz fuzz-smoke fuzz-build fuzz-deps format \
	format-check clean gpu-bundle

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

# torch 2.13.0 (the CPU wheel), the test and plot packages, only if missing.
deps-python: deps
	@$(PYTHON) -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "$(TORCH_VERSION)")' \
	  2>/dev/null || { echo "make: installing torch==$(TORCH_VERSION)"; \
	  $(PYTHON) -m pip install -q torch==$(TORCH_VERSION); }
	@$(PYTHON) -c 'import pytest, expecttest, transformers' 2>/dev/null || \
	  $(PYTHON) -m pip install -q $(PY_TEST_PACKAGES)
	@$(PYTHON) -c 'import matplotlib' 2>/dev/null || \
	  $(PYTHON) -m pip install -q $(PY_PLOT_PACKAGES)
	@$(PYTHON) -c 'import triton' 2>/dev/null || \
	  $(PYTHON) -m pip install -q $(PY_COMPILE_PACKAGES)
	@$(PYTHON) -c 'import torch_mlir, jax, jaxlib, sys; sys.exit(jax.__version__ != "0.10.2")' \
	  2>/dev/null || $(PYTHON) -m pip install -q $(PY_STABLEHLO_PACKAGES)
	@$(PYTHON) -c 'import torch_tb_profiler, hta, psutil' 2>/dev/null || \
	  $(PYTHON) -m pip install -q $(PY_PROFILER_PACKAGES)

# The PyTorch bridge, built against the installed torch (no build isolation: no other torch).
# Skipped when what it is built from (bridge/, the HAL, the backends) has not changed since the
# last install (the benchmark report's tools under tools/ are not among them).
BRIDGE_INPUTS = $(filter-out tools/bench_% tools/tests/%,$(shell git ls-files --cached --others \
	--exclude-standard bridge hal hal_backends tools third_party WORKSPACE .bazelrc))
bridge: deps-python
	@hash=$$(cat $(BRIDGE_INPUTS) | sha1sum | cut -d' ' -f1; $(PYTHON) -c 'import torch; print(torch.__version__)'); \
	if [ "$$hash" = "$$(cat $(OUT)/bridge-$(TORCH_VERSION).hash 2>/dev/null)" ] && \
	  (cd /tmp && $(PYTHON) -c 'import torch_hal') 2>/dev/null; then \
	  echo "make: torch_hal is up to date"; \
	else \
	  echo "make: building and installing torch_hal (bridge/)"; \
	  $(PYTHON) -m pip install -q --no-build-isolation --no-deps ./bridge && \
	  mkdir -p $(OUT) && echo "$$hash" > $(OUT)/bridge-$(TORCH_VERSION).hash; \
	fi

# The collectives benchmark's peers: Open MPI and Gloo from Debian.
BENCH_APT_PACKAGES := openmpi-bin libopenmpi-dev libgloo-dev
deps-bench: deps
	$(call apt_install,$(BENCH_APT_PACKAGES))

build: deps
	$(BAZEL) build //...

# ---- tests -------------------------------------------------------------------------------------

# Every test, each suite's JUnit XML under out/testlogs/<suite>, then one summary line.
# test-bridge-next comes first: it installs torch 2.14.1 and with it nvidia-nccl-cu13 in
# out/venv-2.14.1, where //third_party:cuda_configure.bzl finds NCCL when Bazel starts, so every
# build after it compiles the cuda backend's native collectives.
# test-openreg runs beside test-bridge, 2 files at a time (its files mostly wait: test_ipc.py's
# 30 s per case), once the bridge is installed; its output follows test-bridge's.
TEST_SUITES := format-check test-bridge-next test-default test-asan test-tsan test-bridge \
	test-patches test-fuzz test-soak
test: deps-python
	@rm -rf $(TESTLOGS); mkdir -p $(TESTLOGS); rc=0; start=$$SECONDS; \
	for t in $(TEST_SUITES); do \
	  echo "== make $$t ($$((SECONDS - start)) s so far)"; \
	  if [ $$t = test-bridge ]; then \
	    $(MAKE) --no-print-directory bridge || rc=1; \
	    echo "== make test-openreg beside it ($(TESTLOGS)/openreg.log)"; \
	    ($(MAKE) --no-print-directory test-openreg OPENREG_JOBS=2 > $(TESTLOGS)/openreg.log 2>&1; \
	     echo $$? > $(TESTLOGS)/openreg.rc) & \
	  fi; \
	  $(MAKE) --no-print-directory $$t || rc=1; \
	  if [ $$t = test-bridge ]; then \
	    wait; echo "== make test-openreg"; cat $(TESTLOGS)/openreg.log; \
	    [ "$$(cat $(TESTLOGS)/openreg.rc 2>/dev/null)" = 0 ] || rc=1; \
	  fi; \
	done; \
	echo "== make test: $$((SECONDS - start)) s"; \
	$(PYTHON) tools/test_summary.py $(TESTLOGS) || rc=1; \
	exit $$rc

# Runs one Bazel test configuration and keeps the JUnit logs of the targets it tested under
# out/testlogs/<name> (tools/bazel_tested.py reads them from Bazel's build event file:
# bazel-testlogs also holds the logs of targets earlier runs tested and this one did not;
# tools/test_summary.py counts only a target's newest set of shard logs).
define bazel_test
	@echo "== bazel test $(2) ($(1))"
	@rc=0; bep=$(OUT)/bazel-events-$(1).json; mkdir -p $(OUT); \
	$(BAZEL) test --build_event_json_file=$$bep $(3) $(2) || rc=$$?; \
	rm -rf $(TESTLOGS)/$(1); mkdir -p $(TESTLOGS)/$(1); \
	dirs=$$($(PYTHON) tools/bazel_tested.py $$bep); \
	if [ -z "$$dirs" ]; then echo "make: no tested target in $$bep"; rc=1; fi; \
	for dir in $$dirs; do \
	  mkdir -p $(TESTLOGS)/$(1)/$$(dirname $$dir); \
	  cp -rL --preserve=timestamps bazel-testlogs/$$dir $(TESTLOGS)/$(1)/$$dir 2>/dev/null || true; \
	done; \
	exit $$rc
endef

# The tools' own tests (the benchmark report and comparison, the OpenReg check, the Bazel log
# selection; pytest, a few seconds), then Bazel's tests; both run whatever the other's outcome.
BENCH_TOOLS_TESTS := tools/tests/test_bench_report.py tools/tests/test_bench_compare.py \
	tools/tests/test_openreg_run.py tools/tests/test_bazel_tested.py
test-default: deps-python
	@rc=0; $(PYTHON) -m pytest -q -p no:cacheprovider $(BENCH_TOOLS_TESTS) \
	  --junitxml=$(TESTLOGS)/bench-tools/test.xml || rc=1; \
	$(MAKE) --no-print-directory test-default-bazel || rc=1; exit $$rc

test-default-bazel: deps
	$(call bazel_test,default,//...,)

test-asan: deps
	$(call bazel_test,asan,$(SANITIZED),--config=asan $(SANITIZER_TEST_FLAGS))

test-tsan: deps
	$(call bazel_test,tsan,$(SANITIZED),--config=tsan $(SANITIZER_TEST_FLAGS))

# The bridge's tests (OpInfo, device behaviour, DDP, loss alignment) on the cpu backend and on
# the Trainium backend over the libnrt emulator, the two runs side by side (each is mostly one
# Python thread); the Trainium run's output follows the cpu run's. Run outside the checkout, so
# that the installed package is what is tested. Each run is an emulated Trainium machine of its
# own (bridge/tests/conftest.py sets NEURON_EMU_INSTANCE_ID), so runs beside it never take its
# NeuronCores; a backend that cannot be opened fails the run, it is never skipped. Tests marked
# own_backend start processes on a backend of their choosing, whatever the run's, so they run once,
# in the cpu run; those marked own_backend_trainium (their processes on the Trainium backend) or
# backend_neutral (the same whatever the run's backend) in the trainium run, so that the two runs
# take about as long (about 300 s each on two CPUs). The model zoo's compiled runs (TORCH_HAL_ZOO, marker
# zoo) are make test-zoo's.
# Inductor compiles in the test process (no pool of compile workers beside two test runs).
BRIDGE_PYTEST := TORCHINDUCTOR_COMPILE_THREADS=1 $(PYTHON) -m pytest -q -p no:cacheprovider $(CURDIR)/bridge/tests
test-bridge: bridge
	@mkdir -p $(TESTLOGS)/bridge-trainium; log=$(CURDIR)/$(TESTLOGS)/bridge-trainium/pytest.log; \
	(cd /tmp && TORCH_HAL_BACKEND=trainium $(BRIDGE_PYTEST) -m 'not own_backend and not zoo' \
	  --junitxml=$(CURDIR)/$(TESTLOGS)/bridge-trainium/test.xml > $$log 2>&1) & trn=$$!; \
	echo "== bridge tests on cpu (on trainium beside it: $(TESTLOGS)/bridge-trainium/pytest.log)"; \
	cd /tmp && $(BRIDGE_PYTEST) -m 'not own_backend_trainium and not backend_neutral and not zoo' \
	  --junitxml=$(CURDIR)/$(TESTLOGS)/bridge-cpu/test.xml; rc1=$$?; \
	wait $$trn; rc2=$$?; echo "== bridge tests on trainium"; cat $$log; \
	[ $$rc1 = 0 ] && [ $$rc2 = 0 ]

# The same bridge tests on torch $(TORCH_NEXT_VERSION): a virtual environment (out/venv-2.14.1)
# gets that wheel and the test packages, the bridge is built against it, and test-bridge runs
# there, its JUnit logs under out/testlogs/torch-$(TORCH_NEXT_VERSION)/.
test-bridge-next: bridge-next
	@$(MAKE) --no-print-directory test-bridge PYTHON=$(CURDIR)/$(VENV_NEXT)/bin/python \
	  TORCH_VERSION=$(TORCH_NEXT_VERSION) TESTLOGS=$(TESTLOGS)/torch-$(TORCH_NEXT_VERSION)

# The virtual environment of torch $(TORCH_NEXT_VERSION) with the bridge built against it.
bridge-next: deps
	@[ -x $(VENV_NEXT)/bin/python ] || python3 -m venv $(VENV_NEXT)
	@$(MAKE) --no-print-directory bridge PYTHON=$(CURDIR)/$(VENV_NEXT)/bin/python \
	  TORCH_VERSION=$(TORCH_NEXT_VERSION)

# The whole model zoo (bridge/tests/test_model_zoo.py): every model compiled on the cpu backend
# against the CPU's compiled run, FSDP2 with torch.compile on two ranks, and every model eager on
# the Trainium backend. About 10 minutes on two CPUs with Inductor's caches cold; make test runs
# the eager zoo (and test_compile.py an attention block compiled).
test-zoo: bridge
	@cd /tmp && TORCH_HAL_ZOO=all $(BRIDGE_PYTEST)/test_model_zoo.py && \
	$(BRIDGE_PYTEST)/test_distributed.py -m zoo && \
	TORCH_HAL_BACKEND=trainium $(BRIDGE_PYTEST)/test_model_zoo.py

# PyTorch's OpenReg tests as upstream wrote them (bridge/tests/openreg_upstream/), renamed onto
# hal and neuron by tools/openreg_rename.py, each file in a pytest process of its own
# (OPENREG_JOBS at a time); every case's outcome is checked against
# openreg_upstream/expected_failures.txt (the causes: openreg_upstream/RESULTS.md). About 3
# minutes alone, most of it test_ipc.py's waits; make test runs it beside test-bridge.
OPENREG_JOBS ?= 4
test-openreg: bridge
	@$(PYTHON) tools/openreg_run.py --check --jobs $(OPENREG_JOBS) --junit $(TESTLOGS)/openreg/test.xml

# The patch series: the tools' own tests, lint, per-patch tests, acceptance, census.
test-patches: bridge
	@rc=0; $(PYTHON) -m pytest -q -p no:cacheprovider patches/tests/test_tools_halpatch.py \
	  patches/tests/test_tools_census.py patches/tests/test_tools_acceptance.py \
	  --junitxml=$(TESTLOGS)/patches-tools/test.xml || rc=1; \
	$(MAKE) --no-print-directory -k patches-check census PATCHES_JUNIT=$(TESTLOGS) || rc=1; \
	exit $$rc

# A few seconds of every fuzz target (the full run is make fuzz).
test-fuzz:
	@$(JUNIT) --out $(TESTLOGS)/fuzz-smoke/test.xml --suite fuzz-smoke -- \
	  $(MAKE) --no-print-directory fuzz-smoke

# A short fault campaign (the full one is make soak).
test-soak: bridge
	@$(MAKE) --no-print-directory soak SOAK_ARGS="--smoke" \
	  SOAK_JUNIT=$(TESTLOGS)/soak-smoke/test.xml

# ---- the main job, conformance, benchmarks -----------------------------------------------------

demo: bridge
	@bash examples/demo.sh

# For BACKEND=trainium without a real Neuron runtime (no HAL_NEURON_LIBNRT and nothing in
# /opt/aws/neuron/lib), the libnrt emulator is built and used, on two emulated NeuronCores of an
# emulated machine of the run's own (NEURON_EMU_INSTANCE_ID, unless one is chosen), whose lock
# files go when the run ends.
NEURON_RUNTIME := /opt/aws/neuron/lib/libnrt.so.1
conformance: deps
	$(BAZEL) build //conformance:hal_conformance //hal_backends/$(BACKEND):libhal_backend_$(BACKEND).so
	@if [ "$(BACKEND)" = trainium ] && [ -z "$$HAL_NEURON_LIBNRT" ] && [ ! -e $(NEURON_RUNTIME) ]; then \
	  $(BAZEL) build //hal_backends/trainium/emulator:libnrt.so.1 && \
	  echo "conformance: no Neuron runtime found; using the libnrt emulator on 2 NeuronCores"; \
	  export HAL_NEURON_LIBNRT=$$PWD/bazel-bin/hal_backends/trainium/emulator/libnrt.so.1; \
	  export NEURON_RT_NUM_CORES=$${NEURON_RT_NUM_CORES:-2}; \
	  if [ -z "$$NEURON_EMU_INSTANCE_ID$$NEURON_EMU_LOCK_DIR" ]; then \
	    export NEURON_EMU_INSTANCE_ID=conformance-$$$$; \
	    trap 'rm -rf "$${TMPDIR:-/tmp}/neuron-emu-$$(id -u)/$$NEURON_EMU_INSTANCE_ID"' EXIT; \
	  fi; \
	fi; \
	HAL_BACKEND_PATH=$$PWD/bazel-bin/hal_backends/$(BACKEND) \
	  ./bazel-bin/conformance/hal_conformance --backend=$(BACKEND) $(CONFORMANCE_ARGS)

# hal_bench on the cpu backend and on the Trainium backend over the libnrt emulator, then the
# training step time of the bridge (examples/bench_step_time.py), each writing its JSON results
# under out/bench, then the report (out/bench/report.html) from both; its table of targets goes
# to stdout. The report is written even when a measurement failed (it says what is missing);
# the exit status is then non-zero. BENCH_STEP_TIME=0 leaves the step time out; a --quick in
# BENCH_ARGS makes the step time quick too.
BENCH_BACKENDS ?= cpu,trainium
BENCH_STEP_TIME ?= 1
BENCH_DIR := $(OUT)/bench
BENCH_COMMIT = $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD \
	2>/dev/null || echo -modified)
bench: deps-bench bridge
	$(BAZEL) build //bench:hal_bench //bench:coll_peers //hal_backends/cpu:libhal_backend_cpu.so \
	  //hal_backends/trainium:libhal_backend_trainium.so //hal_backends/trainium/emulator:libnrt.so.1
	@mkdir -p $(BENCH_DIR); rm -f $(BENCH_DIR)/hal_bench.json $(BENCH_DIR)/step_time.json; rc=0; \
	HAL_BACKEND_PATH=$$PWD/bazel-bin/hal_backends/cpu:$$PWD/bazel-bin/hal_backends/trainium \
	  HAL_NEURON_LIBNRT=$${HAL_NEURON_LIBNRT:-$$PWD/bazel-bin/hal_backends/trainium/emulator/libnrt.so.1} \
	  NEURON_RT_NUM_CORES=$${NEURON_RT_NUM_CORES:-2} \
	  ./bazel-bin/bench/hal_bench --backend=$(BENCH_BACKENDS) $(BENCH_ARGS) \
	  --json=$(BENCH_DIR)/hal_bench.json --commit=$(BENCH_COMMIT) || rc=1; \
	if [ "$(BENCH_STEP_TIME)" != 0 ]; then \
	  (cd /tmp && $(PYTHON) $(CURDIR)/examples/bench_step_time.py \
	    $(if $(findstring --quick,$(BENCH_ARGS)),--quick) --commit=$(BENCH_COMMIT) \
	    --json $(CURDIR)/$(BENCH_DIR)/step_time.json) || rc=1; \
	fi; \
	$(PYTHON) tools/bench_report.py --bench $(BENCH_DIR)/hal_bench.json \
	  --step-time $(BENCH_DIR)/step_time.json --out $(BENCH_DIR)/report.html || rc=1; \
	exit $$rc

# Two results (hal_bench's or the step time's JSON) figure by figure: NEW/OLD for each, flagged
# where it moved beyond the run-to-run noise measured on this machine (bench/noise.json).
# COMPARE_ARGS: e.g. --moved (only what moved), --strict (exit 1 when something got worse).
bench-compare:
	@[ -n "$(OLD)" ] && [ -n "$(NEW)" ] || \
	  { echo "usage: make bench-compare OLD=a.json NEW=b.json"; exit 2; }
	$(PYTHON) tools/bench_compare.py $(OLD) $(NEW) \
	  $(if $(wildcard bench/noise.json),--noise bench/noise.json) $(COMPARE_ARGS)

# The report of the last make bench, drawn again and pictured by headless Chromium into
# bench/report.png (the picture in bench/README.md).
bench-screenshot: deps-python
	$(call apt_install,chromium)
	@[ -e $(BENCH_DIR)/hal_bench.json ] || \
	  { echo "make bench-screenshot: no $(BENCH_DIR)/hal_bench.json: run make bench first"; exit 2; }
	$(PYTHON) tools/bench_report.py --bench $(BENCH_DIR)/hal_bench.json \
	  --step-time $(BENCH_DIR)/step_time.json --out $(BENCH_DIR)/report.html \
	  --screenshot bench/report.png

# ---- the patch series --------------------------------------------------------------------------

# PATCHES_JUNIT=DIR also writes each step's JUnit XML below DIR (make test does).
PATCHES_JUNIT ?=
patch_junit = $(if $(PATCHES_JUNIT),--junit $(PATCHES_JUNIT)/$(1)/test.xml)
PYTHON_NEXT := $(CURDIR)/$(VENV_NEXT)/bin/python
SERIES_NEXT := patches/$(TORCH_NEXT_VERSION)
patches-check: bridge bridge-next
	@echo "== lint"
	@$(if $(PATCHES_JUNIT),$(JUNIT) --out $(PATCHES_JUNIT)/patches-lint/test.xml --suite patches-lint --) \
	  $(PYTHON) patches/tools/halpatch.py lint
	@echo "== apply --check (the installed torch, read only)"
	@$(if $(PATCHES_JUNIT),$(JUNIT) --out $(PATCHES_JUNIT)/patches-apply-check/test.xml --suite patches-apply-check --) \
	  $(PYTHON) patches/tools/halpatch.py apply --check installed
	@echo "== per-patch tests (private copies of torch in virtual environments: unpatched, patched)"
	@$(PYTHON) patches/tools/run_tests.py $(call patch_junit,patches-tests)
	@echo "== acceptance: CUDA-style scripts under torchrun on hal and neuron, unpatched vs patched"
	@$(PYTHON) patches/acceptance/run_acceptance.py $(call patch_junit,patches-acceptance)
	@echo "== the $(TORCH_NEXT_VERSION) series ($(SERIES_NEXT)): lint, apply --check, per-patch tests and acceptance on torch $(TORCH_NEXT_VERSION)"
	@$(if $(PATCHES_JUNIT),$(JUNIT) --out $(PATCHES_JUNIT)/patches-lint-$(TORCH_NEXT_VERSION)/test.xml \
	  --suite patches-lint-$(TORCH_NEXT_VERSION) --) \
	  $(PYTHON_NEXT) patches/tools/halpatch.py --series-dir $(SERIES_NEXT) lint
	@$(if $(PATCHES_JUNIT),$(JUNIT) --out $(PATCHES_JUNIT)/patches-apply-check-$(TORCH_NEXT_VERSION)/test.xml \
	  --suite patches-apply-check-$(TORCH_NEXT_VERSION) --) \
	  $(PYTHON_NEXT) patches/tools/halpatch.py --series-dir $(SERIES_NEXT) apply --check installed
	@$(PYTHON_NEXT) patches/tools/run_tests.py --series-dir $(SERIES_NEXT) \
	  $(call patch_junit,patches-tests-$(TORCH_NEXT_VERSION))
	@echo "== acceptance on torch $(TORCH_NEXT_VERSION), unpatched vs its series"
	@$(PYTHON_NEXT) patches/acceptance/run_acceptance.py --series-dir $(SERIES_NEXT) \
	  $(call patch_junit,patches-acceptance-$(TORCH_NEXT_VERSION))

# The census of each supported release with its series, then the two releases side by side:
# what upstream removed between them beside what each series removes. The three run at once
# (each scans torch trees on one CPU); their reports are printed in this order.
census: deps-python bridge-next
	@tmp=$$(mktemp -d); \
	old_tree=$$($(PYTHON) -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))'); \
	new_tree=$$($(PYTHON_NEXT) -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))'); \
	($(if $(PATCHES_JUNIT),$(JUNIT) --out $(PATCHES_JUNIT)/census/test.xml --suite census --) \
	  $(PYTHON) upstream_tracking/census.py --series > $$tmp/1.log 2>&1; echo $$? > $$tmp/1.rc) & \
	($(if $(PATCHES_JUNIT),$(JUNIT) --out $(PATCHES_JUNIT)/census-$(TORCH_NEXT_VERSION)/test.xml \
	  --suite census-$(TORCH_NEXT_VERSION) --) \
	  $(PYTHON_NEXT) upstream_tracking/census.py --series --series-dir $(SERIES_NEXT) \
	  > $$tmp/2.log 2>&1; echo $$? > $$tmp/2.rc) & \
	($(PYTHON) upstream_tracking/census.py --compare "$$old_tree" "$$new_tree" > $$tmp/3.log 2>&1; \
	  echo $$? > $$tmp/3.rc) & \
	wait; rc=0; for i in 1 2 3; do \
	  cat $$tmp/$$i.log; [ "$$(cat $$tmp/$$i.rc 2>/dev/null)" = 0 ] || rc=1; done; \
	rm -rf $$tmp; exit $$rc

# ---- reliability -------------------------------------------------------------------------------

# soak/README.md: 200 runs (default budget 10 minutes); SOAK_ARGS="--smoke" for the short one.
SOAK_ARGS ?=
SOAK_JUNIT ?=
soak: bridge
	$(BAZEL) build //conformance:hal_conformance //hal_backends/cpu:libhal_backend_cpu.so
	$(PYTHON) soak/soak.py $(SOAK_ARGS) $(if $(SOAK_JUNIT),--junit $(SOAK_JUNIT))

# ---- fuzzing -----------------------------------------------------------------------------------

# libFuzzer targets (fuzz/README.md), built by Bazel with clang (bazel build --config=fuzz
# //fuzz/...) and copied to FUZZ_OUT/bin, where fuzz/run.sh runs them:
#   make fuzz          every target until it made FUZZ_RUNS executions or FUZZ_SECONDS passed,
#                      then a table: executions, crashes, coverage per target
#   make fuzz-smoke    every target for FUZZ_SMOKE_SECONDS (CI)
#   make fuzz-build    only build the targets
# FUZZ_CC=<clang> builds with another clang (third_party/clang_configure.bzl reads it).
FUZZ_OUT ?= $(OUT)/fuzz
FUZZ_RUNS ?= 10000000
# Sized so that the slowest target still reaches FUZZ_RUNS on one core (see fuzz/README.md);
# faster targets stop at FUZZ_RUNS.
FUZZ_SECONDS ?= 1800
FUZZ_SMOKE_SECONDS ?= 3
FUZZ_PYTHON ?= python3
# clang, libFuzzer's runtime, and lld (the fuzz build's linker, see .bazelrc).
FUZZ_APT_PACKAGES := clang libclang-rt-14-dev lld
# The C targets (fuzz/BUILD: //fuzz:fuzz_<name>), then the atheris one (fuzz/fuzz_<name>.py).
FUZZ_C_TARGETS := unique_id bootstrap_wire faults_spec layers_env cpu_env comm_bind comm_timeout
FUZZ_TARGETS := $(FUZZ_C_TARGETS) patch_header

# Installs clang, libFuzzer's runtime and lld (apt) and atheris (pip) if they are missing.
fuzz-deps: deps
	$(call apt_install,$(FUZZ_APT_PACKAGES))
	@$(FUZZ_PYTHON) -c 'import atheris' 2>/dev/null || \
	  $(FUZZ_PYTHON) -m pip install -q atheris || \
	  echo "fuzz-deps: atheris could not be installed; fuzz_patch_header will be skipped"

fuzz-build: fuzz-deps
	$(BAZEL) build --config=fuzz $(foreach t,$(FUZZ_C_TARGETS),//fuzz:fuzz_$(t))
	@bin=$$($(BAZEL) info --config=fuzz bazel-bin 2>/dev/null) && mkdir -p $(FUZZ_OUT)/bin && \
	  for t in $(FUZZ_C_TARGETS); do cp -f $$bin/fuzz/fuzz_$$t $(FUZZ_OUT)/bin/ || exit 1; done

fuzz: fuzz-build
	@FUZZ_PYTHON=$(FUZZ_PYTHON) fuzz/run.sh --out $(FUZZ_OUT) --seconds $(FUZZ_SECONDS) \
	  --runs $(FUZZ_RUNS) $(FUZZ_TARGETS)

fuzz-smoke: fuzz-build
	@FUZZ_PYTHON=$(FUZZ_PYTHON) fuzz/run.sh --out $(FUZZ_OUT) --seconds $(FUZZ_SMOKE_SECONDS) \
	  --runs 0 $(FUZZ_TARGETS)

# ---- other -------------------------------------------------------------------------------------

# What conformance/gpu/run.sh runs on an NVIDIA GPU machine without Bazel (out/gpu-bundle); see
# hal_backends/cuda/README.md.
gpu-bundle: deps
	bash conformance/gpu/bundle.sh

format:
	clang-format -i $(C_SOURCES)

format-check:
	@mkdir -p $(TESTLOGS)/format
	@$(PYTHON) tools/format_check.py --junit $(TESTLOGS)/format/test.xml

clean:
	$(BAZEL) clean
	rm -rf $(OUT)
