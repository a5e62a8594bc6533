//! The lease state machine without Redis: a fake Redis answers its calls, a manual
//! local time drives it, and a greedy spender plays the decisions.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::fleet::time::time_to_nanos;

const MS: u64 = 1_000_000;
const N: u64 = 100;
const WINDOW: u64 = 200 * MS;
const INTERVAL: u64 = 50 * MS;
const TICK: u64 = 5 * MS;

/// What happens to the next call.
#[derive(Clone, Copy, Debug)]
enum Event {
    /// Redis answers after `rtt_ms`, granting up to `grant` of what is asked.
    Answer { rtt_ms: u64, grant: u64 },
    /// The call fails after `after_ms` (a refused connection, a timeout).
    Fail { after_ms: u64 },
    /// Time passes with no call answered (the machine may plan none).
    Wait { ms: u64 },
}

/// One replica and the fake Redis it talks to.
struct Harness {
    lease: LeaseWord,
    time: TimeMap,
    stats: StatCells,
    machine: LeaseMachine,
    /// Local monotonic time.
    now: u64,
    /// Redis `TIME` minus local time.
    server_offset: i128,
    instances: u64,
    rank: u64,
    /// Per window id: what the fake Redis granted this replica, and its total.
    granted: BTreeMap<u64, u64>,
    /// Per window id: what the greedy decisions spent.
    spent: BTreeMap<u64, u64>,
    calls: u64,
}

impl Harness {
    fn new(instances: u64, rank: u64) -> Self {
        Self {
            lease: LeaseWord::new(),
            time: TimeMap::default(),
            stats: StatCells::default(),
            machine: LeaseMachine::new(Settings {
                permits: N,
                window_nanos: WINDOW,
                interval_nanos: INTERVAL,
                tick_nanos: TICK,
            }),
            now: 1_000 * MS,
            server_offset: i128::from(time_to_nanos(1_700_000_000, 0)),
            instances,
            rank,
            granted: BTreeMap::new(),
            spent: BTreeMap::new(),
            calls: 0,
        }
    }

    /// The machine, and the memory it writes.
    fn parts(&mut self) -> (&mut LeaseMachine, Shared<'_>) {
        let shared = Shared {
            lease: &self.lease,
            time: &self.time,
            stats: &self.stats,
        };
        (&mut self.machine, shared)
    }

    fn server_time(&self, local: u64) -> u64 {
        u64::try_from(i128::from(local) + self.server_offset).expect("positive")
    }

    /// Redis's current window.
    fn redis_window(&self) -> u64 {
        self.server_time(self.now) / WINDOW
    }

    /// The fake lease script: grants up to `grant` for the window asked, never more
    /// than N for a window id in total (this replica alone).
    fn answer(&mut self, request: &LeaseRequest, grant: u64, t0: u64, t1: u64) -> LeaseReply {
        let server = self.server_time(t0 + (t1 - t0) / 2);
        let expired = (server / MS).saturating_sub(request.sent_ms) > INTERVAL / MS / 2;
        let total = self.granted.entry(request.window).or_default();
        let g = if expired {
            0
        } else {
            request.want.min(grant).min(N - *total)
        };
        *total += g;
        LeaseReply {
            granted: g,
            total: *total,
            instances: self.instances,
            rank: self.rank,
            since: 0,
            young: false,
            server_unix_nanos: server,
            expired,
        }
    }

    /// Plans, and answers a planned call as `event` says.
    fn step(&mut self, event: Event) {
        let call = match event {
            Event::Wait { ms } => {
                self.now += ms * MS;
                None
            }
            _ => {
                let now = self.now;
                let (machine, shared) = self.parts();
                let call = machine.plan(shared, now);
                if call.is_none() {
                    self.now += TICK;
                }
                call
            }
        };
        if let Some(call) = call {
            self.calls += 1;
            let t0 = self.now;
            match event {
                Event::Answer { rtt_ms, grant } => {
                    let t1 = t0 + rtt_ms * MS;
                    let reply = match call {
                        Call::SampleTime => Reply::Time(self.server_time(t0 + (t1 - t0) / 2)),
                        Call::Lease(request) => Reply::Lease(self.answer(&request, grant, t0, t1)),
                    };
                    self.now = t1;
                    let (machine, shared) = self.parts();
                    machine.on_reply(shared, call, reply, t0, t1);
                }
                Event::Fail { after_ms } => {
                    self.now += after_ms * MS;
                    let (machine, shared) = self.parts();
                    machine.on_failure(shared, t0);
                }
                Event::Wait { .. } => unreachable!(),
            }
        }
        self.spend_all();
    }

    /// The decisions: spend everything the word offers now.
    fn spend_all(&mut self) {
        let Some(fleet) = self.time.fleet_nanos(self.now) else {
            return;
        };
        while let Some(w) = self.lease.try_spend_at(fleet, WINDOW) {
            *self.spent.entry(w).or_default() += 1;
        }
    }

    fn good(&mut self, rounds: usize) {
        for _ in 0..rounds {
            self.step(Event::Answer {
                rtt_ms: 1,
                grant: N,
            });
        }
    }

    /// No window id spent more than Redis granted plus one fallback share.
    fn assert_bounded(&self) {
        let share_bound = N.div_ceil(self.instances);
        for (w, spent) in &self.spent {
            let granted = self.granted.get(w).copied().unwrap_or(0);
            assert!(
                *spent <= granted + share_bound,
                "window {w}: spent {spent} > granted {granted} + share {share_bound}"
            );
        }
    }
}

#[test]
fn nothing_is_spent_before_the_first_time_sample() {
    let mut h = Harness::new(2, 0);
    let now = h.now;
    let (machine, shared) = h.parts();
    assert_eq!(machine.plan(shared, now), Some(Call::SampleTime));
    h.spend_all();
    assert!(h.spent.is_empty());
}

#[test]
fn leases_what_redis_grants_and_spends_no_more() {
    let mut h = Harness::new(2, 0);
    h.good(400);
    h.assert_bounded();
    let full = h.spent.values().filter(|&&s| s == N).count();
    assert!(full >= 5, "the replica alone should fill N: {:?}", h.spent);
    assert!(!h.machine.in_fallback());
}

#[test]
fn falls_back_to_its_share_after_three_intervals_and_resumes() {
    let mut h = Harness::new(4, 1);
    h.good(200);
    for _ in 0..200 {
        h.step(Event::Fail { after_ms: 10 });
    }
    assert!(h.machine.in_fallback());
    let fell_back = h.machine.take_notices();
    assert!(
        fell_back.contains(&Notice::FellBack { instances: 4 }),
        "{fell_back:?}"
    );
    // While failing: one call per interval.
    let calls = h.calls;
    for _ in 0..100 {
        h.step(Event::Fail { after_ms: 0 });
    }
    assert!(
        h.calls - calls <= 100 * TICK / INTERVAL + 1,
        "{}",
        h.calls - calls
    );
    let w = h.redis_window();
    let spent_in_fallback = h.spent.get(&(w - 1)).copied().unwrap_or(0);
    assert_eq!(spent_in_fallback, N / 4);
    h.good(50);
    assert!(!h.machine.in_fallback());
    assert!(h.machine.take_notices().contains(&Notice::Resumed));
    h.assert_bounded();
}

#[test]
fn an_unsettled_membership_spends_no_share() {
    let mut h = Harness::new(3, 2);
    for _ in 0..200 {
        h.step(Event::Fail { after_ms: 10 });
    }
    assert!(!h.machine.in_fallback());
    assert!(h.spent.is_empty());
}

/// Random rounds without clock steps: replies of any size and delay, failures, pauses.
fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0u64..30, 0u64..=N).prop_map(|(rtt_ms, grant)| Event::Answer { rtt_ms, grant }),
        2 => (0u64..80).prop_map(|after_ms| Event::Fail { after_ms }),
        1 => (0u64..400).prop_map(|ms| Event::Wait { ms }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Never more than the grants plus one fallback share in a window id; never stuck:
    /// once the faults end, good replies bring it back to leasing within a few windows.
    #[test]
    fn bounded_and_never_stuck(
        instances in 1u64..6,
        events in proptest::collection::vec(event(), 1..400),
    ) {
        let mut h = Harness::new(instances, instances - 1);
        h.good(20);
        for e in events {
            h.step(e);
        }
        h.assert_bounded();
        h.good(4 * (WINDOW / TICK) as usize);
        prop_assert!(!h.machine.in_fallback());
        let w = h.redis_window();
        let recent = h.spent.get(&(w - 1)).copied().unwrap_or(0);
        prop_assert_eq!(recent, N, "not leasing again: {:?}", h.spent);
        h.assert_bounded();
    }
}
