use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use super::Clock;

/// The cheapest clock: one shared time cell that **one background thread** refreshes
/// every `tick`; a read is a single relaxed load (well under a nanosecond).
///
/// Nothing starts this thread but [`CachedClock::start`]; it is named
/// `otel-rate-sampler-clock` and ends by itself within one tick after the last clone of
/// the clock is dropped.
///
/// **Resolution.** Readings move in steps of `tick`, and later than that when the thread
/// is not scheduled on time (a loaded machine can hold it back for milliseconds). The
/// clock never goes backwards, so the limiters' guarantees hold exactly in its time; the
/// window edges are what moves, by up to one tick plus the scheduling delay.
#[derive(Clone, Debug)]
pub struct CachedClock {
    cell: Arc<Cell>,
}

#[derive(Debug)]
struct Cell {
    // Written only by the refresher thread, from a monotonic source: the value only grows.
    // Relaxed: the cell publishes nothing but itself, and coherence of a single location
    // already keeps each reader's successive loads non-decreasing.
    nanos: AtomicU64,
    tick: Duration,
}

impl CachedClock {
    /// Starts the refresher thread and returns a clock whose origin is now.
    ///
    /// `tick` is clamped to at least 50 µs.
    ///
    /// # Errors
    ///
    /// The error of [`thread::Builder::spawn`] if the thread cannot be started.
    pub fn start(tick: Duration) -> io::Result<Self> {
        let tick = tick.max(Duration::from_micros(50));
        let origin = Instant::now();
        let cell = Arc::new(Cell {
            nanos: AtomicU64::new(0),
            tick,
        });
        let weak: Weak<Cell> = Arc::downgrade(&cell);
        thread::Builder::new()
            .name("otel-rate-sampler-clock".into())
            .spawn(move || loop {
                thread::sleep(tick);
                let Some(cell) = weak.upgrade() else { break };
                let now = u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
                cell.nanos.store(now, Ordering::Relaxed);
            })?;
        Ok(Self { cell })
    }
}

impl Clock for CachedClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.cell.nanos.load(Ordering::Relaxed)
    }

    fn resolution(&self) -> Duration {
        self.cell.tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresher_moves_the_clock_forward_and_never_back() {
        let clock = CachedClock::start(Duration::from_millis(1)).unwrap();
        let mut last = clock.now_nanos();
        let deadline = Instant::now() + Duration::from_secs(10);
        while clock.now_nanos() == last {
            assert!(
                Instant::now() < deadline,
                "the refresher thread never ticked"
            );
            thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..1000 {
            let now = clock.now_nanos();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn refresher_thread_ends_when_the_last_clone_is_dropped() {
        let clock = CachedClock::start(Duration::from_millis(1)).unwrap();
        let weak = Arc::downgrade(&clock.cell);
        let clone = clock.clone();
        drop(clock);
        assert!(weak.upgrade().is_some());
        drop(clone);
        // The thread holds only a Weak, upgraded for the length of one store.
        let deadline = Instant::now() + Duration::from_secs(10);
        while weak.upgrade().is_some() {
            assert!(Instant::now() < deadline);
            thread::sleep(Duration::from_millis(1));
        }
    }
}
