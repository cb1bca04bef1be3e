//! The workspace's crates, their modules and what each file imports, read with syn.
//!
//! Each crate's module tree is walked from its root file (`src/lib.rs`, `src/main.rs`,
//! `crates/NAME/src/{lib,main}.rs`, a test crate's `tests/it/main.rs`, a build
//! script's `build.rs`) through its `mod x;` lines; an inline `mod x { … }` is a module
//! of its file. Every path of a file (a `use`, a path of its code, one in a macro's
//! arguments) is resolved as rustc's 2018 paths are: from `crate`, `self`, `super`, a
//! crate of the workspace, or a name in the module's scope (a child module, an item, a
//! `use`, a glob's names), through the `use`s that bring it in (re-exports too) to the
//! module that defines the item, or to the module it names. A name the workspace does
//! not hold is an outside crate's (its first segment). A re-export (`pub use`, any
//! `pub(…)`) is marked: it is no import of its file for the circles, where the files
//! that name the item through it import the file that defines it; a path that names a
//! module is no import either, for the circles: the items named through it are.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};

use crate::source::{self, CRATES};

/// One module: its crate, path in it, the file it is written in, what it holds.
struct Module {
    krate: String,
    path: Vec<String>,
    file: String,
    /// Where its `mod x;` children's files are.
    dir: String,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// The items it defines, by name.
    items: BTreeSet<String>,
    /// What each `use` brings in: the name → the path it stands for.
    aliases: BTreeMap<String, Vec<String>>,
    globs: Vec<Vec<String>>,
}

/// What a file names, resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// A module of the workspace or an item it defines, by the module's file, its
    /// crate, the member crate's door for the tests the path went through, if any (its
    /// `driver` or `testing` module), and whether it names the module itself.
    File {
        file: String,
        krate: String,
        door: Option<&'static str>,
        module: bool,
    },
    /// A crate outside the workspace (or a name no module holds): its first segment.
    External(String),
}

/// One import of a file: where it is written, the path as written, what it names.
#[derive(Clone, Debug)]
pub struct Import {
    pub file: String,
    pub line: usize,
    pub text: String,
    pub target: Target,
    /// A `pub use` (any `pub(…)` too): no import of its file by itself, for the
    /// circles, as the files that name the item through it import the re-exporting one.
    pub reexport: bool,
}

/// The workspace's modules, and every import of every file.
pub struct Workspace {
    modules: Vec<Module>,
    roots: BTreeMap<String, usize>,
    pub imports: Vec<Import>,
    /// Each file's module path, for the circles between modules: (crate, path).
    pub module_of: BTreeMap<String, (String, Vec<String>)>,
}

/// The crates of the workspace: (crate name, root file), from `files`' paths: the
/// application's library (`booking_expire`) and binary (`main`), each member's
/// (`booking_expire_NAME`, `NAME_main`), the integration tests' crates (`tests/NAME.rs`
/// or `tests/NAME/main.rs` as `NAME`, `it` for the suite; a member's as
/// `MEMBER_tests_NAME`) and the build scripts (`build_script`, `MEMBER_build`).
pub fn crates(files: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, name) in [
        ("src/lib.rs", "booking_expire"),
        ("src/main.rs", "main"),
        ("build.rs", "build_script"),
    ] {
        if files.contains_key(path) {
            out.push((name.to_owned(), path.to_owned()));
        }
    }
    for path in files.keys() {
        if let Some(name) = path.strip_prefix("tests/").and_then(test_crate) {
            out.push((name, path.clone()));
        }
    }
    for path in files.keys() {
        let Some(rest) = path.strip_prefix(&format!("{CRATES}/")) else {
            continue;
        };
        let Some((member, inside)) = rest.split_once('/') else {
            continue;
        };
        let member = member.replace('-', "_");
        if inside == "src/lib.rs" {
            out.push((format!("booking_expire_{member}"), path.clone()));
        } else if inside == "src/main.rs" {
            out.push((format!("{member}_main"), path.clone()));
        } else if inside == "build.rs" {
            out.push((format!("{member}_build"), path.clone()));
        } else if let Some(name) = inside.strip_prefix("tests/").and_then(test_crate) {
            out.push((format!("{member}_tests_{name}"), path.clone()));
        }
    }
    out
}

/// The test crate whose root is `path` in a `tests/` folder, as cargo finds them
/// (`NAME.rs`, `NAME/main.rs`): its name, else `None`.
fn test_crate(path: &str) -> Option<String> {
    let name = match path.split_once('/') {
        Some((name, "main.rs")) => name,
        Some(_) => return None,
        None => path.strip_suffix(".rs")?,
    };
    Some(name.replace('-', "_"))
}

/// The workspace of `files` (path from the root → text).
pub fn read(files: &BTreeMap<String, String>) -> Workspace {
    let mut w = Workspace {
        modules: Vec::new(),
        roots: BTreeMap::new(),
        imports: Vec::new(),
        module_of: BTreeMap::new(),
    };
    let mut parsed: BTreeMap<String, syn::File> = BTreeMap::new();
    for (krate, root) in crates(files) {
        let id = w.load(files, &mut parsed, &krate, Vec::new(), root, None);
        w.roots.insert(krate, id);
    }
    for (file, tree) in &parsed {
        let id = w.by_file(file);
        let mut paths = Paths {
            w: &w,
            module: id,
            found: Vec::new(),
        };
        paths.visit_file(tree);
        let found = paths.found;
        for (module, line, segments, reexport) in found {
            let target = w.resolve(module, &segments);
            // A single name is an import only when it leads out of its file.
            if segments.len() == 1
                && !matches!(&target, Target::File { file: to, .. } if to != file)
            {
                continue;
            }
            w.imports.push(Import {
                file: file.clone(),
                line,
                text: segments.join("::"),
                target,
                reexport,
            });
        }
    }
    w
}

impl Workspace {
    fn by_file(&self, file: &str) -> usize {
        let (krate, path) = &self.module_of[file];
        self.modules
            .iter()
            .position(|m| &m.krate == krate && &m.path == path)
            .unwrap_or_else(|| panic!("{file}: no module"))
    }

    /// Makes the module of `file` (and its children, from its `mod` lines).
    fn load(
        &mut self,
        files: &BTreeMap<String, String>,
        parsed: &mut BTreeMap<String, syn::File>,
        krate: &str,
        path: Vec<String>,
        file: String,
        parent: Option<usize>,
    ) -> usize {
        let text = files
            .get(&file)
            .unwrap_or_else(|| panic!("{file}: declared by a `mod` line, not found"));
        let tree = syn::parse_file(text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let dir = match file.rsplit_once('/') {
            Some((dir, "lib.rs" | "main.rs" | "mod.rs")) => dir.to_owned(),
            _ => file.trim_end_matches(".rs").to_owned(),
        };
        self.module_of
            .insert(file.clone(), (krate.to_owned(), path.clone()));
        let id = self.new_module(krate, path, &file, dir, parent);
        self.collect(files, parsed, id, &tree.items);
        parsed.insert(file, tree);
        id
    }

    fn new_module(
        &mut self,
        krate: &str,
        path: Vec<String>,
        file: &str,
        dir: String,
        parent: Option<usize>,
    ) -> usize {
        let id = self.modules.len();
        if let (Some(parent), Some(name)) = (parent, path.last()) {
            self.modules[parent].children.insert(name.clone(), id);
        }
        self.modules.push(Module {
            krate: krate.to_owned(),
            path,
            file: file.to_owned(),
            dir,
            parent,
            children: BTreeMap::new(),
            items: BTreeSet::new(),
            aliases: BTreeMap::new(),
            globs: Vec::new(),
        });
        id
    }

    /// The modules, items and `use`s of `items`, in module `id`.
    fn collect(
        &mut self,
        files: &BTreeMap<String, String>,
        parsed: &mut BTreeMap<String, syn::File>,
        id: usize,
        items: &[syn::Item],
    ) {
        for item in items {
            let ident = match item {
                syn::Item::Const(i) => Some(&i.ident),
                syn::Item::Enum(i) => Some(&i.ident),
                syn::Item::Fn(i) => Some(&i.sig.ident),
                syn::Item::Static(i) => Some(&i.ident),
                syn::Item::Struct(i) => Some(&i.ident),
                syn::Item::Trait(i) => Some(&i.ident),
                syn::Item::TraitAlias(i) => Some(&i.ident),
                syn::Item::Type(i) => Some(&i.ident),
                syn::Item::Union(i) => Some(&i.ident),
                syn::Item::Macro(i) => i.ident.as_ref(),
                _ => None,
            };
            if let Some(ident) = ident {
                self.modules[id].items.insert(ident.to_string());
            }
            match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let mut path = self.modules[id].path.clone();
                    path.push(name.clone());
                    let dir = format!("{}/{name}", self.modules[id].dir);
                    let krate = self.modules[id].krate.clone();
                    match &m.content {
                        Some((_, inner)) => {
                            let file = self.modules[id].file.clone();
                            let child = self.new_module(&krate, path, &file, dir, Some(id));
                            self.collect(files, parsed, child, inner);
                        }
                        None => {
                            let flat = format!("{dir}.rs");
                            let file = if files.contains_key(&flat) {
                                flat
                            } else {
                                format!("{dir}/mod.rs")
                            };
                            self.load(files, parsed, &krate, path, file, Some(id));
                        }
                    }
                }
                syn::Item::Use(u) => self.bring(id, u),
                // The `use`s in a function's body, an impl's: brought into the module.
                other => {
                    let mut uses = BodyUses(Vec::new());
                    uses.visit_item(other);
                    for u in uses.0 {
                        self.bring(id, u);
                    }
                }
            }
        }
    }

    fn bring(&mut self, id: usize, u: &syn::ItemUse) {
        for (alias, path, _) in leaves(u) {
            match alias {
                Some(alias) => {
                    self.modules[id].aliases.insert(alias, path);
                }
                None => self.modules[id].globs.push(path),
            }
        }
    }

    /// The name of module `id` when it is a member crate's door for the tests: its
    /// `driver` module (the kafka crate's) or its `testing` module (the store's).
    fn door(&self, id: usize) -> Option<&'static str> {
        let m = &self.modules[id];
        if !m.krate.starts_with("booking_expire_") {
            return None;
        }
        match m.path.as_slice() {
            [name] if name == "driver" => Some("driver"),
            [name] if name == "testing" => Some("testing"),
            _ => None,
        }
    }

    /// What `segments`, written in module `from`, names.
    fn resolve(&self, from: usize, segments: &[String]) -> Target {
        let file = |id: usize, door: Option<&'static str>, module: bool| Target::File {
            file: self.modules[id].file.clone(),
            krate: self.modules[id].krate.clone(),
            door,
            module,
        };
        match self.walk(from, segments, 0) {
            Walk::Module(id, door) => file(id, door, true),
            Walk::Item(id, door) => file(id, door, false),
            Walk::External(name) => Target::External(name),
        }
    }

    /// `segments` followed from module `from`, through modules and the names `use`s
    /// bring in, to a module or to the module that defines the item named.
    fn walk(&self, from: usize, segments: &[String], depth: usize) -> Walk {
        let Some((first, rest)) = segments.split_first() else {
            return Walk::Module(from, self.door(from));
        };
        if depth > 8 {
            return Walk::External(first.clone());
        }
        let at = match first.as_str() {
            "::" => match rest.split_first() {
                Some((name, rest)) => match self.roots.get(name) {
                    Some(root) => return self.walk(*root, rest, depth + 1),
                    None => return Walk::External(name.clone()),
                },
                None => return Walk::External(first.clone()),
            },
            "crate" => self.roots[&self.modules[from].krate],
            "self" => from,
            "super" => match self.modules[from].parent {
                Some(p) => p,
                None => return Walk::External(first.clone()),
            },
            name => match self.step(from, name, depth) {
                Some(Walk::Module(id, _)) => id,
                Some(other) => return other,
                None => match self.roots.get(name) {
                    Some(root) => *root,
                    None => return Walk::External(name.to_owned()),
                },
            },
        };
        let mut at = at;
        let mut door = self.door(at);
        for segment in rest {
            let next = match segment.as_str() {
                "self" => Some(Walk::Module(at, None)),
                "super" => self.modules[at].parent.map(|p| Walk::Module(p, None)),
                name => self.step(at, name, depth),
            };
            match next {
                Some(Walk::Module(id, through)) => {
                    at = id;
                    door = door.or(through).or(self.door(at));
                }
                Some(Walk::Item(id, through)) => return Walk::Item(id, door.or(through)),
                // An item a macro makes, or an outside crate's re-exported: `at`'s.
                Some(Walk::External(_)) | None => return Walk::Item(at, door),
            }
        }
        Walk::Module(at, door)
    }

    /// What `name` is in module `id`: a child module, an item it defines, what a `use`
    /// of it brings in by that name, else what one of its globs does.
    fn step(&self, id: usize, name: &str, depth: usize) -> Option<Walk> {
        if depth > 8 {
            return None;
        }
        let m = &self.modules[id];
        if let Some(child) = m.children.get(name) {
            return Some(Walk::Module(*child, self.door(*child)));
        }
        if m.items.contains(name) {
            return Some(Walk::Item(id, None));
        }
        if let Some(path) = m.aliases.get(name) {
            return Some(self.walk(id, path, depth + 1));
        }
        for glob in &m.globs {
            if let Walk::Module(g, _) = self.walk(id, glob, depth + 1)
                && g != id
                && let Some(found) = self.step(g, name, depth + 1)
            {
                return Some(found);
            }
        }
        None
    }
}

/// Where a path leads: a module, the module that defines the item it names (each with
/// the door for the tests it went through, if any), or outside the workspace.
enum Walk {
    Module(usize, Option<&'static str>),
    Item(usize, Option<&'static str>),
    External(String),
}

/// The `use` declarations in an item's bodies (not in its inline modules).
struct BodyUses<'ast>(Vec<&'ast syn::ItemUse>);

impl<'ast> Visit<'ast> for BodyUses<'ast> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.0.push(u);
    }
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}
}

/// Each name a `use` brings in: its alias (`None` for a glob), its path, its line.
fn leaves(u: &syn::ItemUse) -> Vec<(Option<String>, Vec<String>, usize)> {
    fn walk(
        tree: &syn::UseTree,
        prefix: &mut Vec<String>,
        out: &mut Vec<(Option<String>, Vec<String>, usize)>,
    ) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(&p.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => {
                out.push((prefix.last().cloned(), prefix.clone(), line(&n.ident)));
            }
            syn::UseTree::Name(n) => {
                let path = prefix.iter().cloned().chain([n.ident.to_string()]);
                out.push((Some(n.ident.to_string()), path.collect(), line(&n.ident)));
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                out.push((Some(r.rename.to_string()), path, line(&r.ident)));
            }
            syn::UseTree::Glob(g) => {
                out.push((None, prefix.clone(), g.star_token.span.start().line));
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    walk(tree, prefix, out);
                }
            }
        }
    }
    fn line(ident: &syn::Ident) -> usize {
        ident.span().start().line
    }
    let mut prefix = Vec::new();
    if u.leading_colon.is_some() {
        prefix.push("::".to_owned());
    }
    let mut out = Vec::new();
    walk(&u.tree, &mut prefix, &mut out);
    out
}

/// The paths of one file: (module written in, line, segments, whether a re-export).
struct Paths<'w> {
    w: &'w Workspace,
    module: usize,
    found: Vec<(usize, usize, Vec<String>, bool)>,
}

impl Paths<'_> {
    /// Each `a::b` chain in a macro's tokens (not after `.`, `:` or `$`).
    fn macro_tokens(&mut self, tokens: TokenStream) {
        for seq in source::sequences(tokens) {
            let mut i = 0;
            while i < seq.len() {
                let after = i > 0
                    && matches!(&seq[i - 1], TokenTree::Punct(p) if matches!(p.as_char(), '.' | ':' | '$'));
                let TokenTree::Ident(first) = &seq[i] else {
                    i += 1;
                    continue;
                };
                let mut segments = vec![first.to_string()];
                let mut j = i + 1;
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(next)),
                ) = (seq.get(j), seq.get(j + 1), seq.get(j + 2))
                    && a.as_char() == ':'
                    && a.spacing() == Spacing::Joint
                    && b.as_char() == ':'
                {
                    segments.push(next.to_string());
                    j += 3;
                }
                if !after && segments.len() > 1 {
                    let line = first.span().start().line;
                    self.found.push((self.module, line, segments, false));
                }
                i = j;
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if let Some((_, items)) = &m.content {
            let outer = self.module;
            self.module = self.w.modules[outer].children[&m.ident.to_string()];
            for item in items {
                self.visit_item(item);
            }
            self.module = outer;
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let reexport = !matches!(u.vis, syn::Visibility::Inherited);
        for (_, path, line) in leaves(u) {
            self.found.push((self.module, line, path, reexport));
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let mut segments: Vec<String> = Vec::new();
        if p.leading_colon.is_some() {
            segments.push("::".to_owned());
        }
        segments.extend(p.segments.iter().map(|s| s.ident.to_string()));
        let line = p.segments[0].ident.span().start().line;
        self.found.push((self.module, line, segments, false));
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.macro_tokens(m.tokens.clone());
    }

    // `pub(in path)` says where an item is seen, not what it uses; attributes
    // (`#[derive]`, `#[allow]`, docs) are no imports.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}
