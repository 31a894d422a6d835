//! Static cost estimation of `x-kubernetes-validations` rules, done when a CRD
//! is written, the way kube-apiserver does it.
//!
//! The real server refuses a CRD whose rules may cost too much: each rule gets
//! the worst-case cost of one evaluation from cel-go's checker cost estimator
//! (extended by the Kubernetes CEL libraries' estimates), with the sizes of
//! strings, lists and maps taken from `maxLength`, `maxItems` and
//! `maxProperties` or, where absent, from the largest value a 3 MiB request
//! could carry. That cost is multiplied by how often the rule's node can occur
//! (the product of the `maxItems`/`maxProperties` of the lists and maps above
//! it, or a request-size bound when one of them is unbounded) and checked
//! against a per-rule and a per-CRD limit. This module reproduces that model
//! (apiextensions-apiserver `schema/cel/compilation.go`, `validation.go`,
//! `cel_validation.go`; apiserver `cel/common/schemas.go`, `cel/library/cost.go`;
//! cel-go `checker/cost.go`) for the functions CRD rules use; the figures it
//! gives for our own CRDs were checked against what a real v1.36 server printed.

use std::collections::{BTreeMap, HashMap};

use kube_cel::cel::IdedExpr;
use kube_cel::cel::common::ast::{EntryExpr, Expr, LiteralValue};
use kube_cel::cel::parser::Parser;
use serde_json::Value;

use crate::error::Cause;

/// Largest estimated cost of one rule (`StaticEstimatedCostLimit`).
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// Largest estimated cost of all rules of one schema (`StaticEstimatedCRDCostLimit`).
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// The request size the server assumes for unbounded data (`DefaultMaxRequestSizeBytes`).
pub const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;

const STRING_TRAVERSAL: f64 = 0.1;
const REGEX_LENGTH: f64 = 0.25;
const MIN_STRING_SIZE: u64 = 2;
const MIN_BOOL_SIZE: u64 = 4;
const MIN_NUMBER_SIZE: u64 = 1;
const MIN_DURATION_SIZE_JSON: u64 = 4;
const MAX_DURATION_SIZE_JSON: u64 = 32;
const JSON_DATE_SIZE: u64 = 12;
const MIN_DATETIME_SIZE_JSON: u64 = 21;
const MAX_DATETIME_SIZE_JSON: u64 = 64;

/// A `[min, max]` range, used both for costs and for sizes (as cel-go does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Lower bound.
    pub min: u64,
    /// Upper bound.
    pub max: u64,
}

impl Range {
    const UNKNOWN: Range = Range {
        min: 0,
        max: u64::MAX,
    };

    fn fixed(n: u64) -> Range {
        Range { min: n, max: n }
    }

    fn add(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    fn union(self, o: Range) -> Range {
        Range {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }

    fn multiply(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }

    fn by_factor(self, f: f64) -> Range {
        Range {
            min: by_factor(self.min, f),
            max: by_factor(self.max, f),
        }
    }
}

/// `ceil(x * f)`, saturating at `u64::MAX` as cel-go's `multiplyByCostFactor`.
fn by_factor(x: u64, f: f64) -> u64 {
    let xf = x as f64;
    if xf > 0.0 && f > 0.0 && xf > u64::MAX as f64 / f {
        return u64::MAX;
    }
    let c = (xf * f).ceil();
    if c >= 18_446_744_073_709_551_616.0 {
        u64::MAX
    } else {
        c as u64
    }
}

/// What CEL sees of a schema node (the apiserver's `DeclType`).
#[derive(Debug, Clone)]
pub struct Decl {
    kind: DeclKind,
    /// Largest length of a string (in bytes), or count of a list or map.
    max_elements: u64,
    /// Smallest size of the node serialized as JSON.
    min_size: u64,
}

#[derive(Debug, Clone)]
enum DeclKind {
    Object(BTreeMap<String, Decl>),
    List(Box<Decl>),
    Map(Box<Decl>),
    String,
    Bytes,
    Int,
    Double,
    Bool,
    Timestamp,
    Duration,
    Dyn,
}

fn u64_of(v: Option<&Value>) -> Option<u64> {
    v.and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_i64().map(|i| i.max(0) as u64))
            .or_else(|| v.as_f64().map(|f| f.max(0.0) as u64))
    })
}

fn max_string_per_request(format: Option<&str>) -> u64 {
    match format {
        Some("duration") => MAX_DURATION_SIZE_JSON,
        Some("date") => JSON_DATE_SIZE,
        Some("date-time") => MAX_DATETIME_SIZE_JSON,
        _ => MAX_REQUEST_SIZE_BYTES - 2,
    }
}

impl Decl {
    fn simple(kind: DeclKind, min_size: u64) -> Decl {
        Decl {
            kind,
            max_elements: 0,
            min_size,
        }
    }

    /// The declaration of a schema node (`SchemaDeclType`); `None` where CEL cannot see it.
    pub fn of(s: &Value) -> Option<Decl> {
        let obj = s.as_object()?;
        if obj
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            == Some(true)
        {
            let max = match u64_of(obj.get("maxLength")) {
                Some(m) => m.saturating_mul(4),
                None => MAX_REQUEST_SIZE_BYTES - 2,
            };
            return Some(Decl {
                kind: DeclKind::Dyn,
                max_elements: max,
                min_size: 1,
            });
        }
        let format = obj.get("format").and_then(Value::as_str);
        match obj.get("type").and_then(Value::as_str)? {
            "array" => {
                let items = Decl::of(obj.get("items")?)?;
                let max = u64_of(obj.get("maxItems"))
                    .unwrap_or((MAX_REQUEST_SIZE_BYTES - 2) / (items.min_size + 1));
                Some(Decl {
                    kind: DeclKind::List(Box::new(items)),
                    max_elements: max,
                    min_size: 2,
                })
            }
            "object" => {
                if let Some(ap) = obj.get("additionalProperties").filter(|v| v.is_object()) {
                    let vals = Decl::of(ap)?;
                    let max = u64_of(obj.get("maxProperties"))
                        .unwrap_or((MAX_REQUEST_SIZE_BYTES - 2) / (vals.min_size + 6));
                    return Some(Decl {
                        kind: DeclKind::Map(Box::new(vals)),
                        max_elements: max,
                        min_size: 2,
                    });
                }
                let required: Vec<&str> = obj
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut fields = BTreeMap::new();
                let mut min_size = 2;
                if let Some(props) = obj.get("properties").and_then(Value::as_object) {
                    for (name, p) in props {
                        if let Some(d) = Decl::of(p) {
                            if required.contains(&name.as_str()) && p.get("default").is_none() {
                                min_size += name.len() as u64 + d.min_size + 4;
                            }
                            fields.insert(name.clone(), d);
                        }
                    }
                }
                Some(Decl::simple(DeclKind::Object(fields), min_size))
            }
            "string" => Some(match format {
                Some("byte") => Decl {
                    kind: DeclKind::Bytes,
                    max_elements: u64_of(obj.get("maxLength"))
                        .unwrap_or(MAX_REQUEST_SIZE_BYTES - 2),
                    min_size: MIN_STRING_SIZE,
                },
                Some("duration") => Decl {
                    kind: DeclKind::Duration,
                    max_elements: MAX_DURATION_SIZE_JSON,
                    min_size: MIN_DURATION_SIZE_JSON,
                },
                Some("date") => Decl {
                    kind: DeclKind::Timestamp,
                    max_elements: JSON_DATE_SIZE,
                    min_size: JSON_DATE_SIZE,
                },
                Some("date-time") => Decl {
                    kind: DeclKind::Timestamp,
                    max_elements: MAX_DATETIME_SIZE_JSON,
                    min_size: MIN_DATETIME_SIZE_JSON,
                },
                _ => {
                    let max = if let Some(m) = u64_of(obj.get("maxLength")) {
                        // maxLength counts code points; a code point takes up to 4 bytes
                        m.saturating_mul(4)
                    } else if let Some(e) = obj.get("enum").and_then(Value::as_array) {
                        e.iter()
                            .filter_map(Value::as_str)
                            .map(|s| s.len() as u64)
                            .max()
                            .unwrap_or(0)
                    } else {
                        max_string_per_request(format)
                    };
                    Decl {
                        kind: DeclKind::String,
                        max_elements: max,
                        min_size: MIN_STRING_SIZE,
                    }
                }
            }),
            "boolean" => Some(Decl::simple(DeclKind::Bool, MIN_BOOL_SIZE)),
            "number" => Some(Decl::simple(DeclKind::Double, MIN_NUMBER_SIZE)),
            "integer" => Some(Decl::simple(DeclKind::Int, MIN_NUMBER_SIZE)),
            _ => None,
        }
    }

    fn ty(&self) -> Ty {
        match &self.kind {
            DeclKind::Object(_) => Ty::Object(Box::new(self.clone())),
            DeclKind::List(e) => Ty::List(Box::new(e.ty())),
            DeclKind::Map(v) => Ty::Map(Box::new(v.ty())),
            DeclKind::String => Ty::String,
            DeclKind::Bytes => Ty::Bytes,
            DeclKind::Int => Ty::Int,
            DeclKind::Double => Ty::Double,
            DeclKind::Bool => Ty::Bool,
            DeclKind::Timestamp => Ty::Timestamp,
            DeclKind::Duration => Ty::Duration,
            DeclKind::Dyn => Ty::Dyn,
        }
    }
}

/// The CEL type of an expression, as far as cost estimation needs it.
#[derive(Debug, Clone)]
enum Ty {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Timestamp,
    Duration,
    List(Box<Ty>),
    /// A map with string keys.
    Map(Box<Ty>),
    Object(Box<Decl>),
    /// An opaque library type (IP, CIDR, URL, quantity, ...).
    Opaque,
    Dyn,
}

impl Ty {
    fn is_scalar(&self) -> bool {
        matches!(
            self,
            Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::Timestamp | Ty::Duration
        )
    }

    fn is_stringish(&self) -> bool {
        matches!(self, Ty::String | Ty::Bytes)
    }
}

#[derive(Debug, Clone)]
struct LocalVar {
    path: Vec<String>,
    size: Option<Range>,
    ty: Ty,
}

struct Coster<'a> {
    root: &'a Decl,
    paths: HashMap<u64, Vec<String>>,
    sizes: HashMap<u64, Range>,
    types: HashMap<u64, Ty>,
    locals: HashMap<String, Vec<LocalVar>>,
}

fn literal_size(e: &IdedExpr) -> Option<Range> {
    match &e.expr {
        Expr::Literal(l) => Some(Range::fixed(match l {
            LiteralValue::String(s) => s.inner().chars().count() as u64,
            LiteralValue::Bytes(b) => b.inner().len() as u64,
            _ => 1,
        })),
        Expr::List(l) => Some(Range::fixed(l.elements.len() as u64)),
        Expr::Map(m) => Some(Range::fixed(m.entries.len() as u64)),
        _ => None,
    }
}

fn is_accumulator(name: &str) -> bool {
    name == "@result" || name == "__result__" || name == "@__result__"
}

impl Coster<'_> {
    fn ty(&self, e: &IdedExpr) -> Ty {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Dyn)
    }

    fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(name) = &e.expr
            && let Some(v) = self.locals.get(name).and_then(|s| s.last())
        {
            return v.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    /// The apiserver's `sizeEstimator`: walk the declaration along the path (whose
    /// first element is the root variable) and take that node's `MaxElements`.
    fn estimate_size(&self, path: &[String]) -> Option<Range> {
        if path.is_empty() || is_accumulator(&path[0]) {
            return None;
        }
        let mut node = self.root;
        for name in &path[1..] {
            node = match (name.as_str(), &node.kind) {
                ("@items", DeclKind::List(e)) | ("@values", DeclKind::List(e)) => e,
                ("@items", DeclKind::Map(v)) | ("@values", DeclKind::Map(v)) => v,
                ("@keys", DeclKind::Map(_)) => {
                    return Some(Range {
                        min: 0,
                        max: MAX_REQUEST_SIZE_BYTES - 2,
                    });
                }
                (field, DeclKind::Object(fields)) => fields.get(field)?,
                _ => return None,
            };
        }
        Some(Range {
            min: 0,
            max: node.max_elements,
        })
    }

    /// cel-go's `computeSize`.
    fn compute_size(&mut self, e: &IdedExpr) -> Option<Range> {
        if let Some(s) = self.sizes.get(&e.id) {
            return Some(*s);
        }
        if let Some(s) = literal_size(e) {
            return Some(s);
        }
        let path = self.path(e);
        if let Some(s) = self.estimate_size(&path) {
            self.sizes.insert(e.id, s);
            return Some(s);
        }
        if self.ty(e).is_scalar() {
            return Some(Range::fixed(1));
        }
        if let Expr::Ident(name) = &e.expr
            && let Some(v) = self.locals.get(name).and_then(|s| s.last())
        {
            return v.size;
        }
        None
    }

    fn size(&mut self, e: &IdedExpr) -> Range {
        self.compute_size(e).unwrap_or(Range::UNKNOWN)
    }

    fn cost(&mut self, e: &IdedExpr) -> Range {
        match &e.expr {
            Expr::Literal(l) => {
                let ty = match l {
                    LiteralValue::Boolean(_) => Ty::Bool,
                    LiteralValue::Bytes(_) => Ty::Bytes,
                    LiteralValue::Double(_) => Ty::Double,
                    LiteralValue::Int(_) => Ty::Int,
                    LiteralValue::Null => Ty::Null,
                    LiteralValue::String(_) => Ty::String,
                    LiteralValue::UInt(_) => Ty::Uint,
                };
                self.types.insert(e.id, ty);
                Range::fixed(0)
            }
            Expr::Ident(name) => {
                if let Some(v) = self.locals.get(name).and_then(|s| s.last()).cloned() {
                    self.paths.insert(e.id, v.path);
                    self.types.insert(e.id, v.ty);
                } else {
                    self.paths.insert(e.id, vec![name.clone()]);
                    let ty = if name == "self" || name == "oldSelf" {
                        self.root.ty()
                    } else {
                        Ty::Dyn
                    };
                    self.types.insert(e.id, ty);
                }
                Range::fixed(1)
            }
            Expr::Select(sel) => {
                let operand = self.cost(&sel.operand);
                if sel.test {
                    // Kubernetes keeps has() free (PresenceTestHasCost(false))
                    self.types.insert(e.id, Ty::Bool);
                    return operand;
                }
                let oty = self.ty(&sel.operand);
                let extra = match &oty {
                    Ty::Map(_) | Ty::Object(_) => 1,
                    _ => 0,
                };
                let fty = match &oty {
                    Ty::Object(d) => match &d.kind {
                        DeclKind::Object(f) => f.get(&sel.field).map(Decl::ty).unwrap_or(Ty::Dyn),
                        _ => Ty::Dyn,
                    },
                    Ty::Map(v) => (**v).clone(),
                    _ => Ty::Dyn,
                };
                self.types.insert(e.id, fty);
                let mut p = self.path(&sel.operand);
                p.push(sel.field.clone());
                self.paths.insert(e.id, p);
                operand.add(Range::fixed(extra))
            }
            Expr::Call(call) => self.cost_call(e, call),
            Expr::List(l) => {
                let mut sum = Range::fixed(0);
                for el in &l.elements {
                    sum = sum.add(self.cost(el));
                }
                let elem = l.elements.first().map(|x| self.ty(x)).unwrap_or(Ty::Dyn);
                self.types.insert(e.id, Ty::List(Box::new(elem)));
                sum.add(Range::fixed(10))
            }
            Expr::Map(m) => {
                let mut sum = Range::fixed(0);
                let mut vty = Ty::Dyn;
                for en in &m.entries {
                    if let EntryExpr::MapEntry(me) = &en.expr {
                        sum = sum.add(self.cost(&me.key)).add(self.cost(&me.value));
                        vty = self.ty(&me.value);
                    }
                }
                self.types.insert(e.id, Ty::Map(Box::new(vty)));
                sum.add(Range::fixed(30))
            }
            Expr::Struct(s) => {
                let mut sum = Range::fixed(0);
                for en in &s.entries {
                    if let EntryExpr::StructField(f) = &en.expr {
                        sum = sum.add(self.cost(&f.value));
                    }
                }
                self.types.insert(e.id, Ty::Dyn);
                sum.add(Range::fixed(40))
            }
            Expr::Comprehension(c) => {
                let mut sum = self.cost(&c.iter_range).add(self.cost(&c.accu_init));
                let accu = LocalVar {
                    path: self.path(&c.accu_init),
                    size: self.compute_size(&c.accu_init),
                    ty: self.ty(&c.accu_init),
                };
                self.locals
                    .entry(c.accu_var.clone())
                    .or_default()
                    .push(accu);
                let rty = self.ty(&c.iter_range);
                let (sub, ity) = match &rty {
                    Ty::Map(_) => ("@keys", Ty::String),
                    Ty::List(el) => ("@items", (**el).clone()),
                    _ => ("@items", Ty::Dyn),
                };
                let mut ipath = self.path(&c.iter_range);
                ipath.push(sub.to_string());
                self.locals
                    .entry(c.iter_var.clone())
                    .or_default()
                    .push(LocalVar {
                        path: ipath,
                        size: None,
                        ty: ity,
                    });
                let loop_cost = self.cost(&c.loop_cond);
                let step_cost = self.cost(&c.loop_step);
                // the accumulator's type is what the step makes of it
                if let Some(a) = self.locals.get_mut(&c.accu_var).and_then(|s| s.last_mut()) {
                    a.ty = self.types.get(&c.loop_step.id).cloned().unwrap_or(Ty::Dyn);
                }
                if let Some(s) = self.locals.get_mut(&c.iter_var) {
                    s.pop();
                }
                sum = sum.add(self.cost(&c.result));
                if let Some(s) = self.locals.get_mut(&c.accu_var) {
                    s.pop();
                }
                self.types.insert(e.id, self.ty(&c.result));
                let range_count = self.size(&c.iter_range);
                sum = sum.add(range_count.multiply(step_cost.add(loop_cost)));
                match &c.accu_init.expr {
                    Expr::Literal(_) => {
                        if let Some(s) = self.compute_size(&c.accu_init) {
                            self.sizes.insert(e.id, s);
                        }
                    }
                    Expr::List(_) | Expr::Map(_) => {
                        self.sizes.insert(e.id, range_count);
                    }
                    _ => {}
                }
                sum
            }
            Expr::Unspecified => Range::fixed(0),
        }
    }

    fn cost_call(&mut self, e: &IdedExpr, call: &kube_cel::cel::common::ast::CallExpr) -> Range {
        let f = call.func_name.as_str();
        let args = &call.args;
        let arg_costs: Vec<Range> = args.iter().map(|a| self.cost(a)).collect();
        let arg_sum = arg_costs.iter().fold(Range::fixed(0), |acc, c| acc.add(*c));
        let mut sum = Range::fixed(0);
        let target = call.target.as_deref();
        if let Some(t) = target {
            sum = sum.add(self.cost(t));
        }
        let aty = |c: &Self, i: usize| args.get(i).map(|a| c.ty(a)).unwrap_or(Ty::Dyn);
        let tty = target.map(|t| self.ty(t));
        let one = Range::fixed(1);
        let trav = |r: Range| r.by_factor(STRING_TRAVERSAL);
        let mut result_size: Option<Range> = None;
        let (fn_cost, ty): (Range, Ty) = match (f, target) {
            ("_&&_" | "_||_", None) if args.len() == 2 => (
                Range {
                    min: arg_costs[0].min,
                    max: arg_costs[0].add(arg_costs[1]).max,
                },
                Ty::Bool,
            ),
            ("_?_:_", None) if args.len() == 3 => {
                let size = self.size(&args[1]).union(self.size(&args[2]));
                result_size = Some(size);
                (
                    arg_costs[0].add(arg_costs[1].union(arg_costs[2])),
                    aty(self, 1),
                )
            }
            ("_==_" | "_!=_", None) if args.len() == 2 => {
                (self.compare_cost(&args[0], &args[1]).add(arg_sum), Ty::Bool)
            }
            ("_<_" | "_<=_" | "_>_" | "_>=_", None) if args.len() == 2 => {
                if aty(self, 0).is_stringish() {
                    (self.compare_cost(&args[0], &args[1]).add(arg_sum), Ty::Bool)
                } else {
                    (one.add(arg_sum), Ty::Bool)
                }
            }
            ("_+_", None) if args.len() == 2 => {
                let t0 = aty(self, 0);
                match t0 {
                    Ty::String | Ty::Bytes | Ty::List(_) => {
                        let size = self.size(&args[0]).add(self.size(&args[1]));
                        result_size = Some(size);
                        let c = if matches!(t0, Ty::List(_)) {
                            one
                        } else {
                            trav(size)
                        };
                        (c.add(arg_sum), t0)
                    }
                    other => (one.add(arg_sum), other),
                }
            }
            ("@in", None) if args.len() == 2 => match aty(self, 1) {
                Ty::Map(_) | Ty::Object(_) => (one.add(arg_sum), Ty::Bool),
                _ => (self.size(&args[1]).add(arg_sum), Ty::Bool),
            },
            ("_[_]", None) if args.len() == 2 => {
                let cty = aty(self, 0);
                let (sub, ety) = match &cty {
                    Ty::List(el) => ("@items", (**el).clone()),
                    Ty::Map(v) => ("@values", (**v).clone()),
                    _ => ("@items", Ty::Dyn),
                };
                let mut p = self.path(&args[0]);
                p.push(sub.to_string());
                self.paths.insert(e.id, p);
                (one.add(arg_sum), ety)
            }
            ("matches", Some(t)) if args.len() == 1 => {
                let s = self.size(t).add(one).by_factor(STRING_TRAVERSAL);
                let r = self.size(&args[0]).by_factor(REGEX_LENGTH);
                (s.multiply(r).add(arg_sum), Ty::Bool)
            }
            ("contains", Some(t)) if tty.as_ref().is_some_and(Ty::is_stringish) => {
                let s = trav(self.size(t));
                let sub = trav(self.size(&args[0]));
                (s.multiply(sub).add(arg_sum), Ty::Bool)
            }
            ("startsWith" | "endsWith", Some(_)) if args.len() == 1 => {
                (trav(self.size(&args[0])).add(arg_sum), Ty::Bool)
            }
            ("isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf", Some(t)) => {
                let ty = match f {
                    "isSorted" => Ty::Bool,
                    "indexOf" | "lastIndexOf" => Ty::Int,
                    _ => match &tty {
                        Some(Ty::List(el)) => (**el).clone(),
                        _ => Ty::Dyn,
                    },
                };
                let c = if let Some(Ty::List(el)) = &tty {
                    let mut el_cost = one;
                    if el.is_stringish() {
                        let mut p = self.path(t);
                        p.push("@items".into());
                        let es = self.estimate_size(&p).unwrap_or(Range::UNKNOWN);
                        el_cost = el_cost.add(trav(es));
                    }
                    self.size(t).multiply(el_cost)
                } else {
                    trav(self.size(t))
                };
                (c.add(arg_sum), ty)
            }
            ("url", None) if args.len() == 1 => {
                (trav(self.size(&args[0])).add(arg_sum), Ty::Opaque)
            }
            ("lowerAscii" | "upperAscii" | "substring" | "trim", Some(t)) => {
                let s = self.size(t);
                result_size = Some(s);
                (trav(s).add(arg_sum), Ty::String)
            }
            ("replace", Some(t)) if args.len() >= 2 => {
                let s = self.size(t);
                let from = self.size(&args[0]);
                let with = self.size(&args[1]);
                result_size = Some(replace_size(s, from, with));
                (s.by_factor(2.0 * STRING_TRAVERSAL).add(arg_sum), Ty::String)
            }
            ("split", Some(t)) => {
                let s = self.size(t);
                let mut max = s.max;
                if let Some(Expr::Literal(LiteralValue::Int(n))) = args.get(1).map(|a| &a.expr) {
                    max = (*n.inner()).max(0) as u64;
                }
                result_size = Some(Range { min: 0, max });
                (
                    s.by_factor(2.0 * STRING_TRAVERSAL).add(arg_sum),
                    Ty::List(Box::new(Ty::String)),
                )
            }
            ("join", Some(t)) => {
                let list = self.size(t);
                let mut p = self.path(t);
                p.push("@items".into());
                let el = self.estimate_size(&p).unwrap_or(Range::UNKNOWN);
                let mut s = list.multiply(el);
                if let Some(sep) = args.first() {
                    let sep = self.size(sep);
                    let seps = Range {
                        min: list.min.saturating_sub(1),
                        max: list.max.saturating_sub(1),
                    };
                    s = s.add(sep.multiply(seps));
                }
                result_size = Some(s);
                (trav(s).add(arg_sum), Ty::String)
            }
            ("find" | "findAll", Some(t)) if !args.is_empty() => {
                let s = self.size(t);
                let sc = s.add(one).by_factor(STRING_TRAVERSAL);
                let rc = self.size(&args[0]).by_factor(REGEX_LENGTH);
                result_size = Some(Range { min: 0, max: s.max });
                let ty = if f == "find" {
                    Ty::String
                } else {
                    Ty::List(Box::new(Ty::String))
                };
                (sc.multiply(rc).add(arg_sum), ty)
            }
            ("cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity", None) if args.len() == 1 => {
                let ty = if f.starts_with("is") {
                    Ty::Bool
                } else {
                    Ty::Opaque
                };
                (trav(self.size(&args[0])).add(arg_sum), ty)
            }
            ("ip", None) if args.len() == 1 => (trav(self.size(&args[0])).add(arg_sum), Ty::Opaque),
            ("ip", Some(_)) if args.is_empty() => (one.add(arg_sum), Ty::Opaque),
            ("ip.isCanonical", None) if args.len() == 1 => (
                self.size(&args[0])
                    .by_factor(2.0 * STRING_TRAVERSAL)
                    .add(arg_sum),
                Ty::Bool,
            ),
            ("masked", _) => (one.add(arg_sum), Ty::Opaque),
            ("prefixLength" | "family", _) => (one.add(arg_sum), Ty::Int),
            ("isUnspecified" | "isLoopback" | "isLinkLocalMulticast" | "isLinkLocalUnicast", _) => {
                (one.add(arg_sum), Ty::Bool)
            }
            ("containsIP" | "containsCIDR", Some(_)) if args.len() == 1 => {
                let sz = Range { min: 4, max: 16 };
                let mut c = trav(sz.add(sz));
                if f == "containsCIDR" {
                    c = c.add(trav(sz)).add(one);
                }
                if matches!(aty(self, 0), Ty::String) {
                    c = c.add(trav(self.size(&args[0])));
                }
                (c.add(arg_sum), Ty::Bool)
            }
            (
                "sign" | "asInteger" | "isInteger" | "asApproximateFloat" | "isGreaterThan"
                | "isLessThan" | "compareTo" | "add" | "sub",
                Some(_),
            ) => (one.add(arg_sum), Ty::Dyn),
            ("dyn", None) if args.len() == 1 => {
                if let Some(s) = self.compute_size(&args[0]) {
                    self.sizes.insert(e.id, s);
                }
                (one.add(arg_sum), aty(self, 0))
            }
            ("bytes", None) if args.len() == 1 && matches!(aty(self, 0), Ty::String) => {
                let s = self.size(&args[0]);
                result_size = Some(Range {
                    min: s.min,
                    max: s.max.saturating_mul(4),
                });
                (trav(s).add(arg_sum), Ty::Bytes)
            }
            ("string", None) if args.len() == 1 && matches!(aty(self, 0), Ty::Bytes) => {
                let s = self.size(&args[0]);
                result_size = Some(Range {
                    min: s.min / 4,
                    max: s.max,
                });
                (trav(s).add(arg_sum), Ty::String)
            }
            _ => (
                one.add(arg_sum),
                default_result_type(f, tty.as_ref(), self, args),
            ),
        };
        self.types.insert(e.id, ty);
        let size = match result_size {
            Some(s) => Some(s),
            None => self.compute_size(e),
        };
        if let Some(s) = size {
            self.sizes.insert(e.id, s);
        }
        sum.add(fn_cost)
    }

    fn compare_cost(&mut self, a: &IdedExpr, b: &IdedExpr) -> Range {
        let l = self.size(a);
        let r = self.size(b);
        let smallest = l.max.min(r.max);
        let min = u64::from(smallest > 0);
        Range { min, max: smallest }.by_factor(STRING_TRAVERSAL)
    }
}

fn default_result_type(f: &str, target: Option<&Ty>, c: &Coster<'_>, args: &[IdedExpr]) -> Ty {
    match f {
        "!_"
        | "@not_strictly_false"
        | "isURL"
        | "isFormat"
        | "startsWith"
        | "endsWith"
        | "contains"
        | "exists"
        | "all"
        | "isSemver"
        | "bool" => Ty::Bool,
        "size" | "int" | "charAt" => match f {
            "charAt" => Ty::String,
            _ => Ty::Int,
        },
        "uint" => Ty::Uint,
        "double" => Ty::Double,
        "string" | "getScheme" | "getHost" | "getHostname" | "getPort" | "getEscapedPath"
        | "format" | "quote" | "reverse" => Ty::String,
        "timestamp" => Ty::Timestamp,
        "duration" => Ty::Duration,
        "getQuery" => Ty::Map(Box::new(Ty::List(Box::new(Ty::String)))),
        "-_" | "_-_" | "_*_" | "_/_" | "_%_" => args.first().map(|a| c.ty(a)).unwrap_or(Ty::Dyn),
        _ => match target {
            Some(Ty::Opaque) => Ty::Dyn,
            _ => Ty::Dyn,
        },
    }
}

fn replace_size(sz: Range, from: Range, with: Range) -> Range {
    let mut count = Range::fixed(0);
    let mut retained = Range::fixed(0);
    if from.min == 0 {
        count.max = if sz.max < u64::MAX {
            sz.max + 1
        } else {
            sz.max
        };
        retained.max = sz.max;
    } else if with.max <= from.min {
        retained.max = sz.max;
    } else {
        count.max = (sz.max as f64 / from.min as f64).ceil() as u64;
    }
    if from.max == 0 {
        count.min = if sz.min < u64::MAX {
            sz.min + 1
        } else {
            sz.min
        };
        retained.min = sz.min;
    } else if from.max <= with.min {
        retained.min = sz.min;
    } else {
        count.min = (sz.min as f64 / from.max as f64).ceil() as u64;
    }
    count.multiply(with).add(retained)
}

/// Worst-case cost of one evaluation of `rule` with `self` declared as `root`;
/// `None` when the rule does not parse (compilation errors are reported elsewhere).
pub fn rule_cost(rule: &str, root: &Decl) -> Option<u64> {
    let expr = Parser::new().parse(rule).ok()?;
    let mut c = Coster {
        root,
        paths: HashMap::new(),
        sizes: HashMap::new(),
        types: HashMap::new(),
        locals: HashMap::new(),
    };
    Some(c.cost(&expr).max)
}

/// How often a node whose declaration is `d` can occur in one request when the
/// lists and maps above it are unbounded (`maxCardinality`).
fn unbounded_cardinality(d: &Decl) -> u64 {
    MAX_REQUEST_SIZE_BYTES / (d.min_size + 1)
}

/// The estimated cost of one rule of a CRD schema.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleCost {
    /// Field path of the rule, relative to the schema, e.g.
    /// `openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule`.
    pub path: String,
    /// The rule.
    pub rule: String,
    /// Worst-case cost of one evaluation.
    pub per_call: u64,
    /// How often the rule may be evaluated in one request.
    pub cardinality: u64,
    /// `per_call * cardinality`: the figure checked against the limits.
    pub cost: u64,
}

/// The estimated cost of every rule of an `openAPIV3Schema`, in schema order.
pub fn schema_rule_costs(schema: &Value) -> Vec<RuleCost> {
    let mut out = Vec::new();
    walk(schema, "openAPIV3Schema".to_string(), Some(1), &mut out);
    out
}

fn max_elements_of(s: &Value) -> Option<u64> {
    match s.get("type").and_then(Value::as_str) {
        Some("object") if s.get("additionalProperties").is_some_and(|a| !a.is_null()) => {
            u64_of(s.get("maxProperties"))
        }
        Some("array") => u64_of(s.get("maxItems")),
        _ => Some(1),
    }
}

fn walk(s: &Value, path: String, card: Option<u64>, out: &mut Vec<RuleCost>) {
    let Some(obj) = s.as_object() else {
        return;
    };
    if let Some(rules) = obj
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        && let Some(decl) = Decl::of(s)
    {
        for (i, r) in rules.iter().enumerate() {
            // a messageExpression is estimated and limited like its rule
            for field in ["rule", "messageExpression"] {
                let Some(expr) = r.get(field).and_then(Value::as_str) else {
                    continue;
                };
                let Some(per_call) = rule_cost(expr, &decl) else {
                    continue;
                };
                let cardinality = card.unwrap_or_else(|| unbounded_cardinality(&decl));
                out.push(RuleCost {
                    path: format!("{path}.x-kubernetes-validations[{i}].{field}"),
                    rule: expr.to_string(),
                    per_call,
                    cardinality,
                    cost: per_call.saturating_mul(cardinality),
                });
            }
        }
    }
    let child_card = match (card, max_elements_of(s)) {
        (Some(c), Some(m)) => Some(c.saturating_mul(m)),
        _ => None,
    };
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            walk(p, format!("{path}.properties[{name}]"), child_card, out);
        }
    }
    if let Some(items) = obj.get("items") {
        walk(items, format!("{path}.items"), child_card, out);
    }
    if let Some(ap) = obj.get("additionalProperties").filter(|a| a.is_object()) {
        walk(ap, format!("{path}.additionalProperties"), child_card, out);
    }
}

/// The server's wording of how far a cost exceeds its limit (`getCostErrorMessage`).
pub fn cost_error_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let shown = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {shown} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// The `Forbidden` causes the real server reports for a schema over the CEL
/// cost budget; `prefix` is where the schema sits (`spec.validation.` for a
/// CRD whose versions share one schema, else `spec.versions[i].schema.`).
pub fn budget_causes(schema: &Value, prefix: &str) -> Vec<Cause> {
    let costs = schema_rule_costs(schema);
    let mut causes = Vec::new();
    let mut total: u64 = 0;
    let mut expensive: Vec<&RuleCost> = Vec::new();
    for c in &costs {
        if c.cost > STATIC_ESTIMATED_COST_LIMIT {
            causes.push(forbidden(
                format!("{prefix}{}", c.path),
                cost_error_message(
                    if c.path.ends_with(".messageExpression") {
                        "estimated messageExpression cost"
                    } else {
                        "estimated rule cost"
                    },
                    c.cost,
                    STATIC_ESTIMATED_COST_LIMIT,
                ),
            ));
        }
        total = total.saturating_add(c.cost);
        if c.cost >= STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            expensive.push(c);
            // stable, so equal costs keep schema order as the server's sort.Slice mostly does
            expensive.sort_by_key(|c| std::cmp::Reverse(c.cost));
            expensive.truncate(4);
        }
    }
    if total > STATIC_ESTIMATED_CRD_COST_LIMIT {
        for c in expensive {
            causes.push(forbidden(
                format!("{prefix}{}", c.path),
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema".to_string(),
            ));
        }
        causes.push(forbidden(
            format!("{prefix}openAPIV3Schema"),
            cost_error_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total,
                STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
    causes
}

fn forbidden(field: String, msg: String) -> Cause {
    Cause::new("FieldValueForbidden", field, format!("Forbidden: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cost(rule: &str, schema: Value) -> u64 {
        let d = Decl::of(&schema).expect("decl");
        rule_cost(rule, &d).expect("parses")
    }

    #[test]
    fn unbounded_string_costs_a_tenth_of_the_request_size_to_parse() {
        // the real server: isCIDR(self) on an unbounded string under a list of
        // maxItems 32 exceeded the 10M budget by 1.006637x, i.e. 314,574 per call
        assert_eq!(cost("isCIDR(self)", json!({"type": "string"})), 314_574);
        assert_eq!(
            cost("isCIDR(self)", json!({"type": "string", "maxLength": 43})),
            1 + 18
        );
    }

    #[test]
    fn comprehension_multiplies_the_body_by_the_list_size() {
        let s = json!({"type": "object", "properties": {
            "items": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 5}}
        }});
        // range: self(1)+select(1); per item: not_strictly_false(1+1) + and(1 + p.size()...)
        let c = cost("self.items.all(x, x.size() < 3)", s);
        // per item: loop 2, step: accu(1) + (size: x 1 + 1, < : 1 + 0) = 4 -> 6 x 10 = 60, + 2 + result 1
        assert_eq!(c, 63);
    }

    #[test]
    fn has_is_free_and_string_equality_scales_with_the_shorter_string() {
        let s = json!({"type": "object", "properties": {
            "a": {"type": "string", "maxLength": 100},
            "b": {"type": "string", "maxLength": 10}
        }});
        // has: 1+0; a: 2; b: 2; ==: ceil(40*0.1)=4
        assert_eq!(
            cost("!has(self.a) || self.a == self.b", s),
            1 + 1 + 2 + 2 + 4
        );
    }

    #[test]
    fn a_message_expression_is_limited_like_its_rule() {
        let s = json!({"type": "object", "properties": {"l": {"type": "array",
            "items": {"type": "string", "x-kubernetes-validations": [
                {"rule": "self.size() > 0", "messageExpression": "'bad: ' + self"}]}}}});
        let causes = budget_causes(&s, "spec.validation.");
        assert!(
            causes.iter().any(|c| c.field
                == "spec.validation.openAPIV3Schema.properties[l].items.x-kubernetes-validations[0].messageExpression"
                && c.message.starts_with("Forbidden: estimated messageExpression cost exceeds budget by factor of more than 100x")),
            "{causes:?}"
        );
    }

    #[test]
    fn messages_match_the_servers_formatting() {
        assert!(
            cost_error_message(
                "estimated rule cost",
                10_066_368,
                STATIC_ESTIMATED_COST_LIMIT
            )
            .starts_with("estimated rule cost exceeds budget by factor of 1.006637x (try")
        );
        assert!(
            cost_error_message("x", 1_410_000_000, STATIC_ESTIMATED_CRD_COST_LIMIT)
                .contains("factor of 14.1x")
        );
        assert!(
            cost_error_message("x", 2_000_000_000, STATIC_ESTIMATED_COST_LIMIT)
                .contains("factor of more than 100x")
        );
    }

    #[test]
    fn cardinality_is_the_product_of_enclosing_max_items_or_the_request_bound() {
        let s = json!({"type": "object", "properties": {
            "l": {"type": "array", "maxItems": 4, "items": {"type": "object", "properties": {
                "m": {"type": "array", "maxItems": 5, "items": {"type": "string", "maxLength": 1,
                    "x-kubernetes-validations": [{"rule": "self != ''"}]}}}}},
            "u": {"type": "array", "items": {"type": "string", "maxLength": 1,
                    "x-kubernetes-validations": [{"rule": "self != ''"}]}}
        }});
        let costs = schema_rule_costs(&s);
        assert_eq!(costs.len(), 2);
        assert_eq!(costs[0].cardinality, 20);
        assert_eq!(
            costs[0].path,
            "openAPIV3Schema.properties[l].items.properties[m].items.x-kubernetes-validations[0].rule"
        );
        // an unbounded list: as many 2-byte strings as fit a request, with commas
        assert_eq!(costs[1].cardinality, MAX_REQUEST_SIZE_BYTES / 3);
    }
}
