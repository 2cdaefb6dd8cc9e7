//! Tools in another process, driven over GradBench's protocol (`protocol.rs`): adgauge is the
//! eval side. A [`ProcessTool`] starts its command (`sh -c COMMAND`) on first use, says `start`,
//! `define`s each module before its first `evaluate` in that process, and `evaluate`s its
//! functions; the workloads turn a tool's outputs into the same checks as adgauge's own engine
//! (`Problem::remote_validation`), and the tool's own timings become the row's timings.
//!
//! adgauge judges tools, so nothing a tool does may hang, crash or fool it:
//! - every exchange has one deadline (`timeout_s`), writing included: the tool's stdin is
//!   non-blocking and each write waits (poll) only until the deadline, so a tool that stops
//!   reading its input is timed out like a silent one;
//! - a response line longer than its bound (a floor, `max_response_bytes`, or 32 bytes per
//!   byte of the message, whichever is larger: no module returns more) ends the case; the
//!   reader thread never holds more than the bound;
//! - only an explicit `success: false` with an `error` means "unsupported" (a `skipped` row);
//!   an exit, a hang, a line that is not a response, another id, a second response, a missing
//!   `success` end the case with an `error` row naming the tool, the message and the reason,
//!   and the tool's process group is killed and reaped (the next case starts a fresh process,
//!   which gets `start` and its own `define`s);
//! - adgauge measures the wall time of every exchange: reported runs that sum to more than it
//!   (or a run of 0 ns) are an error, and runs that account for far less than the wall time
//!   the timed exchange spends on them are the finding `timing: implausible` (a tool timing
//!   asynchronous dispatch, not the computation): see [`Plausibility`] and docs/protocol.md.
//!
//! Every live tool process group is registered with `interrupt.rs`, which kills it when the
//! run is interrupted.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
#[cfg(unix)]
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adgauge_backends::{Cpu, DType, OpError};
use adgauge_reports::{Check, Timing};
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
    /// How long one exchange (writing the message and reading its response) may take (a
    /// process only: an in-process peer cannot be interrupted).
    pub timeout: Duration,
    /// The floor of a response line's length bound (`max_response_bytes`).
    pub max_response_bytes: u64,
    /// An in-process peer (`peers/`) by name instead of a process: `command` then only
    /// describes it.
    pub in_process: Option<&'static str>,
}

/// The default per-message timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The default floor of a response's length bound: 64 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 64 << 20;

/// A response may be this many times as long as its message. No module's output has more than
/// about 13 numbers per number of its input (BA's full Jacobian: 67 per observation of 5), and
/// a printed double takes at most 25 bytes where an input's takes at least 2 (short inputs are
/// covered by the floor).
pub const RESPONSE_BYTES_PER_MESSAGE_BYTE: u64 = 32;

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
    Ok(ExternalSpec {
        name: name.into(),
        command: command.into(),
        timeout: DEFAULT_TIMEOUT,
        max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        in_process: None,
    })
}

/// A running tool process: its stdin is written without blocking (`write_within`), a reader
/// thread reads its stdout, another keeps the tail of its stderr.
struct Process {
    child: Child,
    /// The process (and group) id.
    pid: i32,
    /// Its input, in non-blocking mode.
    stdin: Option<ChildStdin>,
    /// Response lines, or why reading stopped (a line over its bound).
    lines: Receiver<Result<String, String>>,
    /// The current bound of a line, in bytes.
    line_limit: Arc<AtomicU64>,
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
    /// The modules this process has defined.
    defined: BTreeSet<String>,
    /// The last message sent (what a stray line is blamed on).
    last: Option<String>,
}

/// What one message got: its response, adgauge's wall time of the exchange (from the first
/// byte written to the response read), and the message's description.
struct Exchange {
    response: Response,
    wall: Duration,
    what: String,
}

impl Drop for Process {
    /// Kills the tool's whole process group (the shell and what it started) and reaps the shell.
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: kill(2) with a negative pid signals the process group the child leads
        // (it was started with `process_group(0)`); it touches no memory.
        unsafe {
            libc::kill(-self.pid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        crate::interrupt::unregister(self.pid);
        self.stdin = None;
        let _ = self.child.wait();
    }
}

/// Writes all of `bytes` to a non-blocking pipe, waiting for room until `deadline`:
/// `Ok(false)` when the deadline passed first (the reader stopped reading).
fn write_within(pipe: &mut ChildStdin, bytes: &[u8], deadline: Instant) -> std::io::Result<bool> {
    let mut done = 0;
    while done < bytes.len() {
        match pipe.write(&bytes[done..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                #[cfg(unix)]
                {
                    use std::os::fd::AsRawFd;
                    let mut poll = libc::pollfd { fd: pipe.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                    let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
                    // SAFETY: poll(2) on one pollfd that lives on this stack frame.
                    unsafe {
                        libc::poll(&mut poll, 1, ms);
                    }
                }
                #[cfg(not(unix))]
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads lines of at most `limit` bytes (the bound is read per line, so each message sets its
/// own); a longer one is reported and reading stops, so no more than the bound is ever held.
fn read_lines(stdout: impl Read, limit: &AtomicU64, send: &Sender<Result<String, String>>) {
    let mut reader = BufReader::with_capacity(1 << 16, stdout);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let buf = match reader.fill_buf() {
            Ok([]) | Err(_) => return,
            Ok(buf) => buf,
        };
        let end = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..end.unwrap_or(buf.len())];
        let bound = limit.load(Ordering::SeqCst);
        if (line.len() + chunk.len()) as u64 > bound {
            let _ = send
                .send(Err(format!("the response line is longer than its bound of {bound} bytes (max_response_bytes)")));
            return;
        }
        line.extend_from_slice(chunk);
        let used = end.map_or(buf.len(), |e| e + 1);
        reader.consume(used);
        if end.is_some() {
            let text = String::from_utf8(std::mem::take(&mut line))
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            if send.send(Ok(text)).is_err() {
                return;
            }
        }
    }
}

impl Process {
    fn spawn(spec: &ExternalSpec) -> Result<Process, String> {
        let mut command = Command::new("sh");
        command.arg("-c").arg(&spec.command);
        // Its own process group, so that everything the command starts can be killed.
        #[cfg(unix)]
        command.process_group(0);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let (mut child, pid) = crate::interrupt::spawn_registered(true, || {
            let child = command.spawn().map_err(|e| format!("cannot start `{}`: {e}", spec.command))?;
            let pid = child.id();
            Ok((child, pid))
        })?;
        let (stdin, stdout, stderr) = match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (i, o, e),
            _ => {
                #[cfg(unix)]
                // SAFETY: as in `Drop`: the group this function just started.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
                crate::interrupt::unregister(pid);
                let _ = child.wait();
                return Err("the tool's pipes could not be opened".into());
            }
        };
        // Writes never block, so that a tool that stops reading can be timed out.
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            let fd = stdin.as_raw_fd();
            // SAFETY: fcntl(2) on the pipe this process owns: read its flags, add O_NONBLOCK.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        // Lines arrive on a thread so that a silent tool can be timed out.
        let (send, lines) = channel();
        let line_limit = Arc::new(AtomicU64::new(spec.max_response_bytes));
        let limit = line_limit.clone();
        std::thread::spawn(move || read_lines(stdout, &limit, &send));
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
        Ok(Process { child, pid, stdin: Some(stdin), lines, line_limit, stderr: tail })
    }

    /// A line that arrived when none was asked for (a second response), if any.
    fn stray_line(&mut self) -> Option<String> {
        match self.lines.try_recv() {
            Ok(Ok(line)) => Some(line),
            Ok(Err(why)) => Some(why),
            Err(_) => None,
        }
    }

    /// Writes one message and waits for the line that answers it, both within `timeout`; the
    /// response's wall time.
    fn exchange(
        &mut self,
        line: Vec<u8>,
        what: &str,
        timeout: Duration,
        limit: u64,
    ) -> Result<(Response, Duration), String> {
        let size = line.len();
        self.line_limit.store(limit, Ordering::SeqCst);
        let started = Instant::now();
        let left = || timeout.saturating_sub(started.elapsed());
        match self.stdin.as_mut().map(|stdin| write_within(stdin, &line, started + timeout)) {
            Some(Ok(true)) => {}
            Some(Ok(false)) => {
                return Err(format!("{what}: the tool did not read the message ({size} bytes) within {timeout:?}"));
            }
            Some(Err(_)) | None => return Err(format!("{what}: the tool closed its input{}", self.exit_reason())),
        }
        let text = match self.lines.recv_timeout(left()) {
            Ok(Ok(text)) => text,
            Ok(Err(why)) => return Err(format!("{what}: {why}")),
            Err(RecvTimeoutError::Timeout) => return Err(format!("{what}: no response within {timeout:?}")),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(format!("{what}: the tool exited before answering{}", self.exit_reason()));
            }
        };
        let wall = started.elapsed();
        let response = serde_json::from_str(&text)
            .map_err(|e| format!("{what}: the response is not a protocol line ({e}): {}", shorten(&text)))?;
        Ok((response, wall))
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

/// A message to send, from borrowed parts (an `evaluate`'s input is serialized in place).
enum Outgoing<'a> {
    Start,
    Define(&'a str),
    Evaluate { module: &'a str, function: &'a str, input: &'a Json, runs: u64 },
    Analysis { of: i64, valid: bool, error: Option<String> },
}

impl Outgoing<'_> {
    fn kind(&self) -> String {
        match self {
            Outgoing::Start => "start".into(),
            Outgoing::Define(module) => format!("define {module}"),
            Outgoing::Evaluate { module, function, .. } => format!("evaluate {module}.{function}"),
            Outgoing::Analysis { .. } => "analysis".into(),
        }
    }

    /// The message (an in-process endpoint takes it as it is).
    fn message(self, id: i64) -> Message {
        match self {
            Outgoing::Start => Message::Start { id, eval: Some("adgauge".into()), config: None },
            Outgoing::Define(module) => Message::Define { id, module: module.into() },
            Outgoing::Evaluate { module, function, input, runs } => {
                let mut input = input.clone();
                if let Json::Object(map) = &mut input {
                    map.insert("min_runs".into(), runs.into());
                    map.insert("min_seconds".into(), 0.into());
                }
                Message::Evaluate {
                    id,
                    module: module.into(),
                    function: function.into(),
                    input: Some(input),
                    description: None,
                }
            }
            Outgoing::Analysis { of, valid, error } => Message::Analysis { id, of, valid, error },
        }
    }

    /// The protocol line, newline included.
    fn line(self, id: i64) -> Result<Vec<u8>, String> {
        let line = match self {
            Outgoing::Evaluate { module, function, input, runs } => {
                crate::protocol::evaluate_line(id, module, function, input, runs)
            }
            other => serde_json::to_vec(&other.message(id)).map(|mut l| {
                l.push(b'\n');
                l
            }),
        };
        line.map_err(|e| format!("the message cannot be written: {e}"))
    }
}

impl Session {
    fn open(spec: &ExternalSpec) -> Result<Session, String> {
        let link = match spec.in_process {
            Some(peer) => Link::InProcess(crate::peers::open(peer)?),
            None => Link::Process(Process::spawn(spec)?),
        };
        let mut session = Session {
            link,
            next_id: 0,
            tool: String::new(),
            conventions: BTreeMap::new(),
            threads: 0,
            defined: BTreeSet::new(),
            last: None,
        };
        let r = session.request(Outgoing::Start, spec.timeout, spec.max_response_bytes)?.response;
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

    /// Sends one message and waits for its response (bounded by `floor` or 32 bytes per byte
    /// of the message).
    fn request(&mut self, out: Outgoing, timeout: Duration, floor: u64) -> Result<Exchange, String> {
        let id = self.next_id;
        self.next_id += 1;
        let what = format!("message {id} ({})", out.kind());
        let (response, wall) = match &mut self.link {
            Link::Process(p) => {
                // A line nobody asked for is a second response to the last message.
                if let Some(stray) = p.stray_line() {
                    let last = self.last.clone().unwrap_or_else(|| "no message".into());
                    return Err(format!("{last}: a second line after its response: {}", shorten(&stray)));
                }
                let line = out.line(id)?;
                let limit = floor.max((line.len() as u64).saturating_mul(RESPONSE_BYTES_PER_MESSAGE_BYTE));
                self.last = Some(what.clone());
                p.exchange(line, &what, timeout, limit)?
            }
            Link::InProcess(endpoint) => {
                let message = out.message(id);
                let started = Instant::now();
                let response = crate::endpoint::answer(endpoint.as_mut(), message);
                (response, started.elapsed())
            }
        };
        if response.id != id {
            let rid = response.id;
            let why = if (0..id).contains(&rid) {
                format!("the response has id {rid} instead of {id}: a second response to message {rid}")
            } else {
                format!("the response has id {rid} instead of {id}")
            };
            return Err(format!("{what}: {why}"));
        }
        Ok(Exchange { response, wall, what })
    }
}

fn shorten(s: &str) -> String {
    if s.chars().count() <= 200 { s.to_string() } else { s.chars().take(200).collect::<String>() + "…" }
}

/// How a tool answered a `define` or `evaluate`.
enum Answer {
    Done,
    /// `success: false` with the tool's reason: it does not do this.
    Refused(String),
    /// Not an answer the protocol allows.
    Fault(String),
}

fn answer_of(r: &Response) -> Answer {
    match (r.success, &r.error) {
        (Some(true), _) => Answer::Done,
        (Some(false), Some(error)) if !error.trim().is_empty() => Answer::Refused(error.clone()),
        (Some(false), _) => Answer::Fault("`success: false` without an `error` saying why".into()),
        (None, _) => Answer::Fault("the response has no `success`".into()),
    }
}

/// An `evaluate`'s reported timings against the exchange's wall time: each run takes some
/// time, and all of them fit in the exchange.
fn check_reported(timings: &[crate::protocol::Timing], wall: Duration) -> Result<(), String> {
    if let Some(i) = timings.iter().position(|t| t.nanoseconds == 0) {
        return Err(format!("run {i} is reported as 0 ns (no computation takes no time)"));
    }
    let sum: u128 = timings.iter().map(|t| u128::from(t.nanoseconds)).sum();
    if sum > wall.as_nanos() {
        return Err(format!(
            "its {} run(s) are reported as {:.6} s in all, more than the {:.6} s adgauge measured for the whole exchange",
            timings.len(),
            sum as f64 * 1e-9,
            wall.as_secs_f64()
        ));
    }
    Ok(())
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
    /// Modules the tool refused to define (`success: false`), with its reason.
    refused: BTreeMap<String, String>,
    /// Ids of the evaluate messages of the current validation (for `analysis`).
    validated: Vec<i64>,
}

impl Shared {
    fn session(&mut self) -> Result<&mut Session, String> {
        if self.session.is_none() {
            let s = Session::open(&self.spec).map_err(|e| format!("tool {}: {e}", self.spec.name));
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

    /// Ends the session after a fault (its process is killed and reaped); the error to report.
    fn fault(&mut self, what: &str, why: &str) -> String {
        self.session = None;
        self.validated.clear();
        format!("tool {}: {what}: {why}", self.spec.name)
    }

    /// One request; a transport failure ends the session.
    fn request(&mut self, out: Outgoing) -> Result<Exchange, String> {
        let (timeout, floor) = (self.spec.timeout, self.spec.max_response_bytes);
        let result = self.session()?.request(out, timeout, floor);
        result.map_err(|e| self.fault_plain(&e))
    }

    fn fault_plain(&mut self, error: &str) -> String {
        self.session = None;
        self.validated.clear();
        format!("tool {}: {error}", self.spec.name)
    }

    /// Defines `module` in the current process unless it already is: `Err(Unsupported)` when
    /// the tool refuses it, `Err(Device)` when the exchange fails.
    fn define(&mut self, module: &str) -> Result<(), OpError> {
        if let Some(why) = self.refused.get(module) {
            return Err(OpError::Unsupported(format!("tool {} does not define {module}: {why}", self.spec.name)));
        }
        if self.session().map_err(OpError::Device)?.defined.contains(module) {
            return Ok(());
        }
        let ex = self.request(Outgoing::Define(module)).map_err(OpError::Device)?;
        match answer_of(&ex.response) {
            Answer::Done => {
                if let Some(s) = self.session.as_mut() {
                    s.defined.insert(module.into());
                }
                Ok(())
            }
            Answer::Refused(why) => {
                self.refused.insert(module.into(), why.clone());
                Err(OpError::Unsupported(format!("tool {} does not define {module}: {why}", self.spec.name)))
            }
            Answer::Fault(why) => Err(OpError::Device(self.fault(&ex.what, &why))),
        }
    }

    /// Evaluates a function (defining its module first where this process has not):
    /// `Err(Unsupported)` when the tool says it cannot, `Err(Device)` when the exchange failed
    /// or its timings cannot be true.
    fn evaluate(&mut self, module: &str, call: &RemoteCall, runs: u64) -> Result<Exchange, OpError> {
        self.define(module)?;
        let out = Outgoing::Evaluate { module, function: &call.function, input: &call.input, runs };
        let ex = self.request(out).map_err(OpError::Device)?;
        match answer_of(&ex.response) {
            Answer::Done => {}
            Answer::Refused(why) => {
                return Err(OpError::Unsupported(format!(
                    "tool {} could not evaluate {module}.{}: {why}",
                    self.spec.name, call.function
                )));
            }
            Answer::Fault(why) => return Err(OpError::Device(self.fault(&ex.what, &why))),
        }
        if let Err(why) = check_reported(ex.response.timings.as_deref().unwrap_or_default(), ex.wall) {
            return Err(OpError::Device(self.fault(&ex.what, &why)));
        }
        Ok(ex)
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
            refused: BTreeMap::new(),
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
    /// GradBench's protocol has no reverse-mode rule: the tool computes as it does.
    fn reads_rule(&self) -> bool {
        false
    }
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
    /// Every workload with a module: whether the tool defines it is asked in each process
    /// before its first `evaluate` (a refusal makes the case `skipped`, a fault an `error`).
    fn capabilities(&self) -> Capabilities {
        let conventions = self.with(|s| s.conventions.clone());
        Capabilities {
            // Protocol numbers are JSON doubles.
            dtypes: vec![DType::F64],
            workloads: None,
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
        Ok(Box::new(ProcessPrepared { shared: self.shared.clone(), module, calls, plausibility: Vec::new() }))
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
                // A tool that cannot take the verdict has already failed its case; a verdict
                // is only for the process that gave the responses (a fault clears the ids).
                if s.session.is_none() || s.request(Outgoing::Analysis { of, valid, error }).is_err() {
                    break;
                }
            }
        });
    }
}

/// A problem put on a process tool for `adgauge compare`, driven exchange by exchange: each
/// [`RemoteCase::runs`] asks for a number of runs and returns the tool's own times of them.
pub struct RemoteCase {
    inner: ProcessPrepared,
}

impl ProcessTool {
    /// Puts `problem` on the tool with `extra` fields added to every function's input (the
    /// `hist` module's `rule` and `index_dtype`, which adgauge's own tool reads).
    pub fn prepare_remote(
        &self,
        workload: &dyn Workload,
        problem: &dyn Problem,
        extra: &[(&str, Json)],
    ) -> anyhow::Result<RemoteCase> {
        let module = module_of(workload)?;
        let mut calls = BTreeMap::new();
        for mode in Mode::TIMED {
            if let Some(mut call) = problem.remote_call(mode) {
                if let Json::Object(fields) = &mut call.input {
                    for (key, value) in extra {
                        fields.insert((*key).to_string(), value.clone());
                    }
                }
                calls.insert(mode, call);
            }
        }
        Ok(RemoteCase {
            inner: ProcessPrepared { shared: self.shared.clone(), module, calls, plausibility: Vec::new() },
        })
    }
}

impl RemoteCase {
    /// Whether the tool's module has a function for `mode`.
    pub fn supports(&self, mode: Mode) -> bool {
        self.inner.calls.contains_key(&mode)
    }

    /// One exchange asking for `runs` runs of `mode`: the tool's reported times of them (seconds)
    /// and the exchange's wall time as adgauge measured it. Reported times that do not fit the
    /// wall time are an error, as in `run`.
    pub fn runs(&mut self, mode: Mode, runs: u64) -> anyhow::Result<(Vec<f64>, Duration)> {
        let ex = self.inner.run(mode, runs)?;
        let times = reported_seconds(&ex);
        if times.is_empty() {
            anyhow::bail!("{}: reported no timings", ex.what);
        }
        Ok((times, ex.wall))
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
        let r = s.evaluate(self.module, &call, 1).map_err(WorkloadError::Op)?.response;
        s.validated.push(r.id);
        r.output.ok_or_else(|| WorkloadError::Op(OpError::Device(format!("{}.{function}: no output", self.module))))
    }
}

struct ProcessPrepared {
    shared: Arc<Mutex<Shared>>,
    module: &'static str,
    calls: BTreeMap<Mode, RemoteCall>,
    /// Each timed mode's timings against adgauge's wall time.
    plausibility: Vec<Plausibility>,
}

/// A timed mode's reported runs against the wall time adgauge measured for them.
///
/// The timed exchange asks for S runs after a warm-up exchange of one run; both spend the
/// same time outside the runs (writing, parsing and converting the input, printing the
/// output), so the difference of their wall times is what S - 1 runs took: scaled to S runs,
/// it is the wall time the runs account for (S = 1: the timed exchange's whole wall time).
/// Runs that add up, without the longest one, to less than a sixth of that, once it is above
/// 10 ms (the runs are grown, twice as many at a time, until it is), are implausible, once the
/// same pair of
/// exchanges again confirms it (implausible again, with an accounted wall time within a factor
/// of two of the first: a scheduler's delay that lengthened one exchange does not repeat itself
/// to the ms): a tool that times the dispatch of asynchronous work rather than the work (JAX
/// without `block_until_ready`) reports a fraction of the time while the exchange waits for the
/// computation.
///
/// Without the longest run (the sum of the others, scaled to S runs): the first run of an
/// exchange may wait for its input's transfer, so one run of a dispatch-timing tool can report
/// real time. GradBench's JAX lse reported 2.4 ms for one run of 10 and 8 us for each of the
/// others, a sum a tenth of the wall time and the others 1/300 of it. Not the median: under two
/// busy processes adgauge's own runs had a median a third of their mean (0.06 ms; the runs that
/// waited for a core took 3 ms), and their sum was 0.56 to 1 times the wall time. And not more
/// than twice the runs at a time: once JAX's dispatch queue is full, a dispatch waits, and 160
/// runs of GradBench's JAX kmeans reported 304 of their 394 ms.
#[derive(Clone, Debug, PartialEq)]
pub struct Plausibility {
    pub mode: Mode,
    pub runs: usize,
    /// The sum of the reported runs, in seconds.
    pub reported_s: f64,
    /// The sum without the longest run, scaled to all the runs, in seconds: what is judged.
    pub typical_s: f64,
    /// The wall time the runs account for, in seconds.
    pub accounted_s: f64,
    /// Whether the confirming pair of exchanges did not repeat the finding.
    pub cleared: bool,
}

impl Plausibility {
    /// The least share of the accounted wall time the runs (without the longest) may have,
    /// halfway (on a log scale) between what was measured of honest tools and of GradBench's
    /// JAX tool: `adgauge tool`'s runs are at least 0.56 of it (under two busy processes, where
    /// a process may be preempted between runs), adgauge's JAX adapter's at least 0.29 (gmm,
    /// d = 10: runs of 0.2 ms and the adapter's loop between them); GradBench's JAX tool, timing
    /// dispatch, at most 0.095 (kmeans, n = 1000) and down to 1/2000 (lse, n = 1.28 x 10^6).
    pub const MIN_SHARE: f64 = 1.0 / 6.0;
    /// Wall time below which no share is judged (seconds): shorter exchanges are dominated by
    /// the pipes and the tool's loop.
    pub const MIN_ACCOUNTED_S: f64 = 0.010;
    /// Runs too short to judge are grown up to this many times the samples...
    pub const MAX_GROWTH: u64 = 1024;
    /// ...while the grown exchanges have taken less than this (seconds).
    pub const GROW_WALL_S: f64 = 2.0;
    /// The confirming pair's accounted wall time is within this factor of the first's.
    pub const CONFIRM_SPREAD: f64 = 2.0;

    /// From the warm-up's and the timed exchange's wall times and the timed runs' reports.
    pub fn new(mode: Mode, warm_up_wall: Duration, timed_wall: Duration, reported: &[f64]) -> Plausibility {
        let runs = reported.len();
        let timed = timed_wall.as_secs_f64();
        let accounted = if runs >= 2 {
            (timed - warm_up_wall.as_secs_f64()).max(0.0) * runs as f64 / (runs - 1) as f64
        } else {
            timed
        };
        let sum: f64 = reported.iter().sum();
        let typical = if runs >= 2 {
            let longest = reported.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (sum - longest) * runs as f64 / (runs - 1) as f64
        } else {
            sum
        };
        Plausibility { mode, runs, reported_s: sum, typical_s: typical, accounted_s: accounted, cleared: false }
    }

    /// Whether the wall time is long enough to judge (and was not cleared as a delay).
    pub fn judged(&self) -> bool {
        self.accounted_s > Self::MIN_ACCOUNTED_S && !self.cleared
    }

    /// Accounted wall time per reported second, without the longest run (what the check
    /// compares with 1 / MIN_SHARE).
    pub fn ratio(&self) -> f64 {
        if self.typical_s > 0.0 { self.accounted_s / self.typical_s } else { f64::INFINITY }
    }

    pub fn implausible(&self) -> bool {
        self.judged() && self.typical_s < Self::MIN_SHARE * self.accounted_s
    }

    /// The finding, naming the mode and both times.
    pub fn finding(&self) -> String {
        format!(
            "timing: implausible (reports dispatch time?): {}'s {} run(s) are reported as {:.3} ms ({:.3} ms without the longest), the exchange spent {:.3} ms on them",
            self.mode,
            self.runs,
            self.reported_s * 1e3,
            self.typical_s * 1e3 * (self.runs.max(2) - 1) as f64 / self.runs.max(1) as f64,
            self.accounted_s * 1e3
        )
    }

    /// Whether `second`, the same pair of exchanges again, confirms this finding.
    pub fn confirmed_by(&self, second: &Plausibility) -> bool {
        second.implausible()
            && second.accounted_s <= Self::CONFIRM_SPREAD * self.accounted_s
            && self.accounted_s <= Self::CONFIRM_SPREAD * second.accounted_s
    }
}

/// The row's `timing` check over its timed modes: the largest ratio of accounted wall time to
/// reported time among the judged modes (0 when none is judged), against 1 / MIN_SHARE; the
/// message of a failure names the mode and both times.
pub fn timing_check(modes: &[Plausibility]) -> Option<(Check, Option<String>)> {
    if modes.is_empty() {
        return None;
    }
    let judged = modes.iter().filter(|p| p.judged());
    let worst = judged.clone().map(Plausibility::ratio).fold(0.0, f64::max);
    let message: Vec<String> = modes.iter().filter(|p| p.implausible()).map(Plausibility::finding).collect();
    let check =
        Check { name: "timing".into(), worst, tolerance: 1.0 / Plausibility::MIN_SHARE, passed: message.is_empty() };
    Some((check, (!message.is_empty()).then(|| message.join("; "))))
}

/// The runs an exchange's response reports, in seconds.
fn reported_seconds(exchange: &Exchange) -> Vec<f64> {
    exchange.response.timings.as_deref().unwrap_or_default().iter().map(|t| t.nanoseconds as f64 * 1e-9).collect()
}

impl ProcessPrepared {
    fn run(&mut self, mode: Mode, runs: u64) -> anyhow::Result<Exchange> {
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
        let r = self.run(mode, 1)?.response;
        let timings = r.timings.unwrap_or_default().iter().map(|t| Duration::from_nanos(t.nanoseconds)).collect();
        Ok(Evaluation { output: r.output, timings })
    }
    /// The tool's own timings: two warm-up messages of one run, then one message asking for the
    /// budget's samples as runs; the second warm-up's and the timed exchange's wall times judge
    /// whether the timings are plausible ([`Plausibility`]).
    fn timing(&mut self, mode: Mode, budget: &Budget) -> anyhow::Result<Timing> {
        let runs = budget.samples.max(1) as u64;
        // The first call of a function may do what later calls do not (JAX compiles it): a
        // warm-up that took longer than the timed exchange left nothing accounted, and
        // GradBench's JAX tool, reporting dispatch times, read plausible.
        self.run(mode, 1)?;
        let warm_up = self.run(mode, 1)?.wall;
        let timed = self.run(mode, runs)?;
        let seconds = reported_seconds(&timed);
        let mut plausibility = Plausibility::new(mode, warm_up, timed.wall, &seconds);
        // Too short to judge: more runs, twice as many each time, until the wall time they
        // account for is measurable (as criterion grows its iterations), within GROW_WALL_S of
        // exchanges. A computation of a millisecond timed by its dispatch (0.02 ms) stayed under
        // the 10 ms floor with 10 runs and was never judged.
        let mut grown = runs;
        let mut spent = timed.wall.as_secs_f64();
        while !plausibility.judged()
            && grown < runs.saturating_mul(Plausibility::MAX_GROWTH)
            && spent < Plausibility::GROW_WALL_S
        {
            grown = grown.saturating_mul(2);
            let warm_up = self.run(mode, 1)?.wall;
            let more = self.run(mode, grown)?;
            spent += more.wall.as_secs_f64();
            plausibility = Plausibility::new(mode, warm_up, more.wall, &reported_seconds(&more));
        }
        // A finding is confirmed by the same pair of exchanges again: what the tool does
        // repeats itself, a scheduler's delay (an exchange on a loaded machine can lose tens of
        // ms) does not, to the ms. Not with more runs: JAX's full queue makes more runs look
        // honest.
        if plausibility.implausible() {
            let warm_up = self.run(mode, 1)?.wall;
            let again = self.run(mode, grown)?;
            let second = Plausibility::new(mode, warm_up, again.wall, &reported_seconds(&again));
            plausibility.cleared = !plausibility.confirmed_by(&second);
        }
        self.plausibility.retain(|p| p.mode != mode);
        self.plausibility.push(plausibility);
        crate::timing::summarize(seconds, 1)
            .ok_or_else(|| anyhow::anyhow!("tool {}: {}: reported no timings", self.name(), timed.what))
    }
    fn timing_check(&self) -> Option<(Check, Option<String>)> {
        timing_check(&self.plausibility)
    }
}

impl ProcessPrepared {
    fn name(&self) -> String {
        self.shared.lock().map(|s| s.spec.name.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn dispatch_times_are_implausible_and_compute_times_are_not() {
        // 5 runs of 100 ms behind a 300 ms input: the warm-up takes 400 ms, the timed 800 ms.
        let honest = Plausibility::new(Mode::Vjp, ms(400), ms(800), &[0.1; 5]);
        assert!((honest.accounted_s - 0.5).abs() < 1e-9, "{honest:?}");
        assert!(!honest.implausible());
        // The same exchanges with 30 us reported per run (dispatch only).
        let dispatch = Plausibility::new(Mode::Vjp, ms(400), ms(800), &[3e-5; 5]);
        assert!(dispatch.implausible(), "{dispatch:?}");
        // A fast function behind a large input: 1 ms runs, wall dominated by parsing (7 ms
        // between the exchanges, 8.75 ms accounted): not judged below 10 ms.
        let fast = Plausibility::new(Mode::Primal, ms(300), ms(307), &[1e-3; 5]);
        assert!(!fast.judged() && !fast.implausible(), "{fast:?}");
        let (check, message) = timing_check(&[honest.clone(), dispatch]).unwrap();
        assert!(!check.passed);
        assert!((check.worst - 0.5 / 1.5e-4).abs() < 1e-6, "{check:?}");
        assert_eq!(check.tolerance, 6.0);
        let message = message.unwrap();
        assert!(message.starts_with("timing: implausible (reports dispatch time?): vjp's 5 run(s)"), "{message}");
        let (ok, none) = timing_check(&[honest, fast]).unwrap();
        assert!(ok.passed && none.is_none() && (ok.worst - 1.0).abs() < 1e-9, "{ok:?}");
        // A delay the confirming pair did not reproduce is no finding.
        let mut delayed = Plausibility::new(Mode::Vjp, ms(1), ms(15), &[1e-5; 2]);
        assert!(delayed.implausible(), "{delayed:?}");
        delayed.cleared = true;
        let (ok, none) = timing_check(&[delayed]).unwrap();
        assert!(ok.passed && none.is_none() && ok.worst == 0.0, "{ok:?}");
        assert!(timing_check(&[]).is_none());
    }

    #[test]
    fn the_runs_but_the_longest_are_judged_so_one_blocking_run_does_not_clear_a_dispatch_timer() {
        // GradBench's JAX lse, 10 runs: the first waits for the input's transfer (2.4 ms), the
        // others report their dispatch (8 us); the runs took 23 ms. The sum is a tenth of it,
        // the others 1/300.
        let mut reported = vec![8e-6; 10];
        reported[0] = 2.4e-3;
        let jax = Plausibility::new(Mode::Primal, ms(50), ms(71), &reported);
        assert!((jax.accounted_s - 0.021 * 10.0 / 9.0).abs() < 1e-9, "{jax:?}");
        assert!(jax.reported_s > 0.1 * jax.accounted_s, "{jax:?}");
        assert!((jax.typical_s - 8e-5).abs() < 1e-12 && jax.implausible(), "{jax:?}");
        assert!(jax.finding().contains("(0.072 ms without the longest)"), "{}", jax.finding());
        // adgauge's own runs under two busy processes: 366 runs, most of 0.06 ms, those that
        // waited for a core 3 ms; 80.7 ms reported of the 82 the exchange spent on them (a
        // median-based rule read a third). And a sum half the wall time (preempted between
        // runs) is no finding either.
        let mut loaded = vec![0.06e-3; 366];
        for run in loaded.iter_mut().step_by(15) {
            *run = 3e-3;
        }
        let honest = Plausibility::new(Mode::Primal, ms(5), ms(87), &loaded);
        assert!(honest.judged() && !honest.implausible(), "{honest:?}");
        let preempted = Plausibility::new(Mode::Primal, ms(5), ms(5 + 2 * 87), &loaded);
        assert!(preempted.judged() && !preempted.implausible(), "{preempted:?}");
        // The confirming pair must repeat the finding, at a like wall time: a delay of one
        // exchange (145 ms where the runs took 20) is not repeated by the next (21 ms, not
        // implausible), nor by one much longer.
        let again = Plausibility::new(Mode::Primal, ms(50), ms(72), &reported);
        assert!(jax.confirmed_by(&again));
        let delayed = Plausibility::new(Mode::Primal, ms(5), ms(150), &[2e-3; 10]);
        assert!(delayed.implausible());
        let calm = Plausibility::new(Mode::Primal, ms(5), ms(24), &[2e-3; 10]);
        assert!(!delayed.confirmed_by(&calm));
        let far = Plausibility::new(Mode::Primal, ms(5), ms(400), &[2e-3; 10]);
        assert!(far.implausible() && !delayed.confirmed_by(&far));
    }

    #[test]
    fn reported_timings_must_fit_in_the_exchange() {
        let t = |ns: u64| crate::protocol::Timing { name: "evaluate".into(), nanoseconds: ns };
        assert!(check_reported(&[t(400), t(500)], Duration::from_nanos(1000)).is_ok());
        let e = check_reported(&[t(u64::MAX), t(u64::MAX)], Duration::from_millis(600)).unwrap_err();
        assert!(e.contains("more than the 0.600000 s"), "{e}");
        let e = check_reported(&[t(10), t(0)], Duration::from_millis(1)).unwrap_err();
        assert!(e.contains("run 1 is reported as 0 ns"), "{e}");
    }
}
