//! The oslo.config options each service defines, and the check of a user's `configOverrides`
//! against them. oslo.config ignores an option it does not know and fails only when a typed
//! option is read, so a typo or a wrong type would roll out unnoticed or crash the service
//! later; refused here, it becomes `InvalidSpec` naming the key before anything rolls out.
//!
//! The schemas in `option-schemas/` are generated from the installed services (the test cloud's
//! venv, the pinned release) by `scripts/option-schemas`, which runs the real
//! `oslo-config-generator`; a test re-runs it and fails when they are stale.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::cluster::ServiceName;

/// The value type of an option, as `oslo-config-generator` names it.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OptionType {
    /// Any string (choices may restrict it).
    String,
    /// A whole number, within `min`/`max`.
    Integer,
    /// `true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`.
    Boolean,
    /// A floating point number, within `min`/`max`.
    Float,
    /// Comma-separated items.
    List,
    /// Comma-separated `key:value` items.
    Dict,
    /// A TCP/UDP port (0-65535).
    Port,
    /// An absolute URI with a scheme and an authority.
    Uri,
    /// An IP address or a host name.
    Host,
    /// An IP address or a host name that may contain `_`.
    Hostdomain,
    /// An IP address.
    Ip,
    /// An option that may repeat (an override sets one value).
    Multi,
    /// A type this check does not know; any value passes.
    Unknown,
}

/// One option: its type, the values it accepts and its bounds.
#[derive(Deserialize, Clone, Debug, PartialEq)]
pub struct OptionSpec {
    /// Value type.
    #[serde(rename = "type")]
    pub type_: OptionType,
    /// The only values accepted, when the option has choices.
    #[serde(default)]
    pub choices: Vec<String>,
    /// Lower bound of numbers.
    #[serde(default)]
    pub min: Option<f64>,
    /// Upper bound of numbers.
    #[serde(default)]
    pub max: Option<f64>,
}

/// The options of one service, by section.
#[derive(Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Schema {
    /// Service name.
    pub service: String,
    /// The package and version the schema was generated from, e.g. `nova 33.0.2`.
    pub generated_from: String,
    /// Section → option → spec.
    pub sections: BTreeMap<String, BTreeMap<String, OptionSpec>>,
}

const SOURCES: [(ServiceName, &str); 6] = [
    (
        ServiceName::Keystone,
        include_str!("../option-schemas/keystone.json"),
    ),
    (
        ServiceName::Placement,
        include_str!("../option-schemas/placement.json"),
    ),
    (
        ServiceName::Glance,
        include_str!("../option-schemas/glance.json"),
    ),
    (
        ServiceName::Nova,
        include_str!("../option-schemas/nova.json"),
    ),
    (
        ServiceName::Neutron,
        include_str!("../option-schemas/neutron.json"),
    ),
    (
        ServiceName::Cinder,
        include_str!("../option-schemas/cinder.json"),
    ),
];

/// The option schema of a service; `None` for services not configured by oslo.config
/// (Horizon's overrides are Django settings, checked by its renderer).
pub fn schema(service: ServiceName) -> Option<&'static Schema> {
    static PARSED: OnceLock<Vec<(ServiceName, Schema)>> = OnceLock::new();
    PARSED
        .get_or_init(|| {
            SOURCES
                .iter()
                // The files are generated and checked by a test; one that does not parse
                // disables the check for its service rather than failing validation.
                .filter_map(|(s, text)| serde_json::from_str(text).ok().map(|schema| (*s, schema)))
                .collect()
        })
        .iter()
        .find(|(s, _)| *s == service)
        .map(|(_, schema)| schema)
}

impl Schema {
    /// Checks one override. `dynamic` maps section names the spec defines at run time (e.g. a
    /// Cinder backend) to the section whose options they take. `Err` says what is wrong.
    pub fn check(
        &self,
        section: &str,
        option: &str,
        value: &str,
        dynamic: &[(&str, &str)],
    ) -> Result<(), String> {
        let lookup = dynamic
            .iter()
            .find(|(name, _)| *name == section)
            .map_or(section, |(_, template)| template);
        let Some(options) = self.sections.get(lookup) else {
            let hint = closest(section, self.sections.keys().map(String::as_str))
                .map(|s| format!("; did you mean [{s}]?"))
                .unwrap_or_default();
            return Err(format!(
                "[{section}] is not a section of {}{hint}",
                self.generated_from
            ));
        };
        let Some(spec) = options.get(option) else {
            let hint = closest(option, options.keys().map(String::as_str))
                .map(|s| format!("; did you mean {s}?"))
                .unwrap_or_default();
            return Err(format!(
                "{option} is not an option of [{section}] in {}{hint}",
                self.generated_from
            ));
        };
        check_value(spec, value)
    }
}

/// Whether `value` is one oslo.config accepts for `spec` (the checks of `oslo_config.types`).
pub fn check_value(spec: &OptionSpec, value: &str) -> Result<(), String> {
    // oslo.config substitutes `$other_option` before converting: the result is unknown here.
    if value.contains('$') {
        return Ok(());
    }
    let v = value.trim();
    let number = |n: f64| -> Result<(), String> {
        if let Some(min) = spec.min
            && n < min
        {
            return Err(format!("{value:?} is below the minimum {min}"));
        }
        if let Some(max) = spec.max
            && n > max
        {
            return Err(format!("{value:?} is above the maximum {max}"));
        }
        Ok(())
    };
    match spec.type_ {
        OptionType::Boolean => {
            if !matches!(
                v.to_ascii_lowercase().as_str(),
                "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
            ) {
                return Err(format!("{value:?} is not a boolean (true or false)"));
            }
        }
        OptionType::Integer | OptionType::Port => {
            let n: i64 = v
                .parse()
                .map_err(|_| format!("{value:?} is not an integer"))?;
            if spec.type_ == OptionType::Port && !(0..=65535).contains(&n) {
                return Err(format!("{value:?} is not a port (0-65535)"));
            }
            // Bounds are small enough to be exact as f64.
            number(n as f64)?;
        }
        OptionType::Float => {
            let n: f64 = v
                .parse()
                .map_err(|_| format!("{value:?} is not a number"))?;
            number(n)?;
        }
        OptionType::Uri => {
            let ok = v.split_once("://").is_some_and(|(scheme, rest)| {
                !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                    && !rest.split(['/', '?', '#']).next().unwrap_or("").is_empty()
            });
            if !ok {
                return Err(format!(
                    "{value:?} is not an absolute URI (scheme://host...)"
                ));
            }
        }
        OptionType::Ip => {
            v.parse::<IpAddr>()
                .map_err(|_| format!("{value:?} is not an IP address"))?;
        }
        OptionType::Host | OptionType::Hostdomain => {
            let underscore = spec.type_ == OptionType::Hostdomain;
            if v.parse::<IpAddr>().is_err() && !host_name(v, underscore) {
                return Err(format!("{value:?} is not an IP address or host name"));
            }
        }
        OptionType::Dict => {
            if let Some(item) = v
                .split(',')
                .map(str::trim)
                .find(|i| !i.is_empty() && !i.contains(':'))
            {
                return Err(format!("{item:?} is not a key:value item"));
            }
        }
        OptionType::String | OptionType::List | OptionType::Multi | OptionType::Unknown => {}
    }
    if !spec.choices.is_empty() && !spec.choices.iter().any(|c| c == v) {
        return Err(format!(
            "{value:?} is not one of {}",
            spec.choices.join(", ")
        ));
    }
    Ok(())
}

fn host_name(s: &str, underscore: bool) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || (underscore && c == '_'))
        })
}

/// The candidate nearest to `name` by edit distance, when it is near enough to be a typo.
fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.len() / 3).clamp(1, 3);
    candidates
        .map(|c| (distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

/// Edit distance counting a swap of neighbours as one edit (the commonest typo).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(type_: OptionType) -> OptionSpec {
        OptionSpec {
            type_,
            choices: vec![],
            min: None,
            max: None,
        }
    }

    #[test]
    fn every_oslo_service_has_a_parsed_schema_from_its_package() {
        for (service, _) in SOURCES {
            let s = schema(service).unwrap_or_else(|| panic!("{service:?} schema parses"));
            assert_eq!(s.service, service.as_str());
            assert!(
                s.generated_from.contains(' '),
                "package and version: {}",
                s.generated_from
            );
            assert!(s.sections.contains_key("DEFAULT"), "{service:?}");
        }
        assert!(schema(ServiceName::Horizon).is_none());
    }

    #[test]
    fn real_options_pass_and_typos_are_named_with_the_nearest_option() {
        let nova = schema(ServiceName::Nova).expect("nova");
        assert_eq!(nova.check("DEFAULT", "debug", "True", &[]), Ok(()));
        assert_eq!(
            nova.check("scheduler", "discover_hosts_in_cells_interval", "300", &[]),
            Ok(())
        );
        let err = nova.check("DEFAULT", "debg", "true", &[]).unwrap_err();
        assert!(err.contains("debg is not an option of [DEFAULT]"), "{err}");
        assert!(err.contains("did you mean debug?"), "{err}");
        assert!(err.contains("nova 33."), "{err}");
        let err = nova.check("schedular", "x", "1", &[]).unwrap_err();
        assert!(err.contains("did you mean [scheduler]?"), "{err}");
    }

    #[test]
    fn wrong_types_bounds_and_choices_are_refused() {
        let keystone = schema(ServiceName::Keystone).expect("keystone");
        let err = keystone
            .check("token", "expiration", "two hours", &[])
            .unwrap_err();
        assert!(err.contains("not an integer"), "{err}");
        let err = keystone
            .check("DEFAULT", "debug", "maybe", &[])
            .unwrap_err();
        assert!(err.contains("not a boolean"), "{err}");
        // [token] provider has choices? No: it is a stevedore name; a bounded option instead.
        let glance = schema(ServiceName::Glance).expect("glance");
        let err = glance
            .check("DEFAULT", "image_cache_driver", "redis", &[])
            .unwrap_err();
        assert!(
            err.contains("not one of centralized_db, sqlite, xattr"),
            "{err}"
        );
        assert_eq!(
            glance.check("DEFAULT", "image_cache_driver", "sqlite", &[]),
            Ok(())
        );
    }

    #[test]
    fn dynamic_sections_take_their_template_options() {
        let glance = schema(ServiceName::Glance).expect("glance");
        // glance_store registers store options under each backend's section.
        assert_eq!(
            glance.check("s3", "s3_store_large_object_size", "200", &[]),
            Ok(())
        );
        let cinder = schema(ServiceName::Cinder).expect("cinder");
        assert!(
            cinder
                .check("ceph-ssd", "rbd_pool", "volumes", &[])
                .is_err()
        );
        assert_eq!(
            cinder.check(
                "ceph-ssd",
                "rbd_pool",
                "volumes",
                &[("ceph-ssd", "backend_defaults")]
            ),
            Ok(())
        );
    }

    #[test]
    fn auth_plugin_options_are_known_where_a_section_loads_a_plugin() {
        let nova = schema(ServiceName::Nova).expect("nova");
        assert_eq!(nova.check("placement", "system_scope", "all", &[]), Ok(()));
        assert_eq!(
            nova.check("placement", "application_credential_id", "abc", &[]),
            Ok(())
        );
    }

    #[test]
    fn values_by_type() {
        let mut port = spec(OptionType::Port);
        assert!(check_value(&port, "8080").is_ok());
        assert!(check_value(&port, "70000").is_err());
        port.min = Some(1024.0);
        assert!(
            check_value(&port, "80")
                .unwrap_err()
                .contains("minimum 1024")
        );
        let mut float = spec(OptionType::Float);
        float.max = Some(1.0);
        assert!(check_value(&float, "0.5").is_ok());
        assert!(check_value(&float, "1.5").is_err());
        assert!(check_value(&float, "half").is_err());
        let uri = spec(OptionType::Uri);
        assert!(check_value(&uri, "https://keystone.example.org:5000/v3").is_ok());
        assert!(check_value(&uri, "keystone.example.org").is_err());
        assert!(check_value(&uri, "https://").is_err());
        let host = spec(OptionType::Host);
        assert!(check_value(&host, "10.0.0.1").is_ok());
        assert!(check_value(&host, "::1").is_ok());
        assert!(check_value(&host, "db-1.example.org").is_ok());
        assert!(check_value(&host, "db_1.example.org").is_err());
        assert!(check_value(&spec(OptionType::Hostdomain), "db_1.example.org").is_ok());
        assert!(check_value(&spec(OptionType::Ip), "db.example.org").is_err());
        let dict = spec(OptionType::Dict);
        assert!(check_value(&dict, "a:1, b:2").is_ok());
        assert!(check_value(&dict, "a:1,b").unwrap_err().contains("\"b\""));
        // Interpolated values are resolved by oslo.config at run time.
        assert!(check_value(&spec(OptionType::Integer), "$workers").is_ok());
        let mut choice = spec(OptionType::String);
        choice.choices = vec!["a".into(), "b".into()];
        assert!(check_value(&choice, "c").is_err());
    }

    #[test]
    fn nearest_name_only_within_typo_distance() {
        let names = ["debug", "verbose", "log_dir"];
        assert_eq!(closest("debgu", names.iter().copied()), Some("debug"));
        assert_eq!(closest("completely_else", names.iter().copied()), None);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
