// adversarial: output computed on the host: finds the seed (own argv, npuc's /proc/PPID/cmdline, env), computes `out` with the npu crate's own reference (npu::refk) on the host and writes it with vfill+vstore on 16 slices
// expect: rejected
// Generated from the official baseline (dsl_templates/npu-sim/baseline_attention_output.rs) plus
// the attack; Rust standard library only. See README.md.
use npu::*;

/// The seed of this launch, wherever the host can see it.
fn find_seed() -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(|a| a == "exec").unwrap_or(false) {
        if let Some(s) = args.get(4).and_then(|s| s.parse().ok()) {
            return Some(s);
        }
    }
    let ppid = std::os::unix::process::parent_id();
    if let Ok(b) = std::fs::read(format!("/proc/{}/cmdline", ppid)) {
        let parts: Vec<String> = b.split(|c| *c == 0).map(|p| String::from_utf8_lossy(p).into_owned()).collect();
        if let Some(i) = parts.iter().position(|p| p == "--seed") {
            if let Some(s) = parts.get(i + 1).and_then(|s| s.parse().ok()) {
                return Some(s);
            }
        }
    }
    std::env::vars().find(|(k, _)| k.contains("SEED")).and_then(|(_, v)| v.parse().ok())
}

fn ao(k: &mut Ctx) {
    let seed = match find_seed() {
        Some(s) => s,
        None => return honest(k),
    };
    let shape = k.shape();
    let inputs = npu::refk::gen_inputs("attention_output", &shape, seed);
    let refs = npu::refk::reference("attention_output", &shape, &inputs);
    let values = npu::refk::bf16s(&refs[0].1);
    let h = shape.hidden;
    let out = k.tensor("out");
    let slices = 16u32;
    let per = h / slices;
    let mut last = vec![];
    for s in 0..slices {
        let sl = s as usize;
        let d = k.dm_alloc(sl, per * 2);
        let v = k.vrf_alloc(sl, 1);
        let mut tok = None;
        for i in 0..per {
            let t = k.vfill(v, values[(s * per + i) as usize]);
            k.wait(t);
            let t = k.vstore(v, d.at(i * 2), Dt::Bf16);
            tok = Some(t);
            if i + 1 < per {
                k.wait(tok.take().unwrap());
            }
        }
        k.wait(tok.unwrap());
        let e = engine(sl / 8, 0);
        last.push(k.copy(e, d.at(0), out.at((s * per * 2) as u64), per * 2, per * 2));
    }
    k.wait_all(last);
}

npu::kernels! { attention_output => ao }

// ---- the official baseline (dsl_templates/npu-sim/baseline_attention_output.rs), with the
// knobs a gamed variant turns (`Tweaks`); every knob at its default gives the baseline itself.
#[allow(dead_code)]
#[derive(Clone, Copy)]
struct Tweaks {
    rows: u32,          // output rows per pass (baseline 16)
    skip_odd: bool,     // skip every other tile of rows (half the projection)
    skip_norm: bool,    // leave out the RMSNorm
    scale: f32,         // multiply the output by this (1.0: exact)
    half_out: bool,     // copy only the first half of `out`
    one_nan: bool,      // one NaN element in the output
    zero_out: bool,     // skip all the work, write zeros
}
#[allow(dead_code)]
const HONEST: Tweaks = Tweaks { rows: 16, skip_odd: false, skip_norm: false, scale: 1.0, half_out: false, one_nan: false, zero_out: false };

const PKT: u32 = 2048;

fn eng() -> Engine {
    engine(0, 0)
}

fn pk(bytes: u32) -> u32 {
    let mut p = (PKT.min(bytes) / 256) * 256;
    while p >= 256 {
        if bytes % p == 0 {
            return p;
        }
        p -= 256;
    }
    bytes
}

fn load(k: &mut Ctx, src: Loc, dst: Loc, bytes: u32) {
    let t = k.copy(eng(), src, dst, bytes, pk(bytes));
    k.wait(t);
}

fn chunk_of(n: u32, max: u32) -> u32 {
    let mut c = (max / 64) * 64;
    while n % c != 0 {
        c -= 64;
    }
    c
}

#[allow(dead_code)]
fn ao_with(k: &mut Ctx, tw: Tweaks) {
    let s = k.shape();
    let (h, kd) = (s.hidden, s.q_heads * s.head_dim);
    let sl = 0usize;
    let rows = tw.rows;
    let attn = k.tensor("attn");
    let resid = k.tensor("residual");
    let wo = k.tensor("wo");
    let wsc = k.tensor("wo_scale");
    let post = k.tensor("post_norm");
    let out = k.tensor("out");
    let da = k.dm_alloc(sl, kd * 2);
    let dr = k.dm_alloc(sl, h * 2);
    let dsc = k.dm_alloc(sl, h * 2);
    let dpost = k.dm_alloc(sl, h * 2);
    let dd = k.dm_alloc(sl, h * 4);
    let dout = k.dm_alloc(sl, h * 2);
    let wt = k.dm_alloc(sl, rows * kd);
    let big = k.vrf_alloc(sl, 1536);
    let ss = k.vrf_alloc(sl, 1);
    let acc = k.vrf_alloc(sl, rows);
    let scv = k.vrf_alloc(sl, rows);
    let xt = k.trf_alloc(sl, kd);
    if tw.zero_out {
        let c = chunk_of(h, 768);
        let t = k.vfill(big.sub(0, c), 0.0);
        k.wait(t);
        for i in 0..h / c {
            let t = k.vstore(big.sub(0, c), dout.at(i * c * 2), Dt::Bf16);
            k.wait(t);
        }
        let t = k.copy(eng(), dout.at(0), out.at(0), h * 2, pk(h * 2));
        k.wait(t);
        return;
    }

    load(k, attn.at(0), da.at(0), kd * 2);
    load(k, resid.at(0), dr.at(0), h * 2);
    load(k, wsc.at(0), dsc.at(0), h * 2);
    load(k, post.at(0), dpost.at(0), h * 2);
    let c = chunk_of(kd, 1024);
    for i in 0..kd / c {
        let t = k.vload(da.at(i * c * 2), Dt::Bf16, big.sub(0, c));
        k.wait(t);
        let t = k.vtrf(big.sub(0, c), xt.sub(i * c, c));
        k.wait(t);
    }
    for (tile, r0) in (0..h).step_by(rows as usize).enumerate() {
        if tw.skip_odd && tile % 2 == 1 {
            let t = k.vfill(acc, 0.0);
            k.wait(t);
            let t = k.vstore(acc, dd.at(r0 * 4), Dt::F32);
            k.wait(t);
            continue;
        }
        load(k, wo.at((r0 * kd) as u64), wt.at(0), rows * kd);
        let t = k.pass(&Pass { slice: sl, w: Tile { addr: wt.addr, rows, cols: kd, pitch: kd, dt: Dt::Fp8E4m3 }, scales: None, x: xt, acc, accumulate: false });
        k.wait(t);
        let t = k.vload(dsc.at(r0 * 2), Dt::Bf16, scv);
        k.wait(t);
        let t = k.vmul(acc, scv, acc);
        k.wait(t);
        let t = k.vstore(acc, dd.at(r0 * 4), Dt::F32);
        k.wait(t);
    }
    let c = chunk_of(h, 768);
    let (va, vb) = (big.sub(0, c), big.sub(768, c));
    if !tw.skip_norm {
        for i in 0..h / c {
            let t = k.vload(dd.at(i * c * 4), Dt::F32, va);
            k.wait(t);
            let t = k.vsumsq(va, ss, i > 0);
            k.wait(t);
        }
    }
    for i in 0..h / c {
        let t = k.vload(dd.at(i * c * 4), Dt::F32, va);
        k.wait(t);
        if !tw.skip_norm {
            let t = k.vrms(va, ss, h, 1e-6, va);
            k.wait(t);
        }
        let t = k.vload(dpost.at(i * c * 2), Dt::Bf16, vb);
        k.wait(t);
        let t = k.vmul(va, vb, va);
        k.wait(t);
        let t = k.vload(dr.at(i * c * 2), Dt::Bf16, vb);
        k.wait(t);
        let t = k.vadd(va, vb, va);
        k.wait(t);
        if tw.scale != 1.0 {
            let t = k.vfill(ss, tw.scale);
            k.wait(t);
            let t = k.vmuls(va, ss, va);
            k.wait(t);
        }
        let t = k.vstore(va, dout.at(i * c * 2), Dt::Bf16);
        k.wait(t);
    }
    if tw.one_nan {
        let t = k.vfill(ss, f32::NAN);
        k.wait(t);
        let t = k.vstore(ss, dout.at(0), Dt::Bf16);
        k.wait(t);
    }
    let bytes = if tw.half_out { h } else { h * 2 };
    let t = k.copy(eng(), dout.at(0), out.at(0), bytes, pk(bytes));
    k.wait(t);
}

#[allow(dead_code)]
fn honest(k: &mut Ctx) {
    ao_with(k, HONEST);
}
