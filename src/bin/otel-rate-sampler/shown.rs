//! Numbers as both commands print them.

/// Significant digits a rate is shown with.
const DIGITS: i32 = 4;
/// Rates from this size up are shown in scientific notation.
const HUGE: f64 = 1e15;
/// Rates below this size (and above 0) are shown in scientific notation.
const TINY: f64 = 1e-4;

/// A rate per second for people, the same in `check` and `simulate`: at most four
/// significant digits (never fewer than the whole part has), trailing zeros dropped
/// (`500`, `1.667`, `0.5`, `0.0125`), and scientific notation below 1e-4 and from 1e15
/// (`1e-300`, `2.778e-7`), so no rate takes more than a few characters.
pub(crate) fn rate(r: f64) -> String {
    if !r.is_finite() || r == 0.0 {
        return format!("{r}");
    }
    let size = r.abs();
    if !(TINY..HUGE).contains(&size) {
        let text = format!("{r:.*e}", (DIGITS - 1) as usize);
        // 2.500e-7 -> 2.5e-7, 1.000e-300 -> 1e-300.
        return match text.split_once('e') {
            Some((mantissa, exponent)) => format!("{}e{exponent}", trimmed(mantissa)),
            None => text,
        };
    }
    let magnitude = size.log10().floor() as i32;
    let decimals = (DIGITS - 1 - magnitude).max(0) as usize;
    trimmed(&format!("{r:.decimals$}")).to_owned()
}

/// `text` without the trailing zeros of its fraction, nor a bare point.
fn trimmed(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::rate;

    #[test]
    fn rates_take_a_few_characters_whatever_their_size() {
        for (r, shown) in [
            (500.0, "500"),
            (1e12, "1000000000000"),
            (5.0 / 3.0, "1.667"),
            (0.5, "0.5"),
            (0.0125, "0.0125"),
            (0.000_123_456, "0.0001235"),
            (1.0 / 3600.0 / 1000.0, "2.778e-7"),
            (1e-300, "1e-300"),
            (f64::MIN_POSITIVE, "2.225e-308"),
            (1e15, "1e15"),
            (123_456.7, "123457"),
            (0.0, "0"),
        ] {
            assert_eq!(rate(r), shown, "{r:e}");
        }
    }
}
