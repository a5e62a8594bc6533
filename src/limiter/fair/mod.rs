//! Fair shares of one limit per key: a floor of one permit per key seen, max-min fair
//! shares of the rest by estimated demand, bounded keys, and each admission's
//! probability for weights. See [`FairLimiter`].
//!
//! By role: `limiter.rs` the type and its public surface, `decide.rs` a decision,
//! `roll.rs` a window's roll (`book.rs` its bookkeeping), `allocation.rs` the floors and shares, `keys.rs` the
//! bounded keys table, `demand.rs` the per-thread demand counts, `error.rs` the error; `tests.rs` the
//! threaded proptests, `loom_tests.rs` the loom models.

mod allocation;
mod book;
mod decide;
mod demand;
mod error;
mod keys;
mod limiter;
#[cfg(all(test, loom))]
mod loom_tests;
mod roll;
#[cfg(all(test, not(loom)))]
mod tests;

pub use error::FairError;
// The rule layer checks a file's `max_keys` against it.
#[cfg(feature = "config")]
pub(crate) use keys::MAX_KEYS;
pub use limiter::{FairAdmission, FairLimiter, FairStats, DEFAULT_MAX_KEYS};
