//! What a run records about itself: id, time, git revision, version and machine, the CPU's
//! histogram roofline where the run has histograms on a CPU device, and what each row records of
//! the host that measured it (CPU, cores, compiler, target features).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use adgauge_backends::cpu::roofline::{MIN_SEQ_BYTES, RANDOM_ACCESSES, SEQ_BYTES};
use adgauge_backends::{Cpu, DEVICES, Device};
use adgauge_reports::{Host, RandomRate, Roofline, RunInfo};

use crate::pipeline::Case;

/// The seed of the roofline's random index stream (`backends --roofline` and `run`).
pub const ROOFLINE_SEED: u64 = 20_261_127;

/// Environment variable: the bytes of the run's sequential roofline buffer (default
/// [`SEQ_BYTES`], 256 MiB; at least [`MIN_SEQ_BYTES`]), the random accesses scaled with it.
/// Below the last-level cache the figures are the caches', not memory's: for tests, which need
/// a measurement to record, not its value.
pub const ROOFLINE_BYTES_VAR: &str = "ADGAUGE_ROOFLINE_BYTES";

/// The sizes of the run's roofline measurement: (sequential bytes, random accesses per pass),
/// or an error naming [`ROOFLINE_BYTES_VAR`] when it is set to something else than a size.
pub fn roofline_sizes() -> Result<(usize, usize), String> {
    sizes_from(std::env::var_os(ROOFLINE_BYTES_VAR).map(|v| v.to_string_lossy().into_owned()).as_deref())
}

/// [`roofline_sizes`] for the variable's value, if set.
fn sizes_from(value: Option<&str>) -> Result<(usize, usize), String> {
    let Some(text) = value else { return Ok((SEQ_BYTES, RANDOM_ACCESSES)) };
    match text.trim().parse::<usize>() {
        Ok(bytes) if bytes >= MIN_SEQ_BYTES => {
            // The random stream shrinks with the buffer (1 MiB: 8192 accesses), at least 1024.
            let accesses = (RANDOM_ACCESSES as u128 * bytes as u128 / SEQ_BYTES as u128) as usize;
            Ok((bytes, accesses.max(1024)))
        }
        _ => Err(format!("{ROOFLINE_BYTES_VAR}='{text}': expected a number of bytes >= {MIN_SEQ_BYTES}")),
    }
}

/// The CPU roofline of a run whose `cases` include a histogram on one of adgauge's CPU devices
/// (those share the run's CPU device, so its threads are theirs): the sequential read rate and
/// the random rates at each k of those cases, measured on `cpu` once before the cases. None
/// for a run without such a case. `sizes` come from [`roofline_sizes`]. A measurement that
/// fails (its checks) or would exceed the memory limit is an error here; the run reports it and
/// goes on without a roofline.
pub fn run_roofline(cpu: &Cpu, cases: &[Case], sizes: (usize, usize)) -> Result<Option<Roofline>, String> {
    let on_cpu = |tool: &str| DEVICES.iter().any(|d| d.name == tool && d.on_cpu.is_some());
    // The rows that will get a bandwidth (by the rows' workload name, as reports decide it).
    let histograms: Vec<&Case> =
        cases.iter().filter(|c| adgauge_reports::roofline::is_histogram_workload(&c.name) && on_cpu(&c.tool)).collect();
    if histograms.is_empty() {
        return Ok(None);
    }
    let mut tools: Vec<String> = Vec::new();
    for c in &histograms {
        if !tools.contains(&c.tool) {
            tools.push(c.tool.clone());
        }
    }
    let mut bins: Vec<usize> = histograms.iter().filter_map(|c| c.params.int("k").ok()).collect();
    bins.sort_unstable();
    bins.dedup();
    let (seq_bytes, accesses) = sizes;
    // The buffer, the index stream and one table of every k per thread (the rounds keep them
    // all), checked against the memory limit before anything is allocated (an allocation that
    // fails would abort).
    let tables = cpu.threads() as u128 * bins.iter().map(|&k| k as u128).sum::<u128>() * 4;
    adgauge_datasets::limits::check("the run's roofline", seq_bytes as u128 + accesses as u128 * 4 + tables)?;
    let r = cpu.roofline_sized(&bins, ROOFLINE_SEED, seq_bytes, accesses).map_err(|e| e.to_string())?;
    Ok(Some(Roofline {
        threads: r.threads,
        seq_read_gb_s: r.seq_read_bytes_per_s / 1e9,
        random: r
            .random
            .iter()
            .map(|x| RandomRate { bins: x.bins, reads_per_s: x.reads_per_s, updates_per_s: x.updates_per_s })
            .collect(),
        tools,
    }))
}

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// (RFC 3339 UTC timestamp, compact sortable form) for a time in seconds since the epoch.
pub fn utc(secs: u64) -> (String, String) {
    let (y, mo, d) = civil((secs / 86_400) as i64);
    let s = secs % 86_400;
    let (h, mi, se) = (s / 3600, s % 3600 / 60, s % 60);
    (format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{se:02}Z"), format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{se:02}Z"))
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The git revision this binary was built from (`build.rs`; "unknown" outside a git checkout,
/// `<hash>-dirty` when tracked files differed from the commit). `ADGAUGE_GIT_REV` overrides it,
/// for builds whose source came without its history (a CI artifact, a tarball).
fn git_revision() -> String {
    std::env::var("ADGAUGE_GIT_REV")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| env!("ADGAUGE_BUILD_GIT_REV").to_string())
}

/// The host this binary measures on: the machine's CPU model and cores, and the compiler and
/// target features it was built with (`build.rs`). Every row of a run carries it, so that a
/// merge of shards from different machines keeps each row's.
pub fn host() -> Host {
    Host {
        cpu_model: cpu_model(),
        cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        rustc: env!("ADGAUGE_BUILD_RUSTC").to_string(),
        target_features: env!("ADGAUGE_BUILD_TARGET_FEATURES").to_string(),
    }
}

/// 32 bits no other process can predict: std's `RandomState` is keyed from the operating
/// system's random source once per process, and hashes the time and process id here.
fn random_bits(now: Duration, pid: u32) -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(now.as_nanos());
    h.write_u32(pid);
    h.finish() as u32
}

/// A run's id: `<compact UTC time>-<process id>-<8 random hex digits>`. It sorts by time to
/// the second; the process id keeps two runs started at once on one machine apart (a coarse
/// clock gives them the same time, and one run's files would replace the other's), and the
/// random part keeps apart runs of two machines (shards) or two runs of one process.
pub fn run_id(compact: &str, pid: u32, random: u32) -> String {
    format!("{compact}-{pid}-{random:08x}")
}

/// Information about this run and machine.
pub fn run_info() -> RunInfo {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let (timestamp, compact) = utc(now.as_secs());
    let pid = std::process::id();
    let host = read_trimmed("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown-host".into());
    RunInfo {
        run_id: run_id(&compact, pid, random_bits(now, pid)),
        timestamp,
        git_revision: git_revision(),
        adgauge_version: env!("CARGO_PKG_VERSION").into(),
        machine: format!("{host} ({} {})", std::env::consts::OS, std::env::consts::ARCH),
        cpu_model: cpu_model(),
        cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        governor: read_trimmed("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
            .unwrap_or_else(|| "unknown".into()),
        suite: String::new(),
        roofline: None,
        interrupted: None,
        selection: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0).0, "1970-01-01T00:00:00Z");
        // 2026-11-22T05:00:00Z
        assert_eq!(utc(1_795_323_600), ("2026-11-22T05:00:00Z".to_string(), "20261122T050000Z".to_string()));
        // A leap day.
        assert_eq!(utc(951_782_400).0, "2000-02-29T00:00:00Z");
    }

    #[test]
    fn run_ids_sort_by_time_and_name_the_process() {
        let a = run_info();
        assert!(a.run_id.len() > 17 && a.run_id.as_bytes()[8] == b'T');
        assert!(a.run_id.contains(&format!("Z-{}-", std::process::id())), "{}", a.run_id);
        assert!(a.cores >= 1);
        assert_eq!(run_id("20261122T050000Z", 4_194_303, 0xab), "20261122T050000Z-4194303-000000ab");
    }

    /// On a clock that does not move between two runs (a coarse wall clock, or two runs started
    /// in the same tick), the ids still differ: by process, and within a process by the random
    /// part. The id used to be the sub-second nanoseconds' low 24 bits (the shifted process id
    /// was masked away), the same for both.
    #[test]
    fn run_ids_differ_at_the_same_instant() {
        let now = Duration::from_secs(1_795_323_600);
        let (_, compact) = utc(now.as_secs());
        let ids: std::collections::BTreeSet<String> =
            [1000, 1001, 1000, 1000].iter().map(|&pid| run_id(&compact, pid, random_bits(now, pid))).collect();
        assert_eq!(ids.len(), 4, "{ids:?}");
    }

    #[test]
    fn the_roofline_sizes_default_to_memorys_and_shrink_with_the_variable() {
        assert_eq!(sizes_from(None), Ok((256 << 20, 1 << 21)));
        assert_eq!(sizes_from(Some("1048576")), Ok((1 << 20, 8192)));
        // The random stream keeps at least 1024 accesses.
        assert_eq!(sizes_from(Some(" 524288 ")), Ok((1 << 19, 4096)));
        for bad in ["", "1M", "-5", "8"] {
            let e = sizes_from(Some(bad)).unwrap_err();
            assert!(e.starts_with(&format!("ADGAUGE_ROOFLINE_BYTES='{bad}'")) && e.contains(">= 524288"), "{e}");
        }
    }

    /// Only histograms on adgauge's CPU devices call for a roofline, measured at each of their
    /// k once (ascending) and applying to those devices.
    #[test]
    fn the_roofline_is_measured_for_histograms_on_cpu_devices_only() {
        let cases = |entries: &str| {
            let text = format!("name: r\ncases:\n{entries}");
            crate::suite::parse_suite_with(&text, "r.yaml", &[]).unwrap().cases
        };
        let cpu = Cpu::new(Some(2)).unwrap();
        let small = (MIN_SEQ_BYTES, 1024);
        let hist = "  - {workload: hist, ops: [add, min], n: [100], k: [1000, 10], dtypes: [f32], tools: [opencl, cpu-traced, cpu]}\n";
        let r = run_roofline(&cpu, &cases(hist), small).unwrap().expect("histograms on cpu");
        assert_eq!(r.random.iter().map(|x| x.bins).collect::<Vec<_>>(), [10, 1000]);
        assert_eq!(r.tools, ["cpu-traced", "cpu"]);
        assert_eq!(r.threads, 2);
        assert!(r.seq_read_gb_s > 0.0);
        let llsq = "  - {workload: llsq, n: [40], m: [5], dtypes: [f64]}\n";
        assert_eq!(run_roofline(&cpu, &cases(llsq), small).unwrap(), None);
        let gpu_only = "  - {workload: hist, ops: [add], n: [100], k: [10], dtypes: [f32], tools: [opencl]}\n";
        assert_eq!(run_roofline(&cpu, &cases(gpu_only), small).unwrap(), None);
    }

    #[test]
    fn the_host_names_the_compiler_and_the_runs_cpu() {
        let (h, run) = (host(), run_info());
        assert!(h.rustc.starts_with("rustc 1."), "{}", h.rustc);
        assert_eq!((h.cpu_model, h.cores), (run.cpu_model, run.cores));
        // Every target cargo builds for enables some feature (x86-64: at least sse2).
        assert!(!h.target_features.is_empty());
    }
}
