//! Category normalization (`docs/semantics.md`, "Categories"): exact names, a dictionary for
//! short inputs, then the best label by embedding similarity.

use super::Calibration;
use crate::kernel::record::Category;

/// Inputs shorter than this use the dictionary. The similarity the best label needs, and its
/// margin over `other`, are the embedder's (`Calibration::category_min_similarity` and
/// `category_margin`; MiniLM's 0.50 and 0.10).
pub const DICTIONARY_MAX_CHARS: usize = 4;

/// The short-input dictionary.
pub const DICTIONARY: &[(&str, Category)] = &[
    ("bug", Category::BugFix),
    ("fix", Category::BugFix),
    ("auth", Category::Security),
    ("sec", Category::Security),
    ("perf", Category::Performance),
    ("opt", Category::Performance),
    ("arch", Category::Architecture),
    ("impl", Category::CodeSolution),
    ("sol", Category::CodeSolution),
    ("tool", Category::ToolUsage),
];

/// The text each category's label embedding is computed from.
#[must_use]
pub fn label_text(c: Category) -> &'static str {
    match c {
        Category::CodeSolution => "code solution implementation",
        Category::BugFix => "bug fix error correction",
        Category::Architecture => "architecture design structure",
        Category::Learning => "learning knowledge discovery",
        Category::ToolUsage => "tool usage utility",
        Category::Debugging => "debugging troubleshooting diagnosis",
        Category::Performance => "performance optimization speed",
        Category::Security => "security vulnerability protection",
        Category::Other => "other miscellaneous general",
    }
}

/// How a category was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CategoryReason {
    /// The input was a category name.
    Exact,
    /// The short-input dictionary.
    Dictionary,
    /// The best label by similarity.
    Semantic,
    /// No label was close enough: `other`.
    Fallback,
}

impl CategoryReason {
    /// The protocol spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CategoryReason::Exact => "exact",
            CategoryReason::Dictionary => "dictionary",
            CategoryReason::Semantic => "semantic",
            CategoryReason::Fallback => "fallback",
        }
    }
}

/// Lowercased, trimmed input.
#[must_use]
pub fn clean(input: &str) -> String {
    input.trim().to_lowercase()
}

/// The category without a model: an exact name or a dictionary word. `None` means the input
/// needs its embedding (`by_similarity`).
#[must_use]
pub fn without_model(input: &str) -> Option<(Category, CategoryReason)> {
    let c = clean(input);
    if c.is_empty() {
        return Some((Category::Other, CategoryReason::Fallback));
    }
    if let Ok(exact) = Category::parse(&c) {
        return Some((exact, CategoryReason::Exact));
    }
    if c.chars().count() <= DICTIONARY_MAX_CHARS {
        return DICTIONARY
            .iter()
            .find(|(w, _)| *w == c)
            .map(|(_, cat)| (*cat, CategoryReason::Dictionary));
    }
    None
}

/// The category from the similarities of the input to each label, in `Category::ALL` order.
#[must_use]
pub fn by_similarity(sims: &[f32], c: &Calibration) -> (Category, CategoryReason) {
    let other = Category::ALL
        .iter()
        .zip(sims)
        .find(|(c, _)| **c == Category::Other)
        .map_or(0.0, |(_, s)| *s);
    let best = Category::ALL
        .iter()
        .zip(sims)
        .filter(|(c, _)| **c != Category::Other)
        .fold(None::<(Category, f32)>, |best, (c, s)| match best {
            Some((_, bs)) if bs >= *s => best,
            _ => Some((*c, *s)),
        });
    match best {
        Some((label, s)) if s >= c.category_min_similarity && s >= other + c.category_margin => {
            (label, CategoryReason::Semantic)
        }
        _ => (Category::Other, CategoryReason::Fallback),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_the_dictionary_need_no_model() {
        assert_eq!(
            without_model(" Security "),
            Some((Category::Security, CategoryReason::Exact))
        );
        assert_eq!(
            without_model("auth"),
            Some((Category::Security, CategoryReason::Dictionary))
        );
        assert_eq!(
            without_model("BUG"),
            Some((Category::BugFix, CategoryReason::Dictionary))
        );
        assert_eq!(
            without_model("perf"),
            Some((Category::Performance, CategoryReason::Dictionary))
        );
        // Five characters and more go to the model, as in the peer ("debug" never hits its
        // dictionary entry).
        assert_eq!(without_model("debug"), None);
        assert_eq!(without_model("xyz"), None);
    }

    #[test]
    fn the_best_label_needs_half_and_a_margin_over_other() {
        let mut sims = vec![0.0; 9];
        sims[6] = 0.62; // performance
        sims[8] = 0.51; // other
        assert_eq!(
            by_similarity(&sims, &Calibration::MINILM),
            (Category::Performance, CategoryReason::Semantic)
        );
        sims[8] = 0.53;
        assert_eq!(
            by_similarity(&sims, &Calibration::MINILM),
            (Category::Other, CategoryReason::Fallback)
        );
        sims[8] = 0.1;
        sims[6] = 0.49;
        assert_eq!(
            by_similarity(&sims, &Calibration::MINILM),
            (Category::Other, CategoryReason::Fallback)
        );
    }
}
