//! Durations as Prometheus writes them: the ruler's intervals, `for` and timeouts.

use std::time::Duration;

/// Parses a Prometheus duration (`1m`, `1h30m`, `2d`, `500ms`, `0`), as Prometheus's
/// `model.ParseDuration` takes it: units `y` (365 days), `w`, `d`, `h`, `m`, `s`, `ms`,
/// largest first, each at most once; and no longer than about 292 years.
pub fn parse_prometheus_duration(s: &str) -> Result<Duration, String> {
    const UNITS: [(&str, u64); 7] = [
        ("y", 365 * 24 * 3600 * 1000),
        ("w", 7 * 24 * 3600 * 1000),
        ("d", 24 * 3600 * 1000),
        ("h", 3600 * 1000),
        ("m", 60 * 1000),
        ("s", 1000),
        ("ms", 1),
    ];
    let invalid = || format!("{s:?} is not a Prometheus duration: write e.g. 30s, 5m, 1h30m or 2d");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let (mut rest, mut millis, mut next_unit) = (s, 0u64, 0usize);
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        // "ms" before "m": the longer unit that matches.
        let unit = UNITS[next_unit..]
            .iter()
            .enumerate()
            .filter(|(_, (u, _))| rest.starts_with(u))
            .max_by_key(|(_, (u, _))| u.len())
            .map(|(i, _)| i + next_unit)
            .ok_or_else(invalid)?;
        let (name, scale) = UNITS[unit];
        millis = n
            .checked_mul(scale)
            .and_then(|v| v.checked_add(millis))
            .filter(|v| *v <= i64::MAX as u64 / 1_000_000)
            .ok_or_else(|| format!("{s:?} is too long a duration"))?;
        rest = &rest[name.len()..];
        next_unit = unit + 1;
    }
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_durations() {
        let ms = |s: &str| parse_prometheus_duration(s).map(|d| d.as_millis());
        assert_eq!(ms("0"), Ok(0));
        assert_eq!(ms("1m"), Ok(60_000));
        assert_eq!(ms("1h30m"), Ok(5_400_000));
        assert_eq!(ms("1m500ms"), Ok(60_500));
        assert_eq!(ms("2d"), Ok(172_800_000));
        assert_eq!(ms("1y"), Ok(31_536_000_000));
        for bad in [
            "", "1", "m", "1m1h", "1m1m", "1.5m", "-1m", "1 m", "5x", "1ms1s",
        ] {
            assert!(parse_prometheus_duration(bad).is_err(), "{bad:?}");
        }
        assert!(parse_prometheus_duration("999999999y").is_err());
    }
}
