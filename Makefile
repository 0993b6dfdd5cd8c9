# cronoq — build, test and run.

GO          ?= go
BIN         := bin/cronoq
PKGS        := ./...
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Raise to run more seeds of the determinism property test.
CRONOQ_PROPERTY_SEEDS ?= 200
export CRONOQ_PROPERTY_SEEDS

.PHONY: all build docker docker-test run test test-short lint fmt fmt-check vet staticcheck fuzz clean generate generate-api generate-codec generate-check

all: build

# VERSION is stamped into the binary (cronoq version, members, the agent's
# gossip metadata): the Git tag or commit, "-dirty" when the tree has changes.
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS     := -X main.version=$(VERSION)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/node

## test: vet, formatting, the lint rules and every test under the race
## detector, then the tests of the fault-injection builds: the admin API and
## fault hooks (tag jepsenfaults), and each deliberate bug's own test, and
## the unit tests of the bench module (its own go.mod), and the end-to-end
## suite a second time with TLS, gossip encryption and ACLs on every agent.
test: vet fmt-check
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...
	$(GO) test -race -count=1 -timeout 10m -tags jepsenfaults ./cluster ./transport
	CRONOQ_E2E_SECURE=1 $(GO) test -count=1 -timeout 20m ./e2e
	@for b in $(JEPSEN_BUGS); do \
		echo "go test -tags jepsenfaults,jepsenbug_$$b -run Bug"; \
		$(GO) test -count=1 -tags jepsenfaults,jepsenbug_$$b -run Bug ./fsm ./engine/... ./transport || exit 1; \
	done

## test-short: the same without the race detector, for a quick loop.
test-short:
	$(GO) test -count=1 -short $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

staticcheck:
	$(GO) run $(STATICCHECK) $(PKGS)
	cd bench && $(GO) run $(STATICCHECK) ./...

lint: vet fmt-check staticcheck

## fuzz: run each fuzz target for a short while. The API targets run a
## real node per fuzzing worker and send each input to every procedure.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run=NONE -fuzz=FuzzDecodeEntry -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./fsm/
	$(GO) test -run=NONE -fuzz=FuzzApply -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./fsm/
	$(GO) test -run=NONE -fuzz=FuzzRestore -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./fsm/
	$(GO) test -run=NONE -fuzz=FuzzSubscriptionOps -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./fsm/
	$(GO) test -run=NONE -fuzz=FuzzUnary -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./transport/
	$(GO) test -run=NONE -fuzz=FuzzStreams -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./transport/

clean:
	rm -rf bin

## generate: regenerate the committed code: the API from api/proto (needs
## protoc: apt-get install -y protobuf-compiler), the gRPC-Go stubs the
## plain-gRPC tests use (internal/grpcstubs), and the log and gossip
## codecs of fsm and cluster from their struct tags (tinylib/msgp).
TOOLS := $(CURDIR)/bin/tools
generate: generate-api generate-codec

generate-api:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
	PATH=$(TOOLS):$$PATH protoc -I api/proto \
		--go_out=api --go_opt=module=github.com/cronoq/cronoq/api \
		--connect-go_out=api --connect-go_opt=module=github.com/cronoq/cronoq/api \
		api/proto/cronoq/v1/cronoq.proto
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	PATH=$(TOOLS):$$PATH ./scripts/gen-grpcstubs.sh

generate-codec:
	$(GO) generate ./fsm ./cluster

## generate-check: regenerating changes nothing (run by CI). The protoc
## version named in the header of the generated API code is not compared.
generate-check: generate
	@new=$$(git ls-files --others --exclude-standard -- api fsm cluster internal/grpcstubs); \
	if [ -n "$$new" ] || ! git diff --quiet -I '^//[[:space:]]+protoc[[:space:]]' -- api fsm cluster internal/grpcstubs; then \
		echo "generated code differs from what is committed (run make generate):"; \
		echo "$$new"; git diff --stat -I '^//[[:space:]]+protoc[[:space:]]' -- api fsm cluster internal/grpcstubs; exit 1; fi

## docker: the image $(DOCKER_IMAGE), FROM scratch with the static binary of
## build (see deploy/Dockerfile). The build context is a temporary directory
## holding only the Dockerfile, the binary and the image's /tmp and /data.
DOCKER_IMAGE ?= cronoq:dev
docker: build
	@ctx=$$(mktemp -d "$${TMPDIR:-/tmp}/cronoq-docker.XXXXXX") && trap 'rm -rf "$$ctx"' EXIT && \
	mkdir -p "$$ctx/rootfs/tmp" "$$ctx/rootfs/data" && chmod 1777 "$$ctx/rootfs/tmp" && \
	cp deploy/Dockerfile $(BIN) "$$ctx/" && \
	docker build -q -t $(DOCKER_IMAGE) "$$ctx" && echo "built $(DOCKER_IMAGE)"

## docker-test: the three-node cluster of deploy/docker-compose.yml under a
## leader kill, a network disconnect and a restart, with a worker on this
## host; every acknowledged task must succeed (needs docker, docker-compose
## and jq; run as root). See scripts/docker-test.sh.
docker-test: docker
	DOCKER_IMAGE=$(DOCKER_IMAGE) BIN=$(BIN) ./scripts/docker-test.sh

## run: a local three-node cluster on loopback with a worker, doing real work
## (API ports 8650, 8660, 8670; CRONOQ_RUN_BASE=9640 makes them 9650...).
run: build
	./scripts/run-local.sh

## ---------------------------------------------------------------------------
## jepsen: the fault-injection harness (needs root: network and PID
## namespaces, iptables inside them). See jepsen/run-in-netns.sh.
JEPSEN          := bin/jepsen
JEPSEN_NODE     := bin/cronoq-jepsen
JEPSEN_BUGS     := ackearly noepoch stalelease cronrefire followerread depdone laneoverlap ackonsend
JEPSEN_DURATION ?= 30m
JEPSEN_LIMIT    ?= 40m
JEPSEN_SEED     ?= 0

.PHONY: jepsen-build jepsen-smoke jepsen jepsen-selftest

## jepsen-build: the node binary with the test-only admin API and the harness.
jepsen-build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -tags jepsenfaults -o $(JEPSEN_NODE) ./cmd/node
	CGO_ENABLED=0 $(GO) build -trimpath -o $(JEPSEN) ./jepsen/cmd/jepsen

## jepsen-smoke: the fixed CI schedule, about three minutes, then a shorter
## one with TLS (client certificates required), gossip encryption and ACLs
## on (-secure); both must be valid.
jepsen-smoke: jepsen-build
	./jepsen/run-in-netns.sh 225s $(JEPSEN) run -bin $(JEPSEN_NODE) -schedule smoke -budget 215s -seed $(JEPSEN_SEED)
	./jepsen/run-in-netns.sh 160s $(JEPSEN) run -bin $(JEPSEN_NODE) -schedule smoke-secure -secure \
		-budget 150s -recovery 10s -seed $(JEPSEN_SEED)

## jepsen: a soak run of JEPSEN_DURATION faults (JEPSEN_LIMIT bounds the whole run).
jepsen: jepsen-build
	./jepsen/run-in-netns.sh $(JEPSEN_LIMIT) $(JEPSEN) run -bin $(JEPSEN_NODE) -schedule soak \
		-duration $(JEPSEN_DURATION) -budget $(JEPSEN_LIMIT) -seed $(JEPSEN_SEED)

## jepsen-selftest: each deliberate bug build must be caught by its checker,
## and the normal build must be valid.
jepsen-selftest: jepsen-build
	@for b in $(JEPSEN_BUGS); do \
		echo "building $(JEPSEN_NODE)-$$b"; \
		CGO_ENABLED=0 $(GO) build -trimpath -tags jepsenfaults,jepsenbug_$$b -o $(JEPSEN_NODE)-$$b ./cmd/node || exit 1; \
	done
	$(JEPSEN) selftest -bin-dir bin

## ---------------------------------------------------------------------------
## bench: cronoq against River (PostgreSQL) and asynq (Redis) on this machine.
## The harness is its own Go module in bench/; it installs redis-server and
## postgresql from Debian when missing, starts everything on 127.0.0.1 with
## its data under bench/results, stops it by pid, and writes
## bench/results/<time>/report.{md,json}, chart.svg and scale.svg
## (bench/results/latest).
BENCH     := bin/cronoq-bench
BENCHARGS ?=

.PHONY: bench-build bench-quick bench-compare bench-longhaul bench-core

bench-build: build
	cd bench && $(GO) build -trimpath -o ../$(BENCH) .

## bench-quick: W1 at 20,000 tasks, three runs per system (about 4 minutes).
bench-quick: bench-build
	./$(BENCH) -quick $(BENCHARGS)

## bench-compare: every workload, three runs per cell, systems alternated
## (about 90 minutes on 2 cores with the default and tuned peers), and the
## scale curves of cronoq once (scale.svg; sizes that would not fit in
## memory are not run).
bench-compare: bench-build
	./$(BENCH) $(BENCHARGS)

## bench-longhaul: one hour at 2,000 tasks/s with a ten-minute retention,
## sampling every node and stopping a follower twice so that it is caught up
## by an installed snapshot (longhaul.md, .json, .svg).
bench-longhaul: bench-build
	./$(BENCH) -long-haul $(or $(LONGHAUL),1h) $(BENCHARGS)

## bench-core: the engine's own benchmarks, without a network or a disk:
## BenchmarkLifecycle (submit, dispatch and complete through the core, the
## driver, the log encoding, an in-memory log and the FSM; tasks/s) and
## BenchmarkPending1M (bytes per pending task held by the core and the FSM,
## payload excluded, with 1,000,000 queued) and BenchmarkRetained (bytes per
## ended task kept for its retention, payload and output excluded, with
## 1,000,000 succeeded), three runs each (a few minutes).
bench-core:
	$(GO) test -run '^$$' -bench '^BenchmarkLifecycle$$' -benchtime 200000x -count 3 ./engine/
	$(GO) test -run '^$$' -bench '^BenchmarkPending1M$$' -benchtime 1x -count 3 ./engine/
	$(GO) test -run '^$$' -bench '^BenchmarkRetained$$' -benchtime 1x -count 3 ./engine/
