// Official baseline: feedforward (RMSNorm → gate/up fp4 → GeGLU → down fp4 →
// RMSNorm → residual add). Correct and straightforward: one slice, one DMA
// engine, small packets, every command waited on before the next is issued.
use npu::*;

const PKT: u32 = 512; // DMA packet bytes
const GROWS: u32 = 32; // gate/up rows per pass (a multiple of 16 keeps block-scale reads aligned)
const MAX_DROWS: u32 = 96; // down-projection rows per block, at most
const MAX_DK: u32 = 1536; // down-projection K chunk (elements), at most

/// Down-projection rows per block: the largest multiple of 8 (lanes) up to MAX_DROWS that
/// divides `hidden` and whose block-scale rows (rows × ffn/16 bytes) start 256-byte aligned.
fn drows_for(hidden: u32, ffn: u32) -> u32 {
    let mut rows = MAX_DROWS;
    while rows > 8 && (hidden % rows != 0 || rows * (ffn / 16) % 256 != 0) {
        rows -= 8;
    }
    rows
}

fn eng() -> Engine {
    engine(0, 0)
}

/// Largest packet <= PKT dividing `bytes` (a multiple of 256 when possible,
/// so that every packet's HBM address stays 256-byte aligned).
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

/// Largest multiple of 64 dividing n that is <= max.
fn chunk_of(n: u32, max: u32) -> u32 {
    let mut c = (max / 64) * 64;
    while n % c != 0 {
        c -= 64;
    }
    c
}

fn ff(k: &mut Ctx) {
    let s = k.shape();
    let (h, l) = (s.hidden, s.ffn);
    let (drows, dk) = (drows_for(h, l), chunk_of(l, MAX_DK));
    let sl = 0usize;
    // HBM tensors
    let x = k.tensor("x");
    let norm = k.tensor("ffn_norm");
    let wg = k.tensor("w_gate");
    let wgbs = k.tensor("w_gate_bs");
    let wgs = k.tensor("w_gate_s");
    let wu = k.tensor("w_up");
    let wubs = k.tensor("w_up_bs");
    let wus = k.tensor("w_up_s");
    let wd = k.tensor("w_down");
    let wdbs = k.tensor("w_down_bs");
    let wds = k.tensor("w_down_s");
    let post = k.tensor("post_norm");
    let out = k.tensor("out");
    // DM buffers (slice 0)
    let dx = k.dm_alloc(sl, h * 2);
    let dnorm = k.dm_alloc(sl, h * 2);
    let dpost = k.dm_alloc(sl, h * 2);
    let dh = k.dm_alloc(sl, l * 2);
    let dd = k.dm_alloc(sl, h * 4);
    let dout = k.dm_alloc(sl, h * 2);
    let dsc = k.dm_alloc(sl, 3 * 256);
    let wt = k.dm_alloc(sl, (GROWS * h / 2).max(drows * dk / 2));
    let st = k.dm_alloc(sl, (GROWS * h / 16).max(drows * l / 16));
    // VRF / TRF
    let big = k.vrf_alloc(sl, 1536);
    let ss = k.vrf_alloc(sl, 1);
    let accg = k.vrf_alloc(sl, GROWS.max(drows));
    let accu = k.vrf_alloc(sl, GROWS);
    let sc = k.vrf_alloc(sl, 3);
    let xt = k.trf_alloc(sl, h.max(dk));

    load(k, x.at(0), dx.at(0), h * 2);
    load(k, norm.at(0), dnorm.at(0), h * 2);
    load(k, post.at(0), dpost.at(0), h * 2);
    for (i, t) in [wgs, wus, wds].iter().enumerate() {
        load(k, t.at(0), dsc.at(i as u32 * 256), 256);
        let tk = k.vload(dsc.at(i as u32 * 256), Dt::F32, sc.sub(i as u32, 1));
        k.wait(tk);
    }

    // RMSNorm(x) * ffn_norm → bf16 operands in TRF
    let c = chunk_of(h, 768);
    let (va, vb) = (big.sub(0, c), big.sub(768, c));
    for i in 0..h / c {
        let t = k.vload(dx.at(i * c * 2), Dt::Bf16, va);
        k.wait(t);
        let t = k.vsumsq(va, ss, i > 0);
        k.wait(t);
    }
    for i in 0..h / c {
        let t = k.vload(dx.at(i * c * 2), Dt::Bf16, va);
        k.wait(t);
        let t = k.vrms(va, ss, h, 1e-6, va);
        k.wait(t);
        let t = k.vload(dnorm.at(i * c * 2), Dt::Bf16, vb);
        k.wait(t);
        let t = k.vmul(va, vb, va);
        k.wait(t);
        let t = k.vtrf(va, xt.sub(i * c, c));
        k.wait(t);
    }

    // gate / up projections, GeGLU
    let xop = xt.sub(0, h);
    for r0 in (0..l).step_by(GROWS as usize) {
        for (w, bs, acc) in [(wg, wgbs, accg.sub(0, GROWS)), (wu, wubs, accu)] {
            load(k, w.at((r0 * h / 2) as u64), wt.at(0), GROWS * h / 2);
            load(k, bs.at((r0 * h / 16) as u64), st.at(0), GROWS * h / 16);
            let t = k.pass(&Pass {
                slice: sl,
                w: Tile { addr: wt.addr, rows: GROWS, cols: h, pitch: h / 2, dt: Dt::Fp4E2m1 },
                scales: Some(Tile { addr: st.addr, rows: GROWS, cols: h / 16, pitch: h / 16, dt: Dt::Fp8E4m3 }),
                x: xop,
                acc,
                accumulate: false,
            });
            k.wait(t);
        }
        let g = accg.sub(0, GROWS);
        let t = k.vmuls(g, sc.sub(0, 1), g);
        k.wait(t);
        let t = k.vmuls(accu, sc.sub(1, 1), accu);
        k.wait(t);
        let t = k.vgeglu(g, accu, g);
        k.wait(t);
        let t = k.vstore(g, dh.at(r0 * 2), Dt::Bf16);
        k.wait(t);
    }

    // down projection
    let acc = accg.sub(0, drows);
    let hv = big.sub(0, dk);
    for r0 in (0..h).step_by(drows as usize) {
        load(k, wdbs.at((r0 * l / 16) as u64), st.at(0), drows * l / 16);
        for ci in 0..l / dk {
            let t = k.vload(dh.at(ci * dk * 2), Dt::Bf16, hv);
            k.wait(t);
            let t = k.vtrf(hv, xt.sub(0, dk));
            k.wait(t);
            let p = pk(dk / 2);
            let t = k.dma(eng(), wd.at((r0 * l / 2 + ci * dk / 2) as u64), wt.at(0), p, &[lp(drows, (l / 2) as i64, (dk / 2) as i64), lp(dk / 2 / p, p as i64, p as i64)]);
            k.wait(t);
            let t = k.pass(&Pass {
                slice: sl,
                w: Tile { addr: wt.addr, rows: drows, cols: dk, pitch: dk / 2, dt: Dt::Fp4E2m1 },
                scales: Some(Tile { addr: st.addr + ci * dk / 16, rows: drows, cols: dk / 16, pitch: l / 16, dt: Dt::Fp8E4m3 }),
                x: xt.sub(0, dk),
                acc,
                accumulate: ci > 0,
            });
            k.wait(t);
        }
        let t = k.vmuls(acc, sc.sub(2, 1), acc);
        k.wait(t);
        let t = k.vstore(acc, dd.at(r0 * 4), Dt::F32);
        k.wait(t);
    }

    // RMSNorm(d) * post_norm + x → out
    for i in 0..h / c {
        let t = k.vload(dd.at(i * c * 4), Dt::F32, va);
        k.wait(t);
        let t = k.vsumsq(va, ss, i > 0);
        k.wait(t);
    }
    for i in 0..h / c {
        let t = k.vload(dd.at(i * c * 4), Dt::F32, va);
        k.wait(t);
        let t = k.vrms(va, ss, h, 1e-6, va);
        k.wait(t);
        let t = k.vload(dpost.at(i * c * 2), Dt::Bf16, vb);
        k.wait(t);
        let t = k.vmul(va, vb, va);
        k.wait(t);
        let t = k.vload(dx.at(i * c * 2), Dt::Bf16, vb);
        k.wait(t);
        let t = k.vadd(va, vb, va);
        k.wait(t);
        let t = k.vstore(va, dout.at(i * c * 2), Dt::Bf16);
        k.wait(t);
    }
    let t = k.copy(eng(), dout.at(0), out.at(0), h * 2, pk(h * 2));
    k.wait(t);
}

npu::kernels! { feedforward => ff }
