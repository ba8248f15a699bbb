//! LoCoMo (Maharana et al. 2024, snap-research/LoCoMo, CC BY-NC 4.0; fetched by
//! `scripts/fetch-eval-data`, never committed): ten multi-session chats with questions whose
//! evidence turns are labelled. Conversations 1–5 are the tuning split, 6–10 the held-out one
//! (`docs/search.md`, "Judged on public data").

use anyhow::Context;
use std::path::Path;

/// One turn: its dialogue id (`D3:12`), its speaker, and its text (an image as
/// `[shares a photo: <caption>]`).
#[derive(Debug, Clone)]
pub struct Turn {
    /// LoCoMo's id of the turn, which the questions' evidence names.
    pub dia: String,
    /// Who said it.
    pub speaker: String,
    /// What was said.
    pub text: String,
}

/// One session of a chat.
#[derive(Debug, Clone)]
pub struct Session {
    /// `session_<n>`.
    pub name: String,
    /// When it took place, as LoCoMo dates it (`1:56 pm on 8 May, 2023`), in microseconds
    /// since the epoch; `None` when the date does not parse.
    pub at: Option<i64>,
    /// Its turns, in order.
    pub turns: Vec<Turn>,
}

/// A question with labelled evidence.
#[derive(Debug, Clone)]
pub struct Question {
    /// The question.
    pub text: String,
    /// The dialogue ids of its evidence turns.
    pub evidence: Vec<String>,
    /// LoCoMo's category: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.
    pub category: u8,
}

/// One chat.
#[derive(Debug, Clone)]
pub struct Chat {
    /// Its sessions, in order.
    pub sessions: Vec<Session>,
    /// The first speaker (stored as the user's turns).
    pub speaker_a: String,
    /// Its questions that name evidence.
    pub questions: Vec<Question>,
}

/// The names of LoCoMo's question categories, by number.
#[must_use]
pub fn category_name(category: u8) -> &'static str {
    match category {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        5 => "adversarial",
        _ => "other",
    }
}

/// A turn as stored: the speaker's name, then the text.
#[must_use]
pub fn turn_text(speaker: &str, text: &str) -> String {
    format!("{speaker}: {text}")
}

/// Reads `locomo/locomo10.json` under `dir`.
///
/// # Errors
/// The file is missing or not LoCoMo's shape.
pub fn read(dir: &Path) -> anyhow::Result<Vec<Chat>> {
    let text = crate::public::read_data(&dir.join("locomo").join("locomo10.json"))?;
    let data: serde_json::Value = serde_json::from_str(&text)?;
    let mut chats = Vec::new();
    for c in data.as_array().context("locomo10.json: not a list")? {
        let conv = &c["conversation"];
        let mut n = 1;
        let mut sessions = Vec::new();
        while let Some(turns) = conv.get(format!("session_{n}")).and_then(|s| s.as_array()) {
            let turns = turns
                .iter()
                .filter_map(|t| {
                    let mut text = t["text"].as_str()?.to_owned();
                    if let Some(caption) = t.get("blip_caption").and_then(|c| c.as_str()) {
                        text.push_str(&format!(" [shares a photo: {caption}]"));
                    }
                    Some(Turn {
                        dia: t["dia_id"].as_str()?.to_owned(),
                        speaker: t["speaker"].as_str()?.to_owned(),
                        text,
                    })
                })
                .collect();
            let at = conv
                .get(format!("session_{n}_date_time"))
                .and_then(|d| d.as_str())
                .and_then(parse_date);
            sessions.push(Session {
                name: format!("session_{n}"),
                at,
                turns,
            });
            n += 1;
        }
        let questions = c["qa"]
            .as_array()
            .map(|qs| qs.iter().filter_map(question).collect())
            .unwrap_or_default();
        chats.push(Chat {
            sessions,
            speaker_a: conv["speaker_a"].as_str().unwrap_or_default().to_owned(),
            questions,
        });
    }
    Ok(chats)
}

fn question(q: &serde_json::Value) -> Option<Question> {
    let evidence: Vec<String> = q["evidence"]
        .as_array()?
        .iter()
        .filter_map(|e| e.as_str())
        .flat_map(|e| e.split(|c: char| c == ';' || c == ',' || c.is_whitespace()))
        .filter(|e| e.starts_with('D'))
        .map(str::to_owned)
        .collect();
    (!evidence.is_empty()).then(|| Question {
        text: q["question"].as_str().unwrap_or_default().to_owned(),
        evidence,
        category: q["category"]
            .as_u64()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(0),
    })
}

/// LoCoMo's session date (`1:56 pm on 8 May, 2023`) in microseconds since the epoch, UTC.
#[must_use]
pub fn parse_date(text: &str) -> Option<i64> {
    let (time, date) = text.split_once(" on ")?;
    let (clock, half) = time.trim().split_once(' ')?;
    let (h, m) = clock.split_once(':')?;
    let (mut h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    match half.to_ascii_lowercase().as_str() {
        "pm" if h < 12 => h += 12,
        "am" if h == 12 => h = 0,
        _ => {}
    }
    let mut parts = date.split([' ', ',']).filter(|p| !p.is_empty());
    let day: i64 = parts.next()?.parse().ok()?;
    let month = month_number(parts.next()?)?;
    let year: i64 = parts.next()?.parse().ok()?;
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + h) * 60 + m) * 60 * 1_000_000)
}

/// January is 1.
fn month_number(name: &str) -> Option<i64> {
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
    let name = name.to_ascii_lowercase();
    let i = MONTHS
        .iter()
        .position(|m| m.starts_with(&name) && name.len() >= 3)?;
    i64::try_from(i + 1).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_dates_parse_as_utc() {
        // 2023-05-08T13:56:00Z.
        assert_eq!(
            parse_date("1:56 pm on 8 May, 2023"),
            Some(1_683_554_160_000_000)
        );
        assert_eq!(
            parse_date("12:09 am on 13 September, 2023"),
            Some(1_694_563_740_000_000)
        );
        assert_eq!(parse_date("not a date"), None);
    }
}
