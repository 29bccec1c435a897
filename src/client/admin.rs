//! [`LeaseAdminClient`]: the operators' calls of `lease.v1.LeaseAdminService`, List and Revoke.

use super::{ClientError, ConnectOptions, Connection, CurrentHolder, LeaseClient};
use crate::proto::{
    LeaseInfo, ListRequest, RevokeRequest, lease_admin_service_client::LeaseAdminServiceClient,
};

/// The largest List answer this client reads. A page holds at most 1,000 leases, but each lists
/// every holder of a counting lease (up to the server's `--max-limit` permits of up to 256-byte
/// holders), which tonic's default of 4 MiB would refuse.
const MAX_LIST_REPLY_BYTES: usize = 64 << 20;

/// The operators' side of `leased`: list the leases held, and revoke one whose holder is wedged.
/// Cheap to clone; clones share the HTTP/2 connection. The server grants `list` and `revoke`
/// separately, `revoke` only to bearer tokens that name it.
///
/// ```no_run
/// # use leased::client::{ClientError, LeaseAdminClient};
/// # async fn example() -> Result<(), ClientError> {
/// let admin = LeaseAdminClient::connect("http://127.0.0.1:50051").await?;
/// for lease in admin.list_all("jobs/", 0).await? {
///     println!("{} held by {} permit(s)", lease.name, lease.holders.len());
/// }
/// // End a wedged holder's grant (only if token 42 still holds it), with a reason for the audit
/// // log and for the holder, whose next renewal answers lost.
/// admin.revoke("jobs/nightly", "stuck for 2 h, INC-1234", Some(42)).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct LeaseAdminClient {
    grpc: LeaseAdminServiceClient<Connection>,
}

/// One page of [`LeaseAdminClient::list_page`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    /// The leases of this page, in no particular order. A page may hold fewer than asked for,
    /// even none, while more follow: the server bounds its work per page.
    pub leases: Vec<ListedLease>,
    /// Pass it to the next `list_page` call with the same prefix; `None` when the listing is
    /// complete.
    pub next_page_token: Option<String>,
}

/// One held lease, as List shows it: never a lease id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedLease {
    /// The lease's name.
    pub name: String,
    /// The limit in force: 1 for an exclusive or read-write lease, N for a counting lease.
    pub limit: u32,
    /// Every permit taken (held, or in its lock-delay after an expiry), by increasing fencing
    /// token. An exclusive lease has one.
    pub holders: Vec<CurrentHolder>,
    /// Callers waiting for the name, on every replica.
    pub waiters: u32,
}

impl ListedLease {
    fn from_wire(lease: LeaseInfo) -> Self {
        let mut holders: Vec<CurrentHolder> = lease
            .holders
            .into_iter()
            .map(CurrentHolder::from_wire)
            .collect();
        // Every listed lease has a holder; a server that filled only the fields of the one with
        // the smallest token still names it.
        if holders.is_empty() && lease.fencing_token != 0 {
            holders.push(CurrentHolder::new(
                lease.holder,
                lease.fencing_token,
                lease.remaining_ms,
            ));
        }
        ListedLease {
            name: lease.name,
            limit: lease.limit.max(1),
            holders,
            waiters: lease.waiters,
        }
    }
}

impl LeaseAdminClient {
    /// Connects to `endpoint`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self, ClientError> {
        Ok(LeaseClient::connect(endpoint).await?.admin())
    }

    /// Connects with TLS settings and a bearer token (`https://` endpoints use TLS), as
    /// [`LeaseClient::connect_with`] does. A `LeaseClient` already connected gives one on its
    /// connection: [`LeaseClient::admin`].
    pub async fn connect_with(
        endpoint: impl Into<String>,
        options: &ConnectOptions,
    ) -> Result<Self, ClientError> {
        Ok(LeaseClient::connect_with(endpoint, options).await?.admin())
    }

    pub(super) fn on(connection: Connection) -> Self {
        LeaseAdminClient {
            grpc: LeaseAdminServiceClient::new(connection)
                .max_decoding_message_size(MAX_LIST_REPLY_BYTES),
        }
    }

    /// One page of the leases held now whose names start with `prefix` (empty: every lease).
    /// `page_size` 0 means the server's default (100), at most 1,000; `page_token` is `None` for
    /// the first page, then the previous page's [`ListPage::next_page_token`].
    pub async fn list_page(
        &self,
        prefix: &str,
        page_size: u32,
        page_token: Option<&str>,
    ) -> Result<ListPage, ClientError> {
        let request = ListRequest {
            prefix: prefix.to_owned(),
            page_size,
            page_token: page_token.unwrap_or_default().to_owned(),
        };
        let reply = self.grpc.clone().list(request).await?.into_inner();
        Ok(ListPage {
            leases: reply
                .leases
                .into_iter()
                .map(ListedLease::from_wire)
                .collect(),
            next_page_token: Some(reply.next_page_token).filter(|token| !token.is_empty()),
        })
    }

    /// Every lease held now whose name starts with `prefix`, page after page of `page_size` (0:
    /// the server's default). A lease held for the whole listing is there exactly once; one
    /// granted or released meanwhile may or may not be.
    pub async fn list_all(
        &self,
        prefix: &str,
        page_size: u32,
    ) -> Result<Vec<ListedLease>, ClientError> {
        let mut leases = Vec::new();
        let mut page_token = None;
        loop {
            let page = self
                .list_page(prefix, page_size, page_token.as_deref())
                .await?;
            leases.extend(page.leases);
            match page.next_page_token {
                Some(next) => page_token = Some(next),
                None => return Ok(leases),
            }
        }
    }

    /// Ends the lease `name` at once, without lock-delay, whoever holds it: every permit of a
    /// counting lease, or with `fencing_token`, only the grant with that token, and only if it
    /// still holds the lease (so that the next holder is never revoked by mistake). `reason` (1
    /// to 256 bytes, no control or bidirectional formatting characters) goes to the server's
    /// audit log and to the revoked holder, whose next renewal answers lost with
    /// `revoked: <reason>`.
    ///
    /// Returns the token of the grant revoked (the largest, when several permits were), or
    /// `None` if nothing matched: the lease was free, or that grant no longer held it.
    pub async fn revoke(
        &self,
        name: &str,
        reason: &str,
        fencing_token: Option<u64>,
    ) -> Result<Option<u64>, ClientError> {
        let request = RevokeRequest {
            name: name.to_owned(),
            reason: reason.to_owned(),
            fencing_token: fencing_token.unwrap_or(0),
        };
        let reply = self.grpc.clone().revoke(request).await?.into_inner();
        Ok(reply.revoked.then_some(reply.fencing_token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::HolderInfo;

    #[test]
    fn a_listed_lease_has_every_holder() {
        let listed = ListedLease::from_wire(LeaseInfo {
            name: "pool".into(),
            holder: "a".into(),
            fencing_token: 7,
            remaining_ms: 900,
            limit: 2,
            waiters: 3,
            holders: vec![
                HolderInfo {
                    shared: false,
                    holder: "a".into(),
                    fencing_token: 7,
                    remaining_ms: 900,
                    expires_at: None,
                },
                HolderInfo {
                    shared: false,
                    holder: "b".into(),
                    fencing_token: 8,
                    remaining_ms: -1,
                    expires_at: None,
                },
            ],
            ..Default::default()
        });
        assert_eq!(
            (listed.name.as_str(), listed.limit, listed.waiters),
            ("pool", 2, 3)
        );
        let tokens: Vec<u64> = listed.holders.iter().map(|h| h.fencing_token).collect();
        assert_eq!(tokens, [7, 8]);
        assert_eq!(listed.holders[1].remaining, None);
    }

    /// Without `holders`, the fields of the holder with the smallest token still name it.
    #[test]
    fn a_listed_lease_without_holders_keeps_its_one_holder() {
        let listed = ListedLease::from_wire(LeaseInfo {
            name: "job".into(),
            holder: "a".into(),
            fencing_token: 7,
            remaining_ms: 900,
            ..Default::default()
        });
        assert_eq!(listed.limit, 1);
        assert_eq!(listed.holders, [CurrentHolder::new("a".into(), 7, 900)]);
    }
}
