//! The lease script's state against a real `redis-server` (started here, on a free
//! loopback port): a key whose replicas disagree on `N` or the window (a rolling
//! deploy), every pair of shapes, and a replica of the previous script (its Lua kept in
//! `fixtures/lease_v1.lua`) sharing a key with one of this one.
//!
//! Fleet time is stepped by the tests (the rules' and groups' `shift`, as a step of
//! Redis time forward would), 50 ms a tick, every replica calling once a tick and
//! asking for all of `N`: what each is granted per window is what a saturated replica
//! would admit, counted by the window Redis granted it for.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Script, Value};

use super::{LeaseReply, LeaseRequest, Refusal, CLOCK_LUA, LEASE_LUA};
use crate::fleet::wire::{add_ages, Naming, RuleWire};

/// The lease script before shapes and versions.
const LEASE_V1_LUA: &str = include_str!("fixtures/lease_v1.lua");

/// A `redis-server` of its own, killed on drop.
struct Server {
    child: Child,
    connection: Connection,
}

impl Server {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (the fleet tests install it: tests/fleet/server.rs)");
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("url");
        let deadline = Instant::now() + Duration::from_secs(10);
        let connection = loop {
            if let Ok(c) = client.get_connection() {
                break c;
            }
            assert!(Instant::now() < deadline, "redis-server never answered");
            thread::sleep(Duration::from_millis(20));
        };
        Self { child, connection }
    }

    /// Steps fleet time `ms` forward: every rule's and group's clock.
    fn step(&mut self, ms: i64) {
        let clocks: Vec<String> = redis::cmd("KEYS")
            .arg("*:clock")
            .query::<Vec<String>>(&mut self.connection)
            .expect("keys")
            .into_iter()
            .chain(
                redis::cmd("KEYS")
                    .arg("*:meta")
                    .query::<Vec<String>>(&mut self.connection)
                    .expect("keys"),
            )
            .collect();
        for key in clocks {
            redis::cmd("HINCRBY")
                .arg(&key)
                .arg("shift")
                .arg(ms * 1000)
                .query::<i64>(&mut self.connection)
                .expect("shift");
        }
    }

    /// The rule's fleet time (ms).
    fn now_ms(&mut self, wire: &RuleWire) -> u64 {
        let (s, us): (u64, u64) = Script::new(CLOCK_LUA)
            .key(format!("{}:meta", wire.tag))
            .invoke(&mut self.connection)
            .expect("clock");
        s * 1000 + us / 1000
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A replica of rule `roll` with limit `n` per `window_ms`, running `script`.
struct Replica {
    wire: RuleWire,
    script: &'static str,
    /// Granted per window id.
    granted: BTreeMap<u64, u64>,
    refusals: u64,
}

impl Replica {
    fn new(name: &str, n: u64, window_ms: u64, script: &'static str) -> Self {
        let naming = Naming {
            prefix: "t".to_owned(),
            key: "roll".to_owned(),
            instance_id: name.to_owned(),
            replica_id: name.to_owned(),
            cluster: false,
        };
        let window = Duration::from_millis(window_ms);
        let interval = (window / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut wire = RuleWire::new(
            naming,
            n,
            window_ms * 1_000_000,
            // A generous response timeout: a call the script runs later than half of it
            // after it was sent is refused as late, and a loaded machine is slow.
            [interval, Duration::from_secs(10), interval / 2],
        );
        wire.young_windows = 4;
        Self {
            wire,
            script,
            granted: BTreeMap::new(),
            refusals: 0,
        }
    }

    fn window_ms(&self) -> u64 {
        self.wire.window_nanos / 1_000_000
    }

    /// One lease call for the current window, asking for all of `N`.
    fn call(&mut self, server: &mut Server) {
        let now = server.now_ms(&self.wire);
        let window = now / self.window_ms();
        let held = self.granted.get(&window).copied().unwrap_or(0);
        let request = LeaseRequest {
            window,
            want: self.wire.permits,
            held,
            known_instances: 0,
            known_rank: 0,
            sent_ms: now,
            vouch_ms: now,
        };
        let script = Script::new(self.script);
        let mut invocation = script.prepare_invoke();
        add_ages(&mut invocation, 1);
        self.wire.add_group(&mut invocation, now, now);
        self.wire.add_lease(&mut invocation, request, 1);
        let replies: Vec<Value> = invocation.invoke(&mut server.connection).expect("lease");
        let values: Vec<i64> = redis::from_redis_value(replies[0].clone()).expect("integers");
        let mut values = values;
        values.resize(11, 0);
        let reply = LeaseReply::from_values(&values).expect("a reply");
        assert!(!reply.expired, "{reply:?}");
        *self.granted.entry(window).or_default() += reply.granted;
        if reply.refused == Some(Refusal::Shape) {
            assert_eq!(reply.granted, 0);
            self.refusals += 1;
        }
    }
}

/// Runs `ticks` of 50 ms with `replicas` each calling once a tick.
fn run(server: &mut Server, replicas: &mut [&mut Replica], ticks: u32) {
    for _ in 0..ticks {
        for r in replicas.iter_mut() {
            r.call(server);
        }
        server.step(50);
    }
}

/// What `replicas` were granted per window of `long_ms` (their windows nest in it).
fn per_long_window(replicas: &[&Replica], long_ms: u64) -> BTreeMap<u64, u64> {
    let mut sums = BTreeMap::new();
    for r in replicas {
        for (&w, &g) in &r.granted {
            *sums.entry(w * r.window_ms() / long_ms).or_default() += g;
        }
    }
    sums
}

/// Shape `a` (two replicas) leases the key, shape `b` (one replica) joins, `a` stops:
/// while both run, every window of the longer shape keeps at most what the faster
/// shape alone allows in it (`b` is refused, and says so); once `a` has stopped, `b`
/// takes over, keeps at most its `N` per window, and all of it once `a`'s members are
/// forgotten.
fn deploy(a: (u64, u64), b: (u64, u64)) {
    let mut server = Server::start();
    let (mut a1, mut a2) = (
        Replica::new("a1", a.0, a.1, LEASE_LUA),
        Replica::new("a2", a.0, a.1, LEASE_LUA),
    );
    let mut b1 = Replica::new("b1", b.0, b.1, LEASE_LUA);
    let long = a.1.max(b.1);
    let faster = (a.0 * long / a.1).max(b.0 * long / b.1);
    let ticks = |ms: u64| u32::try_from(ms / 50).expect("ticks");
    run(&mut server, &mut [&mut a1, &mut a2], ticks(3 * long));
    run(
        &mut server,
        &mut [&mut a1, &mut a2, &mut b1],
        ticks(3 * long),
    );
    assert!(b1.refusals > 0, "{a:?} -> {b:?}: never refused");
    assert!(b1.granted.values().all(|&g| g == 0), "{:?}", b1.granted);
    let a_kept: u64 = a1.granted.values().chain(a2.granted.values()).sum();
    assert!(a_kept > 0, "the first shape kept nothing");
    let stopped = server.now_ms(&b1.wire);
    // Past the prune age of `a`'s members (20 intervals of a's group), and 3 windows.
    run(&mut server, &mut [&mut b1], ticks(6 * long + 20 * a.1 / 4));
    for (window, sum) in per_long_window(&[&a1, &a2, &b1], long) {
        assert!(
            sum <= faster,
            "{a:?} -> {b:?}: {sum} in window {window} of {long} ms"
        );
    }
    for (window, &g) in &b1.granted {
        assert!(g <= b.0, "{a:?} -> {b:?}: {g} in window {window}");
    }
    let last = *b1.granted.keys().last().expect("windows");
    let full: Vec<u64> = (last - 2..last).map(|w| b1.granted[&w]).collect();
    assert_eq!(full, [b.0, b.0], "{a:?} -> {b:?}: {:?}", b1.granted);
    let first = b1.granted.iter().find(|(_, &g)| g > 0).map(|(&w, _)| w);
    let first_ms = first.expect("b leased") * b.1;
    assert!(
        first_ms <= stopped + 2 * long + b.1,
        "{a:?} -> {b:?}: first grant {} ms after a stopped",
        first_ms.saturating_sub(stopped)
    );
}

/// Every pair of shapes: `N` raised and lowered, the window lengthened and shortened.
#[test]
fn every_change_of_shape_under_one_key_takes_over_without_exceeding() {
    for (a, b) in [
        ((50, 1000), (100, 1000)),
        ((100, 1000), (50, 1000)),
        ((50, 500), (50, 2000)),
        ((50, 2000), (50, 500)),
    ] {
        deploy(a, b);
    }
}

/// The issue's case: the previous script's state (a `since` in 500 ms windows) read
/// by a 2 s replica. It kept nothing: `since` was in the first window's units. Now
/// it leases from the third window on.
#[test]
fn a_previous_scripts_state_of_another_window_does_not_stop_the_key() {
    let mut server = Server::start();
    let mut old = Replica::new("old", 50, 500, LEASE_V1_LUA);
    run(&mut server, &mut [&mut old], 60);
    let mut new = Replica::new("new", 50, 2000, LEASE_LUA);
    run(&mut server, &mut [&mut new], 200);
    let kept: Vec<u64> = new.granted.values().copied().collect();
    assert!(
        kept.len() > 4 && kept[3..].iter().all(|&g| g == 50),
        "{kept:?}"
    );
}

/// A replica of the previous script and one of this one, same shape, share a key: no
/// window over `N`, both lease.
#[test]
fn a_replica_of_the_previous_script_shares_a_key_with_one_of_this_one() {
    let mut server = Server::start();
    let mut old = Replica::new("old", 50, 500, LEASE_V1_LUA);
    let mut new = Replica::new("new", 50, 500, LEASE_LUA);
    run(&mut server, &mut [&mut old, &mut new], 120);
    let sums = per_long_window(&[&old, &new], 500);
    assert!(sums.values().all(|&s| s <= 50), "{sums:?}");
    let full = sums.values().filter(|&&s| s == 50).count();
    assert!(full >= sums.len() - 3, "{sums:?}");
    assert!(
        old.granted.values().sum::<u64>() > 0,
        "the old replica stopped"
    );
    assert!(
        new.granted.values().sum::<u64>() > 0,
        "the new replica stopped"
    );
    assert_eq!((old.refusals, new.refusals), (0, 0));
}

/// A state written by a later script is not this one's to change: refused, and said.
#[test]
fn a_later_scripts_state_is_refused() {
    let mut server = Server::start();
    let mut r = Replica::new("r", 50, 500, LEASE_LUA);
    redis::cmd("HSET")
        .arg("{t:roll}:meta")
        .arg("v")
        .arg(3)
        .query::<i64>(&mut server.connection)
        .expect("hset");
    run(&mut server, &mut [&mut r], 40);
    assert!(r.granted.values().all(|&g| g == 0), "{:?}", r.granted);
}
