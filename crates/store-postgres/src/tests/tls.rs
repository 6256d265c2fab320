//! Reads `DATABASE_TLS_URL` (a `verify-full` URL) and the files beside it
//! (`DATABASE_TLS_CA`, `DATABASE_TLS_WRONG_CA`, `DATABASE_TLS_CLIENT_CERT`,
//! `DATABASE_TLS_CLIENT_KEY`, `DATABASE_TLS_CERT_USER`, `DATABASE_TLS_PORT`,
//! `DATABASE_TLS_PASSWORD`), which `scripts/tls-services.sh start` writes to
//! `.tools/tls/env`. Unset, the tests print `skipped: ...` and pass, except in CI.

use super::*;

async fn tls_fresh() -> Option<Arc<dyn Store>> {
    let options = fresh_options_at(service_var("DATABASE_TLS_URL")?, &[]).await?;
    Some(Arc::new(
        PgStore::open(options).await.expect("open over TLS"),
    ))
}

async fn tls_pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
    let options =
        fresh_options_at(service_var("DATABASE_TLS_URL")?, &[("poll_ms", "600000")]).await?;
    let watcher = PgStore::open(options.clone()).await.expect("open watcher");
    let writer = PgStore::open(options).await.expect("open writer");
    Some((Arc::new(watcher), Arc::new(writer)))
}

durable_mcp_store::store_contract_tests!(tls_fresh(), pair = tls_pair());

/// Whether the connection `client` is on is encrypted, as the server sees it.
async fn encrypted(client: &tokio_postgres::Client) -> bool {
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .expect("pg_stat_ssl")
        .get(0)
}

/// A libpq key=value string for the private server, as `user`, with `extra` keywords.
fn dsn(host: &str, user: &str, extra: &str) -> Option<String> {
    let port = service_var("DATABASE_TLS_PORT")?;
    let password = service_var("DATABASE_TLS_PASSWORD")?
        .replace('\\', "\\\\")
        .replace('\'', "\\'");
    Some(format!(
        "host={host} port={port} dbname=test user={user} password='{password}' connect_timeout=5 {extra}"
    ))
}

/// Connecting with `conn` fails at start, within 5 s, as `Incompatible`; its message.
async fn refused(conn: &str) -> String {
    let started = Instant::now();
    let options = PgOptions::from_url(conn).expect("parses");
    let Err(error) = pool::connect(&options).await else {
        panic!("{} connected", options.target())
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
        !message.contains(&std::env::var("DATABASE_TLS_PASSWORD").unwrap_or_default()),
        "no password in {message}"
    );
    message
}

#[tokio::test]
async fn verify_full_with_a_percent_encoded_password_is_encrypted() {
    let Some(url) = service_var("DATABASE_TLS_URL") else {
        return;
    };
    let options = PgOptions::from_url(&url).unwrap();
    assert_eq!(options.ssl_mode(), SslMode::VerifyFull);
    assert!(encrypted(&pool::connect(&options).await.expect("verify-full login")).await);
}

#[tokio::test]
async fn require_encrypts_without_a_ca_and_verify_ca_ignores_the_name() {
    let Some(conn) = dsn("localhost", "dmcp", "sslmode=require") else {
        return;
    };
    let client = pool::connect(&PgOptions::from_url(&conn).unwrap())
        .await
        .expect("require login");
    assert!(encrypted(&client).await);
    let Some(ca) = service_var("DATABASE_TLS_CA") else {
        return;
    };
    // Connect to 127.0.0.1 under a name the certificate does not list.
    let Some(conn) = dsn(
        "wrong.example",
        "dmcp",
        &format!("hostaddr=127.0.0.1 sslmode=verify-ca sslrootcert={ca}"),
    ) else {
        return;
    };
    let client = pool::connect(&PgOptions::from_url(&conn).unwrap())
        .await
        .expect("verify-ca login");
    assert!(encrypted(&client).await);
}

#[tokio::test]
async fn a_client_certificate_logs_in() {
    let (Some(ca), Some(cert), Some(key), Some(user)) = (
        service_var("DATABASE_TLS_CA"),
        service_var("DATABASE_TLS_CLIENT_CERT"),
        service_var("DATABASE_TLS_CLIENT_KEY"),
        service_var("DATABASE_TLS_CERT_USER"),
    ) else {
        return;
    };
    let Some(port) = service_var("DATABASE_TLS_PORT") else {
        return;
    };
    let url = format!(
        "postgres://{user}@localhost:{port}/test?sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}"
    );
    let client = pool::connect(&PgOptions::from_url(&url).unwrap())
        .await
        .expect("cert login");
    assert!(encrypted(&client).await);
    let who: String = client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(who, user);
    // Without the certificate, the server's `cert` line refuses the same user.
    let without =
        format!("postgres://{user}@localhost:{port}/test?sslmode=verify-full&sslrootcert={ca}");
    let message = refused(&without).await;
    assert!(message.contains("refused the connection"), "{message}");
}

#[tokio::test]
async fn a_wrong_ca_a_wrong_name_and_no_tls_each_fail_at_start_saying_which() {
    let (Some(wrong_ca), Some(ca)) = (
        service_var("DATABASE_TLS_WRONG_CA"),
        service_var("DATABASE_TLS_CA"),
    ) else {
        return;
    };
    let Some(conn) = dsn(
        "localhost",
        "dmcp",
        &format!("sslmode=verify-full sslrootcert={wrong_ca}"),
    ) else {
        return;
    };
    let message = refused(&conn).await;
    assert!(message.contains("not signed by a trusted CA"), "{message}");
    // verify-ca, and require with a CA, check the chain as strictly (only the name is not).
    for mode in ["verify-ca", "require", "prefer"] {
        let Some(conn) = dsn(
            "wrong.example",
            "dmcp",
            &format!("hostaddr=127.0.0.1 sslmode={mode} sslrootcert={wrong_ca}"),
        ) else {
            return;
        };
        let message = refused(&conn).await;
        assert!(
            message.contains("not signed by a trusted CA"),
            "{mode}: {message}"
        );
    }

    let Some(conn) = dsn(
        "wrong.example",
        "dmcp",
        &format!("hostaddr=127.0.0.1 sslmode=verify-full sslrootcert={ca}"),
    ) else {
        return;
    };
    let message = refused(&conn).await;
    assert!(
        message.contains("not valid for host \"wrong.example\""),
        "{message}"
    );

    let Some(conn) = dsn("localhost", "dmcp", "sslmode=disable") else {
        return;
    };
    let message = refused(&conn).await;
    assert!(
        message.contains("no encryption"),
        "the server's hostssl-only refusal: {message}"
    );

    // A whole store refuses to open the same way, within the same bound.
    let started = Instant::now();
    let Err(error) = PgStore::open_url(&format!("{conn} schema=dmcp_test_refused")).await else {
        panic!("the store opened")
    };
    assert!(
        started.elapsed() < Duration::from_secs(5) && matches!(error, StoreError::Incompatible(_)),
        "{error:?}"
    );
}
