//! OTEP 235: a span kept by a hard rate cap has no known sampling probability, so the
//! `th` (rejection threshold) field of the `ot` trace-state entry must be erased.

use opentelemetry::trace::TraceState;

/// `trace_state` without the `th` sub-key of its `ot` entry (other `ot` sub-keys, such as
/// `rv`, and other vendors' entries are kept). Allocates only when there is a `th` to
/// erase.
pub(crate) fn erase_threshold(trace_state: &TraceState) -> TraceState {
    let Some(ot) = trace_state.get("ot") else {
        return trace_state.clone();
    };
    let is_threshold = |field: &&str| field.starts_with("th:");
    if !ot.split(';').any(|f| is_threshold(&f)) {
        return trace_state.clone();
    }
    let rest: Vec<&str> = ot
        .split(';')
        .filter(|f| !f.is_empty() && !is_threshold(f))
        .collect();
    let erased = if rest.is_empty() {
        trace_state.delete("ot")
    } else {
        trace_state.insert("ot", rest.join(";"))
    };
    // Neither can fail: "ot" is a valid key, and the value is a subset of a valid one.
    // Should it ever, an empty trace state is the safe way to lose `th`.
    erased.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(header: &str) -> TraceState {
        header.parse().unwrap()
    }

    #[test]
    fn erases_th_and_keeps_the_rest() {
        assert_eq!(
            erase_threshold(&ts("ot=th:c;rv:abcdef,vendor=x")).header(),
            "ot=rv:abcdef,vendor=x"
        );
        assert_eq!(
            erase_threshold(&ts("vendor=x,ot=th:8")).header(),
            "vendor=x"
        );
        assert_eq!(erase_threshold(&ts("ot=rv:01")).header(), "ot=rv:01");
        assert_eq!(
            erase_threshold(&TraceState::default()),
            TraceState::default()
        );
    }
}
