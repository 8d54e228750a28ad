// project_qkv, design family "heads_pipelined": the q, k and v heads (q_heads +
// 2·kv_heads heads of head_dim rows) are split over SLICES slices, spread over
// CLUSTERS clusters, so that every slice owns whole heads and finishes them
// itself (scale, per-head RMSNorm, RoPE, bf16, write to q_out / the ring
// cache): no data moves between slices. Every slice computes RMSNorm(x) for
// its own operand. Weights stream in tiles of ROWS rows (at most a head)
// through a ring of BUFFERS DM buffers; a tile is loaded by SPLIT DMA
// commands on ENGINES engines per cluster, packets of at most PACKET bytes,
// DM rows PAD bytes apart. MERGE = 1 loads x and attn_norm (q_norm and
// k_norm) with one sequencer program each.
use npu::*;

const SLICES: usize = ${SLICES};
const CLUSTERS: usize = ${CLUSTERS};
const ENGINES: usize = ${ENGINES};
const SPLIT: usize = ${SPLIT};
const PACKET: u32 = ${PACKET};
const ROWS: u32 = ${ROWS};
const BUFFERS: usize = ${BUFFERS};
const PAD: u32 = ${PAD};
const MERGE: u32 = ${MERGE};

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

#[derive(Clone, Copy)]
struct Tl {
    m: usize,  // matrix: 0 q, 1 k, 2 v
    hh: u32,   // head within the matrix
    r: u32,    // first row within the head
    tr: u32,   // rows
    hi: usize, // index of the head among the slice's heads
}

struct Sl {
    sl: usize,
    engs: Vec<Engine>,
    tiles: Vec<Tl>,
    nheads: usize,
    bufs: Vec<Dm>,
    accs: Vec<Vrf>,
    scv: Vrf,
    sc: [Dm; 3],
    hbuf: Dm,
    dg: Dm,
    outs: Dm,
    stage: Vrf,
    xt: Trf,
    loads: Vec<Vec<Token>>,
    vec_tok: Vec<Option<Token>>,
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
    let nh = [nq, nkv, nkv];
    let total_heads = nq + 2 * nkv;
    let pitch = h + PAD;
    let tile_rows = ROWS.min(d);

    let mut sls: Vec<Sl> = vec![];
    for i in 0..SLICES {
        let c = i % CLUSTERS;
        let j = i / CLUSTERS;
        let sl = c * hw.slices_per_cluster + j;
        let g0 = i as u32 * total_heads / SLICES as u32;
        let g1 = (i as u32 + 1) * total_heads / SLICES as u32;
        let mut tiles = vec![];
        for (hi, gh) in (g0..g1).enumerate() {
            let (m, hh) = if gh < nq { (0, gh) } else if gh < nq + nkv { (1, gh - nq) } else { (2, gh - nq - nkv) };
            let mut r = 0;
            while r < d {
                let tr = tile_rows.min(d - r);
                tiles.push(Tl { m, hh, r, tr, hi });
                r += tr;
            }
        }
        let engs = (0..SPLIT).map(|m| engine(c, (j * SPLIT + m) % ENGINES)).collect();
        let z = Dm { slice: sl, addr: 0, bytes: 0 };
        let zv = Vrf { slice: sl, off: 0, len: 0 };
        sls.push(Sl { sl, engs, tiles, nheads: (g1 - g0) as usize, bufs: vec![], accs: vec![], scv: zv, sc: [z, z, z], hbuf: z, dg: z, outs: z, stage: zv, xt: Trf { slice: sl, off: 0, len: 0 }, loads: vec![], vec_tok: vec![] });
    }

    // per slice: operand loads first (x, attn_norm, q_norm, k_norm, the scales it needs)
    let c = chunk_of(h, 768);
    let mut pre = vec![];
    for x_ in sls.iter_mut() {
        if x_.tiles.is_empty() {
            pre.push(None);
            continue;
        }
        let sl = x_.sl;
        let e = x_.engs[0];
        let dxn = k.dm_alloc(sl, h * 4); // x, attn_norm
        let dg = k.dm_alloc(sl, d * 4); // q_norm, k_norm
        x_.dg = dg;
        x_.bufs = (0..BUFFERS).map(|_| k.dm_alloc(sl, tile_rows * pitch)).collect();
        x_.accs = (0..BUFFERS).map(|_| k.vrf_alloc(sl, tile_rows)).collect();
        x_.vec_tok = (0..BUFFERS).map(|_| None).collect();
        x_.scv = k.vrf_alloc(sl, tile_rows);
        x_.hbuf = k.dm_alloc(sl, d * 4);
        x_.outs = k.dm_alloc(sl, x_.nheads as u32 * d * 2);
        x_.stage = k.vrf_alloc(sl, 2 * 768.max(d));
        x_.xt = k.trf_alloc(sl, h);
        let mut t = load_pair(k, e, x, norm, dxn, h * 2);
        t.extend(load_pair(k, e, qn, kn, dg, d * 2));
        let mut used = [false; 3];
        for tl in x_.tiles.iter() {
            used[tl.m] = true;
        }
        for m in 0..3 {
            if used[m] {
                let n = nh[m] * d * 2;
                x_.sc[m] = k.dm_alloc(sl, n);
                t.push(k.copy(e, wsc[m].at(0), x_.sc[m].at(0), n, pk(n, PACKET)));
            }
        }
        pre.push(Some((dxn, t)));
    }
    let issue_load = |k: &mut Ctx, x_: &Sl, t: usize| -> Vec<Token> {
        let b = t % BUFFERS;
        let tl = x_.tiles[t];
        let row0 = tl.hh * d + tl.r;
        let mut v = vec![];
        for m in 0..SPLIT as u32 {
            let a = tl.tr / 8 * m / SPLIT as u32 * 8;
            let z = tl.tr / 8 * (m + 1) / SPLIT as u32 * 8;
            if z > a {
                v.push(load_rows(k, x_.engs[m as usize], w[tl.m].addr + ((row0 + a) * h) as u64, x_.bufs[b].at(a * pitch), z - a, h, h, pitch));
            }
        }
        v
    };
    for x_ in sls.iter_mut() {
        for t in 0..BUFFERS.min(x_.tiles.len()) {
            let l = issue_load(k, x_, t);
            x_.loads.push(l);
        }
    }
    // xn = bf16(rmsnorm(x) · attn_norm) on every slice; gamma of q, k kept in DM
    let mut vt = vec![];
    for (i, x_) in sls.iter().enumerate() {
        let (dxn, t) = match pre[i].take() {
            Some(p) => p,
            None => continue,
        };
        k.wait_all(t);
        let ss = x_.scv.sub(0, 1);
        let (va, vb) = (x_.stage.sub(0, c), x_.stage.sub(768.max(d), c));
        for i in 0..h / c {
            let _ = k.vload(dxn.at(i * c * 2), Dt::Bf16, va);
            let _ = k.vsumsq(va, ss, i > 0);
        }
        let mut last = None;
        for i in 0..h / c {
            let _ = k.vload(dxn.at(i * c * 2), Dt::Bf16, va);
            let _ = k.vrms(va, ss, h, 1e-6, va);
            let _ = k.vload(dxn.at(h * 2 + i * c * 2), Dt::Bf16, vb);
            let _ = k.vmul(va, vb, va);
            last = Some(k.vtrf(va, x_.xt.sub(i * c, c)));
        }
        vt.push(last.unwrap());
    }
    k.wait_all(vt);

    let maxt = sls.iter().map(|x_| x_.tiles.len()).max().unwrap_or(0);
    let mut outw = vec![];
    for t in 0..maxt {
        let b = t % BUFFERS;
        let mut passes: Vec<Option<Token>> = vec![];
        for x_ in sls.iter_mut() {
            if t >= x_.tiles.len() {
                passes.push(None);
                continue;
            }
            let tl = x_.tiles[t];
            let l = std::mem::take(&mut x_.loads[t]);
            k.wait_all(l);
            if let Some(v) = x_.vec_tok[b].take() {
                k.wait(v);
            }
            passes.push(Some(k.pass(&Pass {
                slice: x_.sl,
                w: Tile { addr: x_.bufs[b].addr, rows: tl.tr, cols: h, pitch, dt: Dt::Fp8E4m3 },
                scales: None,
                x: x_.xt,
                acc: x_.accs[b].sub(0, tl.tr),
                accumulate: false,
            })));
        }
        for (i, x_) in sls.iter_mut().enumerate() {
            let p = match passes[i].take() {
                Some(p) => p,
                None => continue,
            };
            k.wait(p);
            let tl = x_.tiles[t];
            let acc = x_.accs[b].sub(0, tl.tr);
            let sv = x_.scv.sub(0, tl.tr);
            let _ = k.vload(x_.sc[tl.m].at((tl.hh * d + tl.r) * 2), Dt::Bf16, sv);
            let _ = k.vmul(acc, sv, acc);
            let ob = x_.outs.at(tl.hi as u32 * d * 2);
            let mut tok = if tl.m == 2 {
                k.vstore(acc, x_.outs.at((tl.hi as u32 * d + tl.r) * 2), Dt::Bf16)
            } else {
                k.vstore(acc, x_.hbuf.at(tl.r * 4), Dt::F32)
            };
            if tl.r + tl.tr == d {
                // head complete: RMSNorm · gamma, RoPE (q, k), then write it out
                if tl.m < 2 {
                    let dg = x_.dg;
                    let (hv, gv) = (x_.stage.sub(0, d), x_.stage.sub(768.max(d), d));
                    let ss = x_.scv.sub(0, 1);
                    let _ = k.vload(x_.hbuf.at(0), Dt::F32, hv);
                    let _ = k.vsumsq(hv, ss, false);
                    let _ = k.vrms(hv, ss, d, 1e-6, hv);
                    let _ = k.vload(dg.at(tl.m as u32 * d * 2), Dt::Bf16, gv);
                    let _ = k.vmul(hv, gv, hv);
                    let _ = k.vrope(hv, hv, pos, d, 10000.0);
                    tok = k.vstore(hv, ob, Dt::Bf16);
                }
                k.wait(tok);
                let dst = match tl.m {
                    0 => q_out.at((tl.hh * d * 2) as u64),
                    1 => kc.at(((tl.hh * cl + slot) * d * 2) as u64),
                    _ => vc.at(((tl.hh * cl + slot) * d * 2) as u64),
                };
                outw.push(k.copy(x_.engs[0], ob, dst, d * 2, pk(d * 2, PACKET)));
                x_.vec_tok[b] = None;
            } else {
                x_.vec_tok[b] = Some(tok);
            }
            if t + BUFFERS < x_.tiles.len() {
                let l = issue_load(k, x_, t + BUFFERS);
                x_.loads.push(l);
            }
        }
    }
    k.wait_all(outw);
}

npu::kernels! { project_qkv => qkv }
