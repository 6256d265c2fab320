//! The servers under test and the load generators, each started as a child process of
//! the run (the server on one CPU, the load generator on the other, where the machine
//! allows).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::BenchError;
use crate::child::LoadArgs;
use crate::client::Era;
use crate::load::LoadResult;
use crate::process::{ChildProcess, Pinning, Role};

/// How long a server may take to listen (a PostgreSQL migration, Python's imports).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(60);

/// A load generator may take this much longer than its timed part (connecting, warming
/// up, ending its sessions).
const LOAD_SLACK: Duration = Duration::from_secs(60);

/// The endpoint path of the Rust servers.
pub const MCP_PATH: &str = "/mcp";

/// The Python baseline's endpoint path: Starlette's mount answers `/mcp` with a redirect
/// to `/mcp/`, which a client would follow on every request.
pub const PYTHON_MCP_PATH: &str = "/mcp/";

/// The Python baseline's server: the official Python MCP SDK's `MCPServer` with
/// mcp-persist's SQLite event store, serving one tool like `test_simple_text`.
pub const PYTHON_SERVER: &str = include_str!("../python/persist_server.py");

/// A server measured over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerSpec {
    /// rmcp's own Streamable HTTP server (in-memory sessions): the baseline.
    Rmcp,
    /// The Python SDK with mcp-persist's SQLite store, run by this interpreter (a venv
    /// with both installed): the second baseline, legacy era only.
    Python {
        /// The venv's `python`.
        python: PathBuf,
    },
    /// durable-mcp on the store named by `url`.
    Durable {
        /// The store URL.
        url: String,
    },
    /// `durable-mcp proxy` on the store named by `url`, in front of the same handler as
    /// [`ServerSpec::Durable`] served over stdio on the memory store.
    Proxy {
        /// The proxy's store URL.
        url: String,
    },
}

impl ServerSpec {
    /// The eras this server is measured in: the Python baseline's stateless 2026-07-28
    /// path bypasses mcp-persist's store (its README says so), so it is legacy only.
    pub fn eras(&self) -> &'static [Era] {
        match self {
            ServerSpec::Python { .. } => &[Era::Legacy],
            _ => &Era::ALL,
        }
    }

    /// Its MCP endpoint path.
    pub fn path(&self) -> &'static str {
        match self {
            ServerSpec::Python { .. } => PYTHON_MCP_PATH,
            _ => MCP_PATH,
        }
    }
}

/// What a durable-mcp server child runs with beyond its store (the traffic benchmark's
/// settings); the default is what [`ServerSpec::Durable`] runs with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurableSettings {
    /// Serve Prometheus `/metrics` on a free loopback port ([`RunningServer::metrics`]).
    pub metrics: bool,
    /// Delete finished streams older than this many seconds (0: never); `None`: the
    /// engine's default.
    pub max_stream_age_secs: Option<u64>,
    /// Apply retention every this many seconds; `None`: the engine's default.
    pub prune_interval_secs: Option<u64>,
}

impl DurableSettings {
    /// The `bench-server durable` flags of these settings.
    fn args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        if self.metrics {
            args.extend(["--metrics-listen".into(), "127.0.0.1:0".into()]);
        }
        if let Some(secs) = self.max_stream_age_secs {
            args.extend(["--max-stream-age-secs".into(), secs.to_string().into()]);
        }
        if let Some(secs) = self.prune_interval_secs {
            args.extend(["--prune-interval-secs".into(), secs.to_string().into()]);
        }
        args
    }
}

/// A server child that listens.
#[derive(Debug)]
pub struct RunningServer {
    process: ChildProcess,
    addr: SocketAddr,
    metrics: Option<SocketAddr>,
    path: &'static str,
}

impl RunningServer {
    /// Its address (loopback).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its MCP endpoint path.
    pub fn path(&self) -> &'static str {
        self.path
    }

    /// The address of its Prometheus `/metrics`, if it serves them.
    pub fn metrics(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Its resident set size, in KiB.
    pub(crate) fn rss_kib(&self) -> Result<u64, BenchError> {
        self.process.rss_kib()
    }

    /// The CPU time it has used so far (all threads, user and system).
    pub(crate) fn cpu_time(&self) -> Result<Duration, BenchError> {
        self.process.cpu_time()
    }

    /// Stop it and wait for it to exit.
    ///
    /// # Errors
    /// It had to be killed.
    pub async fn stop(self) -> Result<(), BenchError> {
        self.process.stop().await
    }
}

/// The two executables a run starts its children with.
///
/// durable-mcp is measured as it ships: its servers are the hidden `bench-server durable`,
/// `bench-server proxy` and `bench-server stdio` subcommands of the `durable-mcp` binary
/// (crates/cli). The rest is the benchmark's own and stays out of that binary: stock rmcp
/// (`bench-server rmcp`) and the load generators (`bench-load`) are subcommands of the
/// `durable-mcp-bench` binary, which parses them with [`crate::child`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executables {
    /// The `durable-mcp` binary: the durable-mcp servers and the proxy.
    pub durable_mcp: PathBuf,
    /// The `durable-mcp-bench` binary: the rmcp baseline and the load generators.
    pub bench: PathBuf,
}

impl Executables {
    /// The file name of the `durable-mcp` binary on this platform.
    pub const DURABLE_MCP: &str = if cfg!(windows) {
        "durable-mcp.exe"
    } else {
        "durable-mcp"
    };

    /// `bench`, with the `durable-mcp` binary beside it (both in the same `target/<profile>`
    /// directory after `cargo build -p durable-mcp-cli -p durable-mcp-bench`).
    pub fn beside(bench: PathBuf) -> Self {
        let durable_mcp = bench.parent().map_or_else(
            || PathBuf::from(Self::DURABLE_MCP),
            |dir| dir.join(Self::DURABLE_MCP),
        );
        Self { durable_mcp, bench }
    }

    /// Check that both are files.
    ///
    /// # Errors
    /// [`BenchError::Config`] naming the one missing and how to build it.
    pub fn check(&self) -> Result<(), BenchError> {
        if !self.durable_mcp.is_file() {
            return Err(BenchError::Config(format!(
                "no durable-mcp executable at {}: build it with `cargo build --release -p durable-mcp-cli` (beside durable-mcp-bench), or pass `--durable-mcp PATH`",
                self.durable_mcp.display()
            )));
        }
        if !self.bench.is_file() {
            return Err(BenchError::Config(format!(
                "no durable-mcp-bench executable at {}: build it with `cargo build --release -p durable-mcp-bench`",
                self.bench.display()
            )));
        }
        Ok(())
    }
}

/// Starts the children of one run: knows the [`Executables`], the pinning, and the scratch
/// directory for logs and the Python baseline's files; remembers every process id it
/// started.
#[derive(Debug)]
pub struct Launcher {
    executables: Executables,
    pinning: Pinning,
    dir: PathBuf,
    python_script: Option<PathBuf>,
    spawned: Vec<u32>,
    seq: usize,
}

impl Launcher {
    /// A launcher of children run by `executables`, pinned as `pinning` says, with their
    /// logs (and the Python baseline's files) in `dir`.
    pub fn new(executables: Executables, pinning: Pinning, dir: &Path) -> Self {
        Self {
            executables,
            pinning,
            dir: dir.to_owned(),
            python_script: None,
            spawned: Vec::new(),
            seq: 0,
        }
    }

    /// Every process id started so far.
    pub fn spawned(&self) -> &[u32] {
        &self.spawned
    }

    fn log(&mut self, name: &str) -> PathBuf {
        self.seq += 1;
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        self.dir.join(format!("{:03}-{safe}.log", self.seq))
    }

    fn spawn(
        &mut self,
        name: &str,
        role: Role,
        program: &Path,
        args: &[OsString],
    ) -> Result<ChildProcess, BenchError> {
        let log = self.log(name);
        let process = ChildProcess::spawn(name, &self.pinning, role, program, args, &log)?;
        self.spawned.push(process.pid());
        Ok(process)
    }

    /// Start `spec` as a child named `name` and wait until it listens.
    ///
    /// # Errors
    /// It could not be started, or exited or said something else before listening (the
    /// error quotes the end of its log).
    pub async fn server(
        &mut self,
        spec: &ServerSpec,
        name: &str,
    ) -> Result<RunningServer, BenchError> {
        let listen: OsString = "127.0.0.1:0".into();
        let (program, args): (PathBuf, Vec<OsString>) = match spec {
            ServerSpec::Rmcp => (
                self.executables.bench.clone(),
                vec![
                    "bench-server".into(),
                    "rmcp".into(),
                    "--listen".into(),
                    listen,
                ],
            ),
            ServerSpec::Durable { url } => (
                self.executables.durable_mcp.clone(),
                vec![
                    "bench-server".into(),
                    "durable".into(),
                    "--store".into(),
                    url.into(),
                    "--listen".into(),
                    listen,
                ],
            ),
            ServerSpec::Proxy { url } => (
                self.executables.durable_mcp.clone(),
                vec![
                    "bench-server".into(),
                    "proxy".into(),
                    "--store".into(),
                    url.into(),
                    "--listen".into(),
                    listen,
                ],
            ),
            ServerSpec::Python { python } => {
                let script = self.python_script()?;
                let db = self.dir.join("python-mcp-persist.db");
                (
                    python.clone(),
                    vec![
                        script.into(),
                        "--listen".into(),
                        listen,
                        "--db".into(),
                        db.into(),
                    ],
                )
            }
        };
        self.start(name, &program, &args, spec.path()).await
    }

    /// Start durable-mcp on the store `url` with `settings` as a child named `name`, and
    /// wait until it listens.
    ///
    /// # Errors
    /// As [`Launcher::server`].
    pub async fn durable(
        &mut self,
        url: &str,
        settings: &DurableSettings,
        name: &str,
    ) -> Result<RunningServer, BenchError> {
        let mut args: Vec<OsString> = vec![
            "bench-server".into(),
            "durable".into(),
            "--store".into(),
            url.into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ];
        args.extend(settings.args());
        let program = self.executables.durable_mcp.clone();
        let server = self.start(name, &program, &args, MCP_PATH).await?;
        if settings.metrics && server.metrics.is_none() {
            return Err(BenchError::Process {
                name: name.to_owned(),
                detail: "was asked for metrics but printed no METRICS line".into(),
            });
        }
        Ok(server)
    }

    async fn start(
        &mut self,
        name: &str,
        program: &Path,
        args: &[OsString],
        path: &'static str,
    ) -> Result<RunningServer, BenchError> {
        let mut process = self.spawn(name, Role::Server, program, args)?;
        let (addr, metrics) = process.listening(LISTEN_TIMEOUT).await?;
        Ok(RunningServer {
            process,
            addr,
            metrics,
            path,
        })
    }

    /// The Python server's script, written into the scratch directory once.
    fn python_script(&mut self) -> Result<PathBuf, BenchError> {
        if let Some(script) = &self.python_script {
            return Ok(script.clone());
        }
        let script = self.dir.join("persist_server.py");
        std::fs::write(&script, PYTHON_SERVER)?;
        self.python_script = Some(script.clone());
        Ok(script)
    }

    /// Run one load generator child named `name` with `args` against `server` (its
    /// address and path replace those of `args`) and return what it measured.
    ///
    /// # Errors
    /// The child failed (a failed call fails the whole load) or printed no result.
    pub async fn load(
        &mut self,
        server: &RunningServer,
        args: &LoadArgs,
        name: &str,
    ) -> Result<LoadResult, BenchError> {
        let args = LoadArgs {
            addr: server.addr(),
            path: server.path().to_owned(),
            ..args.clone()
        };
        let argv: Vec<OsString> = std::iter::once("bench-load".to_owned())
            .chain(args.to_args())
            .map(OsString::from)
            .collect();
        let program = self.executables.bench.clone();
        let process = self.spawn(name, Role::Load, &program, &argv)?;
        let timeout = Duration::from_millis(args.duration_ms) + LOAD_SLACK;
        let out = process.output(timeout).await?;
        let line = out
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .unwrap_or_default();
        serde_json::from_str(line).map_err(|e| BenchError::Process {
            name: name.to_owned(),
            detail: format!("printed {line:?}, not a result: {e}"),
        })
    }
}
