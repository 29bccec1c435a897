//! [`FencingLayer`]: a tower layer that makes a tonic service (or a whole tonic server) a fenced
//! resource. Each call must carry the `leased-lease-name` and `leased-fencing-token` metadata; a
//! token below the largest seen for that name is refused with `FAILED_PRECONDITION` before the
//! handler runs.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};

use http::{HeaderMap, HeaderValue};
use tonic::{Status, server::NamedService};
use tower_layer::Layer;
use tower_service::Service;

use super::{
    FenceError, FenceMarks, InProcessMarks,
    metadata::{FENCING_TOKEN, LEASE_NAME},
    parse_token,
};

/// The longest lease name leased grants (`lease::limits::MAX_NAME_BYTES`): a longer
/// `leased-lease-name` cannot come from a grant.
const MAX_NAME_BYTES: usize = 256;

/// Makes the services it wraps fenced resources: every call's token is checked against the mark
/// of its lease name in `M` (in process by default, [`InProcessMarks`]) before the handler runs.
///
/// ```no_run
/// # #[cfg(feature = "server")]
/// # async fn serve<S>(service: S) -> Result<(), Box<dyn std::error::Error>>
/// # where S: tower_service::Service<http::Request<tonic::body::Body>,
/// #     Response = http::Response<tonic::body::Body>, Error = std::convert::Infallible>
/// #     + tonic::server::NamedService + Clone + Send + Sync + 'static,
/// #     S::Future: Send + 'static,
/// # {
/// use leased::fencing::FencingLayer;
/// use tower_layer::Layer;
///
/// // One service fenced, the others of the server not:
/// tonic::transport::Server::builder()
///     .add_service(FencingLayer::new().layer(service))
///     .serve("127.0.0.1:50061".parse()?)
///     .await?;
/// // Or every service of the server: `Server::builder().layer(FencingLayer::new())`.
/// # Ok(())
/// # }
/// ```
///
/// The checks, in order (the same in every language's middleware):
/// - neither entry: `INVALID_ARGUMENT` when [`required`](Self::required) (the default), else the
///   call passes unchecked;
/// - one entry without the other, either given twice, an empty or over-256-byte name, or a token
///   that is not canonical decimal from 1 to 2^63-1: `INVALID_ARGUMENT` naming the entry;
/// - a token below the name's mark: `FAILED_PRECONDITION` naming both tokens; otherwise the mark
///   becomes the token (an equal token passes: one holder calls many times) and the handler runs;
/// - the mark store failed (PostgreSQL or Redis down): `UNAVAILABLE`, and the handler does not run.
///
/// Calls of one lease name take turns in this process: a per-name lock is held from the check
/// until the handler has produced its response, so a handler's writes land in token order even
/// if it pauses in the middle of one. For a streaming call the check is made when it starts and
/// the lock is held until the handler returns its response stream (a client-streaming handler
/// that reads its whole input first holds it that long); later messages on the stream are
/// neither checked nor ordered. The locks of names that no call holds or waits for are dropped:
/// the lock map holds only the names of calls in flight.
pub struct FencingLayer<M = InProcessMarks> {
    fence: Arc<Fence<M>>,
    required: bool,
}

/// What every clone of the layer and of its services shares.
struct Fence<M> {
    marks: M,
    turns: NameLocks,
}

impl FencingLayer<InProcessMarks> {
    /// A layer that keeps its marks in this process ([`InProcessMarks`]): only as durable as the
    /// process. A restarted service accepts any token for a name until a call brings a newer one,
    /// and each replica of a service keeps its own marks; use a PostgreSQL or Redis store
    /// ([`with_marks`](Self::with_marks)) where that matters.
    pub fn new() -> Self {
        Self::with_marks(InProcessMarks::new())
    }
}

impl Default for FencingLayer<InProcessMarks> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: FenceMarks> FencingLayer<M> {
    /// A layer that keeps its marks in `marks` (e.g. a PostgreSQL or Redis store, shared by every
    /// replica of the service).
    pub fn with_marks(marks: M) -> Self {
        FencingLayer {
            fence: Arc::new(Fence {
                marks,
                turns: NameLocks::default(),
            }),
            required: true,
        }
    }

    /// Whether a call without either metadata entry is refused (`true`, the default) or passes
    /// unchecked (`false`: a service that fenced callers and plain callers share). A call with
    /// one entry or a bad one is refused either way.
    pub fn required(self, required: bool) -> Self {
        FencingLayer { required, ..self }
    }

    /// The mark store.
    pub fn marks(&self) -> &M {
        &self.fence.marks
    }
}

impl<M> Clone for FencingLayer<M> {
    fn clone(&self) -> Self {
        FencingLayer {
            fence: self.fence.clone(),
            required: self.required,
        }
    }
}

impl<M> std::fmt::Debug for FencingLayer<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencingLayer")
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

impl<S, M> Layer<S> for FencingLayer<M> {
    type Service = FencedService<S, M>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.fence.clone(),
            required: self.required,
        }
    }
}

/// A service behind a [`FencingLayer`].
pub struct FencedService<S, M = InProcessMarks> {
    inner: S,
    fence: Arc<Fence<M>>,
    required: bool,
}

impl<S: Clone, M> Clone for FencedService<S, M> {
    fn clone(&self) -> Self {
        FencedService {
            inner: self.inner.clone(),
            fence: self.fence.clone(),
            required: self.required,
        }
    }
}

impl<S: std::fmt::Debug, M> std::fmt::Debug for FencedService<S, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedService")
            .field("inner", &self.inner)
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

/// A wrapped service keeps its gRPC name, so that `Server::add_service` routes to it.
impl<S: NamedService, M> NamedService for FencedService<S, M> {
    const NAME: &'static str = S::NAME;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, M, ReqBody, ResBody> Service<http::Request<ReqBody>> for FencedService<S, M>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    M: FenceMarks,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        // The service that poll_ready made ready is the one to call; a clone stays behind.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (fence, required) = (self.fence.clone(), self.required);
        Box::pin(async move {
            let claim = match read_claim(request.headers(), required) {
                Ok(Some(claim)) => claim,
                Ok(None) => return inner.call(request).await,
                Err(refusal) => return Ok(refusal.into_http()),
            };
            // Held until the handler has produced its response (the end of this block).
            let _turn = fence.turns.lock(&claim.name).await;
            if let Err(error) = fence.marks.fence(&claim.name, claim.token).await {
                return Ok(refusal(error, &claim.name).into_http());
            }
            inner.call(request).await
        })
    }
}

/// A call's fencing metadata, read and checked.
#[derive(Debug, PartialEq, Eq)]
struct Claim {
    name: String,
    token: u64,
}

/// The call's lease name and token; `None` for a call with neither when they are not required.
fn read_claim(headers: &HeaderMap, required: bool) -> Result<Option<Claim>, Status> {
    let name = single_entry(headers, LEASE_NAME)?;
    let token = single_entry(headers, FENCING_TOKEN)?;
    let (name, token) = match (name, token) {
        (Some(name), Some(token)) => (name, token),
        (None, None) if !required => return Ok(None),
        (None, None) => {
            return Err(Status::invalid_argument(format!(
                "this service is fenced: the call needs {LEASE_NAME} and {FENCING_TOKEN} \
                 metadata (the lease's name and the fencing token of its grant, e.g. from \
                 LeaseGuard::fencing_metadata)"
            )));
        }
        (None, Some(_)) => {
            return Err(Status::invalid_argument(format!(
                "{LEASE_NAME} is missing: a call with {FENCING_TOKEN} must name its lease"
            )));
        }
        (Some(_), None) => {
            return Err(Status::invalid_argument(format!(
                "{FENCING_TOKEN} is missing: a call with {LEASE_NAME} must carry its lease's \
                 fencing token"
            )));
        }
    };
    let name = match name.to_str() {
        Ok("") => {
            return Err(Status::invalid_argument(format!(
                "{LEASE_NAME} must not be empty"
            )));
        }
        Ok(name) if name.len() <= MAX_NAME_BYTES => name.to_owned(),
        _ => {
            return Err(Status::invalid_argument(format!(
                "{LEASE_NAME} must be a lease name of 1 to {MAX_NAME_BYTES} bytes of visible \
                 ASCII, not {:?} ({} bytes)",
                String::from_utf8_lossy(&name.as_bytes()[..name.len().min(40)]),
                name.len()
            )));
        }
    };
    // Not visible ASCII: the lossy text fails to parse too, and the message shows it.
    let token = parse_token(&String::from_utf8_lossy(token.as_bytes()))
        .map_err(|bad| Status::invalid_argument(format!("{FENCING_TOKEN} {bad}")))?;
    Ok(Some(Claim { name, token }))
}

/// The value of the metadata entry `key`, if present; given twice, the call is ambiguous.
fn single_entry<'a>(headers: &'a HeaderMap, key: &str) -> Result<Option<&'a HeaderValue>, Status> {
    let mut values = headers.get_all(key).iter();
    match (values.next(), values.next()) {
        (value, None) => Ok(value),
        (Some(_), Some(_)) => Err(Status::invalid_argument(format!(
            "{key} must be given once, not several times"
        ))),
        (None, Some(_)) => unreachable!("a second value without a first"),
    }
}

/// The status of a call that the mark store refused or could not check.
fn refusal(error: FenceError, name: &str) -> Status {
    match error {
        FenceError::Stale { token, mark, .. } => Status::failed_precondition(format!(
            "stale fencing token {token} for lease {name:?}: the highest seen is {mark}"
        )),
        FenceError::Invalid(message) => Status::invalid_argument(message),
        store @ FenceError::Store(_) => Status::unavailable(store.to_string()),
    }
}

/// One async lock per lease name with calls in flight, so that the calls of a name take turns.
///
/// An entry counts the calls that hold or wait for its lock; the last one to leave removes it
/// (in [`Ticket`]'s drop, which also runs for a call cancelled while it waits). The map thus
/// holds only names with calls in flight, whatever number of names the service ever sees.
#[derive(Default)]
struct NameLocks {
    by_name: Mutex<HashMap<String, NameLock>>,
}

struct NameLock {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Calls that hold or wait for `lock`.
    users: usize,
}

impl NameLocks {
    /// Waits for `name`'s turn (first come, first served: tokio's mutex is fair).
    async fn lock(&self, name: &str) -> Turn<'_> {
        let ticket = self.ticket(name);
        let held = ticket.lock.clone().lock_owned().await;
        Turn {
            _held: held,
            _ticket: ticket,
        }
    }

    fn ticket(&self, name: &str) -> Ticket<'_> {
        let mut by_name = self.by_name.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = by_name.entry(name.to_owned()).or_insert_with(|| NameLock {
            lock: Arc::default(),
            users: 0,
        });
        entry.users += 1;
        Ticket {
            locks: self,
            name: name.to_owned(),
            lock: entry.lock.clone(),
        }
    }

    /// Names with calls in flight.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_name
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A call's place at a name's lock: counted in the entry's users until dropped.
struct Ticket<'a> {
    locks: &'a NameLocks,
    name: String,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut by_name = self
            .locks
            .by_name
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = by_name.get_mut(&self.name) {
            entry.users -= 1;
            if entry.users == 0 {
                by_name.remove(&self.name);
            }
        }
    }
}

/// A name's turn: the lock, released before the ticket (fields drop in order), so that an entry
/// is never removed while its lock is held and a newcomer cannot make a second lock for the name.
struct Turn<'a> {
    _held: tokio::sync::OwnedMutexGuard<()>,
    _ticket: Ticket<'a>,
}

#[cfg(test)]
mod tests {
    use std::{
        convert::Infallible,
        sync::atomic::{AtomicUsize, Ordering},
        time::Duration,
    };

    use super::*;
    use crate::fencing::MAX_TOKEN;

    /// A handler that counts its calls and answers OK with an empty body.
    #[derive(Clone, Default)]
    struct Handler {
        calls: Arc<AtomicUsize>,
    }

    impl Service<http::Request<()>> for Handler {
        type Response = http::Response<String>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            self.calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(http::Response::new("handled".to_owned())))
        }
    }

    /// A mark store that is down.
    struct BrokenStore;

    impl FenceMarks for BrokenStore {
        async fn fence(&self, _: &str, _: u64) -> Result<u64, FenceError> {
            Err(FenceError::Store("connection refused".to_owned()))
        }
    }

    fn request(metadata: &[(&str, &str)]) -> http::Request<()> {
        let mut request = http::Request::new(());
        for (key, value) in metadata {
            let value = HeaderValue::from_bytes(value.as_bytes()).unwrap();
            let key = http::HeaderName::from_bytes(key.as_bytes()).unwrap();
            request.headers_mut().append(key, value);
        }
        request
    }

    /// Ok when the handler answered, else the refusal's status.
    async fn call<M: FenceMarks>(
        service: &mut FencedService<Handler, M>,
        metadata: &[(&str, &str)],
    ) -> Result<(), Status> {
        let response = service.call(request(metadata)).await.unwrap();
        match response.body().as_str() {
            "handled" => Ok(()),
            _ => Err(Status::from_header_map(response.headers()).expect("a grpc-status")),
        }
    }

    fn fenced(name: &str, token: &str) -> [(&'static str, String); 2] {
        [
            (LEASE_NAME, name.to_owned()),
            (FENCING_TOKEN, token.to_owned()),
        ]
    }

    async fn call_fenced<M: FenceMarks>(
        service: &mut FencedService<Handler, M>,
        name: &str,
        token: &str,
    ) -> Result<(), Status> {
        let metadata = fenced(name, token);
        let metadata: Vec<(&str, &str)> = metadata.iter().map(|(k, v)| (*k, v.as_str())).collect();
        call(service, &metadata).await
    }

    #[tokio::test]
    async fn a_token_below_the_mark_is_refused_naming_both_tokens() {
        let handler = Handler::default();
        let mut service = FencingLayer::new().layer(handler.clone());
        assert!(call_fenced(&mut service, "orders", "7").await.is_ok());
        assert!(
            call_fenced(&mut service, "orders", "7").await.is_ok(),
            "equal passes"
        );
        let stale = call_fenced(&mut service, "orders", "6").await.unwrap_err();
        assert_eq!(stale.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            stale.message(),
            "stale fencing token 6 for lease \"orders\": the highest seen is 7"
        );
        // Marks are per name.
        assert!(call_fenced(&mut service, "invoices", "1").await.is_ok());
        assert_eq!(handler.calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn bad_metadata_is_refused_naming_the_entry() {
        let handler = Handler::default();
        let mut service = FencingLayer::new().layer(handler.clone());
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (
                vec![],
                "this service is fenced: the call needs leased-lease-name",
            ),
            (vec![(FENCING_TOKEN, "5")], "leased-lease-name is missing"),
            (
                vec![(LEASE_NAME, "orders")],
                "leased-fencing-token is missing",
            ),
            (
                vec![(LEASE_NAME, ""), (FENCING_TOKEN, "5")],
                "leased-lease-name must not be empty",
            ),
            (
                vec![(LEASE_NAME, "orders"), (FENCING_TOKEN, "0")],
                "leased-fencing-token must be a fencing token from 1 to 9223372036854775807, \
                 not \"0\"",
            ),
            (
                vec![(LEASE_NAME, "orders"), (FENCING_TOKEN, "-5")],
                "not \"-5\"",
            ),
            (
                vec![(LEASE_NAME, "orders"), (FENCING_TOKEN, "05")],
                "not \"05\"",
            ),
            (
                vec![(LEASE_NAME, "orders"), (FENCING_TOKEN, "12a")],
                "not \"12a\"",
            ),
            (
                vec![
                    (LEASE_NAME, "orders"),
                    (FENCING_TOKEN, "9223372036854775808"),
                ],
                "not \"9223372036854775808\"",
            ),
            (
                vec![
                    (LEASE_NAME, "o"),
                    (FENCING_TOKEN, "5"),
                    (FENCING_TOKEN, "6"),
                ],
                "leased-fencing-token must be given once",
            ),
        ];
        for (metadata, expected) in cases {
            let status = call(&mut service, &metadata).await.expect_err("refused");
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{metadata:?}");
            assert!(
                status.message().contains(expected),
                "{metadata:?}: {:?} does not contain {expected:?}",
                status.message()
            );
        }
        let long_name = "n".repeat(MAX_NAME_BYTES + 1);
        let status = call_fenced(&mut service, &long_name, "5")
            .await
            .unwrap_err();
        assert!(
            status
                .message()
                .starts_with("leased-lease-name must be a lease name")
        );
        assert_eq!(handler.calls.load(Ordering::SeqCst), 0, "no bad call ran");
        let max = MAX_TOKEN.to_string();
        assert!(call_fenced(&mut service, "orders", &max).await.is_ok());
    }

    #[tokio::test]
    async fn optional_metadata_lets_plain_calls_through_but_not_bad_ones() {
        let handler = Handler::default();
        let mut service = FencingLayer::new().required(false).layer(handler.clone());
        assert!(call(&mut service, &[]).await.is_ok());
        let status = call(&mut service, &[(FENCING_TOKEN, "5")])
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(call_fenced(&mut service, "orders", "9").await.is_ok());
        let stale = call_fenced(&mut service, "orders", "8").await.unwrap_err();
        assert_eq!(stale.code(), tonic::Code::FailedPrecondition);
        assert_eq!(handler.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_store_failure_is_unavailable_and_the_handler_does_not_run() {
        let handler = Handler::default();
        let mut service = FencingLayer::with_marks(BrokenStore).layer(handler.clone());
        let status = call_fenced(&mut service, "orders", "5").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(
            status.message().contains("connection refused"),
            "{status:?}"
        );
        assert_eq!(handler.calls.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn calls_of_one_name_take_turns_and_other_names_do_not_wait() {
        let locks = NameLocks::default();
        let first = locks.lock("a").await;
        let mut second = std::pin::pin!(locks.lock("a"));
        assert!(
            futures_poll_once(second.as_mut()).await.is_none(),
            "a second call of the name waits"
        );
        let other = tokio::time::timeout(Duration::from_secs(5), locks.lock("b"))
            .await
            .expect("another name does not wait");
        assert_eq!(locks.len(), 2);
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the second call's turn comes");
        drop((second, other));
        assert_eq!(locks.len(), 0, "no call holds a lock: the map is empty");
    }

    #[tokio::test]
    async fn the_lock_map_holds_only_names_with_calls_in_flight() {
        let locks = NameLocks::default();
        for index in 0..1000 {
            let _turn = locks.lock(&format!("name/{index}")).await;
            assert_eq!(locks.len(), 1);
        }
        assert_eq!(locks.len(), 0);

        // A call cancelled while it waits leaves no entry behind either.
        let held = locks.lock("busy").await;
        let waiting = tokio::time::timeout(Duration::from_millis(20), locks.lock("busy")).await;
        assert!(waiting.is_err(), "the waiter timed out");
        assert_eq!(locks.len(), 1);
        drop(held);
        assert_eq!(locks.len(), 0);
    }

    /// Polls `future` once: its output if it is ready at once.
    async fn futures_poll_once<F: Future + Unpin>(future: F) -> Option<F::Output> {
        let mut future = future;
        std::future::poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut future).poll(cx) {
                Poll::Ready(output) => Some(output),
                Poll::Pending => None,
            })
        })
        .await
    }
}
