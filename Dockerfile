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

# The whole workspace in one step. (A stub-manifest stage that pre-built the dependencies listed
# the crates by hand and broke as soon as the workspace grew past them; the workspace's path
# dependencies need every member present, so a cache stage would have to track all of them.
# rust-toolchain.toml and .cargo/ are not copied: the image's stable toolchain is used and the
# target directory stays inside the build.)
COPY Cargo.toml Cargo.lock ./
COPY crates crates
RUN cargo build --release --locked -p openstack-operator \
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
