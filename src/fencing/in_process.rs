//! [`InProcessMarks`]: the fencing middleware's default mark store, a map in this process.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use super::{FenceError, FenceMarks, check_token};

/// High-water marks kept in this process: only as durable as the process. A restarted service
/// accepts any token for a name until a call brings a newer one, and each replica of a service
/// keeps its own marks; a PostgreSQL or Redis store gives every replica one mark that survives
/// restarts.
///
/// One entry (the name and a `u64`) per lease name ever fenced: a mark cannot be forgotten
/// without letting an older token through again, so the map grows with the number of distinct
/// names the service's callers use (leased's names are at most 256 bytes).
#[derive(Debug, Default)]
pub struct InProcessMarks {
    marks: Mutex<HashMap<String, u64>>,
}

impl InProcessMarks {
    /// An empty store: every name's first token passes.
    pub fn new() -> Self {
        Self::default()
    }

    /// The largest token accepted for `resource` so far.
    pub fn mark(&self, resource: &str) -> Option<u64> {
        self.lock().get(resource).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        // Nothing can panic while the lock is held: the map is consistent even if poisoned.
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check_and_record(&self, resource: &str, token: u64) -> Result<u64, FenceError> {
        check_token(token).map_err(|bad| FenceError::Invalid(format!("token {bad}")))?;
        let mut marks = self.lock();
        let mark = marks.entry(resource.to_owned()).or_insert(token);
        if token < *mark {
            return Err(FenceError::Stale {
                resource: resource.to_owned(),
                token,
                mark: *mark,
            });
        }
        *mark = token;
        Ok(token)
    }
}

impl FenceMarks for InProcessMarks {
    fn fence(
        &self,
        resource: &str,
        token: u64,
    ) -> impl Future<Output = Result<u64, FenceError>> + Send {
        std::future::ready(self.check_and_record(resource, token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fencing::MAX_TOKEN;

    #[tokio::test]
    async fn marks_only_rise_per_resource() {
        let marks = InProcessMarks::new();
        assert_eq!(marks.fence("a", 5).await, Ok(5));
        assert_eq!(marks.fence("a", 5).await, Ok(5), "an equal token passes");
        assert_eq!(
            marks.fence("a", 4).await,
            Err(FenceError::Stale {
                resource: "a".to_owned(),
                token: 4,
                mark: 5
            })
        );
        assert_eq!(marks.mark("a"), Some(5));
        assert_eq!(marks.fence("b", 1).await, Ok(1));
        assert_eq!(marks.fence("a", MAX_TOKEN).await, Ok(MAX_TOKEN));
        assert!(
            matches!(marks.fence("c", 0).await, Err(FenceError::Invalid(m)) if m.starts_with("token "))
        );
        assert!(marks.fence("c", MAX_TOKEN + 1).await.is_err());
        assert_eq!(marks.mark("c"), None, "a bad token records nothing");
    }
}
