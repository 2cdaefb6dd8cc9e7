//! The memory limit: the most bytes one size (a replicated dataset, a suite case, an `eval`
//! input) may need, checked before anything is allocated. The process sets it once from
//! `--max-memory` ([`set_max_bytes`]); the default is the least of half the physical memory
//! and the limits the process really has, its address-space limit and its cgroup's memory limit,
//! each less the process's own [`headroom`] ([`default_max_bytes`]). A refusal names the field
//! and the bytes it would need.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// 0 = not set: [`max_bytes`] gives the default.
static MAX_BYTES: AtomicU64 = AtomicU64::new(0);

/// Used where the physical memory cannot be read (no /proc/meminfo).
pub const FALLBACK_BYTES: u64 = 8 << 30;

/// What a refusal says the limit is.
const DEFAULT_IS: &str = "default the least of half the physical memory, RLIMIT_AS and the cgroup's memory limit, \
     the last two less a quarter (at least 256 MiB) for the process itself";

/// The least [`headroom`] kept under a hard limit.
pub const MIN_HEADROOM: u64 = 256 << 20;

/// What the default keeps free under a hard limit of `limit` bytes (RLIMIT_AS or a cgroup's):
/// a quarter of it, at least [`MIN_HEADROOM`], at most half. A size is checked alone, but the
/// process also holds what no size check sees: its code and libraries, a stack reserved per
/// thread (8 MiB of address space each, one per core in the thread pool), the allocator's
/// partly used segments, the run's roofline buffers and the rows and files of the run. With the
/// limit itself as the default, a 1.2 GB histogram case passed its check under a 1.5 GB `ulimit
/// -v` and aborted on allocation.
pub fn headroom(limit: u64) -> u64 {
    (limit / 4).max(MIN_HEADROOM).min(limit / 2)
}

/// The default limit: the least of half the physical memory (or [`FALLBACK_BYTES`]), the
/// process's address-space limit (RLIMIT_AS, `ulimit -v`) and its cgroup's memory limit, the
/// last two less their [`headroom`]. Half the physical memory alone let sizes through under a
/// 4 GB cap, which then aborted on allocation instead of being refused.
pub fn default_max_bytes() -> u64 {
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let text = |p: &str| read(Path::new(p));
    least_limit(
        text("/proc/meminfo").and_then(|m| half_physical(&m)),
        text("/proc/self/limits").and_then(|l| address_space_limit(&l)),
        match (text("/proc/self/cgroup"), text("/proc/self/mountinfo")) {
            (Some(c), Some(m)) => cgroup_limit(&c, &m, read),
            _ => None,
        },
    )
}

/// The least of half the physical memory (or [`FALLBACK_BYTES`] where unknown) and the limits
/// that are set, each less its [`headroom`].
pub fn least_limit(half_physical: Option<u64>, address_space: Option<u64>, cgroup: Option<u64>) -> u64 {
    let usable = |limit: Option<u64>| limit.map(|l| l - headroom(l));
    [Some(half_physical.unwrap_or(FALLBACK_BYTES)), usable(address_space), usable(cgroup)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(FALLBACK_BYTES)
        .max(1)
}

/// Half of `MemTotal` in the text of /proc/meminfo.
pub fn half_physical(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024) / 2).filter(|&b| b > 0)
}

/// The soft address-space limit (RLIMIT_AS) in the text of /proc/self/limits; None when
/// unlimited.
pub fn address_space_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find_map(|l| l.strip_prefix("Max address space"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// A cgroup memory limit file's value: `max` (v2) is none.
fn limit_value(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The memory limit of the process's cgroup, from the texts of /proc/self/cgroup and
/// /proc/self/mountinfo, `read` reading the control files: the least `memory.max` (cgroup v2)
/// or `memory.limit_in_bytes` (v1, the memory controller's hierarchy) of the process's cgroup
/// and every ancestor up to the hierarchy's mount (a parent's limit binds its children). None
/// where no limit is set or none can be read.
pub fn cgroup_limit(cgroup: &str, mountinfo: &str, read: impl Fn(&Path) -> Option<String>) -> Option<u64> {
    // Mounts of the hierarchies: (root of the hierarchy seen there, mount point, control file).
    let mut mounts: Vec<(&str, &str, &str, bool)> = Vec::new();
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else { continue };
        let fields: Vec<&str> = before.split_whitespace().collect();
        let tail: Vec<&str> = after.split_whitespace().collect();
        let (Some(&root), Some(&point), Some(&fstype)) = (fields.get(3), fields.get(4), tail.first()) else {
            continue;
        };
        match fstype {
            "cgroup2" => mounts.push((root, point, "memory.max", true)),
            "cgroup" if tail.get(2).is_some_and(|o| o.split(',').any(|o| o == "memory")) => {
                mounts.push((root, point, "memory.limit_in_bytes", false))
            }
            _ => {}
        }
    }
    let mut least: Option<u64> = None;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let v2 = id == "0" && controllers.is_empty();
        if !v2 && !controllers.split(',').any(|c| c == "memory") {
            continue;
        }
        for &(root, point, file, _) in mounts.iter().filter(|m| m.3 == v2) {
            // The cgroup's directory under the mount (the mount point itself when the path lies
            // outside the part of the hierarchy mounted there).
            let inner = path
                .strip_prefix(root.trim_end_matches('/'))
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))
                .unwrap_or("")
                .trim_start_matches('/');
            let top = PathBuf::from(point);
            let mut dir = top.join(inner);
            loop {
                if let Some(v) = read(&dir.join(file)).as_deref().and_then(limit_value) {
                    least = Some(least.map_or(v, |l| l.min(v)));
                }
                if dir == top || !dir.pop() {
                    break;
                }
            }
        }
    }
    least
}

/// The limit in force: `--max-memory`'s, or the default, read from the system once (the first
/// check) and kept, so commands that never check a size never read it and those that check many
/// read /proc and the cgroup files once.
pub fn max_bytes() -> u64 {
    match MAX_BYTES.load(Ordering::Relaxed) {
        0 => {
            let default = default_max_bytes().max(1);
            // A limit set meanwhile (`set_max_bytes`) wins over the default.
            match MAX_BYTES.compare_exchange(0, default, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => default,
                Err(set) => set,
            }
        }
        b => b,
    }
}

/// Sets the limit for the process (`--max-memory`).
pub fn set_max_bytes(bytes: u64) {
    MAX_BYTES.store(bytes.max(1), Ordering::Relaxed);
}

/// `Err(message)` when `bytes` exceed the limit: "`what` needs N bytes, more than the memory
/// limit L (--max-memory)".
pub fn check(what: &str, bytes: u128) -> Result<(), String> {
    let limit = max_bytes();
    if bytes > u128::from(limit) {
        return Err(format!(
            "{what} needs {bytes} bytes, more than the memory limit {limit} (--max-memory; {DEFAULT_IS})"
        ));
    }
    Ok(())
}

/// Parses a byte count: a whole number with an optional K, M, G or T suffix (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => match c.to_ascii_uppercase() {
            'K' => (&t[..i], 10),
            'M' => (&t[..i], 20),
            'G' => (&t[..i], 30),
            'T' => (&t[..i], 40),
            _ => return Err(format!("'{s}' is not a byte count (a number with K, M, G or T)")),
        },
        _ => (t, 0),
    };
    match digits.parse::<u64>() {
        Ok(n) if n > 0 && n.checked_shl(shift).is_some_and(|b| b >> shift == n) => Ok(n << shift),
        _ => Err(format!("'{s}' is not a byte count (a positive number with K, M, G or T)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse_with_suffixes_and_refuse_garbage() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("512m"), Ok(512 << 20));
        for bad in ["", "0", "-1", "1X", "G", "99999999999999T"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert!(default_max_bytes() > 0);
    }

    /// The files of a fake /sys: path -> contents.
    fn files(entries: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: std::collections::BTreeMap<PathBuf, String> =
            entries.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())).collect();
        move |p: &Path| map.get(p).cloned()
    }

    const MOUNTS_V2: &str = "\
        24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n\
        25 24 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 rw,nsdelegate\n";

    /// cgroup v2: the least `memory.max` of the process's cgroup and its ancestors, `max` being
    /// no limit; no limit anywhere is none.
    #[test]
    fn the_cgroup_v2_limit_is_the_least_memory_max_up_the_tree() {
        let cgroup = "0::/user.slice/job.scope\n";
        let read = files(&[
            ("/sys/fs/cgroup/user.slice/job.scope/memory.max", "max\n"),
            ("/sys/fs/cgroup/user.slice/memory.max", "4294967296\n"),
        ]);
        assert_eq!(cgroup_limit(cgroup, MOUNTS_V2, &read), Some(4 << 30));
        let read = files(&[
            ("/sys/fs/cgroup/user.slice/job.scope/memory.max", "1073741824\n"),
            ("/sys/fs/cgroup/user.slice/memory.max", "4294967296\n"),
        ]);
        assert_eq!(cgroup_limit(cgroup, MOUNTS_V2, &read), Some(1 << 30));
        let read = files(&[("/sys/fs/cgroup/user.slice/job.scope/memory.max", "max\n")]);
        assert_eq!(cgroup_limit(cgroup, MOUNTS_V2, &read), None);
        // In a container (a cgroup namespace) the process's cgroup is the mount's root.
        let read = files(&[("/sys/fs/cgroup/memory.max", "2147483648\n")]);
        assert_eq!(cgroup_limit("0::/\n", MOUNTS_V2, &read), Some(2 << 30));
    }

    /// cgroup v1: `memory.limit_in_bytes` of the memory controller's hierarchy (mounted with
    /// others or alone), where the mount may show only a part of the hierarchy.
    #[test]
    fn the_cgroup_v1_limit_is_read_from_the_memory_hierarchy() {
        let mounts = "\
            31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
            32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
            35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
            41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let cgroup = "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc/job\n0::/\n";
        let read = files(&[
            ("/sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "3221225472\n"),
            ("/sys/fs/cgroup/cpu,cpuacct/memory.limit_in_bytes", "1\n"),
            ("/sys/fs/cgroup/unified/memory.max", "max\n"),
        ]);
        assert_eq!(cgroup_limit(cgroup, mounts, &read), Some(3 << 30));
        // A prefix of a name is not an ancestor: /docker/abcd is outside /docker/abc.
        let read = files(&[
            ("/sys/fs/cgroup/memory/d/memory.limit_in_bytes", "1024\n"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "3221225472\n"),
        ]);
        assert_eq!(cgroup_limit("4:memory:/docker/abcd\n", mounts, &read), Some(3 << 30));
    }

    #[test]
    fn the_default_is_the_least_of_half_the_memory_and_the_limits_set() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree:        1000 kB\n";
        assert_eq!(half_physical(meminfo), Some(12_000_000 * 1024));
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max stack size            8388608              unlimited            bytes     \n\
                      Max address space         4294967296           unlimited            bytes     \n";
        assert_eq!(address_space_limit(limits), Some(4 << 30));
        assert_eq!(address_space_limit(&limits.replace("4294967296 ", "unlimited  ")), None);
        let half = half_physical(meminfo);
        assert_eq!(least_limit(half, None, None), 12_000_000 * 1024);
        // A hard limit keeps a quarter free for the process itself: 4 GiB leaves 3 GiB.
        assert_eq!(least_limit(half, Some(4 << 30), None), 3 << 30);
        assert_eq!(least_limit(half, Some(4 << 30), Some(3 << 30)), (3 << 30) - (768 << 20));
        assert_eq!(least_limit(None, None, Some(64 << 30)), FALLBACK_BYTES);
        assert_eq!(least_limit(None, Some(1 << 30), None), 768 << 20);
    }

    /// The headroom is a quarter of the limit, never under 256 MiB, never over half: a 1.5 GB
    /// address space leaves 1.125 GB for sizes, so a 1.2 GB case is refused, not aborted.
    #[test]
    fn the_default_leaves_headroom_under_hard_limits() {
        assert_eq!(headroom(16 << 30), 4 << 30);
        assert_eq!(headroom(1 << 30), 256 << 20);
        assert_eq!(headroom(512 << 20), 256 << 20);
        assert_eq!(headroom(100 << 20), 50 << 20);
        assert_eq!(least_limit(None, Some(1_500_000_000), None), 1_125_000_000);
        assert!(least_limit(None, Some(1_500_000_000), None) < 1_200_000_000);
        assert_eq!(least_limit(None, Some(1), None), 1);
    }
}
