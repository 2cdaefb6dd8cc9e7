//! Reals in JSON that always read back. JSON has no number for NaN or the infinities, and
//! serde_json writes them as `null`, which a reader of an `f64` field refuses: a check whose
//! worst error is NaN or infinite (a failed case) made its own row unreadable, in a killed
//! run's partial file, on the `--isolate` pipe between a case's child process and its parent,
//! and in `run --json`'s lines. Every real of the rows ([`crate::ResultRow`], [`crate::RunInfo`])
//! is therefore written as a JSON number when finite and as the string `"NaN"`, `"inf"` or
//! `"-inf"` when not (the CSV's own spelling of them, which Rust's `f64` parser reads), and read
//! from either. A `null` where a real is required (a row written before this) reads as NaN:
//! the value was not finite, and which non-finite value it was is lost.
//!
//! The modules [`number`], [`optional`] and [`list`] are serde `with` modules for `f64`, `Option<f64>`
//! and `Vec<f64>` fields.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};

/// The JSON value of a real: a number when finite, else `"NaN"`, `"inf"` or `"-inf"`.
pub fn to_json(x: f64) -> serde_json::Value {
    match serde_json::Number::from_f64(x) {
        Some(n) => serde_json::Value::Number(n),
        None => serde_json::Value::String(non_finite_name(x).into()),
    }
}

/// How a non-finite real is spelled (what `format!("{x}")` writes, which `str::parse` reads).
fn non_finite_name(x: f64) -> &'static str {
    if x.is_nan() {
        "NaN"
    } else if x > 0.0 {
        "inf"
    } else {
        "-inf"
    }
}

fn serialize_real<S: Serializer>(x: f64, s: S) -> Result<S::Ok, S::Error> {
    if x.is_finite() { s.serialize_f64(x) } else { s.serialize_str(non_finite_name(x)) }
}

/// A real from a JSON string: the non-finite names, or any number Rust's parser reads.
fn parse_real<E: de::Error>(v: &str) -> Result<f64, E> {
    v.trim()
        .parse::<f64>()
        .map_err(|_| E::custom(format!("'{v}' is not a number (a number, \"NaN\", \"inf\" or \"-inf\")")))
}

/// Reads a real, or `null` as `on_null` (None: refused).
struct RealVisitor {
    on_null: Option<f64>,
}

impl<'de> Visitor<'de> for RealVisitor {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number, or \"NaN\", \"inf\" or \"-inf\"")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        parse_real(v)
    }
    fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
        self.on_null.ok_or_else(|| E::invalid_type(de::Unexpected::Unit, &self))
    }
    fn visit_none<E: de::Error>(self) -> Result<f64, E> {
        self.visit_unit()
    }
}

/// `f64` fields: `#[serde(with = "crate::real::number")]`.
pub mod number {
    use super::*;

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        serialize_real(*x, s)
    }

    /// A number or a non-finite name; `null` (written before reals were spelled out) is NaN.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        d.deserialize_any(RealVisitor { on_null: Some(f64::NAN) })
    }
}

/// `Option<f64>` fields: `null` is None.
pub mod optional {
    use super::*;

    pub fn serialize<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match x {
            Some(x) => serialize_real(*x, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        struct OptVisitor;
        impl<'de> Visitor<'de> for OptVisitor {
            type Value = Option<f64>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("null, a number, or \"NaN\", \"inf\" or \"-inf\"")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Option<f64>, E> {
                Ok(None)
            }
            fn visit_none<E: de::Error>(self) -> Result<Option<f64>, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<f64>, D::Error> {
                d.deserialize_any(RealVisitor { on_null: None }).map(Some)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<f64>, E> {
                Ok(Some(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<f64>, E> {
                Ok(Some(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<f64>, E> {
                Ok(Some(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<f64>, E> {
                parse_real(v).map(Some)
            }
        }
        d.deserialize_option(OptVisitor)
    }
}

/// `Vec<f64>` fields: a list of reals, each spelled as [`number`] spells it.
pub mod list {
    use super::*;

    pub fn serialize<S: Serializer>(xs: &[f64], s: S) -> Result<S::Ok, S::Error> {
        struct Real(f64);
        impl serde::Serialize for Real {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serialize_real(self.0, s)
            }
        }
        let mut seq = s.serialize_seq(Some(xs.len()))?;
        for &x in xs {
            seq.serialize_element(&Real(x))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        struct Real(f64);
        impl<'de> serde::Deserialize<'de> for Real {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Real, D::Error> {
                super::number::deserialize(d).map(Real)
            }
        }
        struct SeqVisitor;
        impl<'de> Visitor<'de> for SeqVisitor {
            type Value = Vec<f64>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of numbers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<f64>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(Real(x)) = seq.next_element()? {
                    out.push(x);
                }
                Ok(out)
            }
        }
        d.deserialize_seq(SeqVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    struct Fields {
        #[serde(with = "super::number")]
        x: f64,
        #[serde(with = "super::optional")]
        o: Option<f64>,
        #[serde(with = "super::list")]
        v: Vec<f64>,
    }

    #[test]
    fn non_finite_reals_are_spelled_out_and_read_back() {
        let f = Fields { x: f64::NEG_INFINITY, o: Some(f64::NAN), v: vec![1.5, f64::INFINITY, -0.0] };
        let text = serde_json::to_string(&f).unwrap();
        assert_eq!(text, r#"{"x":"-inf","o":"NaN","v":[1.5,"inf",-0.0]}"#);
        let back: Fields = serde_json::from_str(&text).unwrap();
        assert_eq!(back.x, f64::NEG_INFINITY);
        assert!(back.o.unwrap().is_nan());
        assert_eq!(back.v[..2], [1.5, f64::INFINITY]);
        assert!(back.v[2] == 0.0 && back.v[2].is_sign_negative());
    }

    #[test]
    fn null_reads_as_nan_or_none_and_garbage_is_refused_naming_it() {
        let back: Fields = serde_json::from_str(r#"{"x":null,"o":null,"v":[2]}"#).unwrap();
        assert!(back.x.is_nan());
        assert_eq!((back.o, back.v), (None, vec![2.0]));
        let e = serde_json::from_str::<Fields>(r#"{"x":"big","o":null,"v":[]}"#).unwrap_err().to_string();
        assert!(e.contains("'big' is not a number"), "{e}");
        let e = serde_json::from_str::<Fields>(r#"{"x":1,"o":null,"v":[null]}"#);
        assert!(e.unwrap().v[0].is_nan());
        assert!(serde_json::from_str::<Fields>(r#"{"x":true,"o":null,"v":[]}"#).is_err());
    }
}
