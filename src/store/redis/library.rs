//! The scripts as one Redis Functions library: `prelude.lua` once at the top, then each script as a
//! function of it. `FUNCTION LOAD` runs the library's top level once per primary, so a call
//! (`FCALL`) no longer rebuilds the prelude's ~30 closures as every `EVALSHA` of prelude + script
//! did: that was 15 % of the Redis CPU of a grant + release (docs/src/performance.md).
//!
//! Function names are global on a Redis server, so the library and its functions are named after a
//! hash of the library's code (`leased_<hash>_acquire`): replicas of different versions sharing a
//! Redis (a rolling upgrade) each call their own scripts. A library is loaded when a call finds its
//! function missing (the first call, or after a Redis restart without persistence, a failover to a
//! replica that never had it, `FUNCTION FLUSH`), once for all the calls that found it missing
//! together, on every primary of a Cluster.

use std::sync::atomic::{AtomicU64, Ordering};

use fred::{
    clients::Client,
    interfaces::FunctionInterface,
    prelude::{Error as RedisError, Value},
    types::{MultipleKeys, MultipleValues},
    util::sha1_hash,
};
use tokio::sync::Mutex;

/// One atomic operation of the Redis store, and the script that does it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Script {
    Acquire,
    Renew,
    Release,
    Describe,
    Leave,
    Queued,
    Status,
    Revoke,
    Purge,
    Replicas,
}

/// Redis answers `FCALL` of a function that no library on that server registers with this.
const NOT_LOADED: &str = "Function not found";
/// Stands for the library's hash in its code until the hash is known.
const VERSION: &str = "{version}";

impl Script {
    const ALL: [Script; 10] = [
        Script::Acquire,
        Script::Renew,
        Script::Release,
        Script::Describe,
        Script::Leave,
        Script::Queued,
        Script::Status,
        Script::Revoke,
        Script::Purge,
        Script::Replicas,
    ];

    /// The operation's name in metrics and errors, and the script's file name without `.lua`.
    pub(super) fn name(self) -> &'static str {
        match self {
            Script::Acquire => "acquire",
            Script::Renew => "renew",
            Script::Release => "release",
            Script::Describe => "describe",
            Script::Leave => "leave",
            Script::Queued => "queued",
            Script::Status => "status",
            Script::Revoke => "revoke",
            Script::Purge => "purge",
            Script::Replicas => "replicas",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Script::Acquire => include_str!("../scripts/acquire.lua"),
            Script::Renew => include_str!("../scripts/renew.lua"),
            Script::Release => include_str!("../scripts/release.lua"),
            Script::Describe => include_str!("../scripts/describe.lua"),
            Script::Leave => include_str!("../scripts/leave.lua"),
            Script::Queued => include_str!("../scripts/queued.lua"),
            Script::Status => include_str!("../scripts/status.lua"),
            Script::Revoke => include_str!("../scripts/revoke.lua"),
            Script::Purge => include_str!("../scripts/purge.lua"),
            Script::Replicas => include_str!("../scripts/replicas.lua"),
        }
    }

    /// The function's flags. Without `allow-oom` Redis refuses to start a function while it is
    /// over `maxmemory`: only a grant adds data, and the scripts that keep or free what exists
    /// (renewing, releasing, leaving, revoking, purging) must still run then. The reads are
    /// `no-writes`.
    fn flags(self) -> &'static str {
        match self {
            Script::Acquire => "",
            Script::Renew | Script::Release | Script::Leave | Script::Revoke | Script::Purge => {
                "'allow-oom'"
            }
            Script::Describe | Script::Queued | Script::Status | Script::Replicas => "'no-writes'",
        }
    }
}

/// The library's code and its functions' names, and the loads done so far.
pub(super) struct Library {
    code: String,
    /// `leased_<hash>_<script>`, in the order of [`Script::ALL`].
    functions: Vec<String>,
    /// Loads done by this replica; a call that found its function missing loads the library only
    /// if no load finished since the call started.
    loads: AtomicU64,
    loading: Mutex<()>,
}

impl Library {
    pub(super) fn new() -> Self {
        let mut code = format!(
            "#!lua name=leased_{VERSION}\n{}",
            include_str!("../scripts/prelude.lua")
        );
        // The scripts read KEYS and ARGV as EVAL gives them; a function gets them as arguments.
        for script in Script::ALL {
            code.push_str(&format!(
                "\nredis.register_function{{function_name = 'leased_{VERSION}_{}', \
                 flags = {{{}}}, callback = function(KEYS, ARGV)\n{}\nend}}\n",
                script.name(),
                script.flags(),
                script.source(),
            ));
        }
        let version = &sha1_hash(&code)[..12];
        Library {
            code: code.replace(VERSION, version),
            functions: Script::ALL
                .iter()
                .map(|script| format!("leased_{version}_{}", script.name()))
                .collect(),
            loads: AtomicU64::new(0),
            loading: Mutex::new(()),
        }
    }

    /// The library's name (`leased_<hash>`).
    pub(super) fn name(&self) -> &str {
        self.functions[0]
            .rsplit_once('_')
            .map_or("", |(library, _)| library)
    }

    /// Calls `script`'s function on `client`, loading the library first if it is missing there.
    pub(super) async fn call(
        &self,
        client: &Client,
        script: Script,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Value, RedisError> {
        let function = &self.functions[script as usize];
        let keys = MultipleKeys::from(keys);
        let args = MultipleValues::try_from(args)?;
        let loads_before = self.loads.load(Ordering::Acquire);
        match client
            .fcall(function.as_str(), keys.clone(), args.clone())
            .await
        {
            Err(error) if error.details().contains(NOT_LOADED) => {
                // Boxed, as is rare: the common call's future need not make room for it.
                Box::pin(self.load(client, loads_before)).await?;
                client.fcall(function.as_str(), keys, args).await
            }
            reply => reply,
        }
    }

    /// Loads the library on every primary, unless a load finished since `loads_before` was read:
    /// a burst of calls that all found it missing loads it once.
    async fn load(&self, client: &Client, loads_before: u64) -> Result<(), RedisError> {
        let _one_at_a_time = self.loading.lock().await;
        if self.loads.load(Ordering::Acquire) != loads_before {
            return Ok(());
        }
        client
            .function_load_cluster::<Value, _>(true, self.code.as_str())
            .await?;
        self.loads.fetch_add(1, Ordering::AcqRel);
        tracing::info!(library = self.name(), "loaded the scripts into Redis");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every function is registered once under the versioned name the calls use, and every script's
    /// body is in the code whole; the version changes with the code.
    #[test]
    fn the_library_registers_each_script_under_its_versioned_name() {
        let library = Library::new();
        let version = library.name().strip_prefix("leased_").unwrap();
        assert_eq!(version.len(), 12);
        assert!(
            library
                .code
                .starts_with(&format!("#!lua name=leased_{version}\n"))
        );
        for script in Script::ALL {
            let function = &library.functions[script as usize];
            assert_eq!(function, &format!("leased_{version}_{}", script.name()));
            let registered = format!("function_name = '{function}'");
            assert_eq!(library.code.matches(&registered).count(), 1, "{function}");
            assert!(library.code.contains(script.source()), "{function}");
        }
        assert!(!library.code.contains(VERSION));
    }
}
