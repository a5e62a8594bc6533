//! A 3-node Redis Cluster on loopback: the same cap per fleet window.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::load::{self, assert_capped, drive, inner_windows, N, WINDOW};
use crate::server::{free_port, Server};

fn start_cluster() -> Vec<Server> {
    let nodes: Vec<Server> = (0..3)
        .map(|_| {
            let port = free_port();
            let conf = format!("nodes-{port}.conf");
            Server::start_with(
                port,
                &["--cluster-enabled", "yes", "--cluster-config-file", &conf],
            )
        })
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let out = Command::new("redis-cli")
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

/// 100 rules of one process on a cluster share one worker: their keys spread over the
/// nodes (a slot per rule), each round sends one pipeline per slot over one connection
/// per node, and every rule leases.
#[test]
fn a_hundred_rules_on_a_cluster_share_one_worker() {
    let nodes = start_cluster();
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let fleet: Vec<_> = (0..100)
        .map(|i| {
            otel_rate_sampler::FleetLimiter::builder(urls.clone(), format!("c{i}"), load::limit())
                .sync_interval(load::INTERVAL)
                .response_timeout(load::INTERVAL * 4)
                .build()
                .expect("build")
        })
        .collect();
    load::warm_up(&fleet, 4);
    for l in &fleet {
        let s = l.stats();
        assert_eq!(s.worker_rules, 100, "{s:?}");
        assert!(s.last_failure.is_none() && !s.fallback_active, "{s:?}");
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
