//! The limiters and the sampler, without configuration or export: the cap under many
//! threads on a manual and on the real clock, bad input, the SDK pipeline, and a reject
//! path that allocates nothing. One test binary, so the suite links once.

#[path = "../support/mod.rs"]
mod support;
// A property's case count, `PROPTEST_CASES` first.
#[path = "../support/cases.rs"]
mod cases;

mod bad_inputs;
mod cap_manual_clock;
mod cap_real_clock;
#[cfg(feature = "composable")]
mod composable;
#[cfg(feature = "composable")]
mod composable_interop;
#[cfg(feature = "composable")]
mod composable_rate;
mod env;
mod pacing;
mod reject_allocates_nothing;
mod sdk_provider;
// Ids from a fixed seed, the same in two providers.
#[cfg(feature = "composable")]
#[path = "../support/seeded_ids.rs"]
mod seeded_ids;
