//! What the PostgreSQL and Redis mark stores share: a lease name's key under the store's prefix,
//! and a stale error named as the caller named the resource, not by its key.

use super::FenceError;

/// Checks `resource`'s mark, kept under `prefix + resource`, with `fence_key`; a stale error names
/// `resource`.
pub(super) async fn fence_prefixed<F>(
    prefix: &str,
    resource: &str,
    fence_key: impl FnOnce(String) -> F,
) -> Result<u64, FenceError>
where
    F: Future<Output = Result<u64, FenceError>>,
{
    fence_key(format!("{prefix}{resource}"))
        .await
        .map_err(|error| match error {
            FenceError::Stale { token, mark, .. } => FenceError::Stale {
                resource: resource.to_owned(),
                token,
                mark,
            },
            other => other,
        })
}
