# syntax=docker/dockerfile:1
#
# booking-expire's image: built on Debian 12 (bookworm), run on distroless cc-debian12,
# the same Debian's glibc and OpenSSL 3 with nothing else: no shell, no package manager.
#
#   docker build --build-arg BOOKING_EXPIRE_COMMIT="$(git rev-parse HEAD)" \
#       -t registry.example.com/pin/booking-expire:0.1.0 .
#
# Or the runtime stage alone, fed a binary built on a Debian 12 host (the Rust image is
# then neither pulled nor run): a directory holding the tree the build stage makes in
# /out, given as the build context (scripts/image/prebuilt-context.sh makes it):
#
#   context=$(mktemp -d)
#   scripts/image/prebuilt-context.sh target/release/booking-expire "$context"
#   docker build --build-arg BINARY=prebuilt -f Dockerfile -t … "$context"
#
# scripts/check-deploy.sh checks this file's key properties, and that the binary's
# shared libraries are exactly what the runtime stage provides (it unpacks the Debian 12
# packages distroless cc-debian12 is made of and runs the binary on them);
# scripts/image-test.sh builds this file the second way and runs the image.

# The toolchain the project is tested with; bookworm = the runtime's Debian.
ARG RUST_VERSION=1.95
# Where the runtime stage takes /out from: build (compiled here) or prebuilt (the
# context's prebuilt/ directory). Only the stage named here is built (BuildKit, podman).
ARG BINARY=build

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
# The commit `--version` names (build.rs reads it; .dockerignore leaves .git out):
#   docker build --build-arg BOOKING_EXPIRE_COMMIT="$(git rev-parse HEAD)" …
# Unset, the version line says `commit unknown`.
ARG BOOKING_EXPIRE_COMMIT=
# What `cargo build` needs besides Rust (as scripts/lib.sh ensure_build_deps):
# OpenSSL and zlib headers, a C/C++ toolchain and make for librdkafka and libpg_query,
# libclang for pg_query's bindgen (build time only: nothing of it is in the binary's
# runtime libraries), pkg-config.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        pkg-config libssl-dev zlib1g-dev make gcc g++ libclang-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The whole workspace, its member crates (crates/) with it (.dockerignore leaves out
# target/, .git and what only deploys, but keeps the man pages), so every target and
# member Cargo.toml declares is there for the manifest to parse.
COPY . .
# --locked: exactly the dependency versions the tests ran with.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
 && install -D -m 0755 target/release/booking-expire /out/usr/local/bin/booking-expire \
 && install -D -m 0644 -t /out/usr/share/man/man1 docs/reference/man/*.1
# The binary links libz.so.1 (librdkafka), which distroless cc-debian12 does not ship
# (its base has libc6 and libssl3 only; zlib1g joined the base in debian13): bring
# Debian 12's own from this stage, at the path the dynamic loader searches.
RUN multiarch="$(gcc -print-multiarch)" \
 && install -D -m 0644 "$(readlink -f "/usr/lib/${multiarch}/libz.so.1")" \
        "/out/usr/lib/${multiarch}/libz.so.1"

# The same tree, made outside: the binary at usr/local/bin/booking-expire, its man pages
# (generated into docs/reference/man/ from the command line) at usr/share/man/man1/ and
# Debian 12's libz.so.1 at usr/lib/<multiarch>/.
FROM scratch AS prebuilt
COPY prebuilt/ /out/

FROM ${BINARY} AS binary

# Numeric user 65532 (nonroot), so Kubernetes' runAsNonRoot can verify it.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=binary /out/ /
USER 65532:65532
# Fails the build if a shared library is missing (exec form: there is no shell here).
RUN ["/usr/local/bin/booking-expire", "--version"]
# Exec form: the binary is PID 1 and gets SIGTERM itself (it finishes or rolls back the
# batch in flight and exits 143). The CronJob passes the subcommand as args.
ENTRYPOINT ["/usr/local/bin/booking-expire"]
CMD ["--help"]
