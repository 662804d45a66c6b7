# podflow — top-level build. Every tool the build needs is installed here,
# pinned, from the Go module proxy or Debian's packages.

SHELL := /bin/bash
GO ?= go
MODULES := $(shell sed -n 's|^[[:space:]]*\./\([a-z]*\)$$|\1|p' go.work)
BIN := $(CURDIR)/bin
TOOLS := $(CURDIR)/.tools
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO := $(TOOLS)/protoc-gen-go
DATA ?= $(CURDIR)/.podflow
# Packages run concurrently under -race; keep make test inside CI's budget.
TEST_P ?= 2
TEST_TIMEOUT ?= 12m

.PHONY: all build run httpserver test proto proto-check lint tools deps-os bench bench-pipeline chaos chaos-partition fuzz clean

all: build

build:
	@mkdir -p $(BIN)
	cd ops && $(GO) build -o $(BIN)/podflow ./cmd/podflow

## run: the whole system with the example pod; real Linux pods when this
## machine allows (root, cgroups, network namespaces), else simulated nodes.
run: build httpserver
	$(BIN)/podflow up --data-dir $(DATA) --example --runtime auto

httpserver:
	cd images && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/httpserver ./httpserver

## images: podflow's test images from images/ (no Docker). The HTTP server is
## built static beside bin/podflow; `podflow images push` packages it and
## Debian's busybox-static as OCI images and pushes them: to REGISTRY
## (host:port) when set, else into the registry data directory
## $(DATA)/registry, served in-process while pushing (`podflow up` serves it).
.PHONY: images
images: build deps-os httpserver
	$(BIN)/podflow images push --httpserver $(BIN)/httpserver --busybox /bin/busybox \
		$(if $(REGISTRY),--registry $(REGISTRY),--registry-dir $(DATA)/registry)

## tools: pinned generators. protoc comes from Debian (protobuf-compiler).
tools: $(PROTOC_GEN_GO)
$(PROTOC_GEN_GO):
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

deps-os:
	@command -v protoc >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler; }
	@command -v ip >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2; }
	@dpkg -s busybox-static >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static; }
	@command -v runc >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc; }
	@test -x /usr/lib/cni/bridge || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins; }
	@command -v nft >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables; }
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

PROTO_FILES := $(shell cd proto && ls */*.proto)
proto: tools deps-os
	cd proto && PATH=$(TOOLS):$$PATH protoc -I . -I /usr/include \
		--go_out=. --go_opt=paths=source_relative $(PROTO_FILES)

## proto-check fails when the committed generated code is stale.
proto-check: proto
	@git diff --exit-code --stat -- proto/ || { echo "generated protobuf code is out of date: run 'make proto' and commit"; exit 1; }

lint:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

## test: every module's tests, even after one fails; the modules that
## failed are listed at the end and make exits non-zero.
test: proto-check lint
	@failed=(); \
	for m in $(MODULES); do \
		echo "== $$m"; \
		(cd $$m && $(GO) test -race -count=1 -p $(TEST_P) -timeout $(TEST_TIMEOUT) ./...) || failed+=("$$m"); \
	done; \
	if (( $${#failed[@]} )); then \
		echo "== make test: $${#failed[@]} of $(words $(MODULES)) modules failed: $${failed[*]}"; exit 1; \
	fi; \
	echo "== make test: all $(words $(MODULES)) modules passed"

bench:
	@for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem ./...) || exit 1; done

## bench-pipeline: end-to-end pods/s and PodRequested→Running latency.
bench-pipeline: build
	$(BIN)/podflow bench pipeline --pods 5000 --rate 1000 --nodes 100

## chaos-partition: issue #22's bounded run (≤ 90 s): 200 pods while the
## store leader is cut off from its followers, then a NATS server from the
## other two, twice, with every checker.
chaos-partition: build
	$(BIN)/podflow chaos --nemesis leader,partition --nemesis-target store,nats --targets stages,nats \
		--pods 200 --duration 30s --kill-interval 6s --fault-for 5s --nodes 10 --settle 60s --seed 200

## chaos: a longer soak than the bounded runs in make test (bounded in pods
## and time; stops by itself): process kills and pauses, then every
## nemesis — kills, pauses and network faults between the store replicas —
## then every NATS route fault with kills of NATS servers during cuts,
## with the linearizability checker; then chaos-partition.
chaos: build
	$(BIN)/podflow chaos --pods 3000 --duration 5m --kill-interval 4s --targets stages,store,nodeagent,nats --pause --nodes 50
	$(BIN)/podflow chaos --pods 1000 --duration 3m --kill-interval 7s --fault-for 4s --targets stages,store \
		--nemesis kill,pause,partition,leader,bridge,oneway,latency,flap,cutkill --nodes 20
	$(BIN)/podflow chaos --pods 500 --duration 2m --kill-interval 6s --fault-for 4s --targets stages,nats \
		--nemesis kill,partition,leader,bridge,latency,flap,cutkill --nemesis-target nats --nodes 20
	@if [ "$$(id -u)" = 0 ]; then $(BIN)/podflow chaos --pods 300 --duration 90s --kill-interval 6s --fault-for 4s \
		--nemesis loss,leader,partition,kill --targets stages,store --nemesis-target store,nats --nodes 20; \
	else echo "chaos: packet loss (--nemesis loss) needs root; skipped"; fi
	$(MAKE) chaos-partition

fuzz:
	cd proto && $(GO) test -run '^$$' -fuzz FuzzEnvelopeDecode -fuzztime 30s ./eventsv1/
	cd bus && $(GO) test -run '^$$' -fuzz FuzzEnvelopeDecode -fuzztime 30s .
	cd bus && $(GO) test -run '^$$' -fuzz FuzzParseSubject -fuzztime 30s .
	cd services && $(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./manifest/
	cd services && $(GO) test -run '^$$' -fuzz FuzzDecodeObject -fuzztime 30s ./apiserver/
	cd services && $(GO) test -run '^$$' -fuzz FuzzPatch -fuzztime 30s ./apiserver/

clean:
	rm -rf $(BIN) $(TOOLS)

## bench-store: raftstore vs etcd side by side (3 replicas, fsync on), in its
## own module outside go.work.
bench-store:
	cd raftstore/etcdbench && GOWORK=off $(GO) run . -duration 5s -runs 3
