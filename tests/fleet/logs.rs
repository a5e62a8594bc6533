//! The library's own messages, captured from every thread of the test process (the
//! fleet worker logs on its own thread) by a global `tracing` subscriber.

use std::fmt::{self, Write as _};
use std::sync::{Mutex, MutexGuard, OnceLock};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Every event as one line of `name=value` fields.
struct Capture;

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut line = Line(String::new());
        event.record(&mut line);
        lines().push(line.0);
    }
}

fn store() -> &'static Mutex<Vec<String>> {
    static LINES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    LINES.get_or_init(Mutex::default)
}

fn lines() -> MutexGuard<'static, Vec<String>> {
    store()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts capturing (once per process).
pub(crate) fn capture() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let subscriber = tracing_subscriber::registry().with(Capture);
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
    });
}

/// The lines captured so far that contain `needle`.
pub(crate) fn containing(needle: &str) -> Vec<String> {
    lines()
        .iter()
        .filter(|l| l.contains(needle))
        .cloned()
        .collect()
}
