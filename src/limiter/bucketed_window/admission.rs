//! An admission of a bucketed window given back: a span the rule layer's service cap
//! refused after the rule's window admitted it (or, the window a cap's, a span whose
//! rule could not confirm its own permit).

use super::BucketedWindow;
use crate::clock::Clock;
use crate::limiter::packed::{take_back, window_index};
use crate::sync::Ordering;

impl<C: Clock> BucketedWindow<C> {
    /// Gives back the permit of an admission stamped `stamp` while its sub-window is
    /// the head ([`take_back`]): a former head's count is final.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    pub(crate) fn give_back(&self, stamp: u64) {
        // Release: continues the head's release sequence, as an admission's increment.
        take_back(
            &self.head,
            window_index(stamp, self.sub_window),
            Ordering::Release,
        );
    }
}
