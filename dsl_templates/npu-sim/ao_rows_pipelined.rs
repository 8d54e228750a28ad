// attention_output, design family "rows_pipelined": the rows of wo are split
// over SLICES slices (spread over CLUSTERS clusters); every slice streams its
// rows in tiles of ROWS rows through a ring of BUFFERS DM buffers (BUFFERS = 1:
// load, wait, pass, in lockstep; >= 2: the next tiles load while the current
// pass runs). Each tile is loaded by SPLIT DMA commands spread over ENGINES
// engines of the slice's cluster, in packets of at most PACKET bytes, rows
// PAD bytes apart in DM. The per-row scale is applied per tile (SCALE_LATE = 0)
// or once in the epilogue (1); the o rows reach slice 0 through HBM
// (GATHER = 0) or the switch network (1) and slice 0 does RMSNorm + residual,
// or (GATHER = 2) only the slices' partial sums of squares travel (switch
// network, tree broadcast back) and every slice normalises its own rows.
// MERGE = 1 loads two same-sized vectors with one sequencer program. With
// STAGGER > 1 the first tile of slice i has (i % STAGGER + 1) / STAGGER of
// ROWS rows, so that the slices' DMA commands do not all start at once.
use npu::*;

const SLICES: usize = ${SLICES};
const CLUSTERS: usize = ${CLUSTERS};
const ENGINES: usize = ${ENGINES};
const SPLIT: usize = ${SPLIT};
const PACKET: u32 = ${PACKET};
const ROWS: u32 = ${ROWS};
const BUFFERS: usize = ${BUFFERS};
const PAD: u32 = ${PAD};
const SCALE_LATE: u32 = ${SCALE_LATE};
// the distributed epilogue (GATHER = 2) needs scaled rows: it always scales per tile
const LATE: bool = SCALE_LATE == 1 && GATHER < 2;
const GATHER: u32 = ${GATHER};
const MERGE: u32 = ${MERGE};
const STAGGER: u32 = ${STAGGER};

const GRAN: u32 = 128; // rows per granule of the row split (keeps HBM offsets 256-byte aligned)

/// `rows` rows of `row_bytes`, `src_pitch` apart in HBM, `dst_pitch` apart in DM.
fn load_rows(k: &mut Ctx, e: Engine, src: u64, dst: Loc, rows: u32, row_bytes: u32, src_pitch: u32, dst_pitch: u32) -> Token {
    if src_pitch == row_bytes && dst_pitch == row_bytes {
        let total = rows * row_bytes;
        let p = pk(total, PACKET);
        k.dma(e, Loc::Hbm(src), dst, p, &[lp(total / p, p as i64, p as i64)])
    } else {
        let p = pk(row_bytes, PACKET);
        k.dma(e, Loc::Hbm(src), dst, p, &[lp(rows, src_pitch as i64, dst_pitch as i64), lp(row_bytes / p, p as i64, p as i64)])
    }
}

/// Two HBM vectors of `n` bytes each into `dst` and `dst + n`.
fn load_pair(k: &mut Ctx, e: Engine, a: Hbm, b: Hbm, dst: Dm, n: u32) -> Vec<Token> {
    let p = pk(n, PACKET);
    if MERGE == 1 {
        vec![k.dma(e, a.at(0), dst.at(0), p, &[lp(2, b.addr as i64 - a.addr as i64, n as i64), lp(n / p, p as i64, p as i64)])]
    } else {
        vec![k.copy(e, a.at(0), dst.at(0), n, p), k.copy(e, b.at(0), dst.at(n), n, p)]
    }
}

struct Sl {
    sl: usize,
    engs: Vec<Engine>,
    r0: u32,
    r1: u32,
    tiles: Vec<(u32, u32)>,
    bufs: Vec<Dm>,
    accs: Vec<Vrf>,
    o: Dm,
    sc: Dm,
    scv: Vrf,
    loads: Vec<Vec<Token>>,
    vec_tok: Vec<Option<Token>>,
    rp: Dm,   // GATHER = 2: residual and post_norm rows
    g: Dm,    // GATHER = 2: partial / global sum of squares
    ssp: Vrf, // GATHER = 2: partial sum of squares
}

fn ao(k: &mut Ctx) {
    let s = k.shape();
    let hw = k.hw();
    let (h, kd) = (s.hidden, s.q_heads * s.head_dim);
    let attn = k.tensor("attn");
    let resid = k.tensor("residual");
    let wo = k.tensor("wo");
    let wsc = k.tensor("wo_scale");
    let post = k.tensor("post_norm");
    let out = k.tensor("out");
    let pitch = kd + PAD;

    // slice i of SLICES: cluster i % CLUSTERS, position i / CLUSTERS in it
    let ng = (h + GRAN - 1) / GRAN;
    let mut per_cluster = vec![0usize; hw.clusters];
    let mut sls: Vec<Sl> = vec![];
    for i in 0..SLICES {
        let c = i % CLUSTERS;
        let j = i / CLUSTERS;
        let sl = c * hw.slices_per_cluster + j;
        per_cluster[c] += 1;
        let r0 = ((i as u32 * ng / SLICES as u32) * GRAN).min(h);
        let r1 = (((i as u32 + 1) * ng / SLICES as u32) * GRAN).min(h);
        let engs = (0..SPLIT).map(|m| engine(c, (j * SPLIT + m) % ENGINES)).collect();
        let mut tiles = vec![];
        let mut r = r0;
        let first = ((ROWS * (i as u32 % STAGGER + 1) / STAGGER) / 8 * 8).max(8);
        while r < r1 {
            let tr = (if r == r0 { first } else { ROWS }).min(r1 - r);
            tiles.push((r, tr));
            r += tr;
        }
        sls.push(Sl { sl, engs, r0, r1, tiles, bufs: vec![], accs: vec![], o: Dm { slice: sl, addr: 0, bytes: 0 }, sc: Dm { slice: sl, addr: 0, bytes: 0 }, scv: Vrf { slice: sl, off: 0, len: 0 }, loads: vec![], vec_tok: vec![], rp: Dm { slice: sl, addr: 0, bytes: 0 }, g: Dm { slice: sl, addr: 0, bytes: 0 }, ssp: Vrf { slice: sl, off: 0, len: 0 } });
    }

    // slice 0 (index 0) gathers o and runs the epilogue
    let s0 = sls[0].sl;
    let e0 = sls[0].engs[0];
    let central = GATHER < 2;
    let o_all = if central { k.dm_alloc(s0, h * 4) } else { Dm { slice: s0, addr: 0, bytes: 0 } };
    let dvec = if central { k.dm_alloc(s0, h * 2 * 2) } else { o_all }; // residual, post_norm
    let dsc_all = if LATE { k.dm_alloc(s0, h * 2) } else { Dm { slice: s0, addr: 0, bytes: 0 } };
    let dout = if central { k.dm_alloc(s0, h * 2) } else { o_all };
    let scratch = if GATHER == 0 && SLICES > 1 { k.hbm_alloc(h as u64 * 4) } else { Hbm { addr: 0, bytes: 0 } };

    let ch = chunk_of(kd, 1024);
    let mut xts = vec![];
    let mut stages = vec![];
    let mut ops = vec![];
    for x in sls.iter_mut() {
        let sl = x.sl;
        let n = x.r1 - x.r0;
        let xd = k.dm_alloc(sl, kd * 2);
        if n > 0 {
            x.bufs = (0..BUFFERS).map(|_| k.dm_alloc(sl, ROWS * pitch)).collect();
            x.accs = (0..BUFFERS).map(|_| k.vrf_alloc(sl, ROWS)).collect();
            x.vec_tok = (0..BUFFERS).map(|_| None).collect();
            x.o = if sl == s0 && central { Dm { slice: sl, addr: o_all.addr + x.r0 * 4, bytes: n * 4 } } else { k.dm_alloc(sl, n * 4) };
            if !LATE {
                x.sc = k.dm_alloc(sl, n * 2);
                x.scv = k.vrf_alloc(sl, ROWS);
            }
            if !central {
                x.rp = k.dm_alloc(sl, n * 4);
                x.g = k.dm_alloc(sl, 256);
                x.ssp = k.vrf_alloc(sl, 1);
            }
        }
        let stage = k.vrf_alloc(sl, 1024);
        let xt = k.trf_alloc(sl, kd);
        let mut t = vec![];
        if n > 0 && !LATE {
            t.push(k.copy(x.engs[0], wsc.at(x.r0 as u64 * 2), x.sc.at(0), n * 2, pk(n * 2, PACKET)));
        }
        ops.push((xd, t));
        xts.push(xt);
        stages.push(stage);
    }
    let ntiles = |x: &Sl| x.tiles.len() as u32;
    let issue_load = |k: &mut Ctx, x: &Sl, t: u32| -> Vec<Token> {
        let b = (t as usize) % BUFFERS;
        let (r, tr) = x.tiles[t as usize];
        let mut v = vec![];
        for m in 0..SPLIT as u32 {
            let a = tr / 8 * m / SPLIT as u32 * 8;
            let z = tr / 8 * (m + 1) / SPLIT as u32 * 8;
            if z > a {
                v.push(load_rows(k, x.engs[m as usize], wo.addr + ((r + a) * kd) as u64, x.bufs[b].at(a * pitch), z - a, kd, kd, pitch));
            }
        }
        v
    };
    // the first weight tile, then the operand, then the other tiles of the ring
    for (i, x) in sls.iter_mut().enumerate() {
        for t in 0..(BUFFERS as u32).min(ntiles(x)) {
            let l = issue_load(k, x, t);
            x.loads.push(l);
            if t == 0 {
                let xd = ops[i].0;
                ops[i].1.insert(0, k.copy(x.engs[0], attn.at(0), xd.at(0), kd * 2, pk(kd * 2, PACKET)));
            }
        }
        if ntiles(x) == 0 {
            let xd = ops[i].0;
            ops[i].1.insert(0, k.copy(x.engs[0], attn.at(0), xd.at(0), kd * 2, pk(kd * 2, PACKET)));
        }
    }
    // epilogue vectors on slice 0, queued behind its first tiles
    let mut epi = vec![];
    if central {
        epi = load_pair(k, e0, resid, post, dvec, h * 2);
    } else {
        for x in sls.iter() {
            let n = x.r1 - x.r0;
            if n > 0 {
                let a = Hbm { addr: resid.addr + x.r0 as u64 * 2, bytes: n as u64 * 2 };
                let b = Hbm { addr: post.addr + x.r0 as u64 * 2, bytes: n as u64 * 2 };
                epi.extend(load_pair(k, x.engs[0], a, b, x.rp, n * 2));
            }
        }
    }
    if LATE {
        epi.push(k.copy(e0, wsc.at(0), dsc_all.at(0), h * 2, pk(h * 2, PACKET)));
    }
    // operands: attn (bf16) → TRF, all slices' vector engines at once
    let mut vt = vec![];
    for (i, (xd, t)) in ops.into_iter().enumerate() {
        k.wait_all(t);
        let st = stages[i].sub(0, ch);
        let mut last = None;
        for c in 0..kd / ch {
            let _ = k.vload(xd.at(c * ch * 2), Dt::Bf16, st);
            last = Some(k.vtrf(st, xts[i].sub(c * ch, ch)));
        }
        vt.push(last.unwrap());
    }
    k.wait_all(vt);

    let maxt = sls.iter().map(|x| ntiles(x)).max().unwrap_or(0);
    for t in 0..maxt {
        let b = (t as usize) % BUFFERS;
        let mut passes: Vec<Option<Token>> = vec![];
        for (i, x) in sls.iter_mut().enumerate() {
            if t >= ntiles(x) {
                passes.push(None);
                continue;
            }
            let (_, tr) = x.tiles[t as usize];
            let l = std::mem::take(&mut x.loads[t as usize]);
            k.wait_all(l);
            if let Some(v) = x.vec_tok[b].take() {
                k.wait(v);
            }
            passes.push(Some(k.pass(&Pass {
                slice: x.sl,
                w: Tile { addr: x.bufs[b].addr, rows: tr, cols: kd, pitch, dt: Dt::Fp8E4m3 },
                scales: None,
                x: xts[i],
                acc: x.accs[b].sub(0, tr),
                accumulate: false,
            })));
        }
        for (i, x) in sls.iter_mut().enumerate() {
            let p = match passes[i].take() {
                Some(p) => p,
                None => continue,
            };
            k.wait(p);
            let (r, tr) = x.tiles[t as usize];
            let acc = x.accs[b].sub(0, tr);
            if !LATE {
                let sv = x.scv.sub(0, tr);
                let _ = k.vload(x.sc.at((r - x.r0) * 2), Dt::Bf16, sv);
                let _ = k.vmul(acc, sv, acc);
            }
            if !central {
                let _ = k.vsumsq(acc, x.ssp, t > 0);
            }
            x.vec_tok[b] = Some(k.vstore(acc, x.o.at((r - x.r0) * 4), Dt::F32));
            if t + (BUFFERS as u32) < ntiles(x) {
                let l = issue_load(k, x, t + BUFFERS as u32);
                x.loads.push(l);
            }
        }
    }

    if !central {
        distributed_epilogue(k, &mut sls, &stages, h, out, epi);
        return;
    }
    // gather o on slice 0
    let mut g = vec![];
    for x in sls.iter_mut() {
        for v in x.vec_tok.iter_mut() {
            if let Some(v) = v.take() {
                k.wait(v);
            }
        }
        let n = x.r1 - x.r0;
        if x.sl == s0 || n == 0 {
            continue;
        }
        if GATHER == 0 {
            g.push(k.copy(x.engs[0], x.o.at(0), scratch.at(x.r0 as u64 * 4), n * 4, pk(n * 4, PACKET)));
        } else {
            g.push(k.switch_copy(x.o.at(0), o_all.at(x.r0 * 4), n * 4));
        }
    }
    k.wait_all(g);
    if GATHER == 0 && SLICES > 1 {
        let a = sls[0].r1;
        if a < h {
            let t = k.copy(e0, scratch.at(a as u64 * 4), o_all.at(a * 4), (h - a) * 4, pk((h - a) * 4, PACKET));
            k.wait(t);
        }
    }
    k.wait_all(epi);

    // out = residual + rmsnorm(o · scale) · post_norm
    let c = chunk_of(h, 512);
    let st = stages[0];
    let (va, vb) = (st.sub(0, c), st.sub(512, c));
    let ss = k.vrf_alloc(s0, 1);
    for i in 0..h / c {
        let _ = k.vload(o_all.at(i * c * 4), Dt::F32, va);
        if LATE {
            let _ = k.vload(dsc_all.at(i * c * 2), Dt::Bf16, vb);
            let _ = k.vmul(va, vb, va);
            let _ = k.vstore(va, o_all.at(i * c * 4), Dt::F32);
        }
        let _ = k.vsumsq(va, ss, i > 0);
    }
    let mut last = None;
    for i in 0..h / c {
        let _ = k.vload(o_all.at(i * c * 4), Dt::F32, va);
        let _ = k.vrms(va, ss, h, 1e-6, va);
        let _ = k.vload(dvec.at(h * 2 + i * c * 2), Dt::Bf16, vb);
        let _ = k.vmul(va, vb, va);
        let _ = k.vload(dvec.at(i * c * 2), Dt::Bf16, vb);
        let _ = k.vadd(va, vb, va);
        last = Some(k.vstore(va, dout.at(i * c * 2), Dt::Bf16));
    }
    k.wait(last.unwrap());
    let t = k.copy(e0, dout.at(0), out.at(0), h * 2, pk(h * 2, PACKET));
    k.wait(t);
}

/// Every slice normalises its own rows: the partial sums of squares go to the
/// first slice over the switch network (as square roots, so that one vsumsq
/// adds them up), the total goes back by a doubling broadcast.
fn distributed_epilogue(k: &mut Ctx, sls: &mut Vec<Sl>, stages: &[Vrf], h: u32, out: Hbm, epi: Vec<Token>) {
    let act: Vec<usize> = (0..sls.len()).filter(|&i| sls[i].r1 > sls[i].r0).collect();
    let root = sls[act[0]].sl;
    let gv = k.vrf_alloc(root, 64);
    let mut parts = vec![];
    for (n, &i) in act.iter().enumerate() {
        let x = &mut sls[i];
        for v in x.vec_tok.iter_mut() {
            if let Some(v) = v.take() {
                k.wait(v);
            }
        }
        let _ = k.vrms(x.ssp, x.ssp, 1, EPS_SQRT, x.ssp); // sqrt(partial)
        parts.push((n as u32, k.vstore(x.ssp, x.g.at(4), Dt::F32)));
    }
    let g0 = sls[act[0]].g;
    let mut sw = vec![];
    for (n, t) in parts {
        k.wait(t);
        let x = &sls[act[n as usize]];
        if x.sl == root {
            let t = k.vload(x.g.at(4), Dt::F32, gv.sub(0, 1));
            k.wait(t);
            let t = k.vstore(gv.sub(0, 1), g0.at(64 + n * 4), Dt::F32);
            sw.push(t);
        } else {
            sw.push(k.switch_copy(x.g.at(4), g0.at(64 + n * 4), 4));
        }
    }
    k.wait_all(sw);
    let m = act.len() as u32;
    let _ = k.vload(g0.at(64), Dt::F32, gv.sub(0, m));
    let _ = k.vsumsq(gv.sub(0, m), gv.sub(m, 1), false);
    let t = k.vstore(gv.sub(m, 1), g0.at(0), Dt::F32);
    k.wait(t);
    // doubling broadcast of the total (4 bytes at g[0])
    let mut have = 1;
    while have < act.len() {
        let mut ts = vec![];
        for i in 0..have.min(act.len() - have) {
            ts.push(k.switch_copy(sls[act[i]].g.at(0), sls[act[i + have]].g.at(0), 4));
        }
        k.wait_all(ts);
        have *= 2;
    }
    k.wait_all(epi);
    let mut outs = vec![];
    for &i in act.iter() {
        let x = &sls[i];
        let n = x.r1 - x.r0;
        let ss = x.ssp;
        let _ = k.vload(x.g.at(0), Dt::F32, ss);
        let mut last = None;
        for r in (0..n).step_by(512) {
            let w = 512.min(n - r);
            let (va, vb) = (stages[i].sub(0, w), stages[i].sub(512, w));
            let _ = k.vload(x.o.at(r * 4), Dt::F32, va);
            let _ = k.vrms(va, ss, h, 1e-6, va);
            let _ = k.vload(x.rp.at(n * 2 + r * 2), Dt::Bf16, vb);
            let _ = k.vmul(va, vb, va);
            let _ = k.vload(x.rp.at(r * 2), Dt::Bf16, vb);
            let _ = k.vadd(va, vb, va);
            last = Some(k.vstore(va, x.o.at(r * 2), Dt::Bf16));
        }
        outs.push(last.unwrap());
    }
    let mut ws = vec![];
    for (j, t) in outs.into_iter().enumerate() {
        k.wait(t);
        let x = &sls[act[j]];
        let n = x.r1 - x.r0;
        ws.push(k.copy(x.engs[0], x.o.at(0), out.at(x.r0 as u64 * 2), n * 2, pk(n * 2, PACKET)));
    }
    k.wait_all(ws);
}

npu::kernels! { attention_output => ao }
