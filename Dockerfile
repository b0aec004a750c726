# The operator image; zone-aware Loki pods run its `wait-for-zone` as their init
# container, so it must need no shell: a static (musl) binary in a distroless, non-root
# image. `make docker-build IMG=...` builds it.
FROM docker.io/library/rust:1.95-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src

# Dependencies in their own layer: built from the manifests and the lock file alone,
# with empty targets, so a source change reuses this layer and rebuilds only the crate.
COPY Cargo.toml Cargo.lock ./
COPY operator/Cargo.toml operator/
COPY tests/Cargo.toml tests/
RUN mkdir -p operator/src \
 && echo 'fn main() {}' > operator/src/main.rs \
 && touch operator/src/lib.rs \
 && for f in $(sed -n 's/^path = "\(.*\)"$/\1/p' tests/Cargo.toml); do \
      mkdir -p "tests/$(dirname "$f")" && echo 'fn main() {}' > "tests/$f"; \
    done \
 && cargo build --locked --release -p loki-zone-operator \
 && rm -rf operator/src \
      target/release/.fingerprint/loki-zone-operator-* \
      target/release/deps/loki_zone_operator-* \
      target/release/deps/libloki_zone_operator-*

# The crate (its templates are embedded at build time). The stub's fingerprints are
# gone, so cargo rebuilds it whatever the copied files' timestamps say.
COPY templates templates
COPY operator/src operator/src
RUN cargo build --locked --release -p loki-zone-operator \
 && cp target/release/loki-zone-operator /loki-zone-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /loki-zone-operator /loki-zone-operator
USER 65532:65532
ENTRYPOINT ["/loki-zone-operator"]
CMD ["run"]
