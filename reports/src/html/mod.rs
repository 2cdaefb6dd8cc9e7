//! The self-contained HTML report: one `index.html` with inline SVG and CSS, no JavaScript and no
//! network access, rebuilt from result files alone.
//!
//! It reads like a dashboard, most urgent first: the verdict (the gate's, against the same
//! baseline `adgauge gate` takes, with the speed verdicts counted and the worst regressions),
//! the findings grouped per cause, a table of every case with its change since the baseline
//! (ratio of medians, bootstrap interval, verdict) and its samples' spread, AD overhead as
//! workload × rule grids per mode, a status grid (workload × tool × mode), the tools side by
//! side, trends over the history's runs, scaling charts per workload, the environment of the
//! runs compared, and, collapsed, the cases' peak memory and the validation table. Everything is
//! laid out for 1280 px: text of 12 px or more, charts drawn at the size shown.
//!
//! Two halves: `view.rs` computes, per section, a view model (plain structs of formatted
//! figures, classes, rows and chart SVG) from the history; `markup.rs` lays each out with a
//! maud template and computes nothing. The sections are one list of `view::Section`, from which
//! the templates write both the navigation and the body.

mod markup;
mod view;

use crate::gate::Baseline;
use crate::schema::{ResultRow, RunInfo};

// What the unit tests (tests.rs, `use super::*`) reach of the two halves.
#[cfg(test)]
use {
    crate::charts,
    crate::roofline::Roofline,
    crate::schema::{Status, Timing},
    markup::CSS,
    std::collections::BTreeMap,
    view::{heat, named_case, run_labels},
};

/// Renders the report for a history (oldest run first): the newest run, compared with
/// `baseline` the way `adgauge gate` compares them (the gate's rules and default thresholds),
/// or on its own without one.
pub fn render(history: &[(RunInfo, Vec<ResultRow>)], baseline: Option<&Baseline>) -> String {
    render_with_paired(history, baseline, None)
}

/// A paired comparison (`adgauge compare`) as read from its file.
pub type Paired = (crate::paired::PairedHeader, Vec<crate::paired::PairedRow>);

/// [`render`] with the newest paired comparison of the history, shown in its own section.
pub fn render_with_paired(
    history: &[(RunInfo, Vec<ResultRow>)],
    baseline: Option<&Baseline>,
    paired: Option<&Paired>,
) -> String {
    markup::page(&view::report(history, baseline, paired)).into_string()
}

#[cfg(test)]
mod tests;
