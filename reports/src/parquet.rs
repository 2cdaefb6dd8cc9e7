//! Parquet beside the CSV, through the `parquet` crate's column writer (no Arrow, no compression
//! codecs: the files are small and the crate builds in seconds where a data-frame library took
//! minutes). A run's Parquet file holds the same table as its CSV, typed by
//! [`column_kind`]: counts as unsigned 64-bit integers, times and ratios as doubles,
//! `sample_s` as a list of doubles, checks' `passed` as booleans, parameters as integers or
//! doubles where every value parses as one, text as UTF-8 strings, empty fields as null. Every
//! column is optional (nullable), so readers such as polars, pandas or DuckDB see the CSV's
//! empty fields as nulls. The queries of `adgauge history` are plain Rust over the rows
//! (`query.rs`).

use std::sync::Arc;

use parquet::basic::{LogicalType, Repetition, Type as Physical};
use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::errors::{ParquetError, Result};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{Type, TypePtr};

use crate::columns::{Kind, column_kind};
use crate::query::{Cell, Table};

/// One column's values, typed; `None` is null.
enum Values {
    Text(Vec<Option<String>>),
    Count(Vec<Option<u64>>),
    Real(Vec<Option<f64>>),
    Flag(Vec<Option<bool>>),
    /// One list per row (an empty field is an empty list, as in the CSV).
    Samples(Vec<Vec<f64>>),
    /// One list per row, or null (an empty field: nothing measured).
    Reals(Vec<Option<Vec<f64>>>),
}

/// A named column.
struct Column {
    name: String,
    values: Values,
}

impl Column {
    /// The column from its text values (the CSV's fields; empty is null).
    fn from_fields(name: &str, fields: &[&str]) -> Column {
        let present = |v: &&str| !v.is_empty();
        let reals = |v: &str| v.split_whitespace().filter_map(|x| x.parse().ok()).collect::<Vec<f64>>();
        let values = match column_kind(name, fields) {
            Kind::Text => Values::Text(fields.iter().map(|v| present(v).then(|| v.to_string())).collect()),
            Kind::Count => Values::Count(fields.iter().map(|v| v.parse().ok()).collect()),
            Kind::Real => Values::Real(fields.iter().map(|v| v.parse().ok()).collect()),
            Kind::Flag => Values::Flag(fields.iter().map(|v| v.parse().ok()).collect()),
            Kind::Samples => Values::Samples(fields.iter().map(|v| reals(v)).collect()),
            Kind::Reals => Values::Reals(fields.iter().map(|v| present(v).then(|| reals(v))).collect()),
        };
        Column { name: name.to_string(), values }
    }

    /// The schema node: an optional leaf, or for a list the three-level LIST group that the
    /// Parquet format specifies (`optional group (LIST) { repeated group list { optional double
    /// element } }`).
    fn schema(&self) -> Result<TypePtr> {
        let leaf = |name: &str, physical: Physical, logical: Option<LogicalType>| {
            Type::primitive_type_builder(name, physical)
                .with_repetition(Repetition::OPTIONAL)
                .with_logical_type(logical)
                .build()
        };
        let node = match &self.values {
            Values::Text(_) => leaf(&self.name, Physical::BYTE_ARRAY, Some(LogicalType::String))?,
            Values::Count(_) => leaf(&self.name, Physical::INT64, Some(LogicalType::integer(64, false)))?,
            Values::Real(_) => leaf(&self.name, Physical::DOUBLE, None)?,
            Values::Flag(_) => leaf(&self.name, Physical::BOOLEAN, None)?,
            Values::Samples(_) | Values::Reals(_) => {
                let element = Arc::new(leaf("element", Physical::DOUBLE, None)?);
                let list = Type::group_type_builder("list")
                    .with_repetition(Repetition::REPEATED)
                    .with_fields(vec![element])
                    .build()?;
                Type::group_type_builder(&self.name)
                    .with_repetition(Repetition::OPTIONAL)
                    .with_logical_type(Some(LogicalType::List))
                    .with_fields(vec![Arc::new(list)])
                    .build()?
            }
        };
        Ok(Arc::new(node))
    }

    /// Writes the values into the column's writer (the leaf of [`Column::schema`]).
    fn write(&self, writer: &mut ColumnWriter<'_>) -> Result<()> {
        /// The present values and the definition levels of an optional leaf (1 present, 0 null).
        fn optional<T: Clone, U>(values: &[Option<T>], convert: impl Fn(T) -> U) -> (Vec<U>, Vec<i16>) {
            let present = values.iter().flatten().map(|v| convert(v.clone())).collect();
            (present, values.iter().map(|v| i16::from(v.is_some())).collect())
        }
        let mismatch = || ParquetError::General(format!("column {}: writer of another type", self.name));
        match (&self.values, writer) {
            (Values::Text(v), ColumnWriter::ByteArrayColumnWriter(w)) => {
                let (present, def) = optional(v, |s: String| ByteArray::from(s.into_bytes()));
                w.write_batch(&present, Some(&def), None)?;
            }
            (Values::Count(v), ColumnWriter::Int64ColumnWriter(w)) => {
                // UINT_64 is stored in INT64's bits; readers of the logical type read it back.
                let (present, def) = optional(v, |x: u64| x as i64);
                w.write_batch(&present, Some(&def), None)?;
            }
            (Values::Real(v), ColumnWriter::DoubleColumnWriter(w)) => {
                let (present, def) = optional(v, |x: f64| x);
                w.write_batch(&present, Some(&def), None)?;
            }
            (Values::Flag(v), ColumnWriter::BoolColumnWriter(w)) => {
                let (present, def) = optional(v, |x: bool| x);
                w.write_batch(&present, Some(&def), None)?;
            }
            (Values::Samples(_) | Values::Reals(_), ColumnWriter::DoubleColumnWriter(w)) => {
                // Levels of the three-level list: definition 0 = a null list, 1 = an empty list,
                // 3 = an element; repetition 0 starts a row, 1 continues its list.
                let lists: Vec<Option<&Vec<f64>>> = match &self.values {
                    Values::Samples(lists) => lists.iter().map(Some).collect(),
                    Values::Reals(lists) => lists.iter().map(Option::as_ref).collect(),
                    _ => unreachable!("matched above"),
                };
                let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
                for list in lists {
                    let Some(list) = list else {
                        def.push(0);
                        rep.push(0);
                        continue;
                    };
                    if list.is_empty() {
                        def.push(1);
                        rep.push(0);
                    }
                    for (i, x) in list.iter().enumerate() {
                        values.push(*x);
                        def.push(3);
                        rep.push(i16::from(i > 0));
                    }
                }
                w.write_batch(&values, Some(&def), Some(&rep))?;
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }
}

/// One row group holding every column, as a file's bytes.
fn parquet_bytes(columns: &[Column]) -> Result<Vec<u8>> {
    let fields = columns.iter().map(Column::schema).collect::<Result<Vec<_>>>()?;
    let schema = Arc::new(Type::group_type_builder("schema").with_fields(fields).build()?);
    let mut out = Vec::new();
    let mut file = SerializedFileWriter::new(&mut out, schema, Arc::new(WriterProperties::builder().build()))?;
    let mut group = file.next_row_group()?;
    for column in columns {
        let mut writer = group
            .next_column()?
            .ok_or_else(|| ParquetError::General(format!("column {}: not in the schema", column.name)))?;
        column.write(writer.untyped())?;
        writer.close()?;
    }
    group.close()?;
    file.close()?;
    Ok(out)
}

/// A table of text fields (a run file's header and records; empty is null) as a Parquet file,
/// each column typed by its [`Kind`].
pub fn fields_parquet(header: &[String], records: &[Vec<String>]) -> Result<Vec<u8>> {
    let columns: Vec<Column> = header
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let fields: Vec<&str> = records.iter().map(|r| r[i].as_str()).collect();
            Column::from_fields(name, &fields)
        })
        .collect();
    parquet_bytes(&columns)
}

/// A query's answer as a Parquet file: a column of only reals (or nulls) is a double column,
/// of only integers an unsigned integer column, anything else text.
pub fn table_parquet(table: &Table) -> Result<Vec<u8>> {
    let columns: Vec<Column> = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let cells: Vec<&Cell> = table.rows.iter().map(|r| &r[i]).collect();
            let all = |f: fn(&Cell) -> bool| !cells.is_empty() && cells.iter().all(|c| matches!(c, Cell::Null) || f(c));
            let values = if all(|c| matches!(c, Cell::Float(_))) {
                Values::Real(cells.iter().map(|c| if let Cell::Float(x) = c { Some(*x) } else { None }).collect())
            } else if all(|c| matches!(c, Cell::Int(_))) {
                Values::Count(cells.iter().map(|c| if let Cell::Int(x) = c { Some(*x) } else { None }).collect())
            } else {
                Values::Text(
                    cells
                        .iter()
                        .map(|c| match c {
                            Cell::Null => None,
                            Cell::Str(s) => Some(s.clone()),
                            Cell::Int(x) => Some(x.to_string()),
                            Cell::Float(x) => Some(format!("{x:e}")),
                        })
                        .collect(),
                )
            };
            Column { name: name.clone(), values }
        })
        .collect();
    parquet_bytes(&columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Check, ResultRow, RunInfo, Status, Timing};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::{Field, Row};
    use std::collections::BTreeMap;

    /// Every row of a file, read back by the crate's record reader (an independent decoder of
    /// the levels and logical types written above).
    fn read_rows(bytes: Vec<u8>) -> Vec<Row> {
        let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        reader.get_row_iter(None).unwrap().map(|r| r.unwrap()).collect()
    }

    fn field<'a>(row: &'a Row, name: &str) -> &'a Field {
        row.get_column_iter().find(|(n, _)| n.as_str() == name).map(|(_, f)| f).unwrap_or_else(|| panic!("no {name}"))
    }

    fn doubles(f: &Field) -> Vec<f64> {
        match f {
            Field::ListInternal(list) => list
                .elements()
                .iter()
                .map(|e| match e {
                    Field::Double(x) => *x,
                    other => panic!("not a double: {other:?}"),
                })
                .collect(),
            other => panic!("not a list: {other:?}"),
        }
    }

    /// A run of the suite "quick" with no roofline.
    fn quick_run() -> RunInfo {
        RunInfo {
            run_id: "r1".into(),
            timestamp: "2026-11-22T05:00:00Z".into(),
            git_revision: "abc".into(),
            adgauge_version: "0.1.0".into(),
            machine: "host".into(),
            cpu_model: "cpu".into(),
            cores: 2,
            governor: "unknown".into(),
            suite: "quick".into(),
            roofline: None,
            interrupted: None,
            selection: None,
        }
    }

    /// The Parquet file reads back with the CSV's values, typed.
    #[test]
    fn a_run_round_trips_through_parquet_with_typed_columns() {
        let run = quick_run();
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
        row.vjp = Some(Timing { median_s: 5e-3, sample_s: vec![], ..row.primal.clone().unwrap() });
        row.checks = vec![Check { name: "fd-vjp".into(), worst: 1e-9, tolerance: 1e-6, passed: true }];
        row.status = Status::Ok;
        let rows = read_rows(crate::store::run_parquet(&run, &[row]).unwrap());
        assert_eq!(rows.len(), 2); // primal and vjp
        assert_eq!(field(&rows[0], "median_s"), &Field::Double(2e-3));
        assert_eq!(field(&rows[1], "median_s"), &Field::Double(5e-3));
        assert_eq!(field(&rows[0], "overhead"), &Field::Null);
        assert_eq!(field(&rows[1], "overhead"), &Field::Double(2.5));
        assert_eq!(field(&rows[0], "param.k"), &Field::ULong(10));
        assert_eq!(field(&rows[0], "param.dist"), &Field::Str("uniform".into()));
        assert_eq!(field(&rows[1], "check.fd-vjp.passed"), &Field::Bool(true));
        assert_eq!(field(&rows[0], "suite"), &Field::Str("quick".into()));
        assert_eq!(field(&rows[0], "seed"), &Field::ULong(7));
        assert_eq!(doubles(field(&rows[0], "sample_s")), vec![3e-3, 1e-3, 2e-3]);
        assert_eq!(doubles(field(&rows[1], "sample_s")), Vec::<f64>::new());
    }

    /// The run's roofline is typed (its lists as lists of doubles, null in a run without one),
    /// and a histogram's primal line has its achieved bandwidth and fraction.
    #[test]
    fn the_roofline_columns_are_typed_and_null_without_a_roofline() {
        let mut run = RunInfo {
            roofline: Some(crate::Roofline {
                threads: 2,
                seq_read_gb_s: 20.0,
                random: vec![crate::RandomRate { bins: 1000, reads_per_s: 2e9, updates_per_s: 1e9 }],
                tools: vec!["cpu".into()],
            }),
            ..quick_run()
        };
        let params: BTreeMap<String, String> = [("n", "1000000"), ("k", "1000"), ("index_dtype", "i32")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut row = ResultRow::unmeasured("hist-add", params, "cpu", "f32", "auto", 2, 7);
        let t = |median_s: f64| Timing {
            min_s: median_s,
            median_s,
            max_s: median_s,
            batch: 1,
            samples: 1,
            cv: 0.0,
            sample_s: vec![],
        };
        // 10^6 x 8 + 2 x 1000 x 4 = 8 008 000 bytes in 1 ms: 8.008 GB/s, 40.04% of 20 GB/s.
        (row.primal, row.vjp) = (Some(t(1e-3)), Some(t(3e-3)));
        let rows = read_rows(crate::store::run_parquet(&run, std::slice::from_ref(&row)).unwrap());
        assert_eq!(field(&rows[0], "roofline_threads"), &Field::ULong(2));
        assert_eq!(field(&rows[0], "roofline_seq_read_gb_s"), &Field::Double(20.0));
        assert_eq!(doubles(field(&rows[0], "roofline_bins")), vec![1000.0]);
        assert_eq!(doubles(field(&rows[1], "roofline_random_updates_per_s")), vec![1e9]);
        assert_eq!(field(&rows[0], "roofline_tools"), &Field::Str("cpu".into()));
        let Field::Double(gb_s) = field(&rows[0], "achieved_gb_s") else { panic!("no achieved_gb_s") };
        let Field::Double(fraction) = field(&rows[0], "roofline_fraction") else { panic!("no fraction") };
        assert!((gb_s - 8.008).abs() < 1e-9 && (fraction - 0.4004).abs() < 1e-9, "{gb_s} {fraction}");
        assert_eq!(field(&rows[1], "achieved_gb_s"), &Field::Null, "the vjp line has none");
        run.roofline = None;
        let rows = read_rows(crate::store::run_parquet(&run, &[row]).unwrap());
        for column in ["roofline_threads", "roofline_bins", "roofline_random_reads_per_s", "roofline_fraction"] {
            assert_eq!(field(&rows[0], column), &Field::Null, "{column}");
        }
        assert!(matches!(field(&rows[0], "achieved_gb_s"), Field::Double(_)));
    }

    #[test]
    fn a_query_answer_round_trips_through_parquet() {
        let table = Table {
            columns: vec!["case_id".into(), "median_s".into(), "runs".into(), "mixed".into()],
            rows: vec![
                vec![Cell::Str("a".into()), Cell::Float(5.5e-3), Cell::Int(2), Cell::Int(4)],
                vec![Cell::Str("b".into()), Cell::Null, Cell::Int(3), Cell::Float(0.5)],
            ],
        };
        let rows = read_rows(table_parquet(&table).unwrap());
        assert_eq!(field(&rows[1], "case_id"), &Field::Str("b".into()));
        assert_eq!(field(&rows[0], "median_s"), &Field::Double(5.5e-3));
        assert_eq!(field(&rows[1], "median_s"), &Field::Null);
        assert_eq!(field(&rows[1], "runs"), &Field::ULong(3));
        assert_eq!(field(&rows[0], "mixed"), &Field::Str("4".into()));
        assert_eq!(field(&rows[1], "mixed"), &Field::Str("5e-1".into()));
    }

    #[test]
    fn an_empty_table_is_a_file_with_its_columns_and_no_rows() {
        let table = Table { columns: vec!["case_id".into()], rows: vec![] };
        let reader = SerializedFileReader::new(bytes::Bytes::from(table_parquet(&table).unwrap())).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
        assert_eq!(reader.metadata().file_metadata().schema_descr().column(0).name(), "case_id");
    }
}
