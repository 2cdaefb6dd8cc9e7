//! One input validator for the classic workloads, whichever way an input arrives: a file of
//! `adgauge eval`, a protocol message of `adgauge tool`, or a case a suite generates (checked
//! when it is put on a device). Each input type says which of its fields hold floating-point
//! numbers, which structural rule its sizes obey, and what computing on it needs in memory;
//! [`validate`] refuses, naming the field, a finite value the dtype cannot hold (1e39 in f32
//! would silently become inf), a size the computation cannot use (an LSTM sequence of one
//! character has no prediction), and a footprint beyond `--max-memory`.

use adgauge_backends::DType;

use crate::json::check_representable;
use crate::workload::{Footprint, WResult, WorkloadError};

/// What [`validate`] needs to know about an input type.
pub trait CheckedInput {
    /// The fields holding floating-point numbers, by name.
    fn float_fields(&self) -> Vec<(&'static str, &[f64])>;
    /// The rule its sizes obey: `Err` names the field and says why not.
    fn sizes(&self) -> Result<(), String> {
        Ok(())
    }
    /// What computing on it needs, and the fields it is computed from (with their values).
    fn footprint(&self) -> Option<(String, Footprint)> {
        None
    }
}

/// Refuses an input that `dtype` cannot hold, whose sizes break its rule, or whose footprint
/// exceeds the memory limit; the error (bad input, exit 2) names `source` and the field.
pub fn validate(input: &dyn CheckedInput, source: &str, dtype: DType) -> WResult<()> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    input.sizes().map_err(bad)?;
    if let Some((fields, need)) = input.footprint() {
        need.check().map_err(|m| bad(format!("{fields}: {m}")))?;
    }
    for (field, xs) in input.float_fields() {
        check_representable(source, field, xs, dtype)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use adgauge_datasets::kmeans::KmeansData;
    use adgauge_datasets::lstm::LstmInput;

    use super::*;
    use crate::kmeans::GradbenchKmeans;
    use crate::llsq::LlsqInput;

    #[test]
    fn every_rule_names_its_field() {
        let llsq = LlsqInput { x: vec![1.0, 1e39], n: 4 };
        assert!(validate(&llsq, "in", DType::F64).is_ok());
        let e = validate(&llsq, "in", DType::F32).unwrap_err().to_string();
        assert!(e.contains("in: field x[1]: 1e39 overflows f32"), "{e}");
        let kmeans = KmeansData { n: 1, k: 1, d: 2, points: vec![0.0, -3e38], centres: vec![2e39, 0.0] };
        let e = validate(&kmeans, "k.json", DType::F32).unwrap_err().to_string();
        assert!(e.contains("field centres[0]: 2e39 overflows f32"), "{e}");
        let e = validate(&GradbenchKmeans(&kmeans), "k", DType::F32).unwrap_err().to_string();
        assert!(e.contains("field centroids[0]: 2e39 overflows f32"), "{e}");
        let mut lstm = LstmInput {
            l: 1,
            c: 1,
            b: 1,
            main_params: vec![0.0; 8],
            extra_params: vec![0.0; 3],
            state: vec![0.0; 2],
            sequence: vec![1.0],
        };
        let e = validate(&lstm, "s", DType::F64).unwrap_err().to_string();
        assert!(e.contains("s: field sequence: 1 character(s); at least 2"), "{e}");
        lstm.c = 2;
        lstm.sequence = vec![1.0, 0.0];
        assert!(validate(&lstm, "s", DType::F32).is_ok());
    }

    use proptest::prelude::*;

    /// The least magnitude that rounds to infinity in f32: halfway between f32::MAX (2^128 -
    /// 2^104) and the next power of two, 2^128 - 2^103 (round to nearest, ties to even go up).
    const F32_OVERFLOW: f64 = 340282356779733661637539395458142568448.0;

    /// Values around the f32 boundary, ordinary ones, and non-finite ones (which the
    /// representability rule leaves to the workloads' own NaN handling).
    fn value() -> impl Strategy<Value = f64> {
        prop_oneof![
            -1e6..1e6f64,
            (0.999..1.001f64).prop_map(|s| s * F32_OVERFLOW),
            (0.999..1.001f64).prop_map(|s| -s * F32_OVERFLOW),
            Just(F32_OVERFLOW),
            Just(f32::MAX as f64),
            Just(f64::INFINITY),
            Just(f64::NAN),
            Just(1e300),
        ]
    }

    proptest! {
        /// A k-means input is refused in f32 exactly when a finite value reaches the overflow
        /// threshold, naming the first such value's field and index; f64 holds every one.
        #[test]
        fn f32_refuses_exactly_the_finite_values_beyond_its_range(
            points in proptest::collection::vec(value(), 2..12),
            centres in proptest::collection::vec(value(), 2..6),
        ) {
            let input = KmeansData { n: points.len() / 2, k: centres.len() / 2, d: 2, points, centres };
            let overflows = |xs: &[f64]| xs.iter().position(|x| x.is_finite() && x.abs() >= F32_OVERFLOW);
            let first = overflows(&input.points).map(|i| ("points", i))
                .or_else(|| overflows(&input.centres).map(|i| ("centres", i)));
            prop_assert!(validate(&input, "p", DType::F64).is_ok());
            match (first, validate(&input, "p", DType::F32)) {
                (None, Ok(())) => {}
                (Some((field, i)), Err(e)) => {
                    let e = e.to_string();
                    prop_assert!(e.contains(&format!("p: field {field}[{i}]: ")) && e.contains("overflows f32"), "{}", e);
                }
                (want, got) => prop_assert!(false, "expected {:?}, got {:?}", want, got.map_err(|e| e.to_string())),
            }
        }
    }
}
