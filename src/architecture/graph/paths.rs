//! The paths of one file, for the graph: the names each `use` brings in (its leaves),
//! the `use`s in function bodies, and every path of the code (types, expressions,
//! patterns, a macro's arguments) resolved from the module it is written in, by
//! the graph ([`Resolve`]): a leaf, it imports nothing of the graph.

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};

/// What resolves a path from a module (the graph): what it names and the member
/// crate whose `driver` module it goes through; and an inline module's id.
pub(super) trait Resolve {
    fn resolve(&self, from: usize, segments: &[String]) -> Option<(Res, Option<String>)>;
    /// The inline module `name` of module `id`.
    fn inline(&self, id: usize, name: &str) -> usize;
}

/// What a path names.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::architecture) enum Res {
    /// A module of the workspace.
    Module(usize),
    /// An item, by the file that defines it.
    Item(String),
    /// A name the workspace does not define: the crate it starts with.
    External(String),
}

/// A path and what it resolved to.
#[derive(Clone, Debug)]
pub(in crate::architecture) struct Named {
    pub(in crate::architecture) line: usize,
    /// The path as written.
    pub(in crate::architecture) text: String,
    pub(in crate::architecture) res: Res,
    /// The member crate (`store`) whose `driver` module the path goes through.
    pub(in crate::architecture) driver: Option<String>,
    /// How it is written: in the code, in a private `use`, a re-export, a glob.
    pub(in crate::architecture) how: How,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::architecture) enum How {
    Code,
    Use,
    Reexport,
    Glob,
}

/// The `use` declarations in an item's bodies (not in its inline modules).
pub(super) struct BodyUses<'ast>(pub(super) Vec<&'ast syn::ItemUse>);

impl<'ast> Visit<'ast> for BodyUses<'ast> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.0.push(u);
    }
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}
}

/// One name a `use` brings in: its alias (`None` for a glob), its path and line.
pub(super) struct Leaf {
    pub(super) alias: Option<String>,
    pub(super) path: Vec<String>,
    pub(super) line: usize,
}

pub(super) fn leaves(u: &syn::ItemUse) -> Vec<Leaf> {
    fn walk(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Leaf>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(&p.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => out.push(Leaf {
                alias: prefix.last().cloned(),
                path: prefix.clone(),
                line: n.ident.span().start().line,
            }),
            syn::UseTree::Name(n) => out.push(Leaf {
                alias: Some(n.ident.to_string()),
                path: prefix
                    .iter()
                    .cloned()
                    .chain([n.ident.to_string()])
                    .collect(),
                line: n.ident.span().start().line,
            }),
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                out.push(Leaf {
                    alias: Some(r.rename.to_string()),
                    path,
                    line: r.ident.span().start().line,
                });
            }
            syn::UseTree::Glob(g) => out.push(Leaf {
                alias: None,
                path: prefix.clone(),
                line: g.star_token.span.start().line,
            }),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    walk(tree, prefix, out);
                }
            }
        }
    }
    let mut prefix = Vec::new();
    if u.leading_colon.is_some() {
        prefix.push("::".to_owned());
    }
    let mut out = Vec::new();
    walk(&u.tree, &mut prefix, &mut out);
    out
}

/// The paths of one file, resolved from the module each is written in.
pub(super) struct Paths<'g> {
    pub(super) g: &'g dyn Resolve,
    pub(super) module: usize,
    pub(super) found: Vec<Named>,
}

impl Paths<'_> {
    fn name(&mut self, segments: Vec<String>, line: usize, how: How) {
        if let Some((res, driver)) = self.g.resolve(self.module, &segments) {
            self.found.push(Named {
                line,
                text: segments.join("::"),
                res,
                driver,
                how,
            });
        }
    }

    /// The paths in a macro's arguments: parsed as expressions when they are, else
    /// each `a::b` (or `f(`) in its tokens.
    fn macro_tokens(&mut self, tokens: &TokenStream) {
        let parser = Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
        if let Ok(exprs) = parser.parse2(tokens.clone()) {
            for expr in &exprs {
                self.visit_expr(expr);
            }
            return;
        }
        for seq in crate::source::sequences(tokens.clone()) {
            let mut i = 0;
            while i < seq.len() {
                let after_dot_or_path = i > 0
                    && matches!(&seq[i - 1], TokenTree::Punct(p) if matches!(p.as_char(), '.' | ':' | '$'));
                let TokenTree::Ident(first) = &seq[i] else {
                    i += 1;
                    continue;
                };
                if after_dot_or_path {
                    i += 1;
                    continue;
                }
                let line = first.span().start().line;
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
                let called = matches!(seq.get(j), Some(TokenTree::Group(g)) if g.delimiter() == proc_macro2::Delimiter::Parenthesis);
                if segments.len() > 1 || called {
                    self.name(segments, line, How::Code);
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
            self.module = self.g.inline(outer, &m.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.module = outer;
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let reexport = !matches!(u.vis, syn::Visibility::Inherited);
        for leaf in leaves(u) {
            let how = match (&leaf.alias, reexport) {
                (_, true) => How::Reexport,
                (None, false) => How::Glob,
                (Some(_), false) => How::Use,
            };
            self.name(leaf.path, leaf.line, how);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let mut segments: Vec<String> = Vec::new();
        if p.leading_colon.is_some() {
            segments.push("::".to_owned());
        }
        segments.extend(p.segments.iter().map(|s| s.ident.to_string()));
        let line = p
            .segments
            .first()
            .map_or(0, |s| s.ident.span().start().line);
        self.name(segments, line, How::Code);
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.macro_tokens(&m.tokens);
    }

    // `pub(in path)`, `pub(super)` name where an item is seen, not what it uses;
    // attributes (`#[derive]`, `#[allow]`, docs) are no imports.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}
