//! Go `time.ParseDuration` syntax plus AWF's bare-integer-seconds fallback.
//!
//! Source: spec/workflow.md §1.9. Unlike AWF (Go), sub-second precision is kept
//! (`500ms` is half a second, not zero); see docs/compatibility.md.

use std::time::Duration;

/// The longest duration taken: Go's (`time.Duration` is an `int64` of nanoseconds, about
/// 292 years, `2562047h47m16.854775807s`; AWF (Go) refuses longer ones). Past it, the sum
/// in floating point no longer holds whole seconds (breaker: `99999999999999h` was shown as
/// `99999999999999h0m16s`).
pub const MAX_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// Parses `1h30m`, `1.5h`, `500ms`, `2us`, `3µs`, `10ns`, or a bare number of seconds (`30`,
/// `2.5`). Negative durations, and ones longer than [`MAX_DURATION`], are rejected.
///
/// # Errors
/// A message `invalid duration "X": <why>` for anything else.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let bad = |why: &str| format!("invalid duration \"{text}\": {why}");
    let at_most = |d: Duration| {
        if d > MAX_DURATION {
            Err(bad("too large: at most 2562047h (about 292 years)"))
        } else {
            Ok(d)
        }
    };
    if s.is_empty() {
        return Err(bad("empty"));
    }
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err(bad("must be a non-negative number of seconds"));
        }
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| bad("too large: at most 2562047h (about 292 years)"))
            .and_then(at_most);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.starts_with('-') {
        return Err(bad("negative durations are not allowed"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
            .map_or(rest.len(), |(i, _)| i);
        if num_len == 0 {
            return Err(bad("expected a number"));
        }
        let num: f64 = rest[..num_len].parse().map_err(|_| bad("bad number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(bad("missing unit (use ns, us, ms, s, m or h)")),
            other => return Err(bad(&format!("unknown unit \"{other}\""))),
        };
        total += num * scale;
    }
    Duration::try_from_secs_f64(total)
        .map_err(|_| bad("too large: at most 2562047h (about 292 years)"))
        .and_then(at_most)
}

/// Formats like Go's `Duration.String()` rounded to milliseconds (`1.501s`, `2m3s`, `0s`).
pub fn format_go(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let h = ms / 3_600_000;
    let m = (ms / 60_000) % 60;
    let s_ms = ms % 60_000;
    let secs = if s_ms.is_multiple_of(1000) {
        format!("{}s", s_ms / 1000)
    } else {
        let whole = s_ms / 1000;
        let frac = format!("{:03}", s_ms % 1000);
        format!("{whole}.{}s", frac.trim_end_matches('0'))
    };
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else if ms < 1000 {
        format!("{ms}ms")
    } else {
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_syntax_and_bare_seconds() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }

    /// Breaker: `99999999999999h` was taken, and shown as `99999999999999h0m16s`.
    #[test]
    fn durations_past_gos_longest_are_refused() {
        assert_eq!(
            parse_duration("99999999999999h"),
            Err("invalid duration \"99999999999999h\": too large: at most 2562047h (about 292 years)".to_owned())
        );
        assert!(parse_duration("9999999999999").is_err());
        assert!(parse_duration("2562048h").is_err());
        assert_eq!(
            parse_duration("2562047h"),
            Ok(Duration::from_secs(2_562_047 * 3600))
        );
        assert_eq!(
            format_go(parse_duration("2562047h").unwrap()),
            "2562047h0m0s"
        );
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go(Duration::from_millis(1501)), "1.501s");
        assert_eq!(format_go(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go(Duration::from_secs(123)), "2m3s");
        assert_eq!(format_go(Duration::from_millis(12)), "12ms");
        assert_eq!(format_go(Duration::ZERO), "0s");
    }
}
