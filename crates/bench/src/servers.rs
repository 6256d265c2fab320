//! The servers under test, started in this process on loopback ephemeral ports.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use durable_mcp::{DurableMcp, Store};
use durable_mcp_examples::Everything;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::BenchError;

/// How long a stopping server may take to finish its connections.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A server running on a task of this process.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    path: &'static str,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), BenchError>>,
}

impl RunningServer {
    /// The address it listens on (loopback).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint path.
    pub fn path(&self) -> &'static str {
        self.path
    }

    /// Shut it down gracefully and wait for it.
    ///
    /// # Errors
    /// The server failed, or did not stop in time.
    pub async fn stop(self) -> Result<(), BenchError> {
        // The server may already have ended (its error is in the task's result).
        let _ = self.stop.send(());
        let mut task = self.task;
        match tokio::time::timeout(STOP_TIMEOUT, &mut task).await {
            Ok(joined) => joined.map_err(|e| BenchError::Task(e.to_string()))?,
            Err(_) => {
                task.abort();
                Err(BenchError::Timeout("server shutdown"))
            }
        }
    }
}

async fn loopback() -> Result<(TcpListener, SocketAddr), BenchError> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// durable-mcp serving the example `everything` server on `store`.
///
/// # Errors
/// Binding the listener failed.
pub async fn start_durable(store: Arc<dyn Store>) -> Result<RunningServer, BenchError> {
    let (listener, addr) = loopback().await?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = DurableMcp::new(Everything::default()).store(store);
    let task = tokio::spawn(async move {
        server
            .serve_on(listener, async move {
                let _ = stopped.await;
            })
            .await
            .map_err(BenchError::from)
    });
    Ok(RunningServer { addr, path: "/mcp", stop, task })
}

/// rmcp's own Streamable HTTP server (in-memory sessions, `TCP_NODELAY`) serving the same
/// example server: the HTTP baseline.
///
/// # Errors
/// Binding the listener failed.
#[cfg(feature = "rmcp-baseline")]
pub async fn start_rmcp_baseline() -> Result<RunningServer, BenchError> {
    let (listener, addr) = loopback().await?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        durable_mcp_protocol::serve_rmcp_baseline(Everything::default(), listener, async move {
            let _ = stopped.await;
        })
        .await
        .map_err(BenchError::from)
    });
    Ok(RunningServer { addr, path: durable_mcp_protocol::RMCP_BASELINE_PATH, stop, task })
}
