# Fuzzing with libFuzzer (clang from Debian), outside Bazel. Included by the top-level Makefile
# (`include fuzz/fuzz.mk`), or run on its own: make -f fuzz/fuzz.mk fuzz
#
#   make fuzz          every target until it made FUZZ_RUNS executions or FUZZ_SECONDS passed,
#                      then a table: executions, crashes, coverage per target
#   make fuzz-smoke    every target for FUZZ_SMOKE_SECONDS (CI)
#   make fuzz-build    only build the targets (out/fuzz/bin)
#
# Targets and their corpora: fuzz/README.md. Nothing here touches the Bazel build.

FUZZ_CC ?= clang
FUZZ_OUT ?= out/fuzz
FUZZ_RUNS ?= 10000000
# Sized so that the slowest target still reaches FUZZ_RUNS on one core (see fuzz/README.md);
# faster targets stop at FUZZ_RUNS.
FUZZ_SECONDS ?= 1800
FUZZ_SMOKE_SECONDS ?= 5
FUZZ_PYTHON ?= python3
FUZZ_APT_PACKAGES := clang libclang-rt-14-dev

FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -I. -Ihal/include -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-Wall -Wextra -Wno-unused-parameter -Wno-unused-function
FUZZ_LIBS := -lpthread -ldl -lrt -lm

FUZZ_HEADERS := $(wildcard hal/include/hal/*.h hal/src/*.h hal/src/comm/*.h hal/layers/*.h \
	hal/services/*.h hal_backends/cpu/*.h)
FUZZ_CORE := $(wildcard hal/src/*.c hal/layers/*.c)
FUZZ_HAL := $(FUZZ_CORE) $(wildcard hal/src/comm/*.c hal/services/*.c)
# SHA-256/HMAC is not a target (bootstrap_hmac_test checks it against published vectors): built
# without instrumentation, so the executions go to the parsers.
FUZZ_HMAC_OBJ := $(FUZZ_OUT)/obj/bootstrap_hmac.o
FUZZ_BOOTSTRAP_DEPS := $(FUZZ_HMAC_OBJ) hal/src/status.c
# The bootstrap's other files (bootstrap_internal.h lists them); the wire and bind targets include
# them for their static functions.
FUZZ_BOOTSTRAP_SRCS := $(filter-out hal/src/comm/bootstrap_hmac.c,$(wildcard hal/src/comm/bootstrap_*.c))

$(FUZZ_HMAC_OBJ): hal/src/comm/bootstrap_hmac.c $(FUZZ_HEADERS) fuzz/fuzz.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -I. -Ihal/include -O2 -g -c -o $@ $<

FUZZ_C_TARGETS := unique_id bootstrap_wire faults_spec layers_env cpu_env comm_bind comm_timeout
FUZZ_TARGETS := $(FUZZ_C_TARGETS) patch_header

# fuzz_target(name, sources to compile, further prerequisites)
define fuzz_target
$(FUZZ_OUT)/bin/fuzz_$(1): $(2) $(3) $(FUZZ_HEADERS) fuzz/fuzz.mk
	@mkdir -p $(FUZZ_OUT)/bin
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $$@ $(2) $(FUZZ_LIBS)
endef

$(eval $(call fuzz_target,unique_id,fuzz/fuzz_unique_id.c $(FUZZ_BOOTSTRAP_SRCS) $(FUZZ_BOOTSTRAP_DEPS),))
$(eval $(call fuzz_target,bootstrap_wire,fuzz/fuzz_bootstrap_wire.c $(FUZZ_BOOTSTRAP_DEPS),$(FUZZ_BOOTSTRAP_SRCS)))
$(eval $(call fuzz_target,comm_bind,fuzz/fuzz_comm_bind.c $(FUZZ_BOOTSTRAP_DEPS),hal/src/comm/bootstrap_socket.c))
$(eval $(call fuzz_target,faults_spec,fuzz/fuzz_faults_spec.c hal/layers/faults_spec.c,))
$(eval $(call fuzz_target,layers_env,fuzz/fuzz_layers_env.c $(filter-out hal/layers/trace_file.c,$(FUZZ_CORE)),hal/layers/trace_file.c))
$(eval $(call fuzz_target,cpu_env,fuzz/fuzz_cpu_env.c hal_backends/cpu/cpu_env.c,))
$(eval $(call fuzz_target,comm_timeout,fuzz/fuzz_comm_timeout.c $(filter-out hal/src/comm/comm.c hal/src/comm/bootstrap_hmac.c,$(FUZZ_HAL)) $(FUZZ_HMAC_OBJ),hal/src/comm/comm.c))

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-deps

# Installs clang and libFuzzer's runtime (apt) and atheris (pip) if they are missing.
fuzz-deps:
	@missing=""; for p in $(FUZZ_APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "fuzz-deps: installing$$missing"; \
	  $$sudo apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q $$missing; \
	fi
	@$(FUZZ_PYTHON) -c 'import atheris' 2>/dev/null || \
	  $(FUZZ_PYTHON) -m pip install -q atheris || \
	  echo "fuzz-deps: atheris could not be installed; fuzz_patch_header will be skipped"

fuzz-build: fuzz-deps $(foreach t,$(FUZZ_C_TARGETS),$(FUZZ_OUT)/bin/fuzz_$(t))

fuzz: fuzz-build
	@FUZZ_PYTHON=$(FUZZ_PYTHON) fuzz/run.sh --out $(FUZZ_OUT) --seconds $(FUZZ_SECONDS) \
	  --runs $(FUZZ_RUNS) $(FUZZ_TARGETS)

fuzz-smoke: fuzz-build
	@FUZZ_PYTHON=$(FUZZ_PYTHON) fuzz/run.sh --out $(FUZZ_OUT) --seconds $(FUZZ_SMOKE_SECONDS) \
	  --runs 0 $(FUZZ_TARGETS)
