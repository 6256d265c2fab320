//! Child processes of a run (servers under test, load generators): started pinned to a
//! CPU where the machine allows, watched through their stdout, and killed on every way
//! out of the run.

use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::BenchError;
use crate::child::{LISTENING, METRICS};

/// How long a stopping child may take to exit after its stdin was closed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Lines of a failed child's log quoted in the error.
const LOG_TAIL_LINES: usize = 15;

/// Which CPU each kind of child runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinning {
    /// `(server CPU, load generator CPU)`, or why the children are not pinned.
    cpus: Result<(usize, usize), String>,
}

impl Pinning {
    /// Pin servers to the first CPU this process may use and load generators to the
    /// second, with `taskset`, if there are two and `taskset` runs; otherwise not pinned,
    /// and [`Pinning::describe`] says why.
    pub async fn detect() -> Self {
        let allowed = allowed_cpus();
        if allowed.len() < 2 {
            return Self::none(format!("only {} CPU available", allowed.len().max(1)));
        }
        let taskset = Command::new("taskset")
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
        match taskset {
            Ok(status) if status.success() => Self {
                cpus: Ok((allowed[0], allowed[1])),
            },
            Ok(status) => Self::none(format!("`taskset --version` failed ({status})")),
            Err(error) => Self::none(format!("`taskset` not found ({error})")),
        }
    }

    /// No pinning, for `reason`.
    pub fn none(reason: impl Into<String>) -> Self {
        Self {
            cpus: Err(reason.into()),
        }
    }

    /// Whether children are pinned.
    pub fn is_pinned(&self) -> bool {
        self.cpus.is_ok()
    }

    /// One sentence for the report.
    pub fn describe(&self) -> String {
        match &self.cpus {
            Ok((server, load)) => format!(
                "each server pinned to CPU {server} and the load generator to CPU {load} (`taskset -c`), each in its own process"
            ),
            Err(reason) => format!(
                "server and load generator in separate processes, NOT pinned to CPUs: {reason}"
            ),
        }
    }

    /// The command running `program args` as a child of `role`, pinned if so decided.
    fn command(&self, role: Role, program: &Path, args: &[OsString]) -> Command {
        let mut command = match &self.cpus {
            Ok((server, load)) => {
                let cpu = match role {
                    Role::Server => server,
                    Role::Load => load,
                };
                let mut command = Command::new("taskset");
                // taskset execs the program: the child's pid is the program's.
                command.arg("-c").arg(cpu.to_string()).arg(program);
                command
            }
            Err(_) => Command::new(program),
        };
        command.args(args);
        command
    }
}

/// The CPUs this process may run on (`Cpus_allowed_list` of `/proc/self/status`), or as
/// many as the standard library counts, numbered from 0.
fn allowed_cpus() -> Vec<usize> {
    let listed = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("Cpus_allowed_list:")
                    .map(|list| parse_cpu_list(list.trim()))
            })
        });
    match listed {
        Some(Some(cpus)) if !cpus.is_empty() => cpus,
        _ => (0..std::thread::available_parallelism().map_or(1, std::num::NonZero::get)).collect(),
    }
}

/// `0-1,4,6-7` as `[0, 1, 4, 6, 7]`; `None` if it does not parse.
fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (from.parse::<usize>().ok()?, to.parse::<usize>().ok()?);
                cpus.extend(from..=to);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// What a child is for (which CPU it gets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A server under test.
    Server,
    /// A load generator.
    Load,
}

/// A running child process. Dropping it kills the process (SIGKILL); [`ChildProcess::stop`]
/// asks it to end first (its stdin is closed) and waits for it.
pub struct ChildProcess {
    name: String,
    pid: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    log: PathBuf,
}

impl fmt::Debug for ChildProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildProcess")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl ChildProcess {
    /// Start `program args` as a child of `role` named `name`: stdin and stdout piped,
    /// stderr appended to `log`.
    pub(crate) fn spawn(
        name: &str,
        pinning: &Pinning,
        role: Role,
        program: &Path,
        args: &[OsString],
        log: &Path,
    ) -> Result<Self, BenchError> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut child = pinning
            .command(role, program, args)
            // A child logs warnings only, whatever this process logs: a log line per
            // request would be measured too.
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| BenchError::Process {
                name: name.to_owned(),
                detail: format!("cannot start {}: {e}", program.display()),
            })?;
        let pid = child.id().ok_or_else(|| BenchError::Process {
            name: name.to_owned(),
            detail: "exited at once".into(),
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(BenchError::Process {
                name: name.to_owned(),
                detail: "no stdio pipes".into(),
            });
        };
        Ok(Self {
            name: name.to_owned(),
            pid,
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            log: log.to_owned(),
        })
    }

    /// The process id (the program's own: `taskset` execs it).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its name in progress lines and errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Wait for the server's `LISTENING <addr>` line, at most `timeout`; with the address of
    /// its `/metrics` if it printed a `METRICS <addr>` line first.
    pub(crate) async fn listening(
        &mut self,
        timeout: Duration,
    ) -> Result<(SocketAddr, Option<SocketAddr>), BenchError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut metrics = None;
        let mut line = String::new();
        let detail = loop {
            line.clear();
            let read = tokio::time::timeout_at(deadline, self.stdout.read_line(&mut line)).await;
            match read {
                Err(_) => break format!("did not listen within {} s", timeout.as_secs()),
                Ok(Err(error)) => break format!("reading its stdout: {error}"),
                Ok(Ok(0)) => {
                    break format!("exited before listening ({})", self.exit_status().await);
                }
                Ok(Ok(_)) => {}
            }
            let line = line.trim();
            if let Some(addr) = line.strip_prefix(METRICS) {
                match addr.parse::<SocketAddr>() {
                    Ok(addr) if metrics.is_none() => metrics = Some(addr),
                    _ => break format!("printed {line:?} instead of one {METRICS:?}<address>"),
                }
                continue;
            }
            match line.strip_prefix(LISTENING).map(str::parse::<SocketAddr>) {
                Some(Ok(addr)) => return Ok((addr, metrics)),
                _ => break format!("printed {line:?} instead of {LISTENING:?}<address>"),
            }
        };
        Err(self.failure(detail))
    }

    /// Read the child's whole stdout until it exits, at most `timeout`; its output if it
    /// exited successfully.
    pub(crate) async fn output(mut self, timeout: Duration) -> Result<String, BenchError> {
        let mut out = String::new();
        let read = tokio::time::timeout(timeout, self.stdout.read_to_string(&mut out)).await;
        let detail = match read {
            Err(_) => format!("did not finish within {} s", timeout.as_secs()),
            Ok(Err(error)) => format!("reading its stdout: {error}"),
            Ok(Ok(_)) => match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
                Ok(Ok(status)) if status.success() => return Ok(out),
                Ok(Ok(status)) => format!("exited with {status}"),
                Ok(Err(error)) => format!("waiting for it: {error}"),
                Err(_) => "closed its stdout but did not exit".to_owned(),
            },
        };
        Err(self.failure(detail))
    }

    /// The resident set size of the process (`VmRSS` of `/proc/PID/status`), in KiB.
    pub(crate) fn rss_kib(&self) -> Result<u64, BenchError> {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path)
            .map_err(|e| self.failure(format!("reading {path}: {e}")))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| {
                value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .ok_or_else(|| self.failure(format!("no VmRSS in {path}")))
    }

    /// The CPU time the process has used so far, user and system, all its threads
    /// (`utime + stime` of `/proc/PID/stat`, in the kernel's 100 Hz clock ticks).
    pub(crate) fn cpu_time(&self) -> Result<Duration, BenchError> {
        let path = format!("/proc/{}/stat", self.pid);
        let stat = std::fs::read_to_string(&path)
            .map_err(|e| self.failure(format!("reading {path}: {e}")))?;
        cpu_ticks(&stat)
            .map(|ticks| Duration::from_millis(ticks * 10))
            .ok_or_else(|| self.failure(format!("no utime/stime in {path}")))
    }

    /// End the child: close its stdin (servers and load generators stop on that), wait
    /// up to 10 s, then kill it. Waits for the exit either way, so that no process is
    /// left behind.
    ///
    /// # Errors
    /// It had to be killed (the error says so; it is gone all the same).
    pub async fn stop(mut self) -> Result<(), BenchError> {
        drop(self.stdin.take());
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(_) => Ok(()),
            Err(_) => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                Err(self.failure(format!(
                    "did not exit within {} s of its stdin closing; killed",
                    STOP_TIMEOUT.as_secs()
                )))
            }
        }
    }

    async fn exit_status(&mut self) -> String {
        match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(error)) => format!("status unknown: {error}"),
            Err(_) => "still running".to_owned(),
        }
    }

    /// An error naming this child, with the end of its log.
    fn failure(&self, detail: String) -> BenchError {
        let tail = log_tail(&self.log);
        let detail = if tail.is_empty() {
            detail
        } else {
            format!("{detail}; its log ends with:\n{tail}")
        };
        BenchError::Process {
            name: self.name.clone(),
            detail,
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // Already exited: an error we do not need. Otherwise SIGKILL, and tokio reaps it.
        let _ = self.child.start_kill();
    }
}

/// The CPU time the whole machine has spent busy so far, all CPUs together: `user + nice +
/// system + irq + softirq` of the `cpu` line of `/proc/stat` (idle, I/O wait and time stolen
/// by a hypervisor are not work done here), in the kernel's 100 Hz clock ticks. Beside one
/// server's own CPU it counts everything a call costs the machine: the load generator, and
/// a store's server (Redis, PostgreSQL) running on the same machine.
pub(crate) fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    busy_ticks(stat.lines().next()?).map(|ticks| Duration::from_millis(ticks * 10))
}

/// The busy ticks of the aggregate `cpu` line of `/proc/stat`.
fn busy_ticks(line: &str) -> Option<u64> {
    let mut fields = line
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(str::parse::<u64>);
    let mut next = || fields.next()?.ok();
    let (user, nice, system, _idle, _iowait, irq, softirq) = (
        next()?,
        next()?,
        next()?,
        next()?,
        next()?,
        next()?,
        next()?,
    );
    Some(user + nice + system + irq + softirq)
}

/// `utime + stime` of a `/proc/PID/stat` line: the 14th and 15th fields, counted after the
/// command name, which is in parentheses and may hold spaces.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts with field 3 (the state).
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The last lines of `log` (empty when there is none).
fn log_tail(log: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(log) else {
        return String::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// Whether process `pid` still runs (a zombie, exited but not yet reaped, does not).
pub fn process_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may itself hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "4242 (bench server) S 1 4242 4242 0 -1 4194304 1200 0 0 0 731 268 0 0 20 0 6 0 1000 1 1 1";
        assert_eq!(cpu_ticks(stat), Some(731 + 268));
        assert_eq!(cpu_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn machine_busy_ticks_leave_idle_wait_and_steal_out() {
        let line = "cpu  1000 20 300 50000 400 7 8 900 0 0";
        assert_eq!(busy_ticks(line), Some(1000 + 20 + 300 + 7 + 8));
        assert_eq!(
            busy_ticks("cpu0 1 2 3 4 5 6 7"),
            None,
            "one CPU's line is not the aggregate"
        );
        assert_eq!(busy_ticks("cpu  1 2 3"), None);
        assert!(machine_busy().is_some(), "this machine has a /proc/stat");
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_cpu_list("3"), Some(vec![3]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn this_process_runs_and_a_free_pid_does_not() {
        assert!(process_running(std::process::id()));
        assert!(!process_running(u32::MAX));
    }
}
