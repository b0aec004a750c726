# The operator image, for those who build with Docker (`make docker-build IMG=...`);
# `make image` writes the same image as an OCI archive with neither Docker nor a
# registry: a static (musl) binary and, as in a distroless "static:nonroot" image,
# /etc/passwd and /etc/group with user nonroot (65532), /tmp and Debian's CA bundle;
# nothing else. hack/build-image.sh lays out those files for both builds.
#
# `--target zone-wait` builds the zone init container's image instead (loki-zone-wait,
# zone-wait/): its binary alone, run as 65532.
FROM docker.io/library/rust:1.95-slim-bookworm AS build
# musl-gcc: ring builds C for the musl target. ca-certificates: the bundle the image carries.
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
ARG TARGET=x86_64-unknown-linux-musl

# Dependencies in their own layer: built from the manifests and the lock file alone,
# with empty targets, so a source change reuses this layer and rebuilds only the crate.
COPY Cargo.toml Cargo.lock ./
COPY operator/Cargo.toml operator/build.rs operator/
COPY tests/Cargo.toml tests/
COPY zone-wait/Cargo.toml zone-wait/
RUN mkdir -p operator/src zone-wait/src \
 && echo 'fn main() {}' > operator/src/main.rs \
 && touch operator/src/lib.rs \
 && echo 'fn main() {}' > zone-wait/src/main.rs \
 && touch zone-wait/src/lib.rs \
 && for f in $(sed -n 's/^path = "\(.*\)"$/\1/p' tests/Cargo.toml); do \
      mkdir -p "tests/$(dirname "$f")" && echo 'fn main() {}' > "tests/$f"; \
    done \
 && cargo build --locked --release --target "$TARGET" -p loki-zone-operator \
 && rm -rf operator/src zone-wait/src \
      target/$TARGET/release/.fingerprint/loki-zone-operator-* \
      target/$TARGET/release/.fingerprint/loki-zone-wait-* \
      target/$TARGET/release/deps/loki_zone_wait-* \
      target/$TARGET/release/deps/libloki_zone_wait-* \
      target/$TARGET/release/deps/loki_zone_operator-* \
      target/$TARGET/release/deps/libloki_zone_operator-*

# The crate (its templates are embedded at build time). The stub's fingerprints are
# gone, so cargo rebuilds it whatever the copied files' timestamps say.
COPY templates templates
COPY zone-wait/src zone-wait/src
COPY operator/src operator/src
COPY hack/build-image.sh hack/
# What --version names (operator/build.rs): the build context has no .git. Declared
# here, so that a new commit leaves the dependency layer cached.
ARG LZO_GIT_COMMIT=unknown
RUN cargo build --locked --release --target "$TARGET" -p loki-zone-operator -p loki-zone-wait \
 && install -D -m 0755 target/$TARGET/release/loki-zone-wait /zone-wait/loki-zone-wait \
 && bash hack/build-image.sh rootfs target/$TARGET/release/loki-zone-operator /rootfs \
 && mv /rootfs/home/nonroot /nonroot-home

FROM scratch AS zone-wait
COPY --from=build /zone-wait/ /
USER 65532:65532
ENTRYPOINT ["/loki-zone-wait"]

# The operator image: the last stage, what `docker build` builds without --target.
FROM scratch AS operator
# COPY makes every file root's, so the home of nonroot comes in a COPY of its own.
COPY --from=build /rootfs/ /
COPY --from=build --chown=65532:65532 /nonroot-home /home/nonroot
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
ENTRYPOINT ["/loki-zone-operator"]
CMD ["run"]
