//! The user guide's Python snippet (docs/guide.md, between `<!-- python-trend -->` and the end of
//! its code block)
//! runs as written on a history that adgauge wrote: it reads the Parquet files with polars and
//! plots one case's trend into trend.png. It needs Python with polars and matplotlib, which CI
//! does not install: without them the test says why and passes. The same query through
//! `adgauge history` is tested unconditionally in tests/query.rs.

use std::collections::BTreeMap;
use std::process::Command;

use adgauge_reports::store::append_run;
use adgauge_reports::{ResultRow, RunInfo, Timing};

const CASE: &str = "hist-add[dist=uniform,index_dtype=i32,k=10,n=1000000,oob=0.05]/cpu/f32/special";

fn snippet() -> String {
    let guide = include_str!("../../../docs/guide.md");
    let start = guide.find("<!-- python-trend -->").expect("the guide marks its Python snippet");
    let block = &guide[start..];
    let code = &block[block.find("```python\n").expect("a python code block") + 10..];
    code[..code.find("```").expect("the end of the code block")].to_string()
}

#[test]
fn the_guide_python_snippet_plots_a_trend_from_the_parquet_history() {
    let python = std::env::var("ADGAUGE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python).args(["-c", "import polars, matplotlib"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        _ => {
            adgauge_testkit::skip(
                "polars",
                format!("{python} lacks polars or matplotlib"),
                "set ADGAUGE_PYTHON to a Python that has them",
            );
            return;
        }
    }
    let dir = std::env::temp_dir().join(format!("adgauge-snippet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let history = dir.join("adgauge-results");
    for (day, ms) in [(1u32, 2.0), (2, 2.2), (3, 2.1)] {
        let info = RunInfo {
            run_id: format!("202611{day:02}T050000Z-aaaaaa"),
            timestamp: format!("2026-11-{day:02}T05:00:00Z"),
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
        };
        let mut row = ResultRow::unmeasured("hist-add", BTreeMap::new(), "cpu", "f32", "special", 2, 1);
        row.case_id = CASE.into();
        let m = ms * 1e-3;
        row.vjp = Some(Timing { min_s: m, median_s: m, max_s: m, batch: 1, samples: 1, cv: 0.0, sample_s: vec![m] });
        append_run(&history, &info, &[row]).unwrap();
    }
    let out =
        Command::new(&python).arg("-c").arg(snippet()).current_dir(&dir).env("MPLBACKEND", "Agg").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let png = std::fs::read(dir.join("trend.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "trend.png is a PNG");
    std::fs::remove_dir_all(&dir).unwrap();
}
