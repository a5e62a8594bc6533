//! What a local limit dropped by a reload (its window empty) leaves for its rule brought
//! back later: the new limiter goes on from it as a replacement would
//! ([`Forgotten::succeeded_by`]).

use crate::clock::Clock;
use crate::config::compile::local_rule::LocalRule;
use crate::config::compile::unseen::unseen_before;
use crate::limiter::carry::Carry;
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

impl Forgotten {
    /// `local`, a limit just built with nothing carried and not yet published, as the
    /// next of the lineage whose limiter was dropped (`self`): it counts an upper
    /// bound of what that lineage admitted within its look-back ([`unseen_before`]:
    /// nothing was admitted since the dropped limiter's window emptied). Open: the
    /// dropped limiter admits nothing any more, so there is nothing to settle.
    pub(crate) fn succeeded_by<C: Clock>(&self, local: LocalRule<C>) -> LocalRule<C> {
        let now = local.limiter.clock().now_nanos();
        let unseen = unseen_before(self.shape, self.began, self.empty_from, &local.limiter, now);
        let date = super::unseen_date(self.empty_from, now);
        local.succeeding(now, &Carry::at(date, unseen))
    }

    /// What `local`'s lineage needs once that limit is dropped, its window empty at this
    /// reading of the clock.
    pub(crate) fn of<C: Clock>(local: &LocalRule<C>) -> Self {
        let now = local.limiter.clock().now_nanos();
        Forgotten {
            shape: local.limiter.shape(),
            began: local.began(),
            empty_from: local.limiter.counted_from(now),
        }
    }
}
