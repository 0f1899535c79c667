# aebench — build, test, dependencies.
#
#   make              build ./aebench (CUDA when nvcc is found and kernels/cuda has sources;
#                     MPI when mpicc is found; OpenMP always)
#   make CUDA=0       CPU-only build
#   make deps         install missing Debian packages (cJSON, MPICH, gnuplot, cmocka)
#   make test         deps + build + every test (unit, integration, CLI, multi-rank)
#   make tests        the test programs and build/tests/aebench: the program with the test-only
#                     engines (tests/engine_*.c), which the shell suites run (tests/run.sh)
#   make check-asan   the CPU tests under AddressSanitizer + UBSan
#   make run          deps + build + `aebench -m all` on the defaults (CPU preset without GPU)
#   make config       print the build's configuration (what $(BUILD)/config records)
#   make bench-tools  build/bench/host_adam: host bandwidth vs CPU Adam (and PCIe with CUDA);
#                     build/bench/disk_bw DIR [GiB]: O_DIRECT write/read GB/s through the disk
#                     tier; needs only a compiler (and nvcc for the PCIe part), not cJSON or cmocka
#   make ae           deps + build + the six cases (the StrongHold artifact's 1-5, the Gemini
#                     artifact's 6; paper shapes on a GPU, CPU-sized otherwise), their CSVs and
#                     figures (scripts/run_ae.sh; AE_FLAGS, AE_RESULTS, AE_CASES)
#   make figures      the six cases' CSVs and plots/case1-6.png (and case6_recovery.png) from
#                     what results/ holds

SHELL := /bin/bash
comma := ,
CC    ?= gcc
BUILD ?= build

# ---- optional components ---------------------------------------------------------------
MPICC := $(shell command -v mpicc 2>/dev/null)
MPI   ?= $(if $(MPICC),1,0)
NVCC  := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CU_SRCS := $(wildcard kernels/cuda/*.cu)
CUDA  ?= $(if $(and $(NVCC),$(CU_SRCS)),1,0)

ifeq ($(MPI),1)
  CC := $(MPICC)
  MPI_DEFS := -DAEBENCH_HAVE_MPI
endif

WARN    := -Wall -Wextra -Wpointer-arith
# -ffp-contract=off: no fused multiply-add contraction, so results never depend on what
# the compiler chose to fuse (engines are compared for exact equality).
CSTD    := -std=c11 -D_GNU_SOURCE -ffp-contract=off
OPT     ?= -O3 -march=native
CFLAGS  ?=
SANITIZE ?=
CFLAGS  += $(CSTD) $(OPT) $(WARN) -fopenmp -g $(MPI_DEFS) $(SANITIZE)
LDLIBS  := -lcjson -lm -ldl -pthread
LDFLAGS += -fopenmp $(SANITIZE)

# ---- the build's configuration -------------------------------------------------------------
# Everything that decides how an object is built or linked.  $(BUILD)/config holds the last
# one; when it differs (MPICH installed by `make deps` since, CUDA=0, a sanitizer, other
# flags) the file is rewritten and every object and program that depends on it is rebuilt, so
# a build never keeps what an earlier configuration made.
BUILD_CONFIG = CC=$(CC) MPI=$(MPI) CUDA=$(CUDA) NVCC=$(NVCC) NCCL_HOME=$(NCCL_HOME) \
               CFLAGS=$(CFLAGS) NVCCFLAGS=$(NVCCFLAGS) LDFLAGS=$(LDFLAGS) LDLIBS=$(LDLIBS)
CONFIG_STAMP := $(BUILD)/config

# ---- sources -----------------------------------------------------------------------------
KERNEL_SRCS  := kernels/model.c kernels/model_tp.c kernels/host_pages.c kernels/profile.c $(wildcard kernels/cpu/*.c)
ENGINE_SRCS  := $(wildcard engines/*.c) $(wildcard engines/runtime/*.c)
CMD_LIB_SRCS := cmd/cli.c cmd/hostfile.c cmd/data.c cmd/report.c cmd/run.c cmd/run_log.c cmd/run_json.c \
                cmd/run_profile.c cmd/run_signals.c cmd/child.c cmd/sweep.c cmd/findmax.c \
                cmd/launch.c cmd/job_dir.c cmd/launch_status.c cmd/machine_file.c cmd/calibrate.c \
                cmd/calibrate_disk.c cmd/calibrate_collectives.c cmd/machine.c cmd/search.c \
                cmd/provenance.c cmd/rerun.c
ifeq ($(CUDA),1)
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  # sm_90a (Hopper with its `a` features: the wgmma attention of cuda_attention_wgmma.cuh),
  # sm_80, and compute_90 PTX for what comes after (there the attention runs on mma.sync)
  NVCCFLAGS ?= -O3 -std=c++17 -Xcompiler -Wall,-Wextra \
               -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_90,code=compute_90
  CUDA_OBJS := $(CU_SRCS:%.cu=$(BUILD)/%.o)
  LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart \
               -lstdc++ -lpthread
  CFLAGS    += -DAEBENCH_HAVE_CUDA
  # NCCL carries the collectives between GPUs (engines/runtime/collectives.c) when ranks
  # come from MPI; its header sits with the toolkit's (or in /usr/include from libnccl-dev).
  # NCCL_HOME: where another NCCL is (include/, lib/), e.g. a Python wheel's.
  ifeq ($(MPI),1)
    CFLAGS  += -isystem $(CUDA_HOME)/include $(if $(NCCL_HOME),-isystem $(NCCL_HOME)/include)
    LDLIBS  += $(if $(NCCL_HOME),-L$(NCCL_HOME)/lib -Wl$(comma)-rpath$(comma)$(NCCL_HOME)/lib) -lnccl
  endif
  # The CUDA backend against the CPU reference; needs a GPU to run (not part of tests/run.sh).
  CUDA_TEST_PROGS := $(BUILD)/tests/test_cuda
else
  KERNEL_SRCS += kernels/cuda/cuda_absent.c
  CUDA_OBJS :=
  CUDA_TEST_PROGS :=
endif
LIB_SRCS := $(KERNEL_SRCS) $(ENGINE_SRCS) $(CMD_LIB_SRCS)

# ---- provenance: the commit and the configuration a result was built from -------------------
# Only cmd/provenance.o is given them (-D), and only it depends on the commit's stamp: a new
# commit recompiles one file and relinks, not everything.  $(BUILD)/commit holds HEAD, with
# "-dirty" when the tree has changes (git status: files changed, or new ones not ignored), or
# "unknown" where this directory is not the top of a git checkout (a tarball); rewritten only
# when that changes.  The configuration is
# $(BUILD_CONFIG) as a C string (its backslashes and double quotes escaped).
COMMIT_STAMP := $(BUILD)/commit
BUILD_CONFIG_C = $(subst ",\",$(subst \,\\,$(BUILD_CONFIG)))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CUDA_OBJS)

# Every tests/test_*.c but the GPU one is a CPU test program (tests/run.sh runs them all).
CPU_TESTS  := $(filter-out test_cuda,$(patsubst tests/%.c,%,$(wildcard tests/test_*.c)))
TEST_PROGS := $(CPU_TESTS:%=$(BUILD)/tests/%) $(CUDA_TEST_PROGS)
# The test build: the library with the test-only engines (tests/engine_*.c) in its registry
# (engines/registry.c compiled with -DAEBENCH_TEST_ENGINES), linked into the test programs and
# into $(BUILD)/tests/aebench, the program the shell suites run (tests/run.sh).  The shipped
# ./aebench links LIB_OBJS, without them.
TEST_ENGINE_OBJS := $(patsubst tests/%.c,$(BUILD)/tests/%.o,$(wildcard tests/engine_*.c))
TEST_LIB_OBJS := $(filter-out $(BUILD)/engines/registry.o,$(LIB_OBJS)) $(BUILD)/tests/registry.o $(TEST_ENGINE_OBJS)
TEST_AEBENCH := $(BUILD)/tests/aebench

.PHONY: all deps test check-asan run clean tests ae figures bench-tools config fuzz-targets FORCE
all: aebench

# Rewritten only when the configuration changed (make compares the file's time afterwards, so
# an unchanged one rebuilds nothing).
$(CONFIG_STAMP): FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(BUILD_CONFIG)' | cmp -s - $@ 2>/dev/null || \
	  { [ ! -e $@ ] || echo "make: the build configuration changed; rebuilding $(BUILD)"; \
	    printf '%s\n' '$(BUILD_CONFIG)' >$@; }
config:
	@printf '%s\n' '$(BUILD_CONFIG)'

$(COMMIT_STAMP): FORCE
	@mkdir -p $(dir $@)
	@c=unknown; \
	if top=$$(git rev-parse --show-prefix 2>/dev/null) && [ -z "$$top" ] && h=$$(git rev-parse HEAD 2>/dev/null); then \
	  c=$$h; [ -z "$$(git status --porcelain 2>/dev/null)" ] || c="$$c-dirty"; \
	fi; \
	printf '%s\n' "$$c" | cmp -s - $@ 2>/dev/null || printf '%s\n' "$$c" >$@

$(BUILD)/cmd/provenance.o: cmd/provenance.c $(wildcard kernels/*.h engines/*.h engines/runtime/*.h cmd/*.h) \
                           $(CONFIG_STAMP) $(COMMIT_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DAEBENCH_COMMIT="\"$$(cat $(COMMIT_STAMP))\"" -DAEBENCH_BUILD_CONFIG='"$(BUILD_CONFIG_C)"' \
	  -c $< -o $@

aebench: $(LIB_OBJS) $(BUILD)/cmd/aebench.o $(CONFIG_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

$(BUILD)/%.o: %.c $(wildcard kernels/*.h kernels/cpu/*.h engines/*.h engines/runtime/*.h cmd/*.h) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu $(wildcard kernels/*.h kernels/cuda/*.h kernels/cuda/*.cuh) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/tests/registry.o: engines/registry.c $(wildcard kernels/*.h engines/*.h engines/runtime/*.h) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DAEBENCH_TEST_ENGINES -c $< -o $@

$(TEST_AEBENCH): $(TEST_LIB_OBJS) $(BUILD)/cmd/aebench.o $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_LIB_OBJS) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(TEST_LIB_OBJS) $(LDFLAGS) $(LDLIBS) -lcmocka

tests: $(TEST_PROGS) $(TEST_AEBENCH)

# Coverage-guided fuzz targets of the file parsers (tests/fuzz_targets.c): clang's libFuzzer with
# ASan and UBSan, in build-fuzz/ (make fuzz-targets; make test runs each for a few seconds when
# clang is installed).
FUZZ_TARGETS := config machine ckpt store data hosts
FUZZ_DEF_config := FUZZ_CONFIG
FUZZ_DEF_machine := FUZZ_MACHINE
FUZZ_DEF_ckpt := FUZZ_CKPT
FUZZ_DEF_store := FUZZ_STORE
FUZZ_DEF_data := FUZZ_DATA
FUZZ_DEF_hosts := FUZZ_HOSTS
fuzz-targets:
	$(MAKE) BUILD=build-fuzz CC=clang OPT="-O1 -fno-omit-frame-pointer" CUDA=0 MPI=0 \
	        SANITIZE="-fsanitize=fuzzer-no-link,address,undefined" $(FUZZ_TARGETS:%=build-fuzz/fuzz_%)
$(BUILD)/fuzz_%: tests/fuzz_targets.c $(LIB_OBJS) $(CONFIG_STAMP)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -D$(FUZZ_DEF_$*) -o $@ $< $(LIB_OBJS) $(LDFLAGS) $(LDLIBS)

# Case 6's recovery probabilities (scripts/case6_extract.sh runs it): plain C, no libraries.
$(BUILD)/case6_recovery: scripts/case6_recovery.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) -O2 $(WARN) -o $@ $<

# Benchmarks: the kernels and the runtime they measure, nothing of cmd/ (so no cJSON).
BENCH_OBJS := $(KERNEL_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/engines/runtime/cpu_adam.o $(CUDA_OBJS)
bench-tools: $(BUILD)/bench/host_adam $(BUILD)/bench/disk_bw $(BUILD)/bench/adam_jobs

# The disk ceiling through the disk tier (build/bench/disk_bw DIR [GiB]).
DISK_BW_OBJS := $(BENCH_OBJS) $(BUILD)/engines/runtime/disk_tier.o $(BUILD)/engines/runtime/membudget.o
$(BUILD)/bench/disk_bw: bench/disk_bw.c $(DISK_BW_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(DISK_BW_OBJS) $(LDFLAGS) $(filter-out -lcjson,$(LDLIBS))

$(BUILD)/bench/%: bench/%.c $(BENCH_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BENCH_OBJS) $(LDFLAGS) $(filter-out -lcjson,$(LDLIBS))

# ---- dependencies from Debian packages -----------------------------------------------------
# Each entry: a file that proves the package is present, then the package(s).
DEPS := /usr/include/cjson/cJSON.h:libcjson-dev \
        /usr/include/cmocka.h:libcmocka-dev \
        /usr/bin/gnuplot:gnuplot-nox \
        /usr/bin/mpicc:mpich+libmpich-dev \
        /usr/bin/mpirun:mpich \
        /usr/bin/clang:clang+libomp-dev+libclang-rt-dev
deps:
	@missing=""; for d in $(DEPS); do f=$${d%%:*}; p=$${d#*:}; \
	  [ -e "$$f" ] || missing="$$missing $${p//+/ }"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	    || { echo "make deps: apt-get failed for:$$missing"; exit 1; }; \
	fi

# tests/run.sh also checks that a build without MPI refuses ranks: aebench-nompi is one.
test: deps
	$(MAKE) aebench tests
	$(MAKE) BUILD=build-nompi CUDA=0 MPI=0 aebench-nompi
	$(MAKE) BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer" CUDA=0 MPI=0 SANITIZE="$(ASAN_FLAGS)" aebench-asan
	$(MAKE) fuzz-targets || echo "make: the fuzz targets did not build (tests/run.sh counts it a failure)"
	bash tests/run.sh

# MPI=0: MPICH's own start-up allocations would drown our leak reports.  make test builds the
# same binary for its fuzz campaign (tests/fuzz.py).
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
check-asan: deps
	$(MAKE) BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer" CUDA=0 MPI=0 \
	        SANITIZE="$(ASAN_FLAGS)" aebench-asan build-asan/tests/aebench \
	        $(CPU_TESTS:%=build-asan/tests/%)
	AEBENCH=./aebench-asan AEBENCH_NOMPI=./aebench-asan TEST_BUILD=build-asan \
	  TESTS_WITHOUT_MPI="make check-asan builds without MPI" SKIP_FUZZ_TARGETS=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 bash tests/run.sh

aebench-asan aebench-nompi: $(LIB_OBJS) $(BUILD)/cmd/aebench.o $(CONFIG_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

# run, test, ae: the build after `make deps` is a make of its own, which sees what deps just
# installed (this one decided MPI before it ran).
run: deps
	$(MAKE) aebench
	./aebench -m all

ae: deps
	$(MAKE) aebench
	bash scripts/run_ae.sh

figures: deps
	bash scripts/run_ae.sh --figures

clean:
	rm -rf build build-asan build-nompi aebench aebench-asan aebench-nompi
