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
// ORDER: 0 issues each slice's whole stream before the next slice's; 1 issues
// tile by tile across the slices (both phases). An engine runs its commands in
// issue order, so when slices share a DMA engine (fewer engines than slices per
// cluster) order 0 queues one slice's stream behind another's; order 1
// interleaves them. ROTATE: 0 gives each slice one fixed engine; 1 rotates a
// slice's tile loads over all DMA engines of its cluster (tile t of the slice
// with cluster index j on engine j + t * slices of the cluster, modulo the
// engines).
// GRAIN: phase-2 output rows per slice are a multiple of GRAIN (128 rows of
// bf16 = 256 bytes: HBM-aligned output writes), else of 8.
// LPT > 0: every DMA command goes to the least-loaded engine of its cluster
// (greedy, in issue order), a command counting its bytes plus LPT bytes for
// its startup; 0: the slice's engine / the ROTATE engine.
// FUSE = 1 loads x with ffn_norm, and the three per-matrix scales (when
// equally spaced), each with one two-level sequencer program.
use npu::*;

// Searched (the template's params):
const SLICES: usize = ${SLICES};
const PACKET: u32 = ${PACKET};
const ROWS: u32 = ${ROWS};
const DROWS: u32 = ${DROWS};
const KC: u32 = ${KC};
const STAGGER: u32 = ${STAGGER};
const ROWSB: u32 = ${ROWSB};
const HFIRST: u32 = ${HFIRST};

// Fixed choices, not searched: set back to these values, each cost under 0.5 % in geomean over the 24 best designs
// known on generated chips (tools/bench/search_results.md, session 28):
const BUFFERS: usize = 2;  // double buffering: a tile loads while the previous one is in its pass; a deeper ring takes DM that larger tiles use better
const DBUFFERS: usize = 2;  // double buffering of the down tiles, as BUFFERS
const ORDER: u32 = 1;  // commands issued tile by tile across the slices: an engine runs its commands in issue order
const ROTATE: u32 = 1;  // a slice's tile loads rotate over all engines of its cluster
const GRAIN: u32 = 8;  // a slice's rows a multiple of 8 (its output writes are 256-byte aligned whatever the grain)
const LPT: u32 = 65536;  // least-loaded engine placement, a command weighed as its bytes plus this much for its startup
const FUSE: u32 = 1;  // the small vectors (x with its norm, equally spaced scales) loaded by one two-level sequencer program each
const ARENA: u32 = 1;  // x | ffn_norm (phase 1) and the gathered h (phase 2) share one DM arena
const GATHER: u32 = 1;  // the partial sums of squares gathered over the switch network, the total sent back down a doubling tree

/// Largest multiple of m <= max dividing n (at least m).
fn div_of(n: u32, max: u32, m: u32) -> u32 {
    let mut c = (max / m) * m;
    while c > m && n % c != 0 {
        c -= m;
    }
    c
}

fn copy_after(k: &mut Ctx, deps: &[&Token], e: Engine, src: Loc, dst: Loc, n: u32) -> Token {
    let p = pk(n, PACKET);
    if deps.is_empty() {
        k.dma(e, src, dst, p, &[lp(n / p, p as i64, p as i64)])
    } else {
        k.after(deps).dma(e, src, dst, p, &[lp(n / p, p as i64, p as i64)])
    }
}

/// Aligned HBM writes of consecutive byte ranges rng[i] = [a, b) of one tensor: HBM writes
/// that do not start and end on `al` bytes are penalised, and a slice's rows rarely do. Range i
/// writes the blocks that start inside it, up to where range i + 1's first block starts; the
/// bytes of range i + 1 before that (its head) come over the switch into the room behind range
/// i (src(i, off) is byte off of range i's staging, with `al` bytes of room past its end). Only
/// when every range has a block start inside it; else every range writes its own bytes. Range
/// i's write is ordered after ready[i] (and the head's copy after ready[i + 1]).
fn aligned_writes(k: &mut Ctx, al: u32, rng: &[(u32, u32)], ready: &[Token], src: &dyn Fn(usize, u32) -> Loc, dst: &dyn Fn(u32) -> Loc, eng: &dyn Fn(usize, u32) -> Engine) -> Vec<Token> {
    let al = al.max(1);
    let wa: Vec<u32> = rng.iter().map(|&(a, _)| (a + al - 1) / al * al).collect();
    let xchg = rng.iter().enumerate().all(|(i, &(_, b))| wa[i] < b) && wa[0] == rng[0].0;
    let mut outs = vec![];
    for (i, &(a, b)) in rng.iter().enumerate() {
        if !xchg {
            outs.push(k.after(&[&ready[i]]).copy(eng(i, b - a), src(i, 0), dst(a), b - a, pk(b - a, PACKET)));
            continue;
        }
        let wb = if i + 1 < rng.len() { wa[i + 1] } else { b };
        let frag = if wb > b { Some(k.after(&[&ready[i + 1]]).switch_copy(src(i + 1, 0), src(i, b - a), wb - b)) } else { None };
        let mut d: Vec<&Token> = vec![&ready[i]];
        if let Some(t) = frag.as_ref() {
            d.push(t);
        }
        outs.push(k.after(&d).copy(eng(i, wb - wa[i]), src(i, wa[i] - a), dst(wa[i]), wb - wa[i], pk(wb - wa[i], PACKET)));
        if let Some(t) = frag {
            drop_token(t);
        }
    }
    outs
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
    // K chunks of kc columns, the last one shorter when kc does not divide ffn
    let kc = if f % 512 == 0 { KC.min(f) } else { div_of(f, KC, 512).min(f) };
    let nq = (f + kc - 1) / kc;
    let kq = |q: u32| -> u32 { kc.min(f - q * kc) };
    let rb = h / 2; // gate/up row bytes (fp4)
    let sb = h / 16; // gate/up block-scale row bytes
    let db = f / 16; // down block-scale row bytes
    // ring buffer b holds tiles of rcap(b) rows: ROWS, or ROWSB in the odd buffers
    let rcap = |b: usize| -> u32 { if ROWSB > 0 && b % 2 == 1 { ROWSB } else { ROWS } };
    let rmax = ROWS.max(ROWSB);
    let tile1 = |b: usize| -> u32 { 2 * rcap(b) * (rb + sb) };
    let tile2 = DROWS * kc / 2;
    let hc = div_of(gcd(kc, kq(nq - 1)), 768, 64); // h chunk staging

    struct Sl {
        sl: usize,
        cc: usize,
        j: usize,
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
        hown: Dm,
        last: Option<Token>,
        ep: Vec<Token>,
    }
    let mut sls: Vec<Sl> = vec![];
    let g1 = f / 16; // phase-1 granules of 16 rows (scale rows 256-byte aligned)
    let gr2 = if h % GRAIN == 0 && h / GRAIN >= ns as u32 { GRAIN } else { 8 };
    let g2 = h / gr2;
    // prologue chunk: each vector command has a fixed cost, and the prologue is on the path to the
    // first pass, so take chunks as long as the VRF left beside acc2, acc1 and the scalars allows
    // (two chunks are staged at once; at most 1024 elements, at least 64)
    let xc = {
        let used = (g2 + ns as u32 - 1) / ns as u32 * gr2 + BUFFERS as u32 * 2 * rmax + 72;
        let room = (hw.vrf_bytes / 4).saturating_sub(used) / 2;
        div_of(h, room.clamp(64, 1024), 64)
    };
    for i in 0..ns {
        let c = i % hw.clusters;
        let j = i / hw.clusters;
        let sl = c * spc + j;
        let r0 = (i as u32 * g1 / ns as u32) * 16;
        let r1 = ((i as u32 + 1) * g1 / ns as u32) * 16;
        let q0 = (i as u32 * g2 / ns as u32) * gr2;
        let q1 = ((i as u32 + 1) * g2 / ns as u32) * gr2;
        let z = Dm { slice: sl, addr: 0, bytes: 0 };
        let zv = Vrf { slice: sl, off: 0, len: 0 };
        sls.push(Sl { sl, cc: c, j, e: engine(c, j % hw.dma_engines_per_cluster), r0, n1: r1 - r0, q0, n2: q1 - q0, acc2: zv, stage: zv, ssp: zv, g: z, o: z, pw: z, pwo: 0, xd: z, hown: z, last: None, ep: vec![] });
    }
    let ncl = (ns + hw.clusters - 1) / hw.clusters;
    let ne = hw.dma_engines_per_cluster;
    let eload = std::cell::RefCell::new(vec![vec![0u64; ne]; hw.clusters]);
    // LPT > 0: the least-loaded engine of cluster c (charged bytes + LPT); else dflt
    let pick = |c: usize, bytes: u32, dflt: Engine| -> Engine {
        if LPT == 0 {
            return dflt;
        }
        let mut l = eload.borrow_mut();
        let mut b = 0;
        for e in 1..ne {
            if l[c][e] < l[c][b] {
                b = e;
            }
        }
        l[c][b] += bytes as u64 + LPT as u64;
        engine(c, b)
    };
    // the engine of a slice's t-th weight command
    let eng_of = |x_: &Sl, t: usize, bytes: u32| -> Engine {
        let e = if ROTATE == 1 { engine(x_.cc, (x_.j + t * ncl) % ne) } else { x_.e };
        pick(x_.cc, bytes, e)
    };
    // phase-1 state of a slice
    struct P1 {
        tiles: Vec<(u32, u32)>,
        off: usize,
        bufs: Vec<Dm>,
        sd: Dm,
        acc1: Vrf,
        loads: Vec<Vec<Token>>,
        passes: Vec<Token>,
        vst: Vec<Token>,
        tx: Vec<Token>,
        vt: Option<Token>,
    }
    // phase-2 state of a slice
    struct P2 {
        bufs: Vec<Dm>,
        dsc_all: Dm,
        hall: Dm,
        trf: Trf,
        t1: usize,
        last_p1: Option<Token>,
        lastv: Option<Token>,
        scal: Vrf,
        sc_tok: Vec<Token>,
        early: Vec<Token>,
        t2: Vec<(u32, u32, u32)>,
        loads: Vec<Token>,
        passes: Vec<Token>,
        vts: Vec<Token>,
        last_of_chunk: Vec<usize>,
        free1: Vec<(u32, u32)>,
        free_tok: Vec<Option<Token>>,
        last_buf: usize,
    }
    let mut p1s: Vec<P1> = vec![];
    let mut p2s: Vec<P2> = vec![];
    // ---- plan every slice: DM arena, VRF, TRF, tiles ----
    for x_ in sls.iter_mut() {
        let sl = x_.sl;
        let (n1, n2) = (x_.n1, x_.n2);
        let i = sls_index(sl, spc, hw.clusters);
        // phase-1 tiles of this slice; tile t goes to ring buffer (t + off) % BUFFERS.
        // With ARENA 1 the offset is chosen so that the buffer freed first (that of
        // the second-to-last tile) is buffer 0, where phase 2 starts, when the
        // tile count allows it.
        let plan = |off: usize| -> Vec<(u32, u32)> {
            let mut tiles: Vec<(u32, u32)> = vec![];
            let mut r = x_.r0;
            while r < x_.r0 + n1 {
                let cap = rcap((tiles.len() + off) % BUFFERS);
                let first = ((cap * (i as u32 % STAGGER + 1) / STAGGER) / 16 * 16).max(16);
                let tr = (if r == x_.r0 { first } else { cap }).min(x_.r0 + n1 - r);
                tiles.push((r, tr));
                r += tr;
            }
            tiles
        };
        let mut off = 0;
        let mut tiles = plan(0);
        if ARENA == 1 && ROWSB > 0 {
            let score = |t: &Vec<(u32, u32)>, o: usize| (t.len(), usize::from(t.len() >= 2 && (t.len() - 2 + o) % BUFFERS != 0));
            for o in 1..BUFFERS {
                let t = plan(o);
                if score(&t, o) < score(&tiles, off) {
                    tiles = t;
                    off = o;
                }
            }
        }
        let t1 = tiles.len();
        let dsz = (n2 * db + 255) / 256 * 256;
        let hsz = (f * 2 + 255) / 256 * 256;
        let ring: Vec<u32> = (0..BUFFERS).scan(0u32, |a, b| {
            let o = *a;
            *a += tile1(b);
            Some(o)
        }).collect();
        let ring_end = ring[BUFFERS - 1] + tile1(BUFFERS - 1);
        let d2 = DBUFFERS as u32 * tile2;
        // one arena: phase 1 = ring of BUFFERS gate/up tiles; phase 2 (after the last
        // phase-1 pass) = the resident down block scales + a ring of DBUFFERS down tiles.
        // ARENA 1 also keeps x | ffn_norm (phase 1) and the gathered h (phase 2) in
        // the arena: phase 2's scales go where the first freed ring buffer was, h and
        // the down tiles into the first gap.
        let (arena_sz, dsc_o, hall_o, d2_o, xd_o) = if ARENA == 0 {
            (ring_end.max(dsz + d2), 0, 0, dsz, 0)
        } else {
            let p1 = ring_end + h * 4;
            let simple = p1.max(dsz + hsz + d2);
            let bf = if t1 >= 2 { (t1 - 2 + off) % BUFFERS } else { 0 };
            let o = ring[bf];
            let rest = if hsz + d2 <= o { 0 } else { o + dsz };
            let sz = p1.max(o + dsz).max(rest + hsz + d2);
            if sz <= simple { (sz, o, rest, rest + hsz, ring_end) } else { (simple, 0, dsz, dsz + hsz, ring_end) }
        };
        let (xd, sd, hall, arena) = if ARENA == 0 {
            let xd = k.dm_alloc(sl, h * 4); // x | ffn_norm
            let sd = k.dm_alloc(sl, 256 * 3); // w_gate_s, w_up_s, w_down_s
            let hall = k.dm_alloc(sl, f * 2);
            (xd, sd, hall, k.dm_alloc(sl, arena_sz))
        } else {
            let sd = k.dm_alloc(sl, 256 * 3);
            let arena = k.dm_alloc(sl, arena_sz);
            (Dm { slice: sl, addr: arena.addr + xd_o, bytes: h * 4 }, sd, Dm { slice: sl, addr: arena.addr + hall_o, bytes: f * 2 }, arena)
        };
        x_.xd = xd;
        let bufs: Vec<Dm> = (0..BUFFERS).map(|b| Dm { slice: sl, addr: arena.addr + ring[b], bytes: tile1(b) }).collect();
        let dsc = Dm { slice: sl, addr: arena.addr + dsc_o, bytes: n2 * db };
        let bufs2: Vec<Dm> = (0..DBUFFERS).map(|b| Dm { slice: sl, addr: arena.addr + d2_o + b as u32 * tile2, bytes: tile2 }).collect();
        // the phase-1 regions phase 2 may overwrite (ring buffers, then x | ffn_norm)
        let mut free1: Vec<(u32, u32)> = bufs.iter().map(|b| (b.addr, b.addr + b.bytes)).collect();
        if ARENA == 1 {
            free1.push((xd.addr, xd.addr + xd.bytes));
        }
        let (wa, wb) = (x_.q0 * 2 / 256 * 256, (((x_.q0 + n2) * 2 + 255) / 256 * 256).min(h * 2));
        x_.pw = k.dm_alloc(sl, wb - wa);
        x_.pwo = x_.q0 * 2 - wa;
        x_.g = k.dm_alloc(sl, 256 + ns as u32 * if GATHER == 0 { 256 } else { 4 });
        x_.o = k.dm_alloc(sl, n2 * 2 + hw.hbm_align); // + the next slice's head (aligned writes)
        if ARENA == 1 {
            x_.hown = k.dm_alloc(sl, n1 * 2 + hw.hbm_align); // + the next slice's head (aligned writes)
        }
        let acc2 = k.vrf_alloc(sl, n2);
        let acc1 = k.vrf_alloc(sl, BUFFERS as u32 * 2 * rmax);
        let stage = k.vrf_alloc(sl, (2 * xc).max(hc).max(2 * n2));
        let scal = k.vrf_alloc(sl, 8);
        let ssp = k.vrf_alloc(sl, 64);
        x_.acc2 = acc2;
        x_.stage = stage;
        x_.ssp = ssp;
        let trf = k.trf_alloc(sl, h.max(2 * kc));
        // phase-2 tiles: K chunk q, rows r.., tr rows
        let mut t2 = vec![];
        for q in 0..nq {
            let mut r = 0;
            while r < n2 {
                let tr = DROWS.min(n2 - r);
                t2.push((q, r, tr));
                r += tr;
            }
        }
        let nfree = free1.len();
        p1s.push(P1 { tiles, off, bufs, sd, acc1, loads: vec![], passes: vec![], vst: vec![], tx: vec![], vt: None });
        p2s.push(P2 { bufs: bufs2, dsc_all: dsc, hall, trf, t1, last_p1: None, lastv: None, scal, sc_tok: vec![], early: vec![], t2, loads: vec![], passes: vec![], vts: vec![], last_of_chunk: vec![], free1, free_tok: (0..nfree).map(|_| None).collect(), last_buf: 0 });
    }

    // ---- phase 1 ----
    let load1 = |k: &mut Ctx, x_: &Sl, p: &P1, t: usize, dep: Option<&Token>| -> Vec<Token> {
        let (r, tr) = p.tiles[t];
        let e = eng_of(x_, t, 2 * tr * (rb + sb));
        let buf = p.bufs[(t + p.off) % BUFFERS];
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
    let x_loads = |k: &mut Ctx, x_: &Sl, p: &mut P1| {
        if FUSE == 1 {
            let e = pick(x_.cc, h * 4, x_.e);
            let px = pk(h * 2, PACKET);
            let st = norm.addr as i64 - x.addr as i64;
            p.tx.push(k.dma(e, x.at(0), x_.xd.at(0), px, &[lp(2, st, (h * 2) as i64), lp(h * 2 / px, px as i64, px as i64)]));
            return;
        }
        p.tx.push(copy_after(k, &[], pick(x_.cc, h * 2, x_.e), x.at(0), x_.xd.at(0), h * 2));
        p.tx.push(copy_after(k, &[], pick(x_.cc, h * 2, x_.e), norm.at(0), x_.xd.at(h * 2), h * 2));
    };
    let first_load = |k: &mut Ctx, x_: &Sl, p: &mut P1, t: usize| {
        if t < p.tiles.len() {
            let l = load1(k, x_, p, t, None);
            p.loads.push(l);
        }
    };
    // per-matrix scales; prologue: xn = bf16(rmsnorm(x) · ffn_norm) → TRF; scalars → VRF
    let prologue = |k: &mut Ctx, x_: &Sl, p: &mut P1, q2: &mut P2| {
        let (s1, s2) = (wus.addr as i64 - wgs.addr as i64, wds.addr as i64 - wus.addr as i64);
        if FUSE == 1 && s1 == s2 {
            let e = pick(x_.cc, 12, x_.e);
            q2.sc_tok = vec![k.dma(e, wgs.at(0), p.sd.at(0), 4, &[lp(3, s1, 256), lp(1, 4, 4)])];
        } else {
            q2.sc_tok = vec![
                copy_after(k, &[], pick(x_.cc, 4, x_.e), wgs.at(0), p.sd.at(0), 4),
                copy_after(k, &[], pick(x_.cc, 4, x_.e), wus.at(0), p.sd.at(256), 4),
                copy_after(k, &[], pick(x_.cc, 4, x_.e), wds.at(0), p.sd.at(512), 4),
            ];
        }
        let txr: Vec<&Token> = p.tx.iter().collect();
        let ss = x_.ssp.sub(0, 1);
        let (va, vg) = (x_.stage.sub(0, xc), x_.stage.sub(xc, xc));
        for q in 0..h / xc {
            let _ = k.after(&txr).vload(x_.xd.at(q * xc * 2), Dt::Bf16, va);
            let _ = k.after(&txr).vsumsq(va, ss, q > 0);
        }
        let mut vt = None;
        for q in 0..h / xc {
            let _ = k.after(&txr).vload(x_.xd.at(q * xc * 2), Dt::Bf16, va);
            let _ = k.vrms(va, ss, h, 1e-6, va);
            let _ = k.after(&txr).vload(x_.xd.at(h * 2 + q * xc * 2), Dt::Bf16, vg);
            let _ = k.vmul(va, vg, va);
            vt = Some(k.vtrf(va, q2.trf.sub(q * xc, xc)));
        }
        p.vt = vt;
        if ARENA == 1 {
            // the residual rows of this slice → o (bf16), read back by the epilogue
            let vr = x_.stage.sub(0, x_.n2);
            let _ = k.after(&txr).vload(x_.xd.at(x_.q0 * 2), Dt::Bf16, vr);
            let st = k.vstore(vr, x_.o.at(0), Dt::Bf16);
            let n = q2.free_tok.len();
            q2.free_tok[n - 1] = Some(st);
        }
        for m in 0..3u32 {
            // one token per scale, or one for all three (FUSE)
            let t = &q2.sc_tok[(m as usize).min(q2.sc_tok.len() - 1)];
            let _ = k.after(&[t]).vload(p.sd.at(m * 256), Dt::F32, q2.scal.sub(m, 1));
        }
    };
    let step1 = |k: &mut Ctx, x_: &Sl, p: &mut P1, q2: &P2, t: usize| {
        if t >= BUFFERS {
            let l = load1(k, x_, p, t, Some(&p.passes[t - BUFFERS]));
            p.loads.push(l);
        }
        let (r, tr) = p.tiles[t];
        let b = (t + p.off) % BUFFERS;
        let acc = p.acc1.sub(b as u32 * 2 * rmax, 2 * tr);
        let mut deps: Vec<&Token> = p.loads[t].iter().collect();
        deps.push(p.vt.as_ref().unwrap());
        if t >= BUFFERS {
            deps.push(&p.vst[t - BUFFERS]);
        }
        let base = p.bufs[b].addr;
        let pt = k.after(&deps).pass(&Pass {
            slice: x_.sl,
            w: Tile { addr: base, rows: 2 * tr, cols: h, pitch: rb, dt: Dt::Fp4E2m1 },
            scales: Some(Tile { addr: base + 2 * tr * rb, rows: 2 * tr, cols: h / 16, pitch: sb, dt: Dt::Fp8E4m3 }),
            x: q2.trf.sub(0, h),
            acc,
            accumulate: false,
        });
        let (gv, uv) = (acc.sub(0, tr), acc.sub(tr, tr));
        let mut sd_: Vec<&Token> = q2.sc_tok.iter().collect();
        sd_.push(&pt);
        let _ = k.after(&sd_).vmuls(gv, q2.scal.sub(0, 1), gv);
        let _ = k.after(&sd_).vmuls(uv, q2.scal.sub(1, 1), uv);
        let _ = k.after(&sd_).vgeglu(gv, uv, gv);
        let hd = if ARENA == 1 { x_.hown.at((r - x_.r0) * 2) } else { q2.hall.at(r * 2) };
        let v = k.after(&sd_).vstore(gv, hd, Dt::Bf16);
        p.vst.push(v);
        p.passes.push(pt);
    };
    // the last phase-1 pass and h store of a slice are kept for phase 2; the rest is ordered before them
    let end1 = |p: &mut P1, q2: &mut P2| {
        // the last pass that read each ring buffer frees it for phase 2
        let nt = p.passes.len();
        let mut ps: Vec<Option<Token>> = std::mem::take(&mut p.passes).into_iter().map(Some).collect();
        for t in 0..nt - 1 {
            let tok = ps[t].take().unwrap();
            if t + BUFFERS >= nt {
                q2.free_tok[(t + p.off) % BUFFERS] = Some(tok);
            } else {
                drop_token(tok);
            }
        }
        q2.last_p1 = ps[nt - 1].take();
        q2.last_buf = (nt - 1 + p.off) % BUFFERS;
        q2.lastv = p.vst.pop();
        for l in std::mem::take(&mut p.loads) {
            for t in l {
                drop_token(t);
            }
        }
        for t in std::mem::take(&mut p.passes).into_iter().chain(std::mem::take(&mut p.vst).into_iter()).chain(std::mem::take(&mut p.tx).into_iter()) {
            drop_token(t);
        }
        if let Some(t) = p.vt.take() {
            drop_token(t);
        }
    };
    if ORDER == 0 {
        for (i, x_) in sls.iter().enumerate() {
            let (p, q2) = (&mut p1s[i], &mut p2s[i]);
            x_loads(k, x_, p);
            for t in 0..BUFFERS {
                first_load(k, x_, p, t);
            }
            prologue(k, x_, p, q2);
            for t in 0..p.tiles.len() {
                step1(k, x_, p, q2, t);
            }
            end1(p, q2);
        }
    } else {
        for (i, x_) in sls.iter().enumerate() {
            x_loads(k, x_, &mut p1s[i]);
        }
        for t in 0..BUFFERS {
            for (i, x_) in sls.iter().enumerate() {
                first_load(k, x_, &mut p1s[i], t);
            }
        }
        for (i, x_) in sls.iter().enumerate() {
            prologue(k, x_, &mut p1s[i], &mut p2s[i]);
        }
        let nt = p1s.iter().map(|p| p.tiles.len()).max().unwrap_or(0);
        for t in 0..nt {
            for (i, x_) in sls.iter().enumerate() {
                if t < p1s[i].tiles.len() {
                    step1(k, x_, &mut p1s[i], &p2s[i], t);
                }
            }
        }
        for i in 0..sls.len() {
            end1(&mut p1s[i], &mut p2s[i]);
        }
    }

    // ---- phase 2: the first DBUFFERS tiles of every slice, then h write + gather ----
    // the tokens of the phase-1 commands that last use the arena bytes [lo, hi)
    // (ARENA 0: the last phase-1 pass, which comes after all of them)
    fn rdeps(p: &P2, lo: u32, hi: u32) -> Vec<&Token> {
        let mut d = vec![];
        if ARENA == 0 {
            d.extend(p.last_p1.as_ref());
            return d;
        }
        for (j, &(a, b)) in p.free1.iter().enumerate() {
            if a < hi && lo < b {
                d.extend(if j == p.last_buf { p.last_p1.as_ref() } else { p.free_tok[j].as_ref() });
            }
        }
        d
    }
    let load2 = |k: &mut Ctx, x_: &Sl, p: &P2, t: usize, dep: &[&Token]| -> Token {
        let (q, r, tr) = p.t2[t];
        let e = eng_of(x_, p.t1 + t, tr * kq(q) / 2);
        let buf = p.bufs[t % DBUFFERS];
        let cb = kq(q) / 2;
        let pp = pk(cb, PACKET);
        let src = wd.at(((x_.q0 + r) * (f / 2) + q * kc / 2) as u64);
        let seq = [lp(tr, (f / 2) as i64, cb as i64), lp(cb / pp, pp as i64, pp as i64)];
        if dep.is_empty() {
            k.dma(e, src, buf.at(0), pp, &seq)
        } else {
            k.after(dep).dma(e, src, buf.at(0), pp, &seq)
        }
    };
    // the arena was last used by phase 1: order each first write after its users
    // (HFIRST 2: one command per DROWS-row block, so that the first pass waits
    // only for its own rows' scales)
    let split = HFIRST == 2 && (DROWS * db) % 256 == 0;
    let scales2 = |k: &mut Ctx, x_: &Sl, p: &mut P2, piece: usize| {
        let (r, n) = if split { (piece as u32 * DROWS, DROWS.min(x_.n2 - piece as u32 * DROWS)) } else { (0, x_.n2) };
        let lo = p.dsc_all.addr + r * db;
        let t = copy_after(k, &rdeps(p, lo, lo + n * db), pick(x_.cc, n * db, x_.e), wdb.at(((x_.q0 + r) * db) as u64), p.dsc_all.at(r * db), n * db);
        p.early.push(t);
    };
    let pieces = |x_: &Sl| -> usize { if split { ((x_.n2 + DROWS - 1) / DROWS) as usize } else { 1 } };
    let first_load2 = |k: &mut Ctx, x_: &Sl, p: &mut P2, t: usize| {
        if t < p.t2.len() {
            let b = p.bufs[t % DBUFFERS];
            let l = load2(k, x_, p, t, &rdeps(p, b.addr, b.addr + b.bytes));
            p.loads.push(l);
        }
    };
    // h: every slice writes its rows to HBM scratch, then reads the whole h back
    let hblock = |k: &mut Ctx, p2s: &mut Vec<P2>| -> Vec<Token> {
        // aligned h writes, as for the output (the heads arrive behind each slice's own rows;
        // ARENA 0: in place in its full h)
        let lvs: Vec<Token> = (0..sls.len()).map(|i| p2s[i].lastv.take().unwrap()).collect();
        let rng: Vec<(u32, u32)> = sls.iter().map(|x_| (x_.r0 * 2, (x_.r0 + x_.n1) * 2)).collect();
        let hw_tok = {
            let p2r: &Vec<P2> = p2s;
            let src = |i: usize, off: u32| if ARENA == 1 { sls[i].hown.at(off) } else { p2r[i].hall.at(sls[i].r0 * 2 + off) };
            aligned_writes(k, hw.hbm_align, &rng, &lvs, &src, &|a| hs.at(a as u64), &|i, n| pick(sls[i].cc, n, sls[i].e))
        };
        for t in lvs {
            drop_token(t);
        }
        let hwr: Vec<&Token> = hw_tok.iter().collect();
        let mut hg = vec![];
        for (i, x_) in sls.iter().enumerate() {
            let ha = p2s[i].hall;
            let mut d = hwr.clone();
            if ARENA == 1 {
                d.extend(rdeps(&p2s[i], ha.addr, ha.addr + ha.bytes));
            }
            hg.push(k.after(&d).copy(pick(x_.cc, f * 2, x_.e), hs.at(0), ha.at(0), f * 2, pk(f * 2, PACKET)));
        }
        drop(hwr);
        for t in hw_tok {
            drop_token(t);
        }
        hg
    };
    // HFIRST 1: the scales, then h write + gather, then the first down tiles (an
    // engine runs its commands in issue order); 0: scales and tiles, then h
    let hg = if ORDER == 0 && HFIRST == 0 {
        for (i, x_) in sls.iter().enumerate() {
            let p = &mut p2s[i];
            scales2(k, x_, p, 0);
            for t in 0..DBUFFERS {
                first_load2(k, x_, p, t);
            }
        }
        hblock(k, &mut p2s)
    } else if HFIRST == 2 {
        // the first pass's scales, h, the first tiles, the other scales, the other tiles
        for (i, x_) in sls.iter().enumerate() {
            scales2(k, x_, &mut p2s[i], 0);
        }
        let hg = hblock(k, &mut p2s);
        for (i, x_) in sls.iter().enumerate() {
            first_load2(k, x_, &mut p2s[i], 0);
        }
        for (i, x_) in sls.iter().enumerate() {
            for c in 1..pieces(x_) {
                scales2(k, x_, &mut p2s[i], c);
            }
        }
        for t in 1..DBUFFERS {
            for (i, x_) in sls.iter().enumerate() {
                first_load2(k, x_, &mut p2s[i], t);
            }
        }
        hg
    } else {
        for (i, x_) in sls.iter().enumerate() {
            scales2(k, x_, &mut p2s[i], 0);
        }
        let hg = if HFIRST == 1 { Some(hblock(k, &mut p2s)) } else { None };
        for t in 0..DBUFFERS {
            for (i, x_) in sls.iter().enumerate() {
                first_load2(k, x_, &mut p2s[i], t);
            }
        }
        hg.unwrap_or_else(|| hblock(k, &mut p2s))
    };
    // ---- phase 2 passes ----
    let step2 = |k: &mut Ctx, x_: &Sl, p: &mut P2, hgi: &Token, t: usize| {
        let (q, r, tr) = p.t2[t];
        let stage = x_.stage.sub(0, hc);
        if r == 0 {
            // h chunk q → TRF half q % 2, after the passes that last read that half
            let mut deps: Vec<&Token> = vec![hgi, p.last_p1.as_ref().unwrap()];
            if q >= 2 {
                deps.push(&p.passes[p.last_of_chunk[q as usize - 2]]);
            }
            let half = (q % 2) * kc;
            let mut vtk = None;
            for c in 0..kq(q) / hc {
                let _ = k.after(&deps).vload(p.hall.at((q * kc + c * hc) * 2), Dt::Bf16, stage);
                vtk = Some(k.after(&deps).vtrf(stage, p.trf.sub(half + c * hc, hc)));
            }
            p.vts.push(vtk.unwrap());
        }
        if t >= DBUFFERS {
            let l = load2(k, x_, p, t, &[&p.passes[t - DBUFFERS]]);
            p.loads.push(l);
        }
        let buf = p.bufs[t % DBUFFERS];
        let mut deps: Vec<&Token> = vec![&p.loads[t], &p.vts[q as usize]];
        if split {
            deps.push(&p.early[(r / DROWS) as usize]);
        } else {
            deps.extend(p.early.iter());
        }
        let pt = k.after(&deps).pass(&Pass {
            slice: x_.sl,
            w: Tile { addr: buf.addr, rows: tr, cols: kq(q), pitch: kq(q) / 2, dt: Dt::Fp4E2m1 },
            scales: Some(Tile { addr: p.dsc_all.addr + r * db + q * kc / 16, rows: tr, cols: kq(q) / 16, pitch: db, dt: Dt::Fp8E4m3 }),
            x: p.trf.sub((q % 2) * kc, kq(q)),
            acc: x_.acc2.sub(r, tr),
            accumulate: q > 0,
        });
        p.passes.push(pt);
        if r + tr == x_.n2 {
            p.last_of_chunk.push(t);
        }
    };
    let end2 = |k: &mut Ctx, x_: &mut Sl, p: &mut P2| {
        let lastp = p.passes.pop().unwrap();
        // scale, partial sum of squares, sqrt (so that one vsumsq adds the partials)
        let mut dd: Vec<&Token> = p.sc_tok.iter().collect();
        dd.push(&lastp);
        let _ = k.after(&dd).vmuls(x_.acc2, p.scal.sub(2, 1), x_.acc2);
        let _ = k.after(&dd).vsumsq(x_.acc2, x_.ssp.sub(0, 1), false);
        let _ = k.vrms(x_.ssp.sub(0, 1), x_.ssp.sub(0, 1), 1, EPS_SQRT, x_.ssp.sub(0, 1));
        x_.last = Some(if GATHER == 0 {
            // a 256-byte slot: the partial, then zeros
            let _ = k.vfill(x_.ssp.sub(1, 63), 0.0);
            k.vstore(x_.ssp.sub(0, 64), x_.g.at(0), Dt::F32)
        } else {
            k.vstore(x_.ssp.sub(0, 1), x_.g.at(0), Dt::F32)
        });
        x_.ep.push(lastp);
        let rest = std::mem::take(&mut p.loads).into_iter().chain(std::mem::take(&mut p.passes).into_iter()).chain(std::mem::take(&mut p.vts).into_iter());
        for t in rest.chain(std::mem::take(&mut p.early).into_iter()).chain(std::mem::take(&mut p.sc_tok).into_iter()) {
            drop_token(t);
        }
        if let Some(t) = p.last_p1.take() {
            drop_token(t);
        }
        for t in std::mem::take(&mut p.free_tok).into_iter().flatten() {
            drop_token(t);
        }
    };
    if ORDER == 0 {
        for (i, x_) in sls.iter_mut().enumerate() {
            let p = &mut p2s[i];
            for t in 0..p.t2.len() {
                step2(k, x_, p, &hg[i], t);
            }
            end2(k, x_, p);
        }
    } else {
        let nt = p2s.iter().map(|p| p.t2.len()).max().unwrap_or(0);
        for t in 0..nt {
            for (i, x_) in sls.iter().enumerate() {
                if t < p2s[i].t2.len() {
                    step2(k, x_, &mut p2s[i], &hg[i], t);
                }
            }
        }
        for (i, x_) in sls.iter_mut().enumerate() {
            end2(k, x_, &mut p2s[i]);
        }
    }
    for t in hg {
        drop_token(t);
    }
    // post_norm windows (queued last on every engine)
    for x_ in sls.iter_mut() {
        let (wa, wb) = (x_.q0 * 2 / 256 * 256, (((x_.q0 + x_.n2) * 2 + 255) / 256 * 256).min(h * 2));
        let t = copy_after(k, &[], pick(x_.cc, wb - wa, x_.e), post.at(wa as u64), x_.pw.at(0), wb - wa);
        x_.ep.push(t);
    }
    // exchange the sqrt partials. GATHER 1: to the first slice over the switch
    // network, the total broadcast back by a doubling tree (every slice ends with
    // the total at g[64]); 0: through HBM, every slice writes its partial into a
    // 256-byte slot and reads all of them back (short DMA commands whose startups
    // are prepared early), then adds them itself
    let m = sls.len();
    let mut have: Vec<Option<Token>> = (0..m).map(|_| None).collect();
    if GATHER == 0 {
        let scratch = k.hbm_alloc(m as u64 * 256);
        let mut wr = vec![];
        for (i, x_) in sls.iter_mut().enumerate() {
            let st = x_.last.take().unwrap();
            wr.push(k.after(&[&st]).copy(pick(x_.cc, 256, x_.e), x_.g.at(0), scratch.at(i as u64 * 256), 256, 256));
            drop_token(st);
        }
        let refs: Vec<&Token> = wr.iter().collect();
        for (i, x_) in sls.iter().enumerate() {
            have[i] = Some(k.after(&refs).copy(pick(x_.cc, m as u32 * 256, x_.e), scratch.at(0), x_.g.at(256), m as u32 * 256, pk(m as u32 * 256, PACKET)));
        }
        drop(refs);
        for t in wr {
            drop_token(t);
        }
    } else {
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
    let mut sts: Vec<Token> = vec![];
    for (i, x_) in sls.iter().enumerate() {
        let hv = have[i].take().unwrap();
        let mut deps: Vec<&Token> = vec![&hv];
        deps.extend(x_.ep.iter());
        let n = x_.n2;
        let tot = x_.ssp.sub(2, 1);
        let (va, vb) = (x_.stage.sub(0, n), x_.stage.sub(n, n));
        if GATHER == 0 {
            // the slots (partial and zeros), in chunks that fit the staging VRF
            let c = x_.stage.len / 64 * 64;
            let mut o = 0;
            while o < 64 * m as u32 {
                let l = c.min(64 * m as u32 - o);
                let _ = k.after(&deps).vload(x_.g.at(256 + o * 4), Dt::F32, x_.stage.sub(0, l));
                let _ = k.after(&deps).vsumsq(x_.stage.sub(0, l), tot, o > 0);
                o += l;
            }
        } else {
            let _ = k.after(&deps).vload(x_.g.at(64), Dt::F32, tot);
        }
        let _ = k.after(&deps).vrms(x_.acc2, tot, h, 1e-6, x_.acc2);
        let _ = k.after(&deps).vload(x_.pw.at(x_.pwo), Dt::Bf16, va);
        let _ = k.after(&deps).vmul(x_.acc2, va, x_.acc2);
        let res = if ARENA == 1 { x_.o.at(0) } else { x_.xd.at(x_.q0 * 2) };
        let _ = k.after(&deps).vload(res, Dt::Bf16, vb);
        let _ = k.after(&deps).vadd(x_.acc2, vb, x_.acc2);
        let st = k.after(&deps).vstore(x_.acc2, x_.o.at(0), Dt::Bf16);
        sts.push(st);
        drop_token(hv);
    }
    // aligned output writes (the next slice's head arrives behind each slice's rows in o)
    let rng: Vec<(u32, u32)> = sls.iter().map(|x_| (x_.q0 * 2, (x_.q0 + x_.n2) * 2)).collect();
    let outs = aligned_writes(k, hw.hbm_align, &rng, &sts, &|i, off| sls[i].o.at(off), &|a| out.at(a as u64), &|i, n| pick(sls[i].cc, n, sls[i].e));
    for t in sts {
        drop_token(t);
    }
    for x_ in sls.iter_mut() {
        for t in std::mem::take(&mut x_.ep) {
            drop_token(t);
        }
    }
    k.wait_all(outs);
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn sls_index(sl: usize, spc: usize, clusters: usize) -> usize {
    (sl % spc) * clusters + sl / spc
}

npu::kernels! { feedforward => ff }
