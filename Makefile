# loki-zone-operator — `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO ?= cargo
KUBECTL ?= kubectl
BIN := target/debug/loki-zone-operator
CLUSTER := target/debug/e2e-cluster
DEMO_DIR := .e2e/demo
# The operator image: `deploy` installs it, `image` and `docker-build` build it. By
# default the one manifests/operator sets.
IMG ?= $(shell bash hack/image-ref.sh loki-zone-operator)
# The zone init container's image (zone-wait/, its own version): `deploy` names it in
# RELATED_IMAGE_ZONE_WAIT, `image` and `docker-build` build it too.
ZONE_WAIT_IMG ?= $(shell bash hack/image-ref.sh loki-zone-wait)
# The OLM bundle image `bundle-build` builds from bundle/ (whose CSV names the operator
# image manifests/operator sets: change it there and run `make bundle` for your own).
BUNDLE_IMG ?= $(shell bash hack/image-ref.sh loki-zone-operator -bundle)
CONTAINER_TOOL ?= docker
# A kustomization of your own over manifests/operator, for deploy and undeploy.
OVERLAY ?=

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the operator and the test tools
	$(CARGO) build --locked --workspace

# Why the real-node check cannot run on this machine, when it cannot (not root, no
# cgroup v1, no apt or registry for what it needs: hack/real-node/preflight.sh).
REAL_NODE_MISSING := target/e2e-real.missing

# Why the release check cannot run on this machine, when it cannot (no PyPI for zig, no
# rust targets: hack/release-check.sh).
RELEASE_MISSING := target/release.missing

# Why promtool (the alert rule checks of tests/monitoring.rs) is missing, when it is (not
# root, no apt: hack/promtool.sh).
PROMTOOL_MISSING := target/promtool.missing

.PHONY: test
# One build of everything, never edited in place: incremental caches would only add
# gigabytes to a CI machine's disk.
test: export CARGO_INCREMENTAL := 0
test: ## Unit, integration and end-to-end tests (what CI runs); builds the current and the oldest supported Kubernetes once; the release twice; real nodes where root and cgroup v1
	@$(MAKE) --no-print-directory k8s
	LZO_REQUIRE_CURRENT_SERVER=1 $(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory e2e
	@$(MAKE) --no-print-directory release-check-or-why
	@$(MAKE) --no-print-directory e2e-real-or-why
	@echo "make test: the CRD admission table ran on kube-apiserver $(K8S_CURRENT) and $(K8S_OLDEST) (the 'admission:' lines above); every e2e scenario on $(K8S_CURRENT), the smoke scenarios on $(K8S_OLDEST)"
	@if [ -s target/upgrade.missing ]; then \
	  echo "!! make test: the upgrade from the previous release did NOT run: $$(cat target/upgrade.missing)"; fi
	@if [ -s $(PROMTOOL_MISSING) ]; then \
	  echo "!! make test: promtool's alert rule checks (check rules, test rules of tests/promtool, the Go operator's alerts on our series) did NOT run: $$(cat $(PROMTOOL_MISSING))"; \
	else echo "make test: promtool checked the alert rules, fired and silenced every alert (tests/promtool) and ran the Go operator's alerts on our series"; fi
	@if [ -s $(RELEASE_MISSING) ]; then \
	  echo "!! make test: the release check (make release twice, same digests; arm64 = amd64) did NOT run: $$(cat $(RELEASE_MISSING))"; \
	else echo "make test: make release ran twice and gave the same digests (above)"; fi
	@if [ -s $(REAL_NODE_MISSING) ]; then \
	  echo "!! make test: the real-node check (operator image, webhooks and zone init containers on real kubelets) did NOT run: $$(cat $(REAL_NODE_MISSING))"; \
	else echo "make test: the real-node check passed (operator image in-cluster on 3 real kubelets, webhooks through the Service, zone init containers exited 0; the cross-zone accounting on a test bridge)"; \
	  if [ -z "$$LOKI_IMAGE_ARCHIVE" ]; then echo "!! make test: the real-Loki part of it did NOT run: no LOKI_IMAGE_ARCHIVE (hack/real-node/README.md)"; \
	  else echo "make test: the real-Loki part ran with $$LOKI_IMAGE_ARCHIVE"; fi; fi

# The supported range: the Kubernetes of hack/k8s-current and of hack/k8s-oldest.
K8S_CURRENT := $(shell awk '$$2 == "k8s.io/kubernetes" {print $$3; exit}' hack/k8s-current/go.mod)
K8S_OLDEST := $(shell awk '$$2 == "k8s.io/kubernetes" {print $$3; exit}' hack/k8s-oldest/go.mod)

.PHONY: k8s
k8s: ## Build the current and the oldest supported Kubernetes from the Go module proxy (once, cached in ~/.cache; needs Go)
	bash hack/build-k8s.sh current >/dev/null
	bash hack/build-k8s.sh oldest >/dev/null

.PHONY: unit
unit: promtool-or-why regex-parity-check ## Unit and integration tests (no cluster needed; the admission table needs `make k8s` once; promtool is installed with apt as root)
	LZO_PROMTOOL_UNAVAILABLE="$$(cat $(PROMTOOL_MISSING) 2>/dev/null)" $(CARGO) test --locked --workspace

REGEX_PARITY := operator/src/logql/regex_parity.jsonl

.PHONY: regex-parity
regex-parity: ## Rewrite Go's verdicts in the regex parity corpus (Go's regexp and grafana/regexp; needs Go)
	cd hack/regex-parity && go run . ../../$(REGEX_PARITY)

# The corpus's verdicts are Go's own (the unit tests check ours against them).
.PHONY: regex-parity-check
regex-parity-check:
	@command -v go >/dev/null || { echo "make test needs Go (1.25 or later) for hack/regex-parity" >&2; exit 1; }
	cd hack/regex-parity && go run . -check ../../$(REGEX_PARITY)

# Installs promtool (Debian's prometheus package) if it can; if it cannot (not root, no
# apt), records why, so that the rule tests and the end of `make test` say so, and
# carries on.
.PHONY: promtool-or-why
promtool-or-why:
	@mkdir -p target && rm -f $(PROMTOOL_MISSING)
	@if ! why=$$(bash hack/promtool.sh); then echo "$$why" > $(PROMTOOL_MISSING); \
	  echo "!! $$why - promtool's alert rule checks will NOT run" >&2; fi

.PHONY: e2e
e2e: build k8s ## End-to-end suite: every scenario on the current Kubernetes, the smoke scenarios on the oldest (control planes on loopback, simulated nodes)
	@rm -f target/upgrade.missing
	$(CARGO) test --locked -p loki-zone-operator-tests --test e2e
	LZO_KUBE=oldest $(CARGO) test --locked -p loki-zone-operator-tests --test e2e

# Runs hack/release-check.sh (make release twice, the same digests) where the machine can
# (a failure then fails make test); where it cannot, records why and carries on.
.PHONY: release-check-or-why
release-check-or-why:
	@mkdir -p target && rm -f $(RELEASE_MISSING)
	@bash hack/release-check.sh > target/release-check.out; rc=$$?; cat target/release-check.out; \
	  if [ $$rc = 2 ]; then cp target/release-check.out $(RELEASE_MISSING); \
	    echo "!! the release check will NOT run: $$(cat $(RELEASE_MISSING))" >&2; \
	  elif [ $$rc != 0 ]; then exit $$rc; fi

.PHONY: e2e-real
e2e-real: ## End-to-end on real nodes (root): make release, pushed to a registry; 3 kubelets with containerd; the quick-start from dist/install.yaml, a prefixed make deploy, a drain
	bash hack/real-node/e2e.sh

# Runs e2e-real where the machine can (a failure then fails make test); where it cannot,
# records why, so that the end of `make test` says so, and carries on. The cross-zone
# accounting's own test (a few seconds, no cluster) goes first: with a Loki image the
# real-node check measures with it, without one it is all that checks it.
.PHONY: e2e-real-or-why
e2e-real-or-why:
	@mkdir -p target && rm -f $(REAL_NODE_MISSING)
	@if why=$$(bash hack/real-node/preflight.sh); then \
	  bash hack/real-node/zone-traffic-test.sh && \
	  USE_DIST=$$([ -s $(RELEASE_MISSING) ] || echo 1) bash hack/real-node/e2e.sh; \
	else echo "$$why" > $(REAL_NODE_MISSING); \
	  echo "!! the real-node check will NOT run: $$why" >&2; fi

.PHONY: demo
demo: build ## Start a local cluster with the operator and a zone-aware stack; print where each pod runs
	bash hack/build-k8s.sh current >/dev/null
	$(CLUSTER) demo $(DEMO_DIR)

.PHONY: demo-down
demo-down: ## Stop the demo cluster
	@if [ -x $(CLUSTER) ]; then $(CLUSTER) down $(DEMO_DIR); else echo "no demo cluster"; fi

.PHONY: run
run: build ## Run the operator against the cluster of the current KUBECONFIG
	$(BIN) run --leader-elect=false

.PHONY: manifests
manifests: build ## Regenerate the CRDs in manifests/crd from the Rust API types
	$(BIN) crd --out-dir manifests/crd

# install, replace-crd, deploy and undeploy need kubectl only: no Rust toolchain.
.PHONY: install
install: ## Install the CRDs into the current cluster
	bash hack/deploy.sh install

.PHONY: uninstall
uninstall: ## Remove the CRDs (and with them every LokiStack and rule) from the current cluster
	bash hack/deploy.sh uninstall

.PHONY: replace-crd
replace-crd: ## Replace the Go Loki Operator's CRDs with ours, keeping every stack and rule (docs/migrate.md)
	bash hack/deploy.sh replace-crd

.PHONY: deploy
deploy: ## Install the operator (CRD, RBAC, Deployment) with image IMG, from the committed manifests (OVERLAY: your kustomization over them)
	IMG=$(IMG) ZONE_WAIT_IMG=$(ZONE_WAIT_IMG) OVERLAY=$(OVERLAY) bash hack/deploy.sh deploy

.PHONY: undeploy
undeploy: ## Remove the operator (keeps the CRD and LokiStacks; OVERLAY as for deploy)
	OVERLAY=$(OVERLAY) bash hack/deploy.sh undeploy

# `make bench BENCH_ARGS=memory` runs the memory section alone.
BENCH_ARGS ?=

# The operator the bench measures: the static binary `make image` puts in the image (musl,
# amd64), so memory figures are those of what ships; BENCH_BIN=... measures another.
BENCH_BIN ?= $${LZO_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/loki-zone-operator}/release-target/x86_64-unknown-linux-musl/release/loki-zone-operator

.PHONY: bench
bench: ## Measure image size, annotation latency, memory, idle API cost, apply time, rollouts and scale (the image's static binary)
	$(CARGO) build --locked --release -p loki-zone-operator-tests --bin bench
	bash hack/build-k8s.sh current >/dev/null
	$(MAKE) --no-print-directory image
	IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) LOKI_ZONE_OPERATOR_BIN="$(BENCH_BIN)" target/release/bench $(BENCH_ARGS)

.PHONY: docs
docs: ## Regenerate docs/api.md from the CRD
	$(CARGO) run --locked -q -p loki-zone-operator-tests --bin gen-docs

.PHONY: bundle
bundle: ## Regenerate the OLM bundle (bundle/, bundle.Dockerfile) from manifests/
	$(CARGO) run --locked -q -p loki-zone-operator-tests --bin gen-bundle

.PHONY: bundle-build
bundle-build: ## Build the OLM bundle image BUNDLE_IMG from bundle/
	$(CONTAINER_TOOL) build -f bundle.Dockerfile -t $(BUNDLE_IMG) .

.PHONY: bundle-push
bundle-push: ## Push the OLM bundle image BUNDLE_IMG
	$(CONTAINER_TOOL) push $(BUNDLE_IMG)

# `make release VERSION=v0.1.0`: dist/ (docs/install.md#releasing); IMAGE_REPO, BUNDLE_REPO,
# LOKI_IMAGE_DIGEST, ALLOW_DIRTY are passed on from the command line or environment.
VERSION ?=

.PHONY: release
release: ## Write every artefact of release VERSION to dist/: multi-platform image, install.yaml, OLM bundle, SBOM, sums (no Docker, no registry)
	@[ -n "$(VERSION)" ] || { echo "usage: make release VERSION=vX.Y.Z" >&2; exit 2; }
	VERSION=$(VERSION) bash hack/release.sh

.PHONY: publish
publish: ## Push dist/ (make release) to the registry with skopeo and pull it back by digest to compare
	@[ -n "$(VERSION)" ] || { echo "usage: make publish VERSION=vX.Y.Z" >&2; exit 2; }
	bash hack/publish.sh $(VERSION)

# The OCI archive `make image` writes; docs/install.md shows how each tool loads it.
IMAGE_ARCHIVE ?= target/image/loki-zone-operator.oci.tar
ZONE_WAIT_ARCHIVE ?= target/image/loki-zone-wait.oci.tar

.PHONY: image
image: ## Build the operator image IMG and the zone init container's ZONE_WAIT_IMG as OCI archives, no Docker needed (IMAGE_ARCHIVE, ZONE_WAIT_ARCHIVE, PLATFORMS; static builds cached in ~/.cache)
	IMG=$(IMG) OUT=$(IMAGE_ARCHIVE) bash hack/build-image.sh
	IMAGE=zone-wait IMG=$(ZONE_WAIT_IMG) OUT=$(ZONE_WAIT_ARCHIVE) bash hack/build-image.sh

.PHONY: docker-build
docker-build: ## Build the operator image IMG and the zone init container's ZONE_WAIT_IMG with Docker (the files `make image` writes; dependencies in their own layer)
	$(CONTAINER_TOOL) build --build-arg LZO_GIT_COMMIT=$$(git rev-parse HEAD) -t $(IMG) .
	$(CONTAINER_TOOL) build --target zone-wait -t $(ZONE_WAIT_IMG) .

.PHONY: docker-push
docker-push: ## Push the operator image IMG and the zone init container's ZONE_WAIT_IMG
	$(CONTAINER_TOOL) push $(IMG)
	$(CONTAINER_TOOL) push $(ZONE_WAIT_IMG)

.PHONY: render-sample
render-sample: build ## Render the zone-aware sample against the sample nodes
	$(BIN) render -f manifests/samples/lokistack-zone-aware.yaml --nodes manifests/samples/nodes-three-zones.yaml

.PHONY: fmt
fmt: ## Format the code
	$(CARGO) fmt --all

.PHONY: lint
lint: ## Check formatting and run clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked -p loki-zone-operator-tests --test e2e -- -D warnings
