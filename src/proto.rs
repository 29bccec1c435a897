//! The generated `lease.v1` protobuf types and client (and, with the `server` feature, server), and the encoded descriptor set that
//! server reflection serves.

#![allow(missing_docs)]

pub mod lease {
    pub mod v1 {
        tonic::include_proto!("lease.v1");
    }
}

pub use lease::v1::*;

/// `proto/lease/v1/lease.proto` as an encoded `FileDescriptorSet`, for gRPC server reflection.
#[cfg(feature = "server")]
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("lease_descriptor");

/// A protobuf timestamp from Unix milliseconds.
#[cfg(feature = "server")]
pub fn timestamp_from_unix_ms(unix_ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: unix_ms.div_euclid(1000),
        nanos: (unix_ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}
