//! A real `redis-server` on a free loopback port, killed on drop.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `bin --version` runs.
fn installed(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Makes sure the Redis binaries are there: the fleet tests run against a real server
/// and never skip. When they are missing (a fresh machine), they are installed once per
/// test run from the distribution's package (`apt-get install -y redis-server`, after
/// an `apt-get update` if the first try fails), as `.ci/run` did; where that cannot be
/// done (no apt, no root), the test fails with what to install.
pub(crate) fn require_redis() {
    static PROVISIONED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let outcome = PROVISIONED.get_or_init(|| {
        let ready = || ["redis-server", "redis-cli"].into_iter().all(installed);
        if ready() {
            return Ok(());
        }
        let apt = |args: &[&str]| {
            Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let install = || apt(&["install", "-y", "redis-server"]);
        if (install() || (apt(&["update"]) && install())) && ready() {
            return Ok(());
        }
        Err(
            "`redis-server` and `redis-cli` are not on PATH and could not be installed \
             with apt-get: the fleet tests run against a real Redis. Install it (Debian/Ubuntu: \
             `apt-get install -y redis-server`) and rerun."
                .to_owned(),
        )
    });
    if let Err(why) = outcome {
        panic!("{why}");
    }
}

/// A free loopback port (bound then released).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// One `redis-server` process.
pub(crate) struct Server {
    child: Option<Child>,
    pub(crate) port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

impl Server {
    /// A server on a free port, no persistence, `DEBUG` allowed.
    pub(crate) fn start() -> Self {
        Self::start_with(free_port(), &[])
    }

    /// A server on `port` with `extra` arguments.
    pub(crate) fn start_with(port: u16, extra: &[&str]) -> Self {
        require_redis();
        let dir = std::env::temp_dir().join(format!("otel-fleet-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut server = Self {
            child: None,
            port,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "yes", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("could not start redis-server");
        self.child = Some(child);
        self.wait_until_up();
    }

    /// `redis://127.0.0.1:port`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn wait_until_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if ping(self.port) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer PING within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `kill -9`: every key is lost (no persistence).
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again, empty, on the same port.
    pub(crate) fn restart_empty(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        // The port may take a moment to be free again.
        while TcpListener::bind(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "port {} stays busy", self.port);
            std::thread::sleep(Duration::from_millis(10));
        }
        self.spawn();
    }

    /// Runs `redis-cli -p port args...` and returns its output.
    pub(crate) fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Server {
    /// The clients connected, less the `redis-cli` asking.
    pub(crate) fn clients(&self) -> u64 {
        let info = self.cli(&["INFO", "clients"]);
        let count = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .expect("INFO clients answers connected_clients");
        count.trim().parse::<u64>().expect("a count") - 1
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether a server answers `PING` on `port` (with `PONG`, or `NOAUTH` if it needs a
/// password).
pub(crate) fn ping(port: u16) -> bool {
    let Ok(mut s) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    // A server started with `--requirepass` answers `-NOAUTH`: it is up all the same.
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH"))
}
