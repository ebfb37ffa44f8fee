//! The SARIF 2.1.0 log as both `check --format sarif` ([`super::sarif`]) and `diff --format
//! sarif` ([`crate::diff::sarif`]) write it: the tool (`cuguard`, its rules, no
//! `informationUri` without a real web address), and each finding as a result placed in the
//! user's source (under `--source-root`, see [`super::places`]) with a fingerprint that is the
//! same for the same code on every run. Each command says which findings it has and how its rules
//! read; everything else about the log is here, once.

use std::path::Path;

use cuguard_format::escaped;
use serde_json::{Value, json};

use super::places::{Located, Place, stable_hash};

/// A kind of finding: a SARIF rule.
pub struct Rule {
    /// The finding: `leak`, `growth`, an event kind, …; the SARIF `ruleId` is `cuguard/` and
    /// this.
    pub id: &'static str,
    /// `name`, PascalCase.
    pub name: &'static str,
    /// `shortDescription`.
    pub short: &'static str,
    /// `fullDescription`.
    pub full: &'static str,
    /// How to fix it, in Markdown on one line; the rule's `help` is this and what the command
    /// says about accepting it instead.
    pub fix: &'static str,
}

/// One finding before it is written: a result of the log, a workflow command.
pub(crate) struct Finding<'p> {
    /// The rule's id without `cuguard/`.
    pub rule: String,
    /// `error`, `warning` or `note`.
    pub level: &'static str,
    /// For people (escaped when written).
    pub message: String,
    /// The site's key: its fingerprint when its place has none, its function when it has no
    /// place.
    pub site: String,
    /// Where the site is in the source, when known.
    pub place: Option<&'p Place>,
    /// The suppression rule's text, for a suppressed finding.
    pub suppressed: Option<String>,
}

/// The SARIF `ruleId` of finding `kind`: `cuguard/leak` (an id that differs from the rule's
/// name, as SARIF wants).
pub(crate) fn rule_id(kind: &str) -> String {
    format!("cuguard/{kind}")
}

/// `rule` as `tool.driver.rules` lists it, its `help` the Markdown `help`, its results' default
/// level `level`.
pub(crate) fn describe(rule: &Rule, help: &str, level: &str) -> Value {
    json!({
        "id": rule_id(rule.id),
        "name": rule.name,
        "shortDescription": {"text": rule.short},
        "fullDescription": {"text": rule.full},
        "help": help_property(help),
        "defaultConfiguration": {"level": level},
    })
}

/// A rule's `help` property: the Markdown, and as text without its backquotes.
pub(crate) fn help_property(markdown: &str) -> Value {
    json!({"text": markdown.replace('`', ""), "markdown": markdown})
}

/// Where people learn about cuguard (`tool.driver.informationUri`): the package's repository
/// when it is a real web address, else none. The property is optional in SARIF 2.1.0, and cuguard
/// has no public site to name: a placeholder would send people nowhere.
fn information_uri() -> Option<&'static str> {
    option_env!("CARGO_PKG_REPOSITORY").filter(|uri| is_web_address(uri))
}

/// Whether `uri` is an `https://` address of a host that can exist: not a name reserved for
/// documentation and tests (RFC 2606, RFC 6761: `.invalid`, `.test`, `.example`, `.localhost`,
/// `example.com`, …).
fn is_web_address(uri: &str) -> bool {
    let Some(rest) = uri.strip_prefix("https://") else {
        return false;
    };
    let host = rest.split(['/', ':', '?', '#']).next().unwrap_or_default();
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let reserved = ["invalid", "test", "example", "localhost"]
        .iter()
        .any(|tld| host == *tld || host.ends_with(&format!(".{tld}")))
        || ["example.com", "example.net", "example.org"]
            .iter()
            .any(|d| host == *d || host.ends_with(&format!(".{d}")));
    host.contains('.') && !reserved
}

/// `%XX`-escapes what may not stand in a URI path (RFC 3986: all but unreserved and `/`).
fn uri_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(b as char)
            }
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The log: one run of the tool with `rules` (each its id without `cuguard/` and its
/// description, see [`describe`]), a result per finding (a finding of a rule not among them
/// gets the rule `unknown` describes, after them), its files relative to `root`, and
/// `properties` as `run.properties.cuguard`.
pub(crate) fn log(
    rules: Vec<(String, Value)>,
    findings: &[Finding<'_>],
    root: &Path,
    unknown: impl Fn(&str) -> Value,
    properties: Value,
) -> Value {
    let (mut ids, mut rules): (Vec<String>, Vec<Value>) = rules.into_iter().unzip();
    let mut results = Vec::with_capacity(findings.len());
    for f in findings {
        let index = match ids.iter().position(|id| *id == f.rule) {
            Some(i) => i,
            None => {
                rules.push(unknown(&f.rule));
                ids.push(f.rule.clone());
                ids.len() - 1
            }
        };
        results.push(result(f, index, root));
    }
    let mut root_uri = format!("file://{}", uri_path(&root.to_string_lossy()));
    if !root_uri.ends_with('/') {
        root_uri.push('/');
    }
    let mut driver = json!({
        "name": "cuguard",
        "version": env!("CARGO_PKG_VERSION"),
        "rules": rules,
    });
    if let Some(uri) = information_uri() {
        driver["informationUri"] = json!(uri);
    }
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": driver},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": root_uri}},
            "results": results,
            "properties": {"cuguard": properties},
        }],
    })
}

/// One finding as a result of rule number `index`: its message, where it is (physical and
/// logical), its fingerprint, the helper it went through and the rule that suppressed it.
fn result(f: &Finding<'_>, index: usize, root: &Path) -> Value {
    let location = location(f, root);
    let key = f
        .place
        .and_then(|p| p.fingerprint.as_deref())
        .unwrap_or(&f.site);
    let mut result = json!({
        "ruleId": rule_id(&escaped(&f.rule)),
        "ruleIndex": index,
        "level": f.level,
        "message": {"text": escaped(&f.message)},
        "partialFingerprints": {"cuguard/v1": stable_hash(&[&f.rule, key])},
    });
    if !location.is_empty() {
        result["locations"] = json!([Value::Object(location)]);
    }
    // A site charged to a helper's caller: the helper's line, related.
    if let Some(place) = f.place
        && let Some(helper) = &place.via
        && let Some(l) = (Place {
            frames: vec![helper.clone()],
            ..Place::default()
        })
        .locate(root)
    {
        result["relatedLocations"] = json!([{
            "id": 1,
            "physicalLocation": physical_location(&l),
            "message": {"text": "the allocation helper it went through"},
        }]);
    }
    if let Some(rule) = &f.suppressed {
        result["suppressions"] = json!([{"kind": "external", "justification": escaped(rule)}]);
    }
    result
}

/// Where a finding is: its file and line under the source root, and its function and module.
fn location(f: &Finding<'_>, root: &Path) -> serde_json::Map<String, Value> {
    let mut location = serde_json::Map::new();
    if let Some(l) = f.place.and_then(|p| p.locate(root)) {
        location.insert("physicalLocation".into(), physical_location(&l));
    }
    let mut logical = Vec::new();
    let function = f.place.map(|p| p.function.as_str()).unwrap_or(&f.site);
    if !function.is_empty() {
        logical.push(json!({"name": escaped(function), "kind": "function"}));
    }
    if let Some(module) = f.place.and_then(|p| p.module.as_deref()) {
        logical.push(json!({
            "name": escaped(crate::sites::file_name(module)),
            "fullyQualifiedName": escaped(module),
            "kind": "module",
        }));
    }
    if !logical.is_empty() {
        location.insert("logicalLocations".into(), Value::Array(logical));
    }
    location
}

/// A file and line under the source root, as SARIF's `physicalLocation`.
fn physical_location(l: &Located) -> Value {
    let mut physical = json!({
        "artifactLocation": {"uri": uri_path(&l.path), "uriBaseId": "%SRCROOT%"},
    });
    if let Some(line) = l.line.filter(|l| *l > 0) {
        physical["region"] = json!({"startLine": line});
    }
    physical
}

#[cfg(test)]
mod tests {
    use super::{is_web_address, uri_path};

    #[test]
    fn information_uri_is_a_real_web_address_or_none() {
        assert!(is_web_address("https://github.com/someone/cuguard"));
        for fake in [
            "https://example.invalid/cuguard",
            "https://cuguard.test/",
            "https://www.example.com/cuguard",
            "https://localhost/cuguard",
            "http://github.com/someone/cuguard",
            "file:///usr/share/doc/cuguard",
            "",
        ] {
            assert!(!is_web_address(fake), "{fake}");
        }
    }

    #[test]
    fn uri_paths_escape_what_a_uri_cannot_hold() {
        assert_eq!(uri_path("src/a b,c:d.c"), "src/a%20b%2Cc%3Ad.c");
        assert_eq!(uri_path("dir/é.py"), "dir/%C3%A9.py");
    }
}
