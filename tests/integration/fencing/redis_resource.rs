//! Redis as the resource (a redis-server of its own, not leased's): the `leased_fencing`
//! Functions library through `leased::fencing::redis`.

use fred::{
    clients::Client,
    interfaces::{ClientLike, KeysInterface},
    types::{Value, config::Config},
};
use leased::fencing::{FenceError, MAX_TOKEN, redis};

use super::*;

/// The resource's own redis-server, with the library loaded by `redis`'s [`redis::load_library`].
async fn resource() -> (RedisServer, Client) {
    let server = RedisServer::start();
    let client = connect(&server).await;
    redis::load_library(&client)
        .await
        .expect("load the library");
    (server, client)
}

async fn connect(server: &RedisServer) -> Client {
    let client = Client::new(
        Config::from_url(&server.url()).expect("url"),
        None,
        None,
        None,
    );
    client.init().await.expect("cannot connect to Redis");
    client
}

/// Kleppmann's scenario: the paused holder's late `leased_set` is refused and the key keeps
/// holder 2's value; with plain SETs holder 1 overwrites it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_write_is_refused_by_redis_and_overwrites_without_fencing() {
    let leases = Leases::start().await;
    let (server, _client) = resource().await;
    let owner = || server.command(&["GET", "{ledger}:owner"]);
    let fenced = kleppmann(&leases, &server.url(), Resource::Redis, true);
    assert_refused("Redis, leased_set", &fenced, &owner());
    server.command(&["DEL", "{ledger}:owner", "fence:{ledger}"]);
    let unfenced = kleppmann(&leases, &server.url(), Resource::Redis, false);
    assert_overwritten("Redis, leased_set", &unfenced, &owner());
}

/// Writers with random pauses: each accepted `leased_set ... GET` answers the value it replaced
/// (the previous writer's token), atomically, so the accepted writes form one chain; it only
/// increases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_with_pauses_never_get_a_stale_write_into_redis() {
    let leases = Leases::start().await;
    let (_server, client) = resource().await;
    let replaced = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let tally = concurrent_writers(&leases, {
        let replaced = replaced.clone();
        move |token| {
            let client = client.clone();
            let replaced = replaced.clone();
            async move {
                let set = redis::set(
                    &client,
                    "fence:{ledger}",
                    "{ledger}:owner",
                    token,
                    token.to_string(),
                    &["GET"],
                )
                .await;
                match set {
                    Ok(previous) => {
                        let previous = previous
                            .as_string()
                            .map_or(0, |text| text.parse::<u64>().expect("a token was written"));
                        replaced.lock().unwrap().push((previous, token));
                        true
                    }
                    Err(FenceError::Stale { mark, .. }) => {
                        assert!(mark > token);
                        false
                    }
                    Err(other) => panic!("{other}"),
                }
            }
        }
    })
    .await;
    // Rebuild the order Redis applied the writes in from what each replaced.
    let replaced = replaced.lock().unwrap().clone();
    let mut history = Vec::new();
    let mut last = 0;
    while let Some(&(_, token)) = replaced.iter().find(|(previous, _)| *previous == last) {
        history.push(token);
        last = token;
        assert!(history.len() <= replaced.len(), "a cycle: {replaced:?}");
    }
    assert_eq!(history.len(), replaced.len(), "not one chain: {replaced:?}");
    assert_history("Redis, leased_set", &history, &tally);
}

/// Bad input is a clear error, never a silent accept; 2^63 - 1 is accepted and stays the mark,
/// 2^63 is refused; HSET and DEL are fenced too; the mark store keeps its keys under the prefix;
/// a Redis without the library is a store error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_by_redis_and_the_largest_integer_is_accepted() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    match redis::fence(&client, "fence:{o}", 5).await {
        Err(FenceError::Store(message)) => {
            assert!(message.contains("Function not found"), "{message}")
        }
        other => panic!("without the library: {other:?}"),
    }
    redis::load_library(&client).await.expect("load");
    redis::load_library(&client).await.expect("and load again");

    for token in [0, MAX_TOKEN + 1] {
        match redis::fence(&client, "fence:{o}", token).await {
            Err(FenceError::Invalid(message)) => {
                assert!(message.starts_with("token must be"), "{message}");
                println!("Redis refused: {message}");
            }
            other => panic!("token {token}: {other:?}"),
        }
    }
    // The library itself, as redis-cli and every other client reach it.
    for token in [
        "0",
        "-5",
        "05",
        "12a",
        "",
        " 5",
        "9223372036854775808",
        "99999999999999999999",
    ] {
        let error = server
            .query(&["FCALL", "leased_fence", "1", "fence:{o}", token])
            .expect_err(token);
        assert!(
            error
                .to_string()
                .contains("BADTOKEN token must be a fencing token"),
            "{token:?}: {error}"
        );
    }
    assert_eq!(server.command(&["EXISTS", "fence:{o}"]), ":0");

    // The boundary: the largest 64-bit integer is accepted and stays the mark.
    assert_eq!(
        redis::fence(&client, "fence:{b}", MAX_TOKEN).await,
        Ok(MAX_TOKEN)
    );
    assert_eq!(
        redis::set(&client, "fence:{b}", "{b}:v", MAX_TOKEN, "max", &[]).await,
        Ok(Value::from("OK"))
    );
    assert_eq!(
        redis::set(&client, "fence:{b}", "{b}:v", MAX_TOKEN - 1, "late", &[]).await,
        Err(FenceError::Stale {
            resource: "fence:{b}".into(),
            token: MAX_TOKEN - 1,
            mark: MAX_TOKEN,
        })
    );
    assert_eq!(server.command(&["GET", "{b}:v"]), "max");

    // HSET and DEL: a stale token changes nothing.
    assert_eq!(
        redis::hset(&client, "fence:{h}", "{h}:order", 10, &[("state", "paid")]).await,
        Ok(1)
    );
    assert!(matches!(
        redis::hset(&client, "fence:{h}", "{h}:order", 9, &[("state", "void")]).await,
        Err(FenceError::Stale { mark: 10, .. })
    ));
    assert!(matches!(
        redis::del(&client, "fence:{h}", &["{h}:order"], 9).await,
        Err(FenceError::Stale { mark: 10, .. })
    ));
    assert_eq!(server.command(&["HGET", "{h}:order", "state"]), "paid");
    assert_eq!(
        redis::del(&client, "fence:{h}", &["{h}:order"], 11).await,
        Ok(1)
    );
    assert_eq!(client.exists::<i64, _>("{h}:order").await.ok(), Some(0));

    // The middleware's mark store, under its prefix, named as the caller named it.
    let marks = redis::RedisMarks::new(client.clone()).with_prefix("grpc-fence:");
    assert_mark_store_refuses_a_smaller_token(&marks).await;
    assert_eq!(server.command(&["GET", "grpc-fence:orders"]), "7");
}
