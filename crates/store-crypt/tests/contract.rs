//! The store contract suite run through [`CryptStore`] on every backend: encryption keeps
//! every guarantee (D1..D15) of the store it wraps. PostgreSQL and Redis read
//! `DATABASE_URL` / `REDIS_URL`; outside CI a missing service skips their cases with a
//! printed reason, with `CI=true` they fail.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::{Arc, OnceLock};

use durable_mcp_store::Store;
use durable_mcp_store_crypt::{CryptStore, KeyFile, KeyRing};

/// One ring of two keys (a rotation happened) for every case.
fn ring() -> Arc<KeyRing> {
    static RING: OnceLock<Arc<KeyRing>> = OnceLock::new();
    RING.get_or_init(|| {
        let mut file = KeyFile::default();
        file.rotate(1).unwrap();
        file.rotate(2).unwrap();
        Arc::new(file.ring("test").unwrap())
    })
    .clone()
}

fn crypt(inner: Arc<dyn Store>) -> Arc<dyn Store> {
    Arc::new(CryptStore::new(inner, ring()))
}

mod memory {
    use super::*;
    use durable_mcp_store_memory::MemoryStore;

    async fn fresh() -> Option<Arc<dyn Store>> {
        Some(crypt(Arc::new(MemoryStore::new())))
    }

    /// A single-process store wakes only the tails of its own handle: the same one twice.
    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        let store = crypt(Arc::new(MemoryStore::new()));
        Some((store.clone(), store))
    }

    durable_mcp_store::store_contract_tests!(fresh(), pair = pair());
}

mod sqlite {
    use std::time::Duration;

    use super::*;
    use durable_mcp_store_sqlite::{SqliteOptions, SqliteStore, Synchronous};

    fn options(name: &str) -> SqliteOptions {
        let dir = durable_mcp_testkit::temp_dir("crypt-sqlite");
        let mut options = SqliteOptions::new(dir.join(name));
        options.synchronous = Synchronous::Normal;
        options
    }

    async fn fresh() -> Option<Arc<dyn Store>> {
        Some(crypt(Arc::new(
            SqliteStore::open(options("contract.db")).await.unwrap(),
        )))
    }

    /// The writer wakes the tails of its own handle; the poll is far beyond the wake-up
    /// window, so the same handle serves both roles.
    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        let mut options = options("pair.db");
        options.poll_interval = Duration::from_secs(600);
        let store = crypt(Arc::new(SqliteStore::open(options).await.unwrap()));
        Some((store.clone(), store))
    }

    durable_mcp_store::store_contract_tests!(fresh(), pair = pair());
}

mod postgres {
    use super::*;
    use durable_mcp_store_postgres::{PgOptions, PgStore};
    use durable_mcp_testkit::backend::Backend;

    async fn open(url: &str) -> Arc<dyn Store> {
        let mut options = PgOptions::from_url(url).unwrap();
        options.pool_size = 4;
        crypt(Arc::new(PgStore::open(options).await.unwrap()))
    }

    async fn fresh() -> Option<Arc<dyn Store>> {
        if !Backend::Postgres.available() {
            return None;
        }
        Some(open(&Backend::Postgres.store_url(None)).await)
    }

    /// Two workers on one fresh schema; the watcher polls every ten minutes, so only the
    /// notification can wake it in time.
    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        if !Backend::Postgres.available() {
            return None;
        }
        let url = Backend::Postgres.store_url(None);
        let writer = open(&url).await;
        let watcher = open(&format!("{url}&poll_ms=600000")).await;
        Some((watcher, writer))
    }

    durable_mcp_store::store_contract_tests!(fresh(), pair = pair());
}

mod redis {
    use std::time::Duration;

    use super::*;
    use durable_mcp_store_redis::{RedisOptions, RedisStore};
    use durable_mcp_testkit::backend::Backend;

    async fn open(url: &str, wake_tick: Duration) -> Arc<dyn Store> {
        let mut options = RedisOptions::from_url(url).unwrap();
        options.wake_tick = wake_tick;
        crypt(Arc::new(RedisStore::open(options).await.unwrap()))
    }

    async fn fresh() -> Option<Arc<dyn Store>> {
        if !Backend::Redis.available() {
            return None;
        }
        Some(open(&Backend::Redis.store_url(None), Duration::from_secs(1)).await)
    }

    /// Two workers on one fresh prefix; the watcher's fallback tick is ten minutes, so only
    /// the pub/sub message can wake it in time.
    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        if !Backend::Redis.available() {
            return None;
        }
        let url = Backend::Redis.store_url(None);
        let writer = open(&url, Duration::from_secs(1)).await;
        let watcher = open(&url, Duration::from_secs(600)).await;
        Some((watcher, writer))
    }

    durable_mcp_store::store_contract_tests!(fresh(), pair = pair());
}
