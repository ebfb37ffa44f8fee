//! A small JSON writer: values go straight into a `String`, with commas and escaping handled.
//! The report is written once per process, so this favours being obviously right over speed.

use std::fmt::Write;

/// Writes one JSON document.
#[derive(Default)]
pub struct Json {
    out: String,
    /// For each open object or array: whether it has no member yet.
    empty: Vec<bool>,
    /// A key was just written; the next value follows it without a comma.
    after_key: bool,
}

impl Json {
    /// An empty writer.
    pub fn new() -> Self {
        Json::default()
    }

    /// The document written so far.
    pub fn finish(self) -> String {
        self.out
    }

    fn before_value(&mut self) {
        if self.after_key {
            self.after_key = false;
            return;
        }
        if let Some(empty) = self.empty.last_mut() {
            if !*empty {
                self.out.push(',');
            }
            *empty = false;
        }
    }

    /// Opens an object.
    pub fn begin_object(&mut self) -> &mut Self {
        self.before_value();
        self.out.push('{');
        self.empty.push(true);
        self
    }

    /// Closes an object.
    pub fn end_object(&mut self) -> &mut Self {
        self.empty.pop();
        self.out.push('}');
        self
    }

    /// Opens an array.
    pub fn begin_array(&mut self) -> &mut Self {
        self.before_value();
        self.out.push('[');
        self.empty.push(true);
        self
    }

    /// Closes an array.
    pub fn end_array(&mut self) -> &mut Self {
        self.empty.pop();
        self.out.push(']');
        self
    }

    /// Writes an object key; the next call writes its value.
    pub fn key(&mut self, k: &str) -> &mut Self {
        self.before_value();
        self.escaped(k);
        self.out.push(':');
        self.after_key = true;
        self
    }

    /// A string value.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.before_value();
        self.escaped(s);
        self
    }

    /// An unsigned integer.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.before_value();
        let _ = write!(self.out, "{v}");
        self
    }

    /// A signed integer.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.before_value();
        let _ = write!(self.out, "{v}");
        self
    }

    /// A finite float (non-finite values become null).
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.before_value();
        if v.is_finite() {
            let _ = write!(self.out, "{v}");
        } else {
            self.out.push_str("null");
        }
        self
    }

    /// A boolean.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.before_value();
        self.out.push_str(if v { "true" } else { "false" });
        self
    }

    /// null.
    pub fn null(&mut self) -> &mut Self {
        self.before_value();
        self.out.push_str("null");
        self
    }

    /// An address, as the report writes them: `"0x…"` in lower-case hex.
    pub fn addr(&mut self, v: u64) -> &mut Self {
        self.before_value();
        let _ = write!(self.out, "\"0x{v:x}\"");
        self
    }

    /// A string or null.
    pub fn opt_str(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            Some(s) => self.str(s),
            None => self.null(),
        }
    }

    /// An unsigned integer or null.
    pub fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(v) => self.u64(v),
            None => self.null(),
        }
    }

    fn escaped(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", c as u32);
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_values_get_commas_and_escapes() {
        let mut j = Json::new();
        j.begin_object();
        j.key("a").u64(1);
        j.key("b")
            .begin_array()
            .str("x\"y")
            .null()
            .bool(true)
            .end_array();
        j.key("c").begin_object().end_object();
        j.key("d").addr(0xABC);
        j.key("e").str("tab\tnl\n\u{1}");
        j.end_object();
        assert_eq!(
            j.finish(),
            r#"{"a":1,"b":["x\"y",null,true],"c":{},"d":"0xabc","e":"tab\tnl\n\u0001"}"#
        );
    }
}
