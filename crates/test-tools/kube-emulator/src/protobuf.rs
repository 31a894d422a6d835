//! Minimal decoding of Kubernetes protobuf request bodies.
//!
//! kubectl encodes built-in objects as protobuf for its typed generators
//! (`kubectl create namespace|configmap|secret|serviceaccount`). Only those
//! kinds are decoded (into the JSON form); everything else is answered with
//! 415, as documented in the README. Responses are always JSON, which kubectl
//! accepts (`Accept: application/vnd.kubernetes.protobuf,application/json`).

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};
use crate::util::base64_encode;

/// The envelope prefix of Kubernetes protobuf payloads.
const MAGIC: &[u8] = b"k8s\x00";

#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    Msg(&'static [Field]),
    /// `map<string,string>`.
    MapStr,
    /// `map<string,bytes>` (base64 values).
    MapBytes,
    /// `metav1.Time` (seconds + nanos) as RFC 3339.
    Time,
}

#[derive(Clone, Copy)]
struct Field {
    num: u64,
    name: &'static str,
    ty: Ty,
    repeated: bool,
}

const fn f(num: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        num,
        name,
        ty,
        repeated: false,
    }
}

const fn r(num: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        num,
        name,
        ty,
        repeated: true,
    }
}

const OWNER_REF: &[Field] = &[
    f(1, "kind", Ty::Str),
    f(3, "name", Ty::Str),
    f(4, "uid", Ty::Str),
    f(5, "apiVersion", Ty::Str),
    f(6, "controller", Ty::Bool),
    f(7, "blockOwnerDeletion", Ty::Bool),
];

const OBJECT_META: &[Field] = &[
    f(1, "name", Ty::Str),
    f(2, "generateName", Ty::Str),
    f(3, "namespace", Ty::Str),
    f(5, "uid", Ty::Str),
    f(6, "resourceVersion", Ty::Str),
    f(7, "generation", Ty::Int),
    f(8, "creationTimestamp", Ty::Time),
    f(9, "deletionTimestamp", Ty::Time),
    f(10, "deletionGracePeriodSeconds", Ty::Int),
    f(11, "labels", Ty::MapStr),
    f(12, "annotations", Ty::MapStr),
    r(13, "ownerReferences", Ty::Msg(OWNER_REF)),
    r(14, "finalizers", Ty::Str),
];

const NAMESPACE: &[Field] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(2, "spec", Ty::Msg(&[r(1, "finalizers", Ty::Str)])),
    f(3, "status", Ty::Msg(&[f(1, "phase", Ty::Str)])),
];

const CONFIG_MAP: &[Field] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(2, "data", Ty::MapStr),
    f(3, "binaryData", Ty::MapBytes),
    f(4, "immutable", Ty::Bool),
];

const SECRET: &[Field] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(2, "data", Ty::MapBytes),
    f(3, "type", Ty::Str),
    f(4, "stringData", Ty::MapStr),
    f(5, "immutable", Ty::Bool),
];

const SERVICE_ACCOUNT: &[Field] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(4, "automountServiceAccountToken", Ty::Bool),
];

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn malformed(what: &str) -> ApiError {
    ApiError::bad_request(format!("malformed protobuf body: {what}"))
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> ApiResult<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| malformed("truncated varint"))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed("varint too long"))
    }

    fn bytes(&mut self) -> ApiResult<&'a [u8]> {
        let len = usize::try_from(self.varint()?).map_err(|_| malformed("length overflow"))?;
        let end = self.pos.checked_add(len).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| malformed("truncated field"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn skip(&mut self, wire: u64) -> ApiResult<()> {
        match wire {
            0 => self.varint().map(|_| ()),
            1 => self.advance(8),
            2 => self.bytes().map(|_| ()),
            5 => self.advance(4),
            _ => Err(malformed("unsupported wire type")),
        }
    }

    fn advance(&mut self, n: usize) -> ApiResult<()> {
        if self.pos + n > self.buf.len() {
            return Err(malformed("truncated fixed field"));
        }
        self.pos += n;
        Ok(())
    }

    /// Iterate over (field number, wire type) pairs.
    fn next_key(&mut self) -> ApiResult<Option<(u64, u64)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        Ok(Some((key >> 3, key & 7)))
    }
}

fn utf8(b: &[u8]) -> ApiResult<String> {
    String::from_utf8(b.to_vec()).map_err(|_| malformed("invalid UTF-8 in string field"))
}

fn map_entry(b: &[u8], bytes_value: bool) -> ApiResult<(String, Value)> {
    let mut rd = Reader { buf: b, pos: 0 };
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    while let Some((num, wire)) = rd.next_key()? {
        match (num, wire) {
            (1, 2) => k = utf8(rd.bytes()?)?,
            (2, 2) => {
                let raw = rd.bytes()?;
                v = if bytes_value {
                    json!(base64_encode(raw))
                } else {
                    json!(utf8(raw)?)
                };
            }
            _ => rd.skip(wire)?,
        }
    }
    Ok((k, v))
}

fn time(b: &[u8]) -> ApiResult<Value> {
    let mut rd = Reader { buf: b, pos: 0 };
    let mut secs: i64 = 0;
    while let Some((num, wire)) = rd.next_key()? {
        match (num, wire) {
            (1, 0) => secs = rd.varint()? as i64,
            _ => rd.skip(wire)?,
        }
    }
    let ts = jiff::Timestamp::from_second(secs).map_err(|_| malformed("timestamp out of range"))?;
    Ok(json!(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn message(b: &[u8], fields: &[Field]) -> ApiResult<Value> {
    let mut out = Map::new();
    let mut rd = Reader { buf: b, pos: 0 };
    while let Some((num, wire)) = rd.next_key()? {
        let Some(fd) = fields.iter().find(|fd| fd.num == num) else {
            rd.skip(wire)?;
            continue;
        };
        let value = match (fd.ty, wire) {
            (Ty::Int, 0) => json!(rd.varint()? as i64),
            (Ty::Bool, 0) => json!(rd.varint()? != 0),
            (Ty::Str, 2) => json!(utf8(rd.bytes()?)?),
            (Ty::Msg(sub), 2) => message(rd.bytes()?, sub)?,
            (Ty::Time, 2) => time(rd.bytes()?)?,
            (Ty::MapStr | Ty::MapBytes, 2) => {
                let (k, v) = map_entry(rd.bytes()?, matches!(fd.ty, Ty::MapBytes))?;
                let entry = out.entry(fd.name).or_insert_with(|| json!({}));
                if let Value::Object(m) = entry {
                    m.insert(k, v);
                }
                continue;
            }
            _ => {
                rd.skip(wire)?;
                continue;
            }
        };
        if fd.repeated {
            let entry = out.entry(fd.name).or_insert_with(|| json!([]));
            if let Value::Array(a) = entry {
                a.push(value);
            }
        } else {
            out.insert(fd.name.to_string(), value);
        }
    }
    Ok(Value::Object(out))
}

/// Decode a `application/vnd.kubernetes.protobuf` body of a supported kind into JSON.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let unsupported = || ApiError::unsupported_media_type("application/vnd.kubernetes.protobuf");
    let payload = body.strip_prefix(MAGIC).ok_or_else(unsupported)?;
    let mut rd = Reader {
        buf: payload,
        pos: 0,
    };
    let (mut api_version, mut kind, mut raw): (String, String, &[u8]) =
        (String::new(), String::new(), &[]);
    while let Some((num, wire)) = rd.next_key()? {
        match (num, wire) {
            (1, 2) => {
                let tm = message(
                    rd.bytes()?,
                    &[f(1, "apiVersion", Ty::Str), f(2, "kind", Ty::Str)],
                )?;
                api_version = tm["apiVersion"].as_str().unwrap_or("").to_string();
                kind = tm["kind"].as_str().unwrap_or("").to_string();
            }
            (2, 2) => raw = rd.bytes()?,
            _ => rd.skip(wire)?,
        }
    }
    let fields = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        _ => return Err(unsupported()),
    };
    let mut obj = message(raw, fields)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![((num << 3) | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_a_configmap() {
        let meta = [
            field(1, b"cm"),
            field(11, &[field(1, b"app"), field(2, b"web")].concat()),
        ]
        .concat();
        let obj = [
            field(1, &meta),
            field(2, &[field(1, b"k"), field(2, b"v")].concat()),
        ]
        .concat();
        let tm = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), field(1, &tm), field(2, &obj)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"app": "web"}}, "data": {"k": "v"}})
        );
    }
}
