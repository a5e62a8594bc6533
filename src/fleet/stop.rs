//! The stop signal shared by a limiter's handles and its thread: set once, seen by the
//! thread at its next await.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use tokio::sync::Notify;

/// The stop signal shared by the handles and the thread.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    // Release/Acquire: pairs the store in `stop` with the loads in the thread, so the
    // thread sees the flag once it has seen the notification (or its next tick).
    flag: AtomicBool,
    notify: Notify,
}

impl Stop {
    pub(crate) fn stop(&self) {
        self.flag.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Runs `f` unless the stop signal comes first.
    pub(crate) async fn unless_stopped<F: Future>(&self, f: F) -> Option<F::Output> {
        let mut notified = pin!(self.notify.notified());
        let mut f = pin!(f);
        if self.is_stopped() {
            return None;
        }
        poll_fn(|cx| {
            if let Poll::Ready(v) = f.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            if notified.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await
    }
}
