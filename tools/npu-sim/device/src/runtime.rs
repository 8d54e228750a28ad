//! The device side of a launch: replay a kernel's program on the simulated chip (legality,
//! timing and, on seeded inputs, the functional run and the check against the reference).
//! The program comes from the kernel's host code (`npu::host`); nothing else of the kernel
//! runs here.
use crate::json::{esc, num};
use crate::profile::Profile;
use crate::refk::{self, Role, Shape};
use crate::sim::{hw_of, launch_pos, Abort, Counts, Ctx, Diag, Mode, Span, Token};
use npu::program::{Op, Program};
use npu::Launch;

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

/// The launch the host code is told about: kernel, shape, position, public facts.
pub fn launch_for(kernel: &str, shape: Shape, p: &Profile, seed: u64) -> Launch {
    Launch { kernel: kernel.to_string(), shape, pos: launch_pos(kernel, &shape, seed), hw: hw_of(p) }
}

/// The device stops at a legality error by unwinding with `Abort`; that is not a crash, so the
/// panic hook stays silent for it (other panics are reported as before).
fn quiet_aborts() {
    use std::sync::Once;
    static O: Once = Once::new();
    O.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<Abort>().is_none() {
                prev(info);
            }
        }));
    });
}

/// Replay `prog` on `ctx`: every op through the device's own checks; a legality error in exec
/// mode ends the replay (as it stops the device).
pub fn replay(ctx: &mut Ctx, prog: &Program) {
    quiet_aborts();
    let spans: Vec<Span> = prog.files.iter().map(|f| Span::new(f, 0, 0)).collect();
    let at = |sp: &npu::program::SpanRef| -> Span {
        let mut s = spans.get(sp.file as usize).cloned().unwrap_or_else(|| Span::new("?", 0, 0));
        s.line = sp.line;
        s.col = sp.col;
        s
    };
    let mut toks: Vec<Token> = Vec::with_capacity(prog.ops.len());
    let mut panicked = false;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (op, sr) in &prog.ops {
            let l = at(sr);
            let t = match op {
                Op::BadTensor { name } => {
                    let _ = ctx.tensor(&l, name);
                    None
                }
                Op::HbmAlloc { bytes } => {
                    ctx.hbm_alloc(*bytes);
                    None
                }
                Op::DmAlloc { slice, bytes } => {
                    ctx.dm_alloc(&l, *slice, *bytes);
                    None
                }
                Op::VrfAlloc { slice, len } => {
                    ctx.vrf_alloc(&l, *slice, *len);
                    None
                }
                Op::TrfAlloc { slice, len } => {
                    ctx.trf_alloc(&l, *slice, *len);
                    None
                }
                Op::After { deps } => {
                    let d: Vec<&Token> = deps.iter().map(|i| &toks[*i]).collect();
                    ctx.after(&d);
                    None
                }
                Op::Wait { token } => {
                    ctx.wait(toks[*token]);
                    None
                }
                Op::Copy { eng, src, dst, bytes, packet } => Some(ctx.copy(&l, *eng, *src, *dst, *bytes, *packet)),
                Op::Dma { eng, src, dst, packet, seq } => Some(ctx.dma(&l, *eng, *src, *dst, *packet, seq)),
                Op::Switch { src, dst, bytes } => Some(ctx.switch_copy(&l, *src, *dst, *bytes)),
                Op::Pass(p) => Some(ctx.pass(&l, p)),
                Op::Vload { src, dt, dst } => Some(ctx.vload(&l, *src, *dt, *dst)),
                Op::Vstore { src, dst, dt } => Some(ctx.vstore(&l, *src, *dst, *dt)),
                Op::ToTrf { src, dst } => Some(ctx.to_trf(&l, *src, *dst)),
                Op::Vsumsq { src, dst, accumulate } => Some(ctx.vsumsq(&l, *src, *dst, *accumulate)),
                Op::Vrms { src, sumsq, n, eps, dst } => Some(ctx.vrms(&l, *src, *sumsq, *n, *eps, *dst)),
                Op::Vbin { kind, a, b, dst } => Some(match kind {
                    0 => ctx.vmul(&l, *a, *b, *dst),
                    1 => ctx.vadd(&l, *a, *b, *dst),
                    2 => ctx.vmuls(&l, *a, *b, *dst),
                    _ => ctx.vgeglu(&l, *a, *b, *dst),
                }),
                Op::Vcopy { src, dst } => Some(ctx.vcopy(&l, *src, *dst)),
                Op::Vfill { dst, value } => Some(ctx.vfill(&l, *dst, *value)),
                Op::Vrope { src, dst, pos, head_dim, theta } => Some(ctx.vrope(&l, *src, *dst, *pos, *head_dim, *theta)),
                Op::Panic { msg } => {
                    ctx.diags.push(Diag::new("E0403", format!("kernel panicked: {}", msg), Some(l)));
                    panicked = true;
                    break;
                }
            };
            if let Some(t) = t {
                toks.push(t);
            }
        }
    }));
    match r {
        Ok(()) if panicked => {}
        Ok(()) if !prog.complete => {
            ctx.diags.push(Diag::new("E0403", "the kernel's host code stopped before it finished its program", None));
        }
        Ok(()) => ctx.finish(),
        Err(e) => {
            if e.downcast_ref::<Abort>().is_none() {
                std::panic::resume_unwind(e);
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

/// Trace mode: the program without arithmetic; legality + timing.
pub fn trace_program(kernel: &str, shape: Shape, p: &Profile, prog: &Program) -> TraceResult {
    let mut ctx = Ctx::new(Mode::Trace, p.clone(), kernel, shape, TRACE_SEED);
    replay(&mut ctx, prog);
    let b = breakdown(&ctx, p);
    TraceResult { est_cycles: ctx.est.finish(), dev_cycles: ctx.dev.finish(), hang: ctx.hang.is_some(), counts: ctx.counts.clone(), breakdown: b, diags: std::mem::take(&mut ctx.diags) }
}

/// Functional execution on seeded inputs (+ verification with `check`).
/// `poison`: outputs start as NaN; otherwise they hold seed 0's reference
/// outputs (stale leftovers of an earlier run).
pub fn exec_program(kernel: &str, shape: Shape, p: &Profile, seed: u64, check: bool, poison: bool, prog: &Program) -> ExecResult {
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
    replay(&mut ctx, prog);
    let b = breakdown(&ctx, p);
    let trace = TraceResult { est_cycles: ctx.est.finish(), dev_cycles: ctx.dev.finish(), hang: ctx.hang.is_some(), counts: ctx.counts.clone(), breakdown: b, diags: std::mem::take(&mut ctx.diags) };
    let verify = match refs {
        Some(r) if trace.diags.is_empty() => Some(compare(kernel, &ctx, &r)),
        _ => None,
    };
    ExecResult { trace, verify }
}

/// The seed whose position a trace (check, schedule) runs with.
pub const TRACE_SEED: u64 = 1;

/// In process: record kernel `f`'s program and trace it (npuc's benchmark, the tests).
pub fn trace(kernel: &str, shape: Shape, p: &Profile, f: &dyn Fn(&mut npu::Ctx)) -> TraceResult {
    let prog = npu::host::record(launch_for(kernel, shape, p, TRACE_SEED), f);
    trace_program(kernel, shape, p, &prog)
}

/// In process: record kernel `f`'s program for `seed`'s launch and execute it.
pub fn exec(kernel: &str, shape: Shape, p: &Profile, seed: u64, check: bool, poison: bool, f: &dyn Fn(&mut npu::Ctx)) -> ExecResult {
    let prog = npu::host::record(launch_for(kernel, shape, p, seed), f);
    exec_program(kernel, shape, p, seed, check, poison, &prog)
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

