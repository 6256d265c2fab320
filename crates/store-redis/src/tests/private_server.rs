//! A private `redis-server` for tests that kill connections or the server itself, which
//! must not disturb the shared one.

use std::time::{Duration, Instant};

use crate::DEFAULT_PREFIX;

/// A private `redis-server` on a free port, killed when dropped: for tests that kill
/// connections or the server, which must not disturb the shared one.
pub(super) struct PrivateServer {
    child: std::process::Child,
    pub(super) port: u16,
}

impl PrivateServer {
    /// Start one on a free port, or skip (outside CI) if `redis-server` cannot run.
    pub(super) fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let server = Self::start_on(port);
        if server.is_none() {
            assert!(
                !durable_mcp_store::in_ci(),
                "redis-server could not be started (CI is set)"
            );
            eprintln!("skipped: could not start a private redis-server");
        }
        server
    }

    pub(super) fn start_on(port: u16) -> Option<Self> {
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let server = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
    }

    pub(super) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(super) async fn admin(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// Wait until `n` connections are subscribed to the default prefix's channel.
    pub(super) async fn wait_for_subscribers(&self, n: u64) {
        let mut admin = self.admin().await;
        let channel = format!("{DEFAULT_PREFIX}:wake");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, subscribed): (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut admin)
                .await
                .unwrap();
            if subscribed >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{n} listeners subscribed within 10s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
