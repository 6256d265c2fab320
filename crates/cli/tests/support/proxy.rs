//! A TCP proxy the tests control, to take a store "down" under a running server without
//! touching the real service: `cut()` drops every connection and refuses new ones,
//! `hang()` makes it a server that stopped answering (connections stay open, nothing comes
//! back, new ones are accepted and never answered), `restore()` lets them through again.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Proxy {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    hung: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let hung = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (d, h, o, slow) = (down.clone(), hung.clone(), open.clone(), delay_ms.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if d.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                if h.load(Ordering::SeqCst) {
                    // Accepted, never answered (closed by `cut`).
                    o.lock().unwrap().push(client);
                    continue;
                }
                let Ok(upstream) = TcpStream::connect_timeout(&target, Duration::from_secs(2))
                else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                {
                    let mut open = o.lock().unwrap();
                    open.push(client.try_clone().unwrap());
                    open.push(upstream.try_clone().unwrap());
                }
                pipe(
                    client.try_clone().unwrap(),
                    upstream.try_clone().unwrap(),
                    h.clone(),
                    slow.clone(),
                );
                pipe(upstream, client, h.clone(), slow.clone());
            }
        });
        Proxy {
            addr,
            down,
            hung,
            delay_ms,
            open,
        }
    }

    /// Stop answering: open connections forward nothing (until `restore`), new ones are
    /// accepted and left silent.
    pub fn hang(&self) {
        self.hung.store(true, Ordering::SeqCst);
    }

    /// Drop every open connection and refuse new ones.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Hold every chunk this long before forwarding it (a slow network or store).
    pub fn slow(&self, delay: Duration) {
        self.delay_ms
            .store(u64::try_from(delay.as_millis()).unwrap(), Ordering::SeqCst);
    }

    /// Let connections through again.
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
        self.hung.store(false, Ordering::SeqCst);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, hung: Arc<AtomicBool>, delay_ms: Arc<AtomicU64>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    while hung.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let delay = delay_ms.load(Ordering::SeqCst);
                    if delay > 0 {
                        std::thread::sleep(Duration::from_millis(delay));
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
