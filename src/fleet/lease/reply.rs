//! What a reply or a failure changes in the lease state machine.

use std::sync::atomic::Ordering;

use super::{Call, FleetFailure, LeaseMachine, Membership, Notice, Reply, Shared};
use crate::fleet::script::{LeaseReply, LeaseRequest, Refusal};
use crate::fleet::word::Added;

impl LeaseMachine {
    /// A call made from local time `t0` to `t1` failed, for the reason `kind`.
    pub(crate) fn on_failure(
        &mut self,
        shared: Shared<'_>,
        (t0, t1): (u64, u64),
        kind: FleetFailure,
    ) {
        shared.stats.failed(kind);
        self.draw_retry_jitter();
        self.last_failure = Some(kind);
        self.last_attempt = Some(t0);
        self.failing = true;
        self.resample_first = false;
        let foreign = kind == FleetFailure::Foreign;
        if self.foreign && !foreign {
            // Rounds planned until now may have written its replica's heartbeat.
            self.free_until = Some(t1);
        }
        self.foreign = foreign;
        if foreign && self.in_fallback {
            // It spends no fallback share while its keys are foreign (`vouch.rs`).
            self.in_fallback = false;
            // Relaxed: a display value (see `StatCells`).
            shared.stats.fallback.store(false, Ordering::Relaxed);
        }
    }

    /// Redis answered `call`, made from local time `t0` to `t1`, with `reply`.
    pub(crate) fn on_reply(
        &mut self,
        shared: Shared<'_>,
        call: Call,
        reply: Reply,
        t0: u64,
        t1: u64,
    ) {
        let reply = match reply {
            Reply::Lease(reply) if reply.expired => {
                // Refused as late: Redis wrote nothing (a failure), but its time says
                // how far off the mapping is. Take it, and sample again before the
                // next call with a round trip of its own.
                self.on_failure(shared, (t0, t1), FleetFailure::Late);
                self.sample_time(shared, reply.server_unix_nanos, (t0, t1), true);
                self.resample_first = true;
                return;
            }
            Reply::Time(server) if self.resample_first => {
                self.resample_first = false;
                shared.stats.succeeded();
                self.sample_time(shared, server, (t0, t1), true);
                // With the mapping right again, lease at once rather than an interval
                // later, once per interval (a call that is late for another reason,
                // such as a slow network, must not make a loop of calls).
                let interval = self.settings.interval_nanos;
                if self
                    .last_quick_retry
                    .is_none_or(|t| t1.saturating_sub(t) >= interval)
                {
                    self.last_quick_retry = Some(t1);
                    self.failing = false;
                }
                return;
            }
            Reply::Lease(reply) => reply,
            Reply::Time(server) => {
                self.on_success(shared, t0, t1);
                self.sample_time(shared, server, (t0, t1), false);
                return;
            }
        };
        self.on_success(shared, t0, t1);
        self.sample_time(shared, reply.server_unix_nanos, (t0, t1), false);
        if let Call::Lease(request) = call {
            self.heard(shared, &request, &reply, t0);
        }
        if let Some(refusal) = reply.refused {
            self.refused(shared, refusal);
        }
        if self.in_fallback {
            self.in_fallback = false;
            self.share_expired = false;
            shared.stats.fallback.store(false, Ordering::Relaxed);
            self.notices.push(Notice::Resumed);
        }
        shared
            .stats
            .instances
            .store(reply.instances, Ordering::Relaxed);
        if reply.refused.is_none() && (!reply.young || self.membership.is_none()) {
            self.membership = Some(Membership {
                instances: reply.instances,
                rank: reply.rank,
            });
            self.membership_settled |= !reply.young;
        }
        if let Call::Lease(request) = call {
            self.install(shared, &request, &reply, t1);
        }
    }

    /// Notes what Redis heard of this replica from the answered lease `request`, sent
    /// at local time `t0`: the rule vouches for it, and the replica's heartbeat is as
    /// recent as the reply says Redis wrote it (not later than `t0`).
    fn heard(&mut self, shared: Shared<'_>, request: &LeaseRequest, reply: &LeaseReply, t0: u64) {
        self.last_answered_ms = Some(request.sent_ms);
        let written = match reply.vouched_ms {
            0 => None,
            ms if ms >= request.sent_ms => Some(t0),
            ms => shared.time.local_nanos(ms.saturating_mul(1_000_000)),
        };
        if let Some(t) = written {
            self.last_heartbeat_sent = Some(self.last_heartbeat_sent.map_or(t, |h| h.max(t)));
        }
    }

    /// Redis refused a lease for `refusal`: no share of another shape's key is this
    /// replica's, so it has none to fall back to until Redis answers as a member again.
    fn refused(&mut self, shared: Shared<'_>, refusal: Refusal) {
        shared.stats.shape_conflict();
        self.membership = None;
        self.membership_settled = false;
        self.notices.push(Notice::Refused {
            version: refusal == Refusal::Version,
        });
    }

    fn on_success(&mut self, shared: Shared<'_>, t0: u64, t1: u64) {
        shared.stats.succeeded();
        self.retry_jitter = 0;
        self.last_failure = None;
        self.last_attempt = Some(t0);
        self.failing = false;
        self.foreign = false;
        self.last_success = Some(t1);
        self.last_success_sent = Some(t0);
        self.last_round_trip = t1.saturating_sub(t0);
    }

    /// Installs what Redis granted for `request.window`.
    fn install(&mut self, shared: Shared<'_>, request: &LeaseRequest, reply: &LeaseReply, t1: u64) {
        self.newest_window_reported = self.newest_window_reported.max(request.window);
        if reply.granted > 0 {
            shared.stats.leases.fetch_add(1, Ordering::Relaxed);
        }
        if request.window == self.window {
            if reply.granted > 0 && shared.lease.add(self.window, reply.granted) == Added::Installed
            {
                self.held += reply.granted;
                shared.stats.leased(reply.granted);
            }
            if request.want > reply.granted {
                // Short: the window is spent (wait for the next) or held back for
                // members that may be in fallback (ask again in an interval).
                self.retry_lease_at = if reply.total >= self.settings.permits {
                    u64::MAX
                } else {
                    t1.saturating_add(self.settings.interval_nanos)
                };
            }
        } else if request.window == self.window + 1
            && self.prefetched.is_none_or(|(w, _)| w != request.window)
        {
            self.prefetched = Some((request.window, reply.granted));
            shared.lease.publish_next(request.window, reply.granted);
        }
    }
}
