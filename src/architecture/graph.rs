//! What each file of the workspace imports, read with syn: its modules, the names
//! defined and brought in (`use`) in each, and every path of its code resolved to the
//! item it names, through re-exports, to the file that defines the item.
//!
//! The crates are the application's library (`src/`), its binary (`src/main.rs`) and
//! each member crate (`crates/NAME/src/`, `booking_expire_NAME`); a file's module path
//! is its path (`src/relay/settle.rs` is `relay::settle`, a `mod.rs` its folder's),
//! and an inline `mod x { … }` is a module of its file. A path resolves as rustc's
//! 2018 paths do: from `crate`, `self`, `super` (any number), a crate's name, or a name
//! in the module's scope (an item, a child module, a `use`, a glob's module's names);
//! a name the workspace does not define is an external crate's (its first segment is
//! kept, for the rules that name a crate). Names are looked up in one namespace: a
//! path's last segment prefers an item to a module of the same name, its others the
//! module.
//!
//! A file F imports file G (an edge F → G) when a path of F's code (an expression, a
//! type, a pattern, a trait bound, a macro's arguments), or a `use` that is not `pub`,
//! resolves to an item that G defines. A `pub use` (any `pub(…)` too) is a re-export:
//! it is no edge by itself, and a file that names the item through it imports the
//! file that defines it; the re-exporting file imports it only where its own code uses
//! it. A `use` of a module, a module root's `mod child;` and a path that ends at a
//! module are no edges: the items named through them are. A glob (`use super::*`) is
//! no edge by itself either: each name the file's code takes from it is resolved
//! through it to the file that defines it (a glob of an enum's variants is an edge to
//! the enum's file). Not seen: a `pub use` of a trait whose methods alone its file
//! calls (no path names it), and paths a macro builds from its own fragments.

use std::collections::{BTreeMap, BTreeSet};

use syn::visit::Visit;

use crate::source::CRATES;

mod paths;

use paths::{BodyUses, Paths, Resolve, leaves};
pub(super) use paths::{How, Named, Res};

/// The application's library, by the name its binary and tests use.
const LIBRARY: &str = "booking_expire";
/// The binary's crate (`src/main.rs`).
const BINARY: &str = "main";

/// A module: its crate, its path in it, the file it is written in (none for a
/// folder whose root file is not among the files read).
struct Module {
    krate: String,
    path: Vec<String>,
    file: Option<String>,
    /// The items defined here (true) and the child modules, by name.
    items: BTreeMap<String, Vec<Def>>,
    /// What each `use` brings in: the name → the paths it stands for.
    named: BTreeMap<String, Vec<Vec<String>>>,
    /// The paths of its globs (`use x::*`).
    globs: Vec<Vec<String>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Def {
    Item,
    Module(usize),
}

/// The workspace's modules and what each file names.
pub(super) struct Graph {
    modules: Vec<Module>,
    by_path: BTreeMap<(String, Vec<String>), usize>,
    /// The paths each file names, by the file's path from the workspace's root.
    pub named: BTreeMap<String, Vec<Named>>,
}

/// The crate and the module path of a file, from its path (`src/relay/mod.rs` is
/// (`booking_expire`, `["relay"]`), `crates/kafka/src/lib.rs` (`booking_expire_kafka`,
/// `[]`)).
fn module_of(file: &str) -> (String, Vec<String>) {
    let (krate, rest) = if file == "src/main.rs" {
        (BINARY.to_owned(), "")
    } else if let Some(rest) = file.strip_prefix("src/") {
        (LIBRARY.to_owned(), rest)
    } else {
        let member = file
            .strip_prefix(CRATES)
            .and_then(|p| p.strip_prefix('/'))
            .and_then(|p| p.split_once("/src/"))
            .unwrap_or_else(|| panic!("{file}: neither in src/ nor in a member crate"));
        (
            format!("{LIBRARY}_{}", member.0.replace('-', "_")),
            member.1,
        )
    };
    let mut path: Vec<String> = rest
        .trim_end_matches(".rs")
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    if path.last().is_some_and(|p| p == "mod") || path == ["lib"] {
        path.pop();
    }
    (krate, path)
}

/// The module of every file of `files` (path from the root → text), what is defined
/// and brought in where, and each file's paths resolved.
pub(super) fn graph(files: &BTreeMap<String, String>) -> Graph {
    let mut g = Graph {
        modules: Vec::new(),
        by_path: BTreeMap::new(),
        named: BTreeMap::new(),
    };
    let parsed: Vec<(&String, syn::File)> = files
        .iter()
        .map(|(path, text)| {
            let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{path}: {e}"));
            (path, file)
        })
        .collect();
    for (path, file) in &parsed {
        let (krate, module) = module_of(path);
        let id = g.module(&krate, &module);
        g.modules[id].file = Some((*path).clone());
        g.collect(id, &file.items, path);
    }
    for (path, file) in &parsed {
        let (krate, module) = module_of(path);
        let mut visitor = Paths {
            g: &g,
            module: g.by_path[&(krate, module)],
            found: Vec::new(),
        };
        visitor.visit_file(file);
        let found = visitor.found;
        g.named.insert((*path).clone(), found);
    }
    g
}

impl Graph {
    /// The module at `path` of `krate`, made (with its parents) if new.
    fn module(&mut self, krate: &str, path: &[String]) -> usize {
        if let Some(id) = self.by_path.get(&(krate.to_owned(), path.to_vec())) {
            return *id;
        }
        let id = self.modules.len();
        self.modules.push(Module {
            krate: krate.to_owned(),
            path: path.to_vec(),
            file: None,
            items: BTreeMap::new(),
            named: BTreeMap::new(),
            globs: Vec::new(),
        });
        self.by_path.insert((krate.to_owned(), path.to_vec()), id);
        if let Some((name, parent)) = path.split_last() {
            let parent = self.module(krate, parent);
            self.modules[parent]
                .items
                .entry(name.clone())
                .or_default()
                .push(Def::Module(id));
        }
        id
    }

    /// The names `items` define and bring into module `id` (written in `file`).
    fn collect(&mut self, id: usize, items: &[syn::Item], file: &str) {
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
                self.modules[id]
                    .items
                    .entry(ident.to_string())
                    .or_default()
                    .push(Def::Item);
            }
            match item {
                syn::Item::Use(u) => self.bring(id, u),
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        let mut path = self.modules[id].path.clone();
                        path.push(m.ident.to_string());
                        let krate = self.modules[id].krate.clone();
                        let child = self.module(&krate, &path);
                        self.modules[child].file = Some(file.to_owned());
                        self.collect(child, inner, file);
                    }
                }
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
        for leaf in leaves(u) {
            let module = &mut self.modules[id];
            match leaf.alias {
                None => module.globs.push(leaf.path),
                Some(alias) => module.named.entry(alias).or_default().push(leaf.path),
            }
        }
    }

    /// The crate root of module `id`'s crate.
    fn root_of(&self, id: usize) -> Option<usize> {
        let krate = self.modules[id].krate.clone();
        self.by_path.get(&(krate, Vec::new())).copied()
    }

    fn parent_of(&self, id: usize) -> Option<usize> {
        let m = &self.modules[id];
        let (_, parent) = m.path.split_last()?;
        self.by_path
            .get(&(m.krate.clone(), parent.to_vec()))
            .copied()
    }

    /// The room of module `id`: its member crate's, else its top-level module's.
    pub(super) fn room_of_module(&self, id: usize) -> String {
        let m = &self.modules[id];
        match m
            .krate
            .strip_prefix(LIBRARY)
            .and_then(|k| k.strip_prefix('_'))
        {
            Some(member) => member.to_owned(),
            None if m.krate == BINARY => BINARY.to_owned(),
            None => m.path.first().cloned().unwrap_or_else(|| "lib".to_owned()),
        }
    }

    fn resolve_guarded(
        &self,
        from: usize,
        segments: &[String],
        guard: &mut BTreeSet<(usize, String)>,
    ) -> Option<(Res, Option<String>)> {
        let (first, rest) = segments.split_first()?;
        let crate_root = |name: &str| self.by_path.get(&(name.to_owned(), Vec::new())).copied();
        let mut at = match first.as_str() {
            "::" => return Some((Res::External(rest.first()?.clone()), None)),
            "crate" => Res::Module(self.root_of(from)?),
            "self" => Res::Module(from),
            "super" => Res::Module(self.parent_of(from)?),
            name if name.starts_with(LIBRARY) && crate_root(name).is_some() => {
                Res::Module(crate_root(name)?)
            }
            name => match self.lookup(from, name, rest.is_empty(), guard) {
                Some(found) => found,
                None => return Some((Res::External(name.to_owned()), None)),
            },
        };
        let mut driver = None;
        for (i, segment) in rest.iter().enumerate() {
            let Res::Module(id) = at else { break };
            at = match segment.as_str() {
                "super" => Res::Module(self.parent_of(id)?),
                "self" => Res::Module(id),
                // A name its module's code does not define as written (an item a macro
                // makes) is taken to be defined in the module's file.
                name => match self.lookup(id, name, i + 1 == rest.len(), guard) {
                    Some(found) => found,
                    None => match &self.modules[id].file {
                        Some(file) => Res::Item(file.clone()),
                        None => Res::Module(id),
                    },
                },
            };
            if let Res::Module(id) = at {
                let m = &self.modules[id];
                if m.path == ["driver"] && m.krate != LIBRARY && m.krate != BINARY {
                    driver = Some(m.krate[LIBRARY.len() + 1..].to_owned());
                }
            }
        }
        Some((at, driver))
    }

    /// What `name` is in module `id`: an item or child module of it, else what one of
    /// its `use`s brings in by that name, else what one of its globs does.
    fn lookup(
        &self,
        id: usize,
        name: &str,
        last: bool,
        guard: &mut BTreeSet<(usize, String)>,
    ) -> Option<Res> {
        if !guard.insert((id, name.to_owned())) {
            return None;
        }
        let found = self.lookup_here(id, name, last, guard);
        guard.remove(&(id, name.to_owned()));
        found
    }

    fn lookup_here(
        &self,
        id: usize,
        name: &str,
        last: bool,
        guard: &mut BTreeSet<(usize, String)>,
    ) -> Option<Res> {
        let m = &self.modules[id];
        if let Some(defs) = m.items.get(name) {
            let item = defs.contains(&Def::Item);
            let module = defs.iter().find_map(|d| match d {
                Def::Module(c) => Some(*c),
                Def::Item => None,
            });
            match (item, module) {
                (true, Some(c)) if !last => return Some(Res::Module(c)),
                (true, _) => return Some(Res::Item(m.file.clone().unwrap_or_default())),
                (false, Some(c)) => return Some(Res::Module(c)),
                (false, None) => {}
            }
        }
        for path in m.named.get(name).into_iter().flatten() {
            if let Some((res, _)) = self.resolve_guarded(id, path, guard) {
                return Some(res);
            }
        }
        for glob in &m.globs {
            if let Some((Res::Module(g), _)) = self.resolve_guarded(id, glob, guard)
                && let Some(res) = self.lookup(g, name, last, guard)
            {
                return Some(res);
            }
        }
        None
    }
}

impl Resolve for Graph {
    fn resolve(&self, from: usize, segments: &[String]) -> Option<(Res, Option<String>)> {
        self.resolve_guarded(from, segments, &mut BTreeSet::new())
    }

    fn inline(&self, id: usize, name: &str) -> usize {
        let m = &self.modules[id];
        let path: Vec<String> = m.path.iter().cloned().chain([name.to_owned()]).collect();
        self.by_path[&(m.krate.clone(), path)]
    }
}

impl Graph {
    /// The file → file edges: each with the first place (line, path) it is written.
    pub(super) fn edges(&self) -> BTreeMap<String, BTreeMap<String, (usize, String)>> {
        let mut edges: BTreeMap<String, BTreeMap<String, (usize, String)>> = BTreeMap::new();
        for (file, named) in &self.named {
            for n in named {
                let Res::Item(to) = &n.res else { continue };
                if to.is_empty() || to == file || n.how == How::Reexport {
                    continue;
                }
                let place = (n.line, n.text.clone());
                let entry = edges.entry(file.clone()).or_default();
                let first = entry.entry(to.clone()).or_insert_with(|| place.clone());
                if place < *first {
                    *first = place;
                }
            }
        }
        edges
    }
}

#[cfg(test)]
mod tests;
