//! Redis as the resource (feature `fencing-redis`), over fred: fenced [`set`], [`hset`] and
//! [`del`], the check alone ([`fence`]), all through the `leased_fencing` Functions library
//! (Redis 7), which [`load_library`] loads; and [`RedisMarks`], a mark store for the gRPC
//! middleware.
//!
//! Each call names a mark key first: a string key holding the largest token accepted for the
//! resource it guards (one mark per resource, e.g. `fence:{orders}` for the keys `{orders}:*`: in
//! a Cluster the mark and the keys must share a hash slot). A token smaller than the mark is
//! refused and nothing is written; otherwise the token becomes the mark and the write is done, in
//! one atomic call.
//!
//! ```no_run
//! # async fn write(redis: &fred::clients::Client, token: u64) -> Result<(), Box<dyn std::error::Error>> {
//! use leased::fencing::redis;
//!
//! redis::load_library(redis).await?; // once per Redis, e.g. at startup
//! // Refused (FenceError::Stale) if a newer holder of the lease already wrote under this mark.
//! redis::set(redis, "fence:{orders}", "{orders}:total", token, "42", &[]).await?;
//! # Ok(()) }
//! ```
//!
//! The library compares tokens exactly as decimal strings, so every token from 1 to
//! [`MAX_TOKEN`](super::MAX_TOKEN) (2^63 - 1, Redis's largest integer) works. The marks are as
//! durable as the Redis's data: with no persistence, a restart forgets them.

use fred::{
    interfaces::FunctionInterface,
    types::{Key, Value},
};

use super::{FenceError, FenceMarks, check_token, mark_in_stale_message, prefixed};

/// `fencing/redis/leased_fencing.lua`: the `leased_fencing` library of Redis Functions.
pub const LIBRARY: &str = include_str!("../../fencing/redis/leased_fencing.lua");

/// The first word of the error of a stale token: a newer holder wrote under the mark.
pub const STALE_CODE: &str = "STALETOKEN";

/// The first word of the error of a bad token (not 1 to 2^63 - 1 in canonical decimal).
pub const BAD_TOKEN_CODE: &str = "BADTOKEN";

/// Loads (or replaces) the `leased_fencing` library: `FUNCTION LOAD REPLACE`. Functions are
/// persisted and replicated with the data; load it again after an upgrade of leased. In a
/// Cluster, load it on every primary (fred's `function_load_cluster`).
pub async fn load_library<C: FunctionInterface + Sync>(client: &C) -> Result<(), FenceError> {
    client
        .function_load::<Value, _>(true, LIBRARY)
        .await
        .map(drop)
        .map_err(|error| FenceError::Store(error.to_string()))
}

/// Checks `token` against the mark and records it, writing nothing else: `FCALL leased_fence 1
/// <mark> <token>`. Answers the mark, now `token`.
pub async fn fence<C: FunctionInterface + Sync>(
    client: &C,
    mark: &str,
    token: u64,
) -> Result<u64, FenceError> {
    let reply = call(client, "leased_fence", mark, &[], token, Vec::new()).await?;
    reply
        .as_str()
        .and_then(|mark| mark.parse().ok())
        .ok_or_else(|| FenceError::Store(format!("leased_fence answered {reply:?}, not a token")))
}

/// `SET key value [options]` if `token` is not below the mark: `FCALL leased_set 2 <mark> <key>
/// <token> <value> [options]`, e.g. `&["PX", "5000"]` or `&["GET"]`. Answers SET's reply.
pub async fn set<C: FunctionInterface + Sync>(
    client: &C,
    mark: &str,
    key: &str,
    token: u64,
    value: impl Into<Value>,
    options: &[&str],
) -> Result<Value, FenceError> {
    let mut args = vec![value.into()];
    args.extend(options.iter().map(|option| Value::from(*option)));
    call(client, "leased_set", mark, &[key], token, args).await
}

/// `HSET key field value ...` if `token` is not below the mark: `FCALL leased_hset 2 <mark>
/// <key> <token> <field> <value> ...`. Answers how many fields were added.
pub async fn hset<C: FunctionInterface + Sync>(
    client: &C,
    mark: &str,
    key: &str,
    token: u64,
    fields: &[(&str, &str)],
) -> Result<i64, FenceError> {
    if fields.is_empty() {
        return Err(FenceError::Invalid(
            "fields must hold at least one field and its value".into(),
        ));
    }
    let args = fields
        .iter()
        .flat_map(|(field, value)| [Value::from(*field), Value::from(*value)])
        .collect();
    let reply = call(client, "leased_hset", mark, &[key], token, args).await?;
    integer(reply)
}

/// `DEL key ...` if `token` is not below the mark: `FCALL leased_del N <mark> <key>... <token>`.
/// Answers how many keys were deleted.
pub async fn del<C: FunctionInterface + Sync>(
    client: &C,
    mark: &str,
    keys: &[&str],
    token: u64,
) -> Result<i64, FenceError> {
    if keys.is_empty() {
        return Err(FenceError::Invalid(
            "keys must name at least one key".into(),
        ));
    }
    let reply = call(client, "leased_del", mark, keys, token, Vec::new()).await?;
    integer(reply)
}

/// `FCALL function <1 + keys> <mark> <keys> <token> <args>`, its errors as [`FenceError`]s.
async fn call<C: FunctionInterface + Sync>(
    client: &C,
    function: &'static str,
    mark: &str,
    keys: &[&str],
    token: u64,
    args: Vec<Value>,
) -> Result<Value, FenceError> {
    check_token(token).map_err(|bad| FenceError::Invalid(format!("token {bad}")))?;
    let all_keys: Vec<Key> = std::iter::once(mark)
        .chain(keys.iter().copied())
        .map(Key::from)
        .collect();
    let all_args: Vec<Value> = std::iter::once(Value::from(token.to_string()))
        .chain(args)
        .collect();
    client
        .fcall::<Value, _, _, _>(function, all_keys, all_args)
        .await
        .map_err(|error| fence_error(&error, mark, token))
}

/// A fred error of a fenced call as a [`FenceError`]: `STALETOKEN` is [`FenceError::Stale`] (the
/// mark read from the message; the mark key as `resource`), `BADTOKEN` [`FenceError::Invalid`],
/// anything else (the connection, a Redis without the library loaded) [`FenceError::Store`].
pub fn fence_error(error: &fred::error::Error, mark: &str, token: u64) -> FenceError {
    let message = error.details();
    let code = message.split_whitespace().next().unwrap_or_default();
    if code == STALE_CODE
        && let Some(seen) = mark_in_stale_message(message)
    {
        return FenceError::Stale {
            resource: mark.to_owned(),
            token,
            mark: seen,
        };
    }
    if code == BAD_TOKEN_CODE {
        return FenceError::Invalid(message.trim_start_matches(BAD_TOKEN_CODE).trim().into());
    }
    FenceError::Store(error.to_string())
}

fn integer(reply: Value) -> Result<i64, FenceError> {
    reply.as_i64().ok_or_else(|| {
        FenceError::Store(format!("Redis answered {reply:?} where an integer was due"))
    })
}

/// High-water marks in Redis, for the gRPC middleware: each check is `FCALL leased_fence 1
/// <prefix><name> <token>`, so the mark outlives the service and is shared by all its replicas,
/// as durable as that Redis's data. The library must be loaded ([`load_library`]).
pub struct RedisMarks {
    client: fred::clients::Client,
    prefix: String,
}

impl RedisMarks {
    /// Marks kept through `client` (connected), in keys named as the lease names themselves.
    pub fn new(client: fred::clients::Client) -> Self {
        RedisMarks {
            client,
            prefix: String::new(),
        }
    }

    /// Puts `prefix` before each lease name to make its mark key (e.g. `"grpc-fence:"`), so that
    /// the marks never share a key with your data.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

impl FenceMarks for RedisMarks {
    async fn fence(&self, resource: &str, token: u64) -> Result<u64, FenceError> {
        prefixed::fence_prefixed(&self.prefix, resource, |key| async move {
            fence(&self.client, &key, token).await
        })
        .await
    }
}
