//! Time in questions (`docs/search.md`, "Dates in questions"): a deterministic reading of the
//! dates and relative times a question names ("on 13 October, 2023", "in July 2023", "last
//! year", "two weeks ago", "the week before May 25, 2023", "yesterday"), each as a window of
//! time, relative to the moment the question is asked about (`as_of`, else now). A search
//! boosts the records whose `valid_from` (a chat turn's time) falls in a window; it never
//! filters by it.
//!
//! Guarantees: pure and total (any text, never a panic); times are UTC; a month or a day named
//! without a year is the latest one at or before the reference; text that names no time gives
//! no window.

use crate::kernel::record::Timestamp;

/// A span of time a question names: `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Its first moment.
    pub from: Timestamp,
    /// The moment after its last.
    pub to: Timestamp,
}

impl Window {
    /// Whether `t` falls in it.
    #[must_use]
    pub fn holds(&self, t: Timestamp) -> bool {
        self.from <= t && t < self.to
    }
}

const DAY_US: i64 = 86_400 * 1_000_000;

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The words of `text`, lowercased, split at anything but letters, digits and `-`.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '-'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn month_of(word: &str) -> Option<u32> {
    // "may" is a month only where a date needs one (callers check the words around it).
    MONTHS
        .iter()
        .position(|m| {
            *m == word
                || (word.len() >= 3 && word != "mar" && m.starts_with(word) && word.len() == 3)
        })
        .and_then(|i| u32::try_from(i + 1).ok())
}

fn number_word(word: &str) -> Option<i64> {
    const WORDS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    match word {
        "a" | "an" => Some(1),
        "couple" => Some(2),
        "few" => Some(3),
        _ => WORDS
            .iter()
            .position(|w| *w == word)
            .and_then(|n| i64::try_from(n).ok())
            .or_else(|| word.parse().ok().filter(|n: &i64| (1..=1000).contains(n))),
    }
}

fn day_of(word: &str) -> Option<u32> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let d: u32 = digits.parse().ok()?;
    (1..=31).contains(&d).then_some(d)
}

fn year_of(word: &str) -> Option<i64> {
    let y: i64 = word.parse().ok()?;
    (word.len() == 4 && (1900..=2200).contains(&y)).then_some(y)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let (m, d) = (i64::from(m), i64::from(d));
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// The civil year, month and day of a day number.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn at_day(days: i64) -> Timestamp {
    Timestamp(days.saturating_mul(DAY_US))
}

fn day_window(y: i64, m: u32, d: u32) -> Window {
    let start = days_from_civil(y, m, d);
    Window {
        from: at_day(start),
        to: at_day(start + 1),
    }
}

fn month_window(y: i64, m: u32) -> Window {
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    Window {
        from: at_day(days_from_civil(y, m, 1)),
        to: at_day(days_from_civil(ny, nm, 1)),
    }
}

fn year_window(y: i64) -> Window {
    Window {
        from: at_day(days_from_civil(y, 1, 1)),
        to: at_day(days_from_civil(y + 1, 1, 1)),
    }
}

/// The latest year at or before the reference in which month `m` (day `d`) has begun.
fn latest_year(reference: Timestamp, m: u32, d: u32) -> i64 {
    let (y, rm, rd) = civil_from_days(reference.0.div_euclid(DAY_US));
    if (m, d) <= (rm, rd) { y } else { y - 1 }
}

/// `YYYY-MM-DD`.
fn iso_date(word: &str) -> Option<(i64, u32, u32)> {
    let mut parts = word.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let m: u32 = m.parse().ok()?;
    Some((year_of(y)?, (1..=12).contains(&m).then_some(m)?, day_of(d)?))
}

/// A date starting at word `i`: `13 October[,] 2023`, `October 13[,] 2023`, `October 2023`,
/// `13 October`, `October 13`; its window and how many words it took.
fn date_at(w: &[String], i: usize, reference: Timestamp) -> Option<(Window, usize)> {
    let get = |k: usize| w.get(i + k).map(String::as_str);
    // 2023-10-05
    if let Some((y, m, d)) = get(0).and_then(iso_date) {
        return Some((day_window(y, m, d), 1));
    }
    // day month [year]
    if let (Some(d), Some(m)) = (get(0).and_then(day_of), get(1).and_then(month_of)) {
        return Some(match get(2).and_then(year_of) {
            Some(y) => (day_window(y, m, d), 3),
            None => (day_window(latest_year(reference, m, d), m, d), 2),
        });
    }
    let m = get(0).and_then(month_of)?;
    // "may" alone is a verb far more often than a month: only with a day or a year.
    if let Some(d) = get(1).and_then(day_of) {
        return Some(match get(2).and_then(year_of) {
            Some(y) => (day_window(y, m, d), 3),
            None => (day_window(latest_year(reference, m, d), m, d), 2),
        });
    }
    if let Some(y) = get(1).and_then(year_of) {
        return Some((month_window(y, m), 2));
    }
    (get(0) != Some("may")).then(|| (month_window(latest_year(reference, m, 1), m), 1))
}

/// A relative time at word `i` ("yesterday", "last week", "two weeks ago", "the week before
/// <date>"); its window and how many words it took.
fn relative_at(w: &[String], i: usize, reference: Timestamp) -> Option<(Window, usize)> {
    let get = |k: usize| w.get(i + k).map(String::as_str);
    let today = reference.0.div_euclid(DAY_US);
    let days = |from: i64, to: i64| Window {
        from: at_day(from),
        to: at_day(to),
    };
    match (get(0)?, get(1), get(2)) {
        ("yesterday", ..) => return Some((days(today - 1, today), 1)),
        ("today" | "tonight", ..) => return Some((days(today, today + 1), 1)),
        ("last" | "past", Some("weekend"), _) => return Some((days(today - 9, today), 2)),
        ("last" | "past", Some("week"), _) => return Some((days(today - 14, today), 2)),
        ("last" | "past", Some("month"), _) => {
            let (y, m, _) = civil_from_days(today);
            let (py, pm) = if m == 1 { (y - 1, 12) } else { (y, m - 1) };
            return Some((month_window(py, pm), 2));
        }
        ("last" | "past", Some("year"), _) => {
            let (y, ..) = civil_from_days(today);
            return Some((year_window(y - 1), 2));
        }
        ("this", Some("year"), _) => {
            let (y, ..) = civil_from_days(today);
            return Some((year_window(y), 2));
        }
        _ => {}
    }
    // N units ago, N units before <date>.
    let (n, unit, at) = match (number_word(get(0)?), get(1)) {
        (Some(n), Some(u)) => (n, u, 2),
        // "the week before <date>": one week.
        (None, Some(u)) if get(0) == Some("the") => (1, u, 2),
        _ => return None,
    };
    let unit_days = match unit.trim_end_matches('s') {
        "day" | "night" => 1,
        "week" => 7,
        "weekend" => 7,
        "month" => 30,
        "year" => 365,
        _ => return None,
    };
    let span = n.saturating_mul(unit_days);
    match get(at) {
        Some("ago") => {
            // About then: half a unit either side.
            let centre = today - span;
            let half = (unit_days / 2).max(1);
            Some((days(centre - half, centre + half + 1), at + 1))
        }
        Some("before" | "prior") => {
            let (anchor, len) = date_at(w, i + at + 1, reference).or_else(|| {
                (get(at + 1) == Some("to"))
                    .then(|| date_at(w, i + at + 2, reference))
                    .flatten()
            })?;
            let end = anchor.from.0.div_euclid(DAY_US);
            Some((days(end - span, end), at + 1 + len))
        }
        Some("after") => {
            let (anchor, len) = date_at(w, i + at + 1, reference)?;
            let start = anchor.to.0.div_euclid(DAY_US);
            Some((days(start, start + span), at + 1 + len))
        }
        _ => None,
    }
}

/// The windows `text` names, read left to right (a date inside a relative time, "the week
/// before May 25, 2023", is part of it, not a window of its own); a four-digit year alone
/// ("in 2022") is its year.
#[must_use]
pub fn windows(text: &str, reference: Timestamp) -> Vec<Window> {
    let w = words(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < w.len() {
        if let Some((win, n)) = relative_at(&w, i, reference).or_else(|| date_at(&w, i, reference))
        {
            out.push(win);
            i += n;
            continue;
        }
        if let Some(y) = year_of(&w[i]) {
            out.push(year_window(y));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(y: i64, m: u32, d: u32) -> Timestamp {
        at_day(days_from_civil(y, m, d))
    }

    /// A civil date: year, month, day.
    type Date = (i64, u32, u32);

    /// The question's windows as `(from, to)` dates.
    fn read(text: &str) -> Vec<(Date, Date)> {
        windows(text, on(2023, 10, 20))
            .iter()
            .map(|w| {
                (
                    civil_from_days(w.from.0 / DAY_US),
                    civil_from_days(w.to.0 / DAY_US),
                )
            })
            .collect()
    }

    #[test]
    fn dates_months_and_years_read_as_windows() {
        assert_eq!(
            read("What did Melanie show on October 13, 2023?"),
            vec![((2023, 10, 13), (2023, 10, 14))]
        );
        assert_eq!(
            read("What did Gina find on 1 February, 2023?"),
            vec![((2023, 2, 1), (2023, 2, 2))]
        );
        assert_eq!(
            read("What did Mel paint in July 2023?"),
            vec![((2023, 7, 1), (2023, 8, 1))]
        );
        assert_eq!(
            read("How often in 2022?"),
            vec![((2022, 1, 1), (2023, 1, 1))]
        );
        // A month without a year: the latest one at or before the reference.
        assert_eq!(
            read("When did Melanie go camping in June?"),
            vec![((2023, 6, 1), (2023, 7, 1))]
        );
        assert_eq!(read("in December?"), vec![((2022, 12, 1), (2023, 1, 1))]);
        assert_eq!(read("on 2023-10-05"), vec![((2023, 10, 5), (2023, 10, 6))]);
        assert!(read("on 2023-13-05 or 2023-1-5").is_empty());
    }

    #[test]
    fn relative_times_count_from_the_reference() {
        assert_eq!(
            read("What did he do yesterday?"),
            vec![((2023, 10, 19), (2023, 10, 20))]
        );
        assert_eq!(
            read("their trip last year"),
            vec![((2022, 1, 1), (2023, 1, 1))]
        );
        assert_eq!(read("last month"), vec![((2023, 9, 1), (2023, 10, 1))]);
        assert_eq!(read("two weeks ago"), vec![((2023, 10, 3), (2023, 10, 10))]);
        assert_eq!(
            read("What did John do the week before August 3, 2023?"),
            vec![((2023, 7, 27), (2023, 8, 3))]
        );
        assert_eq!(
            read("3 days after 1 May 2023"),
            vec![((2023, 5, 2), (2023, 5, 5))]
        );
    }

    #[test]
    fn words_that_are_not_times_give_no_window() {
        assert!(read("May I ask what Caroline likes?").is_empty());
        assert!(read("What may Caroline paint next?").is_empty());
        assert!(read("Who won the last game?").is_empty());
        assert!(read("").is_empty());
        assert!(read("31 31 31 2 ago before after the the").is_empty());
    }

    #[test]
    fn any_text_reads_without_a_panic() {
        for text in [
            "99999 years ago",
            "1000 years before 1 January 1900",
            "\u{1F600} may 32 2023",
            "-5 days ago",
        ] {
            let _ = windows(text, Timestamp(i64::MAX));
            let _ = windows(text, Timestamp(i64::MIN / 2));
        }
    }
}
