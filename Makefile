# Parhelion: the two commands of the quick start, and a few more.
#   make demo   install what is missing, build (Release), run the main job
#   make test   install what is missing, build, run every test (C++, golden, Python: tests/python)
#   make bench  memory-bound kernels against STREAM, the matmul family against OpenBLAS and
#               oneDNN, attention against PyTorch eager and SDPA, and the FMA peak, each
#               measured in one run; the attention strategy table

BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# ON: warnings in the project's code are errors (CI: .ci/run). OFF by default, so that a newer
# compiler's new warning does not stop a build.
WERROR ?= OFF

.PHONY: demo test bench build deps sanitize clean

deps:
	@bash scripts/install-deps.sh
	@bash scripts/install-python.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPARHELION_WERROR=$(WERROR) \
	  -DPARHELION_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(CURDIR)/.venv/bin/python $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

demo: build
	@bash scripts/demo.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench:
	@bash scripts/install-deps.sh --bench
	@bash scripts/install-python.sh --bench
	@$(MAKE) --no-print-directory build
	@$(BUILD)/bench/parhelion_bench_bandwidth --rounds 3
	@$(BUILD)/parhelion bench --suite --png docs/benchmarks-suite.png
	@$(BUILD)/parhelion bench
	@$(BUILD)/parhelion bench attention --threads 2
	@$(BUILD)/bench/parhelion_bench_strategies

# Address and undefined-behaviour sanitizers over the whole test suite.
sanitize:
	@$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DPARHELION_SANITIZE=ON -DPARHELION_BUILD_BENCH=OFF"

clean:
	rm -rf build build-asan
