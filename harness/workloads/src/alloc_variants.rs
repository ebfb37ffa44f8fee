//! `alloc_bench`'s configurations: each a name and the settings its child runs with, and what
//! the command line chose of them: the runs (this build's shim, the baseline's beside it, the
//! A/A control's copy) and the A/B comparisons reported beside the control.

/// One configuration: its name, its settings, and whether it loads the shim (the bare driver
/// does not).
pub struct Variant {
    pub name: &'static str,
    pub env: &'static [(&'static str, &'static str)],
    pub shim: bool,
}

pub const VARIANTS: &[Variant] = &[
    Variant {
        name: "bare",
        env: &[],
        shim: false,
    },
    Variant {
        name: "passthrough",
        env: &[("CUGUARD_POOL", "0"), ("CUGUARD_STACK_DEPTH", "0")],
        shim: true,
    },
    Variant {
        name: "passthrough+stacks",
        env: &[("CUGUARD_POOL", "0"), ("CUGUARD_STACK_DEPTH", "32")],
        shim: true,
    },
    Variant {
        name: "pool",
        env: &[("CUGUARD_POOL", "1"), ("CUGUARD_STACK_DEPTH", "0")],
        shim: true,
    },
    Variant {
        name: "pool-nocache",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "0"),
            ("CUGUARD_POOL_THREAD_CACHE", "0"),
        ],
        shim: true,
    },
    Variant {
        name: "pool-fence",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "0"),
            ("CUGUARD_POOL_STREAM_REUSE", "0"),
        ],
        shim: true,
    },
    Variant {
        name: "pool+stacks",
        env: &[("CUGUARD_POOL", "1"), ("CUGUARD_STACK_DEPTH", "32")],
        shim: true,
    },
    Variant {
        name: "pool-nohistory",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "0"),
            ("CUGUARD_HISTORY", "0"),
        ],
        shim: true,
    },
    Variant {
        name: "pool+stacks-nohistory",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "32"),
            ("CUGUARD_HISTORY", "0"),
        ],
        shim: true,
    },
    Variant {
        name: "pool-untracked",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "0"),
            ("CUGUARD_TEST_NO_TRACKING", "1"),
        ],
        shim: true,
    },
];

/// One configuration's run: its name, its variant, and the shim it preloads (none for the bare
/// driver).
pub type Run<'a> = (String, &'a Variant, Option<String>);

/// What the command line chose to run.
pub struct Choice {
    pub shim: String,
    pub baseline: Option<String>,
    pub only: Option<Vec<String>>,
    pub control: Option<String>,
}

/// The A/B comparisons reported beside the control, (A, B) for B against A, where both run:
/// tracking against the untracked pool, the stacks, the history on against off, the thread
/// cache, the fence rule, the shim against the bare driver.
const PAIRS: &[(&str, &str)] = &[
    ("pool-untracked", "pool"),
    ("pool-untracked", "pool+stacks"),
    ("pool-untracked", "pool-nohistory"),
    ("pool-untracked", "pool+stacks-nohistory"),
    ("pool", "pool+stacks"),
    ("pool-nohistory", "pool"),
    ("pool+stacks-nohistory", "pool+stacks"),
    ("pool", "pool-nocache"),
    ("pool", "pool-fence"),
    ("bare", "passthrough"),
    ("bare", "passthrough+stacks"),
    ("bare", "pool"),
];

impl Choice {
    /// Every run: (name, variant, shim to preload). A baseline run follows each shim run, and
    /// the control's copy follows the control. An unknown configuration, or a control not
    /// among those run, is an error that says so.
    pub fn runs(&self) -> Result<Vec<Run<'static>>, String> {
        for name in self.only.iter().flatten().chain(&self.control) {
            if !VARIANTS.iter().any(|v| v.name == name) {
                let known: Vec<&str> = VARIANTS.iter().map(|v| v.name).collect();
                return Err(format!(
                    "no configuration is named {name} (known: {})",
                    known.join(", ")
                ));
            }
        }
        let mut runs: Vec<Run<'static>> = Vec::new();
        for v in VARIANTS {
            if self
                .only
                .as_ref()
                .is_some_and(|o| !o.iter().any(|x| x == v.name))
            {
                if self.control.as_deref() == Some(v.name) {
                    return Err(format!("--control {}: not among --variants", v.name));
                }
                continue;
            }
            let shim = v.shim.then(|| self.shim.clone());
            runs.push((v.name.to_string(), v, shim.clone()));
            if self.control.as_deref() == Some(v.name) {
                runs.push((format!("{}@control", v.name), v, shim));
            }
            if let (true, Some(b)) = (v.shim, &self.baseline) {
                runs.push((format!("{}@baseline", v.name), v, Some(b.clone())));
            }
        }
        Ok(runs)
    }

    /// The (A, B) comparisons among `names`: [`PAIRS`], then every configuration against its
    /// baseline.
    pub fn pairs(&self, names: &[String]) -> Vec<(String, String)> {
        let has = |n: &str| names.iter().any(|x| x == n);
        let mut out: Vec<(String, String)> = PAIRS
            .iter()
            .filter(|(a, b)| has(a) && has(b))
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        for n in names {
            if let Some(v) = n.strip_suffix("@baseline") {
                out.push((n.clone(), v.to_string()));
            }
        }
        out
    }
}
