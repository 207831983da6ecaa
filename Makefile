BENCH ?= .
PKG ?= ./...

.PHONY: help test test/race test/long bench bench-compare bench-held faults fuzz lint tidy counts ci

help: ## Show this help.
	@grep -hE '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-14s %s\n", $$1, $$2}'

test: ## Run the tests (a throwaway PostgreSQL starts unless TEST_DATABASE_URL is set).
	go test $(PKG)

test/race: ## Run the tests under the race detector, as CI does.
	go test -race $(PKG)

test/long: ## The real-process suite of test/ in its long form (5,000 sign-ups over 3 nodes, ...); not in CI.
	CLAIMBUS_LONG=1 go test -race -count=1 -v ./test/

bench: ## Run the benchmarks five times each (BENCH=regexp PKG=./lockstore/...).
	go test -run '^$$' -bench '$(BENCH)' -benchmem -count 5 $(PKG)

bench-compare: ## claimbus vs its baselines side by side, through benchstat (COUNT=5 BENCHTIME=1s BENCH_GROUPS="memory locks ..." OUT=dir); docs/PERFORMANCE.md.
	bash .ci/bench-compare

bench-held: ## TryLock+Release with 0, 1k and 10k locks held, and the time to take 100k (a private cluster).
	go test -run '^$$' -bench 'BenchmarkTryLockReleaseHeld|BenchmarkTryLockRelease$$' -benchmem -count 5 ./lockstore/postgres/
	go test -run '^$$' -bench 'BenchmarkHold100k' -benchtime 1x -count 3 ./lockstore/postgres/

faults: ## The lock-store fault suite, five times over, with its figures (the long form of what CI runs once).
	go test -race -count 5 -v -run 'TestFault|TestTokensRiseAcrossCrashRestarts|TestKeysFreeAfterBlackHoleHeals|TestReleaseInSilence|TestServerLockTableFull|TestMaxHeld|TestKilledNode|TestTerminated|TestSilentServer' ./lockstore/postgres/ | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|window|gave|free|took'

FUZZ_PKG ?= ./example_app/app/
FUZZ_TARGETS ?= FuzzStaffBody FuzzWalletBody FuzzTransferBody FuzzCancelBody FuzzLobbyBody FuzzGuessBody FuzzPathID
FUZZTIME ?= 1m

fuzz: ## Run each fuzz target of the HTTP API for FUZZTIME (default 1m, FUZZ_TARGETS to pick); not in CI.
	@set -e; for target in $(FUZZ_TARGETS); do \
		echo "fuzz $$target for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $(FUZZ_PKG); \
	done

lint: ## Run golangci-lint (the version .ci/golangci-lint pins, installed on first use).
	bash .ci/golangci-lint run $(PKG)

tidy: ## Tidy go.mod and go.sum.
	go mod tidy

COUNTS_FLAGS ?=

counts: ## Print the module's size: exported names, Go lines, the largest file, the longest doc comment, Markdown bytes (COUNTS_FLAGS="-max-exported 360 ..." to check limits).
	go run ./internal/cmd/counts $(COUNTS_FLAGS)

ci: ## Run what CI runs (.ci/run), installing and starting PostgreSQL.
	bash .ci/run
