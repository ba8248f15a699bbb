//! `cargo run -p amberdb-house [--all | --edges]`: the house rules' measurements on this
//! workspace: files and functions over the limits (the 25 longest files and 20 longest functions
//! with `--all`), the import circles (with the edges inside each with `--edges`), and the
//! kernel's imports from the product layer.

#![expect(clippy::print_stdout, reason = "a report tool prints its report")]

use amberdb_house::{
    MAX_FILE_LINES, MAX_FN_LINES, circles, functions, imports, kernel_reaches_up,
    product_reaches_in, workspace_sources,
};
use std::path::Path;

fn main() -> Result<(), String> {
    let flag = std::env::args().nth(1);
    let all = flag.as_deref() == Some("--all");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let files = workspace_sources(&root)?;
    let mut by_length: Vec<_> = files.iter().collect();
    by_length.sort_by_key(|f| std::cmp::Reverse(f.lines));
    println!("files over {MAX_FILE_LINES} lines outside tests:");
    for file in by_length
        .iter()
        .filter(|f| all || f.lines > MAX_FILE_LINES)
        .take(if all { 25 } else { usize::MAX })
    {
        println!("  {:5}  {}", file.lines, file.path.display());
    }
    let mut fns = functions(&files);
    fns.sort_by_key(|f| std::cmp::Reverse(f.lines));
    println!("functions over {MAX_FN_LINES} lines outside tests:");
    for f in fns
        .iter()
        .filter(|f| all || f.lines > MAX_FN_LINES)
        .take(if all { 20 } else { usize::MAX })
    {
        println!(
            "  {:5}  {}:{} {}",
            f.lines,
            f.path.display(),
            f.line,
            f.name
        );
    }
    let edges = imports(&files);
    println!("import circles:");
    let found = circles(&edges);
    if flag.as_deref() == Some("--edges") {
        for circle in &found {
            for e in edges
                .iter()
                .filter(|e| circle.contains(&e.from) && circle.contains(&e.to))
            {
                println!("  edge {} → {}", e.from.display(), e.to.display());
            }
        }
    }
    for circle in found {
        let names: Vec<_> = circle.iter().map(|p| p.display().to_string()).collect();
        println!("  {}", names.join(" ↔ "));
    }
    println!("the kernel's imports from the product layer:");
    for edge in kernel_reaches_up(&edges) {
        println!("  {} → {}", edge.from.display(), edge.to.display());
    }
    println!("the product layer's imports of kernel files outside KERNEL_API:");
    for edge in product_reaches_in(&edges) {
        println!("  {} → {}", edge.from.display(), edge.to.display());
    }
    Ok(())
}
