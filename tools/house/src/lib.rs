//! The house rules of docs/architecture.md ("House rules"), measured on the workspace's own
//! sources, so that the next drift fails CI instead of waiting for a reader to count:
//!
//! - no file longer than [`MAX_FILE_LINES`] lines outside its tests;
//! - no function longer than [`MAX_FN_LINES`] lines outside tests;
//! - no import circle between the files of a crate;
//! - the engine's `kernel/` imports nothing from the product layer above it.
//!
//! What counts: every `.rs` file under a member crate's `src/` (tests in `tests/`, and items
//! under `#[cfg(test)]` or `#[test]`, do not). A file's *imports* are the files its `use` items
//! and its `crate::`, `super::` and `self::` paths name, each path followed through the
//! re-exports (`pub use`) of the module it lands in to the file that defines the item: a facade
//! that re-exports is not a dependency of what it re-exports, and re-exports are not edges.
//! `mod` declarations are not edges either.

use proc_macro2::Span;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// No file is longer than this outside its tests.
pub const MAX_FILE_LINES: usize = 1000;
/// No function is longer than this (its signature to its closing brace) outside tests.
pub const MAX_FN_LINES: usize = 120;

/// The member crates whose `src/` is measured, relative to the workspace root.
pub const CRATES: &[&str] = &[
    "index",
    "embed",
    "engine",
    "server",
    "benches",
    "python",
    "tools/house",
];

/// One source file of a crate.
pub struct SourceFile {
    /// Path relative to the workspace root.
    pub path: PathBuf,
    /// The module path inside its crate's tree (`[]` for a crate root).
    pub module: Vec<String>,
    /// Which tree of the crate it belongs to: `lib`, or the binary's root file.
    pub tree: String,
    /// Lines outside test items.
    pub lines: usize,
    syntax: syn::File,
}

/// A function and its length.
pub struct Function {
    /// The file it is in.
    pub path: PathBuf,
    /// `Type::name` or `name`.
    pub name: String,
    /// Its first line.
    pub line: usize,
    /// Lines from its signature to its closing brace.
    pub lines: usize,
}

/// An edge of the import graph: `from` names something `to` defines.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct Import {
    /// The importing file.
    pub from: PathBuf,
    /// The file that defines what is imported.
    pub to: PathBuf,
}

/// Every measured source file of the workspace at `root`.
///
/// # Errors
/// A file that cannot be read or parsed.
pub fn workspace_sources(root: &Path) -> Result<Vec<SourceFile>, String> {
    let mut files = Vec::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        let mut paths = Vec::new();
        collect_rs(&src, &mut paths)?;
        paths.sort();
        let mut test_only: BTreeSet<PathBuf> = BTreeSet::new();
        for path in paths {
            if test_only
                .iter()
                .any(|t| path.starts_with(t.with_extension("")))
                || test_only.contains(&path)
            {
                continue;
            }
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let syntax = syn::parse_file(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            let relative = path.strip_prefix(&src).expect("under src").to_path_buf();
            let (tree, module) = module_of(&relative);
            let dir = if relative
                .file_name()
                .is_some_and(|n| n == "mod.rs" || n == "lib.rs" || n == "main.rs")
                || tree != "lib" && module.is_empty()
            {
                path.parent().expect("parent").to_path_buf()
            } else {
                path.with_extension("")
            };
            for item in &syntax.items {
                if let syn::Item::Mod(m) = item
                    && m.content.is_none()
                    && is_test(&m.attrs)
                {
                    test_only.insert(dir.join(format!("{}.rs", m.ident)));
                    test_only.insert(dir.join(m.ident.to_string()).join("mod.rs"));
                }
            }
            let test_lines: usize = syntax
                .items
                .iter()
                .filter(|item| is_test(item_attrs(item)))
                .map(|item| span_lines(item_span(item)))
                .sum();
            let lines = text.lines().count().saturating_sub(test_lines);
            files.push(SourceFile {
                path: path.strip_prefix(root).expect("under root").to_path_buf(),
                module,
                tree: format!("{krate}:{tree}"),
                lines,
                syntax,
            });
        }
    }
    Ok(files)
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The tree (`lib` or a binary's root) and module path of a file relative to `src/`.
fn module_of(relative: &Path) -> (String, Vec<String>) {
    let parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [main] if main == "main.rs" => ("main.rs".into(), Vec::new()),
        [bin, file] if bin == "bin" => (format!("bin/{file}"), Vec::new()),
        [bin, dir, rest @ ..] if bin == "bin" => {
            let mut module: Vec<String> = rest
                .iter()
                .map(|p| p.trim_end_matches(".rs").to_owned())
                .collect();
            if module.last().is_some_and(|m| m == "main") {
                module.pop();
            }
            (format!("bin/{dir}"), module)
        }
        _ => {
            let mut module: Vec<String> = parts
                .iter()
                .map(|p| p.trim_end_matches(".rs").to_owned())
                .collect();
            if module.last().is_some_and(|m| m == "lib" || m == "mod") {
                module.pop();
            }
            ("lib".into(), module)
        }
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("test")
            || (attr.path().is_ident("cfg")
                && attr
                    .parse_args::<syn::Meta>()
                    .is_ok_and(|meta| meta.path().is_ident("test")))
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        _ => &[],
    }
}

fn item_span(item: &syn::Item) -> Span {
    use syn::spanned::Spanned;
    item.span()
}

fn span_lines(span: Span) -> usize {
    span.end().line + 1 - span.start().line
}

/// Every function outside tests, with its length.
#[must_use]
pub fn functions(files: &[SourceFile]) -> Vec<Function> {
    struct Finder<'a> {
        path: &'a Path,
        owner: Option<String>,
        out: Vec<Function>,
    }
    impl Finder<'_> {
        fn record(&mut self, name: &syn::Ident, start: Span, end: Span) {
            let name = match &self.owner {
                Some(owner) => format!("{owner}::{name}"),
                None => name.to_string(),
            };
            self.out.push(Function {
                path: self.path.to_path_buf(),
                name,
                line: start.start().line,
                lines: end.end().line + 1 - start.start().line,
            });
        }
    }
    impl<'ast> Visit<'ast> for Finder<'_> {
        fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
            if !is_test(&m.attrs) {
                syn::visit::visit_item_mod(self, m);
            }
        }
        fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
            if is_test(&i.attrs) {
                return;
            }
            let owner = self.owner.take();
            if let syn::Type::Path(p) = &*i.self_ty {
                self.owner = p.path.segments.last().map(|s| s.ident.to_string());
            }
            syn::visit::visit_item_impl(self, i);
            self.owner = owner;
        }
        fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
            if is_test(&f.attrs) {
                return;
            }
            self.record(
                &f.sig.ident,
                f.sig.fn_token.span,
                f.block.brace_token.span.close(),
            );
            syn::visit::visit_item_fn(self, f);
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            if is_test(&f.attrs) {
                return;
            }
            self.record(
                &f.sig.ident,
                f.sig.fn_token.span,
                f.block.brace_token.span.close(),
            );
            syn::visit::visit_impl_item_fn(self, f);
        }
        fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
            if let Some(block) = &f.default {
                self.record(
                    &f.sig.ident,
                    f.sig.fn_token.span,
                    block.brace_token.span.close(),
                );
            }
            syn::visit::visit_trait_item_fn(self, f);
        }
    }
    let mut out = Vec::new();
    for file in files {
        let mut finder = Finder {
            path: &file.path,
            owner: None,
            out: Vec::new(),
        };
        finder.visit_file(&file.syntax);
        out.extend(finder.out);
    }
    out
}

/// The modules of one tree: module path → the file that holds it, and the names each module
/// re-exports (name → the path it re-exports, absolute in the tree).
struct Tree<'a> {
    modules: HashMap<Vec<String>, &'a SourceFile>,
    reexports: HashMap<Vec<String>, HashMap<String, Vec<String>>>,
}

/// The import graph of the workspace: for each crate tree, which file names what another
/// file defines.
#[must_use]
pub fn imports(files: &[SourceFile]) -> Vec<Import> {
    let mut trees: BTreeMap<&str, Vec<&SourceFile>> = BTreeMap::new();
    for file in files {
        trees.entry(file.tree.as_str()).or_default().push(file);
    }
    let mut edges = BTreeSet::new();
    for members in trees.values() {
        let mut tree = Tree {
            modules: HashMap::new(),
            reexports: HashMap::new(),
        };
        for file in members {
            tree.modules.insert(file.module.clone(), file);
            collect_inline(&file.syntax.items, &file.module, file, &mut tree);
        }
        for file in members {
            let mut paths = Vec::new();
            collect_paths(&file.syntax.items, &file.module, &mut paths);
            for path in paths {
                if let Some(to) = resolve(&tree, &path, 0)
                    && to.path != file.path
                {
                    edges.insert(Import {
                        from: file.path.clone(),
                        to: to.path.clone(),
                    });
                }
            }
        }
    }
    edges.into_iter().collect()
}

/// Inline modules (`mod x { ... }`) and every module's re-exports.
fn collect_inline<'a>(
    items: &[syn::Item],
    module: &[String],
    file: &'a SourceFile,
    tree: &mut Tree<'a>,
) {
    for item in items {
        if is_test(item_attrs(item)) {
            continue;
        }
        match item {
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    let mut child = module.to_vec();
                    child.push(m.ident.to_string());
                    tree.modules.insert(child.clone(), file);
                    collect_inline(inner, &child, file, tree);
                }
            }
            syn::Item::Use(u) if !matches!(u.vis, syn::Visibility::Inherited) => {
                let mut flat = Vec::new();
                flatten_use(&u.tree, Vec::new(), &mut flat);
                for (path, alias) in flat {
                    if let Some(absolute) = absolute(module, &path, &child_modules(items)) {
                        let name =
                            alias.unwrap_or_else(|| path.last().cloned().unwrap_or_default());
                        tree.reexports
                            .entry(module.to_vec())
                            .or_default()
                            .insert(name, absolute);
                    }
                }
            }
            _ => {}
        }
    }
}

fn child_modules(items: &[syn::Item]) -> BTreeSet<String> {
    items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// `use a::{b, c as d}` → `[a, b]`, `[a, c]` (alias `d`); a glob ends in `*`.
fn flatten_use(
    tree: &syn::UseTree,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let with = |name: String| {
        let mut p = prefix.clone();
        p.push(name);
        p
    };
    match tree {
        syn::UseTree::Path(p) => flatten_use(&p.tree, with(p.ident.to_string()), out),
        syn::UseTree::Name(n) => out.push((with(n.ident.to_string()), None)),
        syn::UseTree::Rename(r) => {
            out.push((with(r.ident.to_string()), Some(r.rename.to_string())))
        }
        syn::UseTree::Glob(_) => out.push((with("*".into()), None)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix.clone(), out);
            }
        }
    }
}

/// A path written in `module` made absolute in its tree, or `None` when it leaves the crate.
fn absolute(
    module: &[String],
    path: &[String],
    children: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => {
            let mut base = module.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            return Some(base);
        }
        name if children.contains(name) => {
            let mut base = module.to_vec();
            base.push(name.to_owned());
            base.extend(path[1..].iter().cloned());
            return Some(base);
        }
        _ => return None,
    };
    base.extend(path[1..].iter().cloned());
    Some(base)
}

/// Every path a file's non-test code names, made absolute.
fn collect_paths(items: &[syn::Item], module: &[String], out: &mut Vec<Vec<String>>) {
    struct Paths<'a> {
        module: Vec<String>,
        children: BTreeSet<String>,
        out: &'a mut Vec<Vec<String>>,
    }
    impl<'ast> Visit<'ast> for Paths<'_> {
        fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}
        fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
            if !matches!(u.vis, syn::Visibility::Inherited) {
                return; // a re-export: followed, not an edge
            }
            let mut flat = Vec::new();
            flatten_use(&u.tree, Vec::new(), &mut flat);
            for (path, _) in flat {
                if let Some(abs) = absolute(&self.module, &path, &self.children) {
                    self.out.push(abs);
                }
            }
        }
        fn visit_path(&mut self, path: &'ast syn::Path) {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            if segments.len() > 1
                && let Some(abs) = absolute(&self.module, &segments, &self.children)
            {
                self.out.push(abs);
            }
            syn::visit::visit_path(self, path);
        }
    }
    let children = child_modules(items);
    for item in items {
        if is_test(item_attrs(item)) {
            continue;
        }
        if let syn::Item::Mod(m) = item
            && let Some((_, inner)) = &m.content
        {
            let mut child = module.to_vec();
            child.push(m.ident.to_string());
            collect_paths(inner, &child, out);
            continue;
        }
        let mut visitor = Paths {
            module: module.to_vec(),
            children: children.clone(),
            out,
        };
        visitor.visit_item(item);
    }
}

/// The file that defines what `path` names, following re-exports.
fn resolve<'a>(tree: &Tree<'a>, path: &[String], depth: usize) -> Option<&'a SourceFile> {
    if depth > 16 {
        return None;
    }
    let mut longest = None;
    for len in (0..=path.len()).rev() {
        if let Some(file) = tree.modules.get(&path[..len]) {
            longest = Some((len, *file));
            break;
        }
    }
    let (len, file) = longest?;
    if let Some(next) = path.get(len)
        && let Some(target) = tree.reexports.get(&path[..len]).and_then(|r| r.get(next))
    {
        let mut followed = target.clone();
        followed.extend(path[len + 1..].iter().cloned());
        if followed != path {
            return resolve(tree, &followed, depth + 1).or(Some(file));
        }
    }
    Some(file)
}

/// The import circles: each strongly connected group of more than one file, sorted.
#[must_use]
pub fn circles(edges: &[Import]) -> Vec<Vec<PathBuf>> {
    let mut graph: BTreeMap<&Path, Vec<&Path>> = BTreeMap::new();
    for e in edges {
        graph.entry(&e.from).or_default().push(&e.to);
        graph.entry(&e.to).or_default();
    }
    // Tarjan's strongly connected components, iteratively small enough to recurse.
    struct State<'a> {
        graph: &'a BTreeMap<&'a Path, Vec<&'a Path>>,
        index: HashMap<&'a Path, usize>,
        low: HashMap<&'a Path, usize>,
        stack: Vec<&'a Path>,
        on_stack: BTreeSet<&'a Path>,
        next: usize,
        out: Vec<Vec<PathBuf>>,
    }
    fn connect<'a>(s: &mut State<'a>, v: &'a Path) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in &s.graph[v] {
            if !s.index.contains_key(w) {
                connect(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.push(w.to_path_buf());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut state = State {
        graph: &graph,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !state.index.contains_key(v) {
            connect(&mut state, v);
        }
    }
    state.out.sort();
    state.out
}

/// The engine's floors: `kernel/` below, the product layer (`hooks/`, `memory/`, `store/`,
/// `options.rs`, the product's error `error.rs`) above it.
const KERNEL: &str = "engine/src/kernel/";
const PRODUCT: &[&str] = &[
    "engine/src/hooks/",
    "engine/src/memory/",
    "engine/src/store/",
    "engine/src/options.rs",
    "engine/src/error.rs",
];

/// The edges from the kernel up into the product layer (there must be none).
#[must_use]
pub fn kernel_reaches_up(edges: &[Import]) -> Vec<Import> {
    edges
        .iter()
        .filter(|e| e.from.starts_with(KERNEL) || e.from.to_string_lossy().starts_with(KERNEL))
        .filter(|e| {
            PRODUCT
                .iter()
                .any(|p| e.to.to_string_lossy().starts_with(p))
        })
        .cloned()
        .collect()
}

/// The kernel's API: the kernel files the product layer may import (each a type or function
/// the layers above are meant to use: the `Db` and its write path, the state and its read
/// API, the data model, the operation vocabulary, errors, options, the storage seam, backup,
/// the maintenance and recovery reports, identity, the tokenizer, the decision codes, the
/// record slots, the table's read-only views). Everything else of `kernel/` (codecs, segment
/// and checkpoint formats, the log writer and reader, recovery's steps, the lexical build,
/// the text column) is the kernel's own.
pub const KERNEL_API: &[&str] = &[
    "engine/src/kernel/db/",
    "engine/src/kernel/state.rs",
    "engine/src/kernel/record.rs",
    "engine/src/kernel/ids.rs",
    // `Timestamp`, the record model's time (re-exported by record.rs).
    "engine/src/kernel/time.rs",
    "engine/src/kernel/log/format.rs",
    "engine/src/kernel/error.rs",
    "engine/src/kernel/config.rs",
    "engine/src/kernel/storage/",
    "engine/src/kernel/backup.rs",
    "engine/src/kernel/commit.rs",
    "engine/src/kernel/maintenance.rs",
    // `OpenReport`, what an open found.
    "engine/src/kernel/recovery/found.rs",
    "engine/src/kernel/identity.rs",
    "engine/src/kernel/keyword.rs",
    "engine/src/kernel/rule.rs",
    "engine/src/kernel/slots.rs",
    // A partition log's frames and messages (`Claim`, `Skip`, `StreamMessage`, `Applied`).
    "engine/src/kernel/cluster.rs",
    // Request ids (`RequestId`, `RequestRecord`), what a retried write is known by.
    "engine/src/kernel/request.rs",
    // The table's read-only views (`UserIndex`, `Archived`, `CanonicalTags`).
    "engine/src/kernel/table/user.rs",
];

/// The edges from the product layer into the kernel's own files (there must be none).
#[must_use]
pub fn product_reaches_in(edges: &[Import]) -> Vec<Import> {
    edges
        .iter()
        .filter(|e| {
            let from = e.from.to_string_lossy();
            PRODUCT.iter().any(|p| from.starts_with(p))
        })
        .filter(|e| {
            let to = e.to.to_string_lossy();
            to.starts_with(KERNEL) && !KERNEL_API.iter().any(|p| to.starts_with(p))
        })
        .cloned()
        .collect()
}
