# syntax=docker/dockerfile:1
# fleetbus: one image with the agent (fleetbus-agent and its ClusterProfile exec plugin fleetbus-credentials), the CLI (fleetbus) and
# the local API server (fleetbus-devcluster, for the compose demo and tests).
#   docker build -t fleetbus:dev .
# The runtime user id (65532) is the helm chart's runAsUser
# (deploy/helm/fleetbus-agent/values.yaml); keep them equal.
# Both bases are build arguments: scripts/image passes stand-ins it makes from
# Debian packages where no registry can be reached.

ARG BUILD_IMAGE=rust:1.90-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# The runtime, binaries aside. It is the first stage so that
# `--target runtime` builds it alone (Docker's classic builder builds every
# stage up to the target): scripts/image --binaries puts already built
# binaries on it without compiling anything here.
FROM ${RUNTIME_IMAGE} AS runtime
LABEL org.opencontainers.image.title="fleetbus" \
      org.opencontainers.image.description="fleetbus agent, CLI and devcluster" \
      org.opencontainers.image.licenses="Apache-2.0"
# distroless's "nonroot" user; the chart's podSecurityContext.runAsUser.
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/fleetbus-agent"]

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
# Dependency layer: only the manifests and stub sources, so editing fleetbus's
# own code does not rebuild the dependencies.
COPY Cargo.toml Cargo.lock ./
# jemalloc's settings for the agent (read when jemalloc is built).
COPY .cargo .cargo
COPY schemas/Cargo.toml schemas/Cargo.toml
COPY agent/Cargo.toml agent/Cargo.toml
COPY launch/Cargo.toml launch/Cargo.toml
COPY hub/Cargo.toml hub/Cargo.toml
COPY chaos/Cargo.toml chaos/Cargo.toml
COPY tests/devcluster/Cargo.toml tests/devcluster/Cargo.toml
COPY tests/support/Cargo.toml tests/support/Cargo.toml
COPY tests/e2e/Cargo.toml tests/e2e/Cargo.toml
COPY tests/bench/Cargo.toml tests/bench/Cargo.toml
RUN for crate in schemas agent launch hub chaos tests/devcluster tests/support tests/e2e tests/bench; do \
        mkdir -p "$crate/src" && touch "$crate/src/lib.rs" && echo 'fn main() {}' > "$crate/src/main.rs"; \
    done \
    && cargo build --release --locked -p fleetbus-agent -p fleetbus-hub -p fleetbus-devcluster \
    && rm -rf schemas agent launch hub chaos tests
# The real sources; touch them so cargo rebuilds the workspace crates over the stubs.
COPY . .
RUN find schemas agent launch hub chaos tests -name '*.rs' -exec touch {} + \
    && cargo build --release --locked -p fleetbus-agent -p fleetbus-hub -p fleetbus-devcluster \
    && mkdir -p /out \
    && cp target/release/fleetbus-agent target/release/fleetbus-credentials target/release/fleetbus target/release/fleetbus-devcluster /out/

FROM runtime
COPY --from=build /out/ /usr/local/bin/
