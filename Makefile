# podflow — top-level build. Every tool the build needs is installed here,
# pinned, from the Go module proxy or Debian's packages.

SHELL := /bin/bash
GO ?= go
MODULES := $(shell sed -n 's|^[[:space:]]*\./\([a-z]*\)$$|\1|p' go.work)
BIN := $(CURDIR)/bin
TOOLS := $(CURDIR)/.tools
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO := $(TOOLS)/protoc-gen-go
PROTOC_GEN_GO_VTPROTO_VERSION := v0.6.0
PROTOC_GEN_GO_VTPROTO := $(TOOLS)/protoc-gen-go-vtproto
DATA ?= $(CURDIR)/.podflow
# The Pod Security level of namespaces without a label (make run
# POD_SECURITY=baseline on a shared machine; docs/security.md).
POD_SECURITY ?= privileged
# Packages run concurrently under -race. At -p 3 make test takes ~7 minutes
# instead of ~10½ (most tests wait on processes, timers and the network),
# but ops/e2e's TestLinuxServiceTraffic once lost its Service answers there
# on an idle machine, cause not yet found: 2 until it is.
TEST_P ?= 2
# TEST_TIMEOUT is a hang guard per package, not a budget: ops/e2e, whose
# tests run concurrently, took about 10 minutes of tests plus 7 of its
# podflow build on 2 cores at load 35-95 (docs/benchmarks.md).
TEST_TIMEOUT ?= 25m

.PHONY: console-screenshots all build run httpserver sidecar-injector busybox test test-disk proto proto-check openapi openapi-check lint lint-docs lint-words tools deps-os bench bench-pipeline bench-peer bench-scale bench-workload chaos chaos-partition chaos-hosts chaos-rollout chaos-job fuzz clean

all: build

build:
	@mkdir -p $(BIN)
	cd ops && $(GO) build -o $(BIN)/podflow ./cmd/podflow

## run: the whole system with the example pod; real Linux pods when this
## machine allows (root, cgroups, network namespaces), else simulated nodes.
## POD_SECURITY=baseline refuses privileged pods in unlabelled namespaces.
## `podflow up` pushes the images it finds beside bin/podflow (the HTTP
## server, busybox) into its registry: podflow/http:1, podflow/busybox:1
## and busybox (library/busybox:latest).
run: build httpserver busybox
	$(BIN)/podflow up --data-dir $(DATA) --example --runtime auto --pod-security-default $(POD_SECURITY)

httpserver:
	cd images && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/httpserver ./httpserver

## sidecar-injector: the example mutating admission webhook (docs/admission.md).
sidecar-injector:
	cd images && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/sidecar-injector ./sidecar-injector

## busybox: bin/busybox, the busybox of podflow's busybox images, built
## from Debian's source package (trixie's, pinned) statically against musl
## by images/busybox/build.sh: Debian's busybox-static cannot resolve a
## name in a container (glibc's getaddrinfo needs libraries it has not),
## and bookworm's segfaults on `wget -T`. About two minutes, once.
BUSYBOX_VERSION ?= 1:1.37.0-6
BUSYBOX := $(BIN)/busybox
busybox: $(BUSYBOX)
$(BUSYBOX): images/busybox/build.sh
	@mkdir -p $(BIN)
	images/busybox/build.sh '$(BUSYBOX_VERSION)' $(TOOLS)/busybox $(BUSYBOX)

## images: podflow's test images from images/ (no Docker). The HTTP server is
## built static beside bin/podflow; `podflow images push` packages it and
## bin/busybox (make busybox) as OCI images and pushes them: to REGISTRY
## (host:port) when set, else into the registry data directory
## $(DATA)/registry, served in-process while pushing (`podflow up` serves it).
.PHONY: images
images: build httpserver busybox
	$(BIN)/podflow images push --httpserver $(BIN)/httpserver --busybox $(BUSYBOX) \
		$(if $(REGISTRY),--registry $(REGISTRY),--registry-dir $(DATA)/registry)

## tools: pinned generators. protoc comes from Debian (protobuf-compiler).
tools: $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_VTPROTO)
$(PROTOC_GEN_GO):
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(PROTOC_GEN_GO_VTPROTO):
	GOBIN=$(TOOLS) $(GO) install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(PROTOC_GEN_GO_VTPROTO_VERSION)

deps-os:
	@command -v protoc >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler; }
	@command -v ip >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2; }
	@dpkg -s busybox-static >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static; }
	@command -v runc >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc; }
	@test -x /usr/lib/cni/bridge || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins; }
	@command -v nft >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables; }
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@/usr/bin/python3 -c 'import kubernetes' 2>/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-kubernetes; }

PROTO_FILES := $(shell cd proto && ls */*.proto)
proto: tools deps-os
	cd proto && PATH=$(TOOLS):$$PATH protoc -I . -I /usr/include \
		--go_out=. --go_opt=paths=source_relative \
		--go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size+equal+clone \
		$(PROTO_FILES)

## proto-check fails when the committed generated code is stale.
proto-check: proto
	@git diff --exit-code --stat -- proto/ || { echo "generated protobuf code is out of date: run 'make proto' and commit"; exit 1; }

## openapi: the apiserver's OpenAPI definitions, generated by kube-openapi's
## openapi-gen (at the kube-openapi version services/go.mod requires, from
## the module proxy) from the Go types podflow serves.
OPENAPI_PKGS := k8s.io/api/core/v1 k8s.io/api/discovery/v1 k8s.io/api/rbac/v1 k8s.io/api/events/v1 k8s.io/api/scheduling/v1 \
	k8s.io/api/authentication/v1 k8s.io/api/authorization/v1 k8s.io/metrics/pkg/apis/metrics/v1beta1 \
	k8s.io/api/apps/v1 k8s.io/api/batch/v1 k8s.io/api/policy/v1 k8s.io/api/autoscaling/v1 k8s.io/api/coordination/v1 \
	k8s.io/api/node/v1 k8s.io/api/admissionregistration/v1 k8s.io/api/networking/v1 k8s.io/api/storage/v1 \
	k8s.io/api/certificates/v1 k8s.io/api/flowcontrol/v1 k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1 \
	k8s.io/api/scheduling/v1alpha3 k8s.io/kube-aggregator/pkg/apis/apiregistration/v1 \
	k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/api/resource \
	k8s.io/apimachinery/pkg/util/intstr k8s.io/apimachinery/pkg/version
openapi:
	cd services && v=$$($(GO) list -m -f '{{.Version}}' k8s.io/kube-openapi) && \
		GOBIN=$(TOOLS) $(GO) install k8s.io/kube-openapi/cmd/openapi-gen@$$v && \
		$(TOOLS)/openapi-gen --output-dir apiserver/openapigen --output-pkg github.com/podflow/podflow/services/apiserver/openapigen \
			--output-file zz_generated.openapi.go --go-header-file /dev/null --report-filename /dev/null $(OPENAPI_PKGS)

## openapi-check fails when the committed generated definitions are stale.
openapi-check: openapi
	@git diff --exit-code --stat -- services/apiserver/openapigen/ || { echo "generated OpenAPI definitions are out of date: run 'make openapi' and commit"; exit 1; }

## lint-docs: the README stays short (topics live in docs/), and the README
## and docs/ read as documentation, not a lab notebook: no "round N", no
## "sitting", no commit hash in backquotes or parentheses. Dated figures
## belong in docs/benchmarks.md, each with its date and command.
README_MAX_LINES := 250
DOCS_BANNED := \bround [0-9]|\bsitting|[(`](?=[0-9a-f]*[a-f])[0-9a-f]{7,40}[)`]
lint-docs:
	@n=$$(wc -l < README.md); if (( n > $(README_MAX_LINES) )); then \
		echo "README.md has $$n lines, more than $(README_MAX_LINES): move the detail into a topic file in docs/"; exit 1; fi
	@if grep -nHiP '$(DOCS_BANNED)' README.md docs/*.md; then \
		echo 'README.md and docs/*.md: no "round N", "sitting" or commit hashes (the lines above); date a figure in docs/benchmarks.md instead'; exit 1; fi

## lint-words: Go comments say why in plain words: no "round N", no
## "sitting", no commit hash in backquotes or parentheses (generated code
## aside).
lint-words:
	@if grep -rnHiP --include='*.go' --exclude='*.pb.go' --exclude='zz_generated*' '//.*(?:$(DOCS_BANNED))' $(MODULES); then \
		echo 'Go comments: no "round N", "sitting" or commit hashes (the lines above): say why in plain words'; exit 1; fi

lint: lint-docs lint-words
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@cd raftstore/etcdbench && GOWORK=off $(GO) list -deps . >/dev/null || \
		{ echo "raftstore/etcdbench (make bench-store) is behind the modules it replaces: cd raftstore/etcdbench && GOWORK=off go mod tidy"; exit 1; }

## test: ops/e2e in a `go test` of its own, beside one `go test -p TEST_P`
## of every other package of every module. ops/e2e schedules its own tests
## in lanes and mostly waits on the processes it starts; in the slots it
## held one of two for its whole run and nothing else, not even a compile,
## could use it. In the slots the longest packages are named first, which
## starts them first. The packages that failed are listed at the end.
## -vet=off: lint has just run go vet, every analyzer, over every module;
## go test's own vet pass would repeat a subset on each test package.
TEST_ALONE := ./ops/e2e
TEST_FIRST := ./nodeagent/linux ./services/apiserver ./raftstore ./services/pipeline ./nodeagent/linux/container ./services/stages/scheduler
## test-disk: the tests' embedded NATS servers reserve their streams'
## limits (PODFLOW_EVENTS 1 GiB, two 256 MiB ones) against JetStream's
## store limit, which is 75 % of the free space when unset: on a fuller disk
## every such test fails with "insufficient storage resources". Say so first.
TEST_MIN_FREE_GIB ?= 4
test-disk:
	@dir=$${TMPDIR:-/tmp}; free=$$(df -Pk "$$dir" | awk 'NR==2 {print $$4}'); \
	if (( free < $(TEST_MIN_FREE_GIB) * 1024 * 1024 )); then \
		echo "make test: $$((free / 1024)) MiB free in $$dir, $(TEST_MIN_FREE_GIB) GiB needed: each test's embedded JetStream server reserves 1.5 GiB of 75 % of it" >&2; exit 1; \
	fi

test: test-disk proto-check lint busybox
	@set -o pipefail; log=$$(mktemp); alone=$$(mktemp); trap 'rm -f "$$log" "$$alone"' EXIT; \
	$(GO) test -race -count=1 -vet=off -timeout $(TEST_TIMEOUT) $(TEST_ALONE) >"$$alone" 2>&1 & pid=$$!; \
	pkgs=$$($(GO) list $(addprefix ./,$(addsuffix /...,$(MODULES))) | grep -vxF "$$($(GO) list $(TEST_ALONE))") || { kill $$pid; exit 1; }; \
	$(GO) test -race -count=1 -vet=off -p $(TEST_P) -timeout $(TEST_TIMEOUT) $(TEST_FIRST) $$pkgs 2>&1 | tee "$$log"; \
	rc=$${PIPESTATUS[0]}; wait $$pid; rca=$$?; tee -a "$$log" <"$$alone"; (( rc == 0 )) && rc=$$rca; \
	failed=$$(sed -n 's/^FAIL[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/p' "$$log" | sort -u); \
	if (( rc != 0 )); then \
		echo "== make test failed (exit $$rc); failed packages:"; echo "$${failed:-  (none reported: a build or vet error above)}"; exit 1; \
	fi; \
	echo "== make test: every package of $(words $(MODULES)) modules passed"

## console-screenshots: docs/console-*.png, taken by TestConsoleInBrowser
## (ops/console) in headless Chromium over 20,000 simulated pods.
console-screenshots: deps-os
	cd ops && CONSOLE_SCREENSHOTS=$(CURDIR)/docs $(GO) test -count=1 -run 'TestConsoleInBrowser$$' ./console/

bench:
	@for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem ./...) || exit 1; done

## bench-pipeline: end-to-end pods/s and PodRequested→Running latency.
bench-pipeline: build
	$(BIN)/podflow bench pipeline --own --pods 10000 --rate 1500 --nodes 100

## bench-peer: podflow's bench pipeline and a Kubernetes v1.34 control
## plane (3 fsynced etcd members, kube-apiserver, kube-scheduler) with 100
## KWOK nodes, 3,000 pods each, 3 alternating runs on this machine: both
## sides' pods/s, latency, CPU per pod and the ratio (docs/benchmarks.md).
## The peer is built from the module proxy into .tools/peer (peer-tools;
## large, built on demand, never by build or test). Root not needed.
PEER := $(TOOLS)/peer
PEER_MOD := ops/peer
PEER_GOSUM := $(PEER_MOD)/go.mod $(PEER_MOD)/go.sum
PEER_K8S_VERSION := $(shell sed -n 's|^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\).*$$|\1|p' $(PEER_MOD)/go.mod)
PEER_K8S_MM := $(subst ., ,$(patsubst v%,%,$(PEER_K8S_VERSION)))
PEER_LDFLAGS := $(foreach p,k8s.io/client-go/pkg/version k8s.io/component-base/version,-X $(p).gitVersion=$(PEER_K8S_VERSION) -X $(p).gitMajor=$(word 1,$(PEER_K8S_MM)) -X $(p).gitMinor=$(word 2,$(PEER_K8S_MM)))
KWOK_VERSION := v0.7.0
.PHONY: bench-peer peer-tools peer-check
bench-peer: build peer-tools
	$(PEER)/bench-peer --podflow $(BIN)/podflow --tools $(PEER) --pods 3000 --nodes 100 --rate 2000 --runs 3
peer-tools: $(PEER)/kube-apiserver $(PEER)/kube-scheduler $(PEER)/etcd $(PEER)/kwok $(PEER)/bench-peer
$(PEER)/kube-apiserver $(PEER)/kube-scheduler: $(PEER_GOSUM) Makefile
	cd $(PEER_MOD) && GOWORK=off $(GO) build -ldflags '$(PEER_LDFLAGS)' -o $@.new k8s.io/kubernetes/cmd/$(notdir $@) && mv $@.new $@
$(PEER)/etcd: $(PEER_GOSUM) $(PEER_MOD)/etcd/main.go
	cd $(PEER_MOD) && GOWORK=off $(GO) build -o $@.new ./etcd && mv $@.new $@
# KWOK's own module graph (its go.mod has no replaces), from the module proxy.
$(PEER)/kwok: Makefile
	mkdir -p $(PEER)/kwok.bin && cd $(PEER_MOD) && GOWORK=off GOBIN=$(PEER)/kwok.bin $(GO) install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION) && mv $(PEER)/kwok.bin/kwok $@ && rmdir $(PEER)/kwok.bin
$(PEER)/bench-peer: $(PEER_GOSUM) $(wildcard $(PEER_MOD)/*.go)
	cd $(PEER_MOD) && GOWORK=off $(GO) build -o $@.new . && mv $@.new $@
## peer-check: bench-peer's own unit tests (arguments, certificates, math).
peer-check:
	cd $(PEER_MOD) && GOWORK=off $(GO) vet . ./etcd && GOWORK=off $(GO) test -count=1 .

## bench-workload: a Deployment of 10,000 replicas on 100 simulated nodes,
## timed until available and through a rolling update, 3 runs (docs/workloads.md).
bench-workload: build
	$(BIN)/podflow bench workload --own --pods 10000 --nodes 100 --runs 3

## bench-scale: 1 vs 2 replicas of admission (0.02 CPU each) and of the
## scheduler (0.1 CPU each), every replica bounded in a cgroup of its own
## (root; skips without a cgroup cpu controller), 3 runs each, alternating;
## medians and every consumer's peak pending (docs/operating.md, "Scaling out").
bench-scale: build
	$(BIN)/podflow bench scale --stage admission --replica-counts 1,2 --stage-cpu 0.02 --pods 3000 --rate 1200 --nodes 100 --runs 3
	$(BIN)/podflow bench scale --stage scheduler --replica-counts 1,2 --stage-cpu 0.1 --pods 3000 --rate 1200 --nodes 100 --runs 3

## chaos-partition: a bounded run (≤ 90 s): 200 pods while the
## store leader is cut off from its followers, then a NATS server from the
## other two, twice, with every checker.
chaos-partition: build
	$(BIN)/podflow chaos --own --nemesis leader,partition --nemesis-target store,nats --targets stages,nats \
		--pods 200 --duration 30s --kill-interval 6s --fault-for 5s --nodes 10 --settle 60s --seed 200

## chaos-hosts: three hosts on 127.0.0.51-53 (up --init, up --join); every
## 20 s every process of a random host is SIGKILLed, the host started again
## 10 s later, three times; 150 pods meanwhile, then every invariant.
chaos-hosts: build
	$(BIN)/podflow chaos --host-count 3 --pods 150 --duration 90s --kill-interval 20s --fault-for 10s --max-host-kills 3 \
		--nodes 2 --settle 2m --lin-clients 0

## chaos-rollout: a Deployment rolled out and scaled from
## 200 to 2,000 replicas on 30 simulated nodes while replicas of the
## deployment and replicaset controllers are SIGKILLed every 4 s (at most 30).
chaos-rollout: build
	$(BIN)/podflow chaos --own --scenario rollout --scale-to 2000 --nodes 30 --kill-interval 4s --max-kills 30 --duration 2m --settle 5m

## chaos-job: a Job of 1,000 completions, then an Indexed
## one, while replicas of the job controller are SIGKILLed every 3 s.
chaos-job: build
	$(BIN)/podflow chaos --own --scenario job --completions 1000 --parallelism 50 --nodes 20 --kill-interval 3s --max-kills 30 --duration 2m --settle 5m
	$(BIN)/podflow chaos --own --scenario job --completions 1000 --parallelism 50 --indexed --nodes 20 --kill-interval 3s --max-kills 30 --duration 2m --settle 5m

## chaos: a longer soak than the bounded runs in make test (bounded in pods
## and time; stops by itself): process kills and pauses, then every
## nemesis — kills, pauses and network faults between the store replicas —
## then every NATS route fault with kills of NATS servers during cuts,
## with the linearizability checker; then chaos-partition, chaos-hosts,
## chaos-rollout and chaos-job.
chaos: build
	$(BIN)/podflow chaos --own --pods 3000 --duration 5m --kill-interval 4s --targets stages,store,nodeagent,nats --pause --nodes 50
	$(BIN)/podflow chaos --own --pods 1000 --duration 3m --kill-interval 7s --fault-for 4s --targets stages,store \
		--nemesis kill,pause,partition,leader,bridge,oneway,latency,flap,cutkill --nodes 20
	$(BIN)/podflow chaos --own --pods 500 --duration 2m --kill-interval 6s --fault-for 4s --targets stages,nats \
		--nemesis kill,partition,leader,bridge,latency,flap,cutkill --nemesis-target nats --nodes 20
	@if [ "$$(id -u)" = 0 ]; then $(BIN)/podflow chaos --own --pods 300 --duration 90s --kill-interval 6s --fault-for 4s \
		--nemesis loss,leader,partition,kill --targets stages,store --nemesis-target store,nats --nodes 20; \
	else echo "chaos: packet loss (--nemesis loss) needs root; skipped"; fi
	$(MAKE) chaos-partition
	$(MAKE) chaos-hosts
	$(MAKE) chaos-rollout
	$(MAKE) chaos-job

fuzz:
	cd proto && $(GO) test -run '^$$' -fuzz FuzzEnvelopeDecode -fuzztime 30s ./eventsv1/
	cd proto && $(GO) test -run '^$$' -fuzz FuzzDecodersAgree -fuzztime 30s ./vt/
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

## conformance: the upstream Kubernetes e2e suite's [Conformance] tests
## (k8s.io/kubernetes v1.34.4, ops/conformance) against a fresh
## `podflow up --runtime $(RUNTIME)`, one test per process, $(PROCS) at a
## time, each interrupted after $(CONFORMANCE_TIMEOUT) ([Slow] ones after
## $(CONFORMANCE_SLOW_TIMEOUT)); the table, causes
## and JUnit XML go to _output/conformance/. FOCUS/SKIP select tests:
##   make conformance FOCUS='\[sig-apps\]'
##   make conformance RUNTIME=sim FOCUS='\[sig-api-machinery\].*\[Conformance\]'
## docs/conformance.md has the details. Root, for the Linux runtime.
CONFORMANCE := $(TOOLS)/conformance
CONFORMANCE_MOD := ops/conformance
CONFORMANCE_GOSUM := $(CONFORMANCE_MOD)/go.mod $(CONFORMANCE_MOD)/go.sum
# The extension API server images' programs (the Aggregator test's
# sample-apiserver and etcd), from their own module (ops/conformance/extra):
# k8s.io/sample-apiserver of the suite's release and etcd's server.
CONFORMANCE_EXTRA := $(TOOLS)/conformance-extra
CONFORMANCE_EXTRA_MOD := $(CONFORMANCE_MOD)/extra
CONFORMANCE_EXTRA_GOSUM := $(CONFORMANCE_EXTRA_MOD)/go.mod $(CONFORMANCE_EXTRA_MOD)/go.sum
# The release of the suite (ops/conformance/go.mod); stamped into e2e.test and
# kubectl as Kubernetes' own build does (hack/lib/version.sh): kubectl's
# version tests parse it.
CONFORMANCE_K8S_VERSION := $(shell sed -n 's|^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\)$$|\1|p' $(CONFORMANCE_MOD)/go.mod)
CONFORMANCE_K8S_MM := $(subst ., ,$(patsubst v%,%,$(CONFORMANCE_K8S_VERSION)))
CONFORMANCE_LDFLAGS := $(foreach p,k8s.io/client-go/pkg/version k8s.io/component-base/version,-X $(p).gitVersion=$(CONFORMANCE_K8S_VERSION) -X $(p).gitMajor=$(word 1,$(CONFORMANCE_K8S_MM)) -X $(p).gitMinor=$(word 2,$(CONFORMANCE_K8S_MM)))
FOCUS ?= \[Conformance\]
SKIP ?=
RUNTIME ?= linux
PROCS ?= 8
CONFORMANCE_TIMEOUT ?= 5m
CONFORMANCE_SLOW_TIMEOUT ?= 15m
.PHONY: conformance conformance-tools conformance-check conformance-deps-os
conformance: build httpserver busybox deps-os conformance-deps-os conformance-tools
	$(CONFORMANCE)/harness run --podflow $(BIN)/podflow --runtime $(RUNTIME) --out $(CURDIR)/_output/conformance \
		--suite $(CONFORMANCE)/e2e.test --kubectl $(CONFORMANCE)/kubectl --agnhost $(CONFORMANCE)/agnhost \
		--nnp $(CONFORMANCE)/nnp --sample-apiserver $(CONFORMANCE_EXTRA)/sample-apiserver --etcd $(CONFORMANCE_EXTRA)/etcd --busybox $(BUSYBOX) --k8s-dir "$$(cd $(CONFORMANCE_MOD) && GOWORK=off $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)" \
		--focus '$(FOCUS)' --skip '$(SKIP)' --procs $(PROCS) --timeout $(CONFORMANCE_TIMEOUT) --slow-timeout $(CONFORMANCE_SLOW_TIMEOUT)

## conformance-tools: the suite, kubectl and agnhost of the suite's release
## and the harness, cached in .tools/conformance/. The e2e busybox images
## hold podflow's busybox (bin/busybox, make busybox): upstream's ash, whose
## `sh -c env` prints variables named like a ConfigMap key (data-1).
conformance-tools: $(CONFORMANCE)/e2e.test $(CONFORMANCE)/kubectl $(CONFORMANCE)/agnhost $(CONFORMANCE)/nnp \
		$(CONFORMANCE_EXTRA)/sample-apiserver $(CONFORMANCE_EXTRA)/etcd
	cd $(CONFORMANCE_MOD)/harness && GOWORK=off $(GO) build -o $(CONFORMANCE)/harness.new . && mv $(CONFORMANCE)/harness.new $(CONFORMANCE)/harness
# Each is written beside and renamed into place: a running test keeps its binary.
$(CONFORMANCE)/e2e.test: $(CONFORMANCE_GOSUM) $(wildcard $(CONFORMANCE_MOD)/suite/*.go) Makefile
	cd $(CONFORMANCE_MOD) && GOWORK=off $(GO) test -c -vet=off -ldflags '$(CONFORMANCE_LDFLAGS)' -o $@.new ./suite && mv $@.new $@
$(CONFORMANCE)/kubectl: $(CONFORMANCE_GOSUM) Makefile
	cd $(CONFORMANCE_MOD) && GOWORK=off $(GO) build -ldflags '$(CONFORMANCE_LDFLAGS)' -o $@.new k8s.io/kubernetes/cmd/kubectl && mv $@.new $@
$(CONFORMANCE)/agnhost: $(CONFORMANCE_GOSUM)
	cd $(CONFORMANCE_MOD) && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@.new k8s.io/kubernetes/test/images/agnhost && mv $@.new $@
$(CONFORMANCE)/nnp: $(CONFORMANCE_GOSUM)
	cd $(CONFORMANCE_MOD) && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@.new k8s.io/kubernetes/test/images/nonewprivs && mv $@.new $@
# The Aggregator test's sample-apiserver and etcd (CONFORMANCE_EXTRA).
$(CONFORMANCE_EXTRA)/sample-apiserver: $(CONFORMANCE_EXTRA_GOSUM)
	@mkdir -p $(@D)
	cd $(CONFORMANCE_EXTRA_MOD) && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@.new k8s.io/sample-apiserver && mv $@.new $@
$(CONFORMANCE_EXTRA)/etcd: $(CONFORMANCE_EXTRA_GOSUM) $(CONFORMANCE_EXTRA_MOD)/etcd/main.go
	@mkdir -p $(@D)
	cd $(CONFORMANCE_EXTRA_MOD) && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@.new ./etcd && mv $@.new $@

## conformance-deps-os: the host programs copied into the agnhost image
## (upstream's has them from Alpine).
conformance-deps-os:
	@command -v dig >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bind9-dnsutils; }
	@command -v nc.openbsd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq netcat-openbsd; }
	@command -v curl >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl; }

## conformance-check: the harness's own tests: the JUnit parser and table,
## and the e2e images' programs run in a chroot of each image (root).
conformance-check: conformance-deps-os busybox $(CONFORMANCE)/agnhost $(CONFORMANCE)/nnp $(CONFORMANCE_EXTRA)/sample-apiserver $(CONFORMANCE_EXTRA)/etcd
	cd $(CONFORMANCE_MOD)/harness && GOWORK=off $(GO) vet ./... && \
		CONFORMANCE_AGNHOST=$(CONFORMANCE)/agnhost CONFORMANCE_NNP=$(CONFORMANCE)/nnp CONFORMANCE_BUSYBOX=$(BUSYBOX) \
		CONFORMANCE_SAMPLE_APISERVER=$(CONFORMANCE_EXTRA)/sample-apiserver CONFORMANCE_ETCD=$(CONFORMANCE_EXTRA)/etcd \
		CONFORMANCE_K8S_DIR="$$(cd $(CURDIR)/$(CONFORMANCE_MOD) && GOWORK=off $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)" \
		GOWORK=off $(GO) test -count=1 ./...
