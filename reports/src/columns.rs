//! How the columns of a run's file are named and typed outside the CSV: the prefixes of the
//! parameter and check columns, and each column's [`Kind`] (the typed JSON lines of `run --json`
//! and the Parquet files read it).

/// Prefix of the parameter columns.
pub const PARAM_PREFIX: &str = "param.";
/// Prefix of the check columns (`check.<name>.worst|tolerance|passed`).
pub const CHECK_PREFIX: &str = "check.";

/// How a column's values are typed outside the CSV (JSON lines, Parquet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Count,
    Real,
    Flag,
    /// Space-separated reals in the CSV, a list elsewhere (empty: an empty list).
    Samples,
    /// Space-separated reals in the CSV, a list elsewhere (empty: null, nothing measured).
    Reals,
}

/// The type of a file column, given its (text) values: fixed by name for the fixed and check
/// columns; a parameter is a count or a real where every value present parses as one.
pub fn column_kind(column: &str, values: &[&str]) -> Kind {
    match column {
        "schema_version" | "cores" | "threads" | "seed" | "samples" | "batch" | "peak_bytes" | "roofline_threads" => {
            Kind::Count
        }
        "compile_s"
        | "min_s"
        | "median_s"
        | "max_s"
        | "cv"
        | "overhead"
        | "memory_ratio"
        | "roofline_seq_read_gb_s"
        | "achieved_gb_s"
        | "roofline_fraction" => Kind::Real,
        "sample_s" => Kind::Samples,
        "roofline_bins" | "roofline_random_reads_per_s" | "roofline_random_updates_per_s" => Kind::Reals,
        c if c.starts_with(CHECK_PREFIX) && c.ends_with(".passed") => Kind::Flag,
        c if c.starts_with(CHECK_PREFIX) => Kind::Real,
        c if c.starts_with(PARAM_PREFIX) => {
            let present = || values.iter().filter(|v| !v.is_empty());
            if present().all(|v| v.parse::<u64>().is_ok()) {
                Kind::Count
            } else if present().all(|v| v.parse::<f64>().is_ok()) {
                Kind::Real
            } else {
                Kind::Text
            }
        }
        _ => Kind::Text,
    }
}
