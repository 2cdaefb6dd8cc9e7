//! Results history, gates and merges end to end: run files written atomically, a killed run that
//! leaves the history intact, gate exit codes on fixtures, shards merged back together.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use adgauge_reports::store::{read_history, read_run, to_csv, write_atomic};

use common::adgauge;

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("adgauge-history-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn csvs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "csv") && !p.file_name().unwrap().to_string_lossy().starts_with('.')
        })
        .collect();
    v.sort();
    v
}

const ONE_CASE: &str = "hist-add[dist=uniform,index_dtype=i32,k=10,n=1000000,oob=0.05]/cpu/f32/special";

#[test]
fn runs_accumulate_and_gates_judge_fixtures() {
    let hist = temp("gate");
    for _ in 0..2 {
        let out = adgauge(&["run", "--filter", ONE_CASE, "--history", hist.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let runs = csvs(&hist);
    assert_eq!(runs.len(), 2);
    let h = read_history(&hist).unwrap();
    assert_eq!(h[0].1.len(), 1);
    assert_eq!(h[0].1[0].case_id, ONE_CASE);
    assert!(h[0].0.run_id < h[1].0.run_id);

    let base = runs[0].to_str().unwrap();
    // A run compared with itself proves nothing: 2.
    let same = adgauge(&["gate", "--baseline", base, "--current", base]);
    assert_eq!(same.status.code(), Some(2), "{}", String::from_utf8_lossy(&same.stdout));
    // The run's samples are in its file, for the gate's rank test (as many as the suite's time
    // limit let it take: 3 of a 72 ms debug-build vjp under load, 5 in release).
    let vjp = h[0].1[0].vjp.as_ref().unwrap();
    assert!(!vjp.sample_s.is_empty() && vjp.sample_s.len() == vjp.samples, "{vjp:?}");

    // One case 2x slower: 3. The measured run's own samples depend on the machine's load, so
    // the fixtures are that run with 7 samples within 2.5% of a 5 ms median (over the gate's
    // 1 ms minimum), then 10 ms; each fixture is its own run.
    let (mut info, mut rows) = read_run(&runs[0]).unwrap();
    let spread = |t: &mut adgauge_reports::Timing, median: f64| {
        t.median_s = median;
        t.min_s = median * 0.975;
        t.max_s = median * 1.025;
        t.cv = 0.01;
        t.sample_s = [1.0, 0.975, 1.025, 0.99, 1.01, 0.98, 1.02].iter().map(|f| f * median).collect();
    };
    let r = &mut rows[0];
    for t in [&mut r.primal, &mut r.vjp].into_iter().flatten() {
        spread(t, 5e-3);
    }
    info.run_id.push_str("-base");
    let base_path = hist.join("fixture-base.run");
    write_atomic(&base_path, to_csv(&info, &rows)).unwrap();
    let base = base_path.to_str().unwrap();
    let mut slow = rows.clone();
    let r = &mut slow[0];
    for t in [&mut r.primal, &mut r.vjp].into_iter().flatten() {
        spread(t, 10e-3);
    }
    info.run_id.push_str("-slow");
    let slow_path = hist.join("fixture-slow.run");
    write_atomic(&slow_path, to_csv(&info, &slow)).unwrap();
    let junit = hist.join("gate.xml");
    let out = adgauge(&[
        "gate",
        "--baseline",
        base,
        "--current",
        slow_path.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("SLOWER"));
    assert!(std::fs::read_to_string(&junit).unwrap().contains("type=\"slower\""));

    // A check that now fails: 1 (and 1 beats 3 when both apply).
    let mut bad = slow.clone();
    bad[0].checks[0].passed = false;
    info.run_id.push_str("-bad");
    let bad_path = hist.join("fixture-bad.run");
    write_atomic(&bad_path, to_csv(&info, &bad)).unwrap();
    let out = adgauge(&["gate", "--baseline", base, "--current", bad_path.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["findings"][0]["kind"], "check-regressed");

    // Usage errors: 2.
    assert_eq!(adgauge(&["gate", "--baseline", "/nonexistent.csv", "--current", base]).status.code(), Some(2));
    std::fs::remove_dir_all(&hist).unwrap();
}

#[test]
fn a_killed_run_leaves_the_history_intact_and_no_half_written_run() {
    let hist = temp("kill");
    let out = adgauge(&["run", "--filter", ONE_CASE, "--history", hist.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let before = std::fs::read(&csvs(&hist)[0]).unwrap();
    // A small roofline (`common::adgauge`): the default one's 256 MiB take most of the 1.5 s
    // in a debug build, before the run's partial file exists.
    let mut child = Command::new(env!("CARGO_BIN_EXE_adgauge"))
        .args(["run", "--history", hist.to_str().unwrap()])
        .env("ADGAUGE_ROOFLINE_BYTES", "1048576")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let runs = csvs(&hist);
    assert_eq!(runs.len(), 1, "only the complete earlier run is visible: {runs:?}");
    assert_eq!(std::fs::read(&runs[0]).unwrap(), before);
    // The rows finished before the kill survive in the hidden partial file.
    let partial: Vec<PathBuf> = std::fs::read_dir(&hist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().ends_with(".partial.jsonl"))
        .collect();
    assert_eq!(partial.len(), 1);
    assert!(std::fs::read_to_string(&partial[0]).unwrap().starts_with("{\"run_id\":"));
    std::fs::remove_dir_all(&hist).unwrap();
}

#[test]
#[ignore = "slow tier, 78 s in a debug build on 2 cores: .ci/run runs it"]
fn shards_cover_the_suite_once_and_merge_back() {
    let (a, b, merged) = (temp("shard-a"), temp("shard-b"), temp("merged"));
    let filter = "k=10,";
    for (shard, dir) in [("1/2", &a), ("2/2", &b)] {
        let out = adgauge(&["run", "--filter", filter, "--shard", shard, "--out", dir.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let list = adgauge(&["run", "--list", "--filter", filter]);
    let all: Vec<String> = String::from_utf8_lossy(&list.stdout).lines().map(String::from).collect();
    let out = adgauge(&["merge", a.to_str().unwrap(), b.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (info, rows) = read_run(&csvs(&merged)[0]).unwrap();
    let mut ids: Vec<String> = rows.iter().map(|r| r.case_id.clone()).collect();
    ids.sort();
    let mut want = all.clone();
    want.sort();
    assert_eq!(ids, want);
    // Both shards have histograms on the CPU and measured a roofline; the merged run keeps one
    // (the lower of the two sequential rates), so that its histogram rows keep a fraction.
    let parts: Vec<f64> = [&a, &b]
        .iter()
        .map(|d| read_run(&csvs(d)[0]).unwrap().0.roofline.expect("a shard's roofline").seq_read_gb_s)
        .collect();
    let roof = info.roofline.expect("the merged run's roofline");
    assert_eq!(roof.seq_read_gb_s, parts[0].min(parts[1]), "{parts:?}");
    let with_fraction = rows.iter().filter(|r| adgauge_reports::roofline::fraction(r, Some(&roof)).is_some()).count();
    assert!(with_fraction > 0, "no row of the merged run has a fraction of its roofline");
    // Merging a shard with itself would duplicate cases: refused.
    let out = adgauge(&["merge", a.to_str().unwrap(), a.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(adgauge(&["run", "--shard", "3/2", "--list"]).status.code(), Some(2));
    for d in [a, b, merged] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn an_isolated_run_survives_a_crashing_case_and_records_it() {
    let out_dir = temp("isolate");
    let filter = "hist-add[dist=uniform,index_dtype=i32,k=10,n=1000000,oob=0.05]/cpu/f32/";
    let out = Command::new(env!("CARGO_BIN_EXE_adgauge"))
        .args(["run", "--isolate", "--filter", filter, "--out", out_dir.to_str().unwrap()])
        .env("ADGAUGE_INJECT_CRASH", "/cpu/f32/special")
        .env("ADGAUGE_ROOFLINE_BYTES", "1048576")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, rows) = read_run(&csvs(&out_dir)[0]).unwrap();
    assert_eq!(rows.len(), 4, "every case of the filter has a row");
    for r in &rows {
        if r.rule == "special" {
            assert_eq!(r.status.name(), "error");
            assert!(r.message.as_deref().unwrap_or("").contains("ended without a result"), "{:?}", r.message);
        } else {
            assert_eq!(r.status.name(), "ok", "{:?}", r.message);
            assert!(r.vjp.is_some());
        }
    }
    std::fs::remove_dir_all(&out_dir).unwrap();
}

#[test]
fn a_plain_run_saves_itself_unless_told_not_to() {
    let dir = temp("default-save");
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--filter", ONE_CASE];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_adgauge"))
            .args(&args)
            .env("ADGAUGE_RESULTS", &dir)
            .env("ADGAUGE_ROOFLINE_BYTES", "1048576")
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrote run"));
    assert_eq!(csvs(&dir).len(), 1);
    assert_eq!(run(&["--no-save"]).status.code(), Some(0));
    assert_eq!(csvs(&dir).len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The gate goes red where it used to go green: a history gated against itself compares its
/// newest run with the previous one (not with itself), runs that share no case are a usage
/// error, and a case that disappeared or lost its tool (ok -> skipped) fails the gate (the
/// other conditions are in tests/gate.rs).
#[test]
fn the_gate_refuses_what_it_cannot_judge_and_fails_lost_cases() {
    let hist = temp("strict");
    let h = hist.to_str().unwrap();
    let run = || adgauge(&["run", "--filter", ONE_CASE, "--history", h, "--quiet"]);
    assert_eq!(run().status.code(), Some(0));
    let out = adgauge(&["gate", "--baseline", h, "--current", h]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("before the current run"));
    assert_eq!(run().status.code(), Some(0));
    let out = adgauge(&["gate", "--baseline", h, "--current", h, "--max-slowdown", "100"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("compared 1 cases; 0 finding(s)"));
    assert!(String::from_utf8_lossy(&out.stdout).contains(" against newest run "));

    let runs = csvs(&hist);
    let (info, rows) = read_run(&runs[0]).unwrap();
    let fixture = |name: &str, rows: &[adgauge_reports::ResultRow]| {
        let p = hist.join(format!("fixture-{name}.run"));
        let info = adgauge_reports::RunInfo { run_id: format!("{}-{name}", info.run_id), ..info.clone() };
        write_atomic(&p, to_csv(&info, rows)).unwrap();
        p.to_str().unwrap().to_string()
    };
    let base = runs[0].to_str().unwrap();
    let mut other = rows.clone();
    other[0].case_id = "hist-add[other]/cpu/f32/auto".into();
    let out = adgauge(&["gate", "--baseline", base, "--current", &fixture("other", &other)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("share no case"));
    let mut skipped = rows.clone();
    skipped[0].status = adgauge_reports::Status::Skipped;
    skipped[0].message = Some("backend cpu unavailable: test".into());
    let out = adgauge(&["gate", "--baseline", base, "--current", &fixture("skipped", &skipped)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ran in the baseline, skipped now: backend cpu unavailable"));
    let mut two = rows.clone();
    two.push(other[0].clone());
    let out = adgauge(&["gate", "--baseline", &fixture("two", &two), "--current", base, "--max-slowdown", "100"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("MISSING          hist-add[other]"));
    std::fs::remove_dir_all(&hist).unwrap();
}

/// A killed shard leaves its finished rows in `.<run id>.partial.jsonl` (as `RunWriter` writes
/// it, the last row cut mid-line by the kill) and no run file: `merge` takes them (the partial
/// file named, or found in the shard's directory) beside the other shards' runs, and the merged
/// run's id says it is partial. `merge` used to refuse the file ("unexpected header").
#[test]
fn merge_recovers_the_rows_a_killed_shard_flushed_and_marks_the_run_partial() {
    use adgauge_harness::history::RunWriter;
    use adgauge_reports::store::partial_path;
    let (done, killed, merged) = (temp("partial-done"), temp("partial-killed"), temp("partial-merged"));
    let row = |id: &str| {
        let t = adgauge_reports::Timing {
            min_s: 1e-3,
            median_s: 2e-3,
            max_s: 3e-3,
            batch: 1,
            samples: 3,
            cv: 0.1,
            sample_s: vec![2e-3, 1e-3, 3e-3],
        };
        let mut r = adgauge_reports::ResultRow::unmeasured("hist-add", Default::default(), "cpu", "f64", id, 2, 7);
        r.primal = Some(t);
        r
    };
    let mut info = adgauge_harness::environment::run_info();
    info.suite = "quick".into();
    adgauge_reports::store::append_run(&done, &info, &[row("a"), row("b")]).unwrap();
    let mut shard = info.clone();
    shard.run_id.push_str("-2");
    let mut writer = RunWriter::new(vec![killed.clone()], shard.clone()).unwrap();
    for r in ["c", "d"] {
        writer.push(row(r)).unwrap();
    }
    drop(writer); // killed: never finished
    let partial = partial_path(&killed, &shard.run_id);
    let cut = serde_json::to_string(&row("e")).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(&partial).unwrap();
    std::io::Write::write_all(&mut f, &cut.as_bytes()[..cut.len() / 2]).unwrap();
    drop(f);
    assert_eq!(csvs(&killed), Vec::<PathBuf>::new());
    for (i, second) in [partial.as_path(), killed.as_path()].into_iter().enumerate() {
        let out_dir = merged.join(i.to_string());
        let out =
            adgauge(&["merge", done.to_str().unwrap(), second.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains(&format!("partial: 2 rows recovered from {}", partial.display())), "{said}");
        let (info, rows) = read_run(&csvs(&out_dir)[0]).unwrap();
        assert!(info.run_id.ends_with("-partial") && info.is_partial(), "{}", info.run_id);
        let ids: Vec<&str> = rows.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
    }
    for d in [done, killed, merged] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// Two runs started at once into one history both keep their rows: their ids differ by
/// process (each names its process id), where they used to differ only by the clock's
/// sub-second digits, equal on a coarse clock (and one run's files then replaced).
#[test]
fn two_runs_at_once_into_one_history_keep_both_runs() {
    let hist = temp("concurrent");
    let h = hist.to_str().unwrap();
    let children: Vec<std::process::Child> = (0..2)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_adgauge"))
                .args(["run", "--filter", ONE_CASE, "--history", h, "--quiet"])
                .env("ADGAUGE_ROOFLINE_BYTES", "1048576")
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut pids = Vec::new();
    for mut c in children {
        pids.push(c.id());
        assert!(c.wait().unwrap().success());
    }
    let runs = read_history(&hist).unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|(_, rows)| rows.len() == 1));
    for pid in pids {
        let of_pid = runs.iter().filter(|(info, _)| info.run_id.contains(&format!("Z-{pid}-"))).count();
        assert_eq!(of_pid, 1, "process {pid}: {:?}", runs.iter().map(|(i, _)| &i.run_id).collect::<Vec<_>>());
    }
    std::fs::remove_dir_all(&hist).unwrap();
}

/// A run whose files cannot be written at the end (here the CSV's temporary is taken by a
/// directory, as a full disk would fail the write) leaves neither run file, no temporary, and
/// its rows in the partial file, which `merge` turns into a run. The Parquet file used to be
/// written first and stay, so dataframe queries counted a run `adgauge history` did not have.
#[test]
fn a_run_that_cannot_be_written_leaves_no_run_file_and_keeps_its_rows() {
    use adgauge_harness::history::RunWriter;
    let (hist, merged) = (temp("unwritable"), temp("unwritable-merged"));
    let mut info = adgauge_harness::environment::run_info();
    info.suite = "quick".into();
    let mut row = adgauge_reports::ResultRow::unmeasured("hist-add", Default::default(), "cpu", "f64", "auto", 2, 7);
    row.primal = Some(adgauge_reports::Timing {
        min_s: 1e-3,
        median_s: 2e-3,
        max_s: 3e-3,
        batch: 1,
        samples: 3,
        cv: 0.1,
        sample_s: vec![2e-3, 1e-3, 3e-3],
    });
    // One directory named twice (`--out D --history D`) holds the run once.
    let mut writer = RunWriter::new(vec![hist.clone(), hist.clone()], info.clone()).unwrap();
    writer.push(row.clone()).unwrap();
    // The temporary this process writes the CSV to.
    let blocker = hist.join(format!(".{}.csv.{}.tmp", info.run_id, std::process::id()));
    std::fs::create_dir_all(blocker.join("inside")).unwrap();
    let e = writer.finish().unwrap_err().to_string();
    assert!(e.contains(&format!(".{}.csv.", info.run_id)) && e.contains("rows are kept in"), "{e}");
    std::fs::remove_dir_all(&blocker).unwrap();
    let mut left: Vec<String> =
        std::fs::read_dir(&hist).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, [format!(".{}.partial.jsonl", info.run_id)]);
    let out = adgauge(&["merge", hist.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (merged_info, rows) = read_run(&csvs(&merged)[0]).unwrap();
    assert!(merged_info.is_partial());
    assert_eq!(rows, [row]);
    for d in [hist, merged] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// Issue 44, class 2: a run ended by SIGTERM (exit 143) was saved as an ordinary run, became the
/// next night's `previous`, and its missing cases went unreported. Its file now says it was
/// interrupted and after how many cases, and a filtered run says which part of the suite it ran.
#[test]
fn a_run_ended_by_sigterm_is_saved_as_interrupted() {
    let hist = temp("sigterm");
    let filter = "k=10,";
    let mut child = Command::new(env!("CARGO_BIN_EXE_adgauge"))
        .args(["run", "--filter", filter, "--history", hist.to_str().unwrap()])
        .env("ADGAUGE_ROOFLINE_BYTES", "1048576")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Signal once the first case is written (the partial file's second line).
    let started = std::time::Instant::now();
    loop {
        let rows = std::fs::read_dir(&hist).ok().into_iter().flatten().filter_map(|e| {
            let p = e.ok()?.path();
            p.to_string_lossy().ends_with(".partial.jsonl").then(|| std::fs::read_to_string(p).ok()).flatten()
        });
        if rows.into_iter().any(|t| t.lines().count() >= 2) {
            break;
        }
        assert!(started.elapsed().as_secs() < 120, "no case finished in 120 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    assert_eq!(child.wait().unwrap().code(), Some(143));
    let runs = csvs(&hist);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let (info, rows) = read_run(&runs[0]).unwrap();
    let all = String::from_utf8_lossy(&adgauge(&["run", "--list", "--filter", filter]).stdout).lines().count();
    assert!(!rows.is_empty() && rows.len() < all, "{} of {all}", rows.len());
    assert_eq!(info.interrupted, Some(format!("interrupted by SIGTERM after {} of {all} case(s)", rows.len())));
    assert_eq!(info.selection.as_deref(), Some("filter k=10,"));
    assert!(info.is_partial());
    std::fs::remove_dir_all(&hist).unwrap();
}

/// Issue 44, class 5: merging the same shards again (a re-run CI job, or `merge H --out H`)
/// added the run a second time under a new id, stamped with the merge's time; and parts of
/// different git revisions merged as one run. A merge now keeps its parts' time and revision,
/// is idempotent, and refuses mixed revisions.
#[test]
fn merging_the_same_shards_again_adds_nothing_and_keeps_their_time_and_revision() {
    let (a, b, c, merged) = (temp("again-a"), temp("again-b"), temp("again-c"), temp("again-merged"));
    let row = |id: &str| {
        let t = adgauge_reports::Timing {
            min_s: 1e-3,
            median_s: 2e-3,
            max_s: 3e-3,
            batch: 1,
            samples: 3,
            cv: 0.1,
            sample_s: vec![2e-3, 1e-3, 3e-3],
        };
        let mut r = adgauge_reports::ResultRow::unmeasured("hist-add", Default::default(), "cpu", "f64", id, 2, 7);
        r.case_id = id.into();
        r.primal = Some(t);
        r
    };
    let shard = |n: u32, of: &str, rev: &str| adgauge_reports::RunInfo {
        run_id: format!("20261101T05000{n}Z-aaaaaa"),
        timestamp: format!("2026-11-01T05:00:0{n}Z"),
        git_revision: rev.into(),
        selection: Some(format!("shard {of}")),
        suite: "quick".into(),
        ..adgauge_harness::environment::run_info()
    };
    let rev = "1111111111111111111111111111111111111111";
    adgauge_reports::store::append_run(&a, &shard(1, "1/2", rev), &[row("a"), row("b")]).unwrap();
    adgauge_reports::store::append_run(&b, &shard(2, "2/2", rev), &[row("c")]).unwrap();
    let m = merged.to_str().unwrap();
    for _ in 0..2 {
        let out = adgauge(&["merge", a.to_str().unwrap(), b.to_str().unwrap(), "--out", m]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = adgauge(&["merge", m, "--out", m]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("already merged"), "{out:?}");
    let runs = csvs(&merged);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let (info, rows) = read_run(&runs[0]).unwrap();
    assert!(info.run_id.starts_with("20261101T050001Z-merged-"), "{}", info.run_id);
    assert_eq!((info.timestamp.as_str(), info.git_revision.as_str()), ("2026-11-01T05:00:01Z", rev));
    assert_eq!((info.selection, rows.len()), (None, 3));
    // A shard of another revision does not merge with them.
    adgauge_reports::store::append_run(
        &c,
        &shard(3, "2/2", "2222222222222222222222222222222222222222-dirty"),
        &[row("c")],
    )
    .unwrap();
    let out = adgauge(&["merge", a.to_str().unwrap(), c.to_str().unwrap(), "--out", m]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "are of different git revisions ({rev} and 2222222222222222222222222222222222222222-dirty)"
        )),
        "{err}"
    );
    for d in [a, b, c, merged] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// A failed check's worst error is NaN or infinite where the derivative is: the rows' JSON
/// wrote it as `null`, which the partial file's reader refused, so `merge` could not recover a
/// killed run whose finished rows held such a failure (exit 2, and no report that night).
#[test]
fn merge_recovers_a_killed_runs_rows_whose_checks_are_not_finite() {
    use adgauge_harness::history::RunWriter;
    use adgauge_reports::store::partial_path;
    let (killed, merged) = (temp("nonfinite-killed"), temp("nonfinite-merged"));
    let row = |rule: &str, worst: f64| {
        let mut r = adgauge_reports::ResultRow::unmeasured("hist-add", Default::default(), "cpu", "f64", rule, 2, 7);
        r.vjp = Some(adgauge_reports::Timing {
            min_s: 1e-3,
            median_s: 2e-3,
            max_s: 3e-3,
            batch: 1,
            samples: 3,
            cv: 0.1,
            sample_s: vec![2e-3, 1e-3, 3e-3],
        });
        r.checks = vec![
            adgauge_reports::Check { name: "dot-product".into(), worst, tolerance: 1e-10, passed: false },
            adgauge_reports::Check { name: "fd-vjp".into(), worst: -0.0, tolerance: 1e-6, passed: true },
        ];
        r.status = adgauge_reports::Status::Failed;
        r
    };
    let mut info = adgauge_harness::environment::run_info();
    info.suite = "quick".into();
    let mut writer = RunWriter::new(vec![killed.clone()], info.clone()).unwrap();
    let worsts = [f64::INFINITY, f64::NAN, f64::NEG_INFINITY];
    for (i, w) in worsts.iter().enumerate() {
        writer.push(row(&format!("r{i}"), *w)).unwrap();
    }
    drop(writer); // killed: never finished
    let partial = partial_path(&killed, &info.run_id);
    let out = adgauge(&["merge", partial.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (back, rows) = read_run(&csvs(&merged)[0]).unwrap();
    assert!(back.is_partial(), "{}", back.run_id);
    assert_eq!(rows.len(), 3);
    for (r, w) in rows.iter().zip(worsts) {
        let worst = r.checks[0].worst;
        assert!(worst.to_bits() == w.to_bits() || (w.is_nan() && worst.is_nan()), "{}: {worst} for {w}", r.rule);
        assert!(r.checks[1].worst == 0.0 && r.checks[1].worst.is_sign_negative(), "{:?}", r.checks[1]);
        assert_eq!((r.status, r.vjp.as_ref().map(|t| t.median_s)), (adgauge_reports::Status::Failed, Some(2e-3)));
    }
    for d in [killed, merged] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// Under `--isolate` a case's row comes back from its child process over a pipe, in the rows'
/// JSON: a failed case whose check is not finite (a tool answering NaN adjoints) keeps its
/// status, checks and timings. It became "error: ended without a result ... no message", its
/// timings lost, when the row's NaN was written as `null`.
#[test]
fn an_isolated_case_whose_check_is_not_finite_keeps_its_row() {
    if !common::python_available() {
        return;
    }
    let out_dir = temp("isolate-nan");
    let suite = common::temp_file(
        "history",
        "nan-vjp.yaml",
        &format!(
            "name: nan\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [300]\n    k: [9]\n    dtypes: [f64]\n    tools:\n      - {{name: nan, command: \"python3 {} --fault nan-vjp\"}}\n",
            common::planted()
        ),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_adgauge"))
        .args(["run", "--isolate", "--quiet", "--suite", suite.to_str().unwrap(), "--out", out_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, rows) = read_run(&csvs(&out_dir)[0]).unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let r = &rows[0];
    assert_eq!(r.status, adgauge_reports::Status::Failed, "{:?}", r.message);
    assert!(r.checks.iter().any(|c| !c.worst.is_finite() && !c.passed), "{:?}", r.checks);
    assert!(r.primal.is_some() && r.vjp.is_some(), "the timings survive: {r:?}");
    std::fs::remove_dir_all(&out_dir).unwrap();
}
