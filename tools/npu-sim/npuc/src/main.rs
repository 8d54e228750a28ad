//! npuc: the npu-sim toolchain (compile, check, schedule, run, bench).
use npu::json::{self, esc, num, J};
use npu::profile::Profile;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

mod bench;
#[cfg(not(feature = "v1_1"))]
mod bench_imp;

const USAGE: &str = "usage:
  npuc --version [--message-format json|human]
  npuc check FILE [--kernel K] [--shape k=v,...] [--cache-dir DIR] [--message-format json|human]
  npuc schedule FILE --kernel K [--shape k=v,...] [--cache-dir DIR] [--message-format json|human]
  npuc run FILE --kernel K --seed S [--check] [--repeat N] [--shape k=v,...] [--cache-dir DIR] [--message-format json|human]
  npuc bench [--json] [--quick] [--other-npuc PATH]
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

fn diag(code: &str, level: &str, msg: &str, span: Option<(String, u64, u64)>, notes: &[String]) -> String {
    let sp = match span {
        Some((f, l, c)) => format!("{{\"file\":{},\"line\":{},\"column\":{}}}", esc(&f), l, c),
        None => "null".into(),
    };
    let n: Vec<String> = notes.iter().map(|x| esc(x)).collect();
    format!("{{\"type\":\"diagnostic\",\"level\":{},\"code\":{},\"message\":{},\"span\":{},\"quantities\":[],\"notes\":[{}]}}", esc(level), esc(code), esc(msg), sp, n.join(","))
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

fn fnv(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

pub struct Compiled {
    pub bin: Option<PathBuf>,
    pub diags: Vec<String>,
    pub errors: usize,
    pub warnings: usize,
    pub secs: f64,
}

pub fn cache_dir(opt: &Option<String>) -> PathBuf {
    let base = opt
        .clone()
        .or_else(|| std::env::var("NPUC_CACHE_DIR").ok().filter(|s| !s.is_empty()))
        .or_else(|| std::env::var("TMPDIR").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "/tmp".into());
    PathBuf::from(base).join(format!("npuc-{}", npu::RELEASE))
}

/// Compile a kernel file (cached by content hash).
pub fn compile(inst: &Install, file: &str, cache: &Path) -> Result<Compiled, String> {
    let t0 = Instant::now();
    let src = std::fs::read(file).map_err(|e| format!("cannot read {}: {}", file, e))?;
    let meta = std::fs::metadata(&inst.rlib).map_err(|e| format!("{}: {}", inst.rlib.display(), e))?;
    let mut h = fnv(npu::RELEASE.as_bytes(), 0xcbf2_9ce4_8422_2325);
    h = fnv(&src, h);
    h = fnv(file.as_bytes(), h);
    h = fnv(&meta.len().to_le_bytes(), h);
    if let Ok(m) = meta.modified() {
        if let Ok(d) = m.duration_since(std::time::UNIX_EPOCH) {
            h = fnv(&d.as_nanos().to_le_bytes(), h);
        }
    }
    std::fs::create_dir_all(cache).map_err(|e| format!("cannot create cache dir {}: {}", cache.display(), e))?;
    let bin = cache.join(format!("k{:016x}", h));
    let diag_cache = cache.join(format!("k{:016x}.diag", h));
    if bin.exists() {
        let diags: Vec<String> = std::fs::read_to_string(&diag_cache).map(|t| t.lines().map(String::from).collect()).unwrap_or_default();
        let w = diags.len();
        return Ok(Compiled { bin: Some(bin), diags, errors: 0, warnings: w, secs: t0.elapsed().as_secs_f64() });
    }
    let tmp = cache.join(format!("k{:016x}.tmp{}", h, std::process::id()));
    let out = Command::new(&inst.rustc)
        .args(["--edition", "2021", "--crate-type", "bin", "--crate-name", "npu_kernel", "-C", "opt-level=0", "-C", "debuginfo=0", "--error-format=json", "-A", "dead_code"])
        .arg("--extern")
        .arg(format!("npu={}", inst.rlib.display()))
        .arg("-L")
        .arg(format!("dependency={}", inst.lib_dir.display()))
        .arg("-o")
        .arg(&tmp)
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run rustc {}: {}", inst.rustc.display(), e))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut diags = vec![];
    let (mut errors, mut warnings) = (0, 0);
    for l in stderr.lines() {
        let j = match json::parse(l) {
            Ok(j) => j,
            Err(_) => continue,
        };
        let level = j.s("level").unwrap_or("");
        let msg = j.s("message").unwrap_or("").to_string();
        if !(level == "error" || level == "warning") || msg.starts_with("aborting due to") {
            continue;
        }
        let rcode = j.get("code").and_then(|c| c.s("code")).unwrap_or("").to_string();
        let span = j.arr("spans").iter().find(|s| s.b("is_primary") == Some(true)).or(j.arr("spans").first()).map(|s| (s.s("file_name").unwrap_or(file).to_string(), s.n("line_start").unwrap_or(0.0) as u64, s.n("column_start").unwrap_or(0.0) as u64));
        let mut notes: Vec<String> = vec![];
        if !rcode.is_empty() {
            notes.push(format!("rustc {}", rcode));
        }
        for c in j.arr("children") {
            if let Some(m) = c.s("message") {
                notes.push(format!("{}: {}", c.s("level").unwrap_or("note"), m));
            }
        }
        let (code, msg) = match renamed(&msg) {
            Some((old, new)) if level == "error" => ("E0401", format!("`{}` was renamed to `{}` in npuc {}; update the kernel", old, new, npu::RELEASE)),
            _ => (if level == "error" { "E0001" } else { "E0002" }, msg),
        };
        if level == "error" {
            errors += 1;
        } else {
            warnings += 1;
        }
        diags.push(diag(code, level, &msg, span, &notes));
    }
    if out.status.success() && errors == 0 {
        std::fs::rename(&tmp, &bin).map_err(|e| format!("cache: {}", e))?;
        let _ = std::fs::write(&diag_cache, diags.join("\n") + if diags.is_empty() { "" } else { "\n" });
        Ok(Compiled { bin: Some(bin), diags, errors, warnings, secs: t0.elapsed().as_secs_f64() })
    } else {
        let _ = std::fs::remove_file(&tmp);
        if errors == 0 {
            errors = 1;
            diags.push(diag("E0001", "error", &format!("rustc failed: {}", stderr.lines().last().unwrap_or("")), None, &[]));
        }
        Ok(Compiled { bin: None, diags, errors, warnings, secs: t0.elapsed().as_secs_f64() })
    }
}

/// Release renames: (old, new) if the rustc message is about a renamed function.
fn renamed(msg: &str) -> Option<(&'static str, &'static str)> {
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

fn tmp_out() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let base = std::env::var("TMPDIR").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "/tmp".into());
    PathBuf::from(base).join(format!("npuc-{}-{}.out", std::process::id(), N.fetch_add(1, Ordering::SeqCst)))
}

/// Run the kernel binary; returns its result lines.
pub fn invoke(bin: &Path, args: &[String]) -> Result<Vec<String>, String> {
    let of = tmp_out();
    let mut a: Vec<String> = args.to_vec();
    a.push(of.display().to_string());
    let st = Command::new(bin).args(&a).stdin(Stdio::null()).stdout(Stdio::from(std::io::stderr())).status().map_err(|e| format!("cannot start kernel binary: {}", e))?;
    let text = std::fs::read_to_string(&of).unwrap_or_default();
    let _ = std::fs::remove_file(&of);
    if !st.success() {
        return Err(format!("kernel binary failed ({})", st));
    }
    Ok(text.lines().map(String::from).collect())
}

pub fn list_kernels(bin: &Path) -> Result<Vec<String>, String> {
    let o = Command::new(bin).arg("list").stdin(Stdio::null()).output().map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect())
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

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
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
    if !matches!(cmd.as_str(), "check" | "schedule" | "run" | "trace") {
        usage_exit(&out, &format!("unknown command `{}`", cmd));
    }
    if a.pos.len() != 1 {
        usage_exit(&out, &format!("{} needs exactly one FILE", cmd));
    }
    let file = a.pos[0].clone();
    if !Path::new(&file).is_file() {
        usage_exit(&out, &format!("no such file: {}", file));
    }
    if cmd != "check" && cmd != "trace" && a.kernel.is_none() {
        usage_exit(&out, &format!("{} needs --kernel K", cmd));
    }
    if let Some(k) = &a.kernel {
        if !npu::refk::KERNELS.contains(&k.as_str()) {
            usage_exit(&out, &format!("unknown kernel `{}` (known: {})", k, npu::refk::KERNELS.join(", ")));
        }
        if let Err(e) = npu::runtime::parse_shape(k, &a.shape) {
            usage_exit(&out, &e);
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
    let comp = match compile(&inst, &file, &cache) {
        Ok(c) => c,
        Err(e) => {
            out.line(&diag("E0901", "error", &e, None, &[]));
            if cmd == "check" {
                out.line("{\"type\":\"check\",\"ok\":false,\"errors\":1,\"warnings\":0,\"compile_secs\":0}");
            } else {
                out.line(&error_line("compile", &e));
            }
            std::process::exit(1)
        }
    };
    for d in &comp.diags {
        out.line(d);
    }
    let bin = match &comp.bin {
        Some(b) => b.clone(),
        None => {
            if cmd == "check" {
                out.line(&format!("{{\"type\":\"check\",\"ok\":false,\"errors\":{},\"warnings\":{},\"compile_secs\":{}}}", comp.errors, comp.warnings, num((comp.secs * 1000.0).round() / 1000.0)));
            } else {
                out.line(&error_line("compile", &format!("{} failed to compile", file)));
            }
            std::process::exit(1)
        }
    };
    let provided = list_kernels(&bin).unwrap_or_default();
    let kernels: Vec<String> = match &a.kernel {
        Some(k) => vec![k.clone()],
        None => provided.clone(),
    };
    let mut errors = 0usize;
    let warnings = comp.warnings;
    for k in &kernels {
        if !provided.contains(k) {
            errors += 1;
            out.line(&diag("E0402", "error", &format!("{} does not provide kernel `{}` (it provides: {})", file, k, provided.join(", ")), None, &["help: declare it with npu::kernels! { name => function }".into()]));
            continue;
        }
        if !npu::refk::KERNELS.contains(&k.as_str()) {
            errors += 1;
            out.line(&diag("E0402", "error", &format!("unknown kernel name `{}` in npu::kernels! (known: {})", k, npu::refk::KERNELS.join(", ")), None, &[]));
        }
    }
    if cmd == "check" {
        for k in &kernels {
            if !provided.contains(k) || !npu::refk::KERNELS.contains(&k.as_str()) {
                continue;
            }
            match invoke(&bin, &["trace".into(), k.clone(), if a.kernel.is_some() { a.shape.clone() } else { String::new() }]) {
                Ok(lines) => {
                    for l in lines {
                        if l.contains("\"type\":\"diagnostic\"") {
                            errors += 1;
                            out.line(&l);
                        }
                    }
                }
                Err(e) => {
                    errors += 1;
                    out.line(&diag("E0901", "error", &e, None, &[]));
                }
            }
        }
        out.line(&format!("{{\"type\":\"check\",\"ok\":{},\"errors\":{},\"warnings\":{},\"compile_secs\":{}}}", errors == 0, errors, warnings, num((comp.secs * 1000.0).round() / 1000.0)));
        std::process::exit(if errors == 0 { 0 } else { 1 });
    }
    let k = a.kernel.clone().unwrap();
    if errors > 0 {
        if cmd == "run" {
            out.line(&error_line("compile", "the kernel is not provided by the file"));
        }
        std::process::exit(1);
    }
    if cmd == "trace" {
        // undocumented: the raw trace line (static estimate and device model cycles)
        match invoke(&bin, &["trace".into(), k.clone(), a.shape.clone()]) {
            Ok(lines) => lines.iter().for_each(|l| println!("{}", l)),
            Err(e) => println!("{}", error_line("device", &e)),
        }
        return;
    }
    if cmd == "schedule" {
        match invoke(&bin, &["trace".into(), k.clone(), a.shape.clone()]) {
            Ok(lines) => {
                let mut bad = false;
                for l in &lines {
                    if l.contains("\"type\":\"diagnostic\"") {
                        bad = true;
                        out.line(l);
                    }
                }
                if bad {
                    std::process::exit(1);
                }
                let t = lines.iter().filter_map(|l| json::parse(l).ok()).find(|j| j.s("type") == Some("trace"));
                match t {
                    Some(t) => {
                        let bd = t.get("breakdown").cloned().unwrap_or(J::Null);
                        let c = t.get("counts").cloned().unwrap_or(J::Null);
                        let g = |j: &J, k: &str| num(j.n(k).unwrap_or(0.0));
                        out.line(&format!(
                            "{{\"type\":\"schedule\",\"kernel\":{},\"cycles\":{},\"breakdown\":{{\"dma_cycles\":{},\"tensor_cycles\":{},\"vector_cycles\":{},\"switch_cycles\":{}}},\"counts\":{{\"dma_commands\":{},\"passes\":{},\"hbm_read_bytes\":{},\"hbm_write_bytes\":{}}}}}",
                            esc(&k),
                            g(&t, "est_cycles"),
                            g(&bd, "dma_cycles"),
                            g(&bd, "tensor_cycles"),
                            g(&bd, "vector_cycles"),
                            g(&bd, "switch_cycles"),
                            g(&c, "dma_commands"),
                            g(&c, "passes"),
                            g(&c, "hbm_read_bytes"),
                            g(&c, "hbm_write_bytes")
                        ));
                    }
                    None => {
                        out.line(&diag("E0901", "error", "kernel binary produced no trace", None, &[]));
                        std::process::exit(1)
                    }
                }
            }
            Err(e) => {
                out.line(&diag("E0901", "error", &e, None, &[]));
                std::process::exit(1)
            }
        }
        return;
    }
    // ---------------- run
    std::process::exit(run_device(&out, &inst, &bin, &k, &a, &prof));
}

pub struct Rng(pub u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(1);
        npu::hot::unit(npu::hot::mix(self.0))
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
                if f.try_lock().is_ok() {
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

fn run_device(out: &Out, inst: &Install, bin: &Path, k: &str, a: &Args, p: &Profile) -> i32 {
    let seed = a.seed.unwrap();
    let noise_seed = std::env::var("NPU_SIM_NOISE_SEED").ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        t ^ ((std::process::id() as u64) << 32)
    });
    let mut rng = Rng(npu::hot::mix(noise_seed));
    let _slot = acquire_slot(inst, p);
    let t0 = Instant::now();
    let overhead = std::time::Duration::from_secs_f64(p.launch_overhead_ms / 1000.0);
    if rng.next() < p.transient_failure_rate {
        std::thread::sleep(overhead);
        out.line(&error_line("transient", "device busy: link reset, retry"));
        return 3;
    }
    let lines = match invoke(bin, &["exec".into(), k.into(), a.shape.clone(), seed.to_string(), if a.check { "1".into() } else { "0".into() }, if a.poison { "1".into() } else { "0".into() }]) {
        Ok(l) => l,
        Err(e) => {
            out.line(&error_line("device", &e));
            return 1;
        }
    };
    let mut bad = false;
    for l in &lines {
        if l.contains("\"type\":\"diagnostic\"") {
            bad = true;
            out.line(l);
        }
    }
    if bad {
        out.line(&error_line("compile", "the kernel broke a legality rule at run time"));
        return 1;
    }
    let parsed: Vec<J> = lines.iter().filter_map(|l| json::parse(l).ok()).collect();
    let cycles = parsed.iter().find(|j| j.s("type") == Some("trace")).and_then(|j| j.n("dev_cycles")).unwrap_or(0.0);
    let mut tr = t0;
    for r in 0..a.repeat {
        std::thread::sleep(overhead);
        let c = (cycles * noise_factor(&mut rng, p)).round();
        let wall = tr.elapsed().as_secs_f64() * 1000.0;
        tr = Instant::now();
        out.line(&format!("{{\"type\":\"run\",\"kernel\":{},\"seed\":{},\"repeat\":{},\"cycles\":{},\"wall_ms\":{}}}", esc(k), seed, r, num(c), num((wall * 10.0).round() / 10.0)));
    }
    if a.check {
        if let Some(v) = lines.iter().find(|l| l.contains("\"type\":\"verify\"")) {
            out.line(v);
            let passed = json::parse(v).ok().and_then(|j| j.b("passed")).unwrap_or(false);
            return if passed { 0 } else { 1 };
        }
    }
    0
}
