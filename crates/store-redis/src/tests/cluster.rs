//! Reads `REDIS_CLUSTER_URL` (`redis+cluster://host:port,...`), which
//! `scripts/redis-cluster.sh start` writes to `.tools/redis-cluster/env` (3 primaries, 3
//! replicas). Unset, the tests print `skipped: ...` and pass, except in CI.

use super::*;

fn cluster_url() -> Option<String> {
    service_var("REDIS_CLUSTER_URL")
}

async fn cluster_fresh() -> Option<Arc<dyn Store>> {
    let store = open_at(&cluster_url()?, &fresh_prefix(), |_| {}).await?;
    Some(Arc::new(Scoped { store }))
}

async fn cluster_pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
    let url = cluster_url()?;
    let prefix = fresh_prefix();
    let writer = open_at(&url, &prefix, |_| {}).await?;
    let watcher = open_at(&url, &prefix, |o| o.wake_tick = Duration::from_secs(600)).await?;
    Some((Arc::new(watcher), Arc::new(Scoped { store: writer })))
}

durable_mcp_store::store_contract_tests!(cluster_fresh(), pair = cluster_pair());

/// Every key a cluster store writes carries the prefix's hash tag, so the whole store is in
/// one slot: scripts and batches stay atomic on one primary.
#[tokio::test]
async fn every_key_of_a_cluster_prefix_is_in_one_slot() {
    let Some(url) = cluster_url() else { return };
    let prefix = fresh_prefix();
    let Some(store) = open_at(&url, &prefix, |_| {}).await else {
        return;
    };
    let store = Scoped { store };
    let session = durable_mcp_store::contract::session(&Principal::anonymous());
    store.create_session(session.clone()).await.unwrap();
    let stream = StreamId::random();
    store.create_stream(&stream, &anonymous()).await.unwrap();
    store.append(&stream, "x".into(), false).await.unwrap();
    store
        .put_record(
            RecordKind::Run,
            "r1",
            "{}".into(),
            Some(durable_mcp_store::now_ms() + 60_000),
            Expect::Absent,
        )
        .await
        .unwrap();
    let nodes = store.store.shared.options.cluster.clone().unwrap();
    let (keys, slots) = tokio::task::spawn_blocking(move || {
        let mut conn = redis::cluster::ClusterClient::new(nodes)
            .unwrap()
            .get_connection()
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{prefix}*"))
            .query(&mut conn)
            .unwrap();
        let slots: std::collections::BTreeSet<u64> = keys
            .iter()
            .map(|k| {
                redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(k)
                    .query(&mut conn)
                    .unwrap()
            })
            .collect();
        (keys, slots)
    })
    .await
    .unwrap();
    assert!(keys.len() >= 5, "{keys:?}");
    assert_eq!(slots.len(), 1, "one slot for {keys:?}");
}

#[test]
fn cluster_urls_parse_into_seed_nodes() {
    let o = RedisOptions::from_url("rediss+cluster://app:p%40ss@10.0.0.1:7000,10.0.0.2:7001/0?prefix=mcp&tls_ca=/ca.pem&wait_replicas=1&wait_ms=200").unwrap();
    assert_eq!(
        o.cluster.as_deref(),
        Some(
            &[
                "rediss://app:p%40ss@10.0.0.1:7000".to_owned(),
                "rediss://app:p%40ss@10.0.0.2:7001".to_owned()
            ][..]
        )
    );
    assert_eq!(
        (o.prefix.as_str(), o.wait_replicas, o.wait_timeout),
        ("mcp", 1, Duration::from_millis(200))
    );
    assert!(!format!("{o:?}").contains("p%40ss"), "no password in Debug");
    let o = RedisOptions::from_url("redis://h:6379?cluster=true").unwrap();
    assert_eq!(
        o.cluster.as_deref(),
        Some(&["redis://h:6379".to_owned()][..])
    );
    assert!(
        RedisOptions::from_url("valkey+cluster://h:1/0")
            .unwrap()
            .cluster
            .is_some()
    );
    for bad in [
        "redis+cluster://h:1/2",
        "redis+cluster://",
        "redis://h?cluster=maybe",
        "redis://h?wait_replicas=1&wait_ms=5000",
    ] {
        assert!(RedisOptions::from_url(bad).is_err(), "{bad} parsed");
    }
}
