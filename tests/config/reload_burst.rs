//! A file still being written is never applied, also during a long burst of saves
//! while the watcher is forced to check (polls every 20 ms, forced checks every 10
//! quiet periods): on the real file system, each version of a large rule file written
//! in place in several chunks with pauses between them, a version every ~60 ms for
//! seconds. A half-written file here is valid TOML with fewer rules, so what was applied
//! is told by its contents: every complete version has all its rules and an end marker.
//!
//! The guarantee is about time on disk, and a loaded machine may pause the writer: a
//! half-written state that stayed on disk for a whole quiet period (the writer
//! descheduled in the middle) is indistinguishable from a complete file and may be
//! applied. The writer records each state's longest possible life (from before the write
//! that made it to after the write that ended it); only states that lived less than the
//! quiet period are held to never being applied. No timing is asserted.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use otel_rate_sampler::{RuleBasedSampler, SamplingConfig, WatchOptions};

use super::reload_watch::TempDir;

/// Rules in a complete version (then an end marker), written in `CHUNKS` writes.
const RULES: usize = 240;
const CHUNKS: usize = 4;
/// The writer's pause between two chunks.
const PAUSE: Duration = Duration::from_millis(12);
/// The quiet period (and so the settle time) of the watcher under test.
const QUIET: Duration = Duration::from_millis(100);
const BURST: Duration = Duration::from_secs(4);

/// The chunks of version `v`: each ends at a rule's end, so every prefix is valid TOML
/// with a known number of rules, all named after `v`; the last holds the end marker.
fn chunks(v: u32) -> Vec<String> {
    let rule = |name: String| {
        format!("[[default.rule]]\nname = \"{name}\"\nspan_name = \"{name}\"\nlimit = 5\n")
    };
    let mut chunks: Vec<String> = (0..CHUNKS)
        .map(|c| {
            let per = RULES / CHUNKS;
            let head = if c == 0 {
                "[default]\nlimit = 1\npaced = false\n".to_owned()
            } else {
                String::new()
            };
            (c * per..(c + 1) * per).fold(head, |text, k| text + &rule(format!("v{v}_{k}")))
        })
        .collect();
    if let Some(last) = chunks.last_mut() {
        last.push_str(&rule(format!("v{v}_end")));
    }
    chunks
}

/// A state of the file: the version and how many rules it holds (`RULES + 1` when
/// complete; 0 for the empty file a truncation leaves, whatever the version).
type State = (u32, usize);

/// What the rules in force are (the default, listed last, left out): `None` when they
/// are no state of the file at all.
fn state_of(names: &[String]) -> Option<State> {
    let names = names.split_last().map_or(names, |(_, rules)| rules);
    let Some(first) = names.first() else {
        return Some((0, 0));
    };
    let version: u32 = first.strip_prefix('v')?.split('_').next()?.parse().ok()?;
    let all_of_it = names.iter().all(|n| n.starts_with(&format!("v{version}_")));
    all_of_it.then_some((version, names.len()))
}

/// Writes versions `from..` in place, chunk by chunk, for `BURST`; returns the last
/// version written and each half-written state's longest possible life.
fn burst(path: &Path, from: u32) -> (u32, BTreeMap<State, Duration>) {
    let mut lives: BTreeMap<State, Duration> = BTreeMap::new();
    let mut note = |state: State, born: Instant, ended: Instant| {
        let life = lives.entry(state).or_default();
        *life = (*life).max(ended - born);
    };
    let end = Instant::now() + BURST;
    let mut v = from;
    loop {
        let before_truncate = Instant::now();
        let mut file = std::fs::File::create(path).unwrap();
        let mut born = before_truncate;
        let mut state = (v, 0);
        for (c, chunk) in chunks(v).iter().enumerate() {
            std::thread::sleep(PAUSE);
            let before = Instant::now();
            file.write_all(chunk.as_bytes()).unwrap();
            file.flush().unwrap();
            let after = Instant::now();
            note(state, born, after);
            born = before;
            state = (v, (c + 1) * RULES / CHUNKS + usize::from(c + 1 == CHUNKS));
        }
        drop(file);
        if Instant::now() >= end {
            return (v, lives);
        }
        v += 1;
    }
}

#[test]
fn a_half_written_file_is_never_applied_during_a_long_burst_with_forced_checks() {
    for notifications in [true, false] {
        let tmp = TempDir::new(&format!("burst-{notifications}"));
        let path = tmp.0.join("sampling.toml");
        std::fs::write(&path, chunks(0).concat()).unwrap();
        let config = SamplingConfig::from_path(&path).unwrap();
        let sampler = RuleBasedSampler::new(&config, "svc").unwrap();
        let (tx, applied) = mpsc::channel();
        let seen = sampler.clone();
        let options = WatchOptions::new()
            .debounce(QUIET)
            .poll_interval(Duration::from_millis(20))
            .notifications(notifications);
        let watcher = sampler
            .watch_with(&path, options, move |outcome| {
                let names: Vec<String> = seen.stats().rules.into_iter().map(|r| r.name).collect();
                let _ = tx.send((outcome.is_ok(), names));
            })
            .unwrap();
        let (last, lives) = burst(&path, 1);
        let done = Instant::now();
        let deadline = done + Duration::from_secs(30);
        let mut states = Vec::new();
        loop {
            let (ok, names) = applied
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("version {last} never applied; applied: {states:?}"));
            let state = state_of(&names);
            states.push((ok, state));
            if state == Some((last, RULES + 1)) {
                break;
            }
        }
        let latency = done.elapsed();
        drop(watcher);
        let half: Vec<_> = states
            .iter()
            .filter_map(|(_, s)| s.filter(|&(_, n)| n != RULES + 1))
            .collect();
        let short_lived: Vec<_> = half
            .iter()
            .filter(|s| {
                // The empty file of any version: the longest any of them lived.
                let life = if s.1 == 0 {
                    lives
                        .iter()
                        .filter(|((_, n), _)| *n == 0)
                        .map(|(_, l)| *l)
                        .max()
                } else {
                    lives.get(s).copied()
                };
                life.is_none_or(|life| life < QUIET)
            })
            .collect();
        assert!(
            short_lived.is_empty(),
            "notifications {notifications}: half-written states applied: {short_lived:?} (all applied: {states:?})"
        );
        assert!(states.iter().all(|(_, s)| s.is_some()), "{states:?}");
        eprintln!(
            "notifications {notifications}: {} versions, {} applied ({} half, all long-lived), the last {latency:?} after the burst",
            last,
            states.len(),
            half.len()
        );
    }
}

#[test]
fn a_directory_never_quiet_still_applies_a_settled_change_of_the_file() {
    // Another file in the same directory written every few milliseconds keeps the
    // burst going for ever; the watched file, saved once, is stable, so it is applied
    // while the noise goes on.
    let tmp = TempDir::new("noisy");
    let path = tmp.0.join("sampling.toml");
    std::fs::write(&path, chunks(0).concat()).unwrap();
    let config = SamplingConfig::from_path(&path).unwrap();
    let sampler = RuleBasedSampler::new(&config, "svc").unwrap();
    let (tx, applied) = mpsc::channel();
    let options = WatchOptions::new()
        .debounce(Duration::from_millis(50))
        .poll_interval(Duration::from_secs(3600));
    let _watcher = sampler
        .watch_with(&path, options, move |outcome| {
            let _ = tx.send(outcome.is_ok());
        })
        .unwrap();
    let noise = tmp.0.join("noise.log");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut log = std::fs::File::create(noise).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                log.write_all(b"x\n").unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let tmp_file = path.with_extension("tmp");
    std::fs::write(&tmp_file, chunks(1).concat()).unwrap();
    std::fs::rename(&tmp_file, &path).unwrap();
    let outcome = applied.recv_timeout(Duration::from_secs(30));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(outcome, Ok(true));
    let names: Vec<String> = sampler.stats().rules.into_iter().map(|r| r.name).collect();
    assert_eq!(state_of(&names), Some((1, RULES + 1)));
}
