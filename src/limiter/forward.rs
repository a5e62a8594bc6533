//! Shared and boxed limiters are limiters: `Arc<L>` and `Box<L>` forward to `L`.
//!
//! Apart from the trait (in `mod.rs`), so a decision through a shared limiter goes
//! down from here to the limiter and never back into the file it came from.

use std::sync::Arc;

use crate::limit::Limit;
use crate::limiter::RateLimiter;

/// Shared and boxed limiters are limiters: the same budget, whoever holds it.
macro_rules! forward_through {
    ($($pointer:ident),*) => {$(
        impl<L: RateLimiter + ?Sized> RateLimiter for $pointer<L> {
            #[inline]
            fn try_acquire(&self) -> bool {
                (**self).try_acquire()
            }

            #[inline]
            fn acquire_stamped(&self) -> Option<u64> {
                (**self).acquire_stamped()
            }

            fn limit(&self) -> Limit {
                (**self).limit()
            }

            fn count_in_window(&self) -> Option<u64> {
                (**self).count_in_window()
            }
        }
    )*};
}

forward_through!(Arc, Box);
