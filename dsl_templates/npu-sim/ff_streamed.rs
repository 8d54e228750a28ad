// feedforward, design family "streamed_after": one continuous weight stream per
// slice, every command issued up front and ordered on the device with
// `k.after` (DMA startups, pass issues and vector setups overlap the stream;
// several commands queued per engine). SLICES slices of both clusters.
// Phase 1: the slice's ffn rows of w_gate and w_up stream in tiles of ROWS
// gate + ROWS up rows (one sequencer program for both weights, one for both
// block scales) through a ring of BUFFERS DM buffers; one fused pass per tile,
// per-matrix scales, GeGLU, h rows kept in DM, then written to HBM scratch.
// Phase 2 shares the ring: the down-projection tiles do not depend on h, so the
// first BUFFERS of them load while phase 1 finishes and h is all-gathered
// (every slice reads the whole h back with one command). The slice's hidden
// rows of w_down keep their block scales resident (one contiguous command,
// queued after the first PRE phase-1 tiles); K is walked in chunks of KC
// columns (h chunk → TRF, two TRF halves so the next chunk is prepared while
// the current one is used), DROWS-row tiles per chunk, accumulated in the VRF.
// STAGGER > 1 shortens slice i's first tile so that startups do not line up.
// Distributed epilogue: partial sums of squares gathered over the switch
// network to the first slice, the total broadcast back by a doubling tree;
// every slice normalises and writes its own rows.
use npu::*;

const SLICES: usize = ${SLICES};
const PACKET: u32 = ${PACKET};
const ROWS: u32 = ${ROWS};
const DROWS: u32 = ${DROWS};
const KC: u32 = ${KC};
const BUFFERS: usize = ${BUFFERS};
const STAGGER: u32 = ${STAGGER};
const DBUFFERS: usize = ${DBUFFERS};

const EPS_SQRT: f32 = 1e-30;

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

/// Largest multiple of m <= max dividing n (at least m).
fn div_of(n: u32, max: u32, m: u32) -> u32 {
    let mut c = (max / m) * m;
    while c > m && n % c != 0 {
        c -= m;
    }
    c
}

/// A token whose command is ordered before a command that is waited on.
fn drop_token(t: Token) {
    std::mem::forget(t);
}

fn copy_after(k: &mut Ctx, deps: &[&Token], e: Engine, src: Loc, dst: Loc, n: u32) -> Token {
    let p = pk(n, PACKET);
    if deps.is_empty() {
        k.dma(e, src, dst, p, &[lp(n / p, p as i64, p as i64)])
    } else {
        k.after(deps).dma(e, src, dst, p, &[lp(n / p, p as i64, p as i64)])
    }
}

fn ff(k: &mut Ctx) {
    let s = k.shape();
    let hw = k.hw();
    let (h, f) = (s.hidden, s.ffn);
    let x = k.tensor("x");
    let norm = k.tensor("ffn_norm");
    let wg = k.tensor("w_gate");
    let wgb = k.tensor("w_gate_bs");
    let wgs = k.tensor("w_gate_s");
    let wu = k.tensor("w_up");
    let wub = k.tensor("w_up_bs");
    let wus = k.tensor("w_up_s");
    let wd = k.tensor("w_down");
    let wdb = k.tensor("w_down_bs");
    let wds = k.tensor("w_down_s");
    let post = k.tensor("post_norm");
    let out = k.tensor("out");
    let spc = hw.slices_per_cluster;
    let ns = SLICES;
    let hs = k.hbm_alloc(f as u64 * 2); // h, bf16
    let kc = div_of(f, KC, 512).min(f);
    let nq = f / kc;
    let rb = h / 2; // gate/up row bytes (fp4)
    let sb = h / 16; // gate/up block-scale row bytes
    let db = f / 16; // down block-scale row bytes
    let tile1 = 2 * ROWS * (rb + sb);
    let tile2 = DROWS * kc / 2;
    let xc = div_of(h, 512, 64); // prologue chunk
    let hc = div_of(kc, 768, 64); // h chunk staging

    struct Sl {
        sl: usize,
        e: Engine,
        r0: u32,
        n1: u32,
        q0: u32,
        n2: u32,
        acc2: Vrf,
        stage: Vrf,
        ssp: Vrf,
        g: Dm,
        o: Dm,
        pw: Dm,
        pwo: u32,
        xd: Dm,
        last: Option<Token>,
        ep: Vec<Token>,
    }
    let mut sls: Vec<Sl> = vec![];
    let g1 = f / 16; // phase-1 granules of 16 rows (scale rows 256-byte aligned)
    let g2 = h / 8;
    for i in 0..ns {
        let c = i % hw.clusters;
        let j = i / hw.clusters;
        let sl = c * spc + j;
        let r0 = (i as u32 * g1 / ns as u32) * 16;
        let r1 = ((i as u32 + 1) * g1 / ns as u32) * 16;
        let q0 = (i as u32 * g2 / ns as u32) * 8;
        let q1 = ((i as u32 + 1) * g2 / ns as u32) * 8;
        let z = Dm { slice: sl, addr: 0, bytes: 0 };
        let zv = Vrf { slice: sl, off: 0, len: 0 };
        sls.push(Sl { sl, e: engine(c, j % hw.dma_engines_per_cluster), r0, n1: r1 - r0, q0, n2: q1 - q0, acc2: zv, stage: zv, ssp: zv, g: z, o: z, pw: z, pwo: 0, xd: z, last: None, ep: vec![] });
    }
    let mut hw_tok: Vec<Token> = vec![];
    let mut later: Vec<(usize, Vec<Token>)> = vec![];
    // ---- per slice: prologue, phase 1, first phase-2 tiles, h write ----
    struct P2 {
        bufs: Vec<Dm>,
        dsc_all: Dm,
        hall: Dm,
        trf: Trf,
        pass_ring: Vec<Option<Token>>,
        t: usize,
        last_p1: Option<Token>,
        scal: Vrf,
        sc_tok: Vec<Token>,
        early: Vec<Token>,
    }
    let mut p2s: Vec<P2> = vec![];
    for x_ in sls.iter_mut() {
        let sl = x_.sl;
        let e = x_.e;
        let (n1, n2) = (x_.n1, x_.n2);
        let xd = k.dm_alloc(sl, h * 4); // x | ffn_norm
        x_.xd = xd;
        let sd = k.dm_alloc(sl, 256 * 3); // w_gate_s, w_up_s, w_down_s
        let hall = k.dm_alloc(sl, f * 2);
        // one arena: phase 1 = ring of BUFFERS gate/up tiles; phase 2 (after the last
        // phase-1 pass) = the resident down block scales + a ring of DBUFFERS down tiles
        let dsz = (n2 * db + 255) / 256 * 256;
        let arena = k.dm_alloc(sl, (BUFFERS as u32 * tile1).max(dsz + DBUFFERS as u32 * tile2));
        let bufs: Vec<Dm> = (0..BUFFERS).map(|b| Dm { slice: sl, addr: arena.addr + b as u32 * tile1, bytes: tile1 }).collect();
        let dsc = Dm { slice: sl, addr: arena.addr, bytes: n2 * db };
        let bufs2: Vec<Dm> = (0..DBUFFERS).map(|b| Dm { slice: sl, addr: arena.addr + dsz + b as u32 * tile2, bytes: tile2 }).collect();
        let (wa, wb) = (x_.q0 * 2 / 256 * 256, (((x_.q0 + n2) * 2 + 255) / 256 * 256).min(h * 2));
        x_.pw = k.dm_alloc(sl, wb - wa);
        x_.pwo = x_.q0 * 2 - wa;
        x_.g = k.dm_alloc(sl, 256 + ns as u32 * 4);
        x_.o = k.dm_alloc(sl, n2 * 2);
        let acc2 = k.vrf_alloc(sl, n2);
        let acc1 = k.vrf_alloc(sl, BUFFERS as u32 * 2 * ROWS);
        let stage = k.vrf_alloc(sl, (2 * xc).max(hc).max(2 * n2));
        let scal = k.vrf_alloc(sl, 8);
        let ssp = k.vrf_alloc(sl, 64);
        x_.acc2 = acc2;
        x_.stage = stage;
        x_.ssp = ssp;
        let trf = k.trf_alloc(sl, h.max(2 * kc));
        let i = sls_index(sl, spc, hw.clusters);

        // phase-1 tiles of this slice
        let mut tiles: Vec<(u32, u32)> = vec![];
        let first = ((ROWS * (i as u32 % STAGGER + 1) / STAGGER) / 16 * 16).max(16);
        let mut r = x_.r0;
        while r < x_.r0 + n1 {
            let tr = (if r == x_.r0 { first } else { ROWS }).min(x_.r0 + n1 - r);
            tiles.push((r, tr));
            r += tr;
        }
        let load1 = |k: &mut Ctx, t: usize, dep: Option<&Token>| -> Vec<Token> {
            let (r, tr) = tiles[t];
            let buf = bufs[t % BUFFERS];
            let wbytes = tr * rb;
            let sbytes = tr * sb;
            let pw = pk(wbytes, PACKET);
            let ps = pk(sbytes, PACKET);
            let d: Vec<&Token> = dep.into_iter().collect();
            let a = if d.is_empty() {
                k.dma(e, wg.at((r * rb) as u64), buf.at(0), pw, &[lp(2, wu.addr as i64 - wg.addr as i64, wbytes as i64), lp(wbytes / pw, pw as i64, pw as i64)])
            } else {
                k.after(&d).dma(e, wg.at((r * rb) as u64), buf.at(0), pw, &[lp(2, wu.addr as i64 - wg.addr as i64, wbytes as i64), lp(wbytes / pw, pw as i64, pw as i64)])
            };
            let b = if d.is_empty() {
                k.dma(e, wgb.at((r * sb) as u64), buf.at(2 * wbytes), ps, &[lp(2, wub.addr as i64 - wgb.addr as i64, sbytes as i64), lp(sbytes / ps, ps as i64, ps as i64)])
            } else {
                k.after(&d).dma(e, wgb.at((r * sb) as u64), buf.at(2 * wbytes), ps, &[lp(2, wub.addr as i64 - wgb.addr as i64, sbytes as i64), lp(sbytes / ps, ps as i64, ps as i64)])
            };
            vec![a, b]
        };
        let nt = tiles.len();
        let tx = vec![copy_after(k, &[], e, x.at(0), xd.at(0), h * 2), copy_after(k, &[], e, norm.at(0), xd.at(h * 2), h * 2)];
        let mut loads: Vec<Vec<Token>> = vec![];
        for t in 0..BUFFERS.min(nt) {
            loads.push(load1(k, t, None));
        }
        let tsc = vec![
            copy_after(k, &[], e, wgs.at(0), sd.at(0), 256.min(4)),
            copy_after(k, &[], e, wus.at(0), sd.at(256), 4),
            copy_after(k, &[], e, wds.at(0), sd.at(512), 4),
        ];
        // prologue: xn = bf16(rmsnorm(x) · ffn_norm) → TRF; scalars → VRF
        let txr: Vec<&Token> = tx.iter().collect();
        let ss = ssp.sub(0, 1);
        let (va, vg) = (stage.sub(0, xc), stage.sub(xc, xc));
        for q in 0..h / xc {
            let _ = k.after(&txr).vload(xd.at(q * xc * 2), Dt::Bf16, va);
            let _ = k.after(&txr).vsumsq(va, ss, q > 0);
        }
        let mut vt = None;
        for q in 0..h / xc {
            let _ = k.after(&txr).vload(xd.at(q * xc * 2), Dt::Bf16, va);
            let _ = k.vrms(va, ss, h, 1e-6, va);
            let _ = k.after(&txr).vload(xd.at(h * 2 + q * xc * 2), Dt::Bf16, vg);
            let _ = k.vmul(va, vg, va);
            vt = Some(k.vtrf(va, trf.sub(q * xc, xc)));
        }
        let vt = vt.unwrap();
        for (m, t) in tsc.iter().enumerate() {
            let _ = k.after(&[t]).vload(sd.at(m as u32 * 256), Dt::F32, scal.sub(m as u32, 1));
        }
        // phase 1
        let mut passes: Vec<Token> = vec![];
        let mut vst: Vec<Token> = vec![];
        let early: Vec<Token> = vec![];
        for t in 0..nt {
            if t >= BUFFERS {
                let l = load1(k, t, Some(&passes[t - BUFFERS]));
                loads.push(l);
            }
            let (r, tr) = tiles[t];
            let b = t % BUFFERS;
            let acc = acc1.sub(b as u32 * 2 * ROWS, 2 * tr);
            let mut deps: Vec<&Token> = loads[t].iter().collect();
            deps.push(&vt);
            if t >= BUFFERS {
                deps.push(&vst[t - BUFFERS]);
            }
            let base = bufs[b].addr;
            let p = k.after(&deps).pass(&Pass {
                slice: sl,
                w: Tile { addr: base, rows: 2 * tr, cols: h, pitch: rb, dt: Dt::Fp4E2m1 },
                scales: Some(Tile { addr: base + 2 * tr * rb, rows: 2 * tr, cols: h / 16, pitch: sb, dt: Dt::Fp8E4m3 }),
                x: trf.sub(0, h),
                acc,
                accumulate: false,
            });
            let (gv, uv) = (acc.sub(0, tr), acc.sub(tr, tr));
            let mut sd_: Vec<&Token> = tsc.iter().collect();
            sd_.push(&p);
            let _ = k.after(&sd_).vmuls(gv, scal.sub(0, 1), gv);
            let _ = k.after(&sd_).vmuls(uv, scal.sub(1, 1), uv);
            let _ = k.after(&sd_).vgeglu(gv, uv, gv);
            vst.push(k.after(&sd_).vstore(gv, hall.at(r * 2), Dt::Bf16));
            passes.push(p);
        }
        // h rows of this slice → HBM (after the last store), queued behind the first phase-2 tiles
        let last_p1 = passes.pop().unwrap();
        let lastv = vst.pop().unwrap();
        later.push((p2s.len(), vec![lastv]));
        for l in loads {
            for t in l {
                drop_token(t);
            }
        }
        for t in passes.into_iter().chain(vst.into_iter()).chain(tx.into_iter()) {
            drop_token(t);
        }
        drop_token(vt);
        p2s.push(P2 { bufs: bufs2, dsc_all: dsc, hall, trf, pass_ring: (0..BUFFERS).map(|_| None).collect(), t: nt, last_p1: Some(last_p1), scal, sc_tok: tsc, early });
    }

    // ---- phase 2: the first BUFFERS tiles of every slice, then h write + gather ----
    let tiles2 = |x_: &Sl| -> Vec<(u32, u32, u32)> {
        let mut v = vec![];
        for q in 0..nq {
            let mut r = 0;
            while r < x_.n2 {
                let tr = DROWS.min(x_.n2 - r);
                v.push((q, r, tr));
                r += tr;
            }
        }
        v
    };
    let load2 = |k: &mut Ctx, x_: &Sl, p: &P2, t: usize, tl: (u32, u32, u32), dep: Option<&Token>| -> Token {
        let (q, r, tr) = tl;
        let buf = p.bufs[t % DBUFFERS];
        let cb = kc / 2;
        let pp = pk(cb, PACKET);
        let src = wd.at(((x_.q0 + r) * (f / 2) + q * cb) as u64);
        let seq = [lp(tr, (f / 2) as i64, cb as i64), lp(cb / pp, pp as i64, pp as i64)];
        match dep {
            Some(d) => k.after(&[d]).dma(x_.e, src, buf.at(0), pp, &seq),
            None => k.dma(x_.e, src, buf.at(0), pp, &seq),
        }
    };
    let mut l2: Vec<Vec<Token>> = vec![];
    for (i, x_) in sls.iter().enumerate() {
        let p = &mut p2s[i];
        let t2 = tiles2(x_);
        let mut v = vec![];
        let lp1 = p.last_p1.take().unwrap();
        // the arena was last read by phase-1 passes; the last one covers all of them
        p.early.push(copy_after(k, &[&lp1], x_.e, wdb.at((x_.q0 * db) as u64), p.dsc_all.at(0), x_.n2 * db));
        for t in 0..DBUFFERS.min(t2.len()) {
            v.push(load2(k, x_, p, t, t2[t], Some(&lp1)));
        }
        p.last_p1 = Some(lp1);
        l2.push(v);
    }
    for (i, x_) in sls.iter().enumerate() {
        let (_, lv) = &later[i];
        hw_tok.push(k.after(&[&lv[0]]).copy(x_.e, p2s[i].hall.at(x_.r0 * 2), hs.at(x_.r0 as u64 * 2), x_.n1 * 2, pk(x_.n1 * 2, PACKET)));
    }
    let hwr: Vec<&Token> = hw_tok.iter().collect();
    let mut hg = vec![];
    for (i, x_) in sls.iter().enumerate() {
        hg.push(k.after(&hwr).copy(x_.e, hs.at(0), p2s[i].hall.at(0), f * 2, pk(f * 2, PACKET)));
    }
    drop(hwr);
    for t in hw_tok {
        drop_token(t);
    }
    for (_, v) in later {
        for t in v {
            drop_token(t);
        }
    }
    // ---- phase 2 passes ----
    for (i, x_) in sls.iter_mut().enumerate() {
        let p = &mut p2s[i];
        let sl = x_.sl;
        let t2 = tiles2(x_);
        let lp1 = p.last_p1.take().unwrap();
        let mut loads = std::mem::take(&mut l2[i]);
        let mut passes: Vec<Token> = vec![];
        let mut vts: Vec<Token> = vec![];
        let mut last_of_chunk: Vec<usize> = vec![];
        let stage = x_.stage.sub(0, hc);
        for (t, &(q, r, tr)) in t2.iter().enumerate() {
            if r == 0 {
                // h chunk q → TRF half q % 2, after the passes that last read that half
                let mut deps: Vec<&Token> = vec![&hg[i], &lp1];
                if q >= 2 {
                    deps.push(&passes[last_of_chunk[q as usize - 2]]);
                }
                let half = (q % 2) * kc;
                let mut vtk = None;
                for c in 0..kc / hc {
                    let _ = k.after(&deps).vload(p.hall.at((q * kc + c * hc) * 2), Dt::Bf16, stage);
                    vtk = Some(k.after(&deps).vtrf(stage, p.trf.sub(half + c * hc, hc)));
                }
                vts.push(vtk.unwrap());
            }
            if t >= DBUFFERS {
                let l = load2(k, x_, p, t, (q, r, tr), Some(&passes[t - DBUFFERS]));
                loads.push(l);
            }
            let buf = p.bufs[t % DBUFFERS];
            let mut deps: Vec<&Token> = vec![&loads[t], &vts[q as usize]];
            deps.extend(p.early.iter());
            let pt = k.after(&deps).pass(&Pass {
                slice: sl,
                w: Tile { addr: buf.addr, rows: tr, cols: kc, pitch: kc / 2, dt: Dt::Fp4E2m1 },
                scales: Some(Tile { addr: p.dsc_all.addr + r * db + q * kc / 16, rows: tr, cols: kc / 16, pitch: db, dt: Dt::Fp8E4m3 }),
                x: p.trf.sub((q % 2) * kc, kc),
                acc: x_.acc2.sub(r, tr),
                accumulate: q > 0,
            });
            passes.push(pt);
            if r + tr == x_.n2 {
                last_of_chunk.push(t);
            }
        }
        let lastp = passes.pop().unwrap();
        // scale, partial sum of squares, sqrt (so that one vsumsq adds the partials)
        let mut dd: Vec<&Token> = p.sc_tok.iter().collect();
        dd.push(&lastp);
        let _ = k.after(&dd).vmuls(x_.acc2, p.scal.sub(2, 1), x_.acc2);
        let _ = k.after(&dd).vsumsq(x_.acc2, x_.ssp.sub(0, 1), false);
        let _ = k.vrms(x_.ssp.sub(0, 1), x_.ssp.sub(0, 1), 1, EPS_SQRT, x_.ssp.sub(0, 1));
        x_.last = Some(k.vstore(x_.ssp.sub(0, 1), x_.g.at(0), Dt::F32));
        x_.ep.push(lastp);
        for t in loads.into_iter().chain(passes.into_iter()).chain(vts.into_iter()).chain(std::mem::take(&mut p.early).into_iter()).chain(std::mem::take(&mut p.sc_tok).into_iter()) {
            drop_token(t);
        }
        drop_token(lp1);
    }
    for t in hg {
        drop_token(t);
    }
    // post_norm windows (queued last on every engine)
    for x_ in sls.iter_mut() {
        let (wa, wb) = (x_.q0 * 2 / 256 * 256, (((x_.q0 + x_.n2) * 2 + 255) / 256 * 256).min(h * 2));
        let t = copy_after(k, &[], x_.e, post.at(wa as u64), x_.pw.at(0), wb - wa);
        x_.ep.push(t);
    }
    // exchange: sqrt partials to the first slice, total broadcast by a doubling tree
    let m = sls.len();
    let root = sls[0].g;
    let mut sw = vec![];
    for (i, x_) in sls.iter_mut().enumerate() {
        let st = x_.last.take().unwrap();
        sw.push(k.after(&[&st]).switch_copy(x_.g.at(0), root.at(256 + i as u32 * 4), 4));
        drop_token(st);
    }
    let refs: Vec<&Token> = sw.iter().collect();
    let x0 = &sls[0];
    let all = x0.ssp.sub(8, m as u32);
    let _ = k.after(&refs).vload(root.at(256), Dt::F32, all);
    let _ = k.after(&refs).vsumsq(all, x0.ssp.sub(2, 1), false);
    let t0 = k.after(&refs).vstore(x0.ssp.sub(2, 1), root.at(64), Dt::F32);
    drop(refs);
    for t in sw {
        drop_token(t);
    }
    let mut have: Vec<Option<Token>> = (0..m).map(|_| None).collect();
    have[0] = Some(t0);
    let mut cnt = 1;
    while cnt < m {
        for i in 0..cnt.min(m - cnt) {
            let t = k.after(&[have[i].as_ref().unwrap()]).switch_copy(sls[i].g.at(64), sls[i + cnt].g.at(64), 4);
            have[i + cnt] = Some(t);
        }
        cnt *= 2;
    }
    let mut outs = vec![];
    for (i, x_) in sls.iter().enumerate() {
        let hv = have[i].take().unwrap();
        let mut deps: Vec<&Token> = vec![&hv];
        deps.extend(x_.ep.iter());
        let n = x_.n2;
        let tot = x_.ssp.sub(2, 1);
        let (va, vb) = (x_.stage.sub(0, n), x_.stage.sub(n, n));
        let _ = k.after(&deps).vload(x_.g.at(64), Dt::F32, tot);
        let _ = k.after(&deps).vrms(x_.acc2, tot, h, 1e-6, x_.acc2);
        let _ = k.after(&deps).vload(x_.pw.at(x_.pwo), Dt::Bf16, va);
        let _ = k.after(&deps).vmul(x_.acc2, va, x_.acc2);
        let _ = k.after(&deps).vload(x_.xd.at(x_.q0 * 2), Dt::Bf16, vb);
        let _ = k.after(&deps).vadd(x_.acc2, vb, x_.acc2);
        let st = k.after(&deps).vstore(x_.acc2, x_.o.at(0), Dt::Bf16);
        outs.push(k.after(&[&st]).copy(x_.e, x_.o.at(0), out.at(x_.q0 as u64 * 2), n * 2, pk(n * 2, PACKET)));
        drop_token(st);
        drop_token(hv);
    }
    for x_ in sls.iter_mut() {
        for t in std::mem::take(&mut x_.ep) {
            drop_token(t);
        }
    }
    k.wait_all(outs);
}

fn sls_index(sl: usize, spc: usize, clusters: usize) -> usize {
    (sl % spc) * clusters + sl / spc
}

npu::kernels! { feedforward => ff }
