//! Compiles `proto/lease/v1/lease.proto` with protox (a pure-Rust protobuf compiler, so no system
//! `protoc` is needed) and writes the encoded descriptor set that server reflection serves. The
//! server stubs are generated only with the `server` feature: a client-only build has no tonic
//! server to compile them against. Also compiles the fenced_kv example's proto (server builds).

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/lease/v1/lease.proto";
    println!("cargo:rerun-if-changed={proto}");

    let descriptors = protox::compile([proto], ["proto"])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("lease_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;

    let server = env::var_os("CARGO_FEATURE_SERVER").is_some();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(server)
        .compile_fds(descriptors)?;

    // The fenced_kv example's service (a tonic server, so the server's build only), which its
    // tests and the fencing_cost bench share. Not part of the library: only they include it.
    let example = "examples/fenced_kv/fenced_kv.proto";
    println!("cargo:rerun-if-changed={example}");
    if server {
        tonic_prost_build::configure().compile_fds(protox::compile([example], ["examples"])?)?;
    }
    Ok(())
}
