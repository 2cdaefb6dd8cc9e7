//! BA Jacobian overhead on the CPU: residuals (objective) time, Jacobian by reverse sweeps, by
//! forward sweeps and by hand (manual), minimum of repeated runs with the inputs and the
//! Jacobian's sparsity pattern resident (built once per problem, for AD and manual alike), for
//! ADBench BA files. Without arguments: ba1..ba5 of the ADBench folder
//! (`../shared/datasets/adbench/ba/ba{1..5}_*.txt`, or `$ADGAUGE_ADBENCH_DIR/ba`).
//! `cargo run --release -p adgauge-workloads --example ba_overhead [-- [--threads N] [--f32] FILE...]`.

mod common;

use std::path::PathBuf;

use common::best;

use adgauge_backends::{Cpu, DType};
use adgauge_datasets::ba::BaInput;
use adgauge_workloads::ba;

fn default_files() -> Vec<PathBuf> {
    let dir = adgauge_testkit::adbench_location().join("ba");
    let mut files: Vec<(usize, PathBuf)> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter_map(|p| {
                    let name = p.file_name()?.to_str()?.to_string();
                    let k: usize = name.strip_prefix("ba")?.split('_').next()?.parse().ok()?;
                    (1..=5).contains(&k).then_some((k, p))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    if files.is_empty() {
        eprintln!("no ba1..ba5 files in {} (pass files as arguments)", dir.display());
    }
    files.into_iter().map(|(_, p)| p).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let threads = args.iter().position(|a| a == "--threads").and_then(|i| args.get(i + 1)?.parse().ok());
    let (dtype, name) = if args.iter().any(|a| a == "--f32") { (DType::F32, "f32") } else { (DType::F64, "f64") };
    let mut files: Vec<PathBuf> = Vec::new();
    let mut skip = false;
    for a in &args {
        if skip {
            skip = false;
        } else if a == "--threads" {
            skip = true;
        } else if !a.starts_with("--") {
            files.push(a.into());
        }
    }
    if files.is_empty() {
        files = default_files();
    }
    let cpu = Cpu::new(threads).unwrap();
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} ({name}, {} threads)",
        "file",
        "obj ms",
        "rev J ms",
        "fwd J ms",
        "man J ms",
        "man obj ms",
        "rev/obj",
        "fwd/obj",
        "rev/man",
        rayon::current_num_threads()
    );
    for path in files {
        let b = match BaInput::read(&path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{e}");
                continue;
            }
        };
        let x = ba::upload(&cpu, &b, dtype).unwrap();
        let obj = best(|| drop(ba::objective(&cpu, &x).unwrap()));
        let rev = best(|| drop(ba::jacobian_reverse(&cpu, &x).unwrap()));
        let fwd = best(|| drop(ba::jacobian_forward(&cpu, &x).unwrap()));
        let (man, man_obj) = match dtype {
            DType::F64 => {
                (best(|| drop(ba::manual_with::<f64>(&b, &x.pattern))), best(|| drop(ba::manual_objective::<f64>(&b))))
            }
            DType::F32 => {
                (best(|| drop(ba::manual_with::<f32>(&b, &x.pattern))), best(|| drop(ba::manual_objective::<f32>(&b))))
            }
        };
        let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        println!(
            "{file:<34} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>8.2} {:>8.2} {:>8.2}",
            obj * 1e3,
            rev * 1e3,
            fwd * 1e3,
            man * 1e3,
            man_obj * 1e3,
            rev / obj,
            fwd / obj,
            rev / man
        );
    }
}
