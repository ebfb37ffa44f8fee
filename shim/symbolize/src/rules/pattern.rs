//! The pattern language of the site and owner rules: parsing a spec and matching it against a
//! frame.
//!
//! A spec is one term or several joined by `&` (all must hold); a term is `FIELD:GLOB`, or
//! `!FIELD:GLOB` for its negation:
//!
//! | field | matched against |
//! |---|---|
//! | `module` | the module's path; a glob without `/` against its base name. A Python frame (module `""`) never matches. |
//! | `function` | the demangled name, and its [`qualified_path`] (`void* ns::Foo<int>::bar(long)` → `ns::Foo::bar`) |
//! | `file` | the source file; a glob without `/` against its base name |
//! | `memory` | the allocation's memory kind (`device`, `pitched`, `managed`, `async`, `vmm`, `host_pinned`); never matches when none is given (site rules) |
//!
//! Globs are [`crate::glob`]'s (`*`, `?`, `[…]`). Whitespace around terms and fields is ignored.
//! A `&` or a `,` cannot be part of a glob.

use crate::glob::Glob;
use crate::site_frame::{SiteFrame, qualified_path};

/// A frame with the facts rules look at, computed once.
pub(crate) struct Facts<'a> {
    frame: &'a SiteFrame<'a>,
    /// The function's qualified path, when it differs from its name.
    qualified: Option<String>,
}

impl<'a> Facts<'a> {
    pub(crate) fn new(frame: &'a SiteFrame<'a>) -> Facts<'a> {
        let qualified = frame
            .function
            .map(qualified_path)
            .filter(|q| Some(q.as_str()) != frame.function);
        Facts { frame, qualified }
    }

    /// Neither module, function nor file is known.
    pub(crate) fn unknown(&self) -> bool {
        let f = self.frame;
        f.module.is_empty() && f.function.is_none() && f.file.is_none()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Module,
    Function,
    File,
    Memory,
}

impl Field {
    fn parse(s: &str) -> Option<Field> {
        Some(match s {
            "module" => Field::Module,
            "function" => Field::Function,
            "file" => Field::File,
            "memory" => Field::Memory,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
struct Term {
    negated: bool,
    field: Field,
    glob: Glob,
    /// Whether the glob has a `/` (paths are then matched whole).
    whole_path: bool,
}

impl Term {
    fn matches(&self, f: &Facts<'_>, memory: Option<&str>) -> bool {
        let frame = f.frame;
        let hit = match self.field {
            Field::Module => !frame.module.is_empty() && self.path(frame.module),
            Field::File => frame.file.is_some_and(|file| self.path(file)),
            Field::Function => frame.function.is_some_and(|name| {
                self.glob.matches(name)
                    || f.qualified.as_deref().is_some_and(|q| self.glob.matches(q))
            }),
            Field::Memory => memory.is_some_and(|m| self.glob.matches(m)),
        };
        hit != self.negated
    }

    fn path(&self, path: &str) -> bool {
        if self.whole_path {
            self.glob.matches(path)
        } else {
            self.glob.matches(path.rsplit('/').next().unwrap_or(path))
        }
    }
}

/// A parsed spec (see the module doc).
#[derive(Clone, Debug)]
pub struct Pattern {
    spec: String,
    terms: Vec<Term>,
}

/// Why a spec is not a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatternError {
    /// The spec, as given.
    pub spec: String,
    /// What is wrong with it.
    pub reason: String,
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad pattern {:?}: {}", self.spec, self.reason)
    }
}

impl std::error::Error for PatternError {}

const EXPECTED: &str = "expected FIELD:GLOB, or several joined by &, each maybe negated by ! \
     (FIELD: module, function, file or memory)";

impl Pattern {
    /// Parses `FIELD:GLOB[&[!]FIELD:GLOB…]` (see the module doc). `memory` terms are refused
    /// unless `memory_allowed`.
    pub fn parse(spec: &str, memory_allowed: bool) -> Result<Pattern, PatternError> {
        let err = |reason: String| PatternError {
            spec: spec.to_owned(),
            reason,
        };
        let mut terms = Vec::new();
        for term in spec.split('&') {
            let term = term.trim();
            let (negated, term) = match term.strip_prefix('!') {
                Some(rest) => (true, rest.trim_start()),
                None => (false, term),
            };
            let (field, glob) = term.split_once(':').ok_or_else(|| err(EXPECTED.into()))?;
            let field = Field::parse(field.trim())
                .ok_or_else(|| err(format!("unknown field {:?}; {EXPECTED}", field.trim())))?;
            if field == Field::Memory && !memory_allowed {
                return Err(err("a memory condition has no meaning here".into()));
            }
            let glob = glob.trim();
            if glob.is_empty() {
                return Err(err(format!("empty glob; {EXPECTED}")));
            }
            terms.push(Term {
                negated,
                field,
                whole_path: glob.contains('/'),
                glob: Glob::new(glob),
            });
        }
        Ok(Pattern {
            spec: spec.trim().to_owned(),
            terms,
        })
    }

    /// A pattern of one `FIELD:GLOB` term, the glob taken as it is (`&` included): the form
    /// [`crate::site::Plumbing::add`] has always accepted.
    pub(crate) fn single(spec: &str, field: Field, glob: &str) -> Pattern {
        Pattern {
            spec: spec.to_owned(),
            terms: vec![Term {
                negated: false,
                field,
                whole_path: glob.contains('/'),
                glob: Glob::new(glob),
            }],
        }
    }

    /// The spec, as given (trimmed).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Whether the frame matches; `memory` is the allocation's memory kind, if known.
    pub fn matches(&self, frame: &SiteFrame<'_>, memory: Option<&str>) -> bool {
        self.matches_facts(&Facts::new(frame), memory)
    }

    pub(crate) fn matches_facts(&self, f: &Facts<'_>, memory: Option<&str>) -> bool {
        self.terms.iter().all(|t| t.matches(f, memory))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame<'a>(
        module: &'a str,
        function: Option<&'a str>,
        file: Option<&'a str>,
    ) -> SiteFrame<'a> {
        SiteFrame {
            module,
            function,
            file,
            ..Default::default()
        }
    }

    #[test]
    fn fields_and_paths() {
        let f = frame(
            "/venv/torch/lib/libc10_cuda.so",
            Some(
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block(AllocParams&, bool)",
            ),
            Some("/src/c10/cuda/CUDACachingAllocator.cpp"),
        );
        let m = |spec: &str| Pattern::parse(spec, true).unwrap().matches(&f, None);
        assert!(m("module:libc10*.so*"));
        assert!(m("module:*/torch/lib/*"));
        assert!(!m("module:torch"));
        assert!(m(
            "function:c10::cuda::CUDACachingAllocator::*DeviceCachingAllocator::alloc_block"
        ));
        assert!(m("function:*alloc_block(*"));
        assert!(m("file:CUDACachingAllocator.cpp"));
        assert!(m("file:*/c10/cuda/*"));
        assert!(!m("memory:*"), "no memory kind given");
        assert!(m("!memory:device"));
        let py = frame("", Some("full"), Some("/venv/cupy/_creation/basic.py"));
        assert!(
            !Pattern::parse("module:*", false)
                .unwrap()
                .matches(&py, None)
        );
        assert!(
            Pattern::parse("!module:*", false)
                .unwrap()
                .matches(&py, None)
        );
    }

    #[test]
    fn conjunctions_negations_and_memory() {
        let f = frame("/site/librmm/lib64/librmm.so", None, None);
        let p = Pattern::parse(" module:librmm*.so* & memory:host_pinned ", true).unwrap();
        assert_eq!(p.spec(), "module:librmm*.so* & memory:host_pinned");
        assert!(p.matches(&f, Some("host_pinned")));
        assert!(!p.matches(&f, Some("device")));
        assert!(!p.matches(&f, None));
        let q = Pattern::parse("file:*/lib/python3*/* & !file:*-packages/*", false).unwrap();
        let stdlib = frame(
            "",
            Some("__enter__"),
            Some("/usr/lib/python3.12/contextlib.py"),
        );
        let site = frame(
            "",
            Some("full"),
            Some("/v/lib/python3.12/site-packages/cupy/x.py"),
        );
        assert!(q.matches(&stdlib, None));
        assert!(!q.matches(&site, None));
    }

    #[test]
    fn bad_specs() {
        for (spec, memory) in [
            ("nofield", true),
            ("symbol:x", true),
            ("module:", true),
            ("module:a&", true),
            ("memory:device", false),
            ("&function:x", true),
        ] {
            let e = Pattern::parse(spec, memory).unwrap_err();
            assert_eq!(e.spec, spec);
            assert!(e.to_string().starts_with("bad pattern"), "{e}");
        }
    }
}
