//! A Redis Cluster primary dies under load (`scripts/redis-cluster.sh kill-master-of`) and
//! comes back 6 s later (as a replica): the store serves again once a replica took over and
//! has a replica itself, and with `wait_replicas=1` no acknowledged append is lost (what `docs/deployment.md` promises). Its own test binary, so that no other
//! test runs on the cluster while a primary is down. Reads `REDIS_CLUSTER_URL`; unset, it
//! prints `skipped: ...` and passes, except in CI.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::process::Command;
use std::time::{Duration, Instant};

use durable_mcp_store::{Principal, SessionId, Store, StreamId, StreamOwner};
use durable_mcp_store_redis::RedisStore;

fn script(args: &[&str]) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/redis-cluster.sh"
    );
    let out = Command::new(path).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "redis-cluster.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_under_load_loses_no_acknowledged_append_with_wait() {
    let Some(url) = std::env::var("REDIS_CLUSTER_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            !durable_mcp_store::in_ci(),
            "CI is set and REDIS_CLUSTER_URL is not: run scripts/redis-cluster.sh start"
        );
        eprintln!(
            "skipped: REDIS_CLUSTER_URL is not set (scripts/redis-cluster.sh start; source .tools/redis-cluster/env)"
        );
        return;
    };
    let prefix = format!("dmcp-failover-{}", &SessionId::random().as_str()[..12]);
    let store = RedisStore::open_url(&format!(
        "{url}?prefix={prefix}&wait_replicas=1&wait_ms=500"
    ))
    .await
    .unwrap();
    let stream = StreamId::random();
    store
        .create_stream(
            &stream,
            &StreamOwner {
                principal: Principal::anonymous(),
                session: None,
            },
        )
        .await
        .unwrap();

    let appender = {
        let (store, stream) = (store.clone(), stream.clone());
        tokio::spawn(async move {
            let (mut acknowledged, mut failed) = (Vec::new(), 0u32);
            let (mut first_failure, mut recovered): (Option<Instant>, Option<Instant>) =
                (None, None);
            let mut last_error: Option<String> = None;
            let started = Instant::now();
            for i in 0.. {
                // Until 3 s after the store served again (at least 14 s in all), or 60 s.
                let done = match recovered {
                    Some(at) => {
                        at.elapsed() > Duration::from_secs(3)
                            && started.elapsed() > Duration::from_secs(14)
                    }
                    None => started.elapsed() > Duration::from_secs(60),
                };
                if done {
                    break;
                }
                match store.append(&stream, format!("{i}"), false).await {
                    Ok(id) => {
                        if first_failure.is_some() && recovered.is_none() {
                            recovered = Some(Instant::now());
                        }
                        acknowledged.push((id.seq, format!("{i}")));
                    }
                    Err(error) => {
                        let text = error.to_string();
                        if last_error.as_deref() != Some(text.as_str()) {
                            eprintln!("{:?}: append failed: {text}", started.elapsed());
                            last_error = Some(text);
                        }
                        failed += 1;
                        first_failure.get_or_insert_with(Instant::now);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            (acknowledged, failed, first_failure, recovered)
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The primary of the prefix's slot (every key of the store is in it).
    let port = script(&["kill-master-of", &format!("{{{prefix}}}")])
        .trim()
        .to_owned();
    let killed = port.clone();
    // The promoted replica has no replica of its own until the killed node comes back (as
    // one): with `wait_replicas=1` writes are refused until then.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let restarted =
        tokio::task::spawn_blocking(move || script(&["restart-node", &killed]).trim().to_owned());
    let (acknowledged, failed, first_failure, recovered) = appender.await.unwrap();
    eprintln!("{}", restarted.await.unwrap());

    assert!(
        failed > 0,
        "the kill was felt: appends failed while no primary held the slot"
    );
    let outage = recovered
        .expect("the store served again within 60 s")
        .duration_since(first_failure.unwrap());
    eprintln!(
        "primary on port {port} killed: appends failed for {outage:?} ({failed} attempts), {} acknowledged",
        acknowledged.len()
    );
    assert!(
        outage < Duration::from_secs(20),
        "the store served again once a replica took over and had a replica: {outage:?}"
    );

    let mut stored = Vec::new();
    let mut after = 0;
    loop {
        let read = store.read_after(&stream, after, 1000).await.unwrap();
        if read.events.is_empty() {
            break;
        }
        after = read.events.last().unwrap().id.seq;
        stored.extend(read.events.into_iter().map(|e| (e.id.seq, e.data)));
    }
    assert!(
        stored
            .iter()
            .enumerate()
            .all(|(i, (seq, _))| *seq == i as u64 + 1),
        "D3: no gap in the log"
    );
    for (seq, data) in &acknowledged {
        assert!(
            stored.contains(&(*seq, data.clone())),
            "acknowledged event {seq} ({data}) was lost in the failover"
        );
    }
}
