# Makefile — builds the streaming GPU trainer (train_gpt), the CPU reference trainer (train_gpt_cpu)
# and the GoogleTest suites; `make test` runs them all and ends with `tests: N passed, M failed`.
# No CMake, on purpose: everything there is to know about the build is on this page.

# One job per core unless -j is given: `make test` from a clean tree compiles a dozen programs.
ifeq ($(MAKELEVEL)$(filter -j% j% --jobserver%,$(MAKEFLAGS)),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

CXX      ?= g++
CXXFLAGS ?= -O3 -march=native -fopenmp -std=c++17 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function
LDLIBS   ?= -lm -lpthread
GTEST_LIBS ?= -lgtest -lgtest_main -lpthread

# ---- CUDA (optional: without nvcc only the CPU targets are built) ----
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# GPU arch: the one of the GPU in this machine, else sm_90 (H100/H200) plus PTX for newer GPUs.
GPU_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '.' | tr -d ' ')
ifeq ($(GPU_CC),)
  GENCODE := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
else
  GENCODE := -gencode arch=compute_$(GPU_CC),code=sm_$(GPU_CC)
endif
NVCCFLAGS ?= -O3 -std=c++17 $(GENCODE) --use_fast_math -Xcompiler -fopenmp,-march=native,-Wall,-Wno-unused-function -Wno-deprecated-gpu-targets
# Subnormals flushed to zero on the GPU as cpu_adam.cpp flushes them on the CPU (FTZ/DAZ), so the GPU AdamW
# (embeddings, -R layers) and the CPU one give a parameter the same bits: --use_fast_math implies it; `override`
# keeps it when NVCCFLAGS is set on the command line.
override NVCCFLAGS += -ftz=true
CUDA_LIBS ?= -lcublas -lcublasLt -lgomp -lm -lpthread -ldl

BUILD := build

# cuDNN's attention (llmc/cudnn_att.cpp) needs cudnn-frontend's headers: PyPI's nvidia-cudnn-frontend (headers
# only), installed into .deps/ on the first build (.ci/run does it too). cuDNN itself is dlopen'ed at run time, so
# nothing links against it. Without the headers the trainer builds without the cuDNN path and says so.
CUDNN_FE_VERSION := 1.32.0
CUDNN_FE := .deps/cudnn_frontend/include
ifneq ($(NVCC),)
ifeq ($(wildcard $(CUDNN_FE)/cudnn_frontend.h),)
$(shell python3 -m pip install -q --no-deps --disable-pip-version-check --timeout 20 --retries 0 --target .deps/cudnn_frontend \
	nvidia-cudnn-frontend==$(CUDNN_FE_VERSION) >/dev/null 2>&1)
endif
ifneq ($(wildcard $(CUDNN_FE)/cudnn_frontend.h),)
CUDNN_OBJ := $(BUILD)/cudnn_att.o
override NVCCFLAGS += -DENABLE_CUDNN
else
$(info cudnn-frontend's headers not found in $(CUDNN_FE) (pip install --no-deps --target .deps/cudnn_frontend nvidia-cudnn-frontend): building without the cuDNN attention path)
endif
endif
GPU_OBJS := $(BUILD)/stream.o $(BUILD)/cpu_adam.o $(BUILD)/ssd.o $(CUDNN_OBJ)
CPU_TESTS := $(patsubst test/%.cpp,$(BUILD)/%,$(wildcard test/test_*.cpp))
GPU_TESTS := $(patsubst test/%.cu,$(BUILD)/%,$(wildcard test/test_*.cu))
# The GPU suites again, with the kernels run on the CPU (test/fake_cuda/fake_device.h): everywhere, no nvcc needed
EMU_TESTS := $(patsubst test/%.cu,$(BUILD)/emu_%,$(wildcard test/test_*.cu))
HEADERS := $(wildcard *.h llmc/*.h)

ifneq ($(NVCC),)
all: train_gpt train_gpt_cpu export_hf tests bench
tests: $(CPU_TESTS) $(GPU_TESTS)
else
all: cpu_only_notice train_gpt_cpu export_hf tests bench
tests: $(CPU_TESTS)
cpu_only_notice:
	@echo "nvcc not found: building the CPU targets only (train_gpt_cpu and the CPU tests)"
endif
bench: $(BUILD)/bench_cpu_adam

$(BUILD):
	@mkdir -p $(BUILD)

$(BUILD)/cpu_adam.o: cpu_adam.cpp llmc/cpu_adam.h | $(BUILD)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# The SSD tier (llmc/ssd.h: direct I/O over io_uring, the optimizer state on disk). liburing from Debian's liburing-dev.
# Its two sources (llmc/ssd_io.cpp, llmc/ssd_store.cpp) are joined into one object, ssd.o, by a relocatable link.
URING_LIBS ?= -luring
$(BUILD)/ssd_%.o: llmc/ssd_%.cpp llmc/ssd.h llmc/cpu_adam.h | $(BUILD)
	$(CXX) $(CXXFLAGS) -I. -c $< -o $@
$(BUILD)/ssd.o: $(BUILD)/ssd_io.o $(BUILD)/ssd_store.o
	$(LD) -r $^ -o $@

train_gpt_cpu: train_gpt_cpu.cpp $(BUILD)/cpu_adam.o $(HEADERS)
	$(CXX) $(CXXFLAGS) -I. $< $(BUILD)/cpu_adam.o -o $@ $(LDLIBS)

# writes a model as a Hugging Face GPT-2 directory (hf.h has the format)
export_hf: export_hf.cpp $(BUILD)/cpu_adam.o $(HEADERS)
	$(CXX) $(CXXFLAGS) -I. $< $(BUILD)/cpu_adam.o -o $@ $(LDLIBS)

# test/hf_check.py's helper: the CPU reference's logits for a model, as the trainers load it
$(BUILD)/hf_logits: test/hf_logits.cpp $(BUILD)/cpu_adam.o $(HEADERS) | $(BUILD)
	$(CXX) $(CXXFLAGS) -I. $< $(BUILD)/cpu_adam.o -o $@ $(LDLIBS)

$(BUILD)/stream.o: stream.cu llmc/stream.h llmc/timeline.h llmc/cuda_common.h | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -I. -c $< -o $@

train_gpt: train_gpt.cu $(GPU_OBJS) $(HEADERS) $(wildcard *.cuh llmc/*.cuh)
	$(NVCC) $(NVCCFLAGS) -I. $< $(GPU_OBJS) -o $@ $(CUDA_LIBS) $(URING_LIBS)

# one translation unit for cudnn-frontend (its headers compile slowly), as llm.c's llmc/cudnn_att.cpp
$(BUILD)/cudnn_att.o: llmc/cudnn_att.cpp llmc/cudnn_att.h llmc/wheel_libs.h | $(BUILD)
	$(NVCC) -O2 -std=c++17 -x c++ -DENABLE_CUDNN -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING -I$(CUDNN_FE) \
		-Xcompiler -Wall,-Wno-unused-function -c $< -o $@

# stream.cu's protocol on the CPU: compiled by the host compiler against the CUDA ordering model in
# test/fake_cuda (found before any real CUDA headers), so it runs in CI without a GPU or nvcc.
$(BUILD)/test_stream: test/test_stream.cpp stream.cu llmc/stream.h llmc/timeline.h llmc/cuda_common.h $(wildcard test/fake_cuda/*.h) | $(BUILD)
	$(CXX) $(CXXFLAGS) -I. -Itest/fake_cuda $< -o $@ $(GTEST_LIBS) $(LDLIBS)

# the cuBLAS wrappers on the CPU, against test/fake_cuda's emulation of cuBLAS
$(BUILD)/test_matmul: test/test_matmul.cpp llmc/matmul.cuh llmc/cuda_common.h $(BUILD)/cpu_adam.o $(HEADERS) $(wildcard test/fake_cuda/*.h) | $(BUILD)
	$(CXX) $(CXXFLAGS) -I. -Itest/fake_cuda $< $(BUILD)/cpu_adam.o -o $@ $(GTEST_LIBS) $(LDLIBS)

# attention.cuh's index math on the CPU (CPU stand-ins for cuBLAS and the softmax kernels, see the test)
$(BUILD)/test_attention: test/test_attention.cpp llmc/attention.cuh $(BUILD)/cpu_adam.o $(HEADERS) | $(BUILD)
	$(CXX) $(CXXFLAGS) -I. $< $(BUILD)/cpu_adam.o -o $@ $(GTEST_LIBS) $(LDLIBS)

# the SSD tier's suites (llmc/ssd.h): its I/O layer (test_ssd_io); the store against the in-RAM AdamW,
# checkpoints, crashes, disk errors, the plan and the probe (test_ssd)
$(BUILD)/test_ssd $(BUILD)/test_ssd_io: $(BUILD)/test_%: test/test_%.cpp test/ssd_test_common.h $(BUILD)/ssd.o $(BUILD)/cpu_adam.o $(HEADERS) | $(BUILD)
	$(CXX) $(CXXFLAGS) -I. $< $(BUILD)/ssd.o $(BUILD)/cpu_adam.o -o $@ $(GTEST_LIBS) $(URING_LIBS) $(LDLIBS)

# the cuDNN path's host side; with cudnn-frontend's headers, its loader too (linked by nvcc: cudnn_att.o
# calls the CUDA runtime)
ifneq ($(CUDNN_OBJ),)
$(BUILD)/test_attention_path: test/test_attention_path.cpp llmc/ragged.h llmc/cudnn_att.h $(CUDNN_OBJ) | $(BUILD)
	$(NVCC) -O2 -std=c++17 -DENABLE_CUDNN -I. $< $(CUDNN_OBJ) -o $@ -lgtest -lgtest_main -ldl -lpthread
endif

$(BUILD)/test_%: test/test_%.cpp $(BUILD)/cpu_adam.o $(HEADERS) $(wildcard dev/data/*.h) test/cli_test_common.h test/test_layouts.h \
		test/hf_cases.h test/multi_gpu_test_common.h | $(BUILD)
	$(CXX) $(CXXFLAGS) -I. $< $(BUILD)/cpu_adam.o -o $@ $(GTEST_LIBS) $(LDLIBS)

$(BUILD)/test_%: test/test_%.cu test/gpu_test_common.h test/gqa_reference.h test/test_layouts.h train_gpt.cu $(GPU_OBJS) $(HEADERS) $(wildcard *.cuh llmc/*.cuh) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -I. $< $(GPU_OBJS) -o $@ -lgtest -lgtest_main $(CUDA_LIBS) $(URING_LIBS)

# The emulated GPU suites: the sources copied with every kernel<<<grid, block, smem, stream>>>(...) launch
# rewritten to FAKE_LAUNCH(kernel, grid, block, smem, stream)(...) and each __shared__ array cleared to NaN
# bytes per block (test/fake_cuda/emu_rewrite.sh), then compiled by the host compiler against
# test/fake_cuda (the CUDA runtime's ordering model, cuBLAS emulated, kernels run as CPU fibers; GPU work deferred
# until the host synchronizes with it, as on a GPU: FAKE_CUDA_DEFER=0 runs it at once instead). A smaller
# grid cap keeps the fiber count low (the grid-stride loops loop sooner; NORM_BLOCKS likewise for the fused norm
# backward's rows, so a test's few hundred rows already loop). _FORTIFY_SOURCE off: the fibers
# switch stacks with longjmp, which its checked variant refuses.
EMU := $(BUILD)/emu
EMU_SOURCES := $(wildcard *.cu *.cuh *.h llmc/*.cuh llmc/*.h)
$(EMU)/.sources: $(EMU_SOURCES) test/fake_cuda/emu_rewrite.sh | $(BUILD)
	@mkdir -p $(EMU)/llmc
	@for f in $(EMU_SOURCES); do sh test/fake_cuda/emu_rewrite.sh $$f > $(EMU)/$$f || exit 1; done
	@touch $@
EMU_FLAGS := -DFAKE_CUDA_DEVICE -DGRID_FOR_CAP=64 -DNORM_BLOCKS=8 -U_FORTIFY_SOURCE -I$(EMU) -Itest/fake_cuda -I.
# The trainer builds run a vocabulary row's block on 128 fibers, not 1024 (kernels.cuh ROW_BLOCK_THREADS: the
# same math in another order of sums over a short row, 8x fewer switches); emu_test_kernels checks 1024.
$(BUILD)/emu_train_gpt $(BUILD)/emu_test_gpu $(BUILD)/emu_test_gpu_llama: EMU_FLAGS += -DROW_BLOCK_THREADS=128
$(BUILD)/emu_train_gpt: train_gpt.cu $(EMU)/.sources $(BUILD)/cpu_adam.o $(BUILD)/ssd.o $(wildcard test/fake_cuda/*.h) | $(BUILD)
	$(CXX) $(CXXFLAGS) $(EMU_FLAGS) -x c++ $(EMU)/train_gpt.cu -x c++ $(EMU)/stream.cu -x none $(BUILD)/cpu_adam.o $(BUILD)/ssd.o -o $@ $(URING_LIBS) $(LDLIBS)
$(BUILD)/emu_test_%: test/test_%.cu test/gpu_test_common.h test/gqa_reference.h test/test_layouts.h $(EMU)/.sources $(BUILD)/cpu_adam.o $(BUILD)/ssd.o $(wildcard test/fake_cuda/*.h) | $(BUILD)
	$(CXX) $(CXXFLAGS) $(EMU_FLAGS) -x c++ $< -x c++ $(EMU)/stream.cu -x none $(BUILD)/cpu_adam.o $(BUILD)/ssd.o -o $@ $(GTEST_LIBS) $(URING_LIBS) $(LDLIBS)

# the attention paths, and one layer stage by stage, at the benchmark's shapes (GPU only; built by
# dev/bench/build_carry.sh for the GPU window, not by `make`)
$(BUILD)/bench_attention: dev/bench/bench_attention.cu dev/bench/gpu_timing.h train_gpt.cu $(GPU_OBJS) $(HEADERS) $(wildcard *.cuh llmc/*.cuh)
	$(NVCC) $(NVCCFLAGS) -I. $< $(GPU_OBJS) -o $@ $(CUDA_LIBS) $(URING_LIBS)

$(BUILD)/bench_layer: dev/bench/bench_layer.cu dev/bench/gpu_timing.h train_gpt.cu $(GPU_OBJS) $(HEADERS) $(wildcard *.cuh llmc/*.cuh)
	$(NVCC) $(NVCCFLAGS) -I. $< $(GPU_OBJS) -o $@ $(CUDA_LIBS) $(URING_LIBS)

$(BUILD)/bench_cpu_adam: dev/bench/bench_cpu_adam.cpp $(BUILD)/cpu_adam.o $(BUILD)/ssd.o llmc/cpu_adam.h llmc/ssd.h llmc/crc32c.h | $(BUILD)
	$(CXX) $(CXXFLAGS) -I. $< $(BUILD)/cpu_adam.o $(BUILD)/ssd.o -o $@ $(URING_LIBS) $(LDLIBS)

# The tokenizer tool that made the shipped shards (dev/data/README.md says how to re-make them).
tokenize: dev/data/tokenize.cpp dev/data/gpt2_bpe.h dev/data/unicode_ranges.h | $(BUILD)
	$(CXX) $(CXXFLAGS) -I. $< -o $(BUILD)/tokenize

# the CLI suite runs the trainers themselves, so they are built first; the emulated GPU suites and the
# emulated train_gpt are built only here (plain `make` does not need them). The kernel suite runs again under
# the emulator's two warp-at-a-time schedules, which expose a missing __syncthreads (fake_device.h), and the
# trainer tests that compare two runs again with 4% of the atomic sums one ulp off, as a GPU's atomics leave them
# (those bit for bit in the emulation; the resident-layer comparison is bounded already). And -E 1's head
# worker held back 300 ms a step: a trainer freed right after its last step must stop it first (it crashed
# make test once, a segfault, before gpt_free did).
RUN_COMPARISONS := *IndependentOfSlotCount:*IndependentOfAccumulationSplit:*AccumulateMicroBatches:*KeptActivationsTrainLikeRecompute
# the suites run side by side (test/run_tests.sh), the longest first (seconds on this 2-core VM at 62dea6f:
# 230, 150, 125, 100, 86, 86, 81, 69, 66, 54, 41) so that the short ones fill the end; test_ssd_trainer's
# memory test apart. run_tests.sh prints the slowest tests.
LONG := test_multi_gpu test_multi_gpu_ssd test_cli emu_test_gpu test_sft_trainer test_chat_data test_ssd_trainer emu_test_gpu_llama \
	test_nothing_lost test_llama_trainer test_eval test_resume_cli
LONG_TESTS := $(BUILD)/test_multi_gpu $(BUILD)/test_multi_gpu_ssd $(BUILD)/test_cli $(BUILD)/emu_test_gpu $(BUILD)/test_sft_trainer \
	"$(BUILD)/test_ssd_trainer --gtest_filter=*PeakMemory*" $(BUILD)/test_chat_data \
	"$(BUILD)/test_ssd_trainer --gtest_filter=-*PeakMemory*" $(BUILD)/emu_test_gpu_llama $(BUILD)/test_nothing_lost \
	$(BUILD)/test_llama_trainer $(BUILD)/test_eval $(BUILD)/test_resume_cli "FAKE_ATOMIC_JITTER=4 $(BUILD)/emu_test_gpu --gtest_filter='$(RUN_COMPARISONS)'" \
	"LLMC_TEST_HEAD_DELAY_MS=300 $(BUILD)/emu_test_gpu_llama --gtest_filter=*VocabOnHostTrainsLikeOnGpu"
test: tests train_gpt_cpu export_hf $(BUILD)/hf_logits $(if $(NVCC),train_gpt,) $(EMU_TESTS) $(BUILD)/emu_train_gpt
	@$(MAKE) --no-print-directory format-check
	@./test/run_tests.sh $(LONG_TESTS) $(filter-out $(addprefix $(BUILD)/,$(LONG)),$(CPU_TESTS) $(EMU_TESTS)) \
		"FAKE_SCHED=1 $(BUILD)/emu_test_kernels" "FAKE_SCHED=2 $(BUILD)/emu_test_kernels" \
		$(if $(NVCC),$(GPU_TESTS),)

# The CPU suites and the emulated GPU suites again under AddressSanitizer + UndefinedBehaviorSanitizer, built
# in build/asan, then a 2-step emulated train_gpt run with checkpoints: an out-of-bounds access of a kernel to
# its (host-allocated) device buffers, of the streaming code to its pinned buffers, or any undefined behaviour
# fails. Not part of `make test` (~20 min on 2 cores). Left out for time: test_cli and test_nothing_lost (they run the plain
# binaries) and the emulated trainer tests that train many steps (each takes 5-20 min under ASan; the same code
# paths run in the others and in the train_gpt run). The fibers' stack switches make ASan warn about possible
# false positives; none seen.
SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_TESTS := $(patsubst $(BUILD)/%,build/asan/%,$(filter-out %/test_cli %/test_nothing_lost,$(CPU_TESTS)) $(EMU_TESTS))
SAN_SLOW := TenSteps*:*SlotCount:*TrainAlike:*IndependentOfResidentLayers:*AccumulationSplit
SAN_ENV := ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1
sanitize: train_gpt_cpu export_hf $(BUILD)/hf_logits  # the plain binaries some suites run, as for `make test`
	$(MAKE) BUILD=build/asan CXXFLAGS="-O1 -g -fno-omit-frame-pointer $(SAN) $(filter-out -O3,$(CXXFLAGS))" \
		LDLIBS="$(LDLIBS) $(SAN)" $(SAN_TESTS) build/asan/emu_train_gpt
	@rm -rf build/asan/run
	@$(SAN_ENV) build/asan/emu_train_gpt -e L2:C64:NH2:T32 -b 4 -t 32 -d 256 -x 2 -v 1 -m 1 -g 4 -n 1 -o build/asan/run \
		> build/asan/train_gpt.log 2>&1 && echo "emulated train_gpt under ASan/UBSan: ok (build/asan/train_gpt.log)" \
		|| { tail -n 20 build/asan/train_gpt.log; echo "emulated train_gpt under ASan/UBSan: FAILED"; exit 1; }
	@$(SAN_ENV) ./test/run_tests.sh $(filter-out %/emu_test_gpu,$(SAN_TESTS)) \
		"build/asan/emu_test_gpu --gtest_filter=-*$(SAN_SLOW)"

# libFuzzer (clang, ASan + UBSan) over every input parser: model files, shards and a saved data position, state
# files, tokenizer files, flags, model specs, the BPE encoder (dev/fuzz/fuzz_inputs.cpp). FUZZ_SECONDS per target;
# corpora stay in build/fuzz/corpus. Then, where Python has the `regex` module (Debian: python3-regex), the BPE
# encoder against GPT-2's regex and encoder.py on random text. Not part of `make test`: it finds bugs by time
# spent, not a fixed check.
FUZZ_SECONDS ?= 60
fuzz:
	bash dev/fuzz/run.sh $(FUZZ_SECONDS)
	@if /usr/bin/python3 -c 'import regex' 2>/dev/null; then /usr/bin/python3 dev/fuzz/pretokenize_vs_regex.py; \
	else echo "pretokenize_vs_regex: skipped (no python3-regex: apt-get install python3-regex)"; fi

# The layout of every C++ / CUDA source against .clang-format, with clang-format 14 (other versions lay code out
# differently). Without it the check is skipped with a note, unless FORMAT_REQUIRED=1 (.ci/run sets it).
# `make format` rewrites the files in place.
CLANG_FORMAT := $(shell command -v clang-format-14 2>/dev/null || \
	(clang-format --version 2>/dev/null | grep -q 'version 14\.' && command -v clang-format))
FORMAT_SOURCES := $(wildcard *.h *.cu *.cuh *.cpp llmc/*.h llmc/*.cuh llmc/*.cpp test/*.h test/*.cu test/*.cpp test/fake_cuda/*.h \
	dev/*/*.h dev/*/*.cu dev/*/*.cpp)
format-check:
	@if [ -z "$(CLANG_FORMAT)" ]; then \
		if [ -n "$(FORMAT_REQUIRED)" ]; then echo "format-check: clang-format 14 not found"; exit 1; fi; \
		echo "format-check: skipped (no clang-format 14)"; \
	else $(CLANG_FORMAT) --dry-run --Werror $(FORMAT_SOURCES) && \
		echo "format-check: $(words $(FORMAT_SOURCES)) files follow .clang-format"; fi
format:
	$(CLANG_FORMAT) -i $(FORMAT_SOURCES)

clean:
	rm -rf $(BUILD) train_gpt train_gpt_cpu export_hf

.PHONY: all tests test bench clean tokenize cpu_only_notice sanitize fuzz format-check format
