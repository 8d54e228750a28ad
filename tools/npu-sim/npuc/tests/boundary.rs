//! The device boundary, from outside: kernels that try to reach past the program they build
//! (spoofed output, the seed, npuc's file descriptors, the compile cache, a hang) get nothing
//! that changes what npuc reports.
use std::path::{Path, PathBuf};
use std::process::Command;

/// npuc as built; when the DSL library is not beside it (`cargo test -p npuc` builds it only
/// under deps/), an install layout (bin/npuc, lib/libnpu.rlib) of its own in the temp dir.
fn npuc() -> PathBuf {
    static NPUC: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut npuc = NPUC.lock().unwrap_or_else(|e| e.into_inner());
    npuc.get_or_insert_with(install_layout).clone()
}

fn install_layout() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_npuc"));
    let dir = exe.parent().unwrap();
    if dir.join("libnpu.rlib").exists() {
        return exe;
    }
    let mut rlibs: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir.join("deps"))
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.starts_with("libnpu-") && n.ends_with(".rlib")
        })
        .map(|e| (e.metadata().unwrap().modified().unwrap(), e.path()))
        .collect();
    rlibs.sort();
    let rlib = rlibs.last().expect("libnpu-*.rlib under deps/").1.clone();
    let root = std::env::temp_dir().join(format!("npuc-boundary-install-{}", std::process::id()));
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("lib")).unwrap();
    let bin = root.join("bin/npuc");
    std::fs::copy(&exe, root.join("bin/npuc.tmp")).unwrap();
    std::fs::rename(root.join("bin/npuc.tmp"), &bin).unwrap();
    std::fs::copy(&rlib, root.join("lib/libnpu.rlib")).unwrap();
    bin
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("npuc-boundary-{}-{}", name, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const BASELINE_AO: &str = include_str!("../../../../dsl_templates/npu-sim/baseline_attention_output.rs");

/// The attention_output baseline with `extra` run at the start of the kernel function.
fn baseline_with(extra: &str) -> String {
    let marker = "fn ao(k: &mut Ctx) {";
    assert!(BASELINE_AO.contains(marker), "the baseline's entry point moved");
    BASELINE_AO.replacen(marker, &format!("{}\n{}\n", marker, extra), 1)
}

struct Out {
    code: i32,
    lines: Vec<String>,
}

fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut c = Command::new(npuc());
    c.args(args).args(["--message-format", "json", "--cache-dir"]).arg(dir.join("cache")).env("TMPDIR", dir).env("NPU_SIM_NOISE_SEED", "5");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    Out { code: o.status.code().unwrap_or(-1), lines: String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect() }
}

fn write(dir: &Path, name: &str, src: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, src).unwrap();
    p.display().to_string()
}

fn cycles(o: &Out) -> Vec<f64> {
    o.lines
        .iter()
        .filter(|l| l.contains("\"type\":\"run\""))
        .map(|l| {
            let i = l.find("\"cycles\":").unwrap() + 9;
            l[i..].split(|c| c == ',' || c == '}').next().unwrap().parse().unwrap()
        })
        .collect()
}

fn compile(dir: &Path, f: &str) {
    let o = run(dir, &["compile", f], &[]);
    assert_eq!(o.code, 0, "compile failed: {:?}", o.lines);
}

#[test]
fn spoofed_output_and_forged_results_are_not_parsed() {
    let d = scratch("spoof");
    let honest = write(&d, "honest.rs", BASELINE_AO);
    let spoof = write(
        &d,
        "spoof.rs",
        &baseline_with(
            r#"    println!("{{\"type\":\"run\",\"kernel\":\"attention_output\",\"seed\":1,\"repeat\":0,\"cycles\":1,\"wall_ms\":1}}");
    println!("{{\"type\":\"verify\",\"kernel\":\"attention_output\",\"seed\":1,\"passed\":true}}");
    eprintln!("{{\"type\":\"run\",\"kernel\":\"attention_output\",\"seed\":1,\"repeat\":0,\"cycles\":1,\"wall_ms\":1}}");
    for dir in [std::env::temp_dir(), std::path::PathBuf::from("/tmp"), std::path::PathBuf::from(".")] {
        let _ = std::fs::write(dir.join("npuc-result.out"), "{\"type\":\"run\",\"cycles\":1}\n");
    }"#,
        ),
    );
    compile(&d, &honest);
    compile(&d, &spoof);
    let a = run(&d, &["run", &honest, "--kernel", "attention_output", "--seed", "9", "--check"], &[]);
    let b = run(&d, &["run", &spoof, "--kernel", "attention_output", "--seed", "9", "--check"], &[]);
    assert_eq!(a.code, 0, "{:?}", a.lines);
    // what the host code prints is discarded: the launch reports the device's own cycles
    assert_eq!(b.code, 0, "{:?}", b.lines);
    assert!(b.lines.iter().all(|l| !l.contains("\"cycles\":1,")), "{:?}", b.lines);
    assert_eq!(b.lines.iter().filter(|l| l.contains("\"type\":\"run\"")).count(), 1, "{:?}", b.lines);
    let (ca, cb) = (cycles(&a)[0], cycles(&b)[0]);
    assert!((cb / ca - 1.0).abs() < 0.1, "spoofing kernel {} vs honest {}", cb, ca);
}

#[test]
fn the_host_code_never_sees_the_seed() {
    let d = scratch("seed");
    let marker = d.join("seen.txt");
    let src = baseline_with(&format!(
        r#"    let mut seen = String::new();
    for a in std::env::args() {{ seen.push_str(&a); seen.push(' '); }}
    for (k, v) in std::env::vars() {{ seen.push_str(&format!("{{}}={{}} ", k, v)); }}
    if let Ok(ppid) = std::fs::read_to_string("/proc/self/stat") {{
        let ppid = ppid.split(' ').nth(3).unwrap_or("0").to_string();
        seen.push_str(&std::fs::read_to_string(format!("/proc/{{}}/cmdline", ppid)).unwrap_or_default().replace('\0', " "));
        seen.push_str(&std::fs::read_to_string(format!("/proc/{{}}/environ", ppid)).unwrap_or_else(|e| format!("environ: {{}}", e)).replace('\0', " "));
        seen.push_str(&match std::fs::OpenOptions::new().write(true).open(format!("/proc/{{}}/fd/1", ppid)) {{
            Ok(mut f) => {{ use std::io::Write; let _ = writeln!(f, "{{{{\"type\":\"run\",\"kernel\":\"attention_output\",\"seed\":1,\"repeat\":0,\"cycles\":2,\"wall_ms\":1}}}}"); "fd1: WRITTEN".to_string() }}
            Err(e) => format!("fd1: {{}}", e),
        }});
    }}
    let _ = std::fs::write({:?}, seen);"#,
        marker.display().to_string()
    ));
    let f = write(&d, "seed.rs", &src);
    compile(&d, &f);
    let o = run(&d, &["run", &f, "--kernel", "attention_output", "--seed", "987654321", "--check"], &[]);
    assert_eq!(o.code, 0, "{:?}", o.lines);
    let seen = std::fs::read_to_string(&marker).expect("the kernel ran and wrote what it saw");
    assert!(!seen.contains("987654321"), "the host code saw the seed: {}", seen);
    assert!(!seen.contains("fd1: WRITTEN"), "the host code wrote onto npuc's stdout: {}", seen);
    assert!(o.lines.iter().all(|l| !l.contains("\"cycles\":2,")), "{:?}", o.lines);
    assert!(cycles(&o)[0] > 100_000.0);
}

#[test]
fn a_tampered_cache_entry_is_caught_named_and_evicted() {
    let d = scratch("cache");
    let f = write(&d, "k.rs", BASELINE_AO);
    let o = run(&d, &["compile", &f], &[]);
    assert_eq!(o.code, 0);
    let line = o.lines.iter().find(|l| l.contains("\"type\":\"compile\"")).unwrap();
    let i = line.find("\"artifact\":\"").unwrap() + 12;
    let entry = PathBuf::from(&line[i..i + line[i..].find('"').unwrap()]);
    let mut bytes = std::fs::read(&entry).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&entry, &bytes).unwrap();
    let r = run(&d, &["run", &f, "--kernel", "attention_output", "--seed", "1", "--check"], &[]);
    assert_eq!(r.code, 1);
    let err = r.lines.iter().find(|l| l.contains("\"kind\":\"cache\"")).expect("a cache error line");
    assert!(err.contains(&entry.display().to_string()), "{}", err);
    assert!(!entry.exists(), "the tampered entry was evicted");
    // compiled again, it runs
    compile(&d, &f);
    assert_eq!(run(&d, &["run", &f, "--kernel", "attention_output", "--seed", "1", "--check"], &[]).code, 0);
}

#[test]
fn only_compile_writes_the_cache_and_the_cache_is_bounded() {
    let d = scratch("bound");
    let f = write(&d, "k.rs", BASELINE_AO);
    // without compile, run compiles privately and leaves the cache empty
    assert_eq!(run(&d, &["run", &f, "--kernel", "attention_output", "--seed", "1", "--check"], &[]).code, 0);
    let entries = |d: &Path| std::fs::read_dir(d.join("cache")).map(|r| r.flatten().flat_map(|e| std::fs::read_dir(e.path()).unwrap().flatten().map(|x| x.file_name().to_string_lossy().to_string()).collect::<Vec<_>>()).filter(|n| !n.contains('.')).count()).unwrap_or(0);
    assert_eq!(entries(&d), 0);
    for i in 0..3 {
        let g = write(&d, &format!("k{}.rs", i), &format!("{}\n// variant {}\n", BASELINE_AO, i));
        let o = run(&d, &["compile", &g], &[("NPUC_CACHE_MAX_ENTRIES", "2")]);
        assert_eq!(o.code, 0);
    }
    assert_eq!(entries(&d), 2);
}

#[test]
fn a_hanging_host_code_is_ended_with_a_diagnostic() {
    let d = scratch("hang");
    let f = write(&d, "hang.rs", &baseline_with("    loop { std::hint::spin_loop(); }"));
    compile(&d, &f);
    let t0 = std::time::Instant::now();
    let o = run(&d, &["run", &f, "--kernel", "attention_output", "--seed", "1", "--check"], &[("NPUC_HOST_TIMEOUT_SECS", "2")]);
    assert!(t0.elapsed().as_secs_f64() < 20.0);
    assert_eq!(o.code, 1);
    assert!(o.lines.iter().any(|l| l.contains("E0403") && l.contains("did not finish")), "{:?}", o.lines);
}

#[test]
fn host_code_that_dies_midway_fails_the_check() {
    let d = scratch("abort");
    let f = write(&d, "abort.rs", &baseline_with("    let _ = k.tensor(\"attn\");\n    std::process::abort();"));
    compile(&d, &f);
    let o = run(&d, &["check", &f], &[]);
    assert_eq!(o.code, 1);
    assert!(o.lines.iter().any(|l| l.contains("E0403")), "{:?}", o.lines);
}

#[test]
fn a_rewritten_warnings_file_is_caught_too() {
    let d = scratch("diag");
    let f = write(&d, "k.rs", BASELINE_AO);
    compile(&d, &f);
    let cache = std::fs::read_dir(d.join("cache")).unwrap().next().unwrap().unwrap().path();
    let diag = std::fs::read_dir(&cache).unwrap().flatten().map(|e| e.path()).find(|p| p.to_string_lossy().ends_with(".diag")).unwrap();
    std::fs::write(&diag, "{\"type\":\"run\",\"kernel\":\"attention_output\",\"seed\":1,\"repeat\":0,\"cycles\":1,\"wall_ms\":1}\n").unwrap();
    let r = run(&d, &["check", &f], &[]);
    assert_eq!(r.code, 1);
    assert!(r.lines.iter().any(|l| l.contains("\"kind\":\"cache\"") && l.contains(".diag")), "{:?}", r.lines);
    assert!(r.lines.iter().all(|l| !l.contains("\"cycles\":1,")), "{:?}", r.lines);
}

#[test]
fn nothing_the_host_code_starts_outlives_the_launch() {
    let d = scratch("daemon");
    let marker = d.join("daemon-alive");
    // a shell daemon in a new session (setsid), so it leaves the kernel's process group
    let f = write(
        &d,
        "daemon.rs",
        &baseline_with(&format!(
            "    let _ = std::process::Command::new(\"/bin/sh\").arg(\"-c\").arg(\"setsid /bin/sh -c 'sleep 3; echo alive > {}' &\").status();",
            marker.display()
        )),
    );
    compile(&d, &f);
    let o = run(&d, &["run", &f, "--kernel", "attention_output", "--seed", "1", "--check"], &[]);
    assert_eq!(o.code, 0, "{:?}", o.lines);
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert!(!marker.exists(), "a daemon started by the host code outlived the launch");
}
