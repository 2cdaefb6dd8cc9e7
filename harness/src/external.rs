//! Tools in another process, driven over GradBench's protocol (`protocol.rs`): adgauge is the
//! eval side. A [`ProcessTool`] starts its command (`sh -c COMMAND`) on first use, says `start`,
//! `define`s the modules of the registered workloads, and `evaluate`s their functions; the
//! workloads turn a tool's outputs into the same checks as adgauge's own engine
//! (`Problem::remote_validation`), and the tool's own timings become the row's timings.
//!
//! Faults are rows, not crashes: a tool that exits, hangs past the per-message timeout, writes
//! a line that is not a response, or answers another id ends the case with an error naming the
//! tool, the message and the reason; its process is killed and reaped, and the next case starts
//! a fresh one.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
#[cfg(unix)]
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use adgauge_backends::{Cpu, DType, OpError};
use adgauge_reports::Timing;
use adgauge_workloads::{
    CheckSettings, Mode, Problem, Remote, RemoteCall, Validation, WResult, Workload, WorkloadError,
};
use serde_json::Value as Json;

use crate::endpoint::Endpoint;
use crate::protocol::{Message, Response};
use crate::timing::Budget;
use crate::tool::{Capabilities, Evaluation, PreparedCase, Tool};

/// An external tool as a suite or `--tool-cmd` names it.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalSpec {
    pub name: String,
    /// A shell command line.
    pub command: String,
    /// How long one message may wait for its response (a process only: an in-process peer
    /// cannot be interrupted).
    pub timeout: Duration,
    /// An in-process peer (`peers/`) by name instead of a process: `command` then only
    /// describes it.
    pub in_process: Option<&'static str>,
}

/// The default per-message timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Parses `NAME=COMMAND` (`--tool-cmd`).
pub fn parse_tool_cmd(s: &str) -> Result<ExternalSpec, String> {
    let (name, command) = s.split_once('=').ok_or_else(|| format!("'{s}' is not NAME=COMMAND"))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(format!("'{name}' is not a tool name (letters, digits, '-', '_')"));
    }
    if command.trim().is_empty() {
        return Err(format!("tool {name}: the command is empty"));
    }
    Ok(ExternalSpec { name: name.into(), command: command.into(), timeout: DEFAULT_TIMEOUT, in_process: None })
}

/// A running tool process.
struct Process {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

/// How messages reach a tool: its process's pipes, or a call into an in-process endpoint.
enum Link {
    Process(Process),
    InProcess(Box<dyn Endpoint + Send>),
}

/// A started tool.
struct Session {
    link: Link,
    next_id: i64,
    /// The `start` response: the tool's name and the conventions its `config` declares.
    tool: String,
    conventions: BTreeMap<String, String>,
    /// Threads the tool says it computes with (0: not said).
    threads: usize,
}

impl Drop for Process {
    /// Kills the tool's whole process group (the shell and what it started) and reaps the shell.
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) with a negative pid signals the process group the child leads
            // (it was started with `process_group(0)`); it touches no memory.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    fn spawn(spec: &ExternalSpec) -> Result<Process, String> {
        let mut command = Command::new("sh");
        command.arg("-c").arg(&spec.command);
        // Its own process group, so that everything the command starts can be killed.
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", spec.command))?;
        let (stdin, stdout, stderr) = match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (i, o, e),
            _ => return Err("the tool's pipes could not be opened".into()),
        };
        // Lines arrive on a thread so that a silent tool can be timed out.
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        // The tail of stderr says why a tool died.
        let tail = Arc::new(Mutex::new(String::new()));
        let sink = tail.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut stderr = stderr;
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut t) = sink.lock() {
                    t.push_str(&String::from_utf8_lossy(&buf[..n]));
                    let excess = t.len().saturating_sub(2000);
                    if excess > 0 {
                        let cut = (excess..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(t.len());
                        t.drain(..cut);
                    }
                }
            }
        });
        Ok(Process { child, stdin, lines, stderr: tail })
    }

    /// Writes one message and waits for the line that answers it.
    fn exchange(&mut self, message: &Message, what: &str, timeout: Duration) -> Result<Response, String> {
        let line = serde_json::to_string(message).map_err(|e| e.to_string())?;
        if writeln!(self.stdin, "{line}").and_then(|_| self.stdin.flush()).is_err() {
            return Err(format!("{what}: the tool closed its input{}", self.exit_reason()));
        }
        let text = match self.lines.recv_timeout(timeout) {
            Ok(text) => text,
            Err(RecvTimeoutError::Timeout) => return Err(format!("{what}: no response within {timeout:?}")),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(format!("{what}: the tool exited before answering{}", self.exit_reason()));
            }
        };
        serde_json::from_str(&text)
            .map_err(|e| format!("{what}: the response is not a protocol line ({e}): {}", shorten(&text)))
    }

    fn exit_reason(&mut self) -> String {
        std::thread::sleep(Duration::from_millis(50));
        let status = match self.child.try_wait() {
            Ok(Some(s)) => format!(" ({s})"),
            _ => String::new(),
        };
        let tail = self.stderr.lock().map(|t| t.trim().to_string()).unwrap_or_default();
        let last = tail.lines().last().map(|l| format!(": {}", shorten(l))).unwrap_or_default();
        format!("{status}{last}")
    }
}

impl Session {
    fn open(spec: &ExternalSpec) -> Result<Session, String> {
        let link = match spec.in_process {
            Some(peer) => Link::InProcess(crate::peers::open(peer)?),
            None => Link::Process(Process::spawn(spec)?),
        };
        let mut session = Session { link, next_id: 0, tool: String::new(), conventions: BTreeMap::new(), threads: 0 };
        let r =
            session.request(|id| Message::Start { id, eval: Some("adgauge".into()), config: None }, spec.timeout)?;
        session.tool = r.tool.unwrap_or_else(|| spec.name.clone());
        // A declared version (and thread count) makes the tool's rows say what ran.
        if let Some(Json::String(version)) = r.config.as_ref().and_then(|c| c.get("version")) {
            session.tool = format!("{} {version}", session.tool);
        }
        if let Some(threads) = r.config.as_ref().and_then(|c| c.get("threads")).and_then(Json::as_u64) {
            session.threads = threads as usize;
        }
        if let Some(Json::Object(declared)) = r.config.as_ref().and_then(|c| c.get("conventions")) {
            for (key, value) in declared {
                if let Json::String(v) = value {
                    session.conventions.insert(key.clone(), v.clone());
                }
            }
        }
        Ok(session)
    }

    /// Sends one message and waits for its response.
    fn request(&mut self, message: impl FnOnce(i64) -> Message, timeout: Duration) -> Result<Response, String> {
        let id = self.next_id;
        self.next_id += 1;
        let message = message(id);
        let kind = match &message {
            Message::Start { .. } => "start".to_string(),
            Message::Define { module, .. } => format!("define {module}"),
            Message::Evaluate { module, function, .. } => format!("evaluate {module}.{function}"),
            Message::Analysis { .. } => "analysis".to_string(),
        };
        let what = format!("message {id} ({kind})");
        let response = match &mut self.link {
            Link::Process(p) => p.exchange(&message, &what, timeout)?,
            Link::InProcess(endpoint) => crate::endpoint::answer(endpoint.as_mut(), &message),
        };
        if response.id != id {
            return Err(format!("{what}: the response has id {} instead of {id}", response.id));
        }
        Ok(response)
    }
}

fn shorten(s: &str) -> String {
    if s.chars().count() <= 200 { s.to_string() } else { s.chars().take(200).collect::<String>() + "…" }
}

/// The state of one external tool, shared by its prepared cases and remote handles.
struct Shared {
    spec: ExternalSpec,
    session: Option<Session>,
    /// Whether the tool started at all (the first attempt decides availability).
    started: Option<Result<String, String>>,
    /// What its `start` response declared.
    conventions: BTreeMap<String, String>,
    /// The threads its `start` response declared (0: not declared).
    threads: usize,
    defined: BTreeMap<String, bool>,
    /// Ids of the evaluate messages of the current validation (for `analysis`).
    validated: Vec<i64>,
}

impl Shared {
    fn session(&mut self) -> Result<&mut Session, String> {
        if self.session.is_none() {
            let s = Session::open(&self.spec);
            if self.started.is_none() {
                self.started = Some(s.as_ref().map(|s| s.tool.clone()).map_err(Clone::clone));
            }
            if let Ok(s) = &s {
                self.conventions = s.conventions.clone();
                self.threads = s.threads;
            }
            self.session = Some(s?);
        }
        self.session.as_mut().ok_or_else(|| "no session".to_string())
    }

    /// One request; a transport failure ends the session (the process is killed and reaped).
    fn request(&mut self, message: impl FnOnce(i64) -> Message) -> Result<Response, String> {
        let timeout = self.spec.timeout;
        let name = self.spec.name.clone();
        let result = self.session()?.request(message, timeout);
        if result.is_err() {
            self.session = None;
        }
        result.map_err(|e| format!("tool {name}: {e}"))
    }

    fn define(&mut self, module: &str) -> bool {
        if let Some(&ok) = self.defined.get(module) {
            return ok;
        }
        let ok =
            self.request(|id| Message::Define { id, module: module.into() }).is_ok_and(|r| r.success == Some(true));
        self.defined.insert(module.into(), ok);
        ok
    }

    /// Evaluates a function; `Err(Unsupported)` when the tool says it failed, `Err(Device)` when
    /// the exchange failed.
    fn evaluate(&mut self, module: &str, call: &RemoteCall, runs: u64) -> Result<Response, OpError> {
        let mut input = call.input.clone();
        if let Json::Object(map) = &mut input {
            map.insert("min_runs".into(), runs.into());
            map.insert("min_seconds".into(), 0.into());
        }
        let r = self
            .request(|id| Message::Evaluate {
                id,
                module: module.into(),
                function: call.function.clone(),
                input: Some(input),
                description: None,
            })
            .map_err(OpError::Device)?;
        match r.success {
            Some(true) => Ok(r),
            _ => Err(OpError::Unsupported(format!(
                "tool {} could not evaluate {module}.{}: {}",
                self.spec.name,
                call.function,
                r.error.clone().unwrap_or_else(|| "no reason given".into())
            ))),
        }
    }
}

/// A tool in another process speaking GradBench's protocol.
pub struct ProcessTool {
    shared: Arc<Mutex<Shared>>,
    name: String,
    /// The run's CPU device: the f64 references its outputs are judged by.
    cpu: Cpu,
}

impl ProcessTool {
    pub fn new(spec: ExternalSpec, cpu: Cpu) -> ProcessTool {
        let name = spec.name.clone();
        let shared = Shared {
            spec,
            session: None,
            started: None,
            conventions: BTreeMap::new(),
            threads: 0,
            defined: BTreeMap::new(),
            validated: Vec::new(),
        };
        ProcessTool { shared: Arc::new(Mutex::new(shared)), name, cpu }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Shared) -> T) -> T {
        let mut guard = self.shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut guard)
    }
}

fn module_of(workload: &dyn Workload) -> Result<&'static str, OpError> {
    workload
        .gradbench_module()
        .ok_or_else(|| OpError::Unsupported(format!("{} has no GradBench module", workload.family())))
}

impl Tool for ProcessTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn version(&self) -> String {
        self.with(|s| match &s.started {
            Some(Ok(tool)) => tool.clone(),
            _ => format!("`{}`", s.spec.command),
        })
    }
    fn availability(&self) -> Result<String, String> {
        self.with(|s| {
            if s.started.is_none() {
                let _ = s.session();
            }
            match &s.started {
                Some(Ok(tool)) => Ok(format!("{tool} via `{}`", s.spec.command)),
                Some(Err(why)) => Err(why.clone()),
                None => Err("not started".into()),
            }
        })
    }
    fn capabilities(&self) -> Capabilities {
        let (workloads, conventions) = self.with(|s| {
            let workloads = adgauge_workloads::registry()
                .iter()
                .filter(|w| w.gradbench_module().is_some_and(|m| s.define(m)))
                .map(|w| w.family().to_string())
                .collect();
            (workloads, s.conventions.clone())
        });
        Capabilities {
            // Protocol numbers are JSON doubles.
            dtypes: vec![DType::F64],
            workloads: Some(workloads),
            modes: vec![Mode::Primal, Mode::Vjp, Mode::Jvp],
            conventions,
        }
    }
    fn threads(&self) -> usize {
        self.with(|s| s.threads)
    }
    fn prepare(
        &self,
        workload: &dyn Workload,
        problem: &dyn Problem,
        _dtype: DType,
        _rule: &str,
    ) -> anyhow::Result<Box<dyn PreparedCase>> {
        let module = module_of(workload)?;
        let calls = Mode::TIMED.into_iter().filter_map(|m| Some((m, problem.remote_call(m)?))).collect();
        Ok(Box::new(ProcessPrepared { shared: self.shared.clone(), module, calls }))
    }
    fn validation(
        &self,
        workload: &dyn Workload,
        problem: &dyn Problem,
        settings: &CheckSettings,
    ) -> anyhow::Result<Validation> {
        let module = module_of(workload)?;
        self.with(|s| s.validated.clear());
        let remote = Arc::new(RemoteHandle { shared: self.shared.clone(), module });
        // The tool computes in f64; its derivatives are compared with f64 references.
        Ok(problem.remote_validation(remote, &self.cpu, settings)?)
    }
    fn verdict(&self, valid: bool, error: Option<String>) {
        self.with(|s| {
            for of in std::mem::take(&mut s.validated) {
                let error = error.clone();
                // A tool that cannot take the verdict has already failed its case.
                let _ = s.request(|id| Message::Analysis { id, of, valid, error });
            }
        });
    }
}

/// Validation's access to the tool: one `evaluate` per call.
struct RemoteHandle {
    shared: Arc<Mutex<Shared>>,
    module: &'static str,
}

impl Remote for RemoteHandle {
    fn call(&self, function: &str, input: Json) -> WResult<Json> {
        let mut s = self.shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let call = RemoteCall { function: function.into(), input };
        let r = s.evaluate(self.module, &call, 1).map_err(WorkloadError::Op)?;
        s.validated.push(r.id);
        r.output.ok_or_else(|| WorkloadError::Op(OpError::Device(format!("{}.{function}: no output", self.module))))
    }
}

struct ProcessPrepared {
    shared: Arc<Mutex<Shared>>,
    module: &'static str,
    calls: BTreeMap<Mode, RemoteCall>,
}

impl ProcessPrepared {
    fn run(&mut self, mode: Mode, runs: u64) -> anyhow::Result<Response> {
        let call = self
            .calls
            .get(&mode)
            .ok_or_else(|| OpError::Unsupported(format!("{} has no function for {mode}", self.module)))?;
        let mut s = self.shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(s.evaluate(self.module, call, runs)?)
    }
}

impl PreparedCase for ProcessPrepared {
    fn supports(&self, mode: Mode) -> bool {
        self.calls.contains_key(&mode)
    }
    fn evaluate(&mut self, mode: Mode) -> anyhow::Result<Evaluation> {
        let r = self.run(mode, 1)?;
        let timings = r.timings.unwrap_or_default().iter().map(|t| Duration::from_nanos(t.nanoseconds)).collect();
        Ok(Evaluation { output: r.output, timings })
    }
    /// The tool's own timings: one warm-up message, then one message asking for the budget's
    /// samples as runs.
    fn timing(&mut self, mode: Mode, budget: &Budget) -> anyhow::Result<Timing> {
        self.run(mode, 1)?;
        let r = self.run(mode, budget.samples.max(1) as u64)?;
        let seconds: Vec<f64> = r.timings.unwrap_or_default().iter().map(|t| t.nanoseconds as f64 * 1e-9).collect();
        crate::timing::summarize(seconds, 1).ok_or_else(|| anyhow::anyhow!("tool {}: reported no timings", self.module))
    }
}
