//! Reads `REDIS_TLS_URL` (a `rediss://` URL with an ACL user and `tls_ca`) and the files
//! beside it (`REDIS_TLS_PORT`, `REDIS_TLS_CA`, `REDIS_TLS_CLIENT_CERT`,
//! `REDIS_TLS_CLIENT_KEY`, `REDIS_TLS_PASSWORD`, `DATABASE_TLS_WRONG_CA`), which
//! `scripts/tls-services.sh start` writes to `.tools/tls/env`. Unset, the tests print
//! `skipped: ...` and pass, except in CI.

use super::*;

async fn tls_fresh() -> Option<Arc<dyn Store>> {
    let store = open_at(&service_var("REDIS_TLS_URL")?, &fresh_prefix(), |_| {}).await?;
    Some(Arc::new(Scoped { store }))
}

async fn tls_pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
    let url = service_var("REDIS_TLS_URL")?;
    let prefix = fresh_prefix();
    let writer = open_at(&url, &prefix, |_| {}).await?;
    let watcher = open_at(&url, &prefix, |o| o.wake_tick = Duration::from_secs(600)).await?;
    Some((Arc::new(watcher), Arc::new(Scoped { store: writer })))
}

durable_mcp_store::store_contract_tests!(tls_fresh(), pair = tls_pair());

/// `rediss://` or `valkeys://` with the ACL user of the private server, on `host`.
fn url(scheme: &str, host: &str, query: &str) -> Option<String> {
    let (port, password) = (
        service_var("REDIS_TLS_PORT")?,
        service_var("REDIS_TLS_PASSWORD")?,
    );
    let password: String = password
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    Some(format!(
        "{scheme}://dmcp:{password}@{host}:{port}/0?{query}"
    ))
}

/// Opening `url` fails within its connect bound as `Incompatible`; the message.
async fn refused(url: &str) -> String {
    let started = Instant::now();
    let Err(error) = RedisStore::open_url(url).await else {
        panic!("{} opened", redact(url))
    };
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused only after {:?}: {error}",
        started.elapsed()
    );
    assert!(
        matches!(error, StoreError::Incompatible(_)),
        "a refusal retrying cannot fix is Incompatible, not {error:?}"
    );
    let message = error.to_string();
    assert!(
        !message.contains(&service_var("REDIS_TLS_PASSWORD").unwrap_or_default()),
        "no password in {message}"
    );
    message
}

#[tokio::test]
async fn valkeys_with_a_client_certificate_opens() {
    let (Some(ca), Some(cert), Some(key)) = (
        service_var("REDIS_TLS_CA"),
        service_var("REDIS_TLS_CLIENT_CERT"),
        service_var("REDIS_TLS_CLIENT_KEY"),
    ) else {
        return;
    };
    let Some(url) = url(
        "valkeys",
        "localhost",
        &format!("tls_ca={ca}&tls_cert={cert}&tls_key={key}"),
    ) else {
        return;
    };
    let options = RedisOptions::from_url(&url).unwrap();
    assert_eq!(
        options.tls.cert.as_deref(),
        Some(std::path::Path::new(&cert))
    );
    let store = open_at(&url, &fresh_prefix(), |_| {}).await.expect("opens");
    let store = Scoped { store };
    store
        .create_stream(&StreamId::random(), &anonymous())
        .await
        .expect("a write over TLS");
}

#[tokio::test]
async fn a_wrong_ca_and_a_wrong_name_fail_at_open_saying_which() {
    let (Some(wrong_ca), Some(ca)) = (
        service_var("DATABASE_TLS_WRONG_CA"),
        service_var("REDIS_TLS_CA"),
    ) else {
        return;
    };
    let Some(wrong) = url("rediss", "localhost", &format!("tls_ca={wrong_ca}")) else {
        return;
    };
    assert!(refused(&wrong).await.contains("not signed by a trusted CA"));
    // The certificate names localhost and 127.0.0.1, not ::1's other name.
    let Some(misnamed) = url("rediss", "127.0.0.2", &format!("tls_ca={ca}")) else {
        return;
    };
    let message = refused(&misnamed).await;
    assert!(message.contains("not valid for the host name"), "{message}");
}

#[test]
fn tls_options_need_a_tls_url_and_go_in_pairs() {
    let message = |url: &str| RedisOptions::from_url(url).unwrap_err().to_string();
    assert!(message("redis://h/0?tls_ca=/ca.pem").contains("needs a rediss://"));
    assert!(
        message("http://u:pw@h").contains("not a redis://")
            && !message("http://u:pw@h").contains("pw")
    );
    let options = RedisOptions::from_url("rediss://h/0?tls_cert=/c.pem").unwrap();
    assert!(
        options
            .tls
            .certificates()
            .unwrap_err()
            .to_string()
            .contains("go together")
    );
    let options = RedisOptions::from_url("valkeys://h/0?tls_ca=/nonexistent%20dir/ca.pem").unwrap();
    assert!(
        options
            .tls
            .certificates()
            .unwrap_err()
            .to_string()
            .contains("tls_ca /nonexistent dir/ca.pem")
    );
}
