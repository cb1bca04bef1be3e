//! The workspace's layout held by test, for what neither the manifests nor privacy
//! hold: the rules between the application's rooms and on SQL, the domain's pure
//! manifest and no circle of imports between files or between modules in any crate
//! (`rules`, on the imports `modules` reads and the circles `circles` finds), a head
//! comment on every source file and the paths `docs/architecture.md` cites (`pages`).
//! `source` reads the workspace's own source, here and for the application's
//! log-vocabulary test.

#![forbid(unsafe_code)]

pub mod source;

/// The tokenizer `source` hands its tokens in, for the tests that read them.
pub use proc_macro2;

#[cfg(test)]
mod circles;
#[cfg(test)]
mod modules;
#[cfg(test)]
mod pages;
#[cfg(test)]
mod rules;
