//! The house rules (docs/architecture.md, "House rules") hold on this workspace: a file or
//! function grown past its limit, an import circle, or the kernel importing the product layer
//! fails CI with its name.

use amberdb_house::{
    Import, MAX_FILE_LINES, MAX_FN_LINES, circles, functions, imports, kernel_reaches_up,
    product_reaches_in, workspace_sources,
};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_workspace_keeps_the_house_rules() {
    let files = workspace_sources(&root()).expect("sources parse");
    assert!(files.len() > 100, "found only {} source files", files.len());
    let long_files: Vec<String> = files
        .iter()
        .filter(|f| f.lines > MAX_FILE_LINES)
        .map(|f| format!("{} ({} lines)", f.path.display(), f.lines))
        .collect();
    assert!(
        long_files.is_empty(),
        "files over {MAX_FILE_LINES} lines outside tests: {long_files:?}"
    );
    let long_fns: Vec<String> = functions(&files)
        .into_iter()
        .filter(|f| f.lines > MAX_FN_LINES)
        .map(|f| {
            format!(
                "{}:{} {} ({} lines)",
                f.path.display(),
                f.line,
                f.name,
                f.lines
            )
        })
        .collect();
    assert!(
        long_fns.is_empty(),
        "functions over {MAX_FN_LINES} lines outside tests: {long_fns:?}"
    );
    let edges = imports(&files);
    assert!(edges.len() > 200, "found only {} imports", edges.len());
    assert_eq!(
        circles(&edges),
        Vec::<Vec<PathBuf>>::new(),
        "import circles"
    );
    assert_eq!(
        kernel_reaches_up(&edges),
        Vec::<Import>::new(),
        "the kernel imports the product layer"
    );
    assert_eq!(
        product_reaches_in(&edges),
        Vec::<Import>::new(),
        "the product layer imports a kernel file outside the kernel's API (KERNEL_API)"
    );
}

#[test]
fn a_circle_is_found_and_named_and_a_chain_is_not_one() {
    let edge = |from: &str, to: &str| Import {
        from: from.into(),
        to: to.into(),
    };
    let edges = [
        edge("a.rs", "b.rs"),
        edge("b.rs", "c.rs"),
        edge("c.rs", "a.rs"),
        edge("c.rs", "d.rs"),
        edge("d.rs", "e.rs"),
    ];
    assert_eq!(
        circles(&edges),
        vec![vec![
            PathBuf::from("a.rs"),
            PathBuf::from("b.rs"),
            PathBuf::from("c.rs")
        ]]
    );
    assert!(circles(&edges[3..]).is_empty());
    let up = edge("engine/src/kernel/db/core.rs", "engine/src/memory/read.rs");
    assert_eq!(
        kernel_reaches_up(std::slice::from_ref(&up)),
        vec![up.clone()]
    );
    let inside = edge("engine/src/memory/read.rs", "engine/src/kernel/codec.rs");
    let through_api = edge("engine/src/memory/read.rs", "engine/src/kernel/db/core.rs");
    assert_eq!(
        product_reaches_in(&[inside.clone(), through_api]),
        vec![inside]
    );
}

#[test]
fn the_measures_see_what_they_measure() {
    // The engine's kernel imports its own files, and a known long-standing import is found:
    // the write path's file imports the Db core.
    let files = workspace_sources(&root()).expect("sources parse");
    let edges = imports(&files);
    assert!(edges.iter().any(|e| {
        e.from == Path::new("engine/src/kernel/db/write.rs")
            && e.to == Path::new("engine/src/kernel/db/core.rs")
    }));
    // Tests are not counted: the kernel's table has a test module, and its file's count is
    // below its whole length.
    let table = files
        .iter()
        .find(|f| f.path == Path::new("engine/src/kernel/table/mod.rs"))
        .expect("table");
    let whole = std::fs::read_to_string(root().join(&table.path))
        .expect("read")
        .lines()
        .count();
    assert!(table.lines < whole, "{} of {whole}", table.lines);
    assert!(
        functions(&files)
            .iter()
            .any(|f| f.name == "Db::commit" && f.lines > 10)
    );
}
