//! Suites: lists of cases. The default suite is embedded (so `cargo run --release` needs no
//! file): every histogram workload and rule at a few sizes, about a minute on 2 cores.

use std::collections::BTreeMap;

use adgauge_backends::{DType, HistRule};
use adgauge_datasets::hist::IndexDist;
use adgauge_workloads::HistWorkload;

/// The seed every default case uses (recorded in every row).
pub const DEFAULT_SEED: u64 = 20_261_122;

/// One case of a suite.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseSpec {
    pub workload: HistWorkload,
    pub n: usize,
    pub k: usize,
    pub dist: IndexDist,
    pub out_of_range: f64,
    pub dtype: DType,
    pub rule: HistRule,
    pub seed: u64,
}

impl CaseSpec {
    pub fn params(&self) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        p.insert("n".into(), self.n.to_string());
        p.insert("k".into(), self.k.to_string());
        p.insert("dist".into(), self.dist.name().into());
        p.insert("oob".into(), self.out_of_range.to_string());
        p
    }

    /// The stable case id on `backend`.
    pub fn id(&self, backend: &str) -> String {
        adgauge_reports::case_id(
            &self.workload.name(),
            &self.params(),
            backend,
            self.dtype.name(),
            self.rule.name(),
        )
    }
}

/// Every histogram workload x every rule x k in {10, 10^3, 10^5} at n = 10^6, f32, 5% of the
/// indices out of range.
pub fn default_suite() -> Vec<CaseSpec> {
    let mut cases = Vec::new();
    for workload in HistWorkload::all() {
        for k in [10, 1000, 100_000] {
            for rule in HistRule::ALL {
                cases.push(CaseSpec {
                    workload,
                    n: 1_000_000,
                    k,
                    dist: IndexDist::Uniform,
                    out_of_range: 0.05,
                    dtype: DType::F32,
                    rule,
                    seed: DEFAULT_SEED,
                });
            }
        }
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_case_ids_are_unique_and_stable() {
        let suite = default_suite();
        let mut ids: Vec<String> = suite.iter().map(|c| c.id("cpu")).collect();
        assert_eq!(
            ids[0],
            "hist-add[dist=uniform,k=10,n=1000000,oob=0.05]/cpu/f32/auto"
        );
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), suite.len());
    }
}
