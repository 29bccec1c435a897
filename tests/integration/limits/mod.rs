//! Bad input and the limits that protect the server, beyond the field table of `conformance.rs`:
//! - raw protobuf bytes no generated client would send (oversized, invalid UTF-8, unknown
//!   fields, wrong wire types, truncated), per RPC, against the real binary: the documented code
//!   each time and the process stays alive;
//! - property tests over `leased::lease::limits` and over the store boundary (both stores);
//! - HTTP/2 streams per connection, waiters per name, leases per Renew stream;
//! - HTTP/2-level input that never reaches a handler (metadata past the header list limit, rapid
//!   reset, HTTP/1.1 or a non-gRPC body on the gRPC port, unknown methods), in process;
//! - load: 5,000 Renew streams and 500 blocked waiters on one process, memory and descriptors
//!   bounded, and SIGTERM under that load drains and exits 0.
//!
//! What a client sees for each (a gRPC server decides some of these codes, not leased):
//!
//! | input | answer |
//! |---|---|
//! | a request message larger than `--max-message-bytes` (16 KiB) | `OUT_OF_RANGE` (tonic's decoder) |
//! | a request of exactly the limit | accepted |
//! | a `string` field with invalid UTF-8, a wrong wire type, a truncated message | `INTERNAL` (tonic maps protobuf decode errors to INTERNAL, as gRPC's status-code guide says) |
//! | unknown fields | ignored (proto3): the request is served |
//! | metadata from 16 KiB to 64 KiB (HTTP/2 header list: name + value + 32 B per entry) | HTTP 431 on that stream: tonic says `UNKNOWN` ("... mapped from HTTP status code 431"); the connection stays |
//! | metadata past 64 KiB | GOAWAY ENHANCE_YOUR_CALM: tonic says `RESOURCE_EXHAUSTED`, or `UNKNOWN` "transport error" when the server closes while it still sends (~1 MiB) |
//! | streams opened and reset at once (rapid reset) | GOAWAY ENHANCE_YOUR_CALM ("too_many_resets") on that connection |
//! | HTTP/1.1 on the gRPC port | no HTTP/1.1 answer: an HTTP/2 SETTINGS frame (or nothing), then the connection closes |
//! | an HTTP/2 body that is not gRPC framing (any content-type) | HTTP 200, `INTERNAL` (decode error) |
//! | an unknown method or service, `GET /` | `UNIMPLEMENTED` |
//! | more than `--max-concurrent-streams` streams on one connection | the extra call waits in the client (HTTP/2 flow control) until a stream ends; no error |
//! | more than `--max-waiters-per-name` waiters on one name | `RESOURCE_EXHAUSTED` |
//! | more than `--max-leases-per-stream` leases held at once on one Renew stream | `RESOURCE_EXHAUSTED`, the stream ends |
//!
//! One module per topic: `raw_protobuf`, `properties`, `http2`, `server_limits`, `load`.

mod http2;
mod load;
mod properties;
mod raw_protobuf;
mod server_limits;
