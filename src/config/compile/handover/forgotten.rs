//! What a local limit dropped by a reload (its window empty) leaves for its rule brought
//! back later: the new limiter goes on from it as a replacement would
//! ([`LocalRule::after_forgotten`]).

use super::LocalRule;
use crate::clock::Clock;
use crate::config::compile::unseen::{alone_from, unseen_before};
use crate::limiter::Shape;

/// A local limit dropped by a reload while its window held nothing, for a later rule of
/// its identity to go on from: its shape, when it began (see [`LocalRule`]'s `began`)
/// and where what it counted began when it was dropped (nothing of its lineage was
/// admitted from there on). A few words, no limiter.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Forgotten {
    shape: Shape,
    began: u64,
    empty_from: u64,
}

impl<C: Clock> LocalRule<C> {
    /// `self`, a limit just built with nothing carried and not yet published, as the
    /// next of the lineage whose limiter was dropped (`forgotten`): it counts an upper
    /// bound of what that lineage admitted within its look-back ([`unseen_before`]:
    /// nothing was admitted since the dropped limiter's window emptied). Open: the
    /// dropped limiter admits nothing any more, so there is nothing to settle.
    pub(crate) fn after_forgotten(self, forgotten: &Forgotten) -> Self {
        let now = self.limiter.clock().now_nanos();
        let unseen = unseen_before(
            forgotten.shape,
            forgotten.began,
            forgotten.empty_from,
            &self.limiter,
            now,
        );
        Self {
            began: alone_from(now),
            ..self
        }
        .with_carried(unseen)
    }

    /// What its lineage needs once this limit is dropped, its window empty at this
    /// reading of the clock (see [`Forgotten`]).
    pub(crate) fn forget(&self) -> Forgotten {
        let now = self.limiter.clock().now_nanos();
        Forgotten {
            shape: self.limiter.shape(),
            began: self.began,
            empty_from: self.limiter.counted_from(now),
        }
    }
}
