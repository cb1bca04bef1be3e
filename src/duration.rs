//! Durations as the flags are written (`500ms`, `5s`, `2m`, `3h`, `7d`): parsed by the
//! command line, shown by the command line and by the cycle's messages. A leaf.

use std::time::Duration;

/// Parses `<integer><unit>` with unit `ms`, `s`, `m`, `h` or `d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    const EXPECTED: &str =
        "expected a whole number with a unit: ms, s, m, h or d (e.g. 500ms, 5s, 2m, 7d)";
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!("{s:?}: {EXPECTED}"));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is too large: {EXPECTED}"))?;
    let millis = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => return Err(format!("{s:?}: {EXPECTED}")),
    };
    millis
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{s:?} is too large: {EXPECTED}"))
}

/// A duration as the flags are written: `500ms`, `5s`, `2m`, `3h`, `7d`.
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms > 0 && ms.is_multiple_of(86_400_000) {
        format!("{}d", ms / 86_400_000)
    } else if ms > 0 && ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms > 0 && ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms > 0 && ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3h"), Ok(Duration::from_secs(3 * 3600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        for bad in [
            "",
            "5",
            "s",
            "5 h",
            "-1s",
            "1.5s",
            "5sec",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn durations_show_in_the_largest_whole_unit() {
        assert_eq!(show_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(show_duration(Duration::from_secs(120)), "2m");
        assert_eq!(show_duration(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(show_duration(Duration::ZERO), "0ms");
    }
}
