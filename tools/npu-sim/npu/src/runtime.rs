//! What a compiled kernel binary does (its `main`), and the in-process API
//! used by npuc's benchmark and the tests.
use crate::json::{esc, num};
use crate::profile::Profile;
use crate::refk::{self, Role, Shape};
use crate::sim::{Abort, Counts, Ctx, Diag, Mode, Span};
use crate::KernelFn;
use std::cell::RefCell;
use std::io::Write;

pub struct TraceResult {
    pub diags: Vec<Diag>,
    pub est_cycles: f64,
    pub dev_cycles: f64,
    pub hang: bool,
    pub counts: Counts,
    pub breakdown: [f64; 4],
}

#[derive(Clone, Debug)]
pub struct OutStat {
    pub name: String,
    pub elements: u64,
    pub fingerprint: String,
    pub mean_abs: f64,
    pub ref_mean_abs: f64,
}
#[derive(Clone, Debug)]
pub struct Verify {
    pub passed: bool,
    pub max_abs_err: f64,
    pub max_rel_err: f64,
    pub mismatches: u64,
    pub nonfinite: u64,
    pub elements: u64,
    pub outputs: Vec<OutStat>,
}

pub struct ExecResult {
    pub trace: TraceResult,
    pub verify: Option<Verify>,
}

thread_local! {
    static PANIC_AT: RefCell<Option<(String, Span)>> = const { RefCell::new(None) };
    static IN_KERNEL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn install_hook() {
    use std::sync::Once;
    static O: Once = Once::new();
    O.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_KERNEL.with(|k| k.get()) {
                prev(info);
                return;
            }
            if info.payload().downcast_ref::<Abort>().is_some() {
                return;
            }
            let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
                s.to_string()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                "panic".to_string()
            };
            let sp = info.location().map(|l| Span { file: l.file().to_string(), line: l.line(), col: l.column() });
            let mine = PANIC_AT.with(|p| {
                if let Some(sp) = sp {
                    *p.borrow_mut() = Some((msg.clone(), sp));
                    true
                } else {
                    false
                }
            });
            if !mine {
                prev(info);
            }
        }));
    });
}

fn run_kernel(ctx: &mut Ctx, f: &dyn Fn(&mut Ctx)) {
    install_hook();
    PANIC_AT.with(|p| *p.borrow_mut() = None);
    IN_KERNEL.with(|k| k.set(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(ctx)));
    IN_KERNEL.with(|k| k.set(false));
    match r {
        Ok(()) => ctx.finish(),
        Err(e) => {
            if e.downcast_ref::<Abort>().is_none() {
                let (msg, sp) = PANIC_AT.with(|p| p.borrow_mut().take()).unwrap_or(("panic".into(), Span { file: "?".into(), line: 0, col: 0 }));
                ctx.diags.push(Diag::new("E0403", format!("kernel panicked: {}", msg), Some(sp)));
            }
        }
    }
}

fn breakdown(ctx: &Ctx, p: &Profile) -> [f64; 4] {
    let nd = p.clusters as usize * p.engines_per_cluster();
    let ns = p.slices();
    let mx = |a: usize, b: usize| (a..b).map(|e| ctx.est.busy(e)).fold(0.0, f64::max);
    [mx(0, nd), mx(nd, nd + ns), mx(nd + ns, nd + 2 * ns), mx(nd + 2 * ns, nd + 3 * ns)]
}

/// Trace mode: run the kernel without arithmetic; legality + timing.
pub fn trace(kernel: &str, shape: Shape, p: &Profile, f: &dyn Fn(&mut Ctx)) -> TraceResult {
    let mut ctx = Ctx::new(Mode::Trace, p.clone(), kernel, shape, 1);
    run_kernel(&mut ctx, f);
    let b = breakdown(&ctx, p);
    TraceResult { est_cycles: ctx.est.finish(), dev_cycles: ctx.dev.finish(), hang: ctx.hang.is_some(), counts: ctx.counts.clone(), breakdown: b, diags: std::mem::take(&mut ctx.diags) }
}

/// Functional execution on seeded inputs (+ verification with `check`).
/// `poison`: outputs start as NaN; otherwise they hold seed 0's reference
/// outputs (stale leftovers of an earlier run).
pub fn exec(kernel: &str, shape: Shape, p: &Profile, seed: u64, check: bool, poison: bool, f: &dyn Fn(&mut Ctx)) -> ExecResult {
    let mut ctx = Ctx::new(Mode::Exec, p.clone(), kernel, shape, seed);
    for i in 0..ctx.tensors.len() {
        let a = ctx.tensors[i].addr as usize;
        let spec = ctx.tensors[i].spec.clone();
        let n = spec.bytes() as usize;
        refk::gen_tensor_into(kernel, &shape, seed, i, &spec, &mut ctx.hbm[a..a + n]);
    }
    let refs = if check {
        let views: Vec<&[u8]> = ctx.tensors.iter().map(|t| &ctx.hbm[t.addr as usize..(t.addr + t.spec.bytes()) as usize]).collect();
        Some(refk::reference(kernel, &shape, &views))
    } else {
        None
    };
    let leftovers = if poison { None } else { Some(refk::reference(kernel, &shape, &refk::gen_inputs(kernel, &shape, 0))) };
    for i in 0..ctx.tensors.len() {
        let t = &ctx.tensors[i];
        if t.spec.role == Role::Output {
            let a = t.addr as usize;
            let n = t.spec.bytes() as usize;
            let fill: Vec<u8> = match &leftovers {
                Some(l) => l.iter().find(|(ix, _)| *ix == i).map(|(_, b)| b.clone()).unwrap(),
                None => [0xC0u8, 0x7F].iter().cycle().take(n).cloned().collect(), // bf16 NaN
            };
            ctx.hbm[a..a + n].copy_from_slice(&fill);
        }
    }
    run_kernel(&mut ctx, f);
    let b = breakdown(&ctx, p);
    let trace = TraceResult { est_cycles: ctx.est.finish(), dev_cycles: ctx.dev.finish(), hang: ctx.hang.is_some(), counts: ctx.counts.clone(), breakdown: b, diags: std::mem::take(&mut ctx.diags) };
    let verify = match refs {
        Some(r) if trace.diags.is_empty() => Some(compare(kernel, &ctx, &r)),
        _ => None,
    };
    ExecResult { trace, verify }
}

fn compare(kernel: &str, ctx: &Ctx, refs: &[(usize, Vec<u8>)]) -> Verify {
    let atol = refk::tolerance(kernel);
    let mut v = Verify { passed: true, max_abs_err: 0.0, max_rel_err: 0.0, mismatches: 0, nonfinite: 0, elements: 0, outputs: vec![] };
    for (ix, rb) in refs {
        let t = &ctx.tensors[*ix];
        let a = t.addr as usize;
        let got_b = &ctx.hbm[a..a + rb.len()];
        let got = refk::bf16s(got_b);
        let exp = refk::bf16s(rb);
        let (mut sa, mut se) = (0f64, 0f64);
        for (g, e) in got.iter().zip(&exp) {
            v.elements += 1;
            if !g.is_finite() {
                v.nonfinite += 1;
                v.mismatches += 1;
                continue;
            }
            sa += g.abs() as f64;
            se += e.abs() as f64;
            let d = (g - e).abs();
            v.max_abs_err = v.max_abs_err.max(d as f64);
            if e.abs() >= atol {
                v.max_rel_err = v.max_rel_err.max((d / e.abs()) as f64);
            }
            if d > atol + refk::RTOL * e.abs() {
                v.mismatches += 1;
            }
        }
        let n = got.len().max(1) as f64;
        v.outputs.push(OutStat { name: t.spec.name.to_string(), elements: got.len() as u64, fingerprint: crate::hot::fingerprint(got_b), mean_abs: sa / n, ref_mean_abs: se / n });
    }
    v.passed = v.mismatches == 0 && v.nonfinite == 0;
    v
}

pub fn diag_json(d: &Diag) -> String {
    let span = match &d.span {
        Some(s) => format!("{{\"file\":{},\"line\":{},\"column\":{}}}", esc(&s.file), s.line, s.col),
        None => "null".into(),
    };
    let qs: Vec<String> = d
        .quantities
        .iter()
        .map(|(q, v, l)| match l {
            Some(l) => format!("{{\"quantity\":{},\"value\":{},\"limit\":{}}}", esc(q), num(*v), num(*l)),
            None => format!("{{\"quantity\":{},\"value\":{}}}", esc(q), num(*v)),
        })
        .collect();
    let notes: Vec<String> = d.notes.iter().map(|n| esc(n)).collect();
    format!(
        "{{\"type\":\"diagnostic\",\"level\":{},\"code\":{},\"message\":{},\"span\":{},\"quantities\":[{}],\"notes\":[{}]}}",
        esc(d.level),
        esc(d.code),
        esc(&d.msg),
        span,
        qs.join(","),
        notes.join(",")
    )
}

pub fn verify_json(kernel: &str, seed: u64, v: &Verify) -> String {
    let outs: Vec<String> = v
        .outputs
        .iter()
        .map(|o| format!("{{\"name\":{},\"elements\":{},\"fingerprint\":{},\"mean_abs\":{},\"ref_mean_abs\":{}}}", esc(&o.name), o.elements, esc(&o.fingerprint), num(o.mean_abs), num(o.ref_mean_abs)))
        .collect();
    format!(
        "{{\"type\":\"verify\",\"kernel\":{},\"seed\":{},\"passed\":{},\"max_abs_err\":{},\"max_rel_err\":{},\"mismatches\":{},\"nonfinite\":{},\"elements\":{},\"outputs\":[{}]}}",
        esc(kernel),
        seed,
        v.passed,
        num(v.max_abs_err),
        num(v.max_rel_err),
        v.mismatches,
        v.nonfinite,
        v.elements,
        outs.join(",")
    )
}

pub fn trace_json(kernel: &str, t: &TraceResult) -> String {
    let c = &t.counts;
    format!(
        "{{\"type\":\"trace\",\"kernel\":{},\"est_cycles\":{},\"dev_cycles\":{},\"hang\":{},\"breakdown\":{{\"dma_cycles\":{},\"tensor_cycles\":{},\"vector_cycles\":{},\"switch_cycles\":{}}},\"counts\":{{\"dma_commands\":{},\"passes\":{},\"vector_ops\":{},\"switch_copies\":{},\"hbm_read_bytes\":{},\"hbm_write_bytes\":{}}}}}",
        esc(kernel),
        num(t.est_cycles.round()),
        num(t.dev_cycles.round()),
        t.hang,
        num(t.breakdown[0].round()),
        num(t.breakdown[1].round()),
        num(t.breakdown[2].round()),
        num(t.breakdown[3].round()),
        c.dma_commands,
        c.passes,
        c.vector_ops,
        c.switch_copies,
        c.hbm_read_bytes,
        c.hbm_write_bytes
    )
}

/// Parse `k=v,k=v` shape overrides for a kernel.
pub fn parse_shape(kernel: &str, spec: &str) -> Result<Shape, String> {
    let mut s = Shape::default();
    for kv in spec.split(',').filter(|x| !x.trim().is_empty()) {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("bad --shape item `{}` (expected key=value)", kv))?;
        let v: u32 = v.trim().parse().map_err(|_| format!("bad --shape value `{}`", v))?;
        s.set(kernel, k.trim(), v)?;
    }
    s.validate(kernel)?;
    Ok(s)
}

/// `main` of a compiled kernel file. Internal interface used by npuc:
///   BIN list
///   BIN trace KERNEL SHAPE OUTFILE
///   BIN exec KERNEL SHAPE SEED CHECK(0|1) POISON(0|1) OUTFILE
pub fn main(kernels: &[(&'static str, KernelFn)]) {
    let a: Vec<String> = std::env::args().collect();
    let fail = |m: String| -> ! {
        eprintln!("npu kernel binary: {}", m);
        std::process::exit(9)
    };
    if a.len() < 2 {
        fail("this is a compiled npu-sim kernel; run it through npuc".into());
    }
    let p = Profile::from_env().unwrap_or_else(|e| fail(e));
    match a[1].as_str() {
        "list" => {
            for (n, _) in kernels {
                println!("{}", n);
            }
        }
        "trace" | "exec" => {
            let k = a.get(2).cloned().unwrap_or_default();
            let f = match kernels.iter().find(|(n, _)| *n == k) {
                Some((_, f)) => *f,
                None => fail(format!("kernel {} not provided", k)),
            };
            let shape = parse_shape(&k, a.get(3).map(|s| s.as_str()).unwrap_or("")).unwrap_or_else(|e| fail(e));
            let mut lines = vec![];
            let outfile;
            if a[1] == "trace" {
                outfile = a.get(4).cloned().unwrap_or_else(|| fail("missing outfile".into()));
                let t = trace(&k, shape, &p, &f);
                for d in &t.diags {
                    lines.push(diag_json(d));
                }
                lines.push(trace_json(&k, &t));
            } else {
                let seed: u64 = a.get(4).and_then(|s| s.parse().ok()).unwrap_or_else(|| fail("bad seed".into()));
                let check = a.get(5).map(|s| s == "1").unwrap_or(false);
                let poison = a.get(6).map(|s| s != "0").unwrap_or(true);
                outfile = a.get(7).cloned().unwrap_or_else(|| fail("missing outfile".into()));
                let r = exec(&k, shape, &p, seed, check, poison, &f);
                for d in &r.trace.diags {
                    lines.push(diag_json(d));
                }
                if r.trace.diags.is_empty() && r.trace.hang {
                    // the cluster hangs: nothing more happens until someone kills us
                    let parent = std::os::unix::process::parent_id();
                    loop {
                        std::thread::sleep(std::time::Duration::from_millis(500));
                        if std::os::unix::process::parent_id() != parent {
                            std::process::exit(137);
                        }
                    }
                }
                lines.push(trace_json(&k, &r.trace));
                if let Some(v) = &r.verify {
                    lines.push(verify_json(&k, seed, v));
                }
            }
            let mut fh = std::fs::File::create(&outfile).unwrap_or_else(|e| fail(format!("cannot write {}: {}", outfile, e)));
            for l in lines {
                let _ = writeln!(fh, "{}", l);
            }
        }
        other => fail(format!("unknown mode {}", other)),
    }
}
