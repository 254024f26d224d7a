# privai — top-level build.  `make run` and `make test` are the two commands a
# fresh Debian 12 machine needs; both install missing packages first.

CC      ?= gcc
BUILD   ?= build
CSTD     = -std=c11 -D_GNU_SOURCE
WARN     = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
OPT     ?= -O2 -g
SAN     ?=
ifeq ($(SAN),1)
  BUILD    := build-san
  OPT      := -O1 -g -fno-omit-frame-pointer
  # gcc's "undefined" leaves out a float cast beyond the type's range
  # (clang's, which the fuzzers use, has it): a JSON number cast before
  # its range check must fail the suites too
  SANFLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow
endif
CFLAGS_ALL = $(CSTD) $(WARN) $(OPT) $(SANFLAGS) -pthread -Iengine/include -Iengine/src $(CFLAGS)
LDLIBS_ENG = -lpcre2-8 -lm -pthread -lmicrohttpd -lsodium -lsystemd -lcjson -ldl
LDLIBS_TEST = -lcjson -lsqlite3

ENGINE_SRC = $(wildcard engine/src/*.c engine/src/kernels/*.c engine/src/server/*.c)
ENGINE_OBJ = $(ENGINE_SRC:%.c=$(BUILD)/%.o)
CLI_SRC    = $(wildcard engine/src/cli/*.c)
CLI_OBJ    = $(CLI_SRC:%.c=$(BUILD)/%.o)
LIB        = $(BUILD)/libprivai-engine.a
HOST_SRC   = $(wildcard appliance/lib/*.c)
HOST_OBJ   = $(HOST_SRC:%.c=$(BUILD)/%.o)
HOST_LIB   = $(BUILD)/libprivai-host.a
TUNE_SRC   = $(wildcard appliance/tune/*.c)
TUNE_OBJ   = $(TUNE_SRC:%.c=$(BUILD)/%.o)
TUNE_BIN   = $(BUILD)/privai-tune
FABRIC_SRC = $(wildcard appliance/fabric/*.c appliance/fabric/main/*.c)
FABRIC_OBJ = $(FABRIC_SRC:%.c=$(BUILD)/%.o)
FABRIC_BIN = $(BUILD)/privai-fabric
ADMIN_SRC  = $(wildcard appliance/admin/*.c appliance/admin/*/*.c)
ADMIN_SRC := $(filter-out appliance/admin/main/%,$(ADMIN_SRC))
ADMIN_SQL  = $(sort $(wildcard appliance/admin/store/schema/*.sql))
ADMIN_OBJ  = $(ADMIN_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/admin_schema.o
ADMIN_LIB  = $(BUILD)/libprivai-admin.a
ADMIN_BIN  = $(BUILD)/privai-admin
LDLIBS_ADMIN = -lsqlite3 -lcurl -lgnutls -ldl -lvirt
FIRSTBOOT_SRC = $(wildcard provisioning/firstboot/*.c)
FIRSTBOOT_OBJ = $(FIRSTBOOT_SRC:%.c=$(BUILD)/%.o)
FIRSTBOOT_BIN = $(BUILD)/privai-firstboot
ENGINE_BIN = $(BUILD)/privai-engine
BENCH_BIN  = $(BUILD)/privai-bench
UNIT_SRC   = $(wildcard tests/unit/test_*.c)
UNIT_BIN   = $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
DEMO_MODEL = $(BUILD)/demo/privai-demo.gguf
DEPS_STAMP = .deps-installed
WEBUI_VENDOR = webui/vendor/uPlot.esm.js

.PHONY: all deps run run-engine test test-unit test-cli test-vms fuzz bench clean deb image image-test lint lint-deep format format-check compile-commands
.DEFAULT_GOAL := all

# The CUDA backend, whenever nvcc is here (not in the sanitizer build):
# a shared object privai-engine dlopen()s only when a CUDA device is asked
# for (engine/src/backends.c), so the engine itself never links CUDA.
NVCC       ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA_ARCHS ?= 80 90
CUDA_SRC    = $(wildcard engine/src/kernels/cuda/*.cu)
CUDA_DEPS   = $(wildcard engine/src/kernels/cuda/*.h) engine/src/kernels/dequant_chunk.h \
	      engine/include/privai/compute.h engine/include/privai/status.h
ifneq ($(NVCC),)
ifneq ($(SAN),1)
CUDA_LIB    = $(BUILD)/privai-cuda.so $(BUILD)/privai-nccl.so $(BUILD)/privai-nccl-perf
endif
endif
# NCCL's collectives for GPU ranks (--tp N --device cuda --dist-init), a
# plugin of their own so that a CUDA backend never split needs no NCCL
$(BUILD)/privai-nccl.so: engine/src/dist/coll_nccl.cu engine/src/dist/rendezvous.h engine/include/privai/collective.h \
		engine/src/status.c
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++20 -Xcompiler -fPIC,-Wall,-Wextra,-Werror -Iengine/include -Iengine/src \
		-shared -cudart static -Xlinker -rpath,'$$ORIGIN:/usr/local/cuda/lib64' -Xlinker -z,defs -o $@ \
		engine/src/dist/coll_nccl.cu engine/src/status.c -lnccl -lpthread
# privai-fabric validate's all-reduce measurement (nccl-tests' table and definitions)
$(BUILD)/privai-nccl-perf: appliance/fabric/nccl_perf.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 -Xcompiler -Wall,-Wextra,-Werror $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
		-Xlinker -rpath,/usr/local/cuda/lib64 -o $@ $< -lnccl
$(BUILD)/privai-cuda.so: $(CUDA_SRC) $(CUDA_DEPS) engine/src/status.c
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++20 -Xcompiler -fPIC,-Wall,-Wextra,-Werror -Iengine/include -Iengine/src \
		$(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) -shared -cudart static \
		-Xlinker -rpath,'$$ORIGIN:/usr/local/cuda/lib64' -Xlinker -z,defs -o $@ $(CUDA_SRC) engine/src/status.c -lcublas

# The MPI collectives of a model split over CPU ranks (--tp N under
# mpirun): a shared object privai-engine dlopen()s only then
# (engine/src/collectives.c), so an engine that never runs split does not
# need Open MPI.
MPI_LIB = $(BUILD)/privai-mpi.so
$(MPI_LIB): $(wildcard engine/src/dist/*.c) engine/src/status.c engine/include/privai/collective.h | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(shell pkg-config --cflags ompi-c) -fPIC -shared -Wl,-z,defs -o $@ \
		$(wildcard engine/src/dist/*.c) engine/src/status.c $(shell pkg-config --libs ompi-c)

# Gloo's collectives, for ranks started apart (each node's privai-admin
# starts its own) that meet at --dist-init HOST:PORT
GLOO_LIB = $(BUILD)/privai-gloo.so
$(GLOO_LIB): engine/src/dist/coll_gloo.cc engine/src/dist/rendezvous.h engine/src/status.c engine/include/privai/collective.h | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(OPT) $(SANFLAGS) -Iengine/include -fPIC -c engine/src/status.c -o $(BUILD)/gloo-status.o
	$(CXX) -std=c++17 -Wall -Wextra -Werror -Wno-unused-parameter $(OPT) $(SANFLAGS) -Iengine/include -Iengine/src -fPIC \
		-shared -Wl,-z,defs -o $@ engine/src/dist/coll_gloo.cc $(BUILD)/gloo-status.o -lgloo -pthread

NVML_DOUBLE = $(BUILD)/libnvml-double.so
all: $(ENGINE_BIN) $(BENCH_BIN) $(ADMIN_BIN) $(TUNE_BIN) $(FABRIC_BIN) $(FIRSTBOOT_BIN) $(NVML_DOUBLE) $(UNIT_BIN) $(CUDA_LIB) \
     $(MPI_LIB) $(GLOO_LIB) $(WEBUI_VENDOR)


deps: $(DEPS_STAMP)
$(DEPS_STAMP): scripts/install-deps.sh
	@scripts/install-deps.sh
	@touch $@

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(LIB): $(ENGINE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(ENGINE_BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS_ALL) $^ -o $@ $(LDLIBS_ENG)

$(BENCH_BIN): $(BUILD)/engine/src/bench/privai_bench.o $(BUILD)/engine/src/thread_sched.o
	$(CC) $(CFLAGS_ALL) $^ -o $@ -lcurl -lcjson -lm -pthread

# the admin store's migrations, carried in the binary as strings
$(BUILD)/gen/admin_schema.c: $(ADMIN_SQL) scripts/embed-sql.sh
	@mkdir -p $(dir $@)
	scripts/embed-sql.sh $@ $(ADMIN_SQL)

$(BUILD)/gen/admin_schema.o: $(BUILD)/gen/admin_schema.c
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(ADMIN_LIB): $(ADMIN_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(ADMIN_BIN): $(BUILD)/appliance/admin/main/privai_admin.o $(ADMIN_LIB) $(HOST_LIB) $(LIB)
	$(CC) $(CFLAGS_ALL) $^ -o $@ $(LDLIBS_ENG) $(LDLIBS_ADMIN)

# what admin, tune and fabric share: host files under a root prefix, PCI
# topology, node inventory
$(HOST_LIB): $(HOST_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(TUNE_BIN): $(BUILD)/appliance/tune/main/privai_tune.o $(TUNE_OBJ) $(HOST_LIB)
	$(CC) $(CFLAGS_ALL) $^ -o $@ -lcjson -lsystemd

$(FABRIC_BIN): $(FABRIC_OBJ) $(HOST_LIB)
	$(CC) $(CFLAGS_ALL) $^ -o $@ -lcjson -lsystemd -libverbs -lmicrohttpd

# day-0 configuration: the password rule and the TLS pair check are the
# admin's own (auth.o, tls.o from its library)
$(FIRSTBOOT_BIN): $(BUILD)/provisioning/firstboot/main/privai_firstboot.o $(FIRSTBOOT_OBJ) $(ADMIN_LIB) $(HOST_LIB) $(LIB)
	$(CC) $(CFLAGS_ALL) $^ -o $@ -lyaml -lxml2 -lsodium -lcjson -lsystemd -lgnutls -lsqlite3 -lm -pthread

$(BUILD)/provisioning/%.o: CFLAGS_ALL += -Iappliance/lib -Iappliance/admin -Iprovisioning/firstboot $(shell pkg-config --cflags libxml-2.0 2>/dev/null || echo -I/usr/include/libxml2)

# -Wformat-truncation is on: paths and URLs are built with str_fmt
# (appliance/lib/strfmt.h), which fails rather than cut; messages cut on
# purpose go through msg_fmt
$(BUILD)/appliance/%.o: CFLAGS_ALL += -Iappliance/lib
$(BUILD)/appliance/admin/%.o: CFLAGS_ALL += -Iappliance/admin
$(BUILD)/appliance/tune/%.o: CFLAGS_ALL += -Iappliance/tune
$(BUILD)/appliance/fabric/%.o: CFLAGS_ALL += -Iappliance/fabric -Iappliance/fabric/main

# the recorded NVML of an HGX H100 node, for tests (PRIVAI_NVML_LIB)
$(NVML_DOUBLE): tests/nvml_double/nvml_double.c appliance/admin/gpu/nvml_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Iappliance/admin -fPIC -shared $< -o $@

$(BUILD)/tests/%: tests/unit/%.c tests/unit/testlib.h tests/unit/dbtestlib.h $(LIB) $(ADMIN_LIB) $(HOST_LIB) $(TUNE_OBJ)
	@mkdir -p $(dir $@) $(BUILD)/tests-deps
	$(CC) $(CFLAGS_ALL) -MMD -MP -MF $(BUILD)/tests-deps/$*.d -Itests/unit -Iappliance/admin -Iappliance/lib -Iappliance/tune $< $(ADMIN_LIB) $(TUNE_OBJ) $(HOST_LIB) $(LIB) -o $@ $(LDLIBS_ENG) $(LDLIBS_TEST) $(LDLIBS_ADMIN)

# The embedded default: a small model with random weights and a tokenizer
# the project builds itself, so `make run` needs no download and no fixtures.
$(DEMO_MODEL): $(ENGINE_BIN)
	@mkdir -p $(dir $@)
	$(ENGINE_BIN) synth --demo -o $@

MODEL ?= $(DEMO_MODEL)
PROMPT ?= Private AI keeps data on premises.
# `make run`: the control plane on http://127.0.0.1:8080 (dev mode: plain
# HTTP, loopback only) with its state under build/state, the demo model
# registered and deployed on CPU.  The first start prints the admin's
# one-time password.  `make run-engine`: the engine alone, interactive.
STATE ?= $(BUILD)/state
run: $(ADMIN_BIN) $(ENGINE_BIN) $(DEMO_MODEL)
	$(ADMIN_BIN) --dev --port 8080 --state-dir $(STATE) --demo-model $(DEMO_MODEL)

run-engine: $(ENGINE_BIN) $(DEMO_MODEL)
	$(ENGINE_BIN) run -m $(MODEL) -i -n 64 -p "$(PROMPT)"

# What the console takes from npm (uPlot, for the metrics charts), pinned
# by webui/package-lock.json and copied into webui/vendor/ with its
# licence: the console loads nothing from anywhere but the appliance.
webui/node_modules/.package-lock.json: webui/package.json webui/package-lock.json | $(DEPS_STAMP)
	cd webui && npm ci --no-audit --no-fund --loglevel=error
$(WEBUI_VENDOR): webui/node_modules/.package-lock.json
	mkdir -p webui/vendor
	cp webui/node_modules/uplot/dist/uPlot.esm.js webui/node_modules/uplot/dist/uPlot.min.css webui/vendor/
	cp webui/node_modules/uplot/LICENSE webui/vendor/uPlot.LICENSE.txt

# The browser tests' one npm package (playwright-core; it drives Debian's
# chromium and downloads no browser), pinned by package-lock.json.
BROWSER_DEPS = tests/browser/node_modules/.package-lock.json
$(BROWSER_DEPS): tests/browser/package.json tests/browser/package-lock.json | $(DEPS_STAMP)
	cd tests/browser && npm ci --no-audit --no-fund --loglevel=error

# The OpenAI SDK suite's one npm package (the official openai client),
# pinned by package-lock.json.
SDK_DEPS = tests/sdk/node_modules/.package-lock.json
$(SDK_DEPS): tests/sdk/package.json tests/sdk/package-lock.json | $(DEPS_STAMP)
	cd tests/sdk && npm ci --no-audit --no-fund --loglevel=error

# `make test`: the plain build and the ASan+UBSan build, every suite on
# both, then the console in Chromium and the fuzzer.  `make test SAN=1`:
# the sanitizer build alone.  `make test IMAGE_TEST=1` also builds the
# image and boots it (scenarios 1 and 2): about 6 + 14 minutes on 2 cores
# without KVM, over make test's budget, so not by default (make image-test
# runs all five).
# The builds run a job per CPU whatever -j make was given (CI calls a
# plain `make test`): the two trees and the CUDA objects are about 4.5
# minutes on 2 cores one job at a time.
export IMAGE_TEST
NPROC := $(shell nproc 2>/dev/null || echo 2)
ifeq ($(SAN),1)
test: | $(DEPS_STAMP)
	@$(MAKE) --no-print-directory -j$(NPROC) all $(DEMO_MODEL) $(BROWSER_DEPS) $(SDK_DEPS)
	@BUILDS=$(BUILD) SKIP_FUZZ=1 tests/run-all.sh
else
test: | $(DEPS_STAMP)
	@$(MAKE) --no-print-directory -j$(NPROC) all $(DEMO_MODEL) $(BROWSER_DEPS) $(SDK_DEPS) $(if $(IMAGE_TEST),image)
	@$(MAKE) --no-print-directory -j$(NPROC) SAN=1 all build-san/demo/privai-demo.gguf >/dev/null
	@BUILDS="$(BUILD) build-san" tests/run-all.sh
endif

# the workload VMs' suites alone (both also run in make test): libvirt's
# test driver over a fixture HGX host, then a real qemu guest through a
# libvirt session daemon
test-vms: all | $(DEPS_STAMP)
	@python3 tests/integration/test_admin_vms.py $(BUILD) && python3 tests/integration/test_vms_qemu.py $(BUILD)

# `make deb`: privai as a Debian package (build/deb/), what the image installs
VERSION ?= 0.7.0
deb: all $(DEMO_MODEL)
	@scripts/build-deb.sh $(BUILD) $(BUILD)/deb $(VERSION)

# `make image`: the appliance's disk (build/image/: privai.raw, privai.qcow2,
# privai.vmdk, privai.ova) from Debian's packages and the package above;
# `make image-test` checks the OVA's descriptor and manifest, then boots the
# image in qemu (five scenarios) and checks it through its REST API
# (tests/image/).  IMAGE_SCENARIOS=1,2 runs only those.
IMAGE_SCENARIOS ?= 1,2,3,4,5
image: deb
	@scripts/build-image.sh $(BUILD)/deb/privai_$(VERSION)_amd64.deb $(BUILD)/image

image-test: image
	@python3 tests/image/test_ova.py $(BUILD)/image/privai.ova $(BUILD)/privai-firstboot
	@python3 tests/image/boot_test.py $(BUILD)/image $(IMAGE_SCENARIOS)

# `make lint`: the admin's layers (scripts/check-deps.py: no cycles,
# nothing pointing up), cppcheck and clang-tidy (.clang-tidy's short
# list) over every C file, and the format check; make test runs it.
# `make lint-deep` adds clang's static analyzer (about 8 minutes on 2
# cores, so not in make test).  `make format` rewrites the tree as
# .clang-format says; `make compile-commands` writes compile_commands.json
# for editors (bear, a full rebuild).
C_SOURCES = $(shell git ls-files '*.c' '*.h' | grep -v '^tests/browser/')
lint: all
	@BUILD=$(BUILD) scripts/lint.sh

lint-deep: all
	@BUILD=$(BUILD) DEEP=1 scripts/lint.sh

format:
	@clang-format -i $(C_SOURCES)

format-check: | $(DEPS_STAMP)
	@clang-format --dry-run --Werror $(C_SOURCES) && echo "format: $(words $(C_SOURCES)) files as .clang-format writes them"

compile-commands: | $(DEPS_STAMP)
	bear -- $(MAKE) -B all

FUZZ_SECONDS ?= 300
fuzz: all | $(DEPS_STAMP)
	@BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh

bench: $(ENGINE_BIN) $(BENCH_BIN) $(ADMIN_BIN)
	@BUILD=$(BUILD) scripts/bench.sh
	@BUILD=$(BUILD) scripts/bench-serve.sh
	@BUILD=$(BUILD) scripts/bench-proxy.sh
	@BUILD=$(BUILD) scripts/bench-admin-login.py
	@BUILD=$(BUILD) scripts/bench-metrics.py
	@BUILD=$(BUILD) scripts/bench-constrained.py
	@BUILD=$(BUILD) scripts/bench-shared-cpu.sh
	@BUILD=$(BUILD) MODEL=$(BUILD)/bench/llama1b-q8_0.gguf N=32 scripts/bench-shared-cpu.sh
	@BUILD=$(BUILD) scripts/bench-tp.sh

clean:
	rm -rf build build-san

# dequantization feeds the float path a row at a time; -O3 vectorizes its loops
$(BUILD)/engine/src/quant_dequant.o: OPT += -O3

-include $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests-deps/%.d)
-include $(FIRSTBOOT_OBJ:.o=.d) $(BUILD)/provisioning/firstboot/main/privai_firstboot.d $(ENGINE_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(ADMIN_OBJ:.o=.d) $(HOST_OBJ:.o=.d) $(TUNE_OBJ:.o=.d) $(FABRIC_OBJ:.o=.d) $(BUILD)/appliance/admin/main/privai_admin.d $(BUILD)/appliance/tune/main/privai_tune.d
