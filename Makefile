# The two commands a new user needs: `make run` and `make test`.
BUILD ?= build
JOBS  ?= 2
CONFIG ?= conf/sluice.yaml

.PHONY: all deps build test run clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 600

run: build
	@bash scripts/run.sh $(BUILD)/sluice $(CONFIG)

clean:
	rm -rf $(BUILD)
