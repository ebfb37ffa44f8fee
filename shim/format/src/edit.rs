//! Rewriting part of a report held as a JSON value, through the report's types, while every other
//! field stays as it was (those this version does not know included): what `cuguard symbolize`
//! does to stacks.

use serde::Deserialize;
use serde_json::Value;

use crate::model::{Module, Stack};

/// The part of a report [`edit_stacks`] reads.
#[derive(Deserialize)]
struct StacksPart {
    stacks: Vec<Stack>,
    #[serde(default)]
    modules: Vec<Module>,
}

/// Reads the `stacks` and `modules` of one process's report held as `report`, lets `edit`
/// change the stacks, and writes them back in place. A report without stacks is left alone;
/// stacks that do not read as [`Stack`]s are an error, and the report is then unchanged.
pub fn edit_stacks(
    report: &mut Value,
    edit: impl FnOnce(&mut [Stack], &[Module]),
) -> Result<(), serde_json::Error> {
    if report.get("stacks").is_none() {
        return Ok(());
    }
    let mut part = StacksPart::deserialize(&*report)?;
    edit(&mut part.stacks, &part.modules);
    let stacks = serde_json::to_value(&part.stacks)?;
    if let Some(slot) = report.get_mut("stacks") {
        *slot = stacks;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_stacks_change() {
        let mut v: Value = serde_json::from_str(
            r#"{"future": {"a": 1},
                "modules": [{"path": "/x", "build_id": null, "base": "0x0", "size": 10}],
                "stacks": [{"id": 1, "frames": [{"ip": "0x5", "module": "/x", "offset": "0x5",
                            "function": null, "file": null, "line": null}]}]}"#,
        )
        .unwrap();
        let before = v.clone();
        edit_stacks(&mut v, |stacks, modules| {
            assert_eq!(modules[0].path, "/x");
            stacks[0].frames[0].function = Some("main".into());
        })
        .unwrap();
        assert_eq!(v["stacks"][0]["frames"][0]["function"], "main");
        assert_eq!(v["stacks"][0]["site"], Value::Null);
        assert_eq!(v["future"], before["future"]);
        assert_eq!(v["modules"], before["modules"]);

        let mut none: Value = serde_json::from_str(r#"{"leaks": []}"#).unwrap();
        edit_stacks(&mut none, |_, _| panic!("no stacks")).unwrap();
        assert!(none.get("stacks").is_none());
    }
}
