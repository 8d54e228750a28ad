// adversarial: input ignored: skips the projection and norm and returns the residual: input-dependent, plausible magnitude, wrong
// expect: rejected
// Generated from the official baseline (dsl_templates/npu-sim/baseline_attention_output.rs) plus
// the attack; Rust standard library only. See README.md.
use npu::*;

fn ao(k: &mut Ctx) {
    let h = k.shape().hidden;
    let (resid, out) = (k.tensor("residual"), k.tensor("out"));
    let d = k.dm_alloc(0, h * 2);
    load(k, resid.at(0), d.at(0), h * 2);
    load(k, d.at(0), out.at(0), h * 2);
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
