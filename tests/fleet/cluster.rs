//! A 3-node Redis Cluster on loopback: the same cap per fleet window.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::load::{self, assert_capped, drive, inner_windows, N, WINDOW};
use crate::many_rules::{command_calls, script_calls};
use crate::server::{free_port, Server};

fn start_cluster() -> Vec<Server> {
    start_cluster_with(&[vec![], vec![], vec![]], &[], None)
}

/// Three nodes, node `i` started with `extra[i]` besides the cluster's arguments, made
/// one cluster by `redis-cli <cli_args> --cluster create` on their `ports` (their plain
/// ports by default).
pub(crate) fn start_cluster_with(
    extra: &[Vec<String>; 3],
    cli_args: &[String],
    ports: Option<&[u16; 3]>,
) -> Vec<Server> {
    let nodes: Vec<Server> = extra
        .iter()
        .map(|extra| {
            let port = free_port();
            let conf = format!("nodes-{port}.conf");
            let mut args = vec!["--cluster-enabled", "yes", "--cluster-config-file", &conf];
            args.extend(extra.iter().map(String::as_str));
            Server::start_with(port, &args)
        })
        .collect();
    let addrs: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", ports.map_or(nodes[i].port, |p| p[i])))
        .collect();
    let out = Command::new("redis-cli")
        .args(cli_args)
        .arg("--cluster")
        .arg("create")
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        out.status.success(),
        "cluster create failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in &nodes {
        while !node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
            assert!(Instant::now() < deadline, "cluster_state never ok");
            thread::sleep(Duration::from_millis(50));
        }
    }
    nodes
}

#[test]
fn cluster_of_three_nodes_stays_under_n() {
    let nodes = start_cluster();
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let fleet = load::fleet(&urls, "cluster", 4);
    load::warm_up(&fleet, 4);
    for offered in [0.8, 3.0] {
        let (per_window, first, last) = drive(&fleet, offered * f64::from(N), WINDOW * 8, || {});
        let max = assert_capped(&per_window, "cluster");
        let inner = inner_windows(&per_window, first, last);
        println!("cluster offered={offered}N: windows {inner:?}, max {max}");
        if offered >= 2.0 {
            assert!(
                inner.iter().all(|n| *n * 10 >= u64::from(N) * 9),
                "{inner:?}"
            );
        }
    }
    // The rule's keys share one slot (hash tag): all on one node.
    let holders = nodes
        .iter()
        .filter(|n| n.cli(&["DBSIZE"]).trim().parse::<u64>().unwrap_or(0) > 0)
        .count();
    assert_eq!(
        holders, 1,
        "the rule's keys are spread over {holders} nodes"
    );
    // Cluster routing works: calls succeed (a wrong slot would fail every one). A loaded
    // machine may still time out the odd call, which the cap above already survived.
    for limiter in &fleet {
        let stats = limiter.stats();
        assert!(
            stats.leases > 10 * stats.lease_errors,
            "lease calls failing on the cluster: {stats:?}"
        );
    }
}

/// One fleet rule per key on the cluster of `nodes`, of one process, warmed up.
fn rules_on(nodes: &[Server], keys: &[String]) -> Vec<otel_rate_sampler::FleetLimiter> {
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let fleet: Vec<_> = keys
        .iter()
        .map(|key| {
            otel_rate_sampler::FleetLimiter::builder(urls.clone(), key.clone(), load::limit())
                .sync_interval(load::INTERVAL)
                .response_timeout(load::INTERVAL * 4)
                .build()
                .expect("build")
        })
        .collect();
    load::warm_up(&fleet, 4);
    fleet
}

/// 100 rules of one process on a cluster share one worker: their keys spread over the
/// nodes (a slot per rule), each round sends one pipeline per slot over one connection
/// per node, and every rule leases.
#[test]
fn a_hundred_rules_on_a_cluster_share_one_worker() {
    let nodes = start_cluster();
    let keys: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
    let fleet = rules_on(&nodes, &keys);
    for l in &fleet {
        let s = l.stats();
        assert_eq!(s.worker_rules, 100, "{s:?}");
        // A call slowed by a loaded machine may be refused as late: a clock correction
        // the design expects (the next lease goes through), not a fault.
        let failed = s
            .last_failure
            .filter(|f| *f != otel_rate_sampler::FleetFailure::Late);
        assert!(failed.is_none() && !s.fallback_active, "{s:?}");
        assert!(s.leases >= 1, "{s:?}");
    }
    for node in &nodes {
        let keys: u64 = node.cli(&["DBSIZE"]).trim().parse().unwrap_or(0);
        let clients = node.clients();
        println!("node {}: {keys} keys, {clients} clients", node.port);
        assert!(keys > 0, "no rule's keys on node {}", node.port);
        // The worker's connection to this node (and at most one the cluster client
        // keeps for its topology), whatever the number of rules.
        assert!(clients <= 2, "{clients} clients on node {}", node.port);
    }
}

/// `count` rule keys whose hash tags (`{otel-rate:<key>}`) fall in one cluster slot,
/// and that slot; the first key's slot is checked against the cluster's own answer.
fn keys_in_one_slot(node: &Server, count: usize) -> (Vec<String>, u16) {
    let slot = |key: &str| {
        let tag = format!("{}:{key}", otel_rate_sampler::DEFAULT_FLEET_PREFIX);
        crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % 16384
    };
    let first = "same-slot-0";
    let target = slot(first);
    let asked = node.cli(&[
        "CLUSTER",
        "KEYSLOT",
        &format!(
            "{{{}:{first}}}:w:1",
            otel_rate_sampler::DEFAULT_FLEET_PREFIX
        ),
    ]);
    assert_eq!(
        asked.trim(),
        target.to_string(),
        "the test's slot is not Redis's"
    );
    let keys: Vec<String> = (0..)
        .map(|i| format!("same-slot-{i}"))
        .filter(|k| slot(k) == target)
        .take(count)
        .collect();
    (keys, target)
}

/// Rules in one slot go in one script call per round, and their replica heartbeats
/// once for them all: idle, a round writes the group's two sets (2 `ZADD`s), not two
/// per rule (which 20 rules in the slot would make 40 per call).
#[test]
fn rules_sharing_a_slot_heartbeat_their_replica_once_per_round() {
    let nodes = start_cluster();
    let (keys, slot) = keys_in_one_slot(&nodes[0], 20);
    let fleet = rules_on(&nodes, &keys);
    // Past the young windows; then nearly idle: a decision per rule every
    // window, so that no rule goes dormant (`lease/dormant.rs`: no call at all), and
    // the calls are heartbeats and the odd lease.
    let touch = |windows: u32| {
        for _ in 0..windows {
            for l in &fleet {
                let _ = l.acquire_window();
            }
            thread::sleep(WINDOW);
        }
    };
    touch(3);
    for node in &nodes {
        let _ = node.cli(&["CONFIG", "RESETSTAT"]);
    }
    touch(4);
    let zadds: u64 = nodes.iter().map(|n| command_calls(n, "zadd")).sum();
    let scripts: u64 = nodes.iter().map(script_calls).sum();
    println!("20 rules in slot {slot}, idle for 4 windows: {scripts} script calls, {zadds} ZADDs");
    assert!(
        scripts >= 4,
        "{scripts} script calls in 4 windows of idle heartbeats"
    );
    assert!(
        zadds <= 2 * scripts,
        "{zadds} ZADDs in {scripts} script calls: heartbeats per rule, not per replica"
    );
    for l in &fleet {
        let s = l.stats();
        // A call slowed by a loaded machine may be refused as late: a clock correction
        // the design expects (the next lease goes through), not a fault.
        let failed = s
            .last_failure
            .filter(|f| *f != otel_rate_sampler::FleetFailure::Late);
        assert!(failed.is_none() && !s.fallback_active, "{s:?}");
    }
}
