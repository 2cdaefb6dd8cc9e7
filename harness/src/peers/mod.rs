//! Peers: other Rust AD crates driven in-process as tools, each behind an off-by-default cargo
//! feature. A peer is an [`Endpoint`] of GradBench's protocol for the `hist` module
//! (`docs/protocol.md`), so the eval side (`external.rs`) drives, validates and times it exactly
//! as it does a tool in another process: no check knows which crate it is judging, and a defect
//! has to show up in finite differences, the oracle or the dot-product test by itself.
//!
//! Each peer expresses every histogram operator it can with the crate's own primitives and
//! differentiates it with the crate's own AD; what it cannot express is an unsuccessful
//! response (`unsupported`). A peer that was not compiled in is a tool that cannot start, with
//! the feature to build it with as the reason.

use serde_json::Value as Json;

use adgauge_workloads::Mode;
use adgauge_workloads::json::{HistCase, hist_case_from_value, number_json};

use crate::endpoint::{Call, Endpoint};
use crate::external::{DEFAULT_TIMEOUT, ExternalSpec};

#[cfg(feature = "burn")]
mod burn;
#[cfg(feature = "candle")]
mod candle;
#[cfg(any(feature = "num-dual", feature = "ad-trait"))]
mod scalar;

/// A peer as the tools list shows it.
pub struct Peer {
    /// The tool's name in suites and `--backend`.
    pub name: &'static str,
    /// The cargo feature that compiles it in.
    pub feature: &'static str,
    /// What it runs.
    pub what: &'static str,
}

/// Every peer adgauge knows, compiled in or not.
pub const PEERS: &[Peer] = &[
    Peer { name: "candle", feature: "candle", what: "candle-core 0.11.1 Tensor::scatter_add, candle's backprop" },
    Peer {
        name: "candle-index-add",
        feature: "candle",
        what: "candle-core 0.11.1 Tensor::index_add, candle's backprop",
    },
    Peer { name: "burn", feature: "burn", what: "burn 0.22.1 Tensor::scatter on Autodiff<NdArray>" },
    Peer { name: "num-dual", feature: "num-dual", what: "num-dual 0.15.1 Dual64 over a sequential fold" },
    Peer {
        name: "ad-trait",
        feature: "ad-trait",
        what: "ad_trait 0.3.1 adr (reverse) and adfn (forward) over a sequential fold",
    },
];

/// The peers as tools: each starts in-process on first use.
pub fn specs() -> Vec<ExternalSpec> {
    PEERS
        .iter()
        .map(|p| ExternalSpec {
            name: p.name.into(),
            command: format!("in-process: {}", p.what),
            timeout: DEFAULT_TIMEOUT,
            max_response_bytes: crate::external::DEFAULT_MAX_RESPONSE_BYTES,
            in_process: Some(p.name),
        })
        .collect()
}

/// Starts a peer; `Err` says why it cannot start (not compiled in).
pub fn open(name: &str) -> Result<Box<dyn Endpoint + Send>, String> {
    let peer: Option<Box<dyn HistPeer + Send>> = match name {
        #[cfg(feature = "candle")]
        "candle" => Some(Box::new(candle::CandleHist { index_add: false })),
        #[cfg(feature = "candle")]
        "candle-index-add" => Some(Box::new(candle::CandleHist { index_add: true })),
        #[cfg(feature = "burn")]
        "burn" => Some(Box::new(burn::BurnHist::new())),
        #[cfg(feature = "num-dual")]
        "num-dual" => Some(Box::new(scalar::NumDualHist)),
        #[cfg(feature = "ad-trait")]
        "ad-trait" => Some(Box::new(scalar::AdTraitHist)),
        _ => None,
    };
    match (peer, PEERS.iter().find(|p| p.name == name)) {
        (Some(peer), _) => Ok(Box::new(HistEndpoint { peer })),
        (None, Some(p)) => Err(format!(
            "peer {name} is not compiled in: build adgauge with `--features {}` (cargo run --release --features {})",
            p.feature, p.feature
        )),
        (None, None) => Err(format!("no peer named {name}")),
    }
}

/// A crate's histogram: one prepared call per function and input.
pub trait HistPeer {
    /// The tool and version the `start` response names.
    fn tool(&self) -> (&'static str, &'static str);
    /// Conventions it declares (`tie-policy`), as the `start` config's object.
    fn conventions(&self) -> Json {
        serde_json::json!({})
    }
    /// Converts the case for repeated runs of `mode`; `Err` is why the crate cannot (the
    /// operator or mode has no expression or derivative in it).
    fn prepare(&self, mode: Mode, op: &str, case: &HistCase) -> Result<Box<dyn Call>, String>;
}

struct HistEndpoint {
    peer: Box<dyn HistPeer + Send>,
}

impl Endpoint for HistEndpoint {
    fn start(&mut self) -> (String, Json) {
        let (tool, version) = self.peer.tool();
        (tool.into(), serde_json::json!({"version": version, "conventions": self.peer.conventions()}))
    }
    fn define(&mut self, module: &str) -> Result<(), String> {
        if module == "hist" { Ok(()) } else { Err(format!("a peer implements the hist module only, not {module}")) }
    }
    fn prepare<'a>(&'a mut self, module: &str, function: &str, input: Json) -> Result<Box<dyn Call + 'a>, String> {
        self.define(module)?;
        let input = &input;
        let mode = match function {
            "primal" => Mode::Primal,
            "vjp" => Mode::Vjp,
            "jvp" => Mode::Jvp,
            other => return Err(format!("hist: no function '{other}' (known: primal, vjp, jvp)")),
        };
        let op = input.get("op").and_then(Json::as_str).ok_or("hist: input field op: required")?;
        let case = hist_case_from_value(input, &format!("hist.{function} input"), op).map_err(|e| e.to_string())?;
        let missing = |field: &str| format!("hist.{function} input: field {field}: required");
        match mode {
            Mode::Vjp if case.hist_bar.is_none() => return Err(missing("hist_bar")),
            Mode::Jvp if case.vals_dot.is_none() => return Err(missing("vals_dot")),
            Mode::Jvp if case.dest_dot.is_none() => return Err(missing("dest_dot")),
            _ => {}
        }
        self.peer.prepare(mode, op, &case)
    }
}

#[cfg_attr(
    not(any(feature = "candle", feature = "burn", feature = "num-dual", feature = "ad-trait")),
    allow(dead_code)
)]
/// The positions whose index is a bin (the others are ignored by the semantics) and their bins.
pub fn in_range(case: &HistCase) -> (Vec<usize>, Vec<usize>) {
    let k = case.data.k as i64;
    case.data.inds.iter().enumerate().filter(|(_, b)| (0..k).contains(*b)).map(|(i, &b)| (i, b as usize)).unzip()
}

#[cfg_attr(
    not(any(feature = "candle", feature = "burn", feature = "num-dual", feature = "ad-trait")),
    allow(dead_code)
)]
/// A module output object from named number arrays (non-finite numbers as strings).
pub fn output(fields: &[(&str, &[f64])]) -> Json {
    Json::Object(
        fields
            .iter()
            .map(|(name, xs)| (name.to_string(), Json::Array(xs.iter().map(|&x| number_json(x)).collect())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_that_is_not_compiled_in_names_its_feature() {
        for p in PEERS {
            match open(p.name) {
                Ok(_) => {}
                Err(e) => assert!(e.contains(&format!("--features {}", p.feature)), "{e}"),
            }
        }
        assert_eq!(open("nope").err().as_deref(), Some("no peer named nope"));
    }
}
