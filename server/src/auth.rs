//! The tokens a server accepts, on every transport (`docs/protocol.md`, "Authentication";
//! `docs/http.md`, "Tokens").
//!
//! A token file line is `[ro|rw] [USER_ID] TOKEN`: the mode (read-write when left out) and
//! the user binding are independent. A read-only token runs no command of
//! [`Class::Write`](crate::commands::Class); a user-bound one sees only its user. Tokens are kept
//! as SHA-256 digests and compared in constant time; neither a token nor its digest is ever
//! printed.

use crate::commands::Session;
use sha2::{Digest, Sha256};

/// The shared token a token file holds (its first line that is one word; a user-bound token
/// has a second word, the user, and may not run the commands that want this).
///
/// # Errors
/// An unreadable file, or one that holds no shared token.
pub fn shared_token(path: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the token file {}", path.display()))?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && l.split_whitespace().count() == 1)
        .map(str::to_owned)
        .with_context(|| {
            format!(
                "{} holds no shared token (a user-bound one may not run this)",
                path.display()
            )
        })
}

/// What a token allows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grant {
    /// The one user it may reach (`None`: every user).
    pub user: Option<String>,
    /// Whether it may only read.
    pub read_only: bool,
}

impl Grant {
    /// The session a request or connection runs in once it presented this token.
    #[must_use]
    pub fn session(&self, vmm_shapes: bool) -> Session {
        Session {
            authed: true,
            user: self.user.clone(),
            vmm_shapes,
            read_only: self.read_only,
        }
    }
}

/// The tokens a server accepts.
#[derive(Clone, Default)]
pub struct Auth {
    tokens: Vec<([u8; 32], Grant)>,
}

impl std::fmt::Debug for Auth {
    /// Never prints a token, nor its digest.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (all, bound) = self.counts();
        let read_only = self.tokens.iter().filter(|t| t.1.read_only).count();
        write!(
            f,
            "Auth {{ {all} tokens, {bound} user-bound, {read_only} read-only }}"
        )
    }
}

impl Auth {
    /// No tokens: every connection is trusted (loopback use).
    #[must_use]
    pub fn none() -> Auth {
        Auth::default()
    }

    /// Adds a token with what it allows.
    pub fn add(&mut self, token: &str, grant: Grant) {
        self.tokens
            .push((Sha256::digest(token.as_bytes()).into(), grant));
    }

    /// Whether any token is configured.
    #[must_use]
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// How many tokens, and how many of them are user-bound.
    #[must_use]
    pub fn counts(&self) -> (usize, usize) {
        (
            self.tokens.len(),
            self.tokens.iter().filter(|t| t.1.user.is_some()).count(),
        )
    }

    /// What a token allows, `None` for a wrong one. Every configured token is compared, each
    /// in constant time over its SHA-256 digest, so neither the match nor its position leaks.
    #[must_use]
    pub fn check(&self, token: &str) -> Option<Grant> {
        let given: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (digest, grant) in &self.tokens {
            let diff = digest
                .iter()
                .zip(given.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if std::hint::black_box(diff) == 0 && found.is_none() {
                found = Some(grant.clone());
            }
        }
        found
    }
}

/// One token file line's words, `[ro|rw] [USER_ID] TOKEN`, as the token and what it allows;
/// `Err` says what is wrong without showing the token. A user named `ro` or `rw` is written
/// with the mode first (`rw ro TOKEN`).
///
/// # Errors
/// Not one to three words, or a user id the library refuses.
pub fn parse_token_line(line: &str) -> Result<(&str, Grant), String> {
    let mut words: Vec<&str> = line.split_whitespace().collect();
    let read_only = match words.first() {
        Some(&"ro") if words.len() > 1 => Some(true),
        Some(&"rw") if words.len() > 1 => Some(false),
        _ => None,
    };
    if read_only.is_some() {
        words.remove(0);
    }
    let (user, token) = match words.as_slice() {
        [token] => (None, *token),
        [user, token] => {
            amberdb::validate_id("user_id", user).map_err(|e| format!("the user id: {e}"))?;
            (Some((*user).to_owned()), *token)
        }
        _ => return Err("expected `[ro|rw] [USER_ID] TOKEN`".to_owned()),
    };
    Ok((
        token,
        Grant {
            user,
            read_only: read_only.unwrap_or(false),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_exactly_and_carry_their_user_and_mode() {
        let mut auth = Auth::none();
        assert!(!auth.enabled());
        auth.add("shared-secret", Grant::default());
        let ada = Grant {
            user: Some("ada".into()),
            read_only: true,
        };
        auth.add("ada-token", ada.clone());
        assert_eq!(auth.check("shared-secret"), Some(Grant::default()));
        assert_eq!(auth.check("ada-token"), Some(ada));
        assert_eq!(auth.check("ada-token "), None);
        assert_eq!(auth.check(""), None);
        assert!(!format!("{auth:?}").contains("secret"));
    }

    #[test]
    fn a_line_names_its_mode_and_user_independently() {
        let grant = |line| parse_token_line(line).map(|(t, g)| (t.to_owned(), g));
        let g = |user: Option<&str>, read_only| Grant {
            user: user.map(str::to_owned),
            read_only,
        };
        assert_eq!(grant("tok"), Ok(("tok".into(), g(None, false))));
        assert_eq!(grant("ro tok"), Ok(("tok".into(), g(None, true))));
        assert_eq!(
            grant("rw ada tok"),
            Ok(("tok".into(), g(Some("ada"), false)))
        );
        assert_eq!(
            grant("ro ada tok"),
            Ok(("tok".into(), g(Some("ada"), true)))
        );
        assert_eq!(grant("ada tok"), Ok(("tok".into(), g(Some("ada"), false))));
        // A bare `ro` is a token, not a mode; a user called `ro` is written with the mode.
        assert_eq!(grant("ro"), Ok(("ro".into(), g(None, false))));
        assert_eq!(grant("rw ro tok"), Ok(("tok".into(), g(Some("ro"), false))));
        let err = grant("ro ada s3cret extra").unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
        let too_long = format!("{} tok", "u".repeat(10_000));
        assert!(grant(&too_long).is_err());
    }
}
