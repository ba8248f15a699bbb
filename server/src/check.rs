//! `amberdb check`: the engine's read-only verifier ([`amberdb::verify`]) as a report for
//! people, and the process exit code: 0 clean (warnings allowed), 1 errors found, 2 the
//! directory could not be checked at all.

use amberdb::verify::{Report, Severity, verify};
use std::fmt::Write as _;
use std::path::Path;

/// Exit code: nothing wrong (warnings only).
pub const CLEAN: u8 = 0;
/// Exit code: errors found.
pub const DAMAGED: u8 = 1;

/// Checks `dir` and returns the report text and the exit code.
///
/// # Errors
/// The directory holds no store (`Store::exists`) or cannot be listed.
pub fn check(dir: &Path) -> anyhow::Result<(String, u8, Report)> {
    if !amberdb::Store::exists(dir)? {
        anyhow::bail!("{} holds no store", dir.display());
    }
    let report = verify(dir)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "checked {}: {} files, {} log frames, {} checkpoint records, {} segment rows",
        dir.display(),
        report.files,
        report.frames,
        report.checkpoint_records,
        report.segment_rows
    );
    let _ = match (report.identity_version, report.store_id.as_str()) {
        (0, _) => Ok(()),
        (v, "") => writeln!(
            out,
            "identity: version {v} (a store made before store ids: its next open gives it one, and after that it no longer opens with amberdb 0.3)"
        ),
        (v, id) => writeln!(out, "identity: version {v}, store {id}"),
    };
    for f in &report.findings {
        let level = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let at = f
            .offset
            .map(|o| format!(" at byte {o}"))
            .unwrap_or_default();
        let _ = writeln!(out, "{level}: {}{at}: {}", f.file, f.what);
    }
    let errors = report.errors();
    let warnings = report.findings.len() - errors;
    let code = if errors == 0 { CLEAN } else { DAMAGED };
    let _ = writeln!(
        out,
        "{}: {errors} errors, {warnings} warnings",
        if errors == 0 { "ok" } else { "DAMAGED" }
    );
    Ok((out, code, report))
}
