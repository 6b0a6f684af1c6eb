//! RFC 3339 timestamps (UTC, millisecond precision) for state files, audit lines and
//! transcripts, with serde helpers. No I/O, no time-zone database: always `Z`.

use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

/// `2026-11-30T01:02:03.456Z`.
pub fn format_rfc3339(t: SystemTime) -> String {
    with_rfc3339(t, str::to_owned)
}

/// Calls `f` with `t` as RFC 3339 text (`2026-11-30T01:02:03.456Z`), formatted on the stack
/// for years up to 9999: a serializer needs no `String` of its own (a recorded step writes
/// about a dozen timestamps; issue 9).
pub fn with_rfc3339<R>(t: SystemTime, f: impl FnOnce(&str) -> R) -> R {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = d.as_secs();
    let millis = d.subsec_millis();
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    let (y, m, dd) = civil_from_days(days);
    let (h, mi, se) = (rem / 3600, (rem / 60) % 60, rem % 60);
    match u32::try_from(y) {
        // The common case, written digit by digit: `format!` with padded fields cost about
        // 2 K instructions a call.
        Ok(y) if y <= 9999 => {
            let mut b = *b"0000-00-00T00:00:00.000Z";
            put_digits(&mut b[0..4], y);
            put_digits(&mut b[5..7], m);
            put_digits(&mut b[8..10], dd);
            // Below 24, 60, 60 and 1000: the casts cannot truncate.
            put_digits(&mut b[11..13], h as u32);
            put_digits(&mut b[14..16], mi as u32);
            put_digits(&mut b[17..19], se as u32);
            put_digits(&mut b[20..23], millis);
            // ASCII digits and separators only: always valid UTF-8.
            f(std::str::from_utf8(&b).unwrap_or_default())
        }
        _ => f(&format!(
            "{y:04}-{m:02}-{dd:02}T{h:02}:{mi:02}:{se:02}.{millis:03}Z"
        )),
    }
}

/// Writes `v` in decimal into `out`, right-aligned and zero-padded (the leading digits of a
/// `v` too long for `out` are dropped; callers pass values that fit).
fn put_digits(out: &mut [u8], mut v: u32) {
    for slot in out.iter_mut().rev() {
        // `v % 10` is a single digit.
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = match mo {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=12).contains(&mo) || !(1..=month_days).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos: u32 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits: String = frac.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            return None;
        }
        let mut padded = digits.clone();
        padded.truncate(9);
        while padded.len() < 9 {
            padded.push('0');
        }
        nanos = padded.parse().ok()?;
        rest = &frac[digits.len()..];
    }
    let offset_secs: i64 = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            let oh: i64 = o.get(1..3)?.parse().ok()?;
            let om: i64 = o.get(4..6)?.parse().ok()?;
            let v = oh * 3600 + om * 60;
            if o.starts_with('-') { -v } else { v }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_secs;
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

/// Parses an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`, the IMF-fixdate of RFC 9110, as
/// `Retry-After` carries it) to seconds since the Unix epoch.
pub fn parse_http_date(s: &str) -> Option<u64> {
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [_, day, month, year, time, zone] = parts.as_slice() else {
        return None;
    };
    if !zone.eq_ignore_ascii_case("GMT") && !zone.eq_ignore_ascii_case("UTC") {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let m = MONTHS.iter().position(|x| x.eq_ignore_ascii_case(month))?;
    let d: i64 = day.parse().ok()?;
    let y: i64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, se) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let m = i64::try_from(m).ok()? + 1;
    u64::try_from(days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60 + se).ok()
}

/// Days since 1970-01-01 → (year, month, day). Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// serde helper: `SystemTime` as an RFC 3339 string.
pub mod rfc3339 {
    use std::time::SystemTime;

    /// Serializes.
    ///
    /// # Errors
    /// Only the serializer's own.
    pub fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        super::with_rfc3339(*t, |text| s.serialize_str(text))
    }

    /// Deserializes.
    ///
    /// # Errors
    /// When the text is not RFC 3339.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        super::parse_rfc3339(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {s}")))
    }
}

/// serde helper: `Option<SystemTime>` as an RFC 3339 string or `null`.
pub mod rfc3339_opt {
    use std::time::SystemTime;

    /// Serializes.
    ///
    /// # Errors
    /// Only the serializer's own.
    pub fn serialize<S: serde::Serializer>(
        t: &Option<SystemTime>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => super::with_rfc3339(*t, |text| s.serialize_some(text)),
            None => s.serialize_none(),
        }
    }

    /// Deserializes.
    ///
    /// # Errors
    /// When the text is not RFC 3339.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<SystemTime>, D::Error> {
        let s = <Option<String> as serde::Deserialize>::deserialize(d)?;
        match s {
            None => Ok(None),
            Some(s) => super::parse_rfc3339(&s)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {s}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_known_values() {
        let t = UNIX_EPOCH + Duration::from_millis(1_764_464_523_456);
        let s = format_rfc3339(t);
        assert_eq!(s, "2025-11-30T01:02:03.456Z");
        assert_eq!(parse_rfc3339(&s), Some(t));
        assert_eq!(format_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            parse_rfc3339("2024-02-29T12:00:00+02:00"),
            Some(UNIX_EPOCH + Duration::from_secs(1_709_200_800))
        );
        assert_eq!(parse_rfc3339("2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2020-02-30T00:00:00Z"), None);
        assert!(parse_rfc3339("2024-02-29T00:00:00Z").is_some());
        assert_eq!(parse_rfc3339("2023-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("garbage"), None);
    }

    /// The digit-by-digit formatter gives what the padded `format!` gives, across the
    /// range (leap days, year ends, millisecond edges) and beyond year 9999.
    #[test]
    fn fast_formatting_matches_the_padded_format() {
        fn reference(t: SystemTime) -> String {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
            let secs = d.as_secs();
            let rem = secs % 86_400;
            let (y, m, dd) = civil_from_days(i64::try_from(secs / 86_400).unwrap_or(i64::MAX));
            format!(
                "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:03}Z",
                rem / 3600,
                (rem / 60) % 60,
                rem % 60,
                d.subsec_millis()
            )
        }
        let mut ms: u64 = 0;
        while ms < 400 * 365 * 86_400_000 {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            assert_eq!(format_rfc3339(t), reference(t), "{ms}");
            ms += 7_654_321_987;
        }
        for ms in [
            951_782_400_000,       // 2000-02-29
            4_107_542_399_999,     // 2100-02-28T23:59:59.999
            253_402_300_799_999,   // 9999-12-31T23:59:59.999
            253_402_300_800_000,   // 10000-01-01
            1_000_000_000_000_000, // year 33658
        ] {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            assert_eq!(format_rfc3339(t), reference(t), "{ms}");
        }
        assert_eq!(
            format_rfc3339(UNIX_EPOCH + Duration::from_millis(253_402_300_800_000)),
            "10000-01-01T00:00:00.000Z"
        );
    }
}
