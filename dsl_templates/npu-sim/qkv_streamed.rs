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
// ORDER: 0 issues each slice's whole stream before the next slice's; 1 issues
// tile by tile across the slices. An engine runs its commands in issue order,
// so when slices share a DMA engine (fewer engines than slices per cluster)
// order 0 queues one slice's stream behind another's; order 1 interleaves them.
// ROTATE: 0 gives each slice fixed engines; 1 rotates a slice's tile loads over
// all DMA engines of its cluster (tile t of the slice with cluster index j on
// engine (j + t * slices of the cluster) * SPLIT + m, modulo the engines), so
// that every engine works and each command's startup is shared by more engines;
// 2, where a cluster has more engines than its slices' SPLIT engines, keeps every
// slice's tile loads on its own engines and puts the other DMA commands on the
// spare engines (no short command, and no tile waiting for its buffer, ever
// sits in front of another slice's tile), else as 1; 3 keeps every slice's
// tile loads on its own engines in any case (the other DMA commands on the
// spares first, then on the least-loaded engine).
// LPT > 0: every DMA command goes to the least-loaded engine of its cluster
// (greedy, in issue order), a command counting its bytes plus LPT bytes for
// its startup, so that the short commands (x, norms, scales, outputs) land on
// the engines with fewer weight bytes; 0: the engines SPLIT / ROTATE name.
// FUSE = 1 loads equal-sized small vectors of different tensors with one
// two-level sequencer program (the outer stride is the distance between the
// tensors): x with attn_norm, q_norm with k_norm, and a slice's scale windows
// when they are equally spaced, so that a slice pays 3 DMA startups for its
// small vectors instead of 4 + heads.
// SMALLS = 1 issues a slice's norm and scale loads behind its tile
// 1 + (i % tiles of its first head) instead of right after its first tiles,
// so that these short commands do not stall every engine at the same moment
// (they are needed only by the first head's epilogue). XFIRST = 2 alternates
// 1 and 0 over the slices.
// SMALLS = 2: a DMA command pays its startup however short it is, so only the
// first slice of each cluster loads x | attn_norm (before the first tiles, as
// XFIRST 1), q_norm | k_norm and the three scale vectors whole; the switch
// network (whose copies occupy no DMA engine) hands x | attn_norm to the
// cluster's other slices through a doubling tree (a slice forwards it as soon
// as it has it), and each of them its norms and its heads' scale windows.
use npu::*;

// Searched (the template's params):
const SLICES: usize = ${SLICES};
const PACKET: u32 = ${PACKET};
const ROWS: u32 = ${ROWS};
const BUFFERS: usize = ${BUFFERS};
const STAGGER: u32 = ${STAGGER};
const ROTATE: u32 = ${ROTATE};
const LPT: u32 = ${LPT};
const SMALLS: u32 = ${SMALLS};

// Fixed choices, not searched: set back to these values, each cost under 0.5 % in geomean over the 24 best designs
// known on generated chips (tools/bench/search_results.md, session 28):
const SPLIT: usize = 1;  // each slice streams its tiles through one engine: a cluster has fewer engines than slices, so more per slice only queues behind other slices
const XFIRST: u32 = 1;  // the operand load goes before the first tile on every other slice and after it on the rest, so half the slices stream weights at once
const XCHUNK: u32 = 960;  // x normalised in chunks of at most 960 elements (two chunks fit the VRF beside the head state)
const ORDER: u32 = 1;  // commands issued tile by tile across the slices: an engine runs its commands in issue order
const FUSE: u32 = 1;  // the small vectors (x with its norm, equally spaced scales) loaded by one two-level sequencer program each

#[derive(Clone, Copy)]
struct Tl {
    m: usize,  // matrix: 0 q, 1 k, 2 v
    hh: u32,   // head within the matrix
    r: u32,    // first row within the head
    tr: u32,   // rows
    hi: usize, // index of the head among the slice's heads
}

struct Sq {
    sl: usize,
    cc: usize,
    j: usize,
    ncl: usize,
    ne: usize,
    engs: Vec<Engine>,
    tiles: Vec<Tl>,
    heads: Vec<(usize, u32)>,
    dxn: Dm,
    dg: Dm,
    dsc: Dm,
    sw: u32,
    soff: Vec<u32>,
    douts: Dm,
    bufs: Vec<Dm>,
    vb: Vrf,
    ss: Vrf,
    xt: Trf,
    loads: Vec<Vec<Token>>,
    passes: Vec<Token>,
    head_done: Vec<Option<Token>>,
    tx: Vec<Token>,
    tv: Vec<Token>,
    vt: Option<Token>,
    xfirst: bool,
    sp: usize,
    full: Dm,
}

/// The engines' loads (bytes + LPT per command) and short-command counts per cluster. With
/// ROTATE 2 or 3, the engines from spare0 on (after the slices' own) are spares: a spare runs its
/// short commands one after another, each paying its startup, so it takes at most cap (as
/// many as a slice has tiles); the rest go to the least-loaded engine of the cluster.
struct Loads {
    l: std::cell::RefCell<Vec<Vec<u64>>>,
    n: std::cell::RefCell<Vec<Vec<u32>>>,
    spare0: usize,
    cap: u32,
}

/// LPT > 0: the least-loaded engine of cluster c (charged bytes + LPT), among the spares
/// while one has room; else dflt.
fn pick(l: &Loads, c: usize, bytes: u32, dflt: Engine) -> Engine {
    if LPT == 0 {
        return dflt;
    }
    let (mut ld, mut n) = (l.l.borrow_mut(), l.n.borrow_mut());
    let ne = ld[c].len();
    let lo = if l.spare0 > 0 && (l.spare0..ne).any(|e| n[c][e] < l.cap) { l.spare0 } else { 0 };
    let mut b = ne;
    for e in lo..ne {
        if (lo == 0 || n[c][e] < l.cap) && (b == ne || ld[c][e] < ld[c][b]) {
            b = e;
        }
    }
    n[c][b] += 1;
    ld[c][b] += bytes as u64 + LPT as u64;
    engine(c, b)
}

/// The weight tile t of a slice: SPLIT sequencer programs on consecutive engines.
fn load_tile(k: &mut Ctx, el: &Loads, q: &Sq, w: &[Hbm; 3], h: u32, d: u32, t: usize, dep: Option<&Token>) -> Vec<Token> {
    let tl = q.tiles[t];
    let row0 = tl.hh * d + tl.r;
    let buf = q.bufs[t % BUFFERS];
    let mut v = vec![];
    for m in 0..SPLIT as u32 {
        let a = tl.tr / 8 * m / SPLIT as u32 * 8;
        let z = tl.tr / 8 * (m + 1) / SPLIT as u32 * 8;
        if z > a {
            let bytes = (z - a) * h;
            let p = pk(bytes, PACKET);
            let src = w[tl.m].at(((row0 + a) * h) as u64);
            let dst = buf.at(a * h);
            let e = if ROTATE == 1 || (ROTATE == 2 && el.spare0 == 0) { engine(q.cc, ((q.j + t * q.ncl) * SPLIT + m as usize) % q.ne) } else { q.engs[m as usize] };
            let e = if ROTATE == 3 || (ROTATE == 2 && el.spare0 > 0) {
                el.l.borrow_mut()[q.cc][e.index] += bytes as u64 + LPT as u64;
                e
            } else {
                pick(el, q.cc, bytes, e)
            };
            v.push(match dep {
                Some(dd) => k.after(&[dd]).dma(e, src, dst, p, &[lp(bytes / p, p as i64, p as i64)]),
                None => k.dma(e, src, dst, p, &[lp(bytes / p, p as i64, p as i64)]),
            });
        }
    }
    v
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
    let px = pk(h * 2, PACKET);

    // plan every slice: heads, tiles, DM / VRF / TRF
    let mut qs: Vec<Sq> = vec![];
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
        let douts = k.dm_alloc(sl, nheads as u32 * d * 2);
        let bufs: Vec<Dm> = (0..BUFFERS).map(|_| k.dm_alloc(sl, ROWS * h)).collect();
        // VRF: one block; the prologue's stages overlap the accumulators (passes are ordered after it)
        let vb = k.vrf_alloc(sl, (2 * c).max(4 * d) + 8);
        let ss = vb.sub((2 * c).max(4 * d), 1);
        let xt = k.trf_alloc(sl, h);
        // SMALLS 2: the cluster's first slice holds the three scale vectors whole
        let full = if SMALLS == 2 && i < hw.clusters { k.dm_alloc(sl, total_heads * d * 2) } else { Dm { slice: sl, addr: 0, bytes: 0 } };
        let fh = tiles.iter().position(|tl| tl.r + tl.tr == d).unwrap_or(0);
        let sp = if SMALLS == 1 && fh > 0 { 1 + i % fh } else { 0 };
        let xfirst = SMALLS == 2 || XFIRST == 1 || (XFIRST == 2 && i % 2 == 0);
        qs.push(Sq { sl, cc, j, ncl: (nsl + hw.clusters - 1) / hw.clusters, ne: hw.dma_engines_per_cluster, engs, tiles, heads, dxn, dg, dsc, sw, soff: vec![], douts, bufs, vb, ss, xt, loads: vec![], passes: vec![], head_done: vec![], tx: vec![], tv: vec![], vt: None, xfirst, sp, full });
    }

    let ne = hw.dma_engines_per_cluster;
    let ncl = (qs.len() + hw.clusters - 1) / hw.clusters;
    let eload = Loads {
        l: std::cell::RefCell::new(vec![vec![0u64; ne]; hw.clusters]),
        n: std::cell::RefCell::new(vec![vec![0u32; ne]; hw.clusters]),
        spare0: if ROTATE >= 2 && ncl * SPLIT < ne { ncl * SPLIT } else { 0 },
        cap: qs.iter().map(|q| q.tiles.len()).max().unwrap_or(1) as u32,
    };
    // SMALLS 2: every slice's DM regions and heads (for the copies its cluster's first slice
    // issues), the cluster's slices in order, and the tokens of the copies each slice receives
    let nqs = qs.len();
    let plan: Vec<(Dm, Dm, Dm, u32, Vec<(usize, u32)>)> = qs.iter().map(|q| (q.dxn, q.dg, q.dsc, q.sw, q.heads.clone())).collect();
    let members: Vec<Vec<usize>> = (0..hw.clusters).map(|c| (0..nqs).filter(|&i| i % hw.clusters == c).collect()).collect();
    let inx: std::cell::RefCell<Vec<Vec<Token>>> = std::cell::RefCell::new((0..nqs).map(|_| vec![]).collect());
    let inv: std::cell::RefCell<Vec<Vec<Token>>> = std::cell::RefCell::new((0..nqs).map(|_| vec![]).collect());
    let whole: std::cell::RefCell<Vec<Token>> = std::cell::RefCell::new(vec![]);
    // a head's scale window: (matrix, its offset in the matrix's scales, bytes), 256-byte aligned
    let window = |m: usize, hh: u32| -> (u32, u32) {
        let nh = if m == 0 { nq } else { nkv };
        let a = hh * d * 2 / 256 * 256;
        let b = ((hh + 1) * d * 2 + 255) / 256 * 256;
        (a, b.min(nh * d * 2) - a)
    };
    let x_loads_dma = |k: &mut Ctx, q: &mut Sq| {
        if FUSE == 1 {
            let e0 = pick(&eload, q.cc, h * 4, q.engs[0]);
            let st = norm.addr as i64 - x.addr as i64;
            q.tx.push(k.dma(e0, x.at(0), q.dxn.at(0), px, &[lp(2, st, (h * 2) as i64), lp(h * 2 / px, px as i64, px as i64)]));
            return;
        }
        let (e0, el) = (pick(&eload, q.cc, h * 2, q.engs[0]), pick(&eload, q.cc, h * 2, q.engs[SPLIT - 1]));
        q.tx.push(k.copy(e0, x.at(0), q.dxn.at(0), h * 2, px));
        q.tx.push(k.copy(el, norm.at(0), q.dxn.at(h * 2), h * 2, px));
    };
    let x_loads = |k: &mut Ctx, q: &mut Sq| {
        if SMALLS == 2 && q.j > 0 {
            q.tx.extend(inx.borrow_mut()[q.j * hw.clusters + q.cc].drain(..));
            return;
        }
        x_loads_dma(k, q);
        if SMALLS == 2 {
            // the doubling tree: member p gets x | attn_norm from member p - 2^floor(log2 p)
            let ms = &members[q.cc];
            let mut inb = inx.borrow_mut();
            for p in 1..ms.len() {
                let from = p - (1usize << (usize::BITS - 1 - p.leading_zeros()));
                let t = {
                    let deps: Vec<&Token> = if from == 0 { q.tx.iter().collect() } else { inb[ms[from]].iter().collect() };
                    k.after(&deps).switch_copy(plan[ms[from]].0.at(0), plan[ms[p]].0.at(0), h * 4)
                };
                inb[ms[p]].push(t);
            }
        }
    };
    // small vectors (q_norm, k_norm, the heads' scales) and the prologue:
    // xn = bf16(rmsnorm(x) · attn_norm) → TRF
    let smalls = |k: &mut Ctx, q: &mut Sq| {
        let el = q.engs[SPLIT - 1];
        let pd = pk(d * 2, PACKET);
        if SMALLS == 2 && q.j > 0 {
            // the cluster's first slice has sent the norms and this slice's scale windows
            for hi in 0..q.heads.len() {
                let (m, hh) = q.heads[hi];
                q.soff.push(hi as u32 * q.sw + hh * d * 2 - window(m, hh).0);
            }
            q.tv.extend(inv.borrow_mut()[q.j * hw.clusters + q.cc].drain(..));
            return;
        }
        let ndg = q.tv.len();
        if FUSE == 1 {
            let e = pick(&eload, q.cc, d * 4, el);
            let st = kn.addr as i64 - qn.addr as i64;
            q.tv.push(k.dma(e, qn.at(0), q.dg.at(0), pd, &[lp(2, st, (d * 2) as i64), lp(d * 2 / pd, pd as i64, pd as i64)]));
        } else {
            let e = pick(&eload, q.cc, d * 2, el);
            q.tv.push(k.copy(e, qn.at(0), q.dg.at(0), d * 2, pd));
            let e = pick(&eload, q.cc, d * 2, el);
            q.tv.push(k.copy(e, kn.at(0), q.dg.at(d * 2), d * 2, pd));
        }
        // the heads' scale windows (HBM address, bytes)
        let mut win: Vec<(u64, u32)> = vec![];
        for hi in 0..q.heads.len() {
            let (m, hh) = q.heads[hi];
            let nh = if m == 0 { nq } else { nkv };
            let a = hh * d * 2 / 256 * 256;
            let b = ((hh + 1) * d * 2 + 255) / 256 * 256;
            let wl = b.min(nh * d * 2) - a;
            q.soff.push(hi as u32 * q.sw + hh * d * 2 - a);
            win.push((wsc[m].addr + a as u64, wl));
        }
        let n = win.len();
        let same = n >= 2 && win.iter().all(|w| w.1 == win[0].1) && (2..n).all(|i| win[i].0 as i64 - win[i - 1].0 as i64 == win[1].0 as i64 - win[0].0 as i64);
        if FUSE == 1 && same {
            let wl = win[0].1;
            let p = pk(wl, PACKET);
            let e = pick(&eload, q.cc, wl * n as u32, el);
            let st = win[1].0 as i64 - win[0].0 as i64;
            q.tv.push(k.dma(e, Loc::Hbm(win[0].0), q.dsc.at(0), p, &[lp(n as u32, st, q.sw as i64), lp(wl / p, p as i64, p as i64)]));
        } else {
            for (hi, &(src, wl)) in win.iter().enumerate() {
                let e = pick(&eload, q.cc, wl, el);
                q.tv.push(k.copy(e, Loc::Hbm(src), q.dsc.at(hi as u32 * q.sw), wl, pk(wl, PACKET)));
            }
        }
        if SMALLS == 2 {
            // the three scale vectors whole (k and v in one program with FUSE 1), then the norms
            // and every other slice's scale windows over the switch
            let base = [0, nq * d * 2, (nq + nkv) * d * 2];
            let mut wh = whole.borrow_mut();
            let w0 = wh.len();
            let pq = pk(nq * d * 2, PACKET);
            let e = pick(&eload, q.cc, nq * d * 2, el);
            wh.push(k.copy(e, wsc[0].at(0), q.full.at(0), nq * d * 2, pq));
            let pkv = pk(nkv * d * 2, PACKET);
            if FUSE == 1 {
                let e = pick(&eload, q.cc, nkv * d * 4, el);
                let st = wsc[2].addr as i64 - wsc[1].addr as i64;
                wh.push(k.dma(e, wsc[1].at(0), q.full.at(base[1]), pkv, &[lp(2, st, (nkv * d * 2) as i64), lp(nkv * d * 2 / pkv, pkv as i64, pkv as i64)]));
            } else {
                for m in 1..3 {
                    let e = pick(&eload, q.cc, nkv * d * 2, el);
                    wh.push(k.copy(e, wsc[m].at(0), q.full.at(base[m]), nkv * d * 2, pkv));
                }
            }
            let ms = &members[q.cc];
            let mut inb = inv.borrow_mut();
            for &mi in ms.iter().skip(1) {
                let (_, dg, dsc, sw, ref heads) = plan[mi];
                let t = {
                    let deps: Vec<&Token> = q.tv[ndg..ndg + if FUSE == 1 { 1 } else { 2 }].iter().collect();
                    k.after(&deps).switch_copy(q.dg.at(0), dg.at(0), d * 4)
                };
                inb[mi].push(t);
                for (hi, &(m, hh)) in heads.iter().enumerate() {
                    let (a, wl) = window(m, hh);
                    let dep = &wh[w0 + if FUSE == 1 { m.min(1) } else { m }];
                    let t = k.after(&[dep]).switch_copy(q.full.at(base[m] + a), dsc.at(hi as u32 * sw), wl);
                    inb[mi].push(t);
                }
            }
        }
    };
    let prologue = |k: &mut Ctx, q: &mut Sq| {
        if SMALLS != 1 {
            smalls(k, q);
        }
        let txr: Vec<&Token> = q.tx.iter().collect();
        let (va, vg) = (q.vb.sub(0, c), q.vb.sub(c, c));
        for p in 0..h / c {
            let _ = k.after(&txr).vload(q.dxn.at(p * c * 2), Dt::Bf16, va);
            let _ = k.after(&txr).vsumsq(va, q.ss, p > 0);
        }
        let mut vt = None;
        for p in 0..h / c {
            let _ = k.after(&txr).vload(q.dxn.at(p * c * 2), Dt::Bf16, va);
            let _ = k.vrms(va, q.ss, h, 1e-6, va);
            let _ = k.after(&txr).vload(q.dxn.at(h * 2 + p * c * 2), Dt::Bf16, vg);
            let _ = k.vmul(va, vg, va);
            vt = Some(k.vtrf(va, q.xt.sub(p * c, c)));
        }
        q.vt = vt;
    };
    let mut outs_all: Vec<(Engine, Loc, Loc, u32, Token, (usize, usize, u32))> = vec![];
    // tile t of a slice: its load (t >= BUFFERS: after the pass that last read the buffer),
    // its pass, and when it completes a head, that head's epilogue
    let step = |k: &mut Ctx, q: &mut Sq, outs_all: &mut Vec<(Engine, Loc, Loc, u32, Token, (usize, usize, u32))>, t: usize| {
        if t >= BUFFERS {
            let l = load_tile(k, &eload, q, &w, h, d, t, Some(&q.passes[t - BUFFERS]));
            q.loads.push(l);
        }
        if SMALLS == 1 && t == q.sp {
            smalls(k, q);
        }
        let tl = q.tiles[t];
        let nheads = q.heads.len();
        let acc = q.vb.sub((tl.hi as u32 % 2) * d, d);
        let mut deps: Vec<&Token> = q.loads[t].iter().collect();
        deps.push(q.vt.as_ref().unwrap());
        if tl.hi >= 2 {
            deps.push(q.head_done[tl.hi - 2].as_ref().unwrap());
        }
        let p = k.after(&deps).pass(&Pass {
            slice: q.sl,
            w: Tile { addr: q.bufs[t % BUFFERS].addr, rows: tl.tr, cols: h, pitch: h, dt: Dt::Fp8E4m3 },
            scales: None,
            x: q.xt,
            acc: acc.sub(tl.r, tl.tr),
            accumulate: false,
        });
        if tl.r + tl.tr == d {
            // head complete: scale, RMSNorm · gamma, RoPE (q, k), bf16, write
            let scv = q.vb.sub(2 * d, d);
            let gv = q.vb.sub(3 * d, d);
            let mut ad: Vec<&Token> = q.tv.iter().collect();
            ad.push(&p);
            let _ = k.after(&ad).vload(q.dsc.at(q.soff[tl.hi]), Dt::Bf16, scv);
            let _ = k.after(&ad).vmul(acc, scv, acc);
            if tl.m < 2 {
                let _ = k.after(&ad).vsumsq(acc, q.ss, false);
                let _ = k.after(&ad).vrms(acc, q.ss, d, 1e-6, acc);
                let _ = k.after(&ad).vload(q.dg.at(tl.m as u32 * d * 2), Dt::Bf16, gv);
                let _ = k.after(&ad).vmul(acc, gv, acc);
                let _ = k.after(&ad).vrope(acc, acc, pos, d, 10000.0);
            }
            let st = k.after(&ad).vstore(acc, q.douts.at(tl.hi as u32 * d * 2), Dt::Bf16);
            let dst = match tl.m {
                0 => q_out.at((tl.hh * d * 2) as u64),
                1 => kc.at(((tl.hh * cl + slot) * d * 2) as u64),
                _ => vc.at(((tl.hh * cl + slot) * d * 2) as u64),
            };
            outs_all.push((pick(&eload, q.cc, d * 2, q.engs[tl.hi % SPLIT]), q.douts.at(tl.hi as u32 * d * 2), dst, d * 2, st, (q.sl, tl.m, tl.hh)));
            // accumulator reuse two heads later is ordered after this head's store
            let hd = if tl.hi + 2 < nheads { Some(k.after(&[&outs_all.last().unwrap().4]).vcopy(q.ss, q.ss)) } else { None };
            q.head_done.push(hd);
        }
        q.passes.push(p);
    };
    if ORDER == 0 {
        for q in qs.iter_mut() {
            if q.xfirst {
                x_loads(k, q);
            }
            for t in 0..BUFFERS.min(q.tiles.len()) {
                let l = load_tile(k, &eload, q, &w, h, d, t, None);
                q.loads.push(l);
            }
            if !q.xfirst {
                x_loads(k, q);
            }
            prologue(k, q);
            for t in 0..q.tiles.len() {
                step(k, q, &mut outs_all, t);
            }
        }
    } else {
        for q in qs.iter_mut() {
            if q.xfirst {
                x_loads(k, q);
            }
        }
        for t in 0..BUFFERS {
            for q in qs.iter_mut() {
                if t < q.tiles.len() {
                    let l = load_tile(k, &eload, q, &w, h, d, t, None);
                    q.loads.push(l);
                }
            }
        }
        for q in qs.iter_mut() {
            if !q.xfirst {
                x_loads(k, q);
            }
            prologue(k, q);
        }
        let nt = qs.iter().map(|q| q.tiles.len()).max().unwrap_or(0);
        for t in 0..nt {
            for q in qs.iter_mut() {
                if t < q.tiles.len() {
                    step(k, q, &mut outs_all, t);
                }
            }
        }
    }
    for q in qs.into_iter() {
        for l in q.loads {
            for t in l {
                drop_token(t);
            }
        }
        for t in q.tx.into_iter().chain(q.tv.into_iter()).chain(q.passes.into_iter()).chain(q.head_done.into_iter().flatten()) {
            drop_token(t);
        }
        if let Some(t) = q.vt {
            drop_token(t);
        }
    }
    for t in whole.into_inner() {
        drop_token(t); // ordered before the switch copies that read them
    }
    // output writes, queued last on every engine (after their vstores); a slice's consecutive
    // heads of one matrix are one command (every command pays a startup): contiguous in q_out,
    // a head's cache row apart in k_cache / v_cache (a two-level program)
    let mut outs: Vec<Option<(Engine, Loc, Loc, u32, Token, (usize, usize, u32))>> = outs_all.into_iter().map(Some).collect();
    let mut ws = vec![];
    for i in 0..outs.len() {
        let (e, src, dst, n, st, (sl, m, hh)) = match outs[i].take() {
            Some(o) => o,
            None => continue,
        };
        let mut sts = vec![st];
        let mut run = 1u32;
        while let Some(j) = (i + 1..outs.len()).find(|&j| matches!(&outs[j], Some(o) if o.5 == (sl, m, hh + run))) {
            sts.push(outs[j].take().unwrap().4);
            run += 1;
        }
        let p = pk(n, PACKET);
        let stride = if m == 0 { n as i64 } else { (cl * d * 2) as i64 };
        let deps: Vec<&Token> = sts.iter().collect();
        ws.push(k.after(&deps).dma(e, src, dst, p, &[lp(run, n as i64, stride), lp(n / p, p as i64, p as i64)]));
        for t in sts {
            drop_token(t);
        }
    }
    k.wait_all(ws);
}

npu::kernels! { project_qkv => qkv }
