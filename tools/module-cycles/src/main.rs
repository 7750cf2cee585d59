//! `module-cycles CRATE_DIR...`: fails when modules of one crate import each other in a cycle,
//! and names each cycle with the paths that close it. Each crate's roots are `src/lib.rs` and
//! `src/main.rs` (a binary is a crate of its own); its modules are found from their `mod`
//! declarations, file modules and inline ones alike. `#[cfg(test)]` items are left out: a test
//! may take its fixtures from any module without making the code it tests depend on it.
//!
//! The rule. Module X names module Y (Y ≠ X) when X's own code (not its child modules') names
//! Y or an item of Y by a path: a `use` tree, or a path of two segments or more in an
//! expression, type, pattern or macro's tokens that starts with `crate`, `self`, `super`, a
//! child module of X, or a name X's `use` brought in. A path stands for the deepest module it
//! names; a name a module re-exports (`pub use`, `pub(crate) use`) stands for the module it
//! comes from, so a facade is looked through. Then, among the children of every module (the
//! crate root's included), child P depends on child Q when any module within P names any module
//! within Q, and those dependencies must have no cycle, at every level. So:
//!
//! - `report` naming `vi` while `vi` names `report` is a cycle, and so is `a::x` naming
//!   `b::y` while `b::z` names `a`: `a` and `b` depend on each other;
//! - a module and its own ancestors or descendants are never a cycle, whether by `mod`
//!   declarations or by `use`: a parent holds what its children share (`use super::Context`)
//!   and may re-export or call them. Nesting already orders them; what the check guards is
//!   that modules side by side can be read, and moved, one without the other.
//!
//! Paths are resolved by name, without type information (this is not rustc's resolver): a
//! local variable is never a path of two segments, and the crates checked do not name a child
//! module after an external crate. `syn` parses the files, so comments, strings and doc links
//! are never read as paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// A module of the crate: its path from the root, its file, and what its own code names.
#[derive(Default)]
struct Module {
    /// `reconcile::vm`; empty for the root.
    path: Vec<String>,
    /// The file that holds it.
    file: PathBuf,
    /// Child modules by name.
    children: BTreeMap<String, usize>,
    /// Names its `use` brought in: name → the path it stands for (absolute or relative to this
    /// module, as written).
    aliases: BTreeMap<String, Vec<String>>,
    /// Names it re-exports (`pub use`): name → the path it stands for.
    reexports: BTreeMap<String, Vec<String>>,
    /// What its code names: the path as written (use trees flattened, `*` for a glob), and
    /// whether it is a re-export.
    refs: Vec<(Vec<String>, bool)>,
    /// Its parent module.
    parent: Option<usize>,
}

/// The modules of one crate.
struct Crate {
    modules: Vec<Module>,
}

impl Crate {
    /// Reads the crate whose root file is `root`.
    fn load(root: &Path) -> Result<Crate, String> {
        let mut c = Crate { modules: Vec::new() };
        let file = read(root)?;
        // A crate root's `mod x;` children live beside it.
        let dir = root.parent().unwrap_or(Path::new(".")).to_owned();
        c.add_module(Vec::new(), None, root, &file.items, dir)?;
        Ok(c)
    }

    /// Adds the module `path` with `items`, from `file`, and its children; `dir` is where its
    /// `mod x;` children live.
    fn add_module(
        &mut self,
        path: Vec<String>,
        parent: Option<usize>,
        file: &Path,
        items: &[syn::Item],
        dir: PathBuf,
    ) -> Result<usize, String> {
        let id = self.modules.len();
        self.modules.push(Module {
            path: path.clone(),
            file: file.to_owned(),
            parent,
            ..Module::default()
        });
        let mut collector = Collector::default();
        for item in items.iter().filter(|i| !test_only(i)) {
            match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let mut child_path = path.clone();
                    child_path.push(name.clone());
                    let child = match &m.content {
                        Some((_, inner)) => {
                            self.add_module(child_path, Some(id), file, inner, dir.join(&name))?
                        }
                        None => {
                            let (child_file, child_dir) = child_file(&dir, &name, m)?;
                            let parsed = read(&child_file)?;
                            self.add_module(child_path, Some(id), &child_file, &parsed.items, child_dir)?
                        }
                    };
                    self.modules[id].children.insert(name, child);
                    // The module's attributes (doc comments aside) are its parent's code.
                    for attr in &m.attrs {
                        collector.visit_attribute(attr);
                    }
                }
                syn::Item::Use(u) => {
                    let public = !matches!(u.vis, syn::Visibility::Inherited);
                    let mut flat = Vec::new();
                    flatten(&u.tree, &mut Vec::new(), &mut flat);
                    for (p, alias) in flat {
                        if let Some(alias) = alias {
                            if public {
                                self.modules[id].reexports.insert(alias.clone(), p.clone());
                            }
                            self.modules[id].aliases.insert(alias, p.clone());
                        }
                        collector.refs.push((p, public));
                    }
                }
                other => collector.visit_item(other),
            }
        }
        self.modules[id].refs = collector.refs;
        Ok(id)
    }

    /// `a::b::c` of module `id`.
    fn name(&self, id: usize) -> String {
        let p = &self.modules[id].path;
        if p.is_empty() {
            "crate".to_owned()
        } else {
            p.join("::")
        }
    }

    /// Whether `a` is `b` or one of its descendants.
    fn within(&self, mut a: usize, b: usize) -> bool {
        loop {
            if a == b {
                return true;
            }
            match self.modules[a].parent {
                Some(p) => a = p,
                None => return false,
            }
        }
    }

    /// The module `path`, as written in module `from`, stands for; `None`: not one of the
    /// crate's (an external crate, a local item, a variable).
    fn resolve(&self, from: usize, path: &[String], depth: usize) -> Option<usize> {
        if depth > 16 {
            return None;
        }
        let (mut at, rest) = match path.first()?.as_str() {
            "crate" => (0, &path[1..]),
            "self" => (from, &path[1..]),
            "super" => {
                let mut at = from;
                let mut i = 0;
                while path.get(i).map(String::as_str) == Some("super") {
                    at = self.modules[at].parent?;
                    i += 1;
                }
                (at, &path[i..])
            }
            first => {
                let m = &self.modules[from];
                if let Some(&child) = m.children.get(first) {
                    (child, &path[1..])
                } else if let Some(target) = m.aliases.get(first) {
                    // A name brought in by `use`: what it stands for, then the rest.
                    let mut full = target.clone();
                    full.extend_from_slice(&path[1..]);
                    return self.resolve(from, &full, depth + 1);
                } else {
                    return None;
                }
            }
        };
        for (i, seg) in rest.iter().enumerate() {
            let m = &self.modules[at];
            if seg == "self" || seg == "*" {
                break;
            }
            if let Some(&child) = m.children.get(seg) {
                at = child;
            } else if let Some(target) = m.reexports.get(seg) {
                // Re-exported here: the module it comes from.
                let mut full = target.clone();
                full.extend_from_slice(&rest[i + 1..]);
                return self.resolve(at, &full, depth + 1).or(Some(at));
            } else {
                break;
            }
        }
        Some(at)
    }

    /// Every dependency: (from, to) → the first path that shows it.
    fn edges(&self) -> BTreeMap<(usize, usize), String> {
        let mut edges = BTreeMap::new();
        for (id, m) in self.modules.iter().enumerate() {
            for (path, reexport) in &m.refs {
                let Some(to) = self.resolve(id, path, 0) else {
                    continue;
                };
                if to == id || (*reexport && self.within(to, id)) {
                    continue;
                }
                edges.entry((id, to)).or_insert_with(|| path.join("::"));
            }
        }
        edges
    }

    /// The ancestors of `m`, itself first, the root last.
    fn ancestors(&self, mut m: usize) -> Vec<usize> {
        let mut out = vec![m];
        while let Some(p) = self.modules[m].parent {
            out.push(p);
            m = p;
        }
        out
    }

    /// The dependencies between siblings: for each module `L`, child `P` of `L` depends on
    /// child `Q` when a module within `P` names one within `Q`. A module naming its ancestor or
    /// descendant adds none. (lifted from, lifted to) → the first (from, to, path) that shows it.
    fn sibling_edges(&self) -> BTreeMap<(usize, usize), (usize, usize, String)> {
        let mut out = BTreeMap::new();
        for ((from, to), path) in self.edges() {
            let (up_from, up_to) = (self.ancestors(from), self.ancestors(to));
            if up_from.contains(&to) || up_to.contains(&from) {
                continue;
            }
            // The children of the lowest common ancestor that hold `from` and `to`.
            let lca_from = up_from.iter().position(|a| up_to.contains(a)).expect("the root");
            let lca = up_from[lca_from];
            let lca_to = up_to.iter().position(|a| *a == lca).expect("common");
            out.entry((up_from[lca_from - 1], up_to[lca_to - 1]))
                .or_insert((from, to, path));
        }
        out
    }
}

/// Whether `item` is `#[cfg(test)]`: test code may reach into any module for its fixtures.
fn test_only(item: &syn::Item) -> bool {
    let attrs = match item {
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        _ => return false,
    };
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "test")
    })
}

/// The file of `mod name;` declared in a module whose children live in `dir`, and where that
/// module's own children live.
fn child_file(dir: &Path, name: &str, m: &syn::ItemMod) -> Result<(PathBuf, PathBuf), String> {
    for attr in &m.attrs {
        if attr.path().is_ident("path")
            && let syn::Meta::NameValue(nv) = &attr.meta
            && let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
        {
            let file = dir.join(s.value());
            let child_dir = file.with_extension("");
            return Ok((file, child_dir));
        }
    }
    let flat = dir.join(format!("{name}.rs"));
    if flat.is_file() {
        return Ok((flat, dir.join(name)));
    }
    let nested = dir.join(name).join("mod.rs");
    if nested.is_file() {
        return Ok((nested, dir.join(name)));
    }
    Err(format!(
        "mod {name}: neither {} nor {}",
        flat.display(),
        nested.display()
    ))
}

fn read(file: &Path) -> Result<syn::File, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// The paths of a use tree, each with the name it brings in (`None` for a glob).
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            // `use a::b::{self}` names `a::b` and brings in `b`.
            let name = n.ident.to_string();
            let mut p = prefix.clone();
            let alias = if name == "self" {
                prefix.last().cloned()
            } else {
                p.push(name.clone());
                Some(name)
            };
            out.push((p, alias));
        }
        syn::UseTree::Rename(r) => {
            let mut p = prefix.clone();
            p.push(r.ident.to_string());
            let alias = r.rename.to_string();
            out.push((p, (alias != "_").then_some(alias)));
        }
        syn::UseTree::Glob(_) => {
            let mut p = prefix.clone();
            p.push("*".to_owned());
            out.push((p, None));
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

/// The paths of one module's own code (not its child modules', which are modules of their own).
#[derive(Default)]
struct Collector {
    refs: Vec<(Vec<String>, bool)>,
}

impl Collector {
    /// The paths in a macro's tokens: `a::b::c` sequences of two segments or more.
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(first) => {
                    let mut path = vec![first.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(id)),
                    ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        path.push(id.to_string());
                        j += 3;
                    }
                    if path.len() > 1 {
                        self.refs.push((path, false));
                    }
                    i = j.max(i + 1);
                }
                TokenTree::Punct(_) | TokenTree::Literal(_) => i += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() > 1 {
            self.refs
                .push((p.segments.iter().map(|s| s.ident.to_string()).collect(), false));
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // A `use` inside a function: what it names, never a re-export.
        let mut flat = Vec::new();
        flatten(&u.tree, &mut Vec::new(), &mut flat);
        self.refs.extend(flat.into_iter().map(|(p, _)| (p, false)));
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // A module inside a function or block: not walked (none in the crates checked).
    }
}

/// The cycles of `edges` over `n` modules: each strongly connected component of more than one
/// module (Tarjan's algorithm), as the modules of one shortest cycle through its first one.
/// Every edge of [`Crate::sibling_edges`] joins two children of one module, so a component
/// never spans two levels.
fn cycles<V>(n: usize, edges: &BTreeMap<(usize, usize), V>) -> Vec<Vec<usize>> {
    let mut out: Vec<BTreeSet<usize>> = Vec::new();
    let adj: Vec<Vec<usize>> = (0..n)
        .map(|a| edges.keys().filter(|(f, _)| *f == a).map(|(_, t)| *t).collect())
        .collect();
    struct State {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
    }
    fn strong(v: usize, adj: &[Vec<usize>], s: &mut State, out: &mut Vec<BTreeSet<usize>>) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &adj[v] {
            match s.index[w] {
                None => {
                    strong(w, adj, s, out);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.insert(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                out.push(component);
            }
        }
    }
    let mut s = State {
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
    };
    for v in 0..n {
        if s.index[v].is_none() {
            strong(v, &adj, &mut s, &mut out);
        }
    }
    out.sort();
    out.into_iter()
        .map(|component| {
            // A shortest cycle through the component's first module, by breadth-first search.
            let start = *component.iter().next().expect("non-empty");
            let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            let mut seen = BTreeSet::from([start]);
            let mut last = start;
            'search: while let Some(v) = queue.pop_front() {
                for &w in &adj[v] {
                    if !component.contains(&w) {
                        continue;
                    }
                    if w == start {
                        last = v;
                        break 'search;
                    }
                    if seen.insert(w) {
                        prev.insert(w, v);
                        queue.push_back(w);
                    }
                }
            }
            let mut cycle = vec![last];
            while let Some(&p) = prev.get(cycle.last().expect("non-empty")) {
                cycle.push(p);
            }
            cycle.reverse();
            cycle
        })
        .collect()
}

fn main() -> ExitCode {
    let dirs: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if dirs.is_empty() {
        eprintln!("usage: module-cycles CRATE_DIR...");
        return ExitCode::from(2);
    }
    let mut failed = false;
    for dir in &dirs {
        let roots: Vec<PathBuf> = ["src/lib.rs", "src/main.rs"]
            .iter()
            .map(|r| dir.join(r))
            .filter(|r| r.is_file())
            .collect();
        if roots.is_empty() {
            eprintln!("{}: no src/lib.rs or src/main.rs", dir.display());
            return ExitCode::from(2);
        }
        for root in roots {
            let c = match Crate::load(&root) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let edges = c.sibling_edges();
            let found = cycles(c.modules.len(), &edges);
            if found.is_empty() {
                println!(
                    "{}: no cycles among {} modules ({} dependencies between siblings)",
                    root.display(),
                    c.modules.len(),
                    edges.len()
                );
                continue;
            }
            failed = true;
            for cycle in found {
                let names: Vec<String> = cycle.iter().map(|&m| c.name(m)).collect();
                println!(
                    "{}: modules import each other in a cycle: {} -> {}",
                    root.display(),
                    names.join(" -> "),
                    names[0]
                );
                for (i, &from) in cycle.iter().enumerate() {
                    let to = cycle[(i + 1) % cycle.len()];
                    let (by, named, path) = &edges[&(from, to)];
                    let file = &c.modules[*by].file;
                    let file = file.strip_prefix(dir).unwrap_or(file);
                    let inner = if (*by, *named) == (from, to) {
                        String::new()
                    } else {
                        format!(" ({} -> {})", c.name(*by), c.name(*named))
                    };
                    println!(
                        "  {} -> {}{inner}: {} names {path}",
                        c.name(from),
                        c.name(to),
                        file.display(),
                    );
                }
            }
        }
    }
    if failed {
        eprintln!(
            "module-cycles: move what the modules of a cycle share into a module of its own (rule: tools/module-cycles/src/main.rs)"
        );
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate written to a temporary directory: `files` as (path under `src/`, text).
    fn crate_of(name: &str, files: &[(&str, &str)]) -> Crate {
        let dir = std::env::temp_dir().join(format!("module-cycles-{}-{name}", std::process::id()));
        for (path, text) in files {
            let p = dir.join("src").join(path);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
            std::fs::write(&p, text).expect("write");
        }
        let c = Crate::load(&dir.join("src/lib.rs")).expect("load");
        std::fs::remove_dir_all(&dir).expect("clean");
        c
    }

    fn cycle_names(c: &Crate) -> Vec<Vec<String>> {
        cycles(c.modules.len(), &c.sibling_edges())
            .into_iter()
            .map(|cy| cy.into_iter().map(|m| c.name(m)).collect())
            .collect()
    }

    #[test]
    fn siblings_that_use_each_other() {
        let c = crate_of(
            "siblings",
            &[
                ("lib.rs", "mod a; mod b;"),
                ("a.rs", "use crate::b::B; pub struct A;"),
                ("b.rs", "pub struct B; fn f() -> super::a::A { todo!() }"),
            ],
        );
        assert_eq!(cycle_names(&c), [["a", "b"]]);
    }

    #[test]
    fn a_cycle_through_a_third_module_and_a_macro() {
        let c = crate_of(
            "three",
            &[
                ("lib.rs", "mod a; mod b; mod c;"),
                ("a.rs", "use crate::b; fn f() { b::g() }"),
                ("b.rs", "pub fn g() { println!(\"{}\", crate::c::X) }"),
                (
                    "c.rs",
                    "pub const X: u8 = 1; // crate::a::nothing\nfn h() { let _ = \"crate::a::x\"; }",
                ),
            ],
        );
        assert!(cycle_names(&c).is_empty(), "comments and strings are not paths");
        let c = crate_of(
            "three-closed",
            &[
                ("lib.rs", "mod a; mod b; mod c;"),
                ("a.rs", "use crate::b; fn f() { b::g() }"),
                ("b.rs", "pub fn g() { println!(\"{}\", crate::c::X) }"),
                ("c.rs", "pub const X: u8 = 1; fn h() { assert!(crate::a::F) }"),
            ],
        );
        assert_eq!(cycle_names(&c), [["a", "b", "c"]]);
    }

    #[test]
    fn parents_children_and_facades() {
        // A child using its parent's items, the parent re-exporting the child: no cycle.
        let c = crate_of(
            "facade",
            &[
                ("lib.rs", "pub mod r; pub use r::run;"),
                ("r/mod.rs", "mod run; pub use run::run; pub struct Context;"),
                ("r/run.rs", "use super::Context; pub fn run(_: Context) {}"),
            ],
        );
        assert!(cycle_names(&c).is_empty());
        // The parent calling into the child that uses it: nesting, not a cycle.
        let c = crate_of(
            "parent-calls",
            &[
                ("lib.rs", "pub mod r;"),
                (
                    "r/mod.rs",
                    "mod run; pub struct Context; fn go() { run::run(Context) }",
                ),
                ("r/run.rs", "use super::Context; pub fn run(_: Context) {}"),
            ],
        );
        assert!(cycle_names(&c).is_empty());
        // A re-export is looked through: naming `crate::r::run` is naming `r::run`.
        let c = crate_of(
            "through-facade",
            &[
                ("lib.rs", "pub mod r; mod other;"),
                ("r/mod.rs", "mod inner; pub use inner::Thing;"),
                ("r/inner.rs", "pub struct Thing; fn f() { crate::other::g() }"),
                ("other.rs", "pub fn g() { let _ = crate::r::Thing; }"),
            ],
        );
        assert_eq!(cycle_names(&c), [["r", "other"]]);
    }

    #[test]
    fn subtrees_that_use_each_other() {
        // a::x names b::y, b::z names a: a and b depend on each other, though no two single
        // modules do.
        let c = crate_of(
            "subtrees",
            &[
                ("lib.rs", "mod a; mod b;"),
                ("a/mod.rs", "mod x; pub struct A;"),
                ("a/x.rs", "fn f() { crate::b::y::g() }"),
                ("b/mod.rs", "pub mod y; mod z;"),
                ("b/y.rs", "pub fn g() {}"),
                ("b/z.rs", "use crate::a::A;"),
            ],
        );
        assert_eq!(cycle_names(&c), [["a", "b"]]);
    }

    #[test]
    fn inline_test_modules_and_aliases() {
        let c = crate_of(
            "inline",
            &[
                ("lib.rs", "mod a; mod b;"),
                (
                    "a.rs",
                    "pub fn f() {}\n#[cfg(test)] mod tests { use super::*; use crate::b::{self}; fn t() { b::g() } }",
                ),
                ("b.rs", "use crate::a as alias; pub fn g() { alias::f() }"),
            ],
        );
        // b names a through an alias; a names b only in its tests: no cycle.
        assert!(cycle_names(&c).is_empty());
        let c = crate_of(
            "inline-not-test",
            &[
                ("lib.rs", "mod a; mod b;"),
                (
                    "a.rs",
                    "pub fn f() {}\nmod helpers { use crate::b::{self}; fn t() { b::g() } }",
                ),
                ("b.rs", "use crate::a as alias; pub fn g() { alias::f() }"),
            ],
        );
        assert_eq!(cycle_names(&c), [["a", "b"]]);
    }
}
