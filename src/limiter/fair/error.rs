/// Why a [`FairLimiter`](crate::FairLimiter) cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FairError {
    /// `max_keys` is 0 or above the most a fair limiter tells apart.
    #[error("max_keys = {max_keys}: expected 1 to 65534 keys")]
    MaxKeys {
        /// The number given.
        max_keys: usize,
    },
}
