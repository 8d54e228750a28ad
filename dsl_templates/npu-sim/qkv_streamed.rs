// project_qkv, design family "streamed_after": every command is issued up
// front and ordered on the device with `k.after`; the host only waits for the
// final writes, so DMA startups, pass issues and vector setups overlap the
// weight stream and every engine has several commands queued. The q, k and v
// heads are split over SLICES slices of both clusters (whole heads, so every
// slice finishes its heads itself: scale, per-head RMSNorm, RoPE, write-out).
// Each slice normalises x itself (in chunks of at most XCHUNK elements) while
// its first weight tiles stream in. Weights stream in tiles of ROWS rows (a
// tile never crosses a head) through a ring of BUFFERS DM buffers, a load
// ordered after the pass that last read its buffer; a tile is SPLIT sequencer
// programs on consecutive engines, packets of at most PACKET bytes. STAGGER > 1
// shortens slice i's first tile to (i % STAGGER + 1) / STAGGER of ROWS so the
// slices' commands do not line up; XFIRST = 1 loads x before the first tile.
// Accumulators: a ring of two heads in the VRF, so a head's epilogue overlaps
// the next head's stream. All output writes are queued last on each engine.
use npu::*;

const SLICES: usize = ${SLICES};
const SPLIT: usize = ${SPLIT};
const PACKET: u32 = ${PACKET};
const ROWS: u32 = ${ROWS};
const BUFFERS: usize = ${BUFFERS};
const STAGGER: u32 = ${STAGGER};
const XFIRST: u32 = ${XFIRST};
const XCHUNK: u32 = ${XCHUNK};

/// Largest multiple of 256 <= max dividing bytes; else the largest divisor <= max.
fn pk(bytes: u32, max: u32) -> u32 {
    let mut p = (max.min(bytes) / 256) * 256;
    while p >= 256 {
        if bytes % p == 0 {
            return p;
        }
        p -= 256;
    }
    let mut p = max.min(bytes);
    while bytes % p != 0 {
        p -= 1;
    }
    p
}

/// Largest multiple of 64 <= max dividing n.
fn chunk_of(n: u32, max: u32) -> u32 {
    let mut c = (max / 64) * 64;
    while c > 64 && n % c != 0 {
        c -= 64;
    }
    c
}

/// A token whose command is ordered before a command that is waited on.
fn drop_token(t: Token) {
    std::mem::forget(t);
}

#[derive(Clone, Copy)]
struct Tl {
    m: usize,  // matrix: 0 q, 1 k, 2 v
    hh: u32,   // head within the matrix
    r: u32,    // first row within the head
    tr: u32,   // rows
    hi: usize, // index of the head among the slice's heads
}

fn qkv(k: &mut Ctx) {
    let s = k.shape();
    let hw = k.hw();
    let (h, d) = (s.hidden, s.head_dim);
    let (nq, nkv, cl) = (s.q_heads, s.kv_heads, s.cache_len);
    let pos = k.pos();
    let slot = pos % cl;
    let x = k.tensor("x");
    let norm = k.tensor("attn_norm");
    let qn = k.tensor("q_norm");
    let kn = k.tensor("k_norm");
    let q_out = k.tensor("q_out");
    let kc = k.tensor("k_cache");
    let vc = k.tensor("v_cache");
    let w = [k.tensor("wq"), k.tensor("wk"), k.tensor("wv")];
    let wsc = [k.tensor("wq_scale"), k.tensor("wk_scale"), k.tensor("wv_scale")];
    let total_heads = nq + 2 * nkv;
    let nsl = SLICES.min(total_heads as usize);
    let spc = hw.slices_per_cluster;
    let c = chunk_of(h, XCHUNK);

    let mut outs_all: Vec<(Engine, Loc, Loc, u32, Token)> = vec![];
    for i in 0..nsl {
        let cc = i % hw.clusters;
        let j = i / hw.clusters;
        let sl = cc * spc + j;
        let engs: Vec<Engine> = (0..SPLIT).map(|m| engine(cc, (j * SPLIT + m) % hw.dma_engines_per_cluster)).collect();
        let g0 = i as u32 * total_heads / nsl as u32;
        let g1 = (i as u32 + 1) * total_heads / nsl as u32;
        let nheads = (g1 - g0) as usize;
        let first = ((ROWS * (i as u32 % STAGGER + 1) / STAGGER) / 8 * 8).max(8);
        let mut tiles = vec![];
        let mut heads = vec![];
        for (hi, gh) in (g0..g1).enumerate() {
            let (m, hh) = if gh < nq { (0, gh) } else if gh < nq + nkv { (1, gh - nq) } else { (2, gh - nq - nkv) };
            heads.push((m, hh));
            let mut r = 0;
            while r < d {
                let lim = if tiles.is_empty() { first } else { ROWS };
                let tr = lim.min(d - r);
                tiles.push(Tl { m, hh, r, tr, hi });
                r += tr;
            }
        }
        // DM: x | attn_norm, q_norm | k_norm, scales of the slice's heads, outputs, weight ring
        let dxn = k.dm_alloc(sl, h * 4);
        let dg = k.dm_alloc(sl, d * 4);
        let sw = d * 2 + 256; // per head: an aligned window of its scales
        let dsc = k.dm_alloc(sl, nheads as u32 * sw);
        let mut soff = vec![];
        let douts = k.dm_alloc(sl, nheads as u32 * d * 2);
        let bufs: Vec<Dm> = (0..BUFFERS).map(|_| k.dm_alloc(sl, ROWS * h)).collect();
        // VRF: one block; the prologue's stages overlap the accumulators (passes are ordered after it)
        let vb = k.vrf_alloc(sl, (2 * c).max(4 * d) + 8);
        let ss = vb.sub((2 * c).max(4 * d), 1);
        let xt = k.trf_alloc(sl, h);
        let e0 = engs[0];
        let el = engs[SPLIT - 1];

        let load = |k: &mut Ctx, t: usize, dep: Option<&Token>| -> Vec<Token> {
            let tl = tiles[t];
            let row0 = tl.hh * d + tl.r;
            let buf = bufs[t % BUFFERS];
            let mut v = vec![];
            for m in 0..SPLIT as u32 {
                let a = tl.tr / 8 * m / SPLIT as u32 * 8;
                let z = tl.tr / 8 * (m + 1) / SPLIT as u32 * 8;
                if z > a {
                    let bytes = (z - a) * h;
                    let p = pk(bytes, PACKET);
                    let src = w[tl.m].at(((row0 + a) * h) as u64);
                    let dst = buf.at(a * h);
                    let e = engs[m as usize];
                    v.push(match dep {
                        Some(dd) => k.after(&[dd]).dma(e, src, dst, p, &[lp(bytes / p, p as i64, p as i64)]),
                        None => k.dma(e, src, dst, p, &[lp(bytes / p, p as i64, p as i64)]),
                    });
                }
            }
            v
        };
        let nt = tiles.len();
        let mut loads: Vec<Vec<Token>> = vec![];
        let px = pk(h * 2, PACKET);
        let mut tx = vec![];
        if XFIRST == 1 {
            tx.push(k.copy(e0, x.at(0), dxn.at(0), h * 2, px));
            tx.push(k.copy(el, norm.at(0), dxn.at(h * 2), h * 2, px));
        }
        for t in 0..BUFFERS.min(nt) {
            loads.push(load(k, t, None));
        }
        if XFIRST == 0 {
            tx.push(k.copy(e0, x.at(0), dxn.at(0), h * 2, px));
            tx.push(k.copy(el, norm.at(0), dxn.at(h * 2), h * 2, px));
        }
        // small vectors: q_norm, k_norm, the heads' scales
        let pd = pk(d * 2, PACKET);
        let mut tv = vec![k.copy(el, qn.at(0), dg.at(0), d * 2, pd), k.copy(el, kn.at(0), dg.at(d * 2), d * 2, pd)];
        for (hi, &(m, hh)) in heads.iter().enumerate() {
            let nh = if m == 0 { nq } else { nkv };
            let a = hh * d * 2 / 256 * 256;
            let b = ((hh + 1) * d * 2 + 255) / 256 * 256;
            let wl = b.min(nh * d * 2) - a;
            soff.push(hi as u32 * sw + hh * d * 2 - a);
            tv.push(k.copy(el, wsc[m].at(a as u64), dsc.at(hi as u32 * sw), wl, pk(wl, PACKET)));
        }
        // prologue: xn = bf16(rmsnorm(x) · attn_norm) → TRF
        let txr: Vec<&Token> = tx.iter().collect();
        let (va, vg) = (vb.sub(0, c), vb.sub(c, c));
        for q in 0..h / c {
            let _ = k.after(&txr).vload(dxn.at(q * c * 2), Dt::Bf16, va);
            let _ = k.after(&txr).vsumsq(va, ss, q > 0);
        }
        let mut vt = None;
        for q in 0..h / c {
            let _ = k.after(&txr).vload(dxn.at(q * c * 2), Dt::Bf16, va);
            let _ = k.vrms(va, ss, h, 1e-6, va);
            let _ = k.after(&txr).vload(dxn.at(h * 2 + q * c * 2), Dt::Bf16, vg);
            let _ = k.vmul(va, vg, va);
            vt = Some(k.vtrf(va, xt.sub(q * c, c)));
        }
        let vt = vt.unwrap();
        let tvr: Vec<&Token> = tv.iter().collect();
        let mut passes: Vec<Token> = vec![];
        let mut head_done: Vec<Option<Token>> = vec![];
        for t in 0..nt {
            if t >= BUFFERS {
                let l = load(k, t, Some(&passes[t - BUFFERS]));
                loads.push(l);
            }
            let tl = tiles[t];
            let acc = vb.sub((tl.hi as u32 % 2) * d, d);
            let mut deps: Vec<&Token> = loads[t].iter().collect();
            deps.push(&vt);
            if tl.hi >= 2 {
                deps.push(head_done[tl.hi - 2].as_ref().unwrap());
            }
            let p = k.after(&deps).pass(&Pass {
                slice: sl,
                w: Tile { addr: bufs[t % BUFFERS].addr, rows: tl.tr, cols: h, pitch: h, dt: Dt::Fp8E4m3 },
                scales: None,
                x: xt,
                acc: acc.sub(tl.r, tl.tr),
                accumulate: false,
            });
            if tl.r + tl.tr == d {
                // head complete: scale, RMSNorm · gamma, RoPE (q, k), bf16, write
                let scv = vb.sub(2 * d, d);
                let gv = vb.sub(3 * d, d);
                let mut ad: Vec<&Token> = tvr.clone();
                ad.push(&p);
                let _ = k.after(&ad).vload(dsc.at(soff[tl.hi]), Dt::Bf16, scv);
                let _ = k.after(&ad).vmul(acc, scv, acc);
                if tl.m < 2 {
                    let _ = k.after(&ad).vsumsq(acc, ss, false);
                    let _ = k.after(&ad).vrms(acc, ss, d, 1e-6, acc);
                    let _ = k.after(&ad).vload(dg.at(tl.m as u32 * d * 2), Dt::Bf16, gv);
                    let _ = k.after(&ad).vmul(acc, gv, acc);
                    let _ = k.after(&ad).vrope(acc, acc, pos, d, 10000.0);
                }
                let st = k.after(&ad).vstore(acc, douts.at(tl.hi as u32 * d * 2), Dt::Bf16);
                let dst = match tl.m {
                    0 => q_out.at((tl.hh * d * 2) as u64),
                    1 => kc.at(((tl.hh * cl + slot) * d * 2) as u64),
                    _ => vc.at(((tl.hh * cl + slot) * d * 2) as u64),
                };
                outs_all.push((engs[tl.hi % SPLIT], douts.at(tl.hi as u32 * d * 2), dst, d * 2, st));
                // accumulator reuse two heads later is ordered after this head's store
                head_done.push(if tl.hi + 2 < nheads { Some(k.after(&[&outs_all.last().unwrap().4]).vcopy(ss, ss)) } else { None });
            }
            passes.push(p);
        }
        for l in loads {
            for t in l {
                drop_token(t);
            }
        }
        for t in tx.into_iter().chain(tv.into_iter()).chain(passes.into_iter()).chain(head_done.into_iter().flatten()) {
            drop_token(t);
        }
        drop_token(vt);
    }
    // output writes, queued last on every engine (after their vstores)
    let mut ws = vec![];
    for (e, src, dst, n, st) in outs_all {
        ws.push(k.after(&[&st]).dma(e, src, dst, pk(n, PACKET), &[lp(n / pk(n, PACKET), pk(n, PACKET) as i64, pk(n, PACKET) as i64)]));
        drop_token(st);
    }
    k.wait_all(ws);
}

npu::kernels! { project_qkv => qkv }
