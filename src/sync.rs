//! The atomics the lock-free limiters use: `std` in normal builds, `loom`'s model-checked
//! atomics under `--cfg loom` (see `tests` in each limiter module and `.ci/run`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
