//! Access control: bearer tokens from a JSON file (`--auth-tokens`), each allowed a set of lease
//! name prefixes and operations. Reloaded on SIGHUP without touching open streams.
//!
//! ```json
//! { "tokens": [
//!     { "client": "payments", "token": "…", "prefixes": ["payments/"],
//!       "operations": ["acquire", "renew", "release", "describe"] } ] }
//! ```

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use serde::Deserialize;
use tonic::metadata::MetadataMap;

use crate::{
    error::{Error, Result},
    lease::LeaseName,
};

/// What a token may be allowed to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Acquire,
    Renew,
    Release,
    Describe,
}

/// One entry of the tokens file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    /// Who holds the token, for logs (the token itself is never logged).
    client: String,
    token: String,
    /// Lease names this token may touch start with one of these ("" allows every name).
    prefixes: Vec<String>,
    operations: Vec<Operation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: Vec<TokenEntry>,
}

/// A client identified by its token: what it may do.
#[derive(Clone, Debug)]
pub struct Principal {
    pub client: String,
    prefixes: Vec<String>,
    operations: Vec<Operation>,
}

impl Principal {
    /// Allows `operation` on `name`, or answers `PERMISSION_DENIED`.
    pub fn authorize(&self, operation: Operation, name: &LeaseName) -> Result<()> {
        if !self.operations.contains(&operation) {
            return Err(Error::PermissionDenied(format!(
                "token {:?} may not {operation:?}",
                self.client
            )));
        }
        if !self.prefixes.iter().any(|p| name.as_str().starts_with(p)) {
            return Err(Error::PermissionDenied(format!(
                "token {:?} may not use the lease name {name:?}",
                self.client
            )));
        }
        Ok(())
    }
}

/// The tokens in force, reloadable.
#[derive(Debug)]
pub struct Authenticator {
    path: PathBuf,
    by_token: RwLock<Arc<HashMap<String, Principal>>>,
}

impl Authenticator {
    /// Loads the tokens file; fails with a message naming the file and the problem.
    pub fn load(path: &Path) -> Result<Self, String> {
        Ok(Authenticator {
            path: path.to_owned(),
            by_token: RwLock::new(Arc::new(read_tokens(path)?)),
        })
    }

    /// Re-reads the file. On error the tokens in force stay, and the error is returned.
    pub fn reload(&self) -> Result<usize, String> {
        let tokens = read_tokens(&self.path)?;
        let count = tokens.len();
        *self.by_token.write().expect("auth lock poisoned") = Arc::new(tokens);
        Ok(count)
    }

    /// The principal behind `authorization: Bearer TOKEN`, or `UNAUTHENTICATED`.
    pub fn authenticate(&self, metadata: &MetadataMap) -> Result<Principal> {
        let header = metadata
            .get("authorization")
            .ok_or_else(|| Error::Unauthenticated("missing authorization: Bearer token".into()))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Error::Unauthenticated("authorization must be \"Bearer TOKEN\"".into())
            })?;
        let tokens = self.by_token.read().expect("auth lock poisoned").clone();
        tokens
            .get(token.trim())
            .cloned()
            .ok_or_else(|| Error::Unauthenticated("unknown token".into()))
    }
}

fn read_tokens(path: &Path) -> Result<HashMap<String, Principal>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read auth tokens {}: {e}", path.display()))?;
    let file: TokensFile = serde_json::from_str(&text)
        .map_err(|e| format!("invalid auth tokens file {}: {e}", path.display()))?;
    let mut by_token = HashMap::new();
    for entry in file.tokens {
        if entry.token.len() < 16 {
            return Err(format!(
                "auth token of {:?} in {} is shorter than 16 characters",
                entry.client,
                path.display()
            ));
        }
        let principal = Principal {
            client: entry.client,
            prefixes: entry.prefixes,
            operations: entry.operations,
        };
        if by_token.insert(entry.token, principal).is_some() {
            return Err(format!("a token appears twice in {}", path.display()));
        }
    }
    Ok(by_token)
}

/// Re-reads the tokens file on every SIGHUP; open streams keep their principal.
pub(super) async fn reload_on_sighup(auth: Arc<Authenticator>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot install a SIGHUP handler; auth tokens will not reload");
        return;
    };
    while hangups.recv().await.is_some() {
        match auth.reload() {
            Ok(count) => tracing::info!(tokens = count, "auth tokens reloaded"),
            Err(error) => tracing::error!(%error, "auth tokens not reloaded; the old ones stay"),
        }
    }
}
