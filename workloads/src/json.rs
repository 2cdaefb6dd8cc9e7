//! JSON for `adgauge eval`: the explicit histogram case (`adgauge eval hist-<op> --input
//! case.json`), numbers and matrices in inputs, and the shortest-decimal JSON every workload prints.
//!
//! Input: `{"k": K, "inds": [..n integers], "vals": [..n], "dest": [..K], "hist_bar": [..K],
//! "vals_dot": [..n], "dest_dot": [..K], "op": "<name>"}`; numbers may also be the strings
//! "inf", "-inf" and "nan". Every problem is reported with the field (and element) it concerns,
//! and sizes are checked against the arrays actually present before anything is allocated from
//! them, so an absurd `k` is an error, never an allocation.

use serde_json::{Map, Value};

use adgauge_backends::DType;
use adgauge_datasets::hist::HistData;

use crate::workload::{WResult, WorkloadError};

fn bad_input(message: impl Into<String>) -> WorkloadError {
    WorkloadError::BadInput(message.into())
}

/// Largest accepted number of bins.
pub const MAX_K: u64 = 1 << 32;

const FIELDS: [&str; 8] = ["k", "inds", "vals", "dest", "hist_bar", "vals_dot", "dest_dot", "op"];

/// A parsed histogram case.
#[derive(Clone, Debug, PartialEq)]
pub struct HistCase {
    pub data: HistData,
    pub hist_bar: Option<Vec<f64>>,
    pub vals_dot: Option<Vec<f64>>,
    pub dest_dot: Option<Vec<f64>>,
}

/// Parses JSON text into a value, refusing an object with the same key twice: serde_json keeps
/// the last one silently, and an input whose `vals` appear twice is ambiguous, not valid. The
/// error names the key, with the line and column where its second occurrence ends.
pub fn parse_json(text: &str, source: &str) -> WResult<Value> {
    serde_json::from_str::<Strict>(text)
        .map(|Strict(v)| v)
        .map_err(|e| bad_input(format!("{source}: not valid JSON: {e}")))
}

/// A JSON value deserialized with duplicate keys refused (see [`parse_json`]).
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("duplicate key \"{key}\"")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// Refuses finite inputs that `dtype` cannot hold (a 1e39 in f32 would silently become inf):
/// the error names the field, the element and the value.
pub fn check_representable(source: &str, field: &str, xs: &[f64], dtype: DType) -> WResult<()> {
    if let Some((i, x)) = xs.iter().enumerate().find(|(_, x)| x.is_finite() && !dtype.round(**x).is_finite()) {
        return Err(bad_input(format!("{source}: field {field}[{i}]: {x:e} overflows {}", dtype.name())));
    }
    Ok(())
}

impl HistCase {
    /// [`check_representable`] over every field of the case.
    pub fn check_representable(&self, source: &str, dtype: DType) -> WResult<()> {
        check_representable(source, "vals", &self.data.vals, dtype)?;
        check_representable(source, "dest", &self.data.dest, dtype)?;
        for (field, xs) in [("hist_bar", &self.hist_bar), ("vals_dot", &self.vals_dot), ("dest_dot", &self.dest_dot)] {
            if let Some(xs) = xs {
                check_representable(source, field, xs, dtype)?;
            }
        }
        Ok(())
    }
}

/// Parses a case; `source` names the file in messages, `op` is the workload's operator name.
pub fn parse_hist_case(text: &str, source: &str, op: &str) -> WResult<HistCase> {
    hist_case_from_value(&parse_json(text, source)?, source, op)
}

/// [`parse_hist_case`] of a JSON value already parsed (a protocol message's input: read as it
/// is, neither printed nor parsed again).
pub fn hist_case_from_value(value: &Value, source: &str, op: &str) -> WResult<HistCase> {
    hist_case_with_fields(value, source, op, &[])
}

/// [`hist_case_from_value`] that also accepts the fields `also` (read by the caller: the `hist`
/// module's `rule` and `index_dtype`).
pub fn hist_case_with_fields(value: &Value, source: &str, op: &str, also: &[&str]) -> WResult<HistCase> {
    let Value::Object(obj) = value else {
        return Err(bad_input(format!("{source}: expected a JSON object at the top level, found {}", kind(value))));
    };
    if let Some(extra) = obj.keys().find(|key| !FIELDS.contains(&key.as_str()) && !also.contains(&key.as_str())) {
        let expected: Vec<&str> = FIELDS.iter().chain(also).copied().collect();
        return Err(bad_input(format!("{source}: unknown field '{extra}' (expected {})", expected.join(", "))));
    }
    let err = |field: &str, msg: String| bad_input(format!("{source}: field {field}: {msg}"));
    if let Some(v) = obj.get("op") {
        match v.as_str() {
            Some(s) if s == op => {}
            Some(s) => {
                return Err(err("op", format!("'{s}' does not match the workload's operator '{op}'")));
            }
            None => return Err(err("op", format!("expected a string, found {}", kind(v)))),
        }
    }
    let k = match obj.get("k") {
        None => return Err(err("k", "missing (the number of bins is required)".into())),
        Some(v) => parse_k(v).map_err(|m| err("k", m))?,
    };
    let inds = parse_indices(obj, "inds").map_err(|(f, m)| err(&f, m))?;
    let n = inds.len();
    let vals = required_numbers(obj, "vals", n, "len(inds)").map_err(|(f, m)| err(&f, m))?;
    let dest = required_numbers(obj, "dest", k, "k").map_err(|(f, m)| err(&f, m))?;
    let optional = |name: &str, len: usize, what: &str| -> WResult<Option<Vec<f64>>> {
        match obj.get(name) {
            None => Ok(None),
            Some(_) => required_numbers(obj, name, len, what).map(Some).map_err(|(f, m)| err(&f, m)),
        }
    };
    Ok(HistCase {
        hist_bar: optional("hist_bar", k, "k")?,
        vals_dot: optional("vals_dot", n, "len(inds)")?,
        dest_dot: optional("dest_dot", k, "k")?,
        data: HistData { k, inds, vals, dest },
    })
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_k(v: &Value) -> Result<usize, String> {
    if let Some(k) = v.as_u64() {
        if k > MAX_K {
            return Err(format!("{k} bins is more than the limit of {MAX_K}"));
        }
        return Ok(k as usize);
    }
    match v {
        Value::Number(x) if x.as_i64().is_some() => Err(format!("must be >= 0, got {x}")),
        Value::Number(x) => Err(format!("must be a whole number of bins, got {x}")),
        other => Err(format!("expected an integer, found {}", kind(other))),
    }
}

type FieldError = (String, String);

fn array<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a Vec<Value>, FieldError> {
    match obj.get(name) {
        None => Err((name.into(), "missing".into())),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err((name.into(), format!("expected an array, found {}", kind(other)))),
    }
}

fn parse_indices(obj: &Map<String, Value>, name: &str) -> Result<Vec<i64>, FieldError> {
    array(obj, name)?
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Number(x) => {
                x.as_i64().ok_or_else(|| (format!("{name}[{i}]"), format!("expected an integer index, got {x}")))
            }
            other => Err((format!("{name}[{i}]"), format!("expected an integer index, found {}", kind(other)))),
        })
        .collect()
}

fn required_numbers(obj: &Map<String, Value>, name: &str, len: usize, what: &str) -> Result<Vec<f64>, FieldError> {
    let a = array(obj, name)?;
    if a.len() != len {
        return Err((name.into(), format!("has {} elements but {what} is {len}", a.len())));
    }
    a.iter().enumerate().map(|(i, v)| parse_number(v).map_err(|m| (format!("{name}[{i}]"), m))).collect()
}

/// A number, or one of the strings "inf", "-inf", "nan".
pub fn parse_number(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(x) => x.as_f64().ok_or_else(|| format!("{x} is not representable")),
        Value::String(s) => match s.as_str() {
            "inf" | "+inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            "nan" => Ok(f64::NAN),
            _ => Err(format!("expected a number or \"inf\", \"-inf\", \"nan\", got \"{s}\"")),
        },
        other => Err(format!("expected a number, found {}", kind(other))),
    }
}

/// One value as JSON: the shortest decimal that reads back as the same value of `dtype`;
/// non-finite values as the strings "inf", "-inf", "nan".
pub fn format_number(x: f64, dtype: DType) -> String {
    if x.is_nan() {
        "\"nan\"".into()
    } else if x.is_infinite() {
        if x > 0.0 { "\"inf\"".into() } else { "\"-inf\"".into() }
    } else {
        match dtype {
            DType::F32 => format!("{:?}", x as f32),
            DType::F64 => format!("{x:?}"),
        }
    }
}

/// `[x, ...]`.
pub fn format_array(xs: &[f64], dtype: DType) -> String {
    let nums: Vec<String> = xs.iter().map(|&x| format_number(x, dtype)).collect();
    format!("[{}]", nums.join(", "))
}

/// `[[..], ...]`: `xs` as `count` rows of equal length (rows may be empty).
pub fn format_rows(xs: &[f64], count: usize, dtype: DType) -> String {
    let per = xs.len().checked_div(count).unwrap_or(0);
    let rows: Vec<String> = (0..count).map(|i| format_array(&xs[i * per..(i + 1) * per], dtype)).collect();
    format!("[{}]", rows.join(", "))
}

/// `{"name": [..], ...}` with the fields in the given order.
pub fn format_object(fields: &[(&str, &[f64])], dtype: DType) -> String {
    let parts: Vec<String> =
        fields.iter().map(|(name, xs)| format!("\"{name}\": {}", format_array(xs, dtype))).collect();
    format!("{{{}}}", parts.join(", "))
}

/// `xs` as rows of `width` numbers (JSON values), as GradBench's inputs nest their matrices.
pub fn rows_json(xs: &[f64], width: usize) -> Value {
    Value::Array(xs.chunks(width.max(1)).map(|row| Value::from(row.to_vec())).collect())
}

/// A matrix field of `obj`: a non-empty array of rows of equal length (`width`, when given) of
/// finite numbers, flattened row by row; returns (rows, width, values). Messages name the field
/// and element.
pub fn parse_rows(obj: &Value, field: &str, source: &str, width: Option<usize>) -> WResult<(usize, usize, Vec<f64>)> {
    let err = |at: String, msg: String| bad_input(format!("{source}: field {at}: {msg}"));
    let rows = match obj.get(field) {
        None => return Err(err(field.into(), "missing".into())),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(err(field.into(), "expected an array of rows (arrays of numbers)".into())),
    };
    if rows.is_empty() {
        return Err(err(field.into(), "has no rows (at least one is needed)".into()));
    }
    let mut w = width;
    let mut out = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let Value::Array(row) = row else {
            return Err(err(format!("{field}[{i}]"), format!("expected an array of numbers, found {}", kind(row))));
        };
        let expected = *w.get_or_insert(row.len());
        if row.len() != expected {
            let what = if width.is_some() { "expected".to_string() } else { format!("{field}[0] has") };
            return Err(err(format!("{field}[{i}]"), format!("has {} elements but {what} {expected}", row.len())));
        }
        for (j, v) in row.iter().enumerate() {
            let x = parse_number(v).map_err(|m| err(format!("{field}[{i}][{j}]"), m))?;
            if !x.is_finite() {
                return Err(err(format!("{field}[{i}][{j}]"), format!("must be finite, got {x}")));
            }
            out.push(x);
        }
    }
    let w = w.unwrap_or(0);
    if w == 0 {
        return Err(err(format!("{field}[0]"), "rows are empty (the dimension must be at least 1)".into()));
    }
    Ok((rows.len(), w, out))
}

/// A number as JSON: non-finite values as the strings "inf", "-inf", "nan" (JSON has no others).
pub fn number_json(x: f64) -> Value {
    if x.is_finite() {
        Value::from(x)
    } else {
        Value::from(if x.is_nan() {
            "nan"
        } else if x > 0.0 {
            "inf"
        } else {
            "-inf"
        })
    }
}

/// `{"objective": x}`, with `"gradient": [...]` when there is one.
pub fn objective_json(f: f64, gradient: Option<&[f64]>, dtype: DType) -> String {
    match gradient {
        None => format!("{{\"objective\": {}}}", format_number(f, dtype)),
        Some(g) => format!("{{\"objective\": {}, \"gradient\": {}}}", format_number(f, dtype), format_array(g, dtype)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> String {
        match parse_hist_case(text, "case.json", "add").unwrap_err() {
            WorkloadError::BadInput(m) => m,
            other => panic!("not a bad-input error: {other}"),
        }
    }

    #[test]
    fn a_full_case_parses_with_special_numbers() {
        let c = parse_hist_case(
            r#"{"k": 2, "inds": [0, -1, 5], "vals": [1, "inf", "nan"], "dest": ["-inf", 0.5],
                "hist_bar": [1, 2], "op": "add"}"#,
            "c",
            "add",
        )
        .unwrap();
        assert_eq!(c.data.inds, vec![0, -1, 5]);
        assert_eq!(c.data.vals[1], f64::INFINITY);
        assert!(c.data.vals[2].is_nan());
        assert_eq!(c.data.dest, vec![f64::NEG_INFINITY, 0.5]);
        assert_eq!(c.hist_bar, Some(vec![1.0, 2.0]));
        assert_eq!(c.vals_dot, None);
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth_and_values_keep_their_types() {
        let v =
            parse_json(r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": 18446744073709551615}"#, "t").unwrap();
        assert_eq!(v["a"], serde_json::json!([1, -2, 3.5, "x", null, true, {"b": {}}]));
        assert_eq!(v["c"].as_u64(), Some(u64::MAX));
        let e = parse_json("{\"a\": [{\"b\": 1,\n \"b\": 2}]}", "case.json").unwrap_err().to_string();
        assert!(e.starts_with("case.json: not valid JSON: duplicate key \"b\" at line 2"), "{e}");
        assert!(parse_json("[1, 2", "t").is_err());
        // Keys equal only after unescaping are the same key.
        assert!(parse_json(r#"{"a": 1, "\u0061": 2}"#, "t").unwrap_err().to_string().contains("duplicate key \"a\""));
    }

    /// Inputs are read as the exact doubles they print (serde_json's float_roundtrip).
    #[test]
    fn numbers_are_read_exactly() {
        for x in [-1.3541784761043947f64, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, 2.2250738585072014e-308] {
            let v = parse_json(&format!("[{x:?}]"), "t").unwrap();
            assert_eq!(v[0].as_f64().unwrap().to_bits(), x.to_bits(), "{x:?}");
        }
    }

    #[test]
    fn values_a_dtype_cannot_hold_are_named() {
        assert!(check_representable("s", "vals", &[1.0, 3.4e38, f64::INFINITY, f64::NAN], DType::F32).is_ok());
        let e = check_representable("s", "dest", &[0.0, -1e39], DType::F32).unwrap_err().to_string();
        assert_eq!(e, "s: field dest[1]: -1e39 overflows f32");
        assert!(check_representable("s", "dest", &[1e300], DType::F64).is_ok());
    }

    #[test]
    fn every_malformation_names_its_field() {
        assert!(msg("[1, 2]").contains("expected a JSON object"));
        assert!(msg("{\"k\": 1,").contains("not valid JSON"));
        assert!(msg(r#"{"inds": [], "vals": [], "dest": []}"#).contains("field k: missing"));
        assert!(msg(r#"{"k": -3, "inds": [], "vals": [], "dest": []}"#).contains("field k: must be >= 0"));
        assert!(msg(r#"{"k": 1.5, "inds": [], "vals": [], "dest": []}"#).contains("field k: must be a whole number"));
        assert!(msg(r#"{"k": 1e30, "inds": [], "vals": [], "dest": []}"#).contains("field k"));
        assert!(msg(r#"{"k": 99999999999999, "inds": [], "vals": [], "dest": []}"#).contains("more than the limit"));
        assert!(msg(r#"{"k": "2", "inds": [], "vals": [], "dest": []}"#).contains("field k: expected an integer"));
        assert!(msg(r#"{"k": 1, "inds": [0, 0.5], "vals": [1, 2], "dest": [0]}"#).contains("field inds[1]"));
        assert!(msg(r#"{"k": 1, "inds": [0, "1"], "vals": [1, 2], "dest": [0]}"#).contains("field inds[1]"));
        assert!(msg(r#"{"k": 1, "inds": [0], "vals": [1, 2], "dest": [0]}"#).contains("field vals: has 2 elements"));
        assert!(
            msg(r#"{"k": 2, "inds": [0], "vals": [1], "dest": [0]}"#).contains("field dest: has 1 elements but k is 2")
        );
        assert!(msg(r#"{"k": 1, "inds": [0], "vals": [true], "dest": [0]}"#).contains("field vals[0]"));
        assert!(msg(r#"{"k": 1, "inds": [0], "vals": ["infinity"], "dest": [0]}"#).contains("field vals[0]"));
        assert!(
            msg(r#"{"k": 1, "inds": [0], "vals": [1], "dest": [0], "hist_bar": [1, 2]}"#).contains("field hist_bar")
        );
        assert!(msg(r#"{"k": 1, "inds": [0], "vals": [1], "dest": [0], "op": "mul"}"#).contains("field op"));
        assert!(msg(r#"{"k": 1, "inds": [0], "vals": [1], "dest": [0], "kk": 1}"#).contains("unknown field 'kk'"));
        assert!(msg(r#"{"k": 1, "inds": 3, "vals": [1], "dest": [0]}"#).contains("field inds: expected an array"));
    }

    #[test]
    fn numbers_print_as_the_shortest_decimal_of_their_dtype() {
        assert_eq!(format_number(0.1f32 as f64, DType::F32), "0.1");
        assert_eq!(format_number(0.1, DType::F64), "0.1");
        assert_eq!(format_number(1.0, DType::F64), "1.0");
        assert_eq!(format_number(f64::NEG_INFINITY, DType::F32), "\"-inf\"");
        assert_eq!(format_number(f64::NAN, DType::F64), "\"nan\"");
        assert_eq!(format_number(1e300, DType::F64), "1e300");
        let s = format_object(&[("hist", &[1.5, f64::INFINITY]), ("x", &[])], DType::F64);
        assert_eq!(s, "{\"hist\": [1.5, \"inf\"], \"x\": []}");
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["hist"][0], 1.5);
    }
}
