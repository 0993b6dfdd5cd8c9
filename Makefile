# cronoq — build, test and run.

GO          ?= go
BIN         := bin/cronoq
PKGS        := ./...
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Raise to run more seeds of the determinism property test.
CRONOQ_PROPERTY_SEEDS ?= 200
export CRONOQ_PROPERTY_SEEDS

.PHONY: all build run test test-short lint fmt fmt-check vet staticcheck fuzz clean generate

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/node

## test: vet, formatting, the lint rules and every test under the race detector.
test: vet fmt-check
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

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

lint: vet fmt-check staticcheck

## fuzz: run each fuzz target for a short while.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run=NONE -fuzz=FuzzDecodeEntry -fuzztime=$(FUZZTIME) ./fsm/
	$(GO) test -run=NONE -fuzz=FuzzApply -fuzztime=$(FUZZTIME) ./fsm/

clean:
	rm -rf bin

## generate: regenerate the API code from transport/proto (needs protoc:
## apt-get install -y protobuf-compiler). The generated code is committed.
TOOLS := $(CURDIR)/bin/tools
generate:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
	PATH=$(TOOLS):$$PATH protoc -I transport/proto \
		--go_out=transport/gen --go_opt=module=github.com/cronoq/cronoq/transport/gen \
		--connect-go_out=transport/gen --connect-go_opt=module=github.com/cronoq/cronoq/transport/gen \
		transport/proto/cronoq/v1/cronoq.proto

## run: a local three-node cluster on loopback with a worker, doing real work.
run: build
	./scripts/run-local.sh
