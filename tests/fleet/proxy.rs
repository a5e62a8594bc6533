//! A loopback TCP proxy that can be frozen: bytes stop flowing both ways, or only from
//! the server back to the client (they are held, not lost, as on a congested or
//! partitioned network) until it is thawed. Puts one instance of a fleet out of
//! Redis's reach while the others still reach it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

pub(crate) struct Proxy {
    pub(crate) port: u16,
    frozen: Arc<AtomicBool>,
    replies_frozen: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
}

impl Proxy {
    /// Forwards a free loopback port to `127.0.0.1:upstream`.
    pub(crate) fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let frozen = Arc::new(AtomicBool::new(false));
        let replies_frozen = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicBool::new(false));
        let (f, r, c) = (frozen.clone(), replies_frozen.clone(), closed.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                if c.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                for (from, to, replies) in [
                    (client.try_clone(), server.try_clone(), false),
                    (server.try_clone(), client.try_clone(), true),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let (f, c) = (f.clone(), c.clone());
                    // The reply direction also stops when only replies are frozen.
                    let r = replies.then(|| r.clone());
                    thread::spawn(move || pump(from, to, &f, r.as_deref(), &c));
                }
            }
        });
        Self {
            port,
            frozen,
            replies_frozen,
            closed,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(crate) fn freeze(&self) {
        self.frozen.store(true, Ordering::Relaxed);
    }

    /// Holds only what the server sends: requests still reach it.
    pub(crate) fn freeze_replies(&self) {
        self.replies_frozen.store(true, Ordering::Relaxed);
    }

    pub(crate) fn thaw(&self) {
        self.frozen.store(false, Ordering::Relaxed);
        self.replies_frozen.store(false, Ordering::Relaxed);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
        self.frozen.store(false, Ordering::Relaxed);
        self.replies_frozen.store(false, Ordering::Relaxed);
        // Wake the accept loop so it sees `closed`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    frozen: &AtomicBool,
    replies_frozen: Option<&AtomicBool>,
    closed: &AtomicBool,
) {
    let held = || {
        frozen.load(Ordering::Relaxed) || replies_frozen.is_some_and(|r| r.load(Ordering::Relaxed))
    };
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while held() && !closed.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(1));
        }
        if closed.load(Ordering::Relaxed) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
