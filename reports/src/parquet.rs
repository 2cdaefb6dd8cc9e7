//! Parquet beside the CSV, through polars (features: `parquet` only; the queries of
//! `adgauge history` are plain Rust over the rows, see `query.rs`, so the lazy engine is not
//! built). A run's Parquet file holds the same table as its schema-3 CSV, typed by
//! [`store::column_kind`]: counts as UInt64, times and ratios as Float64, `sample_s` as a list of
//! Float64, checks' `passed` as Boolean, parameters as UInt64 or Float64 where every value parses
//! as one, empty fields as null.

use std::io::Cursor;

use polars::prelude::*;

use crate::query::{Cell, Table};
use crate::schema::{ResultRow, RunInfo};
use crate::store::{self, Kind};

/// One typed column from its text values (the CSV's fields; empty is null).
fn column(name: &str, values: &[&str]) -> Column {
    let name: PlSmallStr = name.into();
    match store::column_kind(name.as_str(), values) {
        Kind::Text => Column::new(name, values.iter().map(|v| (!v.is_empty()).then_some(*v)).collect::<Vec<_>>()),
        Kind::Count => Column::new(name, values.iter().map(|v| v.parse::<u64>().ok()).collect::<Vec<_>>()),
        Kind::Real => Column::new(name, values.iter().map(|v| v.parse::<f64>().ok()).collect::<Vec<_>>()),
        Kind::Flag => Column::new(name, values.iter().map(|v| v.parse::<bool>().ok()).collect::<Vec<_>>()),
        Kind::Samples => {
            let lists: Vec<Series> = values
                .iter()
                .map(|v| {
                    let xs: Vec<f64> = v.split_whitespace().filter_map(|x| x.parse().ok()).collect();
                    Series::new(PlSmallStr::EMPTY, xs)
                })
                .collect();
            Column::new(name, lists)
        }
    }
}

fn parquet_bytes(df: &mut DataFrame) -> PolarsResult<Vec<u8>> {
    let mut out = Cursor::new(Vec::new());
    ParquetWriter::new(&mut out).finish(df)?;
    Ok(out.into_inner())
}

/// A run as a typed data frame with its file's columns.
pub fn run_frame(run: &RunInfo, rows: &[ResultRow]) -> PolarsResult<DataFrame> {
    let header = store::header(rows);
    let records: Vec<Vec<String>> = rows.iter().flat_map(|r| store::case_records(run, r, &header)).collect();
    let columns: Vec<Column> = header
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let values: Vec<&str> = records.iter().map(|r| r[i].as_str()).collect();
            column(name, &values)
        })
        .collect();
    DataFrame::new_infer_height(columns)
}

/// A run's Parquet file.
pub fn run_parquet(run: &RunInfo, rows: &[ResultRow]) -> PolarsResult<Vec<u8>> {
    parquet_bytes(&mut run_frame(run, rows)?)
}

/// A query's answer as a Parquet file (each column typed by its cells).
pub fn table_parquet(table: &Table) -> PolarsResult<Vec<u8>> {
    let columns: Vec<Column> = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let cells: Vec<&Cell> = table.rows.iter().map(|r| &r[i]).collect();
            let name: PlSmallStr = name.as_str().into();
            let all = |f: fn(&Cell) -> bool| cells.iter().all(|c| matches!(c, Cell::Null) || f(c));
            if all(|c| matches!(c, Cell::Float(_))) && !cells.is_empty() {
                let v: Vec<Option<f64>> =
                    cells.iter().map(|c| if let Cell::Float(x) = c { Some(*x) } else { None }).collect();
                Column::new(name, v)
            } else if all(|c| matches!(c, Cell::Int(_))) && !cells.is_empty() {
                let v: Vec<Option<u64>> =
                    cells.iter().map(|c| if let Cell::Int(x) = c { Some(*x) } else { None }).collect();
                Column::new(name, v)
            } else {
                let v: Vec<Option<String>> = cells
                    .iter()
                    .map(|c| match c {
                        Cell::Null => None,
                        Cell::Str(s) => Some(s.clone()),
                        Cell::Int(x) => Some(x.to_string()),
                        Cell::Float(x) => Some(format!("{x:e}")),
                    })
                    .collect();
                Column::new(name, v)
            }
        })
        .collect();
    parquet_bytes(&mut DataFrame::new_infer_height(columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Check, Status, Timing};
    use std::collections::BTreeMap;

    /// The Parquet file reads back (polars' own reader) with the CSV's values, typed.
    #[test]
    fn a_run_round_trips_through_parquet_with_typed_columns() {
        let run = RunInfo {
            run_id: "r1".into(),
            timestamp: "2026-11-22T05:00:00Z".into(),
            git_revision: "abc".into(),
            adgauge_version: "0.1.0".into(),
            machine: "host".into(),
            cpu_model: "cpu".into(),
            cores: 2,
            governor: "unknown".into(),
            suite: "quick".into(),
        };
        let mut params = BTreeMap::new();
        params.insert("k".to_string(), "10".to_string());
        params.insert("dist".to_string(), "uniform".to_string());
        let mut row = ResultRow::unmeasured("hist-add", params, "cpu", "f64", "auto", 2, 7);
        row.primal = Some(Timing {
            min_s: 1e-3,
            median_s: 2e-3,
            max_s: 3e-3,
            batch: 1,
            samples: 3,
            cv: 0.1,
            sample_s: vec![3e-3, 1e-3, 2e-3],
        });
        row.vjp = Some(Timing { median_s: 5e-3, ..row.primal.clone().unwrap() });
        row.checks = vec![Check { name: "fd-vjp".into(), worst: 1e-9, tolerance: 1e-6, passed: true }];
        row.status = Status::Ok;
        let bytes = run_parquet(&run, &[row]).unwrap();
        let df = ParquetReader::new(Cursor::new(bytes)).finish().unwrap();
        assert_eq!(df.height(), 2); // primal and vjp
        let median = df.column("median_s").unwrap().f64().unwrap();
        assert_eq!((median.get(0), median.get(1)), (Some(2e-3), Some(5e-3)));
        let overhead = df.column("overhead").unwrap().f64().unwrap();
        assert_eq!((overhead.get(0), overhead.get(1)), (None, Some(2.5)));
        assert_eq!(df.column("param.k").unwrap().u64().unwrap().get(0), Some(10));
        assert_eq!(df.column("param.dist").unwrap().str().unwrap().get(0), Some("uniform"));
        assert_eq!(df.column("check.fd-vjp.passed").unwrap().bool().unwrap().get(1), Some(true));
        assert_eq!(df.column("suite").unwrap().str().unwrap().get(0), Some("quick"));
        let samples = df.column("sample_s").unwrap().list().unwrap().get_as_series(0).unwrap();
        assert_eq!(samples.f64().unwrap().into_no_null_iter().collect::<Vec<_>>(), vec![3e-3, 1e-3, 2e-3]);
    }

    #[test]
    fn a_query_answer_round_trips_through_parquet() {
        let table = Table {
            columns: vec!["case_id".into(), "median_s".into(), "runs".into()],
            rows: vec![
                vec![Cell::Str("a".into()), Cell::Float(5.5e-3), Cell::Int(2)],
                vec![Cell::Str("b".into()), Cell::Null, Cell::Int(3)],
            ],
        };
        let df = ParquetReader::new(Cursor::new(table_parquet(&table).unwrap())).finish().unwrap();
        assert_eq!(df.column("case_id").unwrap().str().unwrap().get(1), Some("b"));
        let m = df.column("median_s").unwrap().f64().unwrap();
        assert_eq!((m.get(0), m.get(1)), (Some(5.5e-3), None));
        assert_eq!(df.column("runs").unwrap().u64().unwrap().get(1), Some(3));
    }
}
