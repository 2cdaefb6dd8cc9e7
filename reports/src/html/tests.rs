use super::*;
use crate::schema::Check;

/// A timing of `ms` milliseconds with seven samples within ±1%.
fn t(ms: f64) -> Option<Timing> {
    let m = ms * 1e-3;
    Some(Timing {
        min_s: m * 0.99,
        median_s: m,
        max_s: m * 1.01,
        batch: 1,
        samples: 7,
        cv: 0.006,
        sample_s: vec![m, m * 1.01, m * 0.99, m * 1.005, m * 0.995, m * 1.002, m * 0.998],
    })
}

fn row(workload: &str, k: u64, vjp_ms: f64, passed: bool) -> ResultRow {
    let mut params = BTreeMap::new();
    params.insert("k".to_string(), k.to_string());
    params.insert("n".to_string(), "1000000".to_string());
    let mut r = ResultRow::unmeasured(workload, params, "cpu", "f32", "auto", 2, 7);
    (r.primal, r.vjp, r.jvp) = (t(1.0), t(vjp_ms), t(1.5));
    (r.primal_peak_bytes, r.vjp_peak_bytes, r.jvp_peak_bytes) = (Some(1_000_000), Some(3_000_000), Some(2_000_000));
    r.checks.push(Check { name: "fd-vjp".into(), worst: if passed { 1e-9 } else { 0.3 }, tolerance: 1e-6, passed });
    if !passed {
        r.status = Status::Failed;
        r.message = Some("fd-vjp worst 3.000e-1".into());
    }
    r
}

fn info(id: &str, day: u32, rev: &str) -> RunInfo {
    RunInfo {
        run_id: id.into(),
        timestamp: format!("2026-11-{day:02}T05:00:00Z"),
        git_revision: rev.into(),
        adgauge_version: "0.1.0".into(),
        machine: "host <x>".into(),
        cpu_model: "cpu".into(),
        cores: 2,
        governor: "unknown".into(),
        suite: "quick".into(),
        roofline: None,
        interrupted: None,
        selection: None,
    }
}

fn two_runs() -> Vec<(RunInfo, Vec<ResultRow>)> {
    let first = vec![row("hist-add", 10, 2.0, true), row("hist-add", 1000, 2.0, true), row("hist-mul", 10, 2.5, true)];
    let mut second =
        vec![row("hist-add", 10, 5.0, true), row("hist-add", 1000, 2.0, true), row("hist-mul", 10, 2.5, false)];
    second[1].rule_used = Some("general-chunked".into());
    vec![(info("r1", 22, "abc1234def"), first), (info("r2", 23, "fed4321cba"), second)]
}

/// The report as `adgauge report` renders a history: against its previous run.
fn report(runs: &[(RunInfo, Vec<ResultRow>)]) -> String {
    let base =
        runs.len().checked_sub(2).map(|i| Baseline::run("previous run".into(), runs[i].0.clone(), runs[i].1.clone()));
    render(runs, base.as_ref())
}

fn position(html: &str, needle: &str) -> usize {
    html.find(needle).unwrap_or_else(|| panic!("missing {needle}"))
}

/// What kept the quick suite's report from fitting a 1280 px screen, or from reading well:
/// every table scrolls in its own box; a chart's times are in one unit it chooses (ms here,
/// not seconds as `1e-3`); trends have a line per workload and tool, and runs of one day are
/// told apart by their time; a tool that could not start is said once; a case without
/// parameters or rule reads `lstm f64`.
#[test]
fn the_report_fits_the_screen_and_says_things_once() {
    let mut runs = two_runs();
    runs[1].0.timestamp = "2026-11-22T17:45:00Z".into();
    runs[1].0.git_revision = "abc1234def".into();
    for (_, rows) in &mut runs {
        let mut other = row("hist-add", 10, 4.0, true);
        other.backend = "jax".into();
        other.case_id = other.case_id.replace("/cpu/", "/jax/");
        rows.push(other);
        for k in [10, 1000, 100_000] {
            let mut missing = row("hist-mul", k, 1.0, true);
            missing.backend = "pytorch".into();
            missing.case_id = missing.case_id.replace("/cpu/", "/pytorch/");
            missing.status = Status::Skipped;
            missing.message = Some("tool pytorch unavailable: python3 cannot import torch".into());
            (missing.primal, missing.vjp, missing.jvp) = (None, None, None);
            rows.push(missing);
        }
        let mut lstm = ResultRow::unmeasured("lstm", BTreeMap::new(), "cpu", "f64", "-", 2, 7);
        (lstm.primal, lstm.vjp, lstm.jvp) = (t(3.0), t(9.0), t(6.0));
        rows.push(lstm);
    }
    let html = report(&runs);
    // Every table is boxed; the page's own width is the body's.
    assert_eq!(html.matches("<table").count(), html.matches("<div class=\"scroll\"><table").count());
    assert!(CSS.contains(".scroll{overflow-x:auto") && CSS.contains("position:sticky"));
    // Trends: one line per workload and tool, labelled by time and commit.
    let trends = &html[position(&html, "id=\"trends\"")..position(&html, "id=\"scaling\"")];
    assert!(trends.contains("hist-add on cpu</li>") && trends.contains("hist-add on jax</li>"), "{trends}");
    assert!(trends.contains("11-22 05:00 abc1234") && trends.contains("11-22 17:45 abc1234"), "{trends}");
    // The primal medians are 1-4 ms: the axis says ms, and no tick is in seconds.
    assert!(trends.contains("primal (ms)"), "{trends}");
    assert!(!trends.contains("primal (s)") && !trends.contains("e-3<"), "{trends}");
    // The scaling chart of hist-add (k = 10 and 1000) in ms too.
    let scaling = &html[position(&html, "id=\"scaling\"")..position(&html, "id=\"environment\"")];
    assert!(scaling.contains("vjp median (ms)"), "{scaling}");
    // The unavailable tool: one line for its three cases.
    let findings = &html[position(&html, "id=\"findings\"")..position(&html, "id=\"changes\"")];
    assert_eq!(findings.matches("python3 cannot import torch").count(), 1, "{findings}");
    assert!(findings.contains("3 case(s)"), "{findings}");
    // A case without parameters or rule.
    let changes = &html[position(&html, "id=\"changes\"")..position(&html, "id=\"overheads\"")];
    assert!(changes.contains("<td class=\"l\">lstm f64</td>"), "{changes}");
    assert!(!html.contains("lstm[]") && !html.contains("f64 -<"), "no empty brackets or rule");
    assert_eq!(named_case("hist-add", &["k=10".into()], "f32", "auto"), "hist-add[k=10] f32 auto");
}

#[test]
fn runs_of_one_minute_are_labelled_by_their_seconds() {
    let (mut a, mut b, c) = (info("a", 22, "abc1234def"), info("b", 22, "abc1234def"), info("c", 23, "abc1234def"));
    a.timestamp = "2026-11-22T05:00:07Z".into();
    b.timestamp = "2026-11-22T05:00:41Z".into();
    assert_eq!(run_labels(&[&a, &b, &c]), ["11-22 05:00:07 abc1234", "11-22 05:00:41 abc1234", "11-23 05:00 abc1234"]);
}

#[test]
fn a_chart_picks_the_time_unit_its_values_read_best_in() {
    assert_eq!(charts::time_unit([2e-3, 5e-3]), (1e3, "ms"));
    assert_eq!(charts::time_unit([2e-6, 9e-6]), (1e6, "µs"));
    assert_eq!(charts::time_unit([1.5, 30.0]), (1.0, "s"));
    assert_eq!(charts::time_unit([3e-9]), (1e9, "ns"));
    // The middle of a wide range: 1 µs to 1 s reads in ms.
    assert_eq!(charts::time_unit([1e-6, 1.0]), (1e3, "ms"));
    assert_eq!(charts::time_unit([f64::NAN, 0.0]), (1e3, "ms"));
}

#[test]
fn the_paired_comparison_has_its_section_with_regressions_first() {
    use crate::paired::{PAIRED_SCHEMA, PairedHeader, PairedRow};
    let header = PairedHeader {
        schema: PAIRED_SCHEMA.into(),
        id: "p1".into(),
        timestamp: "2026-11-28T02:00:00Z".into(),
        baseline: "bin:/base/adgauge".into(),
        candidate: "bin:/cand/<adgauge>".into(),
        suite: "quick".into(),
        machine: "host".into(),
        cpu_model: "cpu".into(),
        cores: 2,
        load_start: Some(2.5),
        load_end: Some(3.25),
        max_slowdown: 1.1,
        alpha: 0.01,
        confidence: 0.95,
        wall_s: 60.0,
        complete: false,
    };
    let paired_row = |id: &str, verdict: &str, ratio: f64| PairedRow {
        case_id: id.into(),
        workload: "hist-add".into(),
        tool: "cpu".into(),
        dtype: "f32".into(),
        rule: "auto".into(),
        mode: "primal".into(),
        verdict: verdict.into(),
        ratio: Some(ratio),
        ci_low: Some(ratio - 0.05),
        ci_high: Some(ratio + 0.05),
        p: Some(1e-4),
        pairs: 16,
        processes: 4,
        runs_per_block: 10,
        baseline_s: Some(1e-3),
        candidate_s: Some(ratio * 1e-3),
        why: format!("{verdict} because"),
        baseline_blocks: vec![],
        candidate_blocks: vec![],
        block_process: vec![],
    };
    let rows = vec![paired_row("quiet-case", "no change", 1.0), paired_row("slow-case", "regressed", 1.25)];
    let history = vec![(info("r1", 28, "abc"), vec![row("hist-add", 10, 2.0, true)])];
    let html = render_with_paired(&history, None, Some(&(header, rows)));
    assert!(html.contains("<a href=\"#paired\">paired</a>"));
    let section = &html[html.find("id=\"paired\"").unwrap()..html.find("id=\"findings\"").unwrap()];
    assert!(section.contains("<b>1 regressed</b>, 0 improved, 1 no change, 0 not judged of 2 timing(s)"), "{section}");
    assert!(section.contains("bin:/cand/&lt;adgauge&gt;"), "{section}");
    assert!(section.contains("load 2.50 to 3.25"), "{section}");
    assert!(section.contains("This comparison was interrupted"), "{section}");
    assert!(section.find("slow-case").unwrap() < section.find("quiet-case").unwrap(), "{section}");
    assert!(
        section.contains("<td>1.0000</td><td>1.2500</td><td>1.250x</td><td>[1.200, 1.300]</td><td>16</td>"),
        "{section}"
    );
    // Without a paired comparison: no section, no link.
    let plain = render(&history, None);
    assert!(!plain.contains("id=\"paired\"") && !plain.contains("#paired"));
}

#[test]
fn the_report_opens_with_the_verdict_and_the_regressions_then_the_findings() {
    let html = report(&two_runs());
    assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>"));
    for id in [
        "verdict",
        "findings",
        "changes",
        "overheads",
        "grid",
        "trends",
        "scaling",
        "environment",
        "memory",
        "validation",
    ] {
        assert!(html.contains(&format!("id=\"{id}\"")), "missing section {id}");
        assert!(id == "verdict" || html.contains(&format!("href=\"#{id}\"")), "missing link to {id}");
    }
    // The verdict comes first: the gate's (a failed check: exit 1), with the speed verdicts
    // counted, and the one regression with its interval.
    let verdict = &html[position(&html, "class=\"verdict fail\"")..position(&html, "<nav>")];
    assert!(verdict.contains("<b>FAIL (exit 1)</b>") && verdict.contains("3 cases: 2 ok, 1 failed"), "{verdict}");
    assert!(verdict.contains("against previous run: 3 case(s) compared"), "{verdict}");
    assert!(verdict.contains("speed: 1 regressed, 0 improved, 5 no change, 0 not judged of 6 timing(s)"), "{verdict}");
    assert!(verdict.contains("95% bootstrap intervals (10000 resamples)"), "{verdict}");
    let top = &verdict[position(verdict, "regressed (1)")..];
    assert!(
        top.contains(
            "hist-add[k=10,n=1000000]/cpu/f32/auto</a></td><td>vjp</td><td>2</td><td>5</td><td class=\"bad\">2.500x ["
        ),
        "{top}"
    );
    // Then the findings, one line per cause.
    let findings = &html[position(&html, "id=\"findings\"")..position(&html, "id=\"changes\"")];
    assert!(
        findings.contains("hist-mul[k=10,n=1000000]/cpu/f32/auto: check fd-vjp passed in the baseline"),
        "{findings}"
    );
    assert!(findings.contains("1 timing(s) regressed: the largest in the verdict above"), "{findings}");
    // Peak memory per case, collapsed: 1, 3 and 2 MB, ratios 3 and 2.
    let memory = &html[position(&html, "id=\"memory\"")..position(&html, "id=\"validation\"")];
    assert!(memory.contains("<details><summary>peak memory of 3 case(s)"), "{memory}");
    assert!(memory.contains("<td class=\"l\">hist-mul[k=10,n=1000000] f32 auto</td><td class=\"l\">cpu</td><td>1</td><td>3</td><td>2</td><td>3</td><td>2</td>"), "{memory}");
    // The validation table is collapsed, failed checks first.
    let validation = &html[position(&html, "id=\"validation\"")..];
    assert!(validation.starts_with("id=\"validation\">Validation</h2><details><summary>3 checks, 1 failed"));
    assert!(position(validation, "FAIL") < position(validation, "pass"));
    assert!(html.contains("host &lt;x&gt;"), "text is escaped");
    // Nothing is fetched: no scripts, no external references (the SVG namespace URI is a name).
    assert!(!html.contains("<script"));
    for external in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(!html.contains(external), "external reference {external}");
    }
}

/// Every case has a row: its medians with their spread, and per mode the change with its
/// interval, coloured by verdict; the regressed case first.
#[test]
fn the_table_of_changes_lists_every_case_with_ratio_interval_and_spread() {
    let html = report(&two_runs());
    let table = &html[position(&html, "id=\"changes\"")..position(&html, "id=\"overheads\"")];
    assert_eq!(table.matches("<tr id=\"c-").count(), 3);
    let first = &table[position(table, "<tr id=\"c-")..];
    let first = &first[..position(first, "</tr>")];
    // n is the same in both hist-add cases: the label leaves it out, the note says it.
    assert!(first.contains("hist-add[k=10] f32 auto"), "regressed first: {first}");
    assert!(table.contains("left out of the labels: hist-add: n=1000000."), "{table}");
    assert!(first.contains("<td>5 <small>±1%</small></td><td class=\"bad\" title=\"regressed: 95% CI"), "{first}");
    assert!(first.contains("<td class=\"\" title=\"no change: 95% CI"), "{first}");
    assert!(table.contains("3 cases, 7 samples per mode unless said (n)"), "{table}");
    // The rule auto ran, where the row says.
    assert!(table.contains("hist-add[k=1000] f32 auto (auto ran general-chunked)"), "rule taken");
    // The failed case was not judged on speed: it has no change cells, but its medians.
    let mul = &table[position(table, "hist-mul[k=10,n=1000000] f32 auto")..];
    assert!(mul[..position(mul, "</tr>")].contains("<td>–</td>"), "{mul}");
}

/// The quick suite: three samples a side cannot be judged; the banner says so and
/// never "nothing regressed".
#[test]
fn a_run_judged_on_nothing_is_not_passed_as_nothing_regressed() {
    let mut runs = two_runs();
    for (_, rows) in &mut runs {
        rows.retain(|r| r.workload == "hist-add");
        for r in rows.iter_mut() {
            for t in [&mut r.primal, &mut r.vjp, &mut r.jvp].into_iter().flatten() {
                t.sample_s.truncate(3);
            }
        }
    }
    let html = report(&runs);
    let verdict = &html[position(&html, "id=\"verdict\"")..position(&html, "<nav>")];
    assert!(
        verdict.contains("PASS on checks and coverage; speed NOT JUDGED: none of 6 timing(s) could be judged"),
        "{verdict}"
    );
    assert!(verdict.contains("(not judged: 6 too few samples)"), "{verdict}");
    assert!(html.contains("class=\"verdict warn\""));
    assert!(!html.contains("nothing regressed"));
}

#[test]
fn the_status_grid_fails_only_the_modes_a_failed_check_names() {
    let html = report(&two_runs());
    let grid = &html[position(&html, "id=\"grid\"")..position(&html, "id=\"tools\"")];
    let mul = &grid[position(grid, ">hist-mul<")..];
    let cell = &mul[..position(mul, "</tr>")];
    // fd-vjp failed: primal and jvp passed (1 of 1), vjp failed (0 of 1).
    assert!(
        cell.contains(
            "<span class=\"ok\">✓1/1</span> · <span class=\"bad\">✗0/1</span> · <span class=\"ok\">✓1/1</span>"
        ),
        "{cell}"
    );
    let add = &grid[position(grid, ">hist-add<")..];
    assert!(add[..position(add, "</tr>")].matches("✓2/2").count() == 3, "{add}");
}

/// Overheads are workload × rule grids per mode, cells shaded by the ratio; a group with a
/// failed check is kept and marked.
#[test]
fn overheads_are_grids_of_workload_and_rule_with_failed_groups_marked() {
    let html = report(&two_runs());
    let grids = &html[position(&html, "id=\"overheads\"")..position(&html, "id=\"grid\"")];
    for title in ["vjp / primal time", "jvp / primal time", "vjp / primal memory", "jvp / primal memory"] {
        assert!(grids.contains(&format!("<th class=\"l\">{title}</th><th>auto</th>")), "{title}");
    }
    // hist-add vjp: 5 ms and 2 ms over 1 ms primals, geometric mean sqrt(10) = 3.16; hist-mul
    // 2.5, failed (marked).
    let vjp = &grids[..position(grids, "jvp / primal time")];
    assert!(
        vjp.contains(&format!("<td style=\"background:{}\" title=\"2 case(s)\">3.16</td>", heat(10f64.sqrt()))),
        "{vjp}"
    );
    assert!(vjp.contains("title=\"1 case(s)\">2.5*</td>"), "{vjp}");
    // A ratio resting on a timing whose samples spread over ±40%: marked, in time not memory.
    let mut runs = two_runs();
    let t = runs[1].1[2].vjp.as_mut().unwrap();
    (t.min_s, t.max_s) = (t.median_s * 0.6, t.median_s * 1.4);
    let html = report(&runs);
    let grids = &html[position(&html, "id=\"overheads\"")..position(&html, "id=\"grid\"")];
    assert!(grids.contains("title=\"1 case(s)\">2.5*~</td>"), "{grids}");
    assert_eq!(grids.matches("~</td>").count(), 1, "only the vjp time grid: {grids}");
    assert_eq!(heat(1.0), "#ffffff");
    assert_eq!(heat(8.0), "#ff6955");
}

#[test]
fn tools_are_compared_case_by_case_relative_to_the_cpu_engine() {
    let mut cpu = row("hist-max", 10, 2.0, true);
    cpu.checks.clear();
    let mut jax = cpu.clone();
    jax.backend = "jax".into();
    jax.case_id = jax.case_id.replace("/cpu/", "/jax/");
    jax.vjp = t(8.0);
    jax.message = Some("ties: convention: tie-policy split".into());
    let mut pytorch = cpu.clone();
    pytorch.backend = "pytorch".into();
    pytorch.status = Status::Skipped;
    pytorch.message = Some("unsupported: tool pytorch could not evaluate hist.jvp".into());
    let html = render(&[(info("r1", 23, "abc"), vec![cpu, jax, pytorch])], None);
    let tools = &html[position(&html, "id=\"tools\"")..position(&html, "id=\"trends\"")];
    let jax_row = &tools[position(tools, ">jax<")..];
    let jax_row = &jax_row[..position(jax_row, "</tr>")];
    assert!(jax_row.contains("<td>8 (4x)</td>"), "vjp 8 ms, 4x the CPU's 2 ms: {jax_row}");
    assert!(jax_row.contains("<td>1 (1x)</td>"), "{jax_row}");
    assert!(jax_row.contains("convention — ties: convention: tie-policy split"), "{jax_row}");
    assert!(tools.contains("unsupported — unsupported: tool pytorch"), "{tools}");
    // One run: nothing to judge speed against, and the verdict says so.
    assert!(html.contains("PASS on checks; speed NOT JUDGED: no earlier run of this suite to compare with"));
    assert!(html.contains("class=\"verdict warn\""));
}

/// Histogram rows get a roofline column: n = 10^6, k = 1000, f32 values and (rows without
/// the index dtype column) 8-byte indices move 10^6 x 12 + 2 x 1000 x 4 = 12 008 000 bytes;
/// in the primal's 1 ms that is 12.008 GB/s, 30% of a measured 40 GB/s; its 10^6 updates at
/// the measured 1.25 x 10^9/s need 0.8 ms, the slower ceiling: bound 80%. The run's roofline
/// is in the environment; without one, the fraction is blank, and tables without
/// histograms have no such column.
#[test]
fn histogram_rows_show_their_achieved_bandwidth_and_fraction_of_the_roofline() {
    let mut runs = two_runs();
    runs[1].0.roofline = Some(Roofline {
        threads: 2,
        seq_read_gb_s: 40.0,
        random: vec![crate::RandomRate { bins: 1000, reads_per_s: 2.5e9, updates_per_s: 1.25e9 }],
        tools: vec!["cpu".into()],
    });
    let html = report(&runs);
    let changes = &html[position(&html, "id=\"changes\"")..position(&html, "id=\"overheads\"")];
    assert!(changes.contains("<th>roofline</th>"), "{changes}");
    let line = &changes[position(changes, "id=\"c-hist-add-k-1000")..];
    let line = &line[..position(line, "</tr>")];
    assert!(line.contains("<td>12.0 GB/s 30%, bound 80%</td>"), "{line}");
    let env = &html[position(&html, "id=\"environment\"")..];
    assert!(
        env.contains(
            "40 GB/s sequential read on 2 threads; random 4-byte reads/updates per s: k=1000 2.500e9/1.250e9; for cpu"
        ),
        "{env}"
    );
    runs[1].0.roofline = None;
    let html = report(&runs);
    let changes = &html[position(&html, "id=\"changes\"")..position(&html, "id=\"overheads\"")];
    let line = &changes[position(changes, "id=\"c-hist-add-k-1000")..];
    assert!(line[..position(line, "</tr>")].contains("<td>12.0 GB/s –</td>"), "{line}");
    let env = &html[position(&html, "id=\"environment\"")..];
    assert!(env.contains("not measured (no histogram case on a CPU device)"), "{env}");
    for r in &mut runs[1].1 {
        r.workload = "kmeans".into();
    }
    let html = report(&runs);
    assert!(!html.contains("<th>roofline</th>"));
}

#[test]
fn the_environment_of_the_runs_compared_is_diffed_and_trends_are_dated() {
    let mut runs = two_runs();
    for r in &mut runs[1].1 {
        r.threads = 1;
    }
    let html = report(&runs);
    let env = &html[position(&html, "id=\"environment\"")..];
    assert!(
        env.contains(
            "<tr class=\"diff\"><th class=\"l\">threads</th><td class=\"l env\">1</td><td class=\"l env\">2</td></tr>"
        ),
        "{env}"
    );
    assert!(env.contains("<tr><th class=\"l\">hosts (CPU, cores, compiler [target features])</th><td class=\"l env\">cpu (2 cores)</td>"), "{env}");
    let trends = &html[position(&html, "id=\"trends\"")..position(&html, "id=\"scaling\"")];
    assert!(
        trends.contains("11-22 05:00 abc1234") && trends.contains("11-23 05:00 fed4321"),
        "dated and committed ticks"
    );
    assert!(trends.contains("<ul class=\"legend\">") && trends.contains("hist-add</li>"), "{trends}");
}

#[test]
fn every_scaling_series_is_drawn_and_repeated_colours_are_said() {
    let mut rows = Vec::new();
    for rule in 0..15 {
        for k in [10, 100] {
            let mut r = row("hist-add", k, 2.0, true);
            r.rule = format!("rule{rule:02}");
            rows.push(r);
        }
    }
    let html = render(&[(info("r1", 22, "a"), rows)], None);
    let scaling = &html[position(&html, "id=\"scaling\"")..position(&html, "id=\"environment\"")];
    assert_eq!(scaling.matches("<li>").count(), 15, "every series in the legend");
    assert!(scaling.contains("15 series; colours repeat after 12"));
    assert!(scaling.contains("hist-add: vjp median vs k"));
}

/// A history whose medians are 1e308 s (hand-edited, or a broken clock) renders, with
/// finite axes labelled at its values, instead of looping over the decades (issue 36).
#[test]
fn a_history_of_huge_times_renders_with_labelled_axes() {
    let huge = |k: u64| {
        let mut r = row("hist-add", k, 1.0, true);
        for t in [&mut r.primal, &mut r.vjp, &mut r.jvp].into_iter().flatten() {
            *t = Timing {
                min_s: 1e308,
                median_s: 1e308,
                max_s: 1e308,
                batch: 1,
                samples: 7,
                cv: 0.0,
                sample_s: vec![1e308; 8],
            };
        }
        r
    };
    let runs = vec![(info("r1", 22, "a"), vec![huge(10), huge(100)]), (info("r2", 23, "b"), vec![huge(10), huge(100)])];
    let html = report(&runs);
    let scaling = &html[position(&html, "id=\"scaling\"")..position(&html, "id=\"environment\"")];
    assert!(scaling.contains(">\n1e308\n<"), "the time axis is labelled at 1e308: {scaling}");
    assert!(html.contains("speed: 0 regressed, 0 improved, 6 no change"), "identical runs");
}

#[test]
fn an_empty_history_still_renders() {
    assert!(render(&[], None).contains("holds no runs"));
}

// The view models, without markup: each section's figures as computed from the fixtures by hand.

/// The newest run of `runs` gated against the run before it, as `report` gates it.
fn gated(runs: &[(RunInfo, Vec<ResultRow>)]) -> (Baseline, crate::gate::GateReport) {
    let (before, now) = (&runs[runs.len() - 2], &runs[runs.len() - 1]);
    let base = Baseline::run("previous run".into(), before.0.clone(), before.1.clone());
    let gate = crate::gate::gate_runs(&base, &now.0, &now.1, &crate::gate::GateConfig::default());
    (base, gate)
}

/// The second run: 2 cases ok and one failed (hist-mul's fd-vjp); of its 9 timings only
/// hist-add k=10's vjp moved (2 ms to 5 ms), the one regression, shown in the banner with its
/// medians in ms and its anchor.
#[test]
fn the_verdict_counts_the_statuses_and_lists_the_regression() {
    let runs = two_runs();
    let (base, gate) = gated(&runs);
    let v = view::verdict(&runs[1].1, Some(&base), Some(&gate));
    assert_eq!(v.class, "fail");
    assert_eq!(v.statuses, view::StatusCounts { cases: 3, ok: 2, failed: 1, error: 0, timeout: 0, skipped: 0 });
    let c = v.comparison.expect("a baseline");
    assert_eq!((c.compared, c.confidence_pct.as_str(), c.resamples), (3, "95", 10000));
    assert!(c.not_judged.is_none() && v.warnings.is_empty());
    let top = v.regressed.expect("one regression");
    assert_eq!((top.count, top.rows.len(), top.more), (1, 1, None));
    let r = &top.rows[0];
    assert_eq!(r.anchor, "hist-add-k-10-n-1000000--cpu-f32-auto");
    assert_eq!(r.mode.0, "vjp");
    assert_eq!((r.baseline_ms.as_str(), r.now_ms.as_str()), ("2", "5"));
    // Without a baseline: the failed case fails the run, and nothing is compared.
    let alone = view::verdict(&runs[1].1, None, None);
    assert_eq!(alone.class, "fail");
    assert_eq!(alone.headline.0, "FAIL: 1 case(s) failed, errored or timed out");
    assert!(alone.comparison.is_none() && alone.regressed.is_none());
}

/// Without a baseline the findings are the broken cases, each with its message and failed
/// checks; skipped cases are grouped per tool and reason.
#[test]
fn findings_on_their_own_name_the_broken_cases_and_group_the_skipped() {
    let mut rows = two_runs().remove(1).1;
    for k in [10, 1000, 100_000] {
        let mut r = row("hist-mul", k, 1.0, true);
        r.backend = "pytorch".into();
        r.status = Status::Skipped;
        r.message = Some("tool pytorch unavailable".into());
        rows.push(r);
    }
    let f = view::findings(&rows, None);
    let view::FindingsBody::Lines(lines) = &f.body else { panic!("one broken case") };
    assert_eq!(lines.len(), 1);
    assert_eq!((lines[0].class, lines[0].kind.0.as_str()), ("bad", "failed"));
    assert_eq!(
        lines[0].summary.0,
        "hist-mul[k=10,n=1000000]/cpu/f32/auto: fd-vjp worst 3.000e-1 — fd-vjp worst 3.00e-1 > 1e-6"
    );
    assert!(lines[0].cases.is_empty() && lines[0].more.is_none());
    let skipped = f.skipped.expect("three skipped");
    assert_eq!((skipped.cases, skipped.reason_count()), (3, 1));
    let reason = &skipped.reasons[0];
    assert_eq!(
        (reason.tool.0.as_str(), reason.why.0.as_str(), reason.cases),
        ("pytorch", "tool pytorch unavailable", 3)
    );
    assert_eq!(reason.shown[2].0, "hist-mul[k=100000,n=1000000] f32 auto");
    // Against the previous run, where the first run had no failure: the gate's findings instead.
    let runs = two_runs();
    let (_, gate) = gated(&runs);
    let f = view::findings(&runs[1].1, Some(&gate));
    let view::FindingsBody::Lines(lines) = &f.body else { panic!("findings") };
    assert_eq!(lines.last().map(|l| (l.class, l.kind.0.as_str())), Some(("warn", "slower")));
    assert!(lines.last().unwrap().summary.0.starts_with("1 timing(s) regressed"));
}

/// The table of changes: the regressed case first, n (the same in both hist-add cases) left
/// out of its label, medians in ms with the samples' ±1% spread, 7 samples the usual count.
#[test]
fn the_changes_view_sorts_the_regression_first_with_its_cells() {
    let runs = two_runs();
    let (_, gate) = gated(&runs);
    let c = view::changes(&runs[1].1, Some(&gate), None);
    assert_eq!((c.cases, c.usual_samples, c.histograms), (3, 7, true));
    assert_eq!(c.fixed.as_ref().map(|f| f.0.as_str()), Some("hist-add: n=1000000"));
    let first = &c.rows[0];
    assert_eq!(first.label.0, "hist-add[k=10] f32 auto");
    let primal = first.modes[0].time.as_ref().expect("timed");
    assert_eq!((primal.median_ms.as_str(), primal.spread.0.as_str()), ("1", "±1%"));
    let vjp = first.modes[1].change.as_ref().expect("compared");
    assert_eq!((vjp.class, vjp.verdict), ("bad", "regressed"));
    assert!(vjp.text.0.starts_with("2.5x ["), "{}", vjp.text.0);
    assert_eq!(first.modes[2].change.as_ref().map(|c| c.class), Some(""));
    // 12 008 000 bytes in the primal's 1 ms: 12.0 GB/s, no roofline measured.
    assert_eq!(first.roofline.as_ref().map(|r| r.0.as_str()), Some("12.0 GB/s –"));
    assert_eq!((first.status_class, first.status.0.as_str()), ("ok", "ok"));
    let mul = c.rows.iter().find(|r| r.label.0.starts_with("hist-mul")).expect("hist-mul");
    assert_eq!(mul.status.0, "failed: fd-vjp worst 3.000e-1");
    assert!(mul.modes.iter().all(|m| m.change.is_none()), "a failed case is not judged on speed");
}

/// Grids of geometric means: hist-add's vjp over primal is 5 and 2 (sqrt 10 = 3.16), its jvp
/// 1.5 and 1.5; memory 3 MB and 2 MB over 1 MB; hist-mul's group has the failed check.
#[test]
fn the_overhead_view_holds_geometric_means_shaded_and_marked() {
    let rows = two_runs().remove(1).1;
    let o = view::overheads(&rows);
    let titles: Vec<&str> = o.grids.iter().map(|g| g.title).collect();
    assert_eq!(titles, ["vjp / primal time", "jvp / primal time", "vjp / primal memory", "jvp / primal memory"]);
    let values = |grid: usize| -> Vec<(String, usize, &str)> {
        o.grids[grid]
            .rows
            .iter()
            .map(|r| r.cells[0].as_ref().map(|c| (c.value.clone(), c.cases, c.marks)).unwrap())
            .collect()
    };
    assert_eq!(values(0), [("3.16".to_string(), 2, ""), ("2.5".to_string(), 1, "*")]);
    assert_eq!(values(1), [("1.5".to_string(), 2, ""), ("1.5".to_string(), 1, "*")]);
    assert_eq!(values(2), [("3".to_string(), 2, ""), ("3".to_string(), 1, "*")]);
    assert_eq!(values(3), [("2".to_string(), 2, ""), ("2".to_string(), 1, "*")]);
    assert_eq!(o.grids[0].rows[0].cells[0].as_ref().unwrap().colour, heat(10f64.sqrt()));
    assert_eq!(view::geo_mean(&[2.0, 8.0, f64::NAN, -1.0]), Some(4.0));
    assert_eq!(view::geo_mean(&[0.0]), None);
}

#[test]
fn the_status_grid_view_tallies_each_mode() {
    let rows = two_runs().remove(1).1;
    let workloads = rows.iter().map(|r| r.workload.as_str()).collect();
    let g = view::status_grid(&rows, &workloads);
    assert_eq!(g.tools.len(), 1);
    let tally = |class, mark, passed, cases| view::ModeTally { class, mark, passed, cases };
    let add = g.rows[0].cells[0].as_ref().expect("hist-add on cpu");
    assert_eq!(*add, [tally("ok", "✓", 2, 2), tally("ok", "✓", 2, 2), tally("ok", "✓", 2, 2)]);
    let mul = g.rows[1].cells[0].as_ref().expect("hist-mul on cpu");
    assert_eq!(*mul, [tally("ok", "✓", 1, 1), tally("bad", "✗", 0, 1), tally("ok", "✓", 1, 1)]);
}

/// jax's vjp of 8 ms is 4x the CPU engine's 2 ms; its primal and jvp match (1x).
#[test]
fn the_tools_view_times_each_tool_against_the_cpu_engine() {
    let mut cpu = row("hist-max", 10, 2.0, true);
    cpu.checks.clear();
    let mut jax = cpu.clone();
    jax.backend = "jax".into();
    jax.vjp = t(8.0);
    jax.message = Some("ties: convention: tie-policy split".into());
    let mut pytorch = cpu.clone();
    pytorch.backend = "pytorch".into();
    pytorch.status = Status::Skipped;
    pytorch.message = Some("unsupported: no jvp".into());
    let solo = row("hist-min", 10, 2.0, true);
    let v = view::tools_compared(&[cpu, jax, pytorch, solo]);
    assert_eq!(v.cases.len(), 1, "hist-min ran on one tool");
    assert_eq!(v.cases[0].case.0, "hist-max[k=10,n=1000000] f32 auto");
    let [cpu, jax, pytorch] = &v.cases[0].tools[..] else { panic!("three tools") };
    assert_eq!(cpu.times, ["1", "2", "1.5"]);
    assert_eq!(jax.times, ["1 (1x)", "8 (4x)", "1.5 (1x)"]);
    assert_eq!((jax.vjp_overhead.as_str(), jax.jvp_overhead.as_str()), ("8", "1.5"));
    assert_eq!((jax.class, jax.finding.0.as_str()), ("ok", "convention — ties: convention: tie-policy split"));
    assert_eq!((pytorch.class, pytorch.finding.0.as_str()), ("skip", "unsupported — unsupported: no jvp"));
    assert_eq!(cpu.finding.0, "ok");
}

/// Memory in MB (1, 3 and 2 of 10^6 bytes) and its ratios; checks failed first, in the page's
/// number formats.
#[test]
fn the_memory_and_validation_views_hold_every_case_and_check() {
    let rows = two_runs().remove(1).1;
    let m = view::memory(&rows);
    assert_eq!(m.cases(), 3);
    let mul = m.rows.iter().find(|r| r.label.0.starts_with("hist-mul")).expect("hist-mul");
    assert_eq!(mul.mb, ["1", "3", "2"]);
    assert_eq!((mul.vjp_ratio.as_str(), mul.jvp_ratio.as_str()), ("3", "2"));
    let v = view::validation(&rows);
    assert_eq!((v.total, v.failed), (3, 1));
    let first = &v.rows[0];
    assert_eq!(first.case_id.0, "hist-mul[k=10,n=1000000]/cpu/f32/auto");
    assert_eq!((first.worst.as_str(), first.tolerance.as_str(), first.result()), ("3.00e-1", "1e-6", ("bad", "FAIL")));
    assert_eq!(v.rows[1].result(), ("ok", "pass"));
}

/// The sections in page order, the paired comparison first where there is one; the
/// navigation and the body are both laid out from this list.
#[test]
fn the_sections_are_one_list_in_page_order() {
    let anchors = |r: view::Report| match r {
        view::Report::Run(run) => run.sections.iter().map(view::Section::anchor).collect::<Vec<_>>(),
        view::Report::Empty => Vec::new(),
    };
    let runs = two_runs();
    let expected = [
        "findings",
        "changes",
        "overheads",
        "grid",
        "tools",
        "trends",
        "scaling",
        "environment",
        "memory",
        "validation",
    ];
    assert_eq!(anchors(view::report(&runs, None, None)), expected);
    assert!(anchors(view::report(&[], None, None)).is_empty());
}

/// The environment side by side with the baseline's: only what differs (here the run id, time
/// and revision, and the threads) is marked.
#[test]
fn the_environment_view_marks_what_differs_from_the_baseline() {
    let mut runs = two_runs();
    for r in &mut runs[1].1 {
        r.threads = 1;
    }
    let (base, _) = gated(&runs);
    let view::EnvironmentView::Compared(rows) = view::environment(&runs[1].0, &runs[1].1, Some(&base)) else {
        panic!("a baseline")
    };
    let differing: Vec<&str> = rows.iter().filter(|r| r.differs).map(|r| r.field).collect();
    assert_eq!(differing, ["run id", "time (UTC)", "git revision", "threads"]);
    let threads = rows.iter().find(|r| r.field == "threads").expect("threads");
    assert_eq!((threads.now.0.as_str(), threads.baseline.0.as_str()), ("1", "2"));
}

/// Regressions first, then not judged, improved, no change; 1 ms and 1.25 ms in ms with four
/// decimals, the change and its interval with three.
#[test]
fn the_paired_view_orders_by_verdict_and_formats_the_pairs() {
    use crate::paired::{PAIRED_SCHEMA, PairedHeader, PairedRow};
    let header = PairedHeader {
        schema: PAIRED_SCHEMA.into(),
        id: "p".into(),
        timestamp: "t".into(),
        baseline: "b".into(),
        candidate: "c".into(),
        suite: "quick".into(),
        machine: "m".into(),
        cpu_model: "cpu".into(),
        cores: 2,
        load_start: None,
        load_end: Some(3.254),
        max_slowdown: 1.1,
        alpha: 0.01,
        confidence: 0.95,
        wall_s: 1.0,
        complete: true,
    };
    let paired = |id: &str, verdict: &str, ratio: Option<f64>| PairedRow {
        case_id: id.into(),
        workload: "w".into(),
        tool: "cpu".into(),
        dtype: "f32".into(),
        rule: "auto".into(),
        mode: "vjp".into(),
        verdict: verdict.into(),
        ratio,
        ci_low: ratio.map(|r| r - 0.05),
        ci_high: ratio.map(|r| r + 0.05),
        p: None,
        pairs: 12,
        processes: 3,
        runs_per_block: 1,
        baseline_s: Some(1e-3),
        candidate_s: ratio.map(|r| r * 1e-3),
        why: String::new(),
        baseline_blocks: vec![],
        candidate_blocks: vec![],
        block_process: vec![],
    };
    let rows = vec![
        paired("same", "no change", Some(1.0)),
        paired("fast", "improved", Some(0.8)),
        paired("unsure", "not judged", None),
        paired("slow", "regressed", Some(1.25)),
    ];
    let v = view::paired_view(&(header, rows));
    assert_eq!((v.regressed, v.improved, v.no_change, v.not_judged, v.timings), (1, 1, 1, 1, 4));
    assert_eq!((v.load_start.as_str(), v.load_end.as_str()), ("?", "3.25"));
    assert_eq!((v.confidence_pct.as_str(), v.max_slowdown.as_str(), v.alpha.as_str()), ("95", "1.1", "0.01"));
    let order: Vec<&str> = v.rows.iter().map(|r| r.case_id.0.as_str()).collect();
    assert_eq!(order, ["slow", "unsure", "fast", "same"]);
    let slow = &v.rows[0];
    assert_eq!(slow.class, Some("bad"));
    assert_eq!(
        [&slow.baseline_ms, &slow.candidate_ms, &slow.change, &slow.interval],
        ["1.0000", "1.2500", "1.250x", "[1.200, 1.300]"]
    );
    let unsure = &v.rows[1];
    assert_eq!((unsure.class, unsure.change.as_str(), unsure.interval.as_str()), (None, "–", "–"));
    assert_eq!(v.rows[2].class, Some("better"));
}

/// Outside text renders as `crate::text::html` writes it: entities, and control characters
/// (a tool's colour escapes) written out, where maud's own escaping would leave them raw.
#[test]
fn outside_text_is_escaped_control_characters_included() {
    let text = view::Text("a \"<b>\" & \u{1b}[31mred\u{7}\tx".into());
    assert_eq!(maud::html! { (text) }.into_string(), "a &quot;&lt;b&gt;&quot; &amp; \\u{1b}[31mred\\u{7}\tx");
}
