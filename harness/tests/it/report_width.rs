//! The report fits the screen: a history shaped like the quick suite's (histograms with their
//! roofline column at several k, a parameter-less workload, a tool that cannot start, two runs
//! so that there are changes and trends) renders with no horizontal overflow in headless
//! Chromium at 1280 and 1920 px (`scripts/screenshot-report.sh`, which also takes the
//! screenshots, left in the test's temporary folder).
//!
//! Skipped, saying why, without Chromium (a failure when `ADGAUGE_REQUIRE` lists `chromium`).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{adgauge, stderr, stdout, temp_file};

const SUITE: &str = "name: wide\ntiming: {samples: 3, min_sample_ms: 1, time_limit_s: 0.05}\ncases:\n  - workload: hist\n    ops: [add, logaddexp]\n    rules: [auto, general-sort]\n    n: [20000]\n    k: [10, 1000, 100000]\n    dtypes: [f32]\n    validate: false\n  - workload: lstm\n    l: [2]\n    c: [8]\n    b: [4]\n    dtypes: [f64]\n    validate: false\n    tools:\n      - cpu\n      - {name: a-tool-with-a-long-name-that-cannot-start, command: /nonexistent/adgauge/peer/tool --with many --arguments}\n";

#[test]
fn the_quick_suite_s_report_has_no_horizontal_scrollbar_at_1280_or_1920_px() {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()));
    if browser.is_none() {
        adgauge_testkit::skip("chromium", "Chromium is not installed", "apt-get install -y chromium");
        return;
    }
    let suite = temp_file("report-width", "wide.yaml", SUITE);
    let dir = suite.parent().unwrap().to_path_buf();
    let history = dir.join("history");
    for _ in 0..2 {
        let out =
            adgauge(&["run", "--suite", suite.to_str().unwrap(), "--history", history.to_str().unwrap(), "--quiet"]);
        // The tool that cannot start makes the run exit 4; its rows are written all the same.
        assert_eq!(out.status.code(), Some(4), "{}{}", stdout(&out), stderr(&out));
    }
    let report = dir.join("report");
    let out = adgauge(&["report", "--history", history.to_str().unwrap(), "--out", report.to_str().unwrap()]);
    assert!(report.join("index.html").exists(), "{}{}", stdout(&out), stderr(&out));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/screenshot-report.sh");
    for width in ["1280", "1920"] {
        let png = dir.join(format!("report-{width}.png"));
        let out =
            Command::new("bash").arg(&script).arg(report.join("index.html")).arg(&png).arg(width).output().unwrap();
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{said}");
        assert!(said.contains(&format!("{width} px: page ")) && said.contains("fits"), "{said}");
        assert!(std::fs::metadata(&png).is_ok_and(|m| m.len() > 10_000), "a screenshot of the page: {said}");
    }
}
