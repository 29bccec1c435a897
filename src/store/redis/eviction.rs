//! Redis's `maxmemory-policy`. Under any policy but `noeviction`, a Redis that reaches
//! `maxmemory` evicts keys to make room, and every key leased writes has a TTL, so the `volatile-*`
//! policies evict them as readily as the `allkeys-*` ones: an evicted lease key is a lease granted
//! again while its holder still holds it. Under `noeviction` a full Redis refuses writes instead
//! (grants fail, held leases stay held). Checked at startup, on every master.

use std::time::Duration;

use fred::types::InfoKind;

use super::RedisStore;
use crate::{error::StartupError, metrics::metrics};

/// The one policy that never evicts a lease key.
const SAFE_POLICY: &str = "noeviction";

impl RedisStore {
    /// Refuses a Redis whose `maxmemory-policy` may evict lease keys, unless `allow` (then warns,
    /// and sets `leased_redis_eviction_unsafe`). A master that does not answer within `timeout`
    /// is not an error here (the server starts unhealthy), only a warning.
    pub async fn check_eviction_policy(
        &self,
        timeout: Duration,
        allow: bool,
    ) -> Result<(), StartupError> {
        let policies = match tokio::time::timeout(timeout, self.eviction_policies()).await {
            Ok(Ok(policies)) => policies,
            Ok(Err(error)) => {
                tracing::warn!(
                    %error,
                    "cannot read Redis's maxmemory-policy; it must be noeviction"
                );
                return Ok(());
            }
            Err(_) => {
                tracing::warn!(
                    "Redis did not tell its maxmemory-policy at startup; it must be noeviction"
                );
                return Ok(());
            }
        };
        for (server, policy) in policies {
            if policy == SAFE_POLICY {
                continue;
            }
            if !allow {
                return Err(StartupError::RedisEviction { server, policy });
            }
            metrics().redis_eviction_unsafe.set(1);
            tracing::error!(
                %server,
                %policy,
                "Redis may evict lease keys when full (maxmemory-policy is not noeviction): an \
                 evicted lease is granted again while its holder still holds it. Started anyway \
                 (--redis-allow-eviction)"
            );
        }
        Ok(())
    }

    /// `(server, maxmemory-policy)` of the one server, or of every Cluster primary. Read from
    /// `INFO memory`, which managed Redis services answer where `CONFIG GET` is disabled.
    async fn eviction_policies(&self) -> Result<Vec<(String, String)>, fred::error::Error> {
        let infos = self.info_of_every_master(InfoKind::Memory).await?;
        Ok(infos
            .into_iter()
            .map(|(server, info)| (server, policy_of(&info)))
            .collect())
    }
}

/// The `maxmemory_policy` field of `INFO memory` ("unknown" if absent).
fn policy_of(info: &str) -> String {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("maxmemory_policy:"))
        .unwrap_or("unknown")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_read_from_info_memory() {
        let info = "# Memory\r\nused_memory:1000\r\nmaxmemory_policy:allkeys-lru\r\n";
        assert_eq!(policy_of(info), "allkeys-lru");
        assert_eq!(policy_of("# Memory\r\n"), "unknown");
    }
}
