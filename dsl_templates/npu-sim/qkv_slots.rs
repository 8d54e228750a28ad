// project_qkv, design family "slice_stream": the heads (q..., k..., v...)
// are dealt in contiguous runs over SLICES slices; each slice streams its
// weight rows with one DMA engine through a ring of BUFFERS DM tiles of ROWS
// rows (a first tile staggered over the slices when STAGGER = 1, so that DMA
// startups do not line up; a last tile of LAST rows, a short last pass),
// packets of at most PACKET bytes. RMSNorm of x is computed on every slice
// while the first tiles stream. Nothing waits on the host in the stream: the
// x stage, each tile's pass (issued before its tile arrives, so its issue
// cost overlaps the transfer), the per-tile vector work (scale) and the
// buffer's next tile are ordered on the device with `after`; tiles are
// serviced in the order they are expected to arrive (cumulative bytes); a
// head's epilogue (per-head RMSNorm of q and k, RoPE) runs when its rows are
// done, and a slice's outputs are issued right behind its last tile.
// Structure follows the public performance guide (few large commands, several
// engines, double-buffering, passes overlapping the stream, no host waits).
use npu::*;

const SLICES: u32 = ${SLICES};
const ROWS: u32 = ${ROWS};
const BUFFERS: u32 = ${BUFFERS};
const PACKET: u32 = ${PACKET};
const LAST: u32 = ${LAST};
const STAGGER: u32 = ${STAGGER};

fn eng_of(k: &Ctx, s: usize) -> Engine {
    let hw = k.hw();
    let spc = hw.slices_per_cluster;
    engine(s / spc, (s % spc) % hw.dma_engines_per_cluster)
}

/// Cut `rows` rows into tiles: a staggered first tile, then `r`, then the rest.
fn cut(rows: u32, r: u32, si: usize, nsl: usize, stagger: bool) -> Vec<u32> {
    let mut v = vec![];
    let mut left = rows;
    if stagger {
        let f = ((r * (si as u32 + 1) / nsl as u32 + 7) / 8 * 8).clamp(8, r).min(left);
        v.push(f);
        left -= f;
    }
    let last = LAST.min(left);
    left -= last;
    while left > 0 {
        let t = r.min(left);
        v.push(t);
        left -= t;
    }
    if last > 0 {
        v.push(last);
    }
    v
}

/// Largest packet <= max that divides `bytes` and is a multiple of 256 (else `bytes`).
fn pk(bytes: u32, max: u32) -> u32 {
    let mut p = (max.min(bytes) / 256) * 256;
    while p >= 256 {
        if bytes % p == 0 {
            return p;
        }
        p -= 256;
    }
    bytes
}

/// One weight tile: `rows` contiguous rows of an fp8 matrix.
#[derive(Clone, Copy)]
struct T8 {
    hbm: u64,
    rows: u32,
    acc_off: u32,
}

/// Stream fp8 tiles to the slices, one pass per tile; `done(k, si, t)` is
/// called once tile t's pass of slice si has completed.
fn stream8(k: &mut Ctx, sl: &[usize], tiles: &[Vec<T8>], cols: u32, bufs: &[Vec<Dm>], x: &[Trf], acc: &[Vrf], pkt: u32, first_extra: &mut dyn FnMut(&mut Ctx, usize) -> Option<Token>, mid: &mut dyn FnMut(&mut Ctx, Vec<Option<Token>>) -> Vec<Option<Token>>, done: &mut dyn FnMut(&mut Ctx, usize, usize, &Token)) {
    let mut keep: Vec<Token> = vec![];
    let nb = bufs[0].len();
    let n = tiles.iter().map(|t| t.len()).max().unwrap_or(0);
    let mut dq: Vec<std::collections::VecDeque<Token>> = (0..sl.len()).map(|_| Default::default()).collect();
    let mut pt: Vec<Option<Token>> = (0..sl.len()).map(|_| None).collect();
    let issue = |k: &mut Ctx, si: usize, t: usize| -> Token {
        let tl = tiles[si][t];
        let b = bufs[si][t % nb];
        let bytes = tl.rows * cols;
        let p = pk(bytes, pkt);
        k.copy(eng_of(k, sl[si]), Loc::Hbm(tl.hbm), b.at(0), bytes, p)
    };
    let mut xload: Vec<Option<Token>> = (0..sl.len()).map(|_| None).collect();
    for t in 0..nb.min(n) {
        for si in 0..sl.len() {
            if t < tiles[si].len() {
                let tk = issue(k, si, t);
                dq[si].push_back(tk);
                if t == 0 {
                    xload[si] = first_extra(k, si);
                }
            }
        }
    }
    let mut xready = mid(k, xload);
    // service slices in the order their tiles are expected to arrive (all
    // engines share HBM fairly, so arrival follows cumulative bytes+startups)
    let mut ev: Vec<(u64, usize, usize)> = vec![];
    for si in 0..sl.len() {
        let mut acc_b = 0u64;
        for t in 0..tiles[si].len() {
            acc_b += (tiles[si][t].rows * cols) as u64 ;
            ev.push((acc_b, si, t));
        }
    }
    ev.sort();
    let _ = n;
    for &(_, si, t) in &ev {
        {
            let s = sl[si];
            // the pass is issued before its tile has arrived: its issue cost
            // overlaps the transfer (`after`), only the contraction waits
            let tk = dq[si].pop_front().unwrap();
            let xt = xready[si].take();
            let mut deps = vec![&tk];
            if let Some(x) = &xt {
                deps.push(x);
            }
            let tl = tiles[si][t];
            let b = bufs[si][t % nb];
            let tp = k.after(&deps).pass(&Pass { slice: s, w: Tile { addr: b.addr, rows: tl.rows, cols, pitch: cols, dt: Dt::Fp8E4m3 }, scales: None, x: x[si], acc: acc[si].sub(tl.acc_off, tl.rows), accumulate: false });
            if nb == 1 {
                done(k, si, t, &tp);
                if t + 1 < tiles[si].len() {
                    let tl = tiles[si][t + 1];
                    let bytes = tl.rows * cols;
                    let e = eng_of(k, sl[si]);
                    let tk = k.after(&[&tp]).copy(e, Loc::Hbm(tl.hbm), b.at(0), bytes, pk(bytes, pkt));
                    dq[si].push_back(tk);
                }
                keep.push(tp);
                continue;
            }
            // no host waits: the previous pass's vector work and the
            // buffer's next tile are ordered after it on the device
            if let Some(prev) = pt[si].replace(tp) {
                done(k, si, t - 1, &prev);
                if t - 1 + nb < tiles[si].len() {
                    let tl = tiles[si][t - 1 + nb];
                    let bb = bufs[si][(t - 1) % nb];
                    let bytes = tl.rows * cols;
                    let e = eng_of(k, sl[si]);
                    let tk = k.after(&[&prev]).copy(e, Loc::Hbm(tl.hbm), bb.at(0), bytes, pk(bytes, pkt));
                    dq[si].push_back(tk);
                }
                keep.push(prev);
            }
            if let Some(x) = xt {
                keep.push(x);
            }
            keep.push(tk);
        }
    }
    for si in 0..sl.len() {
        if let Some(p) = pt[si].take() {
            done(k, si, tiles[si].len() - 1, &p);
            keep.push(p);
        }
    }
    k.wait_all(keep);
}

/// x ⊙ gamma (bf16 vectors in DM at dx, dg; n elements) → TRF xt, and
/// r = 1/sqrt(mean(x²) + eps) into `r` (the norm is a scalar: applied to the
/// projection's outputs instead). VRF scratch `va`, `vb` (len c), `ss`, `one`.
fn xg_to_trf(k: &mut Ctx, dep: Option<&Token>, dx: Loc, dg: Loc, n: u32, c: u32, va: Vrf, vb: Vrf, ss: Vrf, one: Vrf, r: Vrf, xt: Trf) -> Token {
    let d: Vec<&Token> = dep.into_iter().collect();
    let off = |l: Loc, b: u32| match l {
        Loc::Dm(s, a) => Loc::Dm(s, a + b),
        h => h,
    };
    let _ = k.vfill(one, 1.0);
    for i in 0..n / c {
        let _ = k.after(&d).vload(off(dx, i * c * 2), Dt::Bf16, va);
        let _ = k.vsumsq(va, ss, i > 0);
        let _ = k.after(&d).vload(off(dg, i * c * 2), Dt::Bf16, vb);
        let _ = k.vmul(va, vb, va);
        let _ = k.vtrf(va, xt.sub(i * c, c));
    }
    k.vrms(one, ss, n, 1e-6, r)
}

fn chunk_of(n: u32, max: u32) -> u32 {
    let mut c = (max / 64) * 64;
    while n % c != 0 {
        c -= 64;
    }
    c
}

// ------------------------------------------------------------------ project_qkv
fn qkv(k: &mut Ctx) {
    let s = k.shape();
    let (h, d) = (s.hidden, s.head_dim);
    let (nq, nkv, cl) = (s.q_heads, s.kv_heads, s.cache_len);
    let slot = k.pos() % cl;
    let pos = k.pos();
    let nh = nq + 2 * nkv; // heads in all (q..., k..., v...)
    let nsl = (SLICES as usize).min(k.hw().slices).min(nh as usize);
    let sl: Vec<usize> = (0..nsl).collect();
    let r = ROWS;
    let nb = BUFFERS as usize;
    let pkt = PACKET.min(k.hw().max_packet_bytes);
    let stag = STAGGER != 0;
    let (x, norm, qn, kn) = (k.tensor("x"), k.tensor("attn_norm"), k.tensor("q_norm"), k.tensor("k_norm"));
    let ws = [k.tensor("wq"), k.tensor("wk"), k.tensor("wv")];
    let scs = [k.tensor("wq_scale"), k.tensor("wk_scale"), k.tensor("wv_scale")];
    let outs = [k.tensor("q_out"), k.tensor("k_cache"), k.tensor("v_cache")];
    let which = |g: u32| if g < nq { (0usize, g) } else if g < nq + nkv { (1, g - nq) } else { (2, g - nq - nkv) };
    // contiguous runs of heads of one matrix per slice
    let per = (nh as usize + nsl - 1) / nsl;
    let mut heads: Vec<Vec<u32>> = vec![vec![]; nsl];
    for g in 0..nh {
        heads[(g as usize / per).min(nsl - 1)].push(g);
    }
    let mut tiles = vec![];
    let (mut bufs, mut xs, mut accs, mut dmx, mut dsc, mut dgam, mut dout) = (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut hoff: Vec<Vec<u32>> = vec![];
    for si in 0..nsl {
        let sn = sl[si];
        let hs = &heads[si];
        let rows = hs.len() as u32 * d;
        let mut tl = vec![];
        let mut acc_off = 0;
        let mut done_rows = 0u32;
        for c in cut(rows, r, si, nsl, stag) {
            let mut left = c;
            while left > 0 {
                // split where the matrix changes (rows of one matrix are contiguous)
                let hi = (done_rows / d) as usize;
                let (m, li) = which(hs[hi]);
                let mut take = d - done_rows % d;
                let mut j = hi + 1;
                while take < left && j < hs.len() && which(hs[j]).0 == m {
                    take += d;
                    j += 1;
                }
                let take = take.min(left);
                tl.push(T8 { hbm: ws[m].addr + ((li * d + done_rows % d) * h) as u64, rows: take, acc_off });
                acc_off += take;
                done_rows += take;
                left -= take;
            }
        }
        tiles.push(tl);
        let maxr = tiles[si].iter().map(|t| t.rows).max().unwrap();
        bufs.push((0..nb).map(|_| k.dm_alloc(sn, maxr * h)).collect::<Vec<_>>());
        dmx.push(k.dm_alloc(sn, 2 * h * 2));
        // row scales: one aligned HBM read per run of heads of one matrix
        // (a run starting inside a 256-byte block lands `off` bytes into its
        // own 256-aligned DM window); hoff = each head's scales in DM
        let mut ho = vec![];
        let mut pos = 0u32;
        let mut j = 0;
        while j < hs.len() {
            let (m, li) = which(hs[j]);
            let off = li * d * 2 % 256;
            let _ = m;
            let base = (pos + 255) / 256 * 256;
            let mut n = 0;
            while j + n < hs.len() && which(hs[j + n]).0 == which(hs[j]).0 {
                ho.push(base + off + n as u32 * d * 2);
                n += 1;
            }
            pos = base + off + n as u32 * d * 2;
            j += n;
        }
        hoff.push(ho);
        dsc.push(k.dm_alloc(sn, pos.max(256)));
        dgam.push(k.dm_alloc(sn, d * 2));
        dout.push(k.dm_alloc(sn, rows * 2));
        accs.push(k.vrf_alloc(sn, rows));
        xs.push(k.trf_alloc(sn, h));
    }
    let mut scr = vec![];
    for si in 0..nsl {
        let used = heads[si].len() as u32 * d;
        let free = k.hw().vrf_bytes / 4 - used;
        scr.push(k.vrf_alloc(sl[si], free));
    }
    let vr = |si: usize, off: u32, len: u32| Vrf { slice: sl[si], off, len };
    let vmax = k.hw().vrf_bytes / 4;
    let c = chunk_of(h, (vmax - 64) / 2);
    let (dmx2, xs2) = (dmx.clone(), xs.clone());
    let mut mid = move |k: &mut Ctx, xl: Vec<Option<Token>>| -> Vec<Option<Token>> {
        let mut v = vec![];
        for (si, t) in xl.into_iter().enumerate() {
            // x, attn_norm arrive behind the first tile (ordered on the device)
            let r = xg_to_trf(k, t.as_ref(), dmx2[si].at(0), dmx2[si].at(h * 2), h, c, vr(si, 0, c), vr(si, c, c), vr(si, vmax - 4, 1), vr(si, vmax - 3, 1), vr(si, vmax - 2, 1), xs2[si]);
            let _ = t; // waited through the vloads ordered after it
            v.push(Some(r));
        }
        v
    };
    let heads2 = heads.clone();
    let xtra: std::cell::RefCell<Vec<Option<Token>>> = std::cell::RefCell::new((0..nsl).map(|_| None).collect());
    let outs_t: std::cell::RefCell<Vec<Token>> = std::cell::RefCell::new(vec![]);
    let mut extra = |k: &mut Ctx, si: usize| -> Option<Token> {
        // row scales (one command) and the norm gamma, queued behind the first tile
        let e = eng_of(k, sl[si]);
        let p = pk(h * 2, 4096);
        let xt = k.dma(e, x.at(0), dmx[si].at(0), p, &[lp(2, (norm.addr - x.addr) as i64, (h * 2) as i64), lp(h * 2 / p, p as i64, p as i64)]);
        let hs = &heads2[si];
        let mut j = 0;
        while j < hs.len() {
            let (m, li) = which(hs[j]);
            let mut n = 1;
            while j + n < hs.len() && which(hs[j + n]).0 == m {
                n += 1;
            }
            let src = li * d * 2;
            let a = src / 256 * 256;
            let b = src + n as u32 * d * 2 - a;
            let ts = k.copy(e, scs[m].at(a as u64), dsc[si].at(hoff[si][j] - (src - a)), b, pk(b, 4096));
            xtra.borrow_mut()[si] = Some(ts);
            j += n;
        }
        let m0 = which(hs[0]).0;
        if m0 < 2 {
            let g = if m0 == 0 { qn } else { kn };
            let tg = k.copy(e, g.at(0), dgam[si].at(0), d * 2, pk(d * 2, 4096));
            xtra.borrow_mut()[si] = Some(tg);
        }
        Some(xt)
    };
    let accs2 = accs.clone();
    let hoff2 = hoff.clone();
    let scr2 = scr.clone();
    let tiles2 = tiles.clone();
    let mut vlast: Vec<Option<Token>> = (0..nsl).map(|_| None).collect();
    let mut keepv: Vec<Token> = vec![];
    let mut done = |k: &mut Ctx, si: usize, t: usize, tp: &Token| {
        let end_row = tiles2[si][t].acc_off + tiles2[si][t].rows;
        let first_row = tiles2[si][t].acc_off;
        let xl = xtra.borrow_mut()[si].take();
        let mut dl = vec![tp];
        if let Some(x) = &xl {
            dl.push(x);
        }
        // every head completed by this tile (all ordered after its pass)
        for j in first_row / d..end_row / d {
            if (j + 1) * d > end_row {
                break;
            }
            let g = heads2[si][j as usize];
            let m = which(g).0;
            let hv = accs2[si].sub(j * d, d);
            let sv = scr2[si].sub(0, d);
            let gv = scr2[si].sub(d, d);
            let ss = scr2[si].sub(2 * d, 1);
            let _ = k.after(&dl).vload(dsc[si].at(hoff2[si][j as usize]), Dt::Bf16, sv);
            let _ = k.after(&dl).vmul(hv, sv, hv);
            if m == 2 {
                let _ = k.after(&dl).vmuls(hv, Vrf { slice: sl[si], off: vmax - 2, len: 1 }, hv);
            } else {
                let _ = k.after(&dl).vsumsq(hv, ss, false);
                let _ = k.after(&dl).vrms(hv, ss, d, 1e-6, hv);
                let _ = k.after(&dl).vload(dgam[si].at(0), Dt::Bf16, gv);
                let _ = k.after(&dl).vmul(hv, gv, hv);
                let _ = k.after(&dl).vrope(hv, hv, pos, d, 10000.0);
            }
            let st = k.after(&dl).vstore(hv, dout[si].at(j * d * 2), Dt::Bf16);
            if let Some(old) = vlast[si].replace(st) {
                keepv.push(old);
            }
        }
        if let Some(x) = xl {
            keepv.push(x);
        }
        if t + 1 < tiles2[si].len() {
            return;
        }
        // last tile of the slice: its outputs, issued now (the engine has no
        // more tiles; the startup overlaps the vector work)
        let v = vlast[si].take().unwrap();
        let hs = &heads2[si];
        let e = eng_of(k, sl[si]);
        let mut j = 0;
        while j < hs.len() {
            let (m, li) = which(hs[j]);
            let mut n = 1;
            while j + n < hs.len() && which(hs[j + n]).0 == m {
                n += 1;
            }
            let src = dout[si].at(j as u32 * d * 2);
            let tk = if m == 0 {
                let b = n as u32 * d * 2;
                k.after(&[&v]).copy(e, src, outs[0].at((li * d * 2) as u64), b, pk(b, 4096))
            } else {
                let p = pk(d * 2, 4096);
                k.after(&[&v]).dma(e, src, outs[m].at(((li * cl + slot) * d * 2) as u64), p, &[lp(n as u32, (d * 2) as i64, (cl * d * 2) as i64), lp(d * 2 / p, p as i64, p as i64)])
            };
            outs_t.borrow_mut().push(tk);
            j += n;
        }
        keepv.push(v);
    };
    stream8(k, &sl, &tiles, h, &bufs, &xs, &accs, pkt, &mut extra, &mut mid, &mut done);
    let mut all = outs_t.into_inner();
    all.extend(keepv);
    k.wait_all(all);
}

npu::kernels! { project_qkv => qkv }
