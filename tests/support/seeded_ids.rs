//! Trace and span ids from splitmix64 on a fixed seed: two generators with one seed give
//! the same sequence, so two providers start their roots with the same trace ids (and
//! the low 56 bits, the randomness a consistent sampler compares, are well spread).
//! Shared by the `core` and `otlp` tests.

use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::IdGenerator;

#[derive(Debug)]
pub(crate) struct Seeded(AtomicU64);

impl Seeded {
    pub(crate) fn new(seed: u64) -> Self {
        Self(AtomicU64::new(seed))
    }

    fn next(&self) -> u64 {
        // Relaxed: a counter for ids, no other memory depends on it.
        let mut z = self
            .0
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl IdGenerator for Seeded {
    fn new_trace_id(&self) -> TraceId {
        TraceId::from((u128::from(self.next()) << 64) | u128::from(self.next()))
    }

    fn new_span_id(&self) -> SpanId {
        SpanId::from(self.next() | 1)
    }
}
