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
    ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.exists())
}

/// The configuration the tests and `docs/deployment.md` use.
pub fn config(dir: &Path, listen: SocketAddr, workers: &[SocketAddr]) -> String {
    let servers: String = workers.iter().map(|w| format!("        server {w};\n")).collect();
    format!(
        "daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream mcp {{
{servers}        keepalive 32;
    }}
    server {{
        listen {listen};
        location /mcp {{
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_set_header Host $host;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_cache off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
            proxy_next_upstream error timeout;
        }}
    }}
}}
",
        dir = dir.display()
    )
}

impl Nginx {
    pub fn start(dir: &Path, listen: SocketAddr, workers: &[SocketAddr]) -> Nginx {
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(dir, listen, workers)).unwrap();
        let child = Command::new(binary().expect("nginx installed"))
            .args(["-p", &dir.display().to_string(), "-c", &conf.display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nginx");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(listen).is_err() {
            assert!(Instant::now() < deadline, "nginx did not start on {listen}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx { child, addr: listen }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: the master must take its worker processes down with it.
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
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
