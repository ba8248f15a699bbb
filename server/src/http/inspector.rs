//! The inspector (`docs/http.md`, "The inspector"): a read-only page at `/` that shows what
//! an agent remembers and why. Its four files are embedded in the binary: nothing is fetched
//! at run time. The page holds no data, so serving it needs no token; its script calls the read
//! commands with the token its reader gives. The content security policy lets the page load
//! only its own files and call only this server, and no other site may frame it.

use super::app::App;
use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// Each embedded file: its path, its content type and its bytes.
const FILES: &[(&str, &str, &str)] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("inspector/index.html"),
    ),
    (
        "/inspector/inspector.js",
        "text/javascript; charset=utf-8",
        include_str!("inspector/inspector.js"),
    ),
    (
        "/inspector/inspector.css",
        "text/css; charset=utf-8",
        include_str!("inspector/inspector.css"),
    ),
    (
        "/inspector/icon.svg",
        "image/svg+xml",
        include_str!("inspector/icon.svg"),
    ),
];

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(super) fn routes() -> Router<Arc<App>> {
    FILES
        .iter()
        .fold(Router::new(), |router, &(path, content_type, body)| {
            router.route(path, get(move || async move { file(content_type, body) }))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::{self, Class};

    /// The commands the page's script may call, read from its `READS` list.
    fn reads() -> Vec<String> {
        let js = FILES[1].2;
        let list = js
            .split_once("const READS = Object.freeze([")
            .and_then(|(_, rest)| rest.split_once("]);"))
            .expect("inspector.js declares READS")
            .0;
        list.split(',')
            .map(|s| s.trim().trim_matches('"').to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }

    #[test]
    fn the_page_calls_only_commands_that_change_nothing() {
        let reads = reads();
        assert!(reads.len() >= 8, "{reads:?}");
        for name in &reads {
            let command = commands::find(name).unwrap_or_else(|| panic!("{name} is no command"));
            assert!(
                matches!(
                    command.class,
                    Class::Read | Class::Search(_) | Class::Status
                ),
                "{name} is not a read"
            );
            // GET_BY_MEMORY_ID is a read that counts an access: the page uses HISTORY instead.
            assert_ne!(name, "GET_BY_MEMORY_ID");
        }
        let js = FILES[1].2;
        assert!(
            js.contains("count_access: false"),
            "the page's searches count no access"
        );
        assert!(
            !js.contains("innerHTML"),
            "store text is never parsed as HTML"
        );
    }

    #[test]
    fn nothing_is_fetched_from_elsewhere() {
        for (path, _, body) in FILES {
            // An SVG's namespace is a name, not an address anything loads.
            let body = body.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
            for scheme in ["http://", "https://", "//cdn", "@import"] {
                assert!(!body.contains(scheme), "{path} names {scheme}");
            }
        }
    }
}
