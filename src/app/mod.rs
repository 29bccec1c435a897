//! `leased serve` wired together, the one place that knows every part: the settings
//! ([`ServeConfig`]) become the server's and the store's options, the store is chosen (Redis when a
//! URL is set, else the embedded store), the ports are bound, the tokens file reloads on SIGHUP,
//! and SIGTERM starts the drain. The parts themselves know nothing of flags.

mod fd_limit;

use std::{net::SocketAddr, sync::Arc};

use tokio::net::TcpListener;

use crate::{
    config::ServeConfig,
    error::StartupError,
    lease::{Limits, Replica, StoreEvents},
    server::{
        ConnectionLimits, FollowLimits, Listeners, ServerOptions, TlsFiles, auth::Authenticator,
    },
    shutdown::{self, Shutdown},
    store::{MemoryStore, RedisOptions, RedisStore, ReplicaWait, Store},
};

/// How many connections the kernel may queue for `accept`: tokio's default, 1024, overflowed
/// (SYNs dropped, clients retrying a second later) when thousands of clients connected at once,
/// as a fleet does after a restart. The kernel caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;

/// The `leased serve` process: raises the open-file limit, binds `--listen`, and serves until
/// SIGTERM or Ctrl-C, then drains.
pub async fn serve_until_signalled(config: ServeConfig) -> Result<(), StartupError> {
    // Refuse before binding: an exposed port should never open, even briefly.
    check_listen_address(&config, config.listen)?;
    // Each client connection is a file descriptor; the soft limit is often 1024.
    match fd_limit::raise_fd_limit() {
        Ok(limit) if limit.now > limit.before => {
            tracing::info!(
                from = limit.before,
                to = limit.now,
                "raised the open-file limit"
            )
        }
        Ok(limit) => tracing::info!(open_file_limit = limit.now, "open-file limit"),
        Err(error) => tracing::warn!(%error, "cannot read or raise the open-file limit"),
    }
    let listener = bind(config.listen, "--listen").await?;
    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(async move {
        wait_for_termination().await;
        tracing::info!("termination signal received");
        trigger.fire();
        // Keep the trigger alive: the server is draining.
        std::future::pending::<()>().await;
    });
    serve(config, listener, shutdown).await
}

/// SIGTERM (Kubernetes, systemd) or Ctrl-C.
async fn wait_for_termination() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigterm = signal(SignalKind::terminate()).expect("cannot install a SIGTERM handler");
    tokio::select! {
        _ = sigterm.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Runs `leased serve` on `listener` until `shutdown` fires: on Redis when a URL is configured,
/// otherwise on the embedded store. Binds the metrics and health ports if configured. For
/// embedding the server (the tests do) as well as for the binary.
pub async fn serve(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), StartupError> {
    let options = server_options(&config)?;
    check_listen_address(
        &config,
        listener.local_addr().map_err(StartupError::Socket)?,
    )?;
    // The console carries the same data and the same bearer tokens as the gRPC port.
    if let Some(console) = config.console_listen {
        check_listen_address(&config, console)?;
    }
    if let Some(auth) = &options.auth {
        tokio::spawn(reload_on_sighup(auth.clone()));
    }
    let listeners = Listeners {
        grpc: listener,
        health: bind_optional(config.health_listen, "--health-listen").await?,
        metrics: bind_optional(config.metrics_listen, "--metrics-listen").await?,
        console: bind_optional(config.console_listen, "--console-listen").await?,
    };
    let events = StoreEvents::new();
    let store = match redis_options(&config)? {
        Some(redis) => {
            tracing::info!(store = "redis", "starting");
            let store = RedisStore::connect(&redis, events.clone())?;
            store.check_version(redis.command_timeout).await?;
            store.check_layout(redis.command_timeout).await?;
            store
                .check_eviction_policy(redis.command_timeout, config.redis_allow_eviction)
                .await?;
            store.check_replicas(redis.command_timeout).await;
            Store::Redis(store)
        }
        None => {
            tracing::info!(
                store = "memory",
                "starting on the embedded store: leases live in this process only"
            );
            let store = MemoryStore::new(config.max_waiters_per_name, events.clone());
            Store::Memory(store)
        }
    };
    crate::server::run(
        Replica::new(Arc::new(store), events),
        options,
        listeners,
        shutdown,
    )
    .await
}

/// Re-reads the tokens file on every SIGHUP; open streams check their tokens against it.
async fn reload_on_sighup(auth: Arc<Authenticator>) {
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

/// Refuses a non-loopback `address` without access control unless `--insecure-listen`.
fn check_listen_address(config: &ServeConfig, address: SocketAddr) -> Result<(), StartupError> {
    if config.auth_tokens.is_none() && !address.ip().is_loopback() && !config.insecure_listen {
        return Err(StartupError::InsecureListen { address });
    }
    Ok(())
}

/// The gRPC server's settings; loads the auth tokens file.
fn server_options(config: &ServeConfig) -> Result<ServerOptions, StartupError> {
    let auth = match &config.auth_tokens {
        Some(path) => Some(Arc::new(
            Authenticator::load(path).map_err(StartupError::AuthTokens)?,
        )),
        None => None,
    };
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: config.tls_client_ca.clone(),
        }),
        (None, None) => None,
        _ => return Err(StartupError::Config("--tls-cert and --tls-key go together")),
    };
    Ok(ServerOptions {
        limits: Limits {
            max_ttl: config.max_ttl,
            max_wait: config.max_wait,
            max_limit: config.max_limit,
        },
        max_concurrent_streams: config.max_concurrent_streams,
        max_message_bytes: config.max_message_bytes,
        max_leases_per_renew_stream: config.max_leases_per_stream,
        followed_names: FollowLimits {
            per_replica: config.max_followed_names as usize,
            per_token: config.max_followed_names_per_token as usize,
        },
        connections: connection_limits(config)?,
        drain_grace: config.drain_grace,
        tls,
        auth,
        console_hosts: config.console_hosts.clone(),
        metrics_hosts: config.metrics_hosts.clone(),
        ..ServerOptions::default()
    })
}

/// `--max-connections` (or its default, within the open-file limit) and `--handshake-timeout`.
/// Warns if an explicit limit leaves no room in the open-file limit: past it, `accept` fails and
/// waits instead of refusing.
fn connection_limits(config: &ServeConfig) -> Result<ConnectionLimits, StartupError> {
    if config.handshake_timeout.is_zero() {
        return Err(StartupError::Config("--handshake-timeout must be above 0"));
    }
    let fd_limit = fd_limit::fd_limit().unwrap_or(u64::MAX);
    let room = fd_limit::connections_within(fd_limit);
    let max_connections = match config.max_connections {
        Some(0) => return Err(StartupError::Config("--max-connections must be at least 1")),
        Some(max) => {
            if max > room {
                tracing::warn!(
                    max_connections = max,
                    fd_limit,
                    "--max-connections is above what the open-file limit leaves room for; \
                     raise the limit (ulimit -n) or lower --max-connections"
                );
            }
            max
        }
        // The default, or less if the open-file limit is lower.
        None => ConnectionLimits::default().max_connections.min(room).max(1),
    };
    Ok(ConnectionLimits {
        max_connections,
        handshake_timeout: config.handshake_timeout,
    })
}

/// The Redis store's settings, if a Redis URL is set. `--redis-wait-replicas` needs one (the
/// embedded store has no replicas) and a WAIT timeout above 0 (`WAIT n 0` would block forever).
fn redis_options(config: &ServeConfig) -> Result<Option<RedisOptions>, StartupError> {
    let wait_timeout = config.redis_wait_timeout.unwrap_or(config.redis_timeout);
    if wait_timeout.is_zero() {
        return Err(StartupError::Config("--redis-wait-timeout must be above 0"));
    }
    let Some(url) = &config.redis_url else {
        if config.redis_wait_replicas > 0 {
            return Err(StartupError::Config(
                "--redis-wait-replicas needs --redis-url: the embedded store has no replicas",
            ));
        }
        return Ok(None);
    };
    Ok(Some(RedisOptions {
        url: url.as_str().to_owned(),
        command_timeout: config.redis_timeout,
        pool_size: config.redis_pool_size,
        key_prefix: config.key_prefix.clone(),
        max_waiters_per_name: config.max_waiters_per_name,
        counter_keep: config.redis_counter_keep,
        wait_for_replicas: ReplicaWait {
            replicas: config.redis_wait_replicas,
            timeout: wait_timeout,
        },
    }))
}

/// Binds `address`; `purpose` names the flag that set it, for the error.
async fn bind(address: SocketAddr, purpose: &'static str) -> Result<TcpListener, StartupError> {
    let listen = || {
        let socket = match address {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        // As std's and tokio's own bind do: a restarted server can take its port back at once.
        socket.set_reuseaddr(true)?;
        socket.bind(address)?;
        socket.listen(LISTEN_BACKLOG)
    };
    listen().map_err(|source| StartupError::Listen {
        address,
        purpose,
        source,
    })
}

/// Binds an optional side port (`--health-listen`, `--metrics-listen`).
async fn bind_optional(
    address: Option<SocketAddr>,
    purpose: &'static str,
) -> Result<Option<TcpListener>, StartupError> {
    match address {
        Some(address) => Ok(Some(bind(address, purpose).await?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_loopback_listen_needs_auth_or_an_explicit_opt_in() {
        let everywhere: SocketAddr = "0.0.0.0:50051".parse().unwrap();
        let loopback: SocketAddr = "127.0.0.1:50051".parse().unwrap();
        let plain = ServeConfig::from_args(Vec::<String>::new()).unwrap();
        assert!(check_listen_address(&plain, loopback).is_ok());
        let refused = check_listen_address(&plain, everywhere)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("--insecure-listen"), "{refused}");
        let opted_in = ServeConfig::from_args(["--insecure-listen"]).unwrap();
        assert!(check_listen_address(&opted_in, everywhere).is_ok());
        let with_auth = ServeConfig::from_args(["--auth-tokens", "/tokens.json"]).unwrap();
        assert!(check_listen_address(&with_auth, everywhere).is_ok());
    }

    /// WAIT needs replicas (a Redis URL) and a timeout above 0 (`WAIT n 0` blocks forever); the
    /// WAIT timeout defaults to the Redis timeout.
    #[test]
    fn waiting_for_replicas_needs_redis_and_a_timeout() {
        let config = |args: &[&str]| ServeConfig::from_args(args.iter().copied()).unwrap();
        let refused = redis_options(&config(&["--redis-wait-replicas", "1"]))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("needs --redis-url"), "{refused}");
        let redis = ["--redis-url", "redis://127.0.0.1:6379"];
        let zero = config(&[&redis[..], &["--redis-wait-timeout", "0s"]].concat());
        assert!(redis_options(&zero).is_err());
        let waiting = config(&[&redis[..], &["--redis-wait-replicas", "1"]].concat());
        let options = redis_options(&waiting).unwrap().unwrap();
        assert_eq!(
            options.wait_for_replicas,
            ReplicaWait {
                replicas: 1,
                timeout: waiting.redis_timeout
            }
        );
    }
}
