//! The bench's own `redis-server` (it must be on PATH) on a free loopback port, killed
//! on drop, and fleet limiters on it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use otel_rate_sampler::{FleetLimiter, Limit};

pub(crate) struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    pub(crate) fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be on PATH (apt-get install -y redis-server)");
        let redis = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis.cli(&["PING"]).contains("PONG") {
            assert!(Instant::now() < deadline, "redis-server did not start");
            thread::sleep(Duration::from_millis(10));
        }
        redis
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn cli(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the server process.
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// A fleet limiter for `key` whose Redis memory counts as old (see the module docs).
    pub(crate) fn limiter(&self, key: &str, limit: Limit) -> FleetLimiter {
        self.cli(&["HSET", &format!("{{otel-rate:{key}}}:meta"), "since", "0"]);
        let l = FleetLimiter::builder(self.url(), key, limit)
            .build()
            .expect("build");
        let deadline = Instant::now() + Duration::from_secs(10);
        while l.stats().window_granted == 0 {
            assert!(Instant::now() < deadline, "no lease: {:?}", l.stats());
            thread::sleep(Duration::from_millis(1));
        }
        l
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
