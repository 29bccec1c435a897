//! The operator's console (`--console-listen`): its HTTP API and guards here, and the page itself
//! in Chromium (`tests/console/browser.test.mjs`, Playwright from `playwright-core`), both against
//! real servers on a real `redis-server`. `scripts/test.sh` installs Chromium and the npm
//! package; `cargo test --test integration console::console_figures -- --ignored --nocapture`
//! prints the console's figures (load time with 1,000 leases, events per second a tab follows).

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::common::*;
use leased::{
    config::ServeConfig,
    proto::{AcquireRequest, Granted, ReleaseRequest, lease_service_client::LeaseServiceClient},
};
use tonic::transport::Channel;

const ADMIN_TOKEN: &str = "console-admin-token-3f1c9a";
const VIEWER_TOKEN: &str = "console-viewer-token-77b2e0";

/// A server on `redis` with its console on a port of its own; with access control if `tokens`;
/// with `extra` flags of `leased serve`.
async fn server_with_console(
    redis: &RedisServer,
    tokens: Option<&Path>,
    extra: &[&str],
) -> (Leased, SocketAddr) {
    let console: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args = vec![
        "--redis-url".to_owned(),
        redis.url(),
        "--redis-timeout".to_owned(),
        "1s".to_owned(),
        "--console-listen".to_owned(),
        console.to_string(),
    ];
    if let Some(tokens) = tokens {
        args.extend(["--auth-tokens".to_owned(), tokens.display().to_string()]);
    }
    args.extend(extra.iter().map(|arg| arg.to_string()));
    let server = Leased::start_with(ServeConfig::from_args(args).unwrap()).await;
    (server, console)
}

fn tokens_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!("leased-console-tokens-{}.json", free_port()));
    let tokens = serde_json::json!({ "tokens": [
        { "client": "admin", "token": ADMIN_TOKEN, "prefixes": [""],
          "operations": ["acquire", "renew", "release", "describe", "watch", "list", "revoke"] },
        { "client": "viewer", "token": VIEWER_TOKEN, "prefixes": ["console/"],
          "operations": ["describe", "watch", "list"] },
    ]});
    std::fs::write(&path, tokens.to_string()).unwrap();
    path
}

async fn acquire_once(
    client: &mut LeaseServiceClient<Channel>,
    name: &str,
    holder: &str,
    ttl_ms: i64,
) -> Granted {
    let request = AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms,
        ..AcquireRequest::default()
    };
    must_acquire_request(client, request).await
}

/// One HTTP/1.1 request on a new connection; the status and the body.
fn http(console: SocketAddr, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(console).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// `method path` to `address` with `Host: host`; with no host, an HTTP/1.0 request without one.
fn request_as(
    address: SocketAddr,
    host: Option<&str>,
    method: &str,
    path: &str,
    extra_headers: &str,
    body: &str,
) -> (u16, String) {
    let (version, host) = match host {
        Some(host) => ("HTTP/1.1", format!("Host: {host}\r\n")),
        None => ("HTTP/1.0", String::new()),
    };
    http(
        address,
        &format!(
            "{method} {path} {version}\r\n{host}{extra_headers}Content-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

fn get(console: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let authorization = token.map_or(String::new(), |token| {
        format!("Authorization: Bearer {token}\r\n")
    });
    let host = console.to_string();
    request_as(console, Some(&host), "GET", path, &authorization, "")
}

fn post_revoke(console: SocketAddr, extra_headers: &str, body: &str) -> (u16, String) {
    let host = console.to_string();
    request_as(
        console,
        Some(&host),
        "POST",
        "/api/revoke",
        extra_headers,
        body,
    )
}

/// The API answers what the gRPC handlers answer, with the gRPC code's name and an HTTP status;
/// a revoke must be JSON from the console's own origin; every response carries the policy.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_answers_as_the_grpc_handlers_do() {
    let redis = RedisServer::start();
    let (server, console) = server_with_console(&redis, None, &[]).await;
    let mut client = server.client().await;
    let granted = acquire_once(&mut client, "api/a", "worker <1>", 60_000).await;

    let (status, body) =
        tokio::task::spawn_blocking(move || get(console, "/api/leases?prefix=api/", None))
            .await
            .unwrap();
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["leases"][0]["name"], "api/a");
    assert_eq!(page["leases"][0]["holders"][0]["holder"], "worker <1>");
    assert_eq!(
        page["leases"][0]["holders"][0]["fencing_token"],
        granted.fencing_token.to_string()
    );

    let checks = tokio::task::spawn_blocking(move || {
        let bad_name = get(console, "/api/lease?name=", None);
        let bad_size = get(console, "/api/leases?page_size=100000", None);
        let unknown = get(console, "/api/nothing", None);
        let wrong_method = post_revoke(console, "", "");
        let form = post_revoke(
            console,
            "Content-Type: application/x-www-form-urlencoded\r\n",
            "name=api/a&reason=x",
        );
        let cross_site = post_revoke(
            console,
            "Content-Type: application/json\r\nOrigin: http://evil.example\r\n",
            r#"{"name":"api/a","reason":"x"}"#,
        );
        let page = http(
            console,
            &format!("GET / HTTP/1.1\r\nHost: {console}\r\nConnection: close\r\n\r\n"),
        );
        (
            bad_name,
            bad_size,
            unknown,
            wrong_method,
            form,
            cross_site,
            page,
        )
    })
    .await
    .unwrap();
    let (bad_name, bad_size, unknown, _wrong_method, form, cross_site, _page) = checks;
    assert_eq!(bad_name.0, 400);
    assert!(bad_name.1.contains("INVALID_ARGUMENT") && bad_name.1.contains("name"));
    assert_eq!(bad_size.0, 400);
    assert!(bad_size.1.contains("page_size"), "{}", bad_size.1);
    assert_eq!(unknown.0, 404);
    assert_eq!(form.0, 400);
    assert!(form.1.contains("content-type"), "{}", form.1);
    assert_eq!(cross_site.0, 403);

    // Nothing above revoked the lease.
    let held = describe(&mut client, "api/a").await;
    assert_eq!(held.fencing_token, granted.fencing_token);
    let (status, body) = tokio::task::spawn_blocking(move || {
        post_revoke(
            console,
            &format!("Content-Type: application/json\r\nOrigin: http://{console}\r\n"),
            r#"{"name":"api/a","reason":"from the test"}"#,
        )
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""revoked":true"#), "{body}");
    assert!(!describe(&mut client, "api/a").await.held);
    let _ = client
        .release(ReleaseRequest {
            name: "api/a".into(),
            lease_id: granted.lease_id,
        })
        .await;
}

/// The headers every answer carries, and the watch as server-sent events.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_is_served_with_a_strict_policy_and_the_watch_as_events() {
    let redis = RedisServer::start();
    let (server, console) = server_with_console(&redis, None, &[]).await;
    let head = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(console).unwrap();
        write!(
            stream,
            "GET / HTTP/1.1\r\nHost: {console}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    })
    .await
    .unwrap()
    .to_lowercase();
    for header in [
        "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self'",
        "x-content-type-options: nosniff",
        "x-frame-options: deny",
    ] {
        assert!(head.contains(header), "{header} in\n{head}");
    }

    let watch = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(console).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET /api/watch?name=sse/a HTTP/1.1\r\nHost: {console}\r\n\r\n"
        )
        .unwrap();
        let mut lines = BufReader::new(stream).lines();
        let mut events = Vec::new();
        while events.len() < 2 {
            let line = lines.next().expect("the stream stays open").unwrap();
            if let Some(data) = line.strip_prefix("data: ") {
                events.push(serde_json::from_str::<serde_json::Value>(data).unwrap());
            }
        }
        events
    });
    // The snapshot comes first; then the grant.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut client = server.client().await;
    let granted = acquire_once(&mut client, "sse/a", "sse-holder", 60_000).await;
    let events = tokio::task::spawn_blocking(move || watch.join().unwrap())
        .await
        .unwrap();
    assert_eq!(events[0]["cause"], "snapshot");
    assert_eq!(events[1]["cause"], "granted");
    assert_eq!(events[1]["holders"][0]["holder"], "sse-holder");
    assert_eq!(
        events[1]["fencing_token"],
        granted.fencing_token.to_string()
    );
}

/// DNS rebinding: a request whose Host is another name is refused (421, the reason in one line)
/// on every method and path of the console (page, API, revoke, event stream) and on the metrics
/// port, and one without a Host (400); IP addresses on any port, `localhost` and a
/// `--console-host` name (for the console only) are answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_that_is_not_this_server_is_refused_on_every_path_and_port() {
    let redis = RedisServer::start();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let metrics_flag = metrics.to_string();
    let extra = [
        "--metrics-listen",
        &metrics_flag,
        "--console-host",
        "leases.example",
    ];
    let (server, console) = server_with_console(&redis, None, &extra).await;
    let mut client = server.client().await;
    let granted = acquire_once(&mut client, "rebind/a", "rebound", 60_000).await;
    let port = console.port();
    let revoke = move |host: &str| {
        let headers = format!(
            "Content-Type: application/json\r\nOrigin: http://{host}\r\nSec-Fetch-Site: same-origin\r\n"
        );
        let body = r#"{"name":"rebind/a","reason":"rebind"}"#;
        request_as(console, Some(host), "POST", "/api/revoke", &headers, body)
    };

    let refused = tokio::task::spawn_blocking(move || {
        let foreign = format!("attacker.example:{port}");
        let on_the_console = [
            ("GET", "/"),
            ("GET", "/console.js"),
            ("GET", "/api/session"),
            ("GET", "/api/leases?prefix=rebind/"),
            ("GET", "/api/lease?name=rebind/a"),
            ("GET", "/api/watch?name=rebind/a"),
            ("DELETE", "/api/leases"),
            ("GET", "/nothing-here"),
        ]
        .map(|(method, path)| {
            let answer = request_as(console, Some(&foreign), method, path, "", "");
            (format!("{method} {path}"), answer)
        });
        let revoked = ("POST /api/revoke".to_owned(), revoke(&foreign));
        let metrics_foreign = (
            "metrics".to_owned(),
            request_as(metrics, Some(&foreign), "GET", "/metrics", "", ""),
        );
        // A --console-host name is the console's, not the metrics port's.
        let metrics_console_name = (
            "metrics as leases.example".to_owned(),
            request_as(metrics, Some("leases.example"), "GET", "/metrics", "", ""),
        );
        let no_host = request_as(console, None, "GET", "/api/leases", "", "");
        let mut refused = on_the_console.to_vec();
        refused.extend([revoked, metrics_foreign, metrics_console_name]);
        (refused, no_host)
    })
    .await
    .unwrap();
    let (refused, no_host) = refused;
    for (request, (status, body)) in &refused {
        assert_eq!(*status, 421, "{request}: {body}");
        assert_eq!(body.lines().count(), 1, "{request}: one line: {body}");
        let flag = if request.starts_with("metrics") {
            "--metrics-host"
        } else {
            "--console-host"
        };
        assert!(
            body.starts_with("host: \"") && body.contains(flag),
            "{request}: {body}"
        );
    }
    assert_eq!(no_host.0, 400, "{}", no_host.1);
    assert!(no_host.1.starts_with("host: missing"), "{}", no_host.1);
    // Nothing above revoked the lease.
    assert_eq!(
        describe(&mut client, "rebind/a").await.fencing_token,
        granted.fencing_token
    );

    let answered = tokio::task::spawn_blocking(move || {
        let hosts = [
            console.to_string(),
            format!("localhost:{port}"),
            // kubectl port-forward 9000:<port> and TLS proxies change the port.
            "localhost:9000".to_owned(),
            format!("[::1]:{port}"),
            // The pod's IP, as Kubernetes probes and Prometheus send it.
            "10.1.2.3:9090".to_owned(),
            "Leases.Example:443".to_owned(),
        ];
        let console_answers = hosts.map(|host| {
            let path = "/api/leases?prefix=rebind/";
            let answer = request_as(console, Some(&host), "GET", path, "", "");
            (host, answer)
        });
        let metrics_hosts = [
            metrics.to_string(),
            "localhost".to_owned(),
            "10.1.2.3:9090".to_owned(),
        ];
        let metrics_answers = metrics_hosts.map(|host| {
            let answer = request_as(metrics, Some(&host), "GET", "/metrics", "", "");
            (host, answer)
        });
        let revoked = revoke("leases.example");
        (console_answers, metrics_answers, revoked)
    })
    .await
    .unwrap();
    let (console_answers, metrics_answers, revoked) = answered;
    for (host, (status, body)) in console_answers.iter().chain(&metrics_answers) {
        assert_eq!(*status, 200, "Host: {host}: {body}");
    }
    assert!(console_answers[0].1.1.contains("rebind/a"));
    assert_eq!(
        revoked.0, 200,
        "a --console-host name may revoke: {}",
        revoked.1
    );
    assert!(!describe(&mut client, "rebind/a").await.held);
}

/// A console off loopback needs access control or `--insecure-listen`, as the gRPC port does.
#[tokio::test]
async fn a_console_off_loopback_needs_access_control() {
    let config = ServeConfig::from_args(["--console-listen", "0.0.0.0:0"]).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (_trigger, shutdown) = leased::shutdown::channel();
    let refused = leased::serve(config, listener, shutdown)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("0.0.0.0:0"), "{refused}");
    assert!(refused.contains("--insecure-listen"), "{refused}");
}

/// Where the browser tests' npm package and Chromium are; a clear failure when they are not.
fn browser_setup() -> (PathBuf, String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console");
    assert!(
        dir.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run scripts/test.sh (or npm ci --prefix tests/console)"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    assert!(
        Path::new(&chromium).exists(),
        "no Chromium at {chromium}: run scripts/test.sh (it installs Debian's chromium), or set CHROMIUM"
    );
    (dir, chromium)
}

/// The page in Chromium: the list filters, a client's grant shows live, a revoke from the page
/// ends the holder's lease, a holder with markup stays text, access control works, and a page
/// under a name re-pointed at the console (DNS rebinding) can neither list nor revoke unless the
/// name is a `--console-host` (`tests/console/browser.test.mjs`). Saves a screenshot of the lease
/// view.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_in_chromium() {
    let _turn = heavy_turn().await;
    let (dir, chromium) = browser_setup();
    let redis = RedisServer::start();
    let tokens = tokens_file();
    let (open, open_console) = server_with_console(&redis, None, &[]).await;
    let (auth, auth_console) = server_with_console(&redis, Some(&tokens), &[]).await;
    // The name the browser test re-points at 127.0.0.1, given to this console only.
    let named_args = ["--console-host", "attacker.example"];
    let (named, named_console) = server_with_console(&redis, None, &named_args).await;
    // More leases than a page holds, for the paging test.
    let mut client = open.client().await;
    for index in 0..120 {
        let name = format!("paging/lease-{index:03}");
        acquire_once(&mut client, &name, "pager", 300_000).await;
    }
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-lease-view.png");
    let _ = std::fs::remove_file(&screenshot);
    let started = Instant::now();
    let output = tokio::process::Command::new("node")
        .arg("--test-reporter=spec")
        .arg("browser.test.mjs")
        .current_dir(&dir)
        .env("OPEN_CONSOLE", format!("http://{open_console}"))
        .env("OPEN_GRPC", open.address.to_string())
        .env("AUTH_CONSOLE", format!("http://{auth_console}"))
        .env("AUTH_GRPC", auth.address.to_string())
        .env("NAMED_CONSOLE", format!("http://{named_console}"))
        .env("NAMED_GRPC", named.address.to_string())
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("VIEWER_TOKEN", VIEWER_TOKEN)
        .env("LEASED_BIN", env!("CARGO_BIN_EXE_leased"))
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOT", &screenshot)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(240), output)
        .await
        .expect("the browser tests finish within 4 minutes")
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{report}\nbrowser tests took {:?}", started.elapsed());
    assert!(output.status.success(), "browser tests failed:\n{report}");
    assert!(screenshot.exists(), "the lease view's screenshot was saved");
    let _ = std::fs::remove_file(tokens);
}

/// Not a test: the console's figures, printed. `cargo test --test integration
/// console::console_figures -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "prints figures; run by hand"]
async fn console_figures() {
    let (dir, chromium) = browser_setup();
    let redis = RedisServer::start();
    let (server, console) = server_with_console(&redis, None, &[]).await;
    let mut client = server.client().await;
    for index in 0..1000 {
        acquire_once(
            &mut client,
            &format!("figures/lease-{index:04}"),
            "figures",
            600_000,
        )
        .await;
    }
    let mut measure = Command::new("node")
        .arg("measure.mjs")
        .current_dir(&dir)
        .env("CONSOLE", format!("http://{console}"))
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(measure.stdout.take().unwrap()).lines();
    let mut stdin = measure.stdin.take().unwrap();
    // The page follows one lease while this task grants and releases it as fast as it can.
    loop {
        let line = stdout.next().expect("measure.mjs is running").unwrap();
        println!("{line}");
        if line == "READY" {
            break;
        }
    }
    // Eight callers on a counting lease of eight permits: each grant and release is one event.
    let started = Instant::now();
    let drivers: Vec<_> = (0..8)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let mut cycles = 0u64;
                while started.elapsed() < Duration::from_secs(10) {
                    let request = AcquireRequest {
                        name: "figures/busy".into(),
                        holder: "churn".into(),
                        ttl_ms: 60_000,
                        limit: 8,
                        ..AcquireRequest::default()
                    };
                    let granted = must_acquire_request(&mut client, request).await;
                    client
                        .release(ReleaseRequest {
                            name: "figures/busy".into(),
                            lease_id: granted.lease_id,
                        })
                        .await
                        .unwrap();
                    cycles += 1;
                }
                cycles
            })
        })
        .collect();
    let mut cycles = 0;
    for driver in drivers {
        cycles += driver.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    writeln!(stdin, "{}", cycles * 2).unwrap();
    println!(
        "driver: {cycles} grant+release cycles in {elapsed:.1} s: {:.0} events/s sent",
        cycles as f64 * 2.0 / elapsed
    );
    for line in stdout {
        println!("{}", line.unwrap());
    }
    assert!(measure.wait().unwrap().success());
}
