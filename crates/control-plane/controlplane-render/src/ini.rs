//! oslo.config files as data: the operator's defaults with the user's overrides merged over
//! them, rendered in a stable order so equal inputs give equal bytes (and equal hashes).

use std::collections::BTreeMap;

/// An INI document: section → option → value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ini(pub BTreeMap<String, BTreeMap<String, String>>);

impl Ini {
    /// Sets one option.
    pub fn set(&mut self, section: &str, key: &str, value: impl Into<String>) -> &mut Self {
        self.0
            .entry(section.to_string())
            .or_default()
            .insert(key.to_string(), value.into());
        self
    }

    /// Gets one option.
    pub fn get(&self, section: &str, key: &str) -> Option<&str> {
        self.0.get(section)?.get(key).map(String::as_str)
    }

    /// Merges overrides over the current values.
    pub fn merge(&mut self, overrides: &BTreeMap<String, BTreeMap<String, String>>) {
        for (section, options) in overrides {
            for (k, v) in options {
                self.set(section, k, v.clone());
            }
        }
    }

    /// Reads back a rendered file (`[section]` and `key = value` lines): the inverse of
    /// [`Ini::render`], for checks of what was rendered.
    pub fn parse(text: &str) -> Self {
        let mut ini = Ini::default();
        let mut section = String::new();
        for line in text.lines() {
            if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = s.to_string();
            } else if let Some((k, v)) = line.split_once(" = ") {
                ini.set(&section, k, v);
            }
        }
        ini
    }

    /// The file text; `[DEFAULT]` first, then sections alphabetically.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut write = |name: &str, opts: &BTreeMap<String, String>| {
            out.push('[');
            out.push_str(name);
            out.push_str("]\n");
            for (k, v) in opts {
                out.push_str(k);
                out.push_str(" = ");
                out.push_str(v);
                out.push('\n');
            }
            out.push('\n');
        };
        if let Some(d) = self.0.get("DEFAULT") {
            write("DEFAULT", d);
        }
        for (name, opts) in &self.0 {
            if name != "DEFAULT" {
                write(name, opts);
            }
        }
        out
    }
}

/// Test support: every option of a rendered file is one `service` really defines, with a value
/// of its type (the operator's own settings pass the check users' overrides go through).
#[cfg(test)]
pub(crate) fn assert_options_known(
    service: controlplane_api::ServiceName,
    text: &str,
    dynamic: &[(&str, &str)],
) {
    let schema = controlplane_api::options::schema(service).expect("an oslo.config service");
    let mut bad = Vec::new();
    for (section, options) in &Ini::parse(text).0 {
        for (key, value) in options {
            if let Err(why) = schema.check(section, key, value, dynamic) {
                bad.push(format!("[{section}] {key}: {why}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "rendered options {service:?} does not define:\n{}",
        bad.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_and_default_comes_first() {
        let mut ini = Ini::default();
        ini.set("token", "expiration", "3600")
            .set("DEFAULT", "debug", "false");
        let mut o = BTreeMap::new();
        o.insert(
            "DEFAULT".to_string(),
            BTreeMap::from([("debug".to_string(), "true".to_string())]),
        );
        ini.merge(&o);
        assert_eq!(
            ini.render(),
            "[DEFAULT]\ndebug = true\n\n[token]\nexpiration = 3600\n\n"
        );
    }
}
