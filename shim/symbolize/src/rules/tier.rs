//! The tiers a site rule puts frames in ([`Tier`]), below the built-in rules and the rule set
//! that both name them.

/// Where a site rule puts a frame (see [`super`]'s doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Never a site.
    NeverSite,
    /// Not the user's code; a site only when nothing better is on the stack.
    Framework,
    /// Names the operation that asked; the site when no user frame is on the stack.
    Operation,
}

impl Tier {
    /// `never_site`, `framework` or `operation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::NeverSite => "never_site",
            Tier::Framework => "framework",
            Tier::Operation => "operation",
        }
    }
}
