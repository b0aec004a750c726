# The operator image; zone-aware Loki pods run its `wait-for-zone` as their init
# container, so it must need no shell: a static binary in a distroless, non-root image.
FROM docker.io/library/rust:1.95-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN cargo build --locked --release -p loki-zone-operator \
 && cp target/release/loki-zone-operator /loki-zone-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /loki-zone-operator /loki-zone-operator
USER 65532:65532
ENTRYPOINT ["/loki-zone-operator"]
CMD ["run"]
