//! The tools of a run, by name: adgauge's engine on every registered device, the in-process Rust
//! peers, and the external tools a suite or the command line names. The one place that knows
//! every kind of [`Tool`]: the trait's module, the external tools and the peers do not import
//! each other through it.

use adgauge_backends::{Cpu, DEVICES};

use crate::external::{ExternalSpec, ProcessTool};
use crate::tool::{EngineTool, Tool};

/// The tools of a run, by name: the built-in ones (one per registered device).
pub struct Tools {
    tools: Vec<Box<dyn Tool>>,
}

impl Tools {
    /// adgauge's engine on every registered device (each opened on first use), and the Rust
    /// peers (`peers/`: in-process tools; one not compiled in says which feature builds it).
    pub fn builtin(threads: Option<usize>, cpu: Cpu) -> Tools {
        let engines = DEVICES.iter().map(|k| Box::new(EngineTool::new(k, threads, cpu.clone())) as Box<dyn Tool>);
        let peers = crate::peers::specs()
            .into_iter()
            .map(|spec| Box::new(ProcessTool::new(spec, cpu.clone())) as Box<dyn Tool>);
        Tools { tools: engines.chain(peers).collect() }
    }

    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools.iter().find(|t| t.name() == name).map(|t| t.as_ref())
    }

    /// The names of the built-in tools (what a suite's `tools:` may list).
    pub fn builtin_names() -> Vec<&'static str> {
        DEVICES.iter().map(|k| k.name).chain(crate::peers::PEERS.iter().map(|p| p.name)).collect()
    }

    /// The built-in tools and these external ones (started on first use).
    pub fn with_external(threads: Option<usize>, cpu: Cpu, external: &[ExternalSpec]) -> Tools {
        let mut tools = Tools::builtin(threads, cpu.clone());
        for spec in external {
            tools.tools.push(Box::new(ProcessTool::new(spec.clone(), cpu.clone())));
        }
        tools
    }
}
