//! What a rule's call tells Redis: the request, and what the rule vouches for in its
//! replica's heartbeat (`pool.rs`), a rule failing on a key of another type included.
//!
//! # A key another program wrote
//!
//! When a key of the rule holds another type (its meta, window hash or members set
//! written with `SET`), Redis answers the rule's lease calls with `WRONGTYPE` (the
//! script catches it, so the other rules of the script call are answered) and its clock
//! calls too. Such a rule:
//!
//! * spends no fallback share: only what Redis granted it (what the lease word holds
//!   for the current window, and a prefetch Redis recorded for the next);
//! * therefore needs no share reserved, and does not hold its replica's heartbeat back
//!   ([`Vouch::Free`]): the other rules of its sync interval are not under-used. Unless
//!   it holds a fallback share it has not reported for this window or the one before
//!   (a timeout, then the foreign key): that one stays reserved until reported or gone;
//! * once its calls fail for another reason (a timeout), it falls back no sooner than
//!   [`FALLBACK_AFTER_INTERVALS`](super::FALLBACK_AFTER_INTERVALS) after the last round
//!   it let the heartbeat through, as after an answered call.
//!
//! Why every window stays at most N: the others lease only what Redis accounts, and
//! this rule spends only grants Redis made. A meta or members key of another type loses
//! no accounting (the window hashes are intact); removed, a new meta is a new memory to
//! Redis: it grants nothing for that window and the next (the restart rule, `script.rs`).
//! A window hash of another type lost that window's grants: the script, on catching it,
//! moves the rule's `since` up to Redis's window, so it grants nothing for that window
//! (nor the one before, nor the next) again, removed or not. On one replica only (the
//! others' calls came before the key was written, or are for the next window), the
//! others lease as usual and this one spends what it was granted: the same bound.

use super::{LeaseMachine, Membership};
use crate::fleet::script::LeaseRequest;

/// What a rule vouches for in its replica's heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Vouch {
    /// Redis may count the replica live as of this fleet time (ms; 0: never, then no
    /// heartbeat is written).
    Until(u64),
    /// No bound: the rule spends nothing Redis did not grant (its keys are foreign).
    Free,
}

impl LeaseMachine {
    /// What this rule vouches for; `in_round`: the send time (fleet ms) of its lease
    /// call in the round, if it has one, which counts as answered if Redis answers it
    /// (the script writes no heartbeat otherwise, `script.rs`).
    pub(crate) fn vouch(&self, in_round: Option<u64>) -> Vouch {
        let answered = self.last_answered_ms.unwrap_or(0);
        // A fallback share not yet reported stays reserved: only an answered call
        // (reporting it) moves the heartbeat on, not this round's call, which may fail.
        let unreported = self.fallback_installed_for > 0
            && self.fallback_installed_for + 1 >= self.window
            && self.fallback_installed_for > self.newest_window_reported;
        if unreported {
            Vouch::Until(answered)
        } else if self.dormant() && in_round.is_none() {
            // It holds only what Redis granted, and no share (`dormant.rs`).
            Vouch::Free
        } else if self.foreign {
            // In the round its send time bounds nothing the others' answers do not.
            in_round.map_or(Vouch::Free, Vouch::Until)
        } else {
            Vouch::Until(in_round.unwrap_or(answered))
        }
    }

    /// The lease call for `window`, asking for `want` permits, sent at `sent_ms`.
    pub(super) fn request(&self, window: u64, want: u64, sent_ms: u64) -> LeaseRequest {
        let held = if window == self.window {
            self.held
        } else {
            match self.prefetched {
                Some((w, granted)) if w == window => granted,
                _ => 0,
            }
        };
        let m = self.membership.unwrap_or(Membership {
            instances: 0,
            rank: 0,
        });
        LeaseRequest {
            window,
            want,
            held,
            known_instances: m.instances,
            known_rank: m.rank,
            sent_ms,
            vouch_ms: 0,
        }
    }
}
