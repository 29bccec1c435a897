//! `List` on Redis: `SCAN` every master a bounded number of times per page, pick the lease names
//! out of the keys, and the page tokens that resume a listing.

use std::collections::BTreeMap;

use fred::prelude::{
    ClientLike, ClusterInterface, Error as RedisError, KeysInterface, Server, Value,
};
use futures::{StreamExt, stream};

use super::{RedisStore, replies::is_transient};
use crate::{
    error::{Error, Result},
    lease::{
        DescribedLease, Description, LeaseName, LeasePage, LeaseStore, ListPrefix,
        limits::parse_name,
    },
    metrics::metrics,
    store::{from_hex, invalid_page_token, to_hex},
    throttle::{LOG_INTERVAL, Throttle},
};

/// A page of `List` makes at most this many `SCAN` calls (one more if the last batch is scanned
/// again, see [`MAX_PENDING_NAMES`]), so its cost is bounded whatever the size of the keyspace; a
/// page that runs out of them ends short, with a next page token.
const MAX_SCANS_PER_PAGE: usize = 10;

/// The `COUNT` of each `SCAN` (about how many keys it visits): the room left on the page, within
/// these bounds. So a batch seldom finds more leases than fit; those that do not fit travel in the
/// page token (a few names at most).
const MIN_SCAN_COUNT: usize = 10;
const MAX_SCAN_COUNT: usize = 1_000;

/// A page token carries at most this many names found but not listed yet, whatever the page size
/// (`List` with a token that says it has more is `INVALID_ARGUMENT` `page_token`), so that a
/// hand-made token cannot make one call describe more than a few dozen names on top of the
/// page's own batches.
///
/// What the server carries: a batch's names that the page had no room for. A batch asks for
/// `COUNT` = the room left on the page (at least [`MIN_SCAN_COUNT`]), so what it finds past the
/// room is under `MIN_SCAN_COUNT` names, plus what `SCAN` returns past its `COUNT`: it stops after
/// the step that reaches `COUNT`, one bucket of Redis's table (and, during a rehash, the buckets
/// of the new table it maps to), a few keys. A batch that finds more than the room plus this is
/// scanned again one step at a time ([`RedisStore::list_page`]), so a token the server makes
/// never carries more; the names a token carries only ever shrink on the next page.
const MAX_PENDING_NAMES: usize = 32;

/// Names a page of `List` describes at once.
const LIST_DESCRIBES_IN_FLIGHT: usize = 32;

/// The version of this store's page tokens: `r1.<hex prefix>.<slot>.<cursor>.<hex pending>`.
const PAGE_TOKEN_VERSION: &str = "r1";
/// A key under the key prefix that looks like a lease's but is not (something else wrote it) is
/// skipped by every listing that finds it.
static LIST_SKIPPED: Throttle = Throttle::new(LOG_INTERVAL);
/// `List`: `SCAN` every master in turn, a bounded number of times per page, and describe the
/// lease names found. Each `SCAN` batch is taken once: its names that do not fit on the page are
/// carried in the page token and come first on the next page, so a page never scans a batch
/// again (but for a batch with more names than the page and a token can hold, which is dropped
/// before anything of it is taken and scanned again one step at a time). A page token holds the
/// master (a slot it serves), the cursor of its next batch, and those names (at most
/// [`MAX_PENDING_NAMES`]).
///
/// `SCAN` returns every key present for the whole scan, and the same key twice only if Redis
/// shrinks its table meanwhile (after most keys were deleted): so every lease held for the whole
/// listing is on exactly one page, but for such a shrink, which may repeat one.
impl RedisStore {
    pub(super) async fn list_page(
        &self,
        prefix: &ListPrefix,
        page_size: usize,
        resume: Option<PageToken>,
    ) -> Result<LeasePage> {
        let masters = self.masters()?;
        let pattern = scan_pattern(&self.key_prefix, prefix);
        let (mut next, mut pending) = match resume {
            None => (Some((0, 0)), Vec::new()),
            Some(token) => {
                let next = match token.next {
                    None => None,
                    Some((slot, cursor)) => {
                        let index = masters
                            .iter()
                            .position(|master| master.serves(slot))
                            .ok_or_else(|| {
                                Error::Unavailable(format!(
                                    "list: no Redis master serves slot {slot}"
                                ))
                            })?;
                        Some((index, cursor))
                    }
                };
                (next, token.pending)
            }
        };
        let mut leases = Vec::new();
        let mut scans = 0;
        loop {
            // Goes through all of `pending` unless the page fills first; then what is left is
            // fewer names than the token brought, or the batch's names past the room, which
            // `carriable` checked: never more than MAX_PENDING_NAMES.
            let taken = self.take_held(&pending, page_size, &mut leases).await?;
            pending.drain(..taken);
            let Some((index, cursor)) = next else {
                break; // every master is done
            };
            if leases.len() == page_size || scans >= MAX_SCANS_PER_PAGE {
                break;
            }
            let room = page_size - leases.len();
            let count = room.clamp(MIN_SCAN_COUNT, MAX_SCAN_COUNT);
            let (mut after, keys) = self
                .scan(&masters[index], cursor, &pattern, count, prefix)
                .await?;
            scans += 1;
            let mut names = lease_names(&self.key_prefix, prefix, &keys);
            if !carriable(names.len(), room) {
                // SCAN went far past COUNT (long chains in Redis's table, or a rehash): what
                // would not fit on the page could not all travel in the token. Nothing of the
                // batch is taken yet: scan again from the same cursor, one step only.
                let (step_after, keys) = self
                    .scan(&masters[index], cursor, &pattern, 1, prefix)
                    .await?;
                scans += 1;
                after = step_after;
                names = lease_names(&self.key_prefix, prefix, &keys);
                if !carriable(names.len(), room) {
                    return Err(Error::Unavailable(format!(
                        "list: one SCAN step found {} lease names, more than a page with room \
                         for {room} and its page token ({MAX_PENDING_NAMES}) can hold; Redis \
                         is likely rehashing its table: retry",
                        names.len()
                    )));
                }
            }
            pending = names;
            next = match after {
                0 => (index + 1 < masters.len()).then_some((index + 1, 0)),
                after => Some((index, after)),
            };
        }
        let token = PageToken {
            next: next.map(|(index, cursor)| (masters[index].first_slot, cursor)),
            pending,
        };
        Ok(LeasePage {
            leases,
            next_page_token: (token.next.is_some() || !token.pending.is_empty())
                .then(|| token.encode(prefix)),
        })
    }

    /// The masters that hold the keys, in the order a listing visits them: the one server
    /// (standalone, or the Sentinel master), or every Cluster primary by the lowest slot it
    /// serves, from fred's cached view of the slots.
    fn masters(&self) -> Result<Vec<Master>> {
        let client = self.pool.next();
        if !client.is_clustered() {
            return Ok(vec![Master {
                first_slot: 0,
                slots: vec![(0, MAX_SLOT)],
                server: None,
            }]);
        }
        let not_known =
            || Error::Unavailable("list: the Redis Cluster's slots are not known yet".into());
        let routing = client.cached_cluster_state().ok_or_else(not_known)?;
        let mut by_primary: BTreeMap<&Server, Vec<(u16, u16)>> = BTreeMap::new();
        for range in routing.slots() {
            by_primary
                .entry(&range.primary)
                .or_default()
                .push((range.start, range.end));
        }
        let mut masters: Vec<Master> = by_primary
            .into_iter()
            .filter_map(|(server, slots)| {
                Some(Master {
                    first_slot: slots.iter().map(|(start, _)| *start).min()?,
                    slots,
                    server: Some(server.clone()),
                })
            })
            .collect();
        if masters.is_empty() {
            return Err(not_known());
        }
        masters.sort_by_key(|master| master.first_slot);
        Ok(masters)
    }

    /// One `SCAN` batch on `master`: the next cursor (0: the master is done) and the keys.
    async fn scan(
        &self,
        master: &Master,
        cursor: u64,
        pattern: &str,
        count: usize,
        prefix: &ListPrefix,
    ) -> Result<(u64, Vec<String>)> {
        let client = self.pool.next();
        let (cursor, count) = (cursor.to_string(), Some(count as u32));
        let started = std::time::Instant::now();
        let reply: Result<Value, RedisError> = match &master.server {
            Some(server) => {
                client
                    .with_cluster_node(server.clone())
                    .scan_page(cursor, pattern.to_owned(), count, None)
                    .await
            }
            None => {
                client
                    .scan_page(cursor, pattern.to_owned(), count, None)
                    .await
            }
        };
        metrics().record_store("scan", started.elapsed(), reply.is_err());
        let listing = || format!("(the listing of {:?})", prefix.as_str());
        let value = reply.map_err(|error| match is_transient(&error) {
            true => Error::Unavailable(format!("scan: {error}")),
            false => Error::Internal {
                name: listing(),
                detail: format!("SCAN failed: {error}"),
            },
        })?;
        let broken = |value: &Value| Error::Internal {
            name: listing(),
            detail: format!("SCAN replied {value:?}"),
        };
        let Value::Array(fields) = &value else {
            return Err(broken(&value));
        };
        let (Some(next), Some(Value::Array(keys))) = (fields.first(), fields.get(1)) else {
            return Err(broken(&value));
        };
        let next = next
            .as_string()
            .and_then(|next| next.parse().ok())
            .ok_or_else(|| broken(&value))?;
        // A key that is not UTF-8 is not leased's.
        Ok((next, keys.iter().filter_map(Value::as_string).collect()))
    }

    /// Describes `names` in order, a few at a time, and appends those held to `leases` until it
    /// has `page_size`. Answers how many of `names` it went through: all of them, unless the
    /// page filled first.
    async fn take_held(
        &self,
        names: &[(LeaseName, KeyKinds)],
        page_size: usize,
        leases: &mut Vec<DescribedLease>,
    ) -> Result<usize> {
        if leases.len() >= page_size {
            return Ok(0);
        }
        // Made before the stream (they start only when it polls them): a closure inside it would
        // keep the page's future from being `Send`.
        let reads: Vec<_> = names.iter().map(|(name, _)| self.describe(name)).collect();
        let mut described = stream::iter(reads)
            .buffered(LIST_DESCRIBES_IN_FLIGHT)
            .enumerate();
        while let Some((position, description)) = described.next().await {
            let (name, kinds) = &names[position];
            let description = match description {
                Ok(description) => description,
                // A key something else wrote under a lease's name (another type): not a lease.
                Err(Error::Internal { detail, .. }) => {
                    if let Some(suppressed) = LIST_SKIPPED.admit() {
                        tracing::warn!(suppressed, %name, %detail, "list: skipped a key that is not a lease");
                    }
                    continue;
                }
                Err(error) => return Err(error),
            };
            if kinds.lists(&description) {
                leases.push(DescribedLease {
                    name: name.clone(),
                    description,
                });
                if leases.len() == page_size {
                    return Ok(position + 1);
                }
            }
        }
        Ok(names.len())
    }
}

/// Whether a batch of `names` lease names can be taken by a page with `room` left: the names
/// past the room (the most the page may leave untaken) fit in a page token.
fn carriable(names: usize, room: usize) -> bool {
    names.saturating_sub(room) <= MAX_PENDING_NAMES
}

/// The highest Redis Cluster hash slot.
const MAX_SLOT: u16 = 16_383;

/// A master whose keys a listing scans, known by the lowest hash slot it serves (0 outside a
/// Cluster): a failover hands its slots, and so the listing's place, to the promoted replica,
/// whose node id differs.
struct Master {
    first_slot: u16,
    /// The slot ranges it serves, first and last included.
    slots: Vec<(u16, u16)>,
    /// The Cluster node to send `SCAN` to; `None` outside a Cluster.
    server: Option<Server>,
}

impl Master {
    fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|(start, end)| (*start..=*end).contains(&slot))
    }
}

/// Which keys of a lease name a `SCAN` batch held. A lease is listed through one key only, so
/// that it is on one page even if both keys exist and land in different batches: an exclusive
/// lease through its lease key, a counting lease or shared grants through its permits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct KeyKinds {
    lease: bool,
    permits: bool,
}

impl KeyKinds {
    /// As a page token spells them.
    fn code(&self) -> char {
        match (self.lease, self.permits) {
            (true, true) => 'b',
            (true, false) => 'l',
            _ => 'p',
        }
    }

    fn from_code(code: char) -> Option<Self> {
        let (lease, permits) = match code {
            'b' => (true, true),
            'l' => (true, false),
            'p' => (false, true),
            _ => return None,
        };
        Some(KeyKinds { lease, permits })
    }

    fn lists(&self, description: &Description) -> bool {
        let Some(first) = description.holders.first() else {
            return false;
        };
        // Shared grants are permits of limit 1.
        match description.limit {
            1 if !first.shared => self.lease,
            _ => self.permits,
        }
    }
}

/// The `MATCH` pattern of a listing of `prefix`: every key whose hash tag starts with it and
/// whose last character is not `e` or `r`. A lease key ends with `}` and a counting lease's
/// permits with `s`; this leaves out the keys of each name that never mark a lease as held and
/// are the most numerous (`:queue`, and `:owner`, which outlives its lease by the counter keep),
/// so that Redis does not send them. Spelled without `}`, which fred would take for a hash tag.
fn scan_pattern(key_prefix: &str, prefix: &ListPrefix) -> String {
    format!(
        "{}{{{}*[^er]",
        escape_glob(key_prefix),
        escape_glob(prefix.as_str())
    )
}

/// `text` matched literally in a `SCAN` pattern.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The lease names of a batch's keys that start with `prefix`, sorted and each once, with the
/// keys of theirs that were found. Keys that are not a lease key or a permits set, or whose hash
/// tag is not a lease name, are left out.
fn lease_names(
    key_prefix: &str,
    prefix: &ListPrefix,
    keys: &[String],
) -> Vec<(LeaseName, KeyKinds)> {
    let mut names: BTreeMap<&str, KeyKinds> = BTreeMap::new();
    for key in keys {
        let Some((name, suffix)) = key
            .strip_prefix(key_prefix)
            .and_then(|key| key.strip_prefix('{'))
            .and_then(|key| key.split_once('}'))
        else {
            continue;
        };
        if !name.starts_with(prefix.as_str()) {
            continue;
        }
        let kinds = match suffix {
            "" => KeyKinds {
                lease: true,
                permits: false,
            },
            ":permits" => KeyKinds {
                lease: false,
                permits: true,
            },
            _ => continue,
        };
        let found = names.entry(name).or_default();
        found.lease |= kinds.lease;
        found.permits |= kinds.permits;
    }
    names
        .into_iter()
        .filter_map(|(name, kinds)| Some((parse_name(name).ok()?, kinds)))
        .collect()
}

/// Where the next page of a listing starts; opaque to clients: `r1.<hex prefix>.<slot>.<cursor>.
/// <hex pending names>`, bound to the listing's prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PageToken {
    /// A slot that the master to scan next serves (its lowest, when the token was made), and the
    /// cursor of its next batch; `None` when every master is done.
    next: Option<(u16, u64)>,
    /// Names found by a batch already scanned that did not fit on the page, in order, with the
    /// keys of theirs found: they come first on the next page.
    pending: Vec<(LeaseName, KeyKinds)>,
}

impl PageToken {
    fn encode(&self, prefix: &ListPrefix) -> String {
        let (slot, cursor) = match self.next {
            Some((slot, cursor)) => (slot.to_string(), cursor.to_string()),
            None => (String::new(), String::new()),
        };
        // Names hold no space: ` ` separates them.
        let pending: Vec<String> = self
            .pending
            .iter()
            .map(|(name, kinds)| format!("{}{name}", kinds.code()))
            .collect();
        format!(
            "{PAGE_TOKEN_VERSION}.{}.{slot}.{cursor}.{}",
            to_hex(prefix.as_str()),
            to_hex(&pending.join(" "))
        )
    }

    /// A token this store made for a listing of `prefix`, else `INVALID_ARGUMENT` `page_token`.
    pub(super) fn parse(token: &str, prefix: &ListPrefix) -> Result<Self> {
        let invalid = invalid_page_token;
        let fields: Vec<&str> = token.split('.').collect();
        let [version, token_prefix, slot, cursor, pending] = fields.as_slice() else {
            return Err(invalid());
        };
        if *version != PAGE_TOKEN_VERSION
            || from_hex(token_prefix).as_deref() != Some(prefix.as_str())
        {
            return Err(invalid());
        }
        let next = match (*slot, *cursor) {
            ("", "") => None,
            (slot, cursor) => {
                let slot = slot
                    .parse()
                    .ok()
                    .filter(|slot| *slot <= MAX_SLOT)
                    .ok_or_else(invalid)?;
                Some((slot, cursor.parse().map_err(|_| invalid())?))
            }
        };
        let pending = from_hex(pending).ok_or_else(invalid)?;
        let pending = pending
            .split(' ')
            .filter(|name| !name.is_empty())
            .map(|coded| {
                let code = coded.chars().next()?;
                let name = parse_name(&coded[code.len_utf8()..]).ok()?;
                let kinds = KeyKinds::from_code(code)?;
                name.as_str()
                    .starts_with(prefix.as_str())
                    .then_some((name, kinds))
            })
            .collect::<Option<Vec<_>>>()
            .filter(|pending| pending.len() <= MAX_PENDING_NAMES)
            .ok_or_else(invalid)?;
        if next.is_none() && pending.is_empty() {
            return Err(invalid()); // the last page has no token
        }
        Ok(PageToken { next, pending })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Holder;

    fn prefix(text: &str) -> ListPrefix {
        crate::lease::limits::parse_list_prefix(text).unwrap()
    }

    fn invalid_field(error: Error) -> &'static str {
        match error {
            Error::InvalidArgument { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    /// Page tokens round-trip for their own prefix only; anything else, or a token of another
    /// prefix, is INVALID_ARGUMENT naming `page_token`.
    #[test]
    fn page_tokens_are_bound_to_their_prefix() {
        let jobs = prefix("jobs/");
        let lease_key = KeyKinds {
            lease: true,
            permits: false,
        };
        let permits_key = KeyKinds {
            lease: false,
            permits: true,
        };
        for token in [
            PageToken {
                next: Some((5_461, 1_234_567)),
                pending: vec![
                    (parse_name("jobs/a").unwrap(), lease_key),
                    (parse_name("jobs/b").unwrap(), permits_key),
                ],
            },
            PageToken {
                next: Some((0, 0)),
                pending: Vec::new(),
            },
            PageToken {
                next: None,
                pending: vec![(parse_name("jobs/c").unwrap(), permits_key)],
            },
        ] {
            let encoded = token.encode(&jobs);
            assert!(encoded.starts_with("r1."), "{encoded}");
            assert_eq!(PageToken::parse(&encoded, &jobs).unwrap(), token);
            let other = PageToken::parse(&encoded, &prefix("jobs/eu")).unwrap_err();
            assert_eq!(invalid_field(other), "page_token");
        }
        let made = |fields: [&str; 5]| fields.join(".");
        let hex_jobs = to_hex("jobs/");
        let too_many = vec!["ljobs/x"; MAX_PENDING_NAMES + 1].join(" ");
        let most = vec!["ljobs/x"; MAX_PENDING_NAMES].join(" ");
        assert!(PageToken::parse(&made(["r1", &hex_jobs, "", "", &to_hex(&most)]), &jobs).is_ok());
        for garbage in [
            "garbage".to_owned(),
            "r1".to_owned(),
            made(["r2", &hex_jobs, "0", "0", ""]),
            made(["r1", "zz", "0", "0", ""]),
            made(["r1", &hex_jobs, "16384", "0", ""]),
            made(["r1", &hex_jobs, "0", "-1", ""]),
            made(["r1", &hex_jobs, "0", "", ""]),
            made(["r1", &hex_jobs, "", "", ""]),
            made(["r1", &hex_jobs, "0", "0", "abc"]),
            made(["r1", &hex_jobs, "0", "0", &to_hex("jobs/a")]),
            made(["r1", &hex_jobs, "0", "0", &to_hex("xjobs/a")]),
            made(["r1", &hex_jobs, "0", "0", &to_hex("lother/name")]),
            made(["r1", &hex_jobs, "0", "0", &to_hex("ljobs/a\tb")]),
            made(["r1", &hex_jobs, "0", "0", &to_hex(&too_many)]),
            format!("{}.extra", made(["r1", &hex_jobs, "0", "0", ""])),
            "m1.6a6f62732f.6a6f62732f61".to_owned(),
        ] {
            let error = PageToken::parse(&garbage, &jobs).unwrap_err();
            assert_eq!(invalid_field(error), "page_token", "{garbage:?}");
        }
    }

    /// A page takes a batch only if the names it may leave untaken fit in a page token: a page
    /// with room for 1 takes a batch of 1 + 32 names, not 34; a full batch of 1000 for a page of
    /// 1000 is taken whatever it leaves.
    #[test]
    fn a_batch_is_taken_only_if_its_leftover_fits_a_token() {
        assert!(carriable(0, 1));
        assert!(carriable(MIN_SCAN_COUNT + 5, 1));
        assert!(carriable(1 + MAX_PENDING_NAMES, 1));
        assert!(!carriable(2 + MAX_PENDING_NAMES, 1));
        assert!(carriable(1_000 + MAX_PENDING_NAMES, 1_000));
        assert!(!carriable(1_001 + MAX_PENDING_NAMES, 1_000));
        // A batch of COUNT (the room, at least MIN_SCAN_COUNT) with a bucket's worth of keys
        // past it is always taken at once.
        for room in 1..=MAX_SCAN_COUNT {
            let count = room.clamp(MIN_SCAN_COUNT, MAX_SCAN_COUNT);
            assert!(carriable(count + 20, room), "room {room}");
        }
    }

    /// Glob characters of the key prefix match literally, and the pattern has no `}` (which
    /// fred would read as a hash tag).
    #[test]
    fn scan_patterns_escape_the_key_prefix() {
        assert_eq!(
            scan_pattern("leased:", &prefix("jobs/")),
            "leased:{jobs/*[^er]"
        );
        assert_eq!(
            scan_pattern(r"a*b?[c]\:", &prefix("")),
            r"a\*b\?\[c\]\\:{*[^er]"
        );
    }

    /// A batch's keys give each lease name once, sorted, with the kinds of its keys found; keys
    /// of other kinds, other prefixes or no lease name are left out.
    #[test]
    fn batches_yield_each_lease_name_once() {
        let keys: Vec<String> = [
            "leased:{jobs/b}",
            "leased:{jobs/a}:permits",
            "leased:{jobs/a}:holders",
            "leased:{jobs/c}",
            "leased:{jobs/c}:permits",
            "leased:{jobs/d}:replicas",
            "leased:{jobs/bad name}",
            "leased:{jobs/e",
            "leased:{jobs/f}extra",
            "leased:{other}",
            "other:{jobs/g}",
        ]
        .map(str::to_owned)
        .into();
        let names = || {
            lease_names("leased:", &prefix("jobs/"), &keys)
                .into_iter()
                .map(|(name, kinds)| (name.to_string(), kinds.lease, kinds.permits))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(),
            [
                ("jobs/a".to_owned(), false, true),
                ("jobs/b".to_owned(), true, false),
                ("jobs/c".to_owned(), true, true),
            ]
        );
    }

    /// A lease is listed through the key of its kind only, and only while someone holds it.
    #[test]
    fn leases_are_listed_through_the_key_of_their_kind() {
        let holder = Holder {
            shared: false,
            holder: "h".into(),
            fencing_token: 1,
            expiry: None,
        };
        let held = |limit| Description {
            limit,
            holders: vec![holder.clone()],
            waiters: 0,
        };
        let lease_key = KeyKinds {
            lease: true,
            permits: false,
        };
        let permits_key = KeyKinds {
            lease: false,
            permits: true,
        };
        assert!(lease_key.lists(&held(1)));
        assert!(!lease_key.lists(&held(3)));
        assert!(permits_key.lists(&held(3)));
        assert!(!permits_key.lists(&held(1)));
        assert!(!lease_key.lists(&Description::default()));
    }
}
