//! nginx as a plain round-robin load balancer in front of several workers: no stickiness,
//! no buffering (SSE must flow), HTTP/1.1 keep-alive to the workers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Nginx {
    child: Child,
    pub addr: SocketAddr,
}

/// The nginx binary, if installed.
pub fn binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// The one nginx configuration of the load-balancer tests, shared with
/// `scripts/lb-conformance.sh`; `docs/deployment.md` shows its upstream and location blocks.
pub const TEMPLATE: &str = include_str!("../../../../scripts/nginx.conf.template");

/// `TEMPLATE` filled in: scratch folder `dir`, `listen` address, one `server` per worker.
pub fn config(dir: &Path, listen: SocketAddr, workers: &[SocketAddr]) -> String {
    let servers: Vec<String> = workers
        .iter()
        .map(|w| format!("        server {w};"))
        .collect();
    TEMPLATE
        .replace("@DIR@", &dir.display().to_string())
        .replace("@LISTEN@", &listen.to_string())
        .replace("@SERVERS@", &servers.join("\n"))
}

/// The directives of the block that opens with `opening` (e.g. `location /mcp {`) in an
/// nginx configuration, one per statement, comments and blank lines dropped, `server`
/// lines of an upstream left out (addresses differ between deployments).
pub fn block_directives(conf: &str, opening: &str) -> Vec<String> {
    let Some(start) = conf.find(opening) else {
        return Vec::new();
    };
    conf[start + opening.len()..]
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .take_while(|line| *line != "}")
        .filter(|line| !line.is_empty() && !line.starts_with("server "))
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

impl Nginx {
    pub fn start(dir: &Path, listen: SocketAddr, workers: &[SocketAddr]) -> Nginx {
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(dir, listen, workers)).unwrap();
        let child = Command::new(binary().expect("nginx installed"))
            .args([
                "-p",
                &dir.display().to_string(),
                "-c",
                &conf.display().to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nginx");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(listen).is_err() {
            assert!(Instant::now() < deadline, "nginx did not start on {listen}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx {
            child,
            addr: listen,
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: the master must take its worker processes down with it.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
