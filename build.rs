//! Compiles `proto/lease/v1/lease.proto` with protox (a pure-Rust protobuf compiler, so no system
//! `protoc` is needed) and writes the encoded descriptor set that server reflection serves. The
//! server stubs are generated only with the `server` feature: a client-only build has no tonic
//! server to compile them against.

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

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(env::var_os("CARGO_FEATURE_SERVER").is_some())
        .compile_fds(descriptors)?;
    Ok(())
}
