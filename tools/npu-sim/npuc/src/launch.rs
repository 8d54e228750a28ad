//! Running a kernel's host code: the compiled binary builds its program and streams it over
//! a pipe; that program is the only thing taken from it. The host code runs with an empty
//! environment, no stdin, its stderr discarded, in its own process group (killed, with
//! everything it started, once the program is in), under a time limit. It is told the
//! kernel, the shape, the launch position and the public hardware facts — never the seed.
use npu::program::{Decoder, Limits, Program};
use npu::Launch;
use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
    fn syscall(num: i64, ...) -> i64;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn dup2(old: i32, new: i32) -> i32;
    fn fcntl(fd: i32, cmd: i32, ...) -> i32;
    fn setpgid(pid: i32, pgid: i32) -> i32;
}

/// The descriptor the kernel binary writes its program to (npu::host).
const PROGRAM_FD: i32 = 3;
const F_SETFD: i32 = 2;

const SIGKILL: i32 = 9;
const PR_SET_DUMPABLE: i32 = 4;
const PR_CAPBSET_DROP: i32 = 24;
const PR_SET_NO_NEW_PRIVS: i32 = 38;
const PR_SET_CHILD_SUBREAPER: i32 = 36;
const WNOHANG: i32 = 1;
#[cfg(target_arch = "x86_64")]
const SYS_CAPSET: i64 = 126;
#[cfg(target_arch = "aarch64")]
const SYS_CAPSET: i64 = 91;

/// In the kernel's process, before exec: no capabilities (even when npuc runs as root), and
/// no way to gain any. Without CAP_SYS_PTRACE the host code cannot reach npuc's /proc entries.
/// Only async-signal-safe calls (prctl, syscall) happen here.
fn drop_privileges() {
    // SAFETY: plain syscalls with integer arguments and pointers to live stack arrays.
    unsafe {
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        for cap in 0..64u64 {
            prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            let header: [u32; 2] = [0x2008_0522, 0]; // _LINUX_CAPABILITY_VERSION_3, this process
            let data: [u32; 6] = [0; 6];
            syscall(SYS_CAPSET, header.as_ptr(), data.as_ptr());
        }
    }
}

/// `program_fd`: the write end of the program pipe, to become fd 3 in the child.
fn confine(cmd: &mut Command, program_fd: Option<i32>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure only makes syscalls (setpgid, dup2, fcntl, see drop_privileges).
    unsafe {
        cmd.pre_exec(move || {
            // its own process group (as Command::process_group(0), std 1.64)
            if setpgid(0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = program_fd {
                if fd == PROGRAM_FD {
                    fcntl(PROGRAM_FD, F_SETFD, 0); // clear close-on-exec
                } else if dup2(fd, PROGRAM_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            drop_privileges();
            Ok(())
        });
    }
}

/// Make this process non-dumpable: other processes of the same user (the kernel's host code)
/// can then no longer open its /proc entries (fds, environment, memory) or ptrace it. And a
/// subreaper: whatever the host code leaves behind (a double-forked daemon) becomes our child,
/// so it can be found and ended.
pub fn harden_self() {
    // SAFETY: prctl with integer arguments only.
    unsafe {
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// Our child processes (scanning /proc: `children` files need CONFIG_PROC_CHILDREN).
fn children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut kids = vec![];
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let pid: i32 = match e.file_name().to_string_lossy().parse() {
                Ok(p) => p,
                Err(_) => continue,
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", pid)) {
                // pid (comm) state ppid ...: comm may hold spaces and parentheses
                if let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) {
                    if rest.split_whitespace().nth(1).and_then(|x| x.parse::<i32>().ok()) == Some(me) {
                        kids.push(pid);
                    }
                }
            }
        }
    }
    kids
}

/// End every process the host code left behind (they are ours: we are their subreaper).
fn reap_strays() {
    for _ in 0..100 {
        let kids = children();
        if kids.is_empty() {
            return;
        }
        for k in kids {
            // SAFETY: kill and waitpid on our own children, with a stack status word.
            unsafe {
                kill(k, SIGKILL);
                let mut st = 0i32;
                waitpid(k, &mut st, WNOHANG);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
        // SAFETY: reap whatever has exited.
        unsafe {
            let mut st = 0i32;
            while waitpid(-1, &mut st, WNOHANG) > 0 {}
        }
    }
}

fn host_timeout() -> Duration {
    let s = std::env::var("NPUC_HOST_TIMEOUT_SECS").ok().and_then(|s| s.parse::<f64>().ok()).filter(|&s| s > 0.0).unwrap_or(60.0);
    Duration::from_secs_f64(s)
}

fn kill_group(pgid: u32) {
    // SAFETY: kill(2) with a negative pid signals the process group; no memory is involved.
    unsafe {
        kill(-(pgid as i32), SIGKILL);
    }
}

/// Why a launch's host code gave no program.
pub enum HostError {
    /// the binary does not provide the kernel (it said so and exited, sending nothing)
    NotProvided,
    Failed(String),
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            HostError::NotProvided => write!(f, "the file does not provide this kernel"),
            HostError::Failed(m) => write!(f, "{}", m),
        }
    }
}

/// Run `bin`'s host code for `launch`; returns its program (possibly incomplete) or why none came.
pub fn run_host(bin: &Path, launch: &Launch) -> Result<Program, HostError> {
    let (p, status) = run_host_inner(bin, launch).map_err(HostError::Failed)?;
    if p.complete {
        return Ok(p);
    }
    let status = match status {
        Some(st) if !st.success() => st,
        _ => return Ok(p), // ended early but cleanly: the device reports the unfinished program
    };
    // npu::host::main exits 9 before sending anything when the kernel is not in the file
    if status.code() == Some(9) && p.files.is_empty() && p.ops.is_empty() {
        return Err(HostError::NotProvided);
    }
    Err(HostError::Failed(format!("the kernel's host code ended without finishing its program ({})", status)))
}

/// The program as received (complete or not) and how the host code ended.
fn run_host_inner(bin: &Path, launch: &Launch) -> Result<(Program, Option<std::process::ExitStatus>), String> {
    let cwd = std::env::var("TMPDIR").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "/tmp".into());
    let mut cmd = Command::new(bin);
    let (reader, writer) = crate::sys::pipe().map_err(|e| format!("cannot create the program pipe: {}", e))?;
    cmd.arg("host").args(npu::host::launch_args(launch)).env_clear().current_dir(&cwd).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    {
        use std::os::unix::io::AsRawFd;
        confine(&mut cmd, Some(writer.as_raw_fd()));
    }
    let spawned = cmd.spawn();
    drop(writer); // the child holds the only write end: EOF when it (and its children) are gone
    let mut child = spawned.map_err(|e| format!("cannot start the kernel binary: {}", e))?;
    let pgid = child.id();
    let stdout = reader;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut d = Decoder::new(Limits::default());
        let mut r = std::io::BufReader::with_capacity(1 << 16, stdout);
        let mut line = Vec::with_capacity(256);
        let res = loop {
            line.clear();
            // bounded line reads: a line longer than the limit is an error, not a memory sink
            match std::io::Read::take(&mut r, 8192).read_until(b'\n', &mut line) {
                Ok(0) => break Ok(()),
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    } else if line.len() >= 8192 {
                        break Err("a program line is too long".to_string());
                    }
                    let text = match std::str::from_utf8(&line) {
                        Ok(t) => t,
                        Err(_) => break Err("the program is not valid UTF-8".into()),
                    };
                    if let Err(e) = d.line(text) {
                        break Err(e);
                    }
                    if d.prog.complete {
                        break Ok(());
                    }
                }
                Err(e) => break Err(format!("reading the program: {}", e)),
            }
        };
        let _ = tx.send(res.map(|_| d.prog));
    });
    let limit = host_timeout();
    let got = rx.recv_timeout(limit);
    kill_group(pgid);
    let status = child.wait().ok();
    reap_strays();
    match got {
        Ok(Ok(p)) => Ok((p, status)),
        Ok(Err(e)) => Err(format!("the kernel's program was rejected: {}", npu::program::cap(&e))),
        Err(_) => Err(format!("the kernel's host code did not finish its program within {:.0} s", limit.as_secs_f64())),
    }
}

/// The kernels a binary says it provides (names only; anything else it prints is ignored).
pub fn list_kernels(bin: &Path) -> Result<Vec<String>, String> {
    let mut cmd = Command::new(bin);
    cmd.arg("list").env_clear().stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    confine(&mut cmd, None);
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let pgid = child.id();
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut names = vec![];
        let mut r = std::io::BufReader::new(stdout.take(1 << 16));
        let mut l = String::new();
        while names.len() < 16 && r.read_line(&mut l).map(|n| n > 0).unwrap_or(false) {
            let n = l.trim();
            if npu_device::refk::KERNELS.contains(&n) || (n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')) {
                names.push(n.to_string());
            }
            l.clear();
        }
        let _ = tx.send(names);
    });
    let names = rx.recv_timeout(host_timeout()).unwrap_or_default();
    kill_group(pgid);
    let _ = child.wait();
    reap_strays();
    Ok(names)
}
