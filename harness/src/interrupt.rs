//! What happens when a run is interrupted (SIGINT, SIGTERM, SIGHUP): no tool outlives it and
//! the rows measured so far are kept. Every external tool runs in its own process group
//! (`external.rs`), which is registered here while it lives, and so is every child of
//! `--isolate` (`run.rs`). The handler only writes the signal's number to a pipe (all a signal
//! handler may safely do); a thread reading that pipe kills the registered process groups,
//! asks the isolated children to stop (SIGTERM: each kills its own tools the same way), and
//! raises the flag the run loop checks between cases. The run then writes its rows and exits
//! with 128 + the signal's number (README's exit codes). A second signal ends the process at
//! once, with the same code, after killing the groups again.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that interrupted the run (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The write end of the handler's pipe (-1: not installed).
static PIPE: AtomicI32 = AtomicI32::new(-1);

/// The live process groups of tools and the pids of isolated children.
struct Registry {
    groups: Vec<i32>,
    children: Vec<i32>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { groups: Vec::new(), children: Vec::new() });

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The signals handled.
#[cfg(unix)]
const SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The interrupting signal's number, if the run was interrupted.
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The exit code of an interrupted run: 128 + the signal's number (SIGHUP 129, SIGINT 130,
/// SIGTERM 143), the shells' convention.
pub fn exit_code(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(255)
}

/// A signal's name, for messages.
pub fn name(signal: i32) -> &'static str {
    #[cfg(unix)]
    match signal {
        libc::SIGINT => return "SIGINT",
        libc::SIGTERM => return "SIGTERM",
        libc::SIGHUP => return "SIGHUP",
        _ => {}
    }
    let _ = signal;
    "a signal"
}

#[cfg(unix)]
extern "C" fn on_signal(signal: libc::c_int) {
    let fd = PIPE.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = signal as u8;
        // SAFETY: write(2) is async-signal-safe; the byte lives on this stack frame.
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// Installs the handlers (once per process; later calls do nothing).
pub fn install() {
    #[cfg(unix)]
    {
        if PIPE.load(Ordering::SeqCst) >= 0 {
            return;
        }
        let mut fds = [0i32; 2];
        // SAFETY: pipe(2) fills the two descriptors of `fds`.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return;
        }
        // The pipe is the process's own: children must not inherit it.
        for fd in fds {
            // SAFETY: fcntl(2) on descriptors this function just opened.
            unsafe {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        PIPE.store(fds[1], Ordering::SeqCst);
        let read_end = fds[0];
        std::thread::spawn(move || watch(read_end));
        for signal in SIGNALS {
            // SAFETY: a zeroed sigaction with a handler that only calls write(2); SA_RESTART
            // keeps the other threads' system calls from failing with EINTR.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    }
}

/// The thread that acts on signals (outside the handler, where anything may be done).
#[cfg(unix)]
fn watch(read_end: i32) {
    loop {
        let mut byte = 0u8;
        // SAFETY: read(2) of one byte into a local.
        let n = unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n != 1 {
            return;
        }
        let signal = i32::from(byte);
        let first = SIGNAL.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        let reg = registry();
        for &group in &reg.groups {
            // SAFETY: kill(2) of a process group this process started and still owns.
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
        for &child in &reg.children {
            // SAFETY: kill(2) of a child this process started and has not reaped.
            unsafe {
                libc::kill(child, if first { libc::SIGTERM } else { libc::SIGKILL });
            }
        }
        drop(reg);
        if first {
            eprintln!(
                "adgauge: interrupted by {}: tools stopped; keeping what was measured so far ({} again to quit at once)",
                name(signal),
                name(signal)
            );
        } else {
            // SAFETY: _exit(2) ends the process without running anything else.
            unsafe { libc::_exit(i32::from(exit_code(SIGNAL.load(Ordering::SeqCst)))) };
        }
    }
}

/// Starts a process with `spawn` and registers it (as a process group when `group`, else as
/// an isolated child) until [`unregister`]; refused once the run is interrupted. The registry
/// is held while spawning, so that a signal arriving meanwhile still finds the new process.
pub fn spawn_registered<T>(group: bool, spawn: impl FnOnce() -> Result<(T, u32), String>) -> Result<(T, i32), String> {
    let mut reg = registry();
    if let Some(s) = signal() {
        return Err(format!("the run was interrupted by {}", name(s)));
    }
    let (value, pid) = spawn()?;
    let pid = i32::try_from(pid).map_err(|_| format!("process id {pid} out of range"))?;
    if group {
        reg.groups.push(pid)
    } else {
        reg.children.push(pid)
    }
    Ok((value, pid))
}

/// Forgets a process registered by [`spawn_registered`] (it is about to be reaped).
pub fn unregister(pid: i32) {
    let mut reg = registry();
    reg.groups.retain(|&p| p != pid);
    reg.children.retain(|&p| p != pid);
}
