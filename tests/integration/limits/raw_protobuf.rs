//! Raw protobuf bytes no generated client would send (oversized, invalid UTF-8, unknown fields,
//! wrong wire types, truncated), per RPC, against the real binary: the documented code each time
//! and the process stays alive. Also the raw gRPC codec and message builders `http2` uses.

use crate::common::*;
use leased::proto::{
    AcquireResponse, DescribeResponse, ReleaseResponse, RenewResponse, acquire_response,
    lease_service_client::LeaseServiceClient, renew_response,
};
use prost::{
    Message,
    bytes::{Buf, BufMut},
    encoding::{WireType, encode_key, encode_varint},
};
use tonic::{
    Code, Status,
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    codegen::http::uri::PathAndQuery,
    transport::Channel,
};

#[derive(Clone, Copy, Default)]
pub(crate) struct RawCodec;

#[derive(Clone, Copy, Default)]
pub(crate) struct RawEncoder;

#[derive(Clone, Copy, Default)]
pub(crate) struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// A gRPC client that sends hand-encoded messages.
struct RawClient(tonic::client::Grpc<Channel>);

impl RawClient {
    async fn connect(endpoint: String) -> Self {
        let channel = Channel::from_shared(endpoint)
            .unwrap()
            .connect()
            .await
            .unwrap();
        RawClient(tonic::client::Grpc::new(channel))
    }

    fn path(method: &str) -> PathAndQuery {
        PathAndQuery::try_from(format!("/lease.v1.LeaseService/{method}")).unwrap()
    }

    async fn unary(&mut self, method: &str, message: Vec<u8>) -> Result<Vec<u8>, Status> {
        self.0.ready().await.unwrap();
        let response = self
            .0
            .unary(tonic::Request::new(message), Self::path(method), RawCodec)
            .await?;
        Ok(response.into_inner())
    }

    /// Every message of a server stream, or the first error.
    async fn server_stream(
        &mut self,
        method: &str,
        message: Vec<u8>,
    ) -> Result<Vec<Vec<u8>>, Status> {
        self.0.ready().await.unwrap();
        let mut responses = self
            .0
            .server_streaming(tonic::Request::new(message), Self::path(method), RawCodec)
            .await?
            .into_inner();
        let mut messages = Vec::new();
        while let Some(message) = responses.message().await? {
            messages.push(message);
        }
        Ok(messages)
    }

    /// Sends `messages` on a bidi stream and half-closes; returns every answer and how the stream
    /// ended (`None`: status OK).
    async fn bidi(
        &mut self,
        method: &str,
        messages: Vec<Vec<u8>>,
    ) -> (Vec<Vec<u8>>, Option<Status>) {
        self.0.ready().await.unwrap();
        let requests = tokio_stream::iter(messages);
        let mut responses = match self
            .0
            .streaming(tonic::Request::new(requests), Self::path(method), RawCodec)
            .await
        {
            Ok(response) => response.into_inner(),
            Err(status) => return (Vec::new(), Some(status)),
        };
        let mut answers = Vec::new();
        loop {
            match responses.message().await {
                Ok(Some(answer)) => answers.push(answer),
                Ok(None) => return (answers, None),
                Err(status) => return (answers, Some(status)),
            }
        }
    }
}

/// Hand-encoded protobuf fields.
pub(crate) fn bytes_field(number: u32, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(number, WireType::LengthDelimited, &mut out);
    encode_varint(value.len() as u64, &mut out);
    out.extend_from_slice(value);
    out
}

fn varint_field(number: u32, value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(number, WireType::Varint, &mut out);
    encode_varint(value, &mut out);
    out
}

fn fixed64_field(number: u32, value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(number, WireType::SixtyFourBit, &mut out);
    out.extend_from_slice(&value.to_le_bytes());
    out
}

/// Unknown fields a newer client might send: a varint, a length-delimited and a fixed64 one.
fn unknown_fields() -> Vec<u8> {
    [
        varint_field(15, 42),
        bytes_field(99, b"from a newer client"),
        fixed64_field(2000, 7),
    ]
    .concat()
}

/// `message` padded with an unknown length-delimited field to exactly `total` bytes.
fn padded_to(message: Vec<u8>, total: usize) -> Vec<u8> {
    let key_len = 2; // field 1000: (1000 << 3 | 2) takes two varint bytes
    let len_len = 2; // payloads from 128 to 16383 bytes take two varint bytes
    let payload = total - message.len() - key_len - len_len;
    let padded = [message, bytes_field(1000, &vec![b'x'; payload])].concat();
    assert_eq!(padded.len(), total, "padding arithmetic");
    padded
}

const INVALID_UTF8: &[u8] = b"bad-\xff\xfe-utf8";
const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// What a row of the table expects.
#[derive(Debug)]
enum Expect {
    /// Served normally.
    Served,
    /// Refused with this code.
    Refused(Code),
}

fn acquire_bytes(name: &[u8], holder: &[u8]) -> Vec<u8> {
    [
        bytes_field(1, name),
        bytes_field(2, holder),
        varint_field(3, 5_000),
        varint_field(4, 0),
    ]
    .concat()
}

fn renew_bytes(name: &[u8], lease_id: &[u8]) -> Vec<u8> {
    [
        bytes_field(1, name),
        bytes_field(2, lease_id),
        varint_field(3, 0),
    ]
    .concat()
}

fn two_string_fields(first: &[u8], second: &[u8]) -> Vec<u8> {
    [bytes_field(1, first), bytes_field(2, second)].concat()
}

/// Every row of the raw-input table, per RPC, against the real binary on Redis: the answer is
/// the documented one, and the process keeps serving after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_messages_get_the_documented_code_and_the_server_lives() {
    let redis = RedisServer::start();
    let log = log_dir("limits-raw").join("leased.log");
    let mut server = LeasedProcess::serve()
        .redis(&redis.url())
        .log(Log::File(log))
        .start()
        .await;
    let mut raw = RawClient::connect(server.endpoint()).await;
    let mut client = server.client().await;
    let oversized = vec![b'n'; MAX_MESSAGE_BYTES + 1];
    let mut rows = 0;

    // Acquire (server stream).
    let acquire_rows: Vec<(&str, Vec<u8>, Expect)> = vec![
        (
            "invalid UTF-8 in name",
            acquire_bytes(INVALID_UTF8, b"h"),
            Expect::Refused(Code::Internal),
        ),
        (
            "invalid UTF-8 in holder",
            acquire_bytes(b"raw/a1", INVALID_UTF8),
            Expect::Refused(Code::Internal),
        ),
        (
            "name sent as a varint (wrong wire type)",
            [varint_field(1, 7), varint_field(3, 5_000)].concat(),
            Expect::Refused(Code::Internal),
        ),
        (
            "truncated message",
            acquire_bytes(b"raw/a2", b"h")[..5].to_vec(),
            Expect::Refused(Code::Internal),
        ),
        (
            "unknown fields",
            [acquire_bytes(b"raw/a3", b"h"), unknown_fields()].concat(),
            Expect::Served,
        ),
        (
            "exactly --max-message-bytes",
            padded_to(acquire_bytes(b"raw/a4", b"h"), MAX_MESSAGE_BYTES),
            Expect::Served,
        ),
        (
            "one byte over --max-message-bytes",
            padded_to(acquire_bytes(b"raw/a5", b"h"), MAX_MESSAGE_BYTES + 1),
            Expect::Refused(Code::OutOfRange),
        ),
        (
            "a 1 MiB name",
            acquire_bytes(&vec![b'n'; 1 << 20], b"h"),
            Expect::Refused(Code::OutOfRange),
        ),
    ];
    for (what, message, expect) in acquire_rows {
        let answer = raw.server_stream("Acquire", message).await;
        match (&expect, answer) {
            (Expect::Served, Ok(messages)) => {
                let last = AcquireResponse::decode(messages.last().unwrap().as_slice()).unwrap();
                assert!(
                    matches!(last.result, Some(acquire_response::Result::Granted(_))),
                    "Acquire, {what}: {last:?}"
                );
            }
            (Expect::Refused(code), Err(status)) => {
                assert_eq!(status.code(), *code, "Acquire, {what}: {status:?}")
            }
            (_, other) => panic!("Acquire, {what}: expected {expect:?}, got {other:?}"),
        }
        assert_alive(&mut client, &mut server, what).await;
        rows += 1;
    }

    // Renew (bidi stream): a good renewal first, then the row's message.
    let held = must_acquire(&mut client, "raw/renewed", 60_000).await;
    let good = renew_bytes(held.name.as_bytes(), held.lease_id.as_bytes());
    let renew_rows: Vec<(&str, Vec<u8>, Expect)> = vec![
        (
            "invalid UTF-8 in name",
            renew_bytes(INVALID_UTF8, held.lease_id.as_bytes()),
            Expect::Refused(Code::Internal),
        ),
        (
            "invalid UTF-8 in lease_id",
            renew_bytes(held.name.as_bytes(), INVALID_UTF8),
            Expect::Refused(Code::Internal),
        ),
        (
            "truncated message",
            good[..4].to_vec(),
            Expect::Refused(Code::Internal),
        ),
        (
            "unknown fields",
            [good.clone(), unknown_fields()].concat(),
            Expect::Served,
        ),
        (
            "exactly --max-message-bytes",
            padded_to(good.clone(), MAX_MESSAGE_BYTES),
            Expect::Served,
        ),
        (
            "one byte over --max-message-bytes",
            padded_to(good.clone(), MAX_MESSAGE_BYTES + 1),
            Expect::Refused(Code::OutOfRange),
        ),
        (
            "a 1 MiB lease_id",
            renew_bytes(held.name.as_bytes(), &vec![b'x'; 1 << 20]),
            Expect::Refused(Code::OutOfRange),
        ),
    ];
    for (what, message, expect) in renew_rows {
        let (answers, ended) = raw.bidi("Renew", vec![good.clone(), message]).await;
        let renewed = |bytes: &Vec<u8>| {
            matches!(
                RenewResponse::decode(bytes.as_slice()).unwrap().result,
                Some(renew_response::Result::Renewed(_))
            )
        };
        assert!(
            answers.first().is_some_and(renewed),
            "Renew, {what}: the good renewal before it was answered: {answers:?} {ended:?}"
        );
        match (&expect, ended) {
            (Expect::Served, None) => {
                assert_eq!(answers.len(), 2, "Renew, {what}: one answer per request");
                assert!(renewed(&answers[1]), "Renew, {what}");
            }
            (Expect::Refused(code), Some(status)) => {
                assert_eq!(answers.len(), 1, "Renew, {what}: {answers:?}");
                assert_eq!(status.code(), *code, "Renew, {what}: {status:?}");
            }
            (_, ended) => panic!(
                "Renew, {what}: expected {expect:?}, got {} answers and end {ended:?}",
                answers.len()
            ),
        }
        assert_alive(&mut client, &mut server, what).await;
        rows += 1;
    }

    // Release and Describe (unary).
    let to_release = must_acquire(&mut client, "raw/released", 60_000).await;
    let release_ok = two_string_fields(to_release.name.as_bytes(), to_release.lease_id.as_bytes());
    let describe_ok = bytes_field(1, b"raw/described");
    let unary_rows: Vec<(&str, &str, Vec<u8>, Expect)> = vec![
        (
            "Release",
            "invalid UTF-8 in name",
            two_string_fields(INVALID_UTF8, b"0123"),
            Expect::Refused(Code::Internal),
        ),
        (
            "Release",
            "invalid UTF-8 in lease_id",
            two_string_fields(b"raw/released", INVALID_UTF8),
            Expect::Refused(Code::Internal),
        ),
        (
            "Release",
            "truncated message",
            release_ok[..3].to_vec(),
            Expect::Refused(Code::Internal),
        ),
        (
            "Release",
            "one byte over --max-message-bytes",
            padded_to(release_ok.clone(), MAX_MESSAGE_BYTES + 1),
            Expect::Refused(Code::OutOfRange),
        ),
        (
            "Release",
            "exactly --max-message-bytes, with unknown fields",
            padded_to(
                [release_ok.clone(), unknown_fields()].concat(),
                MAX_MESSAGE_BYTES,
            ),
            Expect::Served,
        ),
        (
            "Describe",
            "invalid UTF-8 in name",
            bytes_field(1, INVALID_UTF8),
            Expect::Refused(Code::Internal),
        ),
        (
            "Describe",
            "name sent as a varint (wrong wire type)",
            varint_field(1, 1),
            Expect::Refused(Code::Internal),
        ),
        (
            "Describe",
            "unknown fields",
            [describe_ok.clone(), unknown_fields()].concat(),
            Expect::Served,
        ),
        (
            "Describe",
            "exactly --max-message-bytes",
            padded_to(describe_ok.clone(), MAX_MESSAGE_BYTES),
            Expect::Served,
        ),
        (
            "Describe",
            "a 64 KiB name",
            bytes_field(1, &oversized.repeat(4)),
            Expect::Refused(Code::OutOfRange),
        ),
    ];
    for (rpc, what, message, expect) in unary_rows {
        let answer = raw.unary(rpc, message).await;
        match (&expect, answer) {
            (Expect::Served, Ok(bytes)) => match rpc {
                "Release" => assert!(ReleaseResponse::decode(bytes.as_slice()).unwrap().released),
                _ => {
                    DescribeResponse::decode(bytes.as_slice()).unwrap();
                }
            },
            (Expect::Refused(code), Err(status)) => {
                assert_eq!(status.code(), *code, "{rpc}, {what}: {status:?}")
            }
            (_, other) => panic!("{rpc}, {what}: expected {expect:?}, got {other:?}"),
        }
        assert_alive(&mut client, &mut server, what).await;
        rows += 1;
    }
    println!("{rows} raw-input rows answered as documented; the server kept serving");
}

/// The process still runs and answers a well-formed call.
async fn assert_alive(
    client: &mut LeaseServiceClient<Channel>,
    server: &mut LeasedProcess,
    after: &str,
) {
    assert!(server.try_wait().is_none(), "leased exited after: {after}");
    describe(client, "raw/alive").await;
}
