# syntax=docker/dockerfile:1
#
# The operator image: one static-ish binary on a distroless base, non-root, nothing written at
# run time (works with readOnlyRootFilesystem).
#
#   docker build -t registry.example.org/openstack-operator:0.1.0 .
#
# Base image choice: the binary is built against glibc and runs on distroless/cc (glibc,
# libgcc_s; `ldd` of the binary lists only libc, libm and libgcc_s). A fully static musl build
# on distroless/static or scratch is possible in principle (aws-lc-sys ships prebuilt bindings
# for x86_64-unknown-linux-musl and needs only musl-gcc), but it was not verified here, and
# musl's allocator is slow for a multi-threaded tokio service without swapping the allocator.
# Builder and runtime are both Debian 12 (bookworm), so the glibc versions match.

ARG RUST_VERSION=1

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
ENV CARGO_TERM_COLOR=never CARGO_TARGET_DIR=/src/target

# 1. Dependencies only: the manifests with stub sources, so this layer is rebuilt only when a
#    Cargo.toml or Cargo.lock changes. (rust-toolchain.toml and .cargo/ are not copied: the
#    image's stable toolchain is used and the target directory stays inside the build.)
COPY Cargo.toml Cargo.lock ./
COPY crates/api/Cargo.toml crates/api/
COPY crates/openstack/Cargo.toml crates/openstack/
COPY crates/controllers/Cargo.toml crates/controllers/
COPY crates/openstack-operator/Cargo.toml crates/openstack-operator/
COPY crates/kube-emulator/Cargo.toml crates/kube-emulator/
COPY crates/e2e/Cargo.toml crates/e2e/
RUN for c in api openstack controllers kube-emulator e2e; do \
      mkdir -p crates/$c/src && touch crates/$c/src/lib.rs; \
    done \
 && echo 'fn main() {}' > crates/kube-emulator/src/main.rs \
 && mkdir -p crates/openstack-operator/src \
 && echo 'fn main() {}' > crates/openstack-operator/src/main.rs \
 && cargo build --release --locked -p openstack-operator \
 && rm -rf crates/*/src

# 2. The sources. COPY keeps the files' old modification times; touch them so cargo rebuilds
#    the workspace crates over the stubs.
COPY crates crates
RUN find crates -path '*/src/*' -name '*.rs' -exec touch {} + \
 && cargo build --release --locked -p openstack-operator \
 && cp target/release/openstack-operator /openstack-operator \
 && /openstack-operator --version

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="openstack-operator" \
      org.opencontainers.image.description="Manage OpenStack resources from Kubernetes custom resources (sunet.se/v1alpha1)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /openstack-operator /openstack-operator
# distroless "nonroot": uid/gid 65532, as the chart's and the kustomize base's securityContext.
USER 65532:65532
# 8080: /healthz and /readyz; 9090: /metrics.
EXPOSE 8080 9090
ENTRYPOINT ["/openstack-operator"]
CMD ["run"]
