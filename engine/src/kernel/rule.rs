//! The fact guard's rules as the record format stores them (`docs/format/log.md`, flag
//! DECISION): the code of the rule that archived a record, so its history says why. The guard
//! itself (`crate::hooks::facts`) decides; the kernel only keeps and checks the codes.

/// The rule of the fact guard that decided (`docs/semantics.md`, "Slots"): kept with a record
/// the guard archived, so a fact's history says why each version was replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Rule {
    /// One statement negates the other.
    Negation = 1,
    /// An antonym states the opposite.
    Antonym = 2,
    /// The same content words.
    SameWords = 3,
    /// A different relation.
    OtherRelation = 4,
    /// One statement adds detail to the other.
    AddsDetail = 5,
    /// No content word in common.
    NothingShared = 6,
    /// A different subject.
    OtherSubject = 7,
    /// One statement's subject is the other's predicate.
    Inversion = 8,
    /// A relation that holds many values gained one.
    ManyValued = 9,
    /// The last words differ and no predicate says whether they are a value.
    NoPredicate = 10,
    /// The same subject and relation with a new value.
    NewValue = 11,
    /// A new value of the same relation, the rest said in other words.
    NewValueReworded = 12,
    /// Another value under another wording of the relation.
    ValueOtherWording = 13,
    /// Another value of another relation, or of this one in other words.
    ValueOtherRelation = 14,
    /// Another number outside the value: an identifier or a version.
    OtherNumber = 15,
    /// One word of the predicate replaced: a new value or a synonym.
    OneWordReplaced = 16,
    /// The predicate is paraphrased.
    Paraphrase = 17,
    /// Too many words differ to tell a paraphrase from another fact.
    TooDifferent = 18,
}

impl Rule {
    /// Every rule, in code order.
    pub const ALL: [Rule; 18] = [
        Rule::Negation,
        Rule::Antonym,
        Rule::SameWords,
        Rule::OtherRelation,
        Rule::AddsDetail,
        Rule::NothingShared,
        Rule::OtherSubject,
        Rule::Inversion,
        Rule::ManyValued,
        Rule::NoPredicate,
        Rule::NewValue,
        Rule::NewValueReworded,
        Rule::ValueOtherWording,
        Rule::ValueOtherRelation,
        Rule::OtherNumber,
        Rule::OneWordReplaced,
        Rule::Paraphrase,
        Rule::TooDifferent,
    ];

    /// What the rule says, for people.
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Rule::Negation => "one statement negates the other",
            Rule::Antonym => "an antonym states the opposite",
            Rule::SameWords => "the same content words",
            Rule::OtherRelation => "a different relation",
            Rule::AddsDetail => "one statement adds detail to the other",
            Rule::NothingShared => "no content word in common",
            Rule::OtherSubject => "a different subject",
            Rule::Inversion => "one statement's subject is the other's predicate",
            Rule::ManyValued => "a relation that holds many values gained one",
            Rule::NoPredicate => {
                "the last words differ and no predicate says whether they are a value"
            }
            Rule::NewValue => "the same subject and relation with a new value",
            Rule::NewValueReworded => {
                "a new value of the same relation, the rest said in other words"
            }
            Rule::ValueOtherWording => "another value under another wording of the relation",
            Rule::ValueOtherRelation => {
                "another value of another relation, or of this one in other words"
            }
            Rule::OtherNumber => "another number outside the value: an identifier or a version",
            Rule::OneWordReplaced => "one word of the predicate replaced: a new value or a synonym",
            Rule::Paraphrase => "the predicate is paraphrased",
            Rule::TooDifferent => "too many words differ to tell a paraphrase from another fact",
        }
    }

    /// Whether the rule decides an update: the record it archived had its validity closed.
    #[must_use]
    pub fn closes_validity(self) -> bool {
        matches!(
            self,
            Rule::Negation
                | Rule::Antonym
                | Rule::NewValue
                | Rule::NewValueReworded
                | Rule::OneWordReplaced
        )
    }

    /// Its code in the record format (`docs/format/log.md`).
    #[must_use]
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The rule of a code; `None` for an unknown one.
    #[must_use]
    pub fn from_code(code: u8) -> Option<Rule> {
        Some(match code {
            1 => Rule::Negation,
            2 => Rule::Antonym,
            3 => Rule::SameWords,
            4 => Rule::OtherRelation,
            5 => Rule::AddsDetail,
            6 => Rule::NothingShared,
            7 => Rule::OtherSubject,
            8 => Rule::Inversion,
            9 => Rule::ManyValued,
            10 => Rule::NoPredicate,
            11 => Rule::NewValue,
            12 => Rule::NewValueReworded,
            13 => Rule::ValueOtherWording,
            14 => Rule::ValueOtherRelation,
            15 => Rule::OtherNumber,
            16 => Rule::OneWordReplaced,
            17 => Rule::Paraphrase,
            18 => Rule::TooDifferent,
            _ => return None,
        })
    }
}

impl serde::Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.reason())
    }
}
