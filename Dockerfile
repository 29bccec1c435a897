# syntax=docker/dockerfile:1
# leased: build the release binary, ship it alone on a distroless base (glibc + libgcc, no shell).
#   docker build -t leased:0.1.0 .
#   docker run --rm -p 50051:50051 -e LEASED_INSECURE_LISTEN=true leased:0.1.0
# Listening on 0.0.0.0 without --auth-tokens is refused unless LEASED_INSECURE_LISTEN=true (as
# above, for a local try) or LEASED_AUTH_TOKENS points at a mounted tokens file.

FROM rust:1-bookworm AS builder
WORKDIR /src
# No protoc needed: build.rs compiles the .proto files with protox (pure Rust).
COPY . .
RUN cargo build --release --locked

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /src/target/release/leased /usr/local/bin/leased
USER 65532:65532
EXPOSE 50051
ENTRYPOINT ["/usr/local/bin/leased"]
CMD ["serve", "--listen", "0.0.0.0:50051"]
