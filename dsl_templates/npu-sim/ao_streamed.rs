// attention_output, design family "streamed_after": every command of the
// kernel is issued up front, ordered on the device with `k.after`, so that the
// host never waits in the middle and every fixed cost (DMA startup, pass issue,
// vector / switch setup) overlaps the weight stream. The hidden rows of wo are
// split evenly (multiples of 8 rows) over SLICES slices of both clusters; each
// slice streams its rows in tiles of ROWS rows through a ring of BUFFERS DM
// buffers (a tile's load is ordered after the pass that last used its buffer),
// one sequencer program per tile part, SPLIT parts on consecutive engines,
// packets of at most PACKET bytes. STAGGER > 1 gives slice i a first tile of
// (i % STAGGER + 1) / STAGGER of ROWS rows so that startups do not line up.
// XFIRST = 1 loads the operand before the first weight tile, 0 after it.
// Per-row scale and sum of squares per tile (SCALE_LATE = 0) or once at the
// end (1). Distributed epilogue: every slice normalises its own rows; the
// partial sums of squares are exchanged through HBM (GATHER = 0: each slice
// writes its partial, every slice reads all of them with one strided
// program), or over the switch network to the first slice and back by a
// doubling broadcast (1), or all-to-all over the switch network (2), or over
// the switch network to the first slice, which writes the total to HBM for
// every other slice to read (3), or writes the partials as they are for every
// other slice to read and add up (4).
// ORDER: 0 issues each slice's whole stream before the next slice's; 1 issues
// tile by tile across the slices. An engine runs its commands in issue order,
// so when slices share a DMA engine (fewer engines than slices per cluster)
// order 0 queues one slice's stream behind another's; order 1 interleaves them.
// ROTATE: 0 gives each slice fixed engines; 1 rotates a slice's tile loads over
// all DMA engines of its cluster (tile t of the slice with cluster index j on
// engine (j + t * slices of the cluster) * SPLIT + m, modulo the engines); 2,
// where a cluster has more engines than its slices' SPLIT engines, keeps every
// slice's tile loads on its own engines and puts the other DMA commands on the
// spare engines (no short command, and no tile waiting for its buffer, ever
// sits in front of another slice's tile), else as 1; 3 keeps every slice's
// tile loads on its own engines in any case (the other DMA commands on the
// spares first, then on the least-loaded engine).
// BALANCE: 1 cuts the rows after the first tile into ceil(rest / ROWS) tiles
// of near-equal size (no short remainder tile whose pass issue cannot hide
// behind a load; with STAGGER 1 the first tile is one of them); 0 cuts tiles
// of ROWS rows and a remainder.
// GRAIN: the slices' row ranges are multiples of GRAIN rows; 128 rows of bf16
// output are 256 bytes, so every slice's output write is HBM-aligned (falls
// back to 8 when hidden is not a multiple of GRAIN or has too few of them).
// SMALLS: 0 loads the small vectors (scale, post_norm, residual) right after
// the first tiles; 1 spreads them over the stream, slice i's v-th vector
// behind its tile 1 + (i % (tiles - 1)) + v, so that the startups of these
// short commands do not stall every engine at the same moment (with
// SCALE_LATE = 0 the tiles before them are scaled in one catch-up).
// SMALLS 2: each DMA command pays its startup however small it is, so the
// first slice of each cluster loads the operand and the three small vectors
// whole, once per cluster, and the switch network (whose copies do not occupy
// a DMA engine) hands every other slice of the cluster the operand (a
// doubling tree: a slice forwards it as soon as it has it) and its window of
// each small vector; a cluster issues 4 short DMA commands instead of 4 per
// slice (the operand before the first tiles, as XFIRST 1).
// XFIRST = 2 alternates 1 and 0 over the slices.
// LPT > 0: every DMA command goes to the least-loaded engine of its cluster
// (greedy, in issue order), a command counting its bytes plus LPT bytes for
// its startup: short commands (operand, small vectors, epilogue) land on the
// engines with fewer weight bytes (with ROTATE 2 and spare engines: every
// command but the tile loads, among the spares). 0: the engines that SPLIT /
// ROTATE name.
use npu::*;

// Searched (the template's params):
const SLICES: usize = ${SLICES};
const PACKET: u32 = ${PACKET};
const ROWS: u32 = ${ROWS};
const STAGGER: u32 = ${STAGGER};
const GATHER: u32 = ${GATHER};
const ROTATE: u32 = ${ROTATE};
const GRAIN: u32 = ${GRAIN};
const SMALLS: u32 = ${SMALLS};

// Fixed choices, not searched: set back to these values, each cost under 0.5 % in geomean over the 24 best designs
// known on generated chips (tools/bench/search_results.md, session 28):
const SPLIT: usize = 1;  // each slice streams its tiles through one engine: a cluster has fewer engines than slices, so more per slice only queues behind other slices
const BUFFERS: usize = 2;  // double buffering: a tile loads while the previous one is in its pass; a deeper ring takes DM that larger tiles use better
const XFIRST: u32 = 2;  // the operand load goes before the first tile on every other slice and after it on the rest, so half the slices stream weights at once
const SCALE_LATE: u32 = 0;  // scale and sum of squares per tile, inside the stream, not as a serial pass at the end
const BCAST: u32 = 0;  // the total goes back down a doubling tree (log2 steps), used by GATHER 1 only
const TAIL: u32 = 0;  // no short tile of its own at the end
const SKEW: u32 = 0;  // no byte offset between the buffers of the ring
const ORDER: u32 = 1;  // commands issued tile by tile across the slices: an engine runs its commands in issue order
const BALANCE: u32 = 1;  // the rows after the first tile cut into near-equal tiles, so no short remainder pass is left exposed
const LPT: u32 = 262144;  // least-loaded engine placement, a command weighed as its bytes plus this much for its startup

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
    let spc = hw.slices_per_cluster;
    let gr = if h % GRAIN == 0 && h / GRAIN >= SLICES as u32 { GRAIN } else { 8 };
    let g8 = h / gr;
    let nslices = SLICES.min(g8 as usize);
    let scratch = if GATHER == 0 || GATHER >= 3 { k.hbm_alloc(nslices as u64 * 256) } else { Hbm { addr: 0, bytes: 0 } };
    let ch = chunk_of(kd, 512);

    struct Sl {
        sl: usize,
        cc: usize,
        j: usize,
        engs: Vec<Engine>,
        r0: u32,
        n: u32,
        tiles: Vec<(u32, u32)>,
        acc: Vrf,
        scv: Vrf,
        res: Vrf,
        pst: Vrf,
        ssp: Vrf,
        tmp: Vrf,
        vec: Dm,
        g: Dm,
        o: Dm,
        xd: Dm,
        full: Dm,
        xt: Trf,
        bufs: Vec<Dm>,
        loads: Vec<Vec<Token>>,
        passes: Vec<Token>,
        tx: Option<Token>,
        vt: Option<Token>,
        vlast: Option<Token>,
        last: Option<Token>,
        ep: Vec<Token>,
        woff: u32,
        wl: u32,
        xfirst: bool,
        q: usize,
        nsm: usize,
        sq: bool,
        defer: Option<(u32, u32)>,
    }
    let mut sls: Vec<Sl> = vec![];
    for i in 0..nslices {
        let c = i % hw.clusters;
        let j = i / hw.clusters;
        let sl = c * spc + j;
        let r0 = (i as u32 * g8 / nslices as u32) * gr;
        let r1 = ((i as u32 + 1) * g8 / nslices as u32) * gr;
        let n = r1 - r0;
        let engs: Vec<Engine> = (0..SPLIT).map(|m| engine(c, (j * SPLIT + m) % hw.dma_engines_per_cluster)).collect();
        let first = ((ROWS * (i as u32 % STAGGER + 1) / STAGGER) / 8 * 8).max(8);
        let mut tiles = vec![];
        let mut r = r0;
        if BALANCE == 1 {
            // STAGGER 1: the first tile is one of the balanced ones
            let f = if STAGGER == 1 { ((n / 8 + (n + ROWS - 1) / ROWS - 1) / ((n + ROWS - 1) / ROWS) * 8).max(8).min(n) } else { first.min(n) };
            tiles.push((r, f));
            let rest = n - f;
            let m = (rest + ROWS - 1) / ROWS;
            for q in 0..m {
                let (a, b) = (q * (rest / 8) / m * 8, (q + 1) * (rest / 8) / m * 8);
                if b > a {
                    tiles.push((r + f + a, b - a));
                }
            }
        } else {
            let r1t = if TAIL > 0 && r1 - r0 > TAIL { r1 - TAIL } else { r1 };
            while r < r1 {
                let lim = if r < r1t { r1t } else { r1 };
                let tr = (if r == r0 { first } else { ROWS }).min(lim - r);
                tiles.push((r, tr));
                r += tr;
            }
        }
        let nt = tiles.len();
        let q = if SMALLS == 1 && nt > 1 { 1 + i % (nt - 1) } else { 0 };
        let xfirst = XFIRST == 1 || (XFIRST == 2 && i % 2 == 0);
        let acc = k.vrf_alloc(sl, n);
        let scv = k.vrf_alloc(sl, n);
        let res = k.vrf_alloc(sl, n);
        let tmp = k.vrf_alloc(sl, ch);
        let pst = k.vrf_alloc(sl, n);
        let ssp = k.vrf_alloc(sl, 64);
        let vec = k.dm_alloc(sl, (n * 2 + 512).min(h * 2) * 3); // scale, residual, post_norm windows (bf16)
        let g = k.dm_alloc(sl, 512 + nslices as u32 * 4);
        let o = k.dm_alloc(sl, n * 2);
        let xd = k.dm_alloc(sl, kd * 2);
        // SMALLS 2: the cluster's first slice holds the three small vectors whole
        let full = if SMALLS == 2 && i < hw.clusters { k.dm_alloc(sl, h * 2 * 3) } else { Dm { slice: sl, addr: 0, bytes: 0 } };
        let bufs: Vec<Dm> = (0..BUFFERS).map(|_| k.dm_alloc(sl, ROWS * kd + SKEW)).collect();
        let xt = k.trf_alloc(sl, kd);
        sls.push(Sl { sl, cc: c, j, engs, r0, n, tiles, acc, scv, res, pst, ssp, tmp, vec, g, o, xd, full, xt, bufs, loads: vec![], passes: vec![], tx: None, vt: None, vlast: None, last: None, ep: vec![], woff: 0, wl: 0, xfirst, q, nsm: 0, sq: false, defer: None });
    }
    let ncl = (nslices + hw.clusters - 1) / hw.clusters;
    // SMALLS 2: per cluster, its first slice's whole-vector buffer and the tokens of its loads
    let leads: Vec<Dm> = (0..hw.clusters).map(|c| if c < nslices { sls[c].full } else { sls[0].full }).collect();
    let whole: std::cell::RefCell<Vec<Vec<Option<Token>>>> = std::cell::RefCell::new((0..hw.clusters).map(|_| vec![None, None, None]).collect());
    let ne = hw.dma_engines_per_cluster;
    let eload = std::cell::RefCell::new(vec![vec![0u64; ne]; hw.clusters]);
    // ROTATE 2 / 3: the engines after the slices' own (SPLIT per slice) are spares. A spare runs
    // its short commands one after another, each paying its startup, so it takes at most as
    // many as a slice has tiles (a startup counted as a tile's transfer); the rest go to the
    // least-loaded engine of the cluster
    let spare0 = if ROTATE >= 2 && ncl * SPLIT < ne { ncl * SPLIT } else { 0 };
    let cap = sls.iter().map(|x| x.tiles.len()).max().unwrap_or(1) as u32;
    let scount = std::cell::RefCell::new(vec![vec![0u32; ne]; hw.clusters]);
    let pick = |c: usize, bytes: u32, dflt: Engine| -> Engine {
        if LPT == 0 {
            return dflt;
        }
        let mut l = eload.borrow_mut();
        let mut n = scount.borrow_mut();
        let lo = if spare0 > 0 && (spare0..ne).any(|e| n[c][e] < cap) { spare0 } else { 0 };
        let mut b = ne;
        for e in lo..ne {
            if (lo == 0 || n[c][e] < cap) && (b == ne || l[c][e] < l[c][b]) {
                b = e;
            }
        }
        n[c][b] += 1;
        l[c][b] += bytes as u64 + LPT as u64;
        engine(c, b)
    };
    // epilogue DMA commands: an engine prepares only the command after the one
    // it is running, so a third command queued behind two epilogue commands
    // pays its startup on the critical path; spread them, fewest first
    let tcount = std::cell::RefCell::new(vec![vec![0u32; ne]; hw.clusters]);
    let pick_tail = |c: usize, bytes: u32, dflt: Engine| -> Engine {
        if LPT == 0 {
            return dflt;
        }
        let mut l = eload.borrow_mut();
        let mut n = tcount.borrow_mut();
        let mut b = 0;
        for e in 1..ne {
            if (n[c][e], l[c][e]) < (n[c][b], l[c][b]) {
                b = e;
            }
        }
        n[c][b] += 1;
        l[c][b] += bytes as u64 + LPT as u64;
        engine(c, b)
    };

    // per slice: operand, weight ring, passes, per-tile vector work; no host waits
    let load = |k: &mut Ctx, x: &Sl, t: usize, dep: Option<&Token>| -> Vec<Token> {
        let (r, tr) = x.tiles[t];
        let buf = x.bufs[t % BUFFERS];
        let mut v = vec![];
        for m in 0..SPLIT as u32 {
            let a = tr / 8 * m / SPLIT as u32 * 8;
            let z = tr / 8 * (m + 1) / SPLIT as u32 * 8;
            if z > a {
                let bytes = (z - a) * kd;
                let p = pk(bytes, PACKET);
                let src = wo.at(((r + a) * kd) as u64);
                let dst = buf.at(a * kd);
                let e = if ROTATE == 1 || (ROTATE == 2 && spare0 == 0) { engine(x.cc, ((x.j + t * ncl) * SPLIT + m as usize) % ne) } else { x.engs[m as usize] };
                let e = if ROTATE == 3 || (ROTATE == 2 && spare0 > 0) {
                    eload.borrow_mut()[x.cc][e.index] += bytes as u64 + LPT as u64;
                    e
                } else {
                    pick(x.cc, bytes, e)
                };
                let t = match dep {
                    Some(d) => k.after(&[d]).dma(e, src, dst, p, &[lp(bytes / p, p as i64, p as i64)]),
                    None => k.dma(e, src, dst, p, &[lp(bytes / p, p as i64, p as i64)]),
                };
                v.push(t);
            }
        }
        v
    };
    let x_load = |k: &mut Ctx, x: &mut Sl| {
        if SMALLS == 2 {
            return; // loaded once per cluster and fanned out over the switch (below)
        }
        let e = pick(x.cc, kd * 2, x.engs[0]);
        x.tx = Some(k.copy(e, attn.at(0), x.xd.at(0), kd * 2, pk(kd * 2, PACKET)));
    };
    let first_load = |k: &mut Ctx, x: &mut Sl, t: usize| {
        if t < x.tiles.len() {
            let l = load(k, x, t, None);
            x.loads.push(l);
        }
    };
    // small vector v (0 scale, 1 post_norm, 2 residual) of the slice's rows,
    // in a 256-aligned window, and its VRF load
    let small = |k: &mut Ctx, x: &mut Sl, v: u32, el: Engine| {
        let (wa, wb) = (x.r0 * 2 / 256 * 256, ((x.r0 + x.n) * 2 + 255) / 256 * 256);
        let wb = wb.min(h * 2);
        let wl = wb - wa;
        x.woff = x.r0 * 2 - wa;
        x.wl = wl;
        let pv = pk(wl, PACKET);
        let (src, dst) = match v {
            0 => (wsc, x.scv),
            1 => (post, x.pst),
            _ => (resid, x.res),
        };
        let (t, l) = if SMALLS == 2 {
            // the cluster's first slice loads the whole vector once; the others copy their
            // window of it over the switch
            let lead = &leads[x.cc];
            let mut have = whole.borrow_mut();
            if x.sl == lead.slice {
                let el = pick(x.cc, h * 2, el);
                have[x.cc][v as usize] = Some(k.copy(el, src.at(0), lead.at(v * h * 2), h * 2, pk(h * 2, PACKET)));
                let l = k.after(&[have[x.cc][v as usize].as_ref().unwrap()]).vload(lead.at(v * h * 2 + x.r0 * 2), Dt::Bf16, dst);
                (None, l)
            } else {
                let w = have[x.cc][v as usize].as_ref().unwrap();
                let t = k.after(&[w]).switch_copy(lead.at(v * h * 2 + wa), x.vec.at(v * wl), wl);
                let l = k.after(&[&t]).vload(x.vec.at(v * wl + x.woff), Dt::Bf16, dst);
                (Some(t), l)
            }
        } else {
            let el = pick(x.cc, wl, el);
            let t = k.copy(el, src.at(wa as u64), x.vec.at(v * wl), wl, pv);
            let l = k.after(&[&t]).vload(x.vec.at(v * wl + x.woff), Dt::Bf16, dst);
            (Some(t), l)
        };
        if v == 0 {
            if let Some(o) = x.vlast.replace(l) {
                drop_token(o);
            }
        } else {
            drop_token(l);
        }
        if let Some(t) = t {
            x.ep.push(t);
        }
        x.nsm += 1;
    };
    // operand → TRF; the small vectors behind the first tiles (SMALLS = 0)
    let prologue = |k: &mut Ctx, x: &mut Sl| {
        let tx = x.tx.as_ref().unwrap();
        let mut vt = None;
        for c in 0..kd / ch {
            let st = x.tmp.sub(0, ch);
            let _ = k.after(&[tx]).vload(x.xd.at(c * ch * 2), Dt::Bf16, st);
            vt = Some(k.vtrf(st, x.xt.sub(c * ch, ch)));
        }
        x.vt = vt;
        if SMALLS != 1 {
            let el = x.engs[SPLIT - 1];
            for v in 0..3 {
                small(k, x, v, el);
            }
        }
    };
    // SMALLS = 1: the slice's v-th small vector behind tile q + v; with
    // SCALE_LATE = 0, once scale and post_norm are there, scale the rows of
    // the tiles passed so far in one catch-up
    let smalls_at = |k: &mut Ctx, x: &mut Sl, t: usize| {
        if SMALLS != 1 {
            return;
        }
        while x.nsm < 3 && (t >= x.q + x.nsm || t + 1 >= x.tiles.len()) {
            let e = if ROTATE == 1 || (ROTATE == 2 && spare0 == 0) { engine(x.cc, ((x.j + t * ncl) * SPLIT + SPLIT - 1) % ne) } else { x.engs[SPLIT - 1] };
            let v = x.nsm as u32;
            small(k, x, v, e);
            if SCALE_LATE == 0 && v == 1 && !x.passes.is_empty() {
                let done = x.tiles[x.passes.len() - 1];
                let rows = done.0 + done.1 - x.r0;
                let a = x.acc.sub(0, rows);
                let p = x.passes.last().unwrap();
                let _ = k.after(&[p]).vmul(a, x.scv.sub(0, rows), a);
                let v = k.after(&[p]).vsumsq(a, x.ssp.sub(0, 1), false);
                let v2 = k.after(&[p, &v]).vmul(a, x.pst.sub(0, rows), a);
                drop_token(v);
                if let Some(o) = x.vlast.replace(v2) {
                    drop_token(o);
                }
                x.sq = true;
            }
        }
    };
    let step = |k: &mut Ctx, x: &mut Sl, t: usize| {
        if t >= BUFFERS {
            let l = load(k, x, t, Some(&x.passes[t - BUFFERS]));
            x.loads.push(l);
        }
        smalls_at(k, x, t);
        let (r, tr) = x.tiles[t];
        let off = r - x.r0;
        let mut deps: Vec<&Token> = x.loads[t].iter().collect();
        if t == 0 {
            deps.push(x.vt.as_ref().unwrap());
        }
        let p = k.after(&deps).pass(&Pass {
            slice: x.sl,
            w: Tile { addr: x.bufs[t % BUFFERS].addr, rows: tr, cols: kd, pitch: kd, dt: Dt::Fp8E4m3 },
            scales: None,
            x: x.xt,
            acc: x.acc.sub(off, tr),
            accumulate: false,
        });
        if SCALE_LATE == 0 && x.nsm >= 2 {
            let a = x.acc.sub(off, tr);
            let _ = k.after(&[&p]).vmul(a, x.scv.sub(off, tr), a);
            let v = k.after(&[&p]).vsumsq(a, x.ssp.sub(0, 1), x.sq);
            x.sq = true;
            if t + 1 == x.tiles.len() && (GATHER == 1 || GATHER == 3) {
                // the last tile: its post_norm product waits until the partial is sent (it runs
                // while the first slice adds up the partials)
                x.defer = Some((off, tr));
                if let Some(o) = x.vlast.replace(v) {
                    drop_token(o);
                }
            } else {
                let v2 = k.after(&[&p, &v]).vmul(a, x.pst.sub(off, tr), a);
                drop_token(v);
                if let Some(o) = x.vlast.replace(v2) {
                    drop_token(o);
                }
            }
        }
        x.passes.push(p);
    };
    let finish = |k: &mut Ctx, x: &mut Sl| {
        let lastp = x.passes.pop().unwrap();
        let mut vlast = x.vlast.take().unwrap();
        if SCALE_LATE == 1 {
            let _ = k.after(&[&lastp]).vmul(x.acc, x.scv, x.acc);
            let v = k.after(&[&lastp]).vsumsq(x.acc, x.ssp.sub(0, 1), false);
            drop_token(vlast);
            vlast = k.after(&[&lastp, &v]).vmul(x.acc, x.pst, x.acc);
            drop_token(v);
        }
        // sqrt(partial) so that one vsumsq over all slices' values adds them up
        let _ = k.after(&[&vlast]).vrms(x.ssp.sub(0, 1), x.ssp.sub(0, 1), 1, EPS_SQRT, x.ssp.sub(0, 1));
        drop_token(vlast);
        let st = k.vstore(x.ssp.sub(0, 1), x.g.at(0), Dt::F32);
        if let Some((off, tr)) = x.defer.take() {
            // behind the partial's store on the vector engine, before the normalisation
            let a = x.acc.sub(off, tr);
            drop_token(k.after(&[&lastp]).vmul(a, x.pst.sub(off, tr), a));
        }
        x.last = Some(st);
        x.ep.push(lastp);
        for l in std::mem::take(&mut x.loads) {
            for t in l {
                drop_token(t); // ordered before the passes that read them
            }
        }
        for p in std::mem::take(&mut x.passes) {
            drop_token(p);
        }
        if let Some(t) = x.tx.take() {
            drop_token(t);
        }
        if let Some(t) = x.vt.take() {
            drop_token(t);
        }
    };
    if SMALLS == 2 {
        // the operand: one DMA command per cluster into its first slice, then a doubling tree
        // over the cluster's slices (member p gets it from member p - 2^floor(log2 p))
        for c in 0..hw.clusters.min(nslices) {
            let members: Vec<usize> = (0..nslices).filter(|&i| i % hw.clusters == c).collect();
            let x = &mut sls[members[0]];
            let e = pick(x.cc, kd * 2, x.engs[0]);
            x.tx = Some(k.copy(e, attn.at(0), x.xd.at(0), kd * 2, pk(kd * 2, PACKET)));
            for p in 1..members.len() {
                let from = members[p - (1usize << (usize::BITS - 1 - p.leading_zeros()))];
                let (src, dst) = (sls[from].xd, sls[members[p]].xd);
                let t = k.after(&[sls[from].tx.as_ref().unwrap()]).switch_copy(src.at(0), dst.at(0), kd * 2);
                sls[members[p]].tx = Some(t);
            }
        }
    }
    if ORDER == 0 {
        for x in sls.iter_mut() {
            if x.xfirst {
                x_load(k, x);
                first_load(k, x, 0);
            } else {
                first_load(k, x, 0);
                x_load(k, x);
            }
            for t in 1..BUFFERS {
                first_load(k, x, t);
            }
            prologue(k, x);
            for t in 0..x.tiles.len() {
                step(k, x, t);
            }
            finish(k, x);
        }
    } else {
        for x in sls.iter_mut() {
            if x.xfirst {
                x_load(k, x);
            }
        }
        for x in sls.iter_mut() {
            first_load(k, x, 0);
        }
        for x in sls.iter_mut() {
            if !x.xfirst {
                x_load(k, x);
            }
        }
        for t in 1..BUFFERS {
            for x in sls.iter_mut() {
                first_load(k, x, t);
            }
        }
        for x in sls.iter_mut() {
            prologue(k, x);
        }
        let nt = sls.iter().map(|x| x.tiles.len()).max().unwrap_or(0);
        for t in 0..nt {
            for x in sls.iter_mut() {
                if t < x.tiles.len() {
                    step(k, x, t);
                }
            }
        }
        for x in sls.iter_mut() {
            finish(k, x);
        }
    }

    // switch gather: every slice's partial to g[256 + 4 i] of the first slice
    let gather_to_root = |k: &mut Ctx, sls: &mut Vec<Sl>| -> Vec<Token> {
        let root = sls[0].g;
        let mut sw = vec![];
        for (i, x) in sls.iter_mut().enumerate() {
            let st = x.last.take().unwrap();
            sw.push(k.after(&[&st]).switch_copy(x.g.at(0), root.at(256 + i as u32 * 4), 4));
            drop_token(st);
        }
        sw
    };
    // exchange the partials; every slice ends with the total at g[64] (GATHER = 1;
    // 3: g[256 + 64] but the root) or all partials at g[256..] (0, 2, 4)
    let m = sls.len();
    let mut ready: Vec<Vec<Token>> = (0..m).map(|_| vec![]).collect();
    if GATHER == 0 {
        let mut wr = vec![];
        for (i, x) in sls.iter_mut().enumerate() {
            let st = x.last.take().unwrap();
            let e = pick_tail(x.cc, 256, *x.engs.last().unwrap());
            wr.push(k.after(&[&st]).copy(e, x.g.at(0), scratch.at(i as u64 * 256), 256, 256));
            ready[i].push(st);
        }
        let refs: Vec<&Token> = wr.iter().collect();
        let mut rd = vec![];
        for x in sls.iter() {
            let e = pick_tail(x.cc, m as u32 * 4, *x.engs.last().unwrap());
            rd.push(k.after(&refs).dma(e, scratch.at(0), x.g.at(256), 4, &[lp(m as u32, 256, 4)]));
        }
        for (i, t) in rd.into_iter().enumerate() {
            ready[i].push(t);
        }
        for t in wr {
            drop_token(t);
        }
    } else if GATHER == 4 {
        // switch gather to the first slice, which writes the partials to HBM as they are; every
        // other slice reads them back and adds them up itself (no vector work at the root
        // between the gather and the write)
        let root = sls[0].g;
        let sw = gather_to_root(k, &mut sls);
        let refs: Vec<&Token> = sw.iter().collect();
        let x0 = &sls[0];
        let e = pick_tail(x0.cc, 256, *x0.engs.last().unwrap());
        let w = k.after(&refs).copy(e, root.at(256), scratch.at(0), 256, 256);
        for i in 1..m {
            let x = &sls[i];
            let e = pick_tail(x.cc, 256, *x.engs.last().unwrap());
            ready[i].push(k.after(&[&w]).copy(e, scratch.at(0), x.g.at(256), 256, 256));
        }
        drop(refs);
        drop_token(w);
        ready[0].extend(sw);
    } else if GATHER == 1 || GATHER == 3 {
        let root = sls[0].g;
        let sw = gather_to_root(k, &mut sls);
        let refs: Vec<&Token> = sw.iter().collect();
        let x0 = &sls[0];
        let all = x0.ssp.sub(8, m as u32);
        let _ = k.after(&refs).vload(root.at(256), Dt::F32, all);
        let _ = k.after(&refs).vsumsq(all, x0.ssp.sub(2, 1), false);
        let t0 = k.after(&refs).vstore(x0.ssp.sub(2, 1), root.at(64), Dt::F32);
        for t in sw {
            drop_token(t);
        }
        let mut have: Vec<Option<Token>> = (0..m).map(|_| None).collect();
        if GATHER == 3 {
            // the root writes the total to HBM, every other slice reads it back
            // (two short DMA commands whose startups are prepared early)
            let x0 = &sls[0];
            let e = pick_tail(x0.cc, 256, *x0.engs.last().unwrap());
            let w = k.after(&[&t0]).copy(e, root.at(0), scratch.at(0), 256, 256);
            for i in 1..m {
                let x = &sls[i];
                let e = pick_tail(x.cc, 256, *x.engs.last().unwrap());
                have[i] = Some(k.after(&[&w]).copy(e, scratch.at(0), x.g.at(256), 256, 256));
            }
            have[0] = Some(t0);
            drop_token(w);
        } else if BCAST == 1 {
            for i in 1..m {
                let t = k.after(&[&t0]).switch_copy(root.at(64), sls[i].g.at(64), 4);
                have[i] = Some(t);
            }
            have[0] = Some(t0);
        } else {
            // doubling tree: a slice forwards the total as soon as it has it
            // (later copies only read it again, so no further ordering is needed)
            have[0] = Some(t0);
            let mut cnt = 1;
            while cnt < m {
                for i in 0..cnt.min(m - cnt) {
                    let t = k.after(&[have[i].as_ref().unwrap()]).switch_copy(sls[i].g.at(64), sls[i + cnt].g.at(64), 4);
                    have[i + cnt] = Some(t);
                }
                cnt *= 2;
            }
        }
        for (i, t) in have.into_iter().enumerate() {
            ready[i].push(t.unwrap());
        }
    } else {
        let mut st = vec![];
        for x in sls.iter_mut() {
            st.push(x.last.take().unwrap());
        }
        let mut sw: Vec<Vec<Token>> = (0..m).map(|_| vec![]).collect();
        for i in 0..m {
            for d in 1..m {
                let j = (i + d) % m;
                let t = k.after(&[&st[i]]).switch_copy(sls[i].g.at(0), sls[j].g.at(256 + i as u32 * 4), 4);
                sw[j].push(t);
            }
        }
        for (i, t) in st.into_iter().enumerate() {
            let x = &sls[i];
            let c = k.after(&[&t]).vload(x.g.at(0), Dt::F32, x.ssp.sub(1, 1));
            let c2 = k.after(&[&c]).vstore(x.ssp.sub(1, 1), x.g.at(256 + i as u32 * 4), Dt::F32);
            drop_token(t);
            drop_token(c);
            ready[i].push(c2);
            for t in std::mem::take(&mut sw[i]) {
                ready[i].push(t);
            }
        }
    }

    // every slice: total, normalise its rows (already scaled and multiplied by
    // post_norm), add the residual (resident in the VRF), write out
    let mut outs = vec![];
    for (i, x) in sls.iter().enumerate() {
        let mut deps: Vec<&Token> = ready[i].iter().collect();
        deps.extend(x.ep.iter());
        let tot = x.ssp.sub(2, 1);
        let n = x.n;
        if GATHER == 1 || (GATHER == 3 && i == 0) {
            let _ = k.after(&deps).vload(x.g.at(64), Dt::F32, tot);
        } else if GATHER == 3 {
            let _ = k.after(&deps).vload(x.g.at(256 + 64), Dt::F32, tot);
        } else {
            let all = x.ssp.sub(8, m as u32);
            let _ = k.after(&deps).vload(x.g.at(256), Dt::F32, all);
            let _ = k.after(&deps).vsumsq(all, tot, false);
        }
        let _ = k.after(&deps).vrms(x.acc, tot, h, 1e-6, x.acc);
        let _ = k.after(&deps).vadd(x.acc, x.res, x.acc);
        let st = k.after(&deps).vstore(x.acc, x.o.at(0), Dt::Bf16);
        let e = pick_tail(x.cc, n * 2, x.engs[0]);
        outs.push(k.after(&[&st]).copy(e, x.o.at(0), out.at(x.r0 as u64 * 2), n * 2, pk(n * 2, PACKET)));
        drop_token(st);
    }
    for t in ready {
        for t in t {
            drop_token(t);
        }
    }
    for x in sls.iter_mut() {
        for t in std::mem::take(&mut x.ep) {
            drop_token(t);
        }
    }
    for v in whole.into_inner() {
        for t in v.into_iter().flatten() {
            drop_token(t); // ordered before the switch copies and vector loads that read them
        }
    }
    k.wait_all(outs);
}

npu::kernels! { attention_output => ao }
