# The two commands a new user needs: `make run` and `make test`.
BUILD ?= build
JOBS  ?= 2
CONFIG ?= conf/sluice.yaml

ASAN_BUILD ?= build-asan
FUZZ_SECONDS ?= 600

.PHONY: all deps build test run clean asan fuzz fuzz-smoke

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@bash scripts/fuzz.sh smoke
	@cd $(BUILD) && ctest --output-on-failure --timeout 600

# The whole test suite on a build with AddressSanitizer and UndefinedBehaviorSanitizer
# (GCC, thread cache off); any sanitizer report fails it. Builds everything again: about
# 15 minutes on two cores, so CI runs the fuzz smoke (the parsers under ASan+UBSan) instead.
asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_THREAD_CACHE=OFF \
	  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	@bash scripts/asan_test.sh $(ASAN_BUILD)

# libFuzzer targets (clang, ASan+UBSan): each for FUZZ_SECONDS, findings in build-fuzz/findings.
fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh run

fuzz-smoke: deps
	@bash scripts/fuzz.sh smoke

run: build
	@bash scripts/run.sh $(BUILD)/sluice $(CONFIG)

clean:
	rm -rf $(BUILD)
