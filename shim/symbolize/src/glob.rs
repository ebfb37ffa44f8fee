//! Wildcard matching (`*`, `?`, `[abc]`, `[a-z]`, `[!x]`): the one matcher of the workspace, used
//! by the site and owner rules ([`crate::rules`]) and by the `cuguard` command (path globs,
//! suppressions).
//!
//! `*` matches any run of characters, including `/`; `cuguard`'s path expansion applies patterns
//! one path component at a time, so there `*` stays inside a component.

/// Whether `text` matches `pattern` in whole.
///
/// ```
/// assert!(!cuguard_symbolize::glob::matches("cuMemFree*", "cuMemAlloc_v2"));
/// assert!(cuguard_symbolize::glob::matches("cuMem*Alloc*", "cuMemAllocAsync"));
/// assert!(cuguard_symbolize::glob::matches("report.[0-9]?.json", "report.42.json"));
/// ```
pub fn matches(pattern: &str, text: &str) -> bool {
    Glob::new(pattern).matches(text)
}

/// A pattern prepared once for many matches (same language as [`matches()`]).
///
/// ```
/// let g = cuguard_symbolize::glob::Glob::new("rmm::*mr::*");
/// assert!(g.matches("rmm::_RMM_26_10::mr::cuda_memory_resource::allocate"));
/// assert_eq!(g.pattern(), "rmm::*mr::*");
/// ```
#[derive(Clone, Debug)]
pub struct Glob {
    pattern: String,
    chars: Vec<char>,
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        Glob {
            pattern: pattern.to_owned(),
            chars: pattern.chars().collect(),
        }
    }

    /// The pattern, as given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether `text` matches in whole.
    pub fn matches(&self, text: &str) -> bool {
        if text.is_ascii() {
            let t = text.as_bytes();
            run(&self.chars, t.len(), |i| char::from(t[i]))
        } else {
            let t: Vec<char> = text.chars().collect();
            run(&self.chars, t.len(), |i| t[i])
        }
    }
}

/// The matcher over the pattern's characters and a text of `len` characters read by `at`.
fn run(p: &[char], len: usize, at: impl Fn(usize) -> char) -> bool {
    // Classic backtracking over the last `*`: linear for patterns with one star, and at worst
    // O(|p|·|t|), never exponential.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < len {
        let c = at(ti);
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ti));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class(p, pi, c) {
                        if matched {
                            pi = next;
                            ti += 1;
                            continue;
                        }
                    } else if c == '[' {
                        // An unclosed `[` is a literal.
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
                pc if pc == c => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether `pattern` has any wildcard character.
pub fn is_pattern(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// Matches `c` against the class starting at `p[start] == '['`; returns whether it matched and
/// the index after the class, or `None` when the class is not closed.
fn class(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = matches!(p.get(i), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::matches;
    use super::matches as glob;

    #[test]
    fn globs() {
        assert!(glob("lib*.so*", "libcudart.so.13"));
        assert!(glob("*", ""));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("cuda[A-Z]*", "cudaMallocAsync"));
        assert!(!glob("cuda[A-Z]*", "cudart_init"));
        assert!(glob(
            "*/cupy/*",
            "/venv/lib/python3.11/site-packages/cupy/cuda/memory.so"
        ));
        assert!(!glob("libcuda.so*", "libcudart.so.13"));
        assert!(glob("*a*b*c", "xxaxxbxxc"));
        assert!(!glob("*a*b*c", "xxaxxcxxb"));
    }

    #[test]
    fn stars_and_questions() {
        assert!(matches("*", ""));
        assert!(matches("*", "anything/at/all"));
        assert!(matches("a*b*c", "aXXbYYc"));
        assert!(!matches("a*b*c", "aXXbYY"));
        assert!(matches("*.json", "cuguard.train.1.json"));
        assert!(!matches("*.json", "cuguard.json.tmp"));
        assert!(matches("cu?emAlloc", "cuMemAlloc"));
        assert!(!matches("?", ""));
        assert!(matches("**a", "a"));
    }

    #[test]
    fn classes() {
        assert!(matches("[abc]x", "bx"));
        assert!(!matches("[abc]x", "dx"));
        assert!(matches("[!abc]x", "dx"));
        assert!(matches("v[0-9]", "v7"));
        assert!(matches("[]]", "]"));
        assert!(matches("a[b", "a[b"), "an unclosed class is literal");
    }

    #[test]
    fn non_ascii_text_matches_by_character() {
        assert!(matches("caf?", "café"));
        assert!(matches("*é*", "résumé"));
        assert!(!matches("caf??", "café"));
    }

    #[test]
    fn no_blow_up_on_many_stars() {
        let p = "*a*a*a*a*a*a*a*a*a*a*a*a*b";
        let t = "a".repeat(2000);
        assert!(!matches(p, &t));
    }
}
