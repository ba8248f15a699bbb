//! Time in the memory model: [`Timestamp`], microseconds since the Unix epoch (UTC), read from
//! and written as RFC 3339 (`docs/semantics.md`, "Validity in time").

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The current time.
    #[must_use]
    pub fn now() -> Timestamp {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
    }

    /// `days` days before this moment.
    #[must_use]
    pub fn minus_days(self, days: u64) -> Timestamp {
        let micros = i64::try_from(days.saturating_mul(86_400_000_000)).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_sub(micros))
    }

    /// Parses RFC 3339 (`2026-11-22T19:53:52Z`, fractions to the microsecond, `Z` or `±HH:MM`)
    /// or a plain date (`2026-11-22`, midnight UTC): what `to_rfc3339` writes, and what people
    /// type. `None` for anything else (a client's text, never a panic).
    #[must_use]
    pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
        fn num(s: &str) -> Option<i64> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        }
        let b = text.as_bytes();
        if b.len() < 10 || b[4] != b'-' || b[7] != b'-' || !text.is_char_boundary(10) {
            return None;
        }
        let (year, month, day) = (num(&text[0..4])?, num(&text[5..7])?, num(&text[8..10])?);
        let days_in_month = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
            2 => 28,
            _ => return None,
        };
        if !(1..=days_in_month).contains(&day) {
            return None;
        }
        // Days since 1970-01-01 (H. Hinnant's algorithm, the inverse of `to_rfc3339`'s).
        let y = if month <= 2 { year - 1 } else { year };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (month + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        let mut micros = days * 86_400_000_000;
        let rest = &text[10..];
        if rest.is_empty() {
            return Some(Timestamp(micros));
        }
        let rest = rest.strip_prefix(['T', 't', ' '])?;
        let rb = rest.as_bytes();
        if rb.len() < 8 || rb[2] != b':' || rb[5] != b':' || !rest.is_char_boundary(8) {
            return None;
        }
        let (h, m, sec) = (num(&rest[0..2])?, num(&rest[3..5])?, num(&rest[6..8])?);
        if h > 23 || m > 59 || sec > 60 {
            return None;
        }
        micros += (h * 3600 + m * 60 + sec) * 1_000_000;
        let mut rest = &rest[8..];
        if let Some(frac) = rest.strip_prefix('.') {
            let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            let mut f = num(&frac[..digits.min(6)])?;
            for _ in digits.min(6)..6 {
                f *= 10;
            }
            micros += f;
            rest = &frac[digits..];
        }
        let offset = match rest {
            "Z" | "z" => 0,
            _ => {
                let sign = match rest.as_bytes().first()? {
                    b'+' => 1,
                    b'-' => -1,
                    _ => return None,
                };
                let o = &rest[1..];
                if o.len() != 5 || o.as_bytes()[2] != b':' {
                    return None;
                }
                let (oh, om) = (num(&o[0..2])?, num(&o[3..5])?);
                if oh > 23 || om > 59 {
                    return None;
                }
                sign * (oh * 3600 + om * 60) * 1_000_000
            }
        };
        Some(Timestamp(micros - offset))
    }

    /// ISO-8601 / RFC 3339 in UTC with microseconds: `2026-11-22T19:53:52.123456Z`.
    #[must_use]
    pub fn to_rfc3339(self) -> String {
        let secs = self.0.div_euclid(1_000_000);
        let micros = self.0.rem_euclid(1_000_000);
        let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            sod / 3600,
            sod % 3600 / 60,
            sod % 60
        )
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_parses_what_it_writes_and_rejects_the_rest() {
        for micros in [
            0,
            1,
            1_763_840_032_123_456,
            -86_400_000_001,
            951_782_400_000_000,
        ] {
            let t = Timestamp(micros);
            assert_eq!(
                Timestamp::parse_rfc3339(&t.to_rfc3339()),
                Some(t),
                "{}",
                t.to_rfc3339()
            );
        }
        let day = Timestamp::parse_rfc3339("2026-11-22").unwrap();
        assert_eq!(day.to_rfc3339(), "2026-11-22T00:00:00.000000Z");
        assert_eq!(
            Timestamp::parse_rfc3339("2026-11-22T01:30:00+01:30"),
            Some(day),
            "an offset is subtracted"
        );
        assert_eq!(
            Timestamp::parse_rfc3339("2026-11-22T00:00:00.5Z").map(|t| t.0 - day.0),
            Some(500_000)
        );
        for bad in [
            "",
            "2026-02-30",
            "2026-13-01",
            "2026-11-22T25:00:00Z",
            "2026-11-22T00:00:00",
            "yesterday",
            "2026-11-22T00:00:00.Z",
            "2026-11-22T00:00:00+0100",
            "２０２６-11-22",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(bad), None, "{bad:?}");
        }
    }
}
