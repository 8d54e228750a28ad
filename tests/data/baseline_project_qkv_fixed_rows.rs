// The official project_qkv baseline as it was before shapes were data (kept for a test): 128
// output rows per pass whatever the shape, so at hidden 4096 its weight tile alone fills DM (E0201).
// Official baseline: project_qkv (RMSNorm → Q/K/V fp8 projections → per-head
// RMSNorm of Q and K → RoPE → K, V into the ring cache). Correct and
// straightforward: one slice; one DMA engine, except that each weight tile is
// loaded in two halves by two engines; every command waited on.
use npu::*;

const PKT: u32 = 1536; // DMA packet bytes (6 × 256)
const ROWS: u32 = 128; // output rows per pass

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

fn qkv(k: &mut Ctx) {
    let s = k.shape();
    let (h, d) = (s.hidden, s.head_dim);
    let (nq, nkv, cl) = (s.q_heads, s.kv_heads, s.cache_len);
    let pos = k.pos();
    let slot = pos % cl;
    let sl = 0usize;
    let x = k.tensor("x");
    let norm = k.tensor("attn_norm");
    let qn = k.tensor("q_norm");
    let kn = k.tensor("k_norm");
    let q_out = k.tensor("q_out");
    let kc = k.tensor("k_cache");
    let vc = k.tensor("v_cache");
    let wt = k.dm_alloc(sl, ROWS * h);
    // x and attn_norm only live until the operands are in TRF: keep them in the weight buffer
    let dx = Dm { slice: sl, addr: wt.addr, bytes: h * 2 };
    let dnorm = Dm { slice: sl, addr: wt.addr + h * 2, bytes: h * 2 };
    let dqn = k.dm_alloc(sl, d * 2);
    let dkn = k.dm_alloc(sl, d * 2);
    let dsc = k.dm_alloc(sl, nq * d * 2);
    let dres = k.dm_alloc(sl, nq * d * 4);
    // bf16 results overwrite the f32 results head by head (head i's bf16 slot ends before head i+1's f32 data)
    let dout = dres;
    let big = k.vrf_alloc(sl, 1536);
    let ss = k.vrf_alloc(sl, 1);
    let acc = k.vrf_alloc(sl, ROWS);
    let scv = k.vrf_alloc(sl, ROWS);
    let xt = k.trf_alloc(sl, h);

    load(k, x.at(0), dx.at(0), h * 2);
    load(k, norm.at(0), dnorm.at(0), h * 2);
    load(k, qn.at(0), dqn.at(0), d * 2);
    load(k, kn.at(0), dkn.at(0), d * 2);
    // RMSNorm(x) * attn_norm → TRF
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
    let hv = big.sub(0, d);
    let gv = big.sub(d, d);
    for (wname, sname, heads) in [("wq", "wq_scale", nq), ("wk", "wk_scale", nkv), ("wv", "wv_scale", nkv)] {
        let w = k.tensor(wname);
        let sc = k.tensor(sname);
        let n = heads * d;
        load(k, sc.at(0), dsc.at(0), n * 2);
        for r0 in (0..n).step_by(ROWS as usize) {
            // the tile's two halves on two engines at once
            let half = ROWS / 2 * h;
            let ta = k.copy(eng(), w.at((r0 * h) as u64), wt.at(0), half, pk(half));
            let tb = k.copy(engine(0, 1), w.at((r0 * h + half) as u64), wt.at(half), half, pk(half));
            k.wait(ta);
            k.wait(tb);
            let t = k.pass(&Pass { slice: sl, w: Tile { addr: wt.addr, rows: ROWS, cols: h, pitch: h, dt: Dt::Fp8E4m3 }, scales: None, x: xt, acc, accumulate: false });
            k.wait(t);
            let t = k.vload(dsc.at(r0 * 2), Dt::Bf16, scv);
            k.wait(t);
            let t = k.vmul(acc, scv, acc);
            k.wait(t);
            let t = k.vstore(acc, dres.at(r0 * 4), Dt::F32);
            k.wait(t);
        }
        // per head: (RMSNorm * gamma, RoPE) for q and k; v as is
        for hd in 0..heads {
            let t = k.vload(dres.at(hd * d * 4), Dt::F32, hv);
            k.wait(t);
            if wname != "wv" {
                let t = k.vsumsq(hv, ss, false);
                k.wait(t);
                let t = k.vrms(hv, ss, d, 1e-6, hv);
                k.wait(t);
                let t = k.vload(if wname == "wq" { dqn.at(0) } else { dkn.at(0) }, Dt::Bf16, gv);
                k.wait(t);
                let t = k.vmul(hv, gv, hv);
                k.wait(t);
                let t = k.vrope(hv, hv, pos, d, 10000.0);
                k.wait(t);
            }
            let t = k.vstore(hv, dout.at(hd * d * 2), Dt::Bf16);
            k.wait(t);
        }
        if wname == "wq" {
            let t = k.copy(eng(), dout.at(0), q_out.at(0), n * 2, pk(n * 2));
            k.wait(t);
        } else {
            let cache = if wname == "wk" { kc } else { vc };
            for hd in 0..heads {
                let off = ((hd * cl + slot) * d * 2) as u64;
                let t = k.copy(eng(), dout.at(hd * d * 2), cache.at(off), d * 2, pk(d * 2));
                k.wait(t);
            }
        }
    }
}

npu::kernels! { project_qkv => qkv }
