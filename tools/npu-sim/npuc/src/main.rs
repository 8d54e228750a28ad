//! npuc: the npu-sim toolchain (compile, check, schedule, run, bench).
use npu_device::json::{self, esc, num, J};
use npu_device::profile::Profile;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

mod bench;
#[cfg(not(feature = "v1_1"))]
mod bench_imp;
mod cache;
mod launch;
mod sha256;
mod sys;

const USAGE: &str = "usage:
  npuc --version [--message-format json|human]
  npuc compile FILE [--cache-dir DIR] [--message-format json|human]
  npuc check FILE [--kernel K] [--shape k=v,...] [--cache-dir DIR] [--message-format json|human]
  npuc schedule FILE --kernel K [--shape k=v,...] [--cache-dir DIR] [--message-format json|human]
  npuc run FILE --kernel K --seed S [--check] [--repeat N] [--shape k=v,...] [--cache-dir DIR] [--message-format json|human]
  npuc bench [--json] [--quick] [--other-npuc PATH]
  npuc paths [--message-format json|human]
environment: NPU_SIM_PROFILE (hardware profile), NPUC_CACHE_DIR, NPU_SIM_DEVICE_DIR, NPU_SIM_NOISE_SEED";

pub struct Out {
    pub json: bool,
}
impl Out {
    pub fn line(&self, j: &str) {
        let mut so = std::io::stdout().lock();
        if self.json {
            let _ = writeln!(so, "{}", j);
        } else {
            let _ = writeln!(so, "{}", human(j));
        }
        let _ = so.flush();
    }
}

fn human(line: &str) -> String {
    let j = match json::parse(line) {
        Ok(j) => j,
        Err(_) => return line.to_string(),
    };
    match j.s("type").unwrap_or("") {
        "version" => format!("npuc {}", j.s("version").unwrap_or("?")),
        "diagnostic" => {
            let mut s = format!("{}[{}]: {}", j.s("level").unwrap_or("error"), j.s("code").unwrap_or("?"), j.s("message").unwrap_or(""));
            if let Some(sp) = j.get("span") {
                if let (Some(f), Some(l), Some(c)) = (sp.s("file"), sp.n("line"), sp.n("column")) {
                    s += &format!("\n  --> {}:{}:{}", f, l, c);
                }
            }
            for q in j.arr("quantities") {
                s += &format!("\n  = {}: {}", q.s("quantity").unwrap_or("?"), num(q.n("value").unwrap_or(0.0)));
                if let Some(l) = q.n("limit") {
                    s += &format!(" (limit {})", num(l));
                }
            }
            for n in j.arr("notes") {
                if let J::Str(n) = n {
                    s += &format!("\n  = note: {}", n);
                }
            }
            for c in j.arr("children") {
                for sp in c.arr("spans") {
                    if let Some(r) = sp.s("suggested_replacement") {
                        s += &format!("\n  = {}: {}:{}:{}: replace with `{}` ({})", c.s("level").unwrap_or("help"), sp.s("file_name").unwrap_or("?"), num(sp.n("line_start").unwrap_or(0.0)), num(sp.n("column_start").unwrap_or(0.0)), r, sp.s("suggestion_applicability").unwrap_or("?"));
                    }
                }
            }
            s
        }
        "check" => format!(
            "check: {} ({} error(s), {} warning(s), compile {:.2}s)",
            if j.b("ok") == Some(true) { "ok" } else { "FAILED" },
            num(j.n("errors").unwrap_or(0.0)),
            num(j.n("warnings").unwrap_or(0.0)),
            j.n("compile_secs").unwrap_or(0.0)
        ),
        "schedule" => format!("schedule {}: {} cycles (static estimate)", j.s("kernel").unwrap_or("?"), num(j.n("cycles").unwrap_or(0.0))),
        "run" => format!("run {} seed {} repeat {}: {} cycles ({:.1} ms)", j.s("kernel").unwrap_or("?"), num(j.n("seed").unwrap_or(0.0)), num(j.n("repeat").unwrap_or(0.0)), num(j.n("cycles").unwrap_or(0.0)), j.n("wall_ms").unwrap_or(0.0)),
        "verify" => format!(
            "verify {}: {} (max_abs_err {}, mismatches {}, nonfinite {}, elements {})",
            j.s("kernel").unwrap_or("?"),
            if j.b("passed") == Some(true) { "PASSED" } else { "FAILED" },
            num(j.n("max_abs_err").unwrap_or(0.0)),
            num(j.n("mismatches").unwrap_or(0.0)),
            num(j.n("nonfinite").unwrap_or(0.0)),
            num(j.n("elements").unwrap_or(0.0))
        ),
        "error" => format!("error ({}): {}", j.s("kind").unwrap_or("?"), j.s("message").unwrap_or("")),
        _ => line.to_string(),
    }
}

pub fn error_line(kind: &str, msg: &str) -> String {
    format!("{{\"type\":\"error\",\"kind\":{},\"message\":{}}}", esc(kind), esc(msg))
}

/// Longest diagnostic message, note count and note length npuc prints.
pub const DIAG_MESSAGE_MAX: usize = 1000;
pub const DIAG_NOTES_MAX: usize = 8;
pub const DIAG_NOTE_MAX: usize = 300;

pub use npu::program::cut;

pub fn diag(code: &str, level: &str, msg: &str, span: Option<(String, u64, u64)>, notes: &[String]) -> String {
    let sp = match span {
        Some((f, l, c)) => format!("{{\"file\":{},\"line\":{},\"column\":{}}}", esc(&cut(&f, 300)), l, c),
        None => "null".into(),
    };
    let msg = &cut(msg, DIAG_MESSAGE_MAX);
    let n: Vec<String> = notes.iter().take(DIAG_NOTES_MAX).map(|x| esc(&cut(x, DIAG_NOTE_MAX))).collect();
    format!("{{\"type\":\"diagnostic\",\"level\":{},\"code\":{},\"message\":{},\"span\":{},\"quantities\":[],\"notes\":[{}]}}", esc(level), esc(code), esc(msg), sp, n.join(","))
}

/// A machine-applicable suggestion, in rustc's JSON manner: replace bytes
/// `byte_start..byte_end` (line/column 1-based, end exclusive) of `file` with `replacement`.
pub struct FixIt {
    pub file: String,
    pub byte_start: u64,
    pub byte_end: u64,
    pub line: u64,
    pub column_start: u64,
    pub column_end: u64,
    pub replacement: String,
}

/// A diagnostic with rustc-style `children` carrying suggestions.
pub fn diag_fix(code: &str, level: &str, msg: &str, span: Option<(String, u64, u64)>, notes: &[String], help: &str, fixes: &[FixIt]) -> String {
    let base = diag(code, level, msg, span, notes);
    let spans: Vec<String> = fixes
        .iter()
        .map(|f| {
            format!(
                "{{\"file_name\":{},\"byte_start\":{},\"byte_end\":{},\"line_start\":{},\"line_end\":{},\"column_start\":{},\"column_end\":{},\"suggested_replacement\":{},\"suggestion_applicability\":\"MachineApplicable\"}}",
                esc(&cut(&f.file, 300)),
                f.byte_start,
                f.byte_end,
                f.line,
                f.line,
                f.column_start,
                f.column_end,
                esc(&f.replacement)
            )
        })
        .collect();
    format!("{},\"children\":[{{\"level\":\"help\",\"message\":{},\"spans\":[{}]}}]}}", &base[..base.len() - 1], esc(&cut(help, DIAG_NOTE_MAX)), spans.join(","))
}

/// Where this npuc's pieces are.
pub struct Install {
    pub rustc: PathBuf,
    pub lib_dir: PathBuf,
    pub rlib: PathBuf,
    pub device_dir: Option<PathBuf>,
    pub exe: PathBuf,
}

pub fn install() -> Result<Install, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find npuc itself: {}", e))?;
    let bin = exe.parent().unwrap().to_path_buf();
    let root = bin.parent().unwrap_or(&bin).to_path_buf();
    let (lib_dir, rlib) = if root.join("lib/libnpu.rlib").exists() {
        (root.join("lib"), root.join("lib/libnpu.rlib"))
    } else if bin.join("libnpu.rlib").exists() {
        (bin.join("deps"), bin.join("libnpu.rlib"))
    } else {
        return Err(format!("libnpu.rlib not found next to {}", exe.display()));
    };
    let mut rustc = PathBuf::from(env!("NPUC_RUSTC"));
    if let Ok(t) = std::fs::read_to_string(root.join("lib/npuc.conf")) {
        for l in t.lines() {
            if let Some(v) = l.strip_prefix("rustc=") {
                rustc = PathBuf::from(v.trim());
            }
        }
    }
    let device_dir = match std::env::var("NPU_SIM_DEVICE_DIR") {
        Ok(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => {
            let d = if root.join("device").is_dir() { root.join("device") } else { bin.join("device") };
            if d.is_dir() || std::fs::create_dir_all(&d).is_ok() {
                Some(d)
            } else {
                None
            }
        }
    };
    Ok(Install { rustc, lib_dir, rlib, device_dir, exe })
}

pub fn cache_dir(opt: &Option<String>) -> PathBuf {
    let base = opt
        .clone()
        .or_else(|| std::env::var("NPUC_CACHE_DIR").ok().filter(|s| !s.is_empty()))
        .or_else(|| std::env::var("TMPDIR").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "/tmp".into());
    PathBuf::from(base).join(format!("npuc-{}", npu::RELEASE))
}

/// Release renames: (old, new) if the rustc message is about a renamed function.
pub fn renamed(msg: &str) -> Option<(&'static str, &'static str)> {
    if !npu::RELEASE_1_1 {
        return None;
    }
    for (old, new) in [("vtrf", "to_trf")] {
        if msg.contains(&format!("`{}`", old)) && (msg.contains("no method named") || msg.contains("cannot find")) {
            return Some((old, new));
        }
    }
    None
}

struct Args {
    pos: Vec<String>,
    kernel: Option<String>,
    seed: Option<u64>,
    check: bool,
    repeat: u32,
    shape: String,
    cache: Option<String>,
    json: bool,
    poison: bool,
    flags: Vec<String>,
}

fn parse_args(a: &[String]) -> Result<Args, String> {
    let mut r = Args { pos: vec![], kernel: None, seed: None, check: false, repeat: 1, shape: String::new(), cache: None, json: false, poison: true, flags: vec![] };
    let mut i = 0;
    let val = |i: &mut usize, name: &str| -> Result<String, String> {
        *i += 1;
        a.get(*i).cloned().ok_or_else(|| format!("{} needs a value", name))
    };
    while i < a.len() {
        let s = a[i].as_str();
        match s {
            "--kernel" => r.kernel = Some(val(&mut i, s)?),
            "--seed" => r.seed = Some(val(&mut i, s)?.parse().map_err(|_| "--seed needs a non-negative integer".to_string())?),
            "--check" => r.check = true,
            "--repeat" => {
                r.repeat = val(&mut i, s)?.parse().map_err(|_| "--repeat needs a positive integer".to_string())?;
                if r.repeat == 0 || r.repeat > 1000 {
                    return Err("--repeat must be 1..=1000".into());
                }
            }
            "--shape" => r.shape = val(&mut i, s)?,
            "--cache-dir" => r.cache = Some(val(&mut i, s)?),
            "--message-format" => {
                let v = val(&mut i, s)?;
                r.json = match v.as_str() {
                    "json" => true,
                    "human" => false,
                    _ => return Err(format!("--message-format must be json or human, not `{}`", v)),
                }
            }
            "--json" => r.json = true,
            "--no-poison" => r.poison = false,
            "--quick" => r.flags.push(s.into()),
            "--other-npuc" => {
                let v = val(&mut i, s)?;
                r.flags.push(format!("--other-npuc={}", v))
            }
            _ if s.starts_with("--") => return Err(format!("unknown option `{}`", s)),
            _ => r.pos.push(s.into()),
        }
        i += 1;
    }
    Ok(r)
}

fn usage_exit(out: &Out, msg: &str) -> ! {
    out.line(&error_line("usage", msg));
    eprintln!("{}", USAGE);
    std::process::exit(2)
}

/// `run --seed S`: the seed must not stay visible in this process's command line, which any
/// process can read (/proc/PID/cmdline) — the kernel's host code included. Re-execute without
/// it (the seed travels in the environment, which a non-dumpable process keeps private).
fn hide_seed(argv: &[String]) {
    if argv.first().map(|s| s.as_str()) != Some("run") {
        return;
    }
    let i = match argv.iter().position(|x| x == "--seed") {
        Some(i) => i,
        None => return,
    };
    let seed = match argv.get(i + 1) {
        Some(s) => s.clone(),
        None => return,
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(_) => return,
    };
    let mut rest: Vec<String> = argv.to_vec();
    rest.drain(i..i + 2);
    let err = std::os::unix::process::CommandExt::exec(std::process::Command::new(exe).args(&rest).env(SEED_ENV, seed));
    eprintln!("npuc: warning: could not re-execute to hide the seed: {}", err);
}

const SEED_ENV: &str = "NPUC_LAUNCH_SEED";

fn main() {
    launch::harden_self();
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    hide_seed(&argv);
    if let Ok(seed) = std::env::var(SEED_ENV) {
        std::env::remove_var(SEED_ENV);
        if argv.first().map(|s| s.as_str()) == Some("run") && !argv.iter().any(|x| x == "--seed") {
            argv.push("--seed".into());
            argv.push(seed);
        }
    }
    let pre_json = argv.windows(2).any(|w| w[0] == "--message-format" && w[1] == "json") || argv.iter().any(|a| a == "--json");
    let out = Out { json: pre_json };
    if argv.is_empty() {
        usage_exit(&out, "missing command");
    }
    if argv[0] == "--version" || argv[0] == "version" {
        out.line(&format!("{{\"type\":\"version\",\"name\":\"npuc\",\"version\":{}}}", esc(npu::RELEASE)));
        return;
    }
    if argv[0] == "--help" || argv[0] == "help" || argv[0] == "-h" {
        println!("{}", USAGE);
        return;
    }
    let cmd = argv[0].clone();
    let a = match parse_args(&argv[1..]) {
        Ok(a) => a,
        Err(e) => usage_exit(&out, &e),
    };
    let out = Out { json: a.json };
    let prof = match Profile::from_env() {
        Ok(p) => p,
        Err(e) => usage_exit(&out, &e),
    };
    if cmd == "bench" {
        let other = a.flags.iter().find_map(|f| f.strip_prefix("--other-npuc=").map(String::from));
        std::process::exit(bench::main(&out, a.json, a.flags.iter().any(|f| f == "--quick"), other, &prof));
    }
    if cmd == "paths" {
        let inst = match install() {
            Ok(i) => i,
            Err(e) => {
                out.line(&error_line("device", &format!("internal: {}", e)));
                std::process::exit(4)
            }
        };
        let mut paths: Vec<String> = vec![];
        let root = inst.exe.parent().and_then(|b| b.parent()).map(|r| r.to_path_buf());
        if let Some(r) = root {
            paths.push(r.display().to_string());
        }
        if let Some(sysroot) = inst.rustc.parent().and_then(|b| b.parent()) {
            paths.push(sysroot.display().to_string());
        }
        if let Ok(pf) = std::env::var("NPU_SIM_PROFILE") {
            if !pf.is_empty() {
                if let Ok(abs) = std::fs::canonicalize(&pf) {
                    paths.push(abs.display().to_string());
                }
            }
        }
        let q: Vec<String> = paths.iter().map(|p| esc(p)).collect();
        out.line(&format!("{{\"type\":\"paths\",\"read_only\":[{}]}}", q.join(",")));
        return;
    }
    if !matches!(cmd.as_str(), "compile" | "check" | "schedule" | "run" | "trace") {
        usage_exit(&out, &format!("unknown command `{}`", cmd));
    }
    if a.pos.len() != 1 {
        usage_exit(&out, &format!("{} needs exactly one FILE", cmd));
    }
    let file = a.pos[0].clone();
    if !Path::new(&file).is_file() {
        usage_exit(&out, &format!("no such file: {}", file));
    }
    if !matches!(cmd.as_str(), "check" | "trace" | "compile") && a.kernel.is_none() {
        usage_exit(&out, &format!("{} needs --kernel K", cmd));
    }
    let mut shape = npu_device::refk::Shape::default();
    if let Some(k) = &a.kernel {
        if !npu_device::refk::KERNELS.contains(&k.as_str()) {
            usage_exit(&out, &format!("unknown kernel `{}` (known: {})", k, npu_device::refk::KERNELS.join(", ")));
        }
        match npu_device::refk::parse_shape(k, &a.shape) {
            Ok(s) => shape = s,
            Err(e) => usage_exit(&out, &e),
        }
    } else if !a.shape.is_empty() {
        usage_exit(&out, "--shape needs --kernel");
    }
    if cmd == "run" && a.seed.is_none() {
        usage_exit(&out, "run needs --seed S");
    }
    let inst = match install() {
        Ok(i) => i,
        Err(e) => {
            out.line(&error_line("device", &format!("internal: {}", e)));
            std::process::exit(4)
        }
    };
    let cache = cache_dir(&a.cache);
    let mode = if cmd == "compile" { cache::Mode::Write } else { cache::Mode::Read };
    let comp = match cache::compile(&inst, &file, &cache, mode) {
        Ok(c) => c,
        Err(cache::CompileError::Io(e)) => {
            out.line(&diag("E0901", "error", &e, None, &[]));
            if cmd == "check" {
                out.line("{\"type\":\"check\",\"ok\":false,\"errors\":1,\"warnings\":0,\"compile_secs\":0}");
            } else {
                out.line(&error_line("compile", &e));
            }
            std::process::exit(1)
        }
        Err(cache::CompileError::Cache(t)) => {
            out.line(&format!("{{\"type\":\"error\",\"kind\":\"cache\",\"entry\":{},\"message\":{}}}", esc(&t.entry.display().to_string()), esc(&t.message)));
            std::process::exit(1)
        }
    };
    let code = with_binary(&out, &cmd, &file, &a, shape, &inst, &prof, &comp);
    if let Some(p) = &comp.private {
        let _ = std::fs::remove_dir_all(p);
    }
    std::process::exit(code);
}

fn with_binary(out: &Out, cmd: &str, file: &str, a: &Args, shape: npu_device::refk::Shape, inst: &Install, prof: &Profile, comp: &cache::Compiled) -> i32 {
    for d in &comp.diags {
        out.line(d);
    }
    let secs = num((comp.secs * 1000.0).round() / 1000.0);
    if cmd == "compile" {
        out.line(&format!(
            "{{\"type\":\"compile\",\"ok\":{},\"errors\":{},\"warnings\":{},\"compile_secs\":{},\"artifact\":{},\"sha256\":{}}}",
            comp.bin.is_some(),
            comp.errors,
            comp.warnings,
            secs,
            comp.bin.as_ref().map(|b| esc(&b.display().to_string())).unwrap_or_else(|| "null".into()),
            comp.sha256.as_ref().map(|s| esc(s)).unwrap_or_else(|| "null".into())
        ));
        return if comp.bin.is_some() { 0 } else { 1 };
    }
    let bin = match &comp.bin {
        Some(b) => b.clone(),
        None => {
            if cmd == "check" {
                out.line(&format!("{{\"type\":\"check\",\"ok\":false,\"errors\":{},\"warnings\":{},\"compile_secs\":{}}}", comp.errors, comp.warnings, secs));
            } else {
                out.line(&error_line("compile", &format!("{} failed to compile", file)));
            }
            return 1;
        }
    };
    // only check lists the file's kernels; run and schedule learn it from the launch itself
    if cmd != "check" {
        let k = a.kernel.clone().unwrap_or_default();
        return match cmd {
            "run" => run_device(out, inst, &bin, &k, shape, a, prof, file),
            _ => trace_cmd(out, cmd, &bin, &k, shape, prof, file),
        };
    }
    let provided = launch::list_kernels(&bin).unwrap_or_default();
    let kernels: Vec<String> = match &a.kernel {
        Some(k) => vec![k.clone()],
        None => provided.iter().filter(|k| npu_device::refk::KERNELS.contains(&k.as_str())).cloned().collect(),
    };
    let mut errors = 0usize;
    let warnings = comp.warnings;
    for k in &kernels {
        if !provided.contains(k) {
            errors += 1;
            out.line(&diag("E0402", "error", &format!("{} does not provide kernel `{}` (it provides: {})", file, k, provided.join(", ")), None, &["help: declare it with npu::kernels! { name => function }".into()]));
        }
    }
    for k in &provided {
        if !npu_device::refk::KERNELS.contains(&k.as_str()) {
            errors += 1;
            out.line(&diag("E0402", "error", &format!("unknown kernel name `{}` in npu::kernels! (known: {})", k, npu_device::refk::KERNELS.join(", ")), None, &[]));
        }
    }
    if provided.is_empty() && a.kernel.is_none() {
        errors += 1;
        out.line(&diag("E0402", "error", &format!("{} provides no kernel", file), None, &["help: declare it with npu::kernels! { name => function }".into()]));
    }
    if cmd == "check" {
        for k in &kernels {
            if !provided.contains(k) {
                continue;
            }
            let sh = if a.kernel.is_some() { shape } else { npu_device::refk::Shape::default() };
            match trace_file(&bin, k, sh, prof) {
                Ok(t) => {
                    for d in &t.diags {
                        errors += 1;
                        out.line(&npu_device::runtime::diag_json(d));
                    }
                }
                Err(e) => {
                    errors += 1;
                    out.line(&diag(if matches!(e, launch::HostError::NotProvided) { "E0402" } else { "E0403" }, "error", &e.to_string(), None, &[]));
                }
            }
        }
        out.line(&format!("{{\"type\":\"check\",\"ok\":{},\"errors\":{},\"warnings\":{},\"compile_secs\":{}}}", errors == 0, errors, warnings, secs));
        return if errors == 0 { 0 } else { 1 };
    }
    unreachable!("check returned above")
}

fn not_provided(out: &Out, file: &str, k: &str) -> i32 {
    out.line(&diag("E0402", "error", &format!("{} does not provide kernel `{}`", file, k), None, &["help: declare it with npu::kernels! { name => function }".into()]));
    out.line(&error_line("compile", "the kernel is not provided by the file"));
    1
}

fn trace_cmd(out: &Out, cmd: &str, bin: &Path, k: &str, shape: npu_device::refk::Shape, prof: &Profile, file: &str) -> i32 {
    let t = match trace_file(bin, k, shape, prof) {
        Ok(t) => t,
        Err(launch::HostError::NotProvided) => return not_provided(out, file, k),
        Err(e) => {
            if cmd == "trace" {
                println!("{}", error_line("device", &e.to_string()));
                return 0;
            }
            out.line(&diag("E0403", "error", &e.to_string(), None, &[]));
            return 1;
        }
    };
    if cmd == "trace" {
        // undocumented: the raw trace line (static estimate and device model cycles)
        t.diags.iter().for_each(|d| println!("{}", npu_device::runtime::diag_json(d)));
        println!("{}", npu_device::runtime::trace_json(k, &t));
        return 0;
    }
    if !t.diags.is_empty() {
        t.diags.iter().for_each(|d| out.line(&npu_device::runtime::diag_json(d)));
        return 1;
    }
    let (bd, c) = (&t.breakdown, &t.counts);
    out.line(&format!(
        "{{\"type\":\"schedule\",\"kernel\":{},\"cycles\":{},\"breakdown\":{{\"dma_cycles\":{},\"tensor_cycles\":{},\"vector_cycles\":{},\"switch_cycles\":{}}},\"counts\":{{\"dma_commands\":{},\"passes\":{},\"hbm_read_bytes\":{},\"hbm_write_bytes\":{}}}}}",
        esc(k),
        num(t.est_cycles.round()),
        num(bd[0].round()),
        num(bd[1].round()),
        num(bd[2].round()),
        num(bd[3].round()),
        c.dma_commands,
        c.passes,
        c.hbm_read_bytes,
        c.hbm_write_bytes
    ));
    0
}

/// The host code's program for a trace launch, traced on the device.
fn trace_file(bin: &Path, k: &str, shape: npu_device::refk::Shape, prof: &Profile) -> Result<npu_device::runtime::TraceResult, launch::HostError> {
    let launch = npu_device::runtime::launch_for(k, shape, prof, npu_device::runtime::TRACE_SEED);
    let prog = launch::run_host(bin, &launch)?;
    Ok(npu_device::runtime::trace_program(k, shape, prof, &prog))
}

pub struct Rng(pub u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(1);
        npu_device::hot::unit(npu_device::hot::mix(self.0))
    }
    fn normal(&mut self) -> f64 {
        let u1 = self.next().max(1e-300);
        let u2 = self.next();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Hold one of the device's `max_concurrent_runs` slots (flock, across processes).
pub fn acquire_slot(inst: &Install, p: &Profile) -> Option<std::fs::File> {
    let dir = inst.device_dir.as_ref()?;
    let n = (p.max_concurrent_runs as usize).max(1);
    loop {
        for i in 0..n {
            let path = dir.join(format!("slot{}.lock", i));
            let f = std::fs::File::open(&path).or_else(|_| std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path));
            if let Ok(f) = f {
                if sys::try_lock(&f).is_ok() {
                    return Some(f);
                }
            } else {
                return None;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub fn noise_factor(rng: &mut Rng, p: &Profile) -> f64 {
    let mut f = (p.noise_sigma * rng.normal()).exp();
    if rng.next() < p.outlier_rate {
        f *= p.outlier_scale;
    }
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let th = (secs / 3600.0) % 4.0;
    let tri = if th < 2.0 { th } else { 4.0 - th };
    f * (1.0 + p.drift_per_hour * tri)
}

fn run_device(out: &Out, inst: &Install, bin: &Path, k: &str, shape: npu_device::refk::Shape, a: &Args, p: &Profile, file: &str) -> i32 {
    let seed = a.seed.unwrap();
    let noise_seed = std::env::var("NPU_SIM_NOISE_SEED").ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        t ^ ((std::process::id() as u64) << 32)
    });
    let mut rng = Rng(npu_device::hot::mix(noise_seed));
    // the host code builds its program first (it is told the position, never the seed)
    let launch = npu_device::runtime::launch_for(k, shape, p, seed);
    let prog = match launch::run_host(bin, &launch) {
        Ok(prog) => prog,
        Err(launch::HostError::NotProvided) => return not_provided(out, file, k),
        Err(e) => {
            out.line(&diag("E0403", "error", &e.to_string(), None, &[]));
            out.line(&error_line("device", &e.to_string()));
            return 1;
        }
    };
    let _slot = acquire_slot(inst, p);
    let t0 = Instant::now();
    let overhead = std::time::Duration::from_secs_f64(p.launch_overhead_ms / 1000.0);
    if rng.next() < p.transient_failure_rate {
        std::thread::sleep(overhead);
        out.line(&error_line("transient", "device busy: link reset, retry"));
        return 3;
    }
    let r = npu_device::runtime::exec_program(k, shape, p, seed, a.check, a.poison, &prog);
    if !r.trace.diags.is_empty() {
        for d in &r.trace.diags {
            out.line(&npu_device::runtime::diag_json(d));
        }
        out.line(&error_line("compile", "the kernel broke a legality rule at run time"));
        return 1;
    }
    if r.trace.hang {
        // the cluster hangs: nothing more happens until someone kills us
        loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
    let cycles = r.trace.dev_cycles.round();
    let mut tr = t0;
    for rep in 0..a.repeat {
        std::thread::sleep(overhead);
        let c = (cycles * noise_factor(&mut rng, p)).round();
        let wall = tr.elapsed().as_secs_f64() * 1000.0;
        tr = Instant::now();
        out.line(&format!("{{\"type\":\"run\",\"kernel\":{},\"seed\":{},\"repeat\":{},\"cycles\":{},\"wall_ms\":{}}}", esc(k), seed, rep, num(c), num((wall * 10.0).round() / 10.0)));
    }
    if a.check {
        return match &r.verify {
            Some(v) => {
                out.line(&npu_device::runtime::verify_json(k, seed, v));
                if v.passed {
                    0
                } else {
                    1
                }
            }
            None => {
                out.line(&error_line("device", "no verification result"));
                1
            }
        };
    }
    0
}
