//! Compiling kernel files, and the compile cache: content-addressed entries (`k<hash>`: the
//! binary, `.sha256`: its hash recorded when it was compiled, `.diag`: rustc's warnings),
//! written only by `npuc compile`, checked before every use, bounded in size.
use crate::{diag, Install};
use npu_device::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub struct Compiled {
    pub bin: Option<PathBuf>,
    pub diags: Vec<String>,
    pub errors: usize,
    pub warnings: usize,
    pub secs: f64,
    pub sha256: Option<String>,
    /// the binary lives in a private directory of this call (remove it after use)
    pub private: Option<PathBuf>,
}

/// A cache entry that failed its integrity check.
pub struct Tampered {
    pub entry: PathBuf,
    pub message: String,
}

pub enum CompileError {
    Io(String),
    Cache(Tampered),
}

/// May this call write the cache?
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `npuc compile`: insert, evict a tampered entry, bound the size
    Write,
    /// every other command: read and check; on a miss compile privately
    Read,
}

fn fnv(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The cache entry name of a kernel file: release, source bytes, path, the DSL library.
fn entry_name(inst: &Install, file: &str, src: &[u8]) -> Result<String, String> {
    let meta = std::fs::metadata(&inst.rlib).map_err(|e| format!("{}: {}", inst.rlib.display(), e))?;
    let mut h = fnv(npu::RELEASE.as_bytes(), 0xcbf2_9ce4_8422_2325);
    h = fnv(src, h);
    h = fnv(file.as_bytes(), h);
    h = fnv(&meta.len().to_le_bytes(), h);
    if let Ok(m) = meta.modified() {
        if let Ok(d) = m.duration_since(std::time::UNIX_EPOCH) {
            h = fnv(&d.as_nanos().to_le_bytes(), h);
        }
    }
    Ok(format!("k{:016x}", h))
}

fn sidecar(bin: &Path, ext: &str) -> PathBuf {
    let mut s = bin.as_os_str().to_os_string();
    s.push(ext);
    PathBuf::from(s)
}

fn evict(bin: &Path) {
    for p in [bin.to_path_buf(), sidecar(bin, ".sha256"), sidecar(bin, ".diag")] {
        let _ = std::fs::remove_file(p);
    }
}

/// Check a cached binary (and its warnings file) against the hashes recorded when it was
/// compiled: `.sha256` holds the binary's hash and, on a second line, the `.diag` file's.
pub fn verify_entry(bin: &Path) -> Result<String, String> {
    let want = std::fs::read_to_string(sidecar(bin, ".sha256")).map_err(|_| "its recorded hash (.sha256) is missing".to_string())?;
    let mut lines = want.lines();
    let want_bin = lines.next().unwrap_or("").trim().to_string();
    let want_diag = lines.next().unwrap_or("").trim().to_string();
    let data = std::fs::read(bin).map_err(|e| format!("cannot read it: {}", e))?;
    let got = crate::sha256::hex(&data);
    if got != want_bin {
        return Err(format!("its sha256 {} differs from the {} recorded when it was compiled", &got[..16], &want_bin[..want_bin.len().min(16)]));
    }
    let diag = std::fs::read(sidecar(bin, ".diag")).unwrap_or_default();
    if crate::sha256::hex(&diag) != want_diag {
        return Err("its warnings file (.diag) changed after it was compiled".into());
    }
    Ok(got)
}

/// A cached diagnostic line, parsed and written again (None if it is not one).
fn reencode_diag(line: &str) -> Option<String> {
    let j = json::parse(line).ok()?;
    if j.s("type") != Some("diagnostic") {
        return None;
    }
    let level = if j.s("level") == Some("error") { "error" } else { "warning" };
    let span = j.get("span").and_then(|s| Some((s.s("file")?.to_string(), s.n("line")? as u64, s.n("column")? as u64)));
    let notes: Vec<String> = j.arr("notes").iter().filter_map(|n| if let json::J::Str(s) = n { Some(s.clone()) } else { None }).collect();
    let code = match j.s("code")? {
        "E0002" => "E0002",
        "E0902" => "E0902",
        _ => return None,
    };
    Some(diag(code, level, j.s("message").unwrap_or(""), span, &notes))
}

/// Keep at most `max` entries (least recently used go first).
fn bound(cache: &Path, max: usize) {
    let mut bins: Vec<(std::time::SystemTime, PathBuf)> = match std::fs::read_dir(cache) {
        Ok(rd) => rd
            .flatten()
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.len() == 17 && n.starts_with('k') && !n.contains('.')
            })
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect(),
        Err(_) => return,
    };
    if bins.len() <= max {
        return;
    }
    bins.sort();
    let n = bins.len() - max;
    for (_, p) in bins.into_iter().take(n) {
        evict(&p);
    }
}

fn max_entries() -> usize {
    std::env::var("NPUC_CACHE_MAX_ENTRIES").ok().and_then(|s| s.parse().ok()).filter(|&n| n > 0).unwrap_or(256)
}

fn private_dir() -> Result<PathBuf, String> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let base = std::env::var("TMPDIR").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "/tmp".into());
    let d = PathBuf::from(base).join(format!("npuc-build-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    std::fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {}", d.display(), e))?;
    Ok(d)
}

/// Compile `file`, through the cache in `cache`.
pub fn compile(inst: &Install, file: &str, cache: &Path, mode: Mode) -> Result<Compiled, CompileError> {
    let t0 = Instant::now();
    let src = std::fs::read(file).map_err(|e| CompileError::Io(format!("cannot read {}: {}", file, e)))?;
    let name = entry_name(inst, file, &src).map_err(CompileError::Io)?;
    let bin = cache.join(&name);
    let mut notes: Vec<String> = vec![];
    if bin.exists() {
        match verify_entry(&bin) {
            Ok(sha) => {
                if mode == Mode::Write {
                    // most recently used: keep it through the bound
                    let _ = std::fs::File::options().append(true).open(&bin).and_then(|f| crate::sys::touch_modified(&f));
                }
                // only diagnostic lines, re-encoded: the file never speaks for npuc verbatim
                let diags: Vec<String> = std::fs::read_to_string(sidecar(&bin, ".diag"))
                    .map(|t| t.lines().filter_map(reencode_diag).collect())
                    .unwrap_or_default();
                let w = diags.len();
                return Ok(Compiled { bin: Some(bin), diags, errors: 0, warnings: w, secs: t0.elapsed().as_secs_f64(), sha256: Some(sha), private: None });
            }
            Err(why) => {
                let message = format!("cached binary {} failed its integrity check ({}); evicted", bin.display(), why);
                if mode == Mode::Read {
                    evict(&bin);
                    return Err(CompileError::Cache(Tampered { entry: bin, message }));
                }
                evict(&bin);
                notes.push(diag("E0902", "warning", &message, None, &["help: the entry was compiled again".into()]));
            }
        }
    }
    let (dir, private) = match mode {
        Mode::Write => {
            std::fs::create_dir_all(cache).map_err(|e| CompileError::Io(format!("cannot create cache dir {}: {}", cache.display(), e)))?;
            (cache.to_path_buf(), None)
        }
        Mode::Read => {
            let d = private_dir().map_err(CompileError::Io)?;
            (d.clone(), Some(d))
        }
    };
    let target = dir.join(&name);
    let tmp = dir.join(format!("{}.tmp{}", name, std::process::id()));
    let out = Command::new(&inst.rustc)
        .args(["--edition", "2021", "--crate-type", "bin", "--crate-name", "npu_kernel", "-C", "opt-level=0", "-C", "debuginfo=0", "-C", "strip=symbols", "--error-format=json", "-A", "dead_code"])
        .arg("--extern")
        .arg(format!("npu={}", inst.rlib.display()))
        .arg("-L")
        .arg(format!("dependency={}", inst.lib_dir.display()))
        .arg("-o")
        .arg(&tmp)
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| CompileError::Io(format!("cannot run rustc {}: {}", inst.rustc.display(), e)))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut diags = notes;
    let (mut errors, mut warnings) = (0, diags.len());
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
        let mut dnotes: Vec<String> = vec![];
        if !rcode.is_empty() {
            dnotes.push(format!("rustc {}", rcode));
        }
        for c in j.arr("children") {
            if let Some(m) = c.s("message") {
                dnotes.push(format!("{}: {}", c.s("level").unwrap_or("note"), m));
            }
        }
        if level == "error" {
            errors += 1;
        } else {
            warnings += 1;
        }
        match crate::renamed(&msg) {
            Some((old, new)) if level == "error" => {
                let msg = format!("`{}` was renamed to `{}` in npuc {}; update the kernel", old, new, npu::RELEASE);
                // a fix-it where the primary span is exactly the old name in this file
                let fix = j.arr("spans").iter().find(|s| s.b("is_primary") == Some(true)).and_then(|s| {
                    let (b0, b1) = (s.n("byte_start")? as usize, s.n("byte_end")? as usize);
                    let named = s.s("file_name")?;
                    if named != file || src.get(b0..b1) != Some(old.as_bytes()) {
                        return None;
                    }
                    Some(crate::FixIt { file: named.to_string(), byte_start: b0 as u64, byte_end: b1 as u64, line: s.n("line_start")? as u64, column_start: s.n("column_start")? as u64, column_end: s.n("column_end")? as u64, replacement: new.to_string() })
                });
                match fix {
                    Some(f) => diags.push(crate::diag_fix("E0401", level, &msg, span, &dnotes, &format!("use `{}`", new), &[f])),
                    None => diags.push(diag("E0401", level, &msg, span, &dnotes)),
                }
            }
            _ => diags.push(diag(if level == "error" { "E0001" } else { "E0002" }, level, &msg, span, &dnotes)),
        }
    }
    if out.status.success() && errors == 0 {
        let data = std::fs::read(&tmp).map_err(|e| CompileError::Io(format!("cannot read the compiled binary: {}", e)))?;
        let sha = crate::sha256::hex(&data);
        let io = |e: std::io::Error| CompileError::Io(format!("cache {}: {}", dir.display(), e));
        let diag_text = diags.join("\n") + if diags.is_empty() { "" } else { "\n" };
        std::fs::write(sidecar(&target, ".diag"), &diag_text).map_err(io)?;
        let sc_tmp = sidecar(&tmp, ".sha256");
        std::fs::write(&sc_tmp, format!("{}\n{}\n", sha, crate::sha256::hex(diag_text.as_bytes()))).map_err(io)?;
        std::fs::rename(&tmp, &target).map_err(io)?;
        std::fs::rename(&sc_tmp, sidecar(&target, ".sha256")).map_err(io)?;
        if mode == Mode::Write {
            bound(cache, max_entries());
        }
        Ok(Compiled { bin: Some(target), diags, errors, warnings, secs: t0.elapsed().as_secs_f64(), sha256: Some(sha), private })
    } else {
        let _ = std::fs::remove_file(&tmp);
        if let Some(p) = &private {
            let _ = std::fs::remove_dir_all(p);
        }
        if errors == 0 {
            errors = 1;
            diags.push(diag("E0001", "error", &format!("rustc failed: {}", stderr.lines().last().unwrap_or("")), None, &[]));
        }
        Ok(Compiled { bin: None, diags, errors, warnings, secs: t0.elapsed().as_secs_f64(), sha256: None, private: None })
    }
}
