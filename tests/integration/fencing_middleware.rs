//! The fencing middleware (`leased::fencing::FencingLayer`) end to end: `examples/fenced_kv`'s
//! store as a real process, its holders as real processes of the same example, and leased as the
//! real binary on a real redis-server, all over gRPC on loopback TCP.
//!
//! - Kleppmann's scenario: holder 1 gets its token and is stopped (SIGSTOP) before its write,
//!   past its 500 ms TTL; holder 2 is granted the lease with a larger token and writes; holder 1
//!   resumes and writes. Fenced, its write is refused (FAILED_PRECONDITION naming both tokens)
//!   and the store keeps holder 2's value; unfenced, it overwrites holder 2's value.
//! - Writers that pause at random for a few seconds: the store's writes carry strictly increasing
//!   tokens, though each Put also pauses in the middle of its write.
//! - Bad metadata is refused, naming the entry; the largest token passes, one more does not.

#[path = "../../examples/fenced_kv/kv.rs"]
mod kv;

use std::{
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::common::*;
use kv::proto::{
    GetRequest, GetResponse, PutRequest, reader_client::ReaderClient, writer_client::WriterClient,
};
use leased::fencing::FencingInterceptor;
use tonic::{Code, transport::Channel};

/// How long any one wait of these tests may take (process startup on a busy machine included).
const PATIENCE: Duration = Duration::from_secs(30);

/// A process of the example, killed on drop, and the lines it printed so far.
struct Example {
    process: harness::proc::PrintingChild,
}

impl Example {
    fn start(binary: &Path, args: &[&str]) -> Self {
        let mut command = Command::new(binary);
        command.args(args);
        Example {
            process: harness::proc::PrintingChild::spawn(command),
        }
    }

    /// The first line that starts with `prefix`, once printed.
    fn line_starting(&self, prefix: &str) -> String {
        let find = || {
            let lines = self.process.lines();
            lines.into_iter().find(|l| l.starts_with(prefix))
        };
        harness::wait_until(&format!("a line starting {prefix:?}"), PATIENCE, || {
            find().is_some()
        });
        find().expect("found")
    }

    fn signal(&self, signal: i32) {
        harness::proc::signal(self.process.id(), signal).expect("signal the example");
    }
}

/// The example's store, served by a process of its own.
struct Store {
    _process: Example,
    url: String,
}

impl Store {
    fn start(binary: &Path, extra: &[&str]) -> Self {
        let args = [&["serve", "--listen", "127.0.0.1:0"], extra].concat();
        let process = Example::start(binary, &args);
        let line = process.line_starting("serving on ");
        let address = line["serving on ".len()..]
            .split(' ')
            .next()
            .expect("an address");
        Store {
            url: format!("http://{address}"),
            _process: process,
        }
    }

    async fn get(&self, key: &str) -> GetResponse {
        let mut reader = ReaderClient::connect(self.url.clone()).await.unwrap();
        let request = GetRequest {
            key: key.to_owned(),
        };
        reader.get(request).await.unwrap().into_inner()
    }

    async fn writer(&self) -> WriterClient<Channel> {
        WriterClient::connect(self.url.clone()).await.unwrap()
    }
}

/// The token in `holding <lease> with fencing token <token>` or `put accepted: ... with fencing
/// token <token>`.
fn token_in(line: &str) -> u64 {
    let (_, token) = line.rsplit_once("with fencing token ").expect("a token");
    token.parse().expect("a decimal token")
}

/// Kleppmann's scenario against a store started with `store_args`; returns holder 1's result
/// line, both tokens and what the store holds.
async fn paused_holder_writes_late(store_args: &[&str]) -> (String, u64, u64, GetResponse) {
    let binary = build_example("fenced_kv");
    let redis = RedisServer::start();
    let leased = LeasedProcess::serve().redis(&redis.url()).start().await;
    let store = Store::start(&binary, store_args);
    let (lease, key) = ("orders", "orders/1");
    let put = |ttl: &str, think: &str, value: &str| {
        let args = [
            "put",
            "--leased",
            &leased.endpoint(),
            "--store",
            &store.url,
            "--lease",
            lease,
            "--ttl",
            ttl,
            "--wait",
            "20s",
            "--think",
            think,
            "--key",
            key,
            "--value",
            value,
        ]
        .map(str::to_owned);
        Example::start(
            &binary,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };

    // Holder 1 gets its token, then prepares its write for 1.5 s: stopped at once, it is
    // paused there until well past its 500 ms TTL.
    let holder_1 = put("500ms", "1500ms", "holder-1");
    let token_1 = token_in(&holder_1.line_starting("holding "));
    holder_1.signal(libc::SIGSTOP);

    // Holder 2 is granted the lease once holder 1's has expired, and writes.
    let holder_2 = put("10s", "0s", "holder-2");
    let written = holder_2.line_starting("put ");
    assert!(written.starts_with("put accepted"), "holder 2: {written}");
    let token_2 = token_in(&written);
    assert!(token_2 > token_1, "holder 2's token {token_2} <= {token_1}");

    // Holder 1 resumes and writes with its old token.
    holder_1.signal(libc::SIGCONT);
    let result = holder_1.line_starting("put ");
    (result, token_1, token_2, store.get(key).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_refused_by_the_fenced_store() {
    let (result, token_1, token_2, stored) = paused_holder_writes_late(&[]).await;
    println!("with fencing, holder 1 (token {token_1}) after holder 2 (token {token_2}): {result}");
    assert_eq!(
        result,
        format!(
            "put refused: FailedPrecondition: stale fencing token {token_1} for lease \
             \"orders\": the highest seen is {token_2}"
        )
    );
    assert_eq!(stored.value, "holder-2", "the store holds holder 2's data");
    let tokens: Vec<u64> = stored.writes.iter().map(|w| w.fencing_token).collect();
    assert_eq!(tokens, [token_2], "only holder 2's write landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fencing_the_paused_holder_overwrites_its_successor() {
    let (result, token_1, token_2, stored) = paused_holder_writes_late(&["--unfenced"]).await;
    println!(
        "without fencing, holder 1 (token {token_1}) after holder 2 (token {token_2}): {result}; \
         the store holds {:?}",
        stored.value
    );
    assert!(result.starts_with("put accepted"), "{result}");
    assert_eq!(
        stored.value, "holder-1",
        "holder 1 overwrote holder 2's value"
    );
    let tokens: Vec<u64> = stored.writes.iter().map(|w| w.fencing_token).collect();
    assert_eq!(tokens, [token_2, token_1], "the older token landed last");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_pausing_at_random_land_in_strictly_increasing_token_order() {
    const WRITERS: usize = 4;
    // The writers run for 3 s and until 3 writes were refused as stale (a stale writer whose
    // successor wrote first), at most 15 s and 40 writes each.
    const RUN_AT_LEAST: Duration = Duration::from_secs(3);
    const WANTED_REFUSALS: usize = 3;
    const RUN_AT_MOST: Duration = Duration::from_secs(15);
    const MAX_WRITES_PER_WRITER: usize = 40;
    let binary = build_example("fenced_kv");
    let redis = RedisServer::start();
    let leased = LeasedProcess::serve().redis(&redis.url()).start().await;
    // Each Put also pauses up to 30 ms between its request and its write: the layer's per-name
    // turns keep a newer token's write from landing before an older one in flight.
    let store = Store::start(&binary, &["--put-pause", "30ms"]);
    let lease_client = leased.client().await;
    let channel = Channel::from_shared(store.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (lease, key) = ("ledger", "ledger/balance");
    let started = Instant::now();
    let refused = Arc::new(AtomicUsize::new(0));
    let done = {
        let refused = refused.clone();
        move || {
            let elapsed = started.elapsed();
            elapsed > RUN_AT_MOST
                || (elapsed > RUN_AT_LEAST && refused.load(Ordering::SeqCst) >= WANTED_REFUSALS)
        }
    };

    let writers = (0..WRITERS).map(|writer| {
        let (mut lease_client, channel) = (lease_client.clone(), channel.clone());
        let (refused, done) = (refused.clone(), done.clone());
        tokio::spawn(async move {
            let mut accepted = Vec::new();
            for _ in 0..MAX_WRITES_PER_WRITER {
                if done() {
                    break;
                }
                // A plain Acquire, never renewed: the writer is as good as paused right after
                // its grant (a guard would keep renewing through a pause of this task).
                let granted = acquire(&mut lease_client, lease, 500, 10_000)
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("writer {writer} was not granted {lease} in 10 s"));
                // Half the writers write at once (within 50 ms), half after a pause of 600 to
                // 900 ms, past the 500 ms TTL: by then another writer was granted the lease, and
                // often wrote.
                let pause = match kv::random_up_to(Duration::from_millis(100)).as_millis() {
                    0..50 => kv::random_up_to(Duration::from_millis(50)),
                    _ => Duration::from_millis(600) + kv::random_up_to(Duration::from_millis(300)),
                };
                tokio::time::sleep(pause).await;
                let fencing = FencingInterceptor::new(lease, granted.fencing_token);
                let put = PutRequest {
                    key: key.to_owned(),
                    value: format!("writer {writer}"),
                };
                match WriterClient::with_interceptor(channel.clone(), fencing)
                    .put(put)
                    .await
                {
                    Ok(_) => accepted.push(granted.fencing_token),
                    Err(status) if status.code() == Code::FailedPrecondition => {
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(status) => panic!("writer {writer}: unexpected {status:?}"),
                }
                // Released if still held (a stale writer's lease is someone else's by now).
                release(&mut lease_client, &granted).await;
            }
            accepted
        })
    });
    let writers: Vec<_> = writers.collect(); // all spawned before any is awaited
    let mut accepted = Vec::new();
    for writer in writers {
        accepted.extend(writer.await.unwrap());
    }
    let refused = refused.load(Ordering::SeqCst);

    let landed: Vec<u64> = store
        .get(key)
        .await
        .writes
        .iter()
        .map(|w| w.fencing_token)
        .collect();
    let stale_landed = landed.windows(2).filter(|pair| pair[1] <= pair[0]).count();
    println!(
        "{WRITERS} writers for {:.1} s: {} writes accepted, {refused} refused as stale, \
         {stale_landed} stale writes landed",
        started.elapsed().as_secs_f64(),
        landed.len()
    );
    assert_eq!(
        stale_landed, 0,
        "tokens in the order they landed: {landed:?}"
    );
    accepted.sort_unstable();
    assert_eq!(
        accepted, landed,
        "the store holds exactly the accepted writes"
    );
    assert!(
        landed.len() >= 2,
        "too few writes to mean anything: {landed:?}"
    );
    assert!(
        refused > 0,
        "no writer paused past its lease into a successor's write: the test proved nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_metadata_is_refused_naming_the_entry_and_the_boundary_holds() {
    let store = Store::start(&build_example("fenced_kv"), &[]);
    let mut writer = store.writer().await;
    let mut put = async |metadata: &[(&'static str, &str)]| {
        let mut request = tonic::Request::new(PutRequest {
            key: "k".to_owned(),
            value: "v".to_owned(),
        });
        for (key, value) in metadata {
            request
                .metadata_mut()
                .insert(*key, value.parse().expect("an ASCII value"));
        }
        writer.put(request).await.map(|_| ())
    };
    let (name, token) = ("leased-lease-name", "leased-fencing-token");
    let refused: [(&[(&str, &str)], &str); 9] = [
        (
            &[],
            "this service is fenced: the call needs leased-lease-name and leased-fencing-token",
        ),
        (&[(token, "5")], "leased-lease-name is missing"),
        (&[(name, "jobs/a")], "leased-fencing-token is missing"),
        (
            &[(name, ""), (token, "5")],
            "leased-lease-name must not be empty",
        ),
        (
            &[(name, "jobs/a"), (token, "0")],
            "leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not \"0\"",
        ),
        (
            &[(name, "jobs/a"), (token, "-5")],
            "leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not \"-5\"",
        ),
        (
            &[(name, "jobs/a"), (token, "12a")],
            "leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not \"12a\"",
        ),
        (
            &[(name, "jobs/a"), (token, "05")],
            "leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not \"05\"",
        ),
        (
            &[(name, "jobs/a"), (token, "9223372036854775808")],
            "leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not \"9223372036854775808\"",
        ),
    ];
    for (metadata, message) in refused {
        let status = put(metadata).await.expect_err("refused");
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{metadata:?}: {status:?}"
        );
        assert!(
            status.message().starts_with(message),
            "{metadata:?}: {:?} does not start with {message:?}",
            status.message()
        );
    }
    assert!(store.get("k").await.writes.is_empty(), "no bad call wrote");

    // 2^63 - 1, the largest token, passes; then anything smaller for that name is stale.
    put(&[(name, "jobs/max"), (token, "9223372036854775807")])
        .await
        .expect("the largest token passes");
    let stale = put(&[(name, "jobs/max"), (token, "1800000000000000")])
        .await
        .expect_err("below the mark");
    assert_eq!(stale.code(), Code::FailedPrecondition);
    assert_eq!(
        stale.message(),
        "stale fencing token 1800000000000000 for lease \"jobs/max\": the highest seen is \
         9223372036854775807"
    );
    // Marks are per name: another name starts afresh.
    put(&[(name, "jobs/other"), (token, "1")])
        .await
        .expect("a new name's first token passes");
    assert_eq!(store.get("k").await.writes.len(), 2);
}
