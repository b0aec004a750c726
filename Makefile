# loki-zone-operator — `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO ?= cargo
BIN := target/debug/loki-zone-operator

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the operator binary
	$(CARGO) build --locked -p loki-zone-operator

.PHONY: test
test: ## Run the unit and integration tests
	$(CARGO) test --locked --workspace

.PHONY: manifests
manifests: build ## Regenerate the CRD in manifests/crd from the Rust API types
	$(BIN) crd > manifests/crd/loki.grafana.com_lokistacks.yaml

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
