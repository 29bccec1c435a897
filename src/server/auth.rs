//! Access control: bearer tokens from a JSON file (`--auth-tokens`), each allowed a set of lease
//! name prefixes and operations. Reloaded on SIGHUP; a stream already open looks its token up
//! again for each message and after each reload ([`StreamAccess`]), so that a token removed or
//! narrowed by a reload loses on open streams what it lost on new calls.
//!
//! ```json
//! { "tokens": [
//!     { "client": "payments", "token": "…", "prefixes": ["payments/"],
//!       "operations": ["acquire", "renew", "release", "describe"] } ] }
//! ```
//!
//! The operations: `acquire`, `renew`, `release`, `describe`, `watch`, `check` (CheckToken),
//! `list` and `revoke` (LeaseAdminService). A token may do only what it lists.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use serde::Deserialize;
use tokio::sync::watch;
use tonic::metadata::MetadataMap;

use crate::{
    error::{Error, Result},
    lease::{Caller, LeaseName, ListPrefix, Refusal},
};

/// What a token may be allowed to do. No token may do anything it does not list: in particular
/// `revoke` (ending someone else's lease) is only for tokens that name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Acquire,
    Renew,
    Release,
    Describe,
    Watch,
    /// CheckToken.
    Check,
    /// LeaseAdminService.List.
    List,
    /// LeaseAdminService.Revoke.
    Revoke,
}

impl Operation {
    /// Every operation, as the tokens file names them.
    pub const ALL: [Operation; 8] = [
        Operation::Acquire,
        Operation::Renew,
        Operation::Release,
        Operation::Describe,
        Operation::Watch,
        Operation::Check,
        Operation::List,
        Operation::Revoke,
    ];

    /// The name the tokens file gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Acquire => "acquire",
            Operation::Renew => "renew",
            Operation::Release => "release",
            Operation::Describe => "describe",
            Operation::Watch => "watch",
            Operation::Check => "check",
            Operation::List => "list",
            Operation::Revoke => "revoke",
        }
    }
}

/// One entry of the tokens file. Each field is read through a function that reports a wrong
/// value by the field's name, never by the value (see [`parse_tokens_file`]); unknown fields
/// are refused before, by [`check_shape`].
#[derive(Clone, Deserialize)]
struct TokenEntry {
    /// Who holds the token, for logs (the token itself is never logged).
    #[serde(deserialize_with = "client")]
    client: String,
    #[serde(deserialize_with = "token")]
    token: String,
    /// Lease names this token may touch start with one of these ("" allows every name).
    #[serde(deserialize_with = "prefixes")]
    prefixes: Vec<String>,
    #[serde(deserialize_with = "operations")]
    operations: Vec<Operation>,
}

/// The fields of a [`TokenEntry`], as the file names them.
const ENTRY_FIELDS: [&str; 4] = ["client", "token", "prefixes", "operations"];

#[derive(Deserialize)]
struct TokensFile {
    tokens: Vec<TokenEntry>,
}

/// The tokens file, or what is wrong with it, without ever a value from it: a value in the
/// wrong place may be a token (serde's messages quote it: "unknown variant `<the token>`" for
/// a token pasted into `operations`), and the message goes to the log. In three steps:
/// - the syntax, whose messages (serde_json's fixed texts) give the line and column;
/// - the shape: an object of `tokens`, a list of objects with only the known fields (serde's
///   messages for these quote the value or the unknown field's name, which may be the token);
///   the message names the entry, by its position in the list;
/// - the values, each read by its field's function ([`field`]): the message names the field,
///   and serde_json adds the line and column.
fn parse_tokens_file(text: &str) -> Result<TokensFile, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|error| error.to_string())?;
    check_shape(&value)?;
    serde_json::from_str(text).map_err(|error| error.to_string())
}

/// Refuses a file that is not `{"tokens": [{...}, ...]}` with only the known fields, naming the
/// entry and never a value or an unknown field's name.
fn check_shape(file: &serde_json::Value) -> Result<(), String> {
    let Some(file) = file.as_object() else {
        return Err("it must be a JSON object with a `tokens` list".to_owned());
    };
    if file.keys().any(|key| key != "tokens") {
        return Err("it has a field other than `tokens` (not named: it may be a token)".to_owned());
    }
    let Some(entries) = file.get("tokens").map(serde_json::Value::as_array) else {
        return Err("missing field `tokens`".to_owned());
    };
    let Some(entries) = entries else {
        return Err("`tokens` must be a list of token entries".to_owned());
    };
    for (index, entry) in entries.iter().enumerate() {
        let number = index + 1;
        let Some(entry) = entry.as_object() else {
            return Err(format!("entry {number} of `tokens` is not an object"));
        };
        if entry
            .keys()
            .any(|key| !ENTRY_FIELDS.contains(&key.as_str()))
        {
            return Err(format!(
                "entry {number} of `tokens` has a field other than {} (not named: it may be a \
                 token)",
                ENTRY_FIELDS.join(", ")
            ));
        }
    }
    Ok(())
}

/// Reads a field's value as `T`, or fails naming the field and what it must be, never the value
/// (serde_json adds the line and column).
fn field<'de, D, T>(
    deserializer: D,
    name: &str,
    must_be: impl std::fmt::Display,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    // Fails only on a syntax error, whose message quotes nothing.
    let value = serde_json::Value::deserialize(deserializer)?;
    serde_json::from_value(value)
        .map_err(|_| serde::de::Error::custom(format_args!("`{name}` must be {must_be}")))
}

fn client<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    field(deserializer, "client", "a string")
}

fn token<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    field(deserializer, "token", "a string")
}

fn prefixes<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    field(deserializer, "prefixes", "a list of strings")
}

fn operations<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Operation>, D::Error> {
    let names = Operation::ALL.map(Operation::as_str).join(", ");
    field(
        deserializer,
        "operations",
        format_args!("a list of: {names}"),
    )
}

/// A client identified by its token: what it may do.
#[derive(Clone)]
pub struct Principal {
    pub client: String,
    /// The token it presented, to look it up again after a reload; never logged.
    token: Arc<str>,
    prefixes: Vec<String>,
    operations: Vec<Operation>,
}

/// Shows what the token may do, never the token.
impl std::fmt::Debug for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principal")
            .field("client", &self.client)
            .field("prefixes", &self.prefixes)
            .field("operations", &self.operations)
            .finish_non_exhaustive()
    }
}

impl Principal {
    /// Allows `operation` on `name`, or answers `PERMISSION_DENIED`.
    pub fn authorize(&self, operation: Operation, name: &LeaseName) -> Result<()> {
        self.authorize_operation(operation)?;
        if !self.prefixes.iter().any(|p| name.as_str().starts_with(p)) {
            return Err(Error::Refused(Refusal::NameNotAllowed {
                client: self.client.clone(),
                name: name.to_string(),
            }));
        }
        Ok(())
    }

    /// The lease name prefixes this token may use.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// The operations this token may do.
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// The caller that grants of its own lease ids are bound to: the token's name.
    pub fn caller(&self) -> Caller {
        Caller::token(&self.client)
    }

    /// What identifies the token in per-token bounds (never logged).
    pub fn token_key(&self) -> Arc<str> {
        self.token.clone()
    }

    /// Allows listing the names under `prefix`: only if every such name is one this token may
    /// use, i.e. `prefix` starts with one of its prefixes.
    pub fn authorize_list(&self, prefix: &ListPrefix) -> Result<()> {
        self.authorize_operation(Operation::List)?;
        if !self.prefixes.iter().any(|p| prefix.as_str().starts_with(p)) {
            return Err(Error::Refused(Refusal::ListPrefixNotAllowed {
                client: self.client.clone(),
                prefix: prefix.as_str().to_owned(),
                prefixes: self.prefixes.clone(),
            }));
        }
        Ok(())
    }

    /// Allows `operation` on some names, or answers `PERMISSION_DENIED`.
    pub fn authorize_operation(&self, operation: Operation) -> Result<()> {
        if !self.operations.contains(&operation) {
            return Err(Error::Refused(Refusal::OperationNotAllowed {
                client: self.client.clone(),
                operation: operation.as_str(),
            }));
        }
        Ok(())
    }
}

/// The tokens in force, reloadable.
pub struct Authenticator {
    path: PathBuf,
    by_token: RwLock<Arc<HashMap<Arc<str>, Principal>>>,
    /// Counts the reloads that took effect; open streams wait on it.
    reloads: watch::Sender<u64>,
}

/// Names the file and how many tokens it holds, never a token.
impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tokens = self.by_token.read().map_or(0, |tokens| tokens.len());
        f.debug_struct("Authenticator")
            .field("path", &self.path)
            .field("tokens", &tokens)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// Loads the tokens file; fails with a message naming the file and the problem.
    pub fn load(path: &Path) -> Result<Self, String> {
        Ok(Authenticator {
            path: path.to_owned(),
            by_token: RwLock::new(Arc::new(read_tokens(path)?)),
            reloads: watch::Sender::new(0),
        })
    }

    /// Re-reads the file. On error the tokens in force stay, and the error is returned. Open
    /// streams check their tokens against the new ones.
    pub fn reload(&self) -> Result<usize, String> {
        let tokens = read_tokens(&self.path)?;
        let count = tokens.len();
        *self.by_token.write().expect("auth lock poisoned") = Arc::new(tokens);
        self.reloads.send_modify(|reloads| *reloads += 1);
        Ok(count)
    }

    /// `check` of what `principal`'s token may do under the tokens in force now (read in place:
    /// this runs for every renewal of a stream), or `UNAUTHENTICATED` once a reload removed it.
    fn check_current(
        &self,
        principal: &Principal,
        check: impl FnOnce(&Principal) -> Result<()>,
    ) -> Result<()> {
        let tokens = self.by_token.read().expect("auth lock poisoned");
        let current = tokens
            .get(&principal.token)
            .ok_or(Error::Refused(Refusal::TokenRevoked))?;
        check(current)
    }

    fn lookup(&self, token: &str) -> Option<Principal> {
        let tokens = self.by_token.read().expect("auth lock poisoned").clone();
        tokens.get(token).cloned()
    }

    /// The principal behind `authorization: Bearer TOKEN`, or `UNAUTHENTICATED`.
    pub fn authenticate(&self, metadata: &MetadataMap) -> Result<Principal> {
        let header = metadata
            .get("authorization")
            .ok_or(Error::Refused(Refusal::MissingToken))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or(Error::Refused(Refusal::MalformedAuthorization))?;
        self.lookup(token.trim())
            .ok_or(Error::Refused(Refusal::UnknownToken))
    }
}

/// The caller of an open stream (Renew, Watch, a waiting Acquire), when access control is on:
/// its token is looked up again for each message and after each reload, so that removing or
/// narrowing a token ends what it may no longer do on streams it already opened.
pub struct StreamAccess {
    auth: Arc<Authenticator>,
    principal: Principal,
    /// The principal's [`Caller`], made once for the stream's every message.
    caller: Caller,
    reloads: watch::Receiver<u64>,
}

impl StreamAccess {
    pub fn new(auth: Arc<Authenticator>, principal: Principal) -> Self {
        let reloads = auth.reloads.subscribe();
        StreamAccess {
            auth,
            caller: principal.caller(),
            principal,
            reloads,
        }
    }

    /// Allows `operation` on `name` under the tokens in force now.
    pub fn authorize(&self, operation: Operation, name: &LeaseName) -> Result<()> {
        self.auth.check_current(&self.principal, |current| {
            current.authorize(operation, name)
        })
    }

    /// Allows `operation` on some names under the tokens in force now.
    pub fn authorize_operation(&self, operation: Operation) -> Result<()> {
        self.auth.check_current(&self.principal, |current| {
            current.authorize_operation(operation)
        })
    }

    /// Waits for the next reload of the tokens file (for ever, if none can come).
    pub async fn reloaded(&mut self) {
        if self.reloads.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// [`StreamAccess::authorize`], or allowed when access control is off (`None`).
pub fn authorize_stream(
    access: &Option<StreamAccess>,
    operation: Operation,
    name: &LeaseName,
) -> Result<()> {
    access
        .as_ref()
        .map_or(Ok(()), |access| access.authorize(operation, name))
}

/// Who calls, when access control is on (`None`: it is off, and the caller is anyone).
pub fn caller_of(principal: &Option<Principal>) -> Caller {
    principal
        .as_ref()
        .map_or_else(Caller::anyone, Principal::caller)
}

/// Who calls on an open stream (`None`: access control is off, and the caller is anyone).
pub fn stream_caller(access: &Option<StreamAccess>) -> Caller {
    access
        .as_ref()
        .map_or_else(Caller::anyone, |access| access.caller.clone())
}

/// [`StreamAccess::reloaded`], or never when access control is off (`None`).
pub async fn reloaded(access: &mut Option<StreamAccess>) {
    match access {
        Some(access) => access.reloaded().await,
        None => std::future::pending().await,
    }
}

fn read_tokens(path: &Path) -> Result<HashMap<Arc<str>, Principal>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read auth tokens {}: {e}", path.display()))?;
    let file = parse_tokens_file(&text)
        .map_err(|problem| format!("invalid auth tokens file {}: {problem}", path.display()))?;
    let mut by_token = HashMap::new();
    for entry in file.tokens {
        if entry.token.len() < 16 {
            return Err(format!(
                "auth token of {:?} in {} is shorter than 16 characters",
                entry.client,
                path.display()
            ));
        }
        let token: Arc<str> = entry.token.into();
        let principal = Principal {
            client: entry.client,
            token: token.clone(),
            prefixes: entry.prefixes,
            operations: entry.operations,
        };
        if by_token.insert(token, principal).is_some() {
            return Err(format!("a token appears twice in {}", path.display()));
        }
    }
    Ok(by_token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::limits::{parse_list_prefix, parse_name};

    fn principal(prefixes: &[&str], operations: &[Operation]) -> Principal {
        Principal {
            client: "ops".into(),
            token: "0123456789abcdef".into(),
            prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
            operations: operations.to_vec(),
        }
    }

    /// A token lists what it may do; nothing else is implied: describe gives no watch, and
    /// nothing gives revoke but `revoke` itself.
    #[test]
    fn operations_are_only_those_listed() {
        let reader = principal(
            &[""],
            &[
                Operation::Acquire,
                Operation::Renew,
                Operation::Release,
                Operation::Describe,
            ],
        );
        let name = parse_name("jobs/nightly").unwrap();
        assert!(reader.authorize(Operation::Describe, &name).is_ok());
        for denied in [Operation::Watch, Operation::Check, Operation::Revoke] {
            let error = reader.authorize(denied, &name).unwrap_err();
            assert!(
                matches!(
                    &error,
                    Error::Refused(Refusal::OperationNotAllowed { client, operation })
                        if client == "ops" && *operation == denied.as_str()
                ),
                "{error:?}"
            );
        }
        let revoker = principal(&["jobs/"], &[Operation::Revoke]);
        assert!(revoker.authorize(Operation::Revoke, &name).is_ok());
        let elsewhere = parse_name("payments/ledger").unwrap();
        assert!(revoker.authorize(Operation::Revoke, &elsewhere).is_err());
    }

    /// Listing a prefix needs every name under it to be the token's.
    #[test]
    fn list_stays_inside_the_token_prefixes() {
        let lister = principal(&["payments/"], &[Operation::List]);
        let list = |prefix: &str| lister.authorize_list(&parse_list_prefix(prefix).unwrap());
        assert!(list("payments/").is_ok());
        assert!(list("payments/eu").is_ok());
        assert!(list("").is_err());
        assert!(list("pay").is_err());
        assert!(list("jobs/").is_err());
        let no_list = principal(&[""], &[Operation::Describe]);
        assert!(
            no_list
                .authorize_list(&parse_list_prefix("").unwrap())
                .is_err()
        );
    }

    /// No error about the tokens file quotes a value or an unknown field's name from it, where
    /// a token may have been pasted: each names the line and field, or the entry, instead.
    #[test]
    fn tokens_file_errors_never_quote_a_value() {
        const SECRET: &str = "SuperSecretToken-9f8e7d6c5b4a3210";
        let entry = |field: &str, value: &str| {
            let mut fields = serde_json::Map::new();
            for name in ENTRY_FIELDS {
                let fine = match name {
                    "client" => serde_json::json!("payments"),
                    "token" => serde_json::json!("payments-token-0123456789"),
                    "prefixes" => serde_json::json!(["payments/"]),
                    _ => serde_json::json!(["acquire"]),
                };
                fields.insert(name.to_owned(), fine);
            }
            fields.insert(field.to_owned(), serde_json::from_str(value).unwrap());
            format!(
                "{{\n  \"tokens\": [\n    {}\n  ]\n}}",
                serde_json::Value::from(fields)
            )
        };
        let cases = [
            (
                entry("operations", &format!(r#"["acquire", "{SECRET}"]"#)),
                "`operations` must be a list of: acquire, renew, release, describe, watch, \
                 check, list, revoke at line 3",
            ),
            (
                entry("token", "12345678901234567890123"),
                "`token` must be a string at line 3",
            ),
            (
                entry("prefixes", &format!("\"{SECRET}\"")),
                "`prefixes` must be a list of strings at line 3",
            ),
            (
                entry("client", &format!(r#"{{"{SECRET}": 1}}"#)),
                "`client` must be a string at line 3",
            ),
            (
                entry(SECRET, "1"),
                "entry 1 of `tokens` has a field other than client, token, prefixes, operations",
            ),
            (
                format!(r#"{{"tokens": [], "{SECRET}": 1}}"#),
                "it has a field other than `tokens`",
            ),
            (format!("\"{SECRET}\""), "it must be a JSON object"),
            (
                format!(r#"{{"tokens": "{SECRET}"}}"#),
                "`tokens` must be a list of token entries",
            ),
            (
                format!(r#"{{"tokens": ["{SECRET}"]}}"#),
                "entry 1 of `tokens` is not an object",
            ),
            (
                format!(r#"{{"tokens": [{{"token": "{SECRET}"#),
                "EOF while parsing a string at line 1",
            ),
            (
                format!(r#"{{"tokens": [{{"token": "{SECRET}\q"}}]}}"#),
                "invalid escape at line 1",
            ),
            (
                format!(r#"{{"tokens": [{{"token": "{SECRET}"}}]}}"#),
                "missing field `client`",
            ),
            (
                format!(r#"{{"tokens": [{{"token": "{SECRET}", "token": "{SECRET}"}}]}}"#),
                "duplicate field `token`",
            ),
        ];
        for (file, expected) in cases {
            let Err(error) = parse_tokens_file(&file) else {
                panic!("accepted: {file}");
            };
            assert!(error.starts_with(expected), "{file}\n{error}");
            for part in [
                SECRET,
                "9f8e7d6c5b4a3210",
                "12345678901234567890123",
                "1.23",
            ] {
                assert!(!error.contains(part), "{file}\n{error}");
            }
        }
    }

    /// The tokens file spells the new operations in lowercase.
    #[test]
    fn tokens_file_names_the_new_operations() {
        let entry: TokenEntry = serde_json::from_str(
            r#"{"client": "c", "token": "0123456789abcdef", "prefixes": [""],
                "operations": ["watch", "check", "list", "revoke"]}"#,
        )
        .unwrap();
        assert_eq!(
            entry.operations,
            [
                Operation::Watch,
                Operation::Check,
                Operation::List,
                Operation::Revoke
            ]
        );
    }
}
