//! The JSONPath dialect of `k8s.io/client-go/util/jsonpath`, as the API server
//! evaluates a CRD's `additionalPrinterColumns` (with `AllowMissingKeys(true)`):
//! fields (`.a`, `['a']`), recursive descent (`..a`), wildcards (`*`, `[*]`),
//! indexes and slices (`[0]`, `[-1]`, `[1:3]`, `[::2]`), unions (`[0,2]`,
//! `['a','b']`) and filters (`[?(@.type=="Ready")]`, `[?(@.x)]`, with
//! `== != < > <= >=` between strings, integers, floats and booleans).
//!
//! Range/end templates and text outside `{...}` are not supported: a column
//! `jsonPath` is a single expression. A missing key yields no result (not an
//! error); a type mismatch in a comparison, indexing a non-list or filtering a
//! non-list is an error, which the table renders as an empty cell, as the real
//! server does.

use serde_json::Value;

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    nodes: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Field(String),
    Wildcard,
    Recursive,
    Array([Param; 3]),
    Union(Vec<Vec<Node>>),
    Filter {
        left: Vec<Node>,
        op: String,
        right: Vec<Node>,
    },
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// One of a slice's start/end/step (`Known` false when omitted).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

/// A value found by evaluation: either a place in the document or a literal
/// from the expression (the right side of a filter).
#[derive(Debug, Clone, PartialEq)]
pub enum Found<'a> {
    /// A value of the document.
    Doc(&'a Value),
    /// A literal of the expression.
    Lit(Value),
}

impl Found<'_> {
    /// The value.
    pub fn value(&self) -> &Value {
        match self {
            Found::Doc(v) => v,
            Found::Lit(v) => v,
        }
    }
}

fn is_terminator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}')
}

impl JsonPath {
    /// Parse the expression of a printer column (client-go parses `{<jsonPath>}`).
    pub fn parse(expr: &str) -> Result<Self, String> {
        let chars: Vec<char> = expr.chars().collect();
        let nodes = parse_inside(&chars)?;
        Ok(JsonPath { nodes })
    }

    /// Every value the expression selects in `data`, in client-go's order.
    pub fn find<'a>(&self, data: &'a Value) -> Result<Vec<Found<'a>>, String> {
        eval_list(vec![Found::Doc(data)], &self.nodes)
    }
}

/// Parse the text of an action (between `{` and `}`) into a node list.
fn parse_inside(s: &[char]) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == ' ' || c == '@' || c == '$' {
            i += 1;
        } else if c == '.' && s.get(i + 1) == Some(&'.') {
            nodes.push(Node::Recursive);
            i += 2;
            // `..name` continues with a field without its own dot
            if i < s.len() && !is_terminator(s[i]) {
                i = parse_field(s, i, &mut nodes);
            }
        } else if c == '.' {
            i = parse_field(s, i + 1, &mut nodes);
        } else if c == '[' {
            let rest: String = s[i..].iter().collect();
            if rest.starts_with("[?(") {
                i = parse_filter(s, i, &mut nodes)?;
            } else {
                i = parse_array(s, i, &mut nodes)?;
            }
        } else if c == '"' || c == '\'' {
            let mut j = i + 1;
            let mut text = String::new();
            while j < s.len() && s[j] != c {
                if s[j] == '\\' && j + 1 < s.len() {
                    j += 1;
                }
                text.push(s[j]);
                j += 1;
            }
            if j >= s.len() {
                return Err("unterminated quoted string".into());
            }
            nodes.push(Node::Text(text));
            i = j + 1;
        } else if c == '+' || c == '-' || c.is_ascii_digit() {
            let mut j = i + 1;
            while j < s.len() && (s[j].is_ascii_digit() || matches!(s[j], '.' | 'e' | 'E')) {
                j += 1;
            }
            let text: String = s[i..j].iter().collect();
            if let Ok(n) = text.parse::<i64>() {
                nodes.push(Node::Int(n));
            } else if let Ok(f) = text.parse::<f64>() {
                nodes.push(Node::Float(f));
            } else {
                return Err(format!("cannot parse number {text}"));
            }
            i = j;
        } else if c.is_alphanumeric() || c == '_' {
            let mut j = i;
            while j < s.len() && (s[j].is_alphanumeric() || s[j] == '_') {
                j += 1;
            }
            let word: String = s[i..j].iter().collect();
            match word.as_str() {
                "true" => nodes.push(Node::Bool(true)),
                "false" => nodes.push(Node::Bool(false)),
                other => return Err(format!("unrecognized identifier {other}")),
            }
            i = j;
        } else {
            return Err(format!("unrecognized character in action: {c:?}"));
        }
    }
    Ok(nodes)
}

/// A field name runs to the next terminator; `\` escapes the next character.
fn parse_field(s: &[char], mut i: usize, nodes: &mut Vec<Node>) -> usize {
    let mut name = String::new();
    while i < s.len() {
        if s[i] == '\\' && i + 1 < s.len() {
            name.push(s[i + 1]);
            i += 2;
            continue;
        }
        if is_terminator(s[i]) {
            break;
        }
        name.push(s[i]);
        i += 1;
    }
    if name == "*" {
        nodes.push(Node::Wildcard);
    } else {
        nodes.push(Node::Field(name));
    }
    i
}

fn parse_array(s: &[char], start: usize, nodes: &mut Vec<Node>) -> Result<usize, String> {
    let mut j = start + 1;
    while j < s.len() && s[j] != ']' {
        if s[j] == '\n' {
            return Err("unterminated array".into());
        }
        j += 1;
    }
    if j >= s.len() {
        return Err("unterminated array".into());
    }
    let mut text: String = s[start + 1..j].iter().collect();
    if text == "*" {
        text = ":".into();
    }
    let parts: Vec<&str> = text.split(',').collect();
    if parts.len() > 1 {
        let mut union = Vec::new();
        for p in parts {
            let sub: Vec<char> = format!("[{}]", p.trim_matches(' ')).chars().collect();
            union.push(parse_inside(&sub)?);
        }
        nodes.push(Node::Union(union));
        return Ok(j + 1);
    }
    // `['key']` is a field
    if text.len() >= 2 && text.starts_with('\'') && text.ends_with('\'') {
        let key = &text[1..text.len() - 1];
        if !key.contains('\'') {
            let sub: Vec<char> = format!(".{key}").chars().collect();
            nodes.extend(parse_inside(&sub)?);
            return Ok(j + 1);
        }
    }
    nodes.push(Node::Array(parse_slice(&text)?));
    Ok(j + 1)
}

/// `start:end:step`, as client-go's `^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$`.
fn parse_slice(text: &str) -> Result<[Param; 3], String> {
    let invalid = || format!("invalid array index {text}");
    let pieces: Vec<&str> = text.split(':').collect();
    if pieces.len() > 3 {
        return Err(invalid());
    }
    let num_ok = |p: &str| {
        let d = p.strip_prefix('-').unwrap_or(p);
        d.chars().all(|c| c.is_ascii_digit())
    };
    if !pieces.iter().all(|p| num_ok(p)) {
        return Err(invalid());
    }
    let unknown = Param {
        value: 0,
        known: false,
        derived: false,
    };
    let mut params = [unknown; 3];
    for i in 0..3 {
        match pieces.get(i) {
            Some(p) if !p.is_empty() => {
                let n: i64 = p
                    .parse()
                    .map_err(|_| format!("array index {p} is not a number"))?;
                params[i] = Param {
                    value: n,
                    known: true,
                    derived: false,
                };
            }
            // `[n]` means `[n:n+1]`; an omitted end after a colon is unknown
            None if i == 1 => {
                params[1] = Param {
                    value: params[0].value + 1,
                    known: true,
                    derived: true,
                };
            }
            _ => {}
        }
    }
    Ok(params)
}

fn parse_filter(s: &[char], start: usize, nodes: &mut Vec<Node>) -> Result<usize, String> {
    let mut j = start + 3;
    let body_start = j;
    let (mut begin, mut end) = (false, false);
    let mut pair = '"';
    loop {
        let Some(&c) = s.get(j) else {
            return Err("unterminated filter".into());
        };
        j += 1;
        match c {
            '\n' => return Err("unterminated filter".into()),
            '"' | '\'' => {
                if !begin {
                    begin = true;
                    pair = c;
                } else if c == pair && s.get(j.wrapping_sub(2)) != Some(&'\\') {
                    end = true;
                }
            }
            ')' if begin == end => break,
            _ => {}
        }
    }
    if s.get(j) != Some(&']') {
        return Err("unclosed array expect ]".into());
    }
    let text: String = s[body_start..j - 1].iter().collect();
    // client-go: ^([^!<>=]+)([!<>=]+)(.+?)$
    let op_at = text.find(['!', '<', '>', '=']);
    match op_at {
        Some(p) if p > 0 => {
            let op_len = text[p..]
                .chars()
                .take_while(|c| matches!(c, '!' | '<' | '>' | '='))
                .count();
            let (left, op, right) = (&text[..p], &text[p..p + op_len], &text[p + op_len..]);
            if right.is_empty() {
                return Err(format!("invalid filter {text}"));
            }
            let left: Vec<char> = left.chars().collect();
            let right: Vec<char> = right.chars().collect();
            nodes.push(Node::Filter {
                left: parse_inside(&left)?,
                op: op.to_string(),
                right: parse_inside(&right)?,
            });
        }
        _ => {
            let left: Vec<char> = text.chars().collect();
            nodes.push(Node::Filter {
                left: parse_inside(&left)?,
                op: "exists".into(),
                right: Vec::new(),
            });
        }
    }
    Ok(j + 1)
}

fn eval_list<'a>(mut cur: Vec<Found<'a>>, nodes: &[Node]) -> Result<Vec<Found<'a>>, String> {
    for n in nodes {
        cur = eval(cur, n)?;
    }
    Ok(cur)
}

fn eval<'a>(input: Vec<Found<'a>>, node: &Node) -> Result<Vec<Found<'a>>, String> {
    match node {
        Node::Text(t) => Ok(vec![Found::Lit(Value::String(t.clone()))]),
        Node::Int(n) => Ok(vec![Found::Lit(Value::from(*n))]),
        Node::Float(f) => Ok(vec![Found::Lit(Value::from(*f))]),
        Node::Bool(b) => Ok(vec![Found::Lit(Value::Bool(*b))]),
        Node::Field(name) => Ok(input
            .iter()
            .filter_map(|f| match f {
                Found::Doc(Value::Object(m)) => m.get(name).map(Found::Doc),
                _ => None,
            })
            .collect()),
        Node::Wildcard => Ok(input
            .iter()
            .flat_map(|f| children(f))
            .map(Found::Doc)
            .collect()),
        Node::Recursive => {
            let mut out = Vec::new();
            for f in input {
                if let Found::Doc(v) = f {
                    recurse(v, &mut out);
                }
            }
            Ok(out)
        }
        Node::Array(params) => {
            let mut out = Vec::new();
            for f in &input {
                let Found::Doc(v) = f else { continue };
                if v.is_null() {
                    continue;
                }
                let Value::Array(items) = v else {
                    return Err(format!("{} is not array or slice", type_name(v)));
                };
                out.extend(slice(items, *params)?.into_iter().map(Found::Doc));
            }
            Ok(out)
        }
        Node::Union(lists) => {
            let mut out = Vec::new();
            for l in lists {
                out.extend(eval_list(input.clone(), l)?);
            }
            Ok(out)
        }
        Node::Filter { left, op, right } => {
            let mut out = Vec::new();
            for f in &input {
                let Found::Doc(v) = f else { continue };
                if v.is_null() {
                    continue;
                }
                let Value::Array(items) = v else {
                    return Err(format!(
                        "{} is not array or slice and cannot be filtered",
                        type_name(v)
                    ));
                };
                for item in items {
                    let lefts = eval_list(vec![Found::Doc(item)], left)?;
                    if op == "exists" {
                        if !lefts.is_empty() {
                            out.push(Found::Doc(item));
                        }
                        continue;
                    }
                    let l = match lefts.len() {
                        0 => continue,
                        1 => lefts[0].value().clone(),
                        _ => return Err("can only compare one element at a time".into()),
                    };
                    let rights = eval_list(vec![Found::Doc(item)], right)?;
                    let r = match rights.len() {
                        0 => continue,
                        1 => rights[0].value().clone(),
                        _ => return Err("can only compare one element at a time".into()),
                    };
                    if compare(&l, op, &r)? {
                        out.push(Found::Doc(item));
                    }
                }
            }
            Ok(out)
        }
    }
}

fn children<'a>(f: &Found<'a>) -> Vec<&'a Value> {
    match f {
        Found::Doc(Value::Object(m)) => m.values().collect(),
        Found::Doc(Value::Array(a)) => a.iter().collect(),
        _ => Vec::new(),
    }
}

/// client-go's evalRecursive: a container (or non-empty string) is listed, then its descendants.
fn recurse<'a>(v: &'a Value, out: &mut Vec<Found<'a>>) {
    let kids: Vec<&Value> = match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        Value::String(s) if !s.is_empty() => {
            out.push(Found::Doc(v));
            return;
        }
        _ => return,
    };
    if kids.is_empty() {
        return;
    }
    out.push(Found::Doc(v));
    for k in kids {
        recurse(k, out);
    }
}

fn slice(items: &[Value], mut p: [Param; 3]) -> Result<Vec<&Value>, String> {
    let len = items.len() as i64;
    if !p[0].known {
        p[0].value = 0;
    }
    if p[0].value < 0 {
        p[0].value += len;
    }
    if !p[1].known {
        p[1].value = len;
    }
    if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
        p[1].value += len;
    }
    if p[1].value == p[0].value {
        return Ok(Vec::new());
    }
    if p[0].value >= len || p[0].value < 0 {
        return Err(format!(
            "array index out of bounds: index {}, length {len}",
            p[0].value
        ));
    }
    if p[1].value > len || p[1].value < 0 {
        return Err(format!(
            "array index out of bounds: index {}, length {len}",
            p[1].value - 1
        ));
    }
    if p[0].value > p[1].value {
        return Err(format!(
            "starting index {} is greater than ending index {}",
            p[0].value, p[1].value
        ));
    }
    let step = if p[2].known {
        if p[2].value <= 0 {
            return Err("step must be > 0".into());
        }
        p[2].value as usize
    } else {
        1
    };
    Ok(items[p[0].value as usize..p[1].value as usize]
        .iter()
        .step_by(step)
        .collect())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// The comparisons of client-go's forked text/template: only values of one
/// basic kind compare (integers with integers, and so on).
fn compare(l: &Value, op: &str, r: &Value) -> Result<bool, String> {
    use std::cmp::Ordering;
    let bad = || "incompatible types for comparison".to_string();
    let ord: Option<Ordering> = match (l, r) {
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Number(a), Value::Number(b)) => {
            match (a.is_f64(), b.is_f64()) {
                (false, false) => {
                    // i64 and u64 compare by value (the template's int/uint special case)
                    let (x, y) = (a.as_i128_lossless(), b.as_i128_lossless());
                    Some(x.cmp(&y))
                }
                (true, true) => {
                    let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
                    x.partial_cmp(&y)
                }
                _ => return Err(bad()),
            }
        }
        (Value::Bool(a), Value::Bool(b)) => {
            return match op {
                "==" => Ok(a == b),
                "!=" => Ok(a != b),
                _ => Err("invalid type for comparison".into()),
            };
        }
        (Value::Null, _) | (_, Value::Null) => return Err("invalid type for comparison".into()),
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => {
            return Err("invalid type for comparison".into());
        }
        _ => return Err(bad()),
    };
    let Some(o) = ord else { return Ok(false) };
    Ok(match op {
        "==" => o == Ordering::Equal,
        "!=" => o != Ordering::Equal,
        "<" => o == Ordering::Less,
        ">" => o == Ordering::Greater,
        "<=" => o != Ordering::Greater,
        ">=" => o != Ordering::Less,
        other => return Err(format!("unrecognized filter operator {other}")),
    })
}

trait I128 {
    fn as_i128_lossless(&self) -> i128;
}

impl I128 for serde_json::Number {
    fn as_i128_lossless(&self) -> i128 {
        self.as_i64()
            .map(i128::from)
            .or_else(|| self.as_u64().map(i128::from))
            .unwrap_or(0)
    }
}

/// Go's `fmt.Fprint` of a JSON-decoded value, as jsonpath's `PrintResults`
/// writes a `string` column: maps and lists as compact JSON (keys sorted,
/// `<`, `>`, `&` escaped), scalars with `%v`.
pub fn print_value(v: &Value) -> String {
    match v {
        // reflect.ValueOf(nil) is invalid: text/template prints "<no value>"
        Value::Null => "<no value>".into(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (_, Some(u)) => u.to_string(),
            _ => go_float_v(n.as_f64().unwrap_or(0.0)),
        },
        Value::Array(_) | Value::Object(_) => go_json(v),
    }
}

/// encoding/json's output: serde_json's compact form with Go's HTML escaping.
fn go_json(v: &Value) -> String {
    let s = v.to_string();
    s.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// `%v` of a float64 (strconv's shortest `%g`): exponent form when the decimal
/// exponent is below -4 or at least 6.
pub fn go_float_v(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // shortest round-trip digits and decimal exponent, via Rust's `{:e}`
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let s = format!("{f}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn find(expr: &str, data: &Value) -> Result<Vec<Value>, String> {
        JsonPath::parse(expr)?
            .find(data)
            .map(|v| v.iter().map(|f| f.value().clone()).collect())
    }

    fn doc() -> Value {
        json!({
            "metadata": {"name": "k", "labels": {"app.kubernetes.io/name": "ks"}},
            "spec": {"replicas": 3, "ratio": 0.5, "on": true, "list": [1, 2, 3, 4, 5]},
            "status": {"conditions": [
                {"type": "Progressing", "status": "False", "reason": "Done"},
                {"type": "Ready", "status": "True", "reason": "AllGood", "gen": 2},
                {"status": "Unknown"},
            ]}
        })
    }

    #[test]
    fn fields_and_missing_keys() {
        let d = doc();
        assert_eq!(find(".spec.replicas", &d).unwrap(), vec![json!(3)]);
        assert_eq!(
            find(".spec.nothing.deeper", &d).unwrap(),
            Vec::<Value>::new()
        );
        assert_eq!(find(".metadata['name']", &d).unwrap(), vec![json!("k")]);
        assert_eq!(
            find(".metadata.labels.app\\.kubernetes\\.io/name", &d).unwrap(),
            vec![json!("ks")]
        );
    }

    #[test]
    fn filters_select_the_matching_items() {
        let d = doc();
        assert_eq!(
            find(".status.conditions[?(@.type==\"Ready\")].status", &d).unwrap(),
            vec![json!("True")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type == 'Ready')].reason", &d).unwrap(),
            vec![json!("AllGood")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type!=\"Ready\")].status", &d).unwrap(),
            vec![json!("False")]
        );
        // the item without `type` is skipped by the comparison, kept by "exists" on `status`
        assert_eq!(
            find(".status.conditions[?(@.status)].status", &d)
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            find(".status.conditions[?(@.gen>=2)].type", &d).unwrap(),
            vec![json!("Ready")]
        );
        // a filter on a missing list is empty, not an error
        assert!(
            find(".status.nothing[?(@.type==\"Ready\")].status", &d)
                .unwrap()
                .is_empty()
        );
        // an integer does not compare with a float or a string: an error
        assert!(find(".status.conditions[?(@.gen==2.0)].type", &d).is_err());
        assert!(find(".status.conditions[?(@.type==2)].type", &d).is_err());
        // filtering a map is an error
        assert!(find(".spec[?(@.x==1)]", &d).is_err());
    }

    #[test]
    fn indexes_slices_unions_wildcards() {
        let d = doc();
        assert_eq!(find(".spec.list[0]", &d).unwrap(), vec![json!(1)]);
        assert_eq!(find(".spec.list[-1]", &d).unwrap(), vec![json!(5)]);
        assert_eq!(
            find(".spec.list[1:3]", &d).unwrap(),
            vec![json!(2), json!(3)]
        );
        assert_eq!(
            find(".spec.list[::2]", &d).unwrap(),
            vec![json!(1), json!(3), json!(5)]
        );
        assert_eq!(find(".spec.list[*]", &d).unwrap().len(), 5);
        assert_eq!(
            find(".spec.list[0,2]", &d).unwrap(),
            vec![json!(1), json!(3)]
        );
        assert!(
            find(".spec.list[9]", &d).is_err(),
            "out of bounds is an error"
        );
        assert!(find(".spec.replicas[0]", &d).is_err(), "indexing a number");
        assert_eq!(
            find(".status.conditions[*].type", &d).unwrap(),
            vec![json!("Progressing"), json!("Ready")]
        );
        assert_eq!(find("..reason", &d).unwrap().len(), 2);
        assert_eq!(find(".metadata.*", &d).unwrap().len(), 2);
    }

    #[test]
    fn bad_expressions_do_not_parse() {
        assert!(JsonPath::parse(".a[?(@.b==\"x\"").is_err());
        assert!(JsonPath::parse(".a[x]").is_err());
        assert!(JsonPath::parse(".a[1").is_err());
    }

    #[test]
    fn printing_follows_go() {
        assert_eq!(print_value(&json!("s")), "s");
        assert_eq!(print_value(&json!(3)), "3");
        assert_eq!(print_value(&json!(true)), "true");
        assert_eq!(print_value(&json!(1.5)), "1.5");
        assert_eq!(print_value(&json!(1e21)), "1e+21");
        assert_eq!(print_value(&json!(1234567.0)), "1.234567e+06");
        assert_eq!(print_value(&json!(123456.0)), "123456");
        assert_eq!(print_value(&json!(0.0001)), "0.0001");
        assert_eq!(print_value(&json!(0.00001)), "1e-05");
        assert_eq!(
            print_value(&json!({"b": 1, "a": "<x>"})),
            r#"{"a":"\u003cx\u003e","b":1}"#
        );
        assert_eq!(print_value(&Value::Null), "<no value>");
    }
}
