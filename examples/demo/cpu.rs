//! The process's CPU time, for the summary's CPU time per offered trace.

use std::time::Duration;

/// CPU time this process has used so far, every thread, user and system; `None` where
/// the platform has no process CPU clock here.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn process_time() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Some(Duration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

/// CPU time this process has used so far: unknown on this platform.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn process_time() -> Option<Duration> {
    None
}
