//! The Rust client: [`LeaseClient`] acquires leases; a [`LeaseGuard`] keeps one alive over a
//! `Renew` stream and tells its holder when to stop trusting it.
//!
//! ```no_run
//! use std::time::Duration;
//! use leased::client::{AcquireOptions, Acquired, LeaseClient};
//!
//! # async fn example() -> Result<(), leased::client::ClientError> {
//! let client = LeaseClient::connect("http://127.0.0.1:50051").await?;
//! let options = AcquireOptions::new(Duration::from_secs(15)).wait(Duration::from_secs(60));
//! match client.acquire("nightly-report", options).await? {
//!     Acquired::Granted(guard) => {
//!         // Pass the token to the resource the lease protects; it rejects smaller ones.
//!         println!("{} is ours with fencing token {}", guard.name(), guard.fencing_token());
//!         tokio::select! {
//!             _ = do_the_work(guard.fencing_token()) => {}
//!             reason = guard.lost() => eprintln!("lease lost ({reason}); stopping"),
//!         }
//!         guard.release().await?;
//!     }
//!     Acquired::NotGranted(busy) => {
//!         println!("busy: held by {:?} with token {}", busy.holder, busy.fencing_token);
//!     }
//! }
//! # Ok(())
//! # }
//! # async fn do_the_work(_token: u64) {}
//! ```
//!
//! Each acquisition sends its own lease id (32 random hex digits), so an Acquire cut off by a
//! connection reset or a replica that stopped is retried with it and answered the same grant. To
//! give up a wait, drop the future (`tokio::time::timeout`, `select!`, an aborted task): in the
//! background the call is cancelled and its lease id released, which ends a grant that was
//! already on its way (or refuses one still coming), so a caller that left never keeps the
//! lease.
//!
//! A counting lease (a semaphore) lets up to N holders hold a name at once, each with its own
//! guard and fencing token: `AcquireOptions::new(ttl).limit(5)`, the same N for every holder of
//! the name. A read-write lease lets shared (read) holders in together and an exclusive one
//! alone: `AcquireOptions::new(ttl).shared(true)`, or [`ReadWriteLease`]. A [`ReentrantLease`]
//! is a handle that one task may lock again while it holds it. [`LeaseClient::describe_lease`]
//! lists every holder, with its mode, and the waiters.
//!
//! `examples/guard.rs` is a runnable program built the same way (acquire with a wait, work until
//! done or lost, release); `tests/integration/client.rs` runs it against a real server.
//!
//! [`LeaseClient::watch`] follows who holds a lease (a [`Stream`](tokio_stream::Stream) of
//! [`WatchEvent`]s: what leader election's followers use, see `examples/leader_election.rs`),
//! [`LeaseClient::check_token`] asks whether a fencing token still holds its lease, and
//! [`LeaseAdminClient`] lists the leases held and revokes one, for operators.

#![warn(missing_docs)]

mod acquire;
mod admin;
mod connect;
mod error;
mod guard;
mod locks;
mod options;
mod outcomes;
mod watch;

pub use admin::{LeaseAdminClient, ListPage, ListedLease};
pub use connect::{BearerToken, ConnectOptions};
pub use error::ClientError;
pub use guard::{LeaseGuard, LostReason};
pub use locks::{ReadWriteLease, ReentrantGuard, ReentrantLease};
pub use options::{AcquireOptions, default_holder};
pub use outcomes::{
    Acquired, CurrentHolder, GrantedLease, LeaseDescription, NotGranted, TokenCheck,
};
pub use watch::{WatchCause, WatchEvent, WatchStream, WatchedGrant};

use crate::proto::{
    CheckTokenRequest, DescribeRequest, ReleaseRequest, WatchRequest,
    lease_service_client::LeaseServiceClient,
};
use connect::{Connection, GrpcClient, connect};
use outcomes::{remaining_from_ms, unix_ms};

/// A connection to a `leased` server. Cheap to clone; clones share the HTTP/2 connection.
#[derive(Clone, Debug)]
pub struct LeaseClient {
    grpc: GrpcClient,
    /// Kept to open [`LeaseAdminClient`]s on the same connection.
    connection: Connection,
}

impl LeaseClient {
    /// Connects to `endpoint`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self, ClientError> {
        Self::connect_with(endpoint, &ConnectOptions::default()).await
    }

    /// Connects with TLS settings and a bearer token (`https://` endpoints use TLS).
    ///
    /// ```no_run
    /// # use leased::client::{ClientError, ConnectOptions, LeaseClient};
    /// # async fn example() -> Result<(), ClientError> {
    /// let options = ConnectOptions {
    ///     token: std::env::var("LEASED_TOKEN").ok(),
    ///     ..ConnectOptions::default()
    /// };
    /// let client = LeaseClient::connect_with("http://leased.internal:50051", &options).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with(
        endpoint: impl Into<String>,
        options: &ConnectOptions,
    ) -> Result<Self, ClientError> {
        let connection = connect(endpoint.into(), options).await?;
        Ok(LeaseClient {
            grpc: LeaseServiceClient::new(connection.clone()),
            connection,
        })
    }

    /// The operators' calls (List, Revoke) over this client's connection, with its TLS settings
    /// and bearer token.
    pub fn admin(&self) -> LeaseAdminClient {
        LeaseAdminClient::on(self.connection.clone())
    }

    /// Releases a lease by its id; false if it was no longer held by that id.
    pub async fn release(&self, name: &str, lease_id: &str) -> Result<bool, ClientError> {
        let request = ReleaseRequest {
            name: name.to_owned(),
            lease_id: lease_id.to_owned(),
        };
        Ok(self
            .grpc
            .clone()
            .release(request)
            .await?
            .into_inner()
            .released)
    }

    /// Who holds `name`, if anyone: the holder of an exclusive lease; for a counting lease, the
    /// holder with the smallest fencing token (see [`describe_lease`](Self::describe_lease) for
    /// every holder).
    pub async fn describe(&self, name: &str) -> Result<Option<CurrentHolder>, ClientError> {
        Ok(self.describe_lease(name).await?.holders.into_iter().next())
    }

    /// Every holder of `name` (every permit taken, for a counting lease), the limit in force and
    /// how many callers wait. One `Describe` call: a consistent snapshot.
    pub async fn describe_lease(&self, name: &str) -> Result<LeaseDescription, ClientError> {
        let request = DescribeRequest {
            name: name.to_owned(),
        };
        let reply = self.grpc.clone().describe(request).await?.into_inner();
        Ok(LeaseDescription::from_reply(reply))
    }

    /// Follows who holds `name`: a stream of [`WatchEvent`]s that starts with a
    /// [`Snapshot`](WatchCause::Snapshot) of the current state, then one event per change of
    /// holder (granted, released, expired, revoked; renewals are not events), in order, with the
    /// tokens of grants increasing. The server sends a fresh snapshot whenever it may have missed
    /// events (a Redis reconnect or failover, a watcher too slow to read): take a snapshot as the
    /// whole truth.
    ///
    /// The stream does not end on its own. It yields one `Err` and ends when the server refuses
    /// the watch (bad name, no `watch` permission: the error may come from this call or as the
    /// first item), shuts down (`UNAVAILABLE`) or the connection breaks; watching again is safe,
    /// since the first event of every watch is a snapshot.
    ///
    /// A follower of leader election, which learns who leads without polling:
    ///
    /// ```no_run
    /// use leased::client::{ClientError, LeaseClient};
    /// use tokio_stream::StreamExt;
    ///
    /// # async fn example(client: LeaseClient) -> Result<(), ClientError> {
    /// let mut events = client.watch("leader").await?;
    /// while let Some(event) = events.next().await {
    ///     let event = event?; // the stream's last item is the error that ended it
    ///     match event.current_holder() {
    ///         Some(leader) => println!("{} leads ({})", leader.holder, event.cause),
    ///         None => println!("no leader ({})", event.cause),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(&self, name: &str) -> Result<WatchStream, ClientError> {
        let request = WatchRequest {
            name: name.to_owned(),
        };
        let events = self.grpc.clone().watch(request).await?.into_inner();
        Ok(WatchStream::new(events))
    }

    /// Whether `fencing_token` is the token of a grant that holds `name` now (Chubby's
    /// CheckSequencer), for a resource that cannot store tokens itself. The answer can be stale by
    /// the time it arrives; a resource that keeps the highest token it has seen and rejects
    /// smaller ones is the stronger check. Token 0 is `INVALID_ARGUMENT`.
    ///
    /// ```no_run
    /// # use leased::client::{ClientError, LeaseClient};
    /// # async fn example(client: LeaseClient, token: u64) -> Result<(), ClientError> {
    /// if !client.check_token("nightly-report", token).await?.current {
    ///     return Ok(()); // that grant ended: refuse the write
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check_token(
        &self,
        name: &str,
        fencing_token: u64,
    ) -> Result<TokenCheck, ClientError> {
        let request = CheckTokenRequest {
            name: name.to_owned(),
            fencing_token,
        };
        let reply = self.grpc.clone().check_token(request).await?.into_inner();
        Ok(TokenCheck {
            current: reply.current,
            current_token: reply.current_token,
            held: reply.held,
        })
    }

    pub(crate) fn grpc(&self) -> GrpcClient {
        self.grpc.clone()
    }
}
