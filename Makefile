# Thin wrapper: every target installs missing Debian packages, configures and builds first.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test test-fast test-asan test-tsan demo demo-text fuzz bench clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).configure.log 2>&1 \
	  || (cat $(BUILD).configure.log; exit 1)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# every test: unit, oracle (PyTorch float64), CLI, brief fuzzing; CUDA tests skip without a GPU
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# everything but the tests labelled slow
test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE slow

# the CPU suite built with AddressSanitizer and UndefinedBehaviorSanitizer in its own build directory
# (CUDA and fuzzers off; the fuzzers have their own sanitizers), with the CUDA backend's sources on
# simt (label simt: the kernels' reads and writes past a buffer): any report fails the test that made
# it. The tests labelled slow are left out unless ASAN_CTEST_ARGS says otherwise (ASAN_CTEST_ARGS=).
ASAN_BUILD ?= build-asan
ASAN_CTEST_ARGS ?= -LE slow
SANITIZE = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DOOMB_CUDA=OFF -DOOMB_FUZZ=OFF \
	  -DCMAKE_CXX_FLAGS="$(SANITIZE)" -DCMAKE_EXE_LINKER_FLAGS="$(SANITIZE)" > $(ASAN_BUILD).configure.log 2>&1 \
	  || (cat $(ASAN_BUILD).configure.log; exit 1)
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS) -L 'cpu|simt' $(ASAN_CTEST_ARGS)

# the tests of what runs on threads beside the host's (the simulated device's copy engines, the
# host's update beside the next step, and the CLI's runs of both) built with ThreadSanitizer in its
# own build directory (CUDA and fuzzers off): any report fails the test that made it. One OpenMP
# thread: libgomp is not instrumented, so its teams' barriers would read as races (those runs are
# left out: tests/test_util.h, tsan_leaves_out). The controls that drop a wait on purpose run there
# too: what the dropped wait should order is held (every copy, or the copies out, kHoldCopies; the
# update's units, hold_update_for_test) and runs only while a wait for it blocks, so the early read
# or overwrite is ordered, not a race. A test may take ten times as long: an hour's TIMEOUT.
TSAN_BUILD ?= build-tsan
TSAN_TESTS ?= test_offload test_offload_params test_sweep test_host_update test_host_update_times \
  test_host_waits test_kv_traffic test_stream_times test_train_eval test_cli
TSAN_CTEST_ARGS ?= -LE slow
TSAN = -fsanitize=thread -fno-omit-frame-pointer -g1
test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DOOMB_CUDA=OFF -DOOMB_FUZZ=OFF \
	  -DOOMB_TEST_TIMEOUT=3600 -DCMAKE_CXX_FLAGS="$(TSAN)" -DCMAKE_C_FLAGS="$(TSAN)" -DCMAKE_EXE_LINKER_FLAGS="$(TSAN)" \
	  > $(TSAN_BUILD).configure.log 2>&1 || (cat $(TSAN_BUILD).configure.log; exit 1)
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target oomb $(TSAN_TESTS)
	@cd $(TSAN_BUILD) && OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --output-on-failure -j $(JOBS) -L cpu $(TSAN_CTEST_ARGS)

# the embedded default: a tiny model learning a long-range recall task (about two minutes on 2 cores)
demo: build
	@./$(BUILD)/oomb train

# real text: the King James Bible, tokenized with the real Qwen3 tokenizer, trains a small
# Qwen2-shaped model (about three minutes on 2 cores)
demo-text: build
	@bash scripts/demo-text.sh $(BUILD)

# longer fuzzing of every parser: make fuzz FUZZ_SECONDS=600
FUZZ_SECONDS ?= 120
fuzz: build
	@for f in $(BUILD)/fuzz/fuzz_*; do case $$f in *.corpus) continue;; esac; \
	  n=$$(basename $$f); mkdir -p $(BUILD)/fuzz/$$n.corpus; echo "== $$n ($(FUZZ_SECONDS) s)"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz/$$n.corpus tests/fuzz/corpus/$$n || exit 1; done

clean:
	rm -rf $(BUILD) $(BUILD).configure.log $(ASAN_BUILD) $(ASAN_BUILD).configure.log $(TSAN_BUILD) \
	  $(TSAN_BUILD).configure.log
