//! Durations in text, one room for both ways they are written: as the flags are
//! written (`500ms`, `5s`, `2m`, `3h`, `7d`: parsed by the command line, shown back in
//! its messages), and as an elapsed time for people (`2d 3h 0m 5s`, `4m 10s`, `250ms`:
//! what the reports show). Parser and both formatters share one table of units. A leaf.

use std::time::Duration;

use chrono::TimeDelta;

/// The units a duration is written in above milliseconds, largest first, each with
/// its length in milliseconds.
const UNITS: [(u64, &str); 4] = [
    (86_400_000, "d"),
    (3_600_000, "h"),
    (60_000, "m"),
    (1_000, "s"),
];

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
    let millis = match UNITS.iter().find(|(_, name)| *name == unit) {
        Some((len, _)) => n.checked_mul(*len),
        None if unit == "ms" => Some(n),
        None => return Err(format!("{s:?}: {EXPECTED}")),
    };
    millis
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{s:?} is too large: {EXPECTED}"))
}

/// A duration as the flags are written, in the largest unit it is a whole number of:
/// `500ms`, `5s`, `2m`, `3h`, `7d`; what [`parse_duration`] reads back.
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    UNITS
        .iter()
        .find(|(len, _)| ms > 0 && ms.is_multiple_of(u128::from(*len)))
        .map_or_else(
            || format!("{ms}ms"),
            |(len, unit)| format!("{}{unit}", ms / u128::from(*len)),
        )
}

/// An elapsed time for people, from its largest unit down to whole seconds:
/// `2d 3h 0m 5s`, `4m 10s`, `45s`; under a second in milliseconds (`250ms`); negative
/// with a leading `-`.
pub fn show_elapsed(d: TimeDelta) -> String {
    if d < TimeDelta::zero() {
        return format!("-{}", show_elapsed(-d));
    }
    let ms = d.num_milliseconds().unsigned_abs();
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let mut rest = ms;
    let parts = UNITS.map(|(len, unit)| {
        let n = rest / len;
        rest %= len;
        (n, unit)
    });
    let first = parts.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    parts[first..]
        .iter()
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
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
        assert_eq!(show_duration(Duration::from_millis(1_500)), "1500ms");
        assert_eq!(show_duration(Duration::from_secs(90)), "90s");
    }

    #[test]
    fn elapsed_times_read_like_an_operator_writes_them() {
        assert_eq!(show_elapsed(TimeDelta::milliseconds(250)), "250ms");
        assert_eq!(show_elapsed(TimeDelta::microseconds(1)), "0ms");
        assert_eq!(show_elapsed(TimeDelta::milliseconds(1_999)), "1s");
        assert_eq!(show_elapsed(TimeDelta::seconds(45)), "45s");
        assert_eq!(show_elapsed(TimeDelta::seconds(250)), "4m 10s");
        assert_eq!(show_elapsed(TimeDelta::seconds(7_200)), "2h 0m 0s");
        assert_eq!(
            show_elapsed(TimeDelta::seconds(2 * 86_400 + 3 * 3_600 + 5)),
            "2d 3h 0m 5s"
        );
        assert_eq!(
            show_elapsed(TimeDelta::seconds(400 * 86_400 + 3_599)),
            "400d 0h 59m 59s"
        );
        assert_eq!(show_elapsed(TimeDelta::seconds(-90)), "-1m 30s");
        assert_eq!(show_elapsed(TimeDelta::milliseconds(-250)), "-250ms");
    }
}
