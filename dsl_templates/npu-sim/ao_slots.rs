// attention_output, design family "granule_slots": the rows of wo are cut into
// granules of 128 rows (so every slice's rows start 256-byte aligned in `out`)
// and spread over SLICES compute slices of both clusters. Each slice streams
// its rows in tiles through a ring of BUFFERS DM buffers: a first tile of
// FMIN..ROWS rows (growing with the slice index, so that the slices' startups
// and passes do not line up), middle tiles of about ROWS rows, a last tile of
// LAST rows (a short last pass). A tile is SPLIT sequencer programs on SPLIT
// consecutive engines of the cluster; the engines left over in a cluster (if
// any) load the small inputs (attn, and wo_scale / post_norm / residual rows
// with one program) and write the exchange slots. The whole kernel is issued
// up front and ordered on the device with `after`, so fixed costs (DMA
// startups, pass issues, vector setups) overlap the weight stream. Per tile:
// the pass writes straight into the slice's row vector in the VRF, then
// × wo_scale, += sum of squares, × post_norm. RMSNorm exchange through HBM:
// every slice writes one 256-byte slot (sqrt of its partial sum of squares,
// or, for a last tile of few rows, the partial over the other tiles followed
// by the last tile's scaled rows, squared by the reader), every slice reads all
// slots back with one program and takes one vsumsq over them, then normalises
// its rows, adds the residual and writes them with one DMA.
// Needs q_heads*head_dim <= 4096 (one TRF operand).
use npu::*;

const SLICES: usize = ${SLICES};
const SPLIT: usize = ${SPLIT};
const PACKET: u32 = ${PACKET};
const ROWS: u32 = ${ROWS};
const LAST: u32 = ${LAST};
const FMIN: u32 = ${FMIN};
const BUFFERS: usize = ${BUFFERS};

const GRAN: u32 = 128;

/// Largest packet <= max that divides `bytes` and is a multiple of 256 (else `bytes`).
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

struct S {
    sl: usize,
    engs: Vec<Engine>, // the SPLIT weight engines
    spare: Engine,
    own: bool, // no spare engine: the small inputs go on the first weight engine
    r0: u32,
    n: u32,
    tiles: Vec<(u32, u32)>, // (first row within the slice, rows)
    bufs: Vec<Dm>,
    xd: Dm,
    vec: Dm,  // scale | post | residual rows (bf16)
    od: Dm,   // bf16 output rows
    slot: Dm, // 256 B: sqrt(partial) then the direct rows or zeros
    rb: Dm,   // every slice's slot, read back
    a: Vrf,   // row values (f32)
    big: Vrf, // staging for attn, then post | residual | scale (then the read-back slots)
    ss: Vrf,
    ssv: Vrf,
    allv: Vrf,
    x: Trf,
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
    let spc = hw.slices_per_cluster;
    let epc = hw.dma_engines_per_cluster;
    let ng = (h + GRAN - 1) / GRAN;
    let nsl = SLICES.min(hw.slices).min(ng as usize).max(1);
    let rows_mid = ROWS.max(8) / 8 * 8;
    let pkt = hw.max_packet_bytes.min(PACKET);
    let split = SPLIT.min(epc).max(1);

    let per_c: Vec<usize> = (0..hw.clusters).map(|c| (nsl + hw.clusters - 1 - c) / hw.clusters).collect();
    let mut sls: Vec<S> = vec![];
    for i in 0..nsl {
        let c = i % hw.clusters;
        let j = i / hw.clusters;
        let sl = c * spc + j;
        let r0 = ((i as u32 * ng / nsl as u32) * GRAN).min(h);
        let r1 = (((i as u32 + 1) * ng / nsl as u32) * GRAN).min(h);
        let n = r1 - r0;
        let used = per_c[c] * split;
        let engs: Vec<Engine> = (0..split).map(|m| engine(c, (j * split + m) % epc)).collect();
        let spare = if epc > used { engine(c, used + j % (epc - used)) } else { engs[0] };
        let mut tiles = vec![];
        let mut left = n;
        let fmin = FMIN.min(rows_mid);
        let f = ((fmin + (rows_mid - fmin) * i as u32 / nsl as u32 + 7) / 8 * 8).clamp(8, rows_mid).min(left);
        tiles.push((0, f));
        left -= f;
        let l = (LAST.max(8) / 8 * 8).min(left);
        left -= l;
        let mut r = f;
        let nmid = (left + rows_mid - 1) / rows_mid;
        for q in 0..nmid {
            let t = ((left / 8) * (q + 1) / nmid - (left / 8) * q / nmid) * 8;
            tiles.push((r, t));
            r += t;
        }
        if l > 0 {
            tiles.push((r, l));
        }
        sls.push(S {
            sl,
            engs,
            spare,
            own: epc <= used,
            r0,
            n,
            tiles,
            bufs: vec![],
            xd: Dm { slice: sl, addr: 0, bytes: 0 },
            vec: Dm { slice: sl, addr: 0, bytes: 0 },
            od: Dm { slice: sl, addr: 0, bytes: 0 },
            slot: Dm { slice: sl, addr: 0, bytes: 0 },
            rb: Dm { slice: sl, addr: 0, bytes: 0 },
            a: Vrf { slice: sl, off: 0, len: 0 },
            big: Vrf { slice: sl, off: 0, len: 0 },
            ss: Vrf { slice: sl, off: 0, len: 0 },
            ssv: Vrf { slice: sl, off: 0, len: 0 },
            allv: Vrf { slice: sl, off: 0, len: 0 },
            x: Trf { slice: sl, off: 0, len: 0 },
        });
    }
    let spare_ok = (0..hw.clusters).all(|c| epc > per_c[c] * split);
    let vmax = hw.vrf_bytes / 4;
    // bytes of each slot read back: sqrt(partial), then the last tile's rows when few
    let gmax = [256u32, 128, 64].into_iter().find(|&g| sls.iter().all(|x| 3 * x.n + 80 + nsl as u32 * g / 4 <= vmax)).unwrap_or(64);
    let dlim = gmax / 4 - 1;
    let lmax = sls.iter().map(|x| { let l = x.tiles.last().unwrap().1; if l <= dlim { l + 1 } else { 1 } }).max().unwrap();
    let gp = lmax * 4;
    for x in sls.iter_mut() {
        let maxr = x.tiles.iter().map(|t| t.1).max().unwrap();
        x.bufs = (0..BUFFERS).map(|_| k.dm_alloc(x.sl, maxr * kd)).collect();
        x.xd = k.dm_alloc(x.sl, kd * 2);
        x.vec = k.dm_alloc(x.sl, 3 * x.n * 2);
        x.od = k.dm_alloc(x.sl, x.n * 2);
        x.slot = k.dm_alloc(x.sl, 256);
        x.rb = k.dm_alloc(x.sl, nsl as u32 * 256);
        x.a = k.vrf_alloc(x.sl, x.n);
        let bl = (vmax - x.n - 80).min(3 * x.n.max(kd.min(1024)));
        x.big = k.vrf_alloc(x.sl, bl);
        x.allv = x.big.sub(2 * x.n, nsl as u32 * gp / 4);
        x.ssv = k.vrf_alloc(x.sl, 64);
        x.ss = x.ssv.sub(0, 1);
        x.x = k.trf_alloc(x.sl, kd);
    }
    let scratch = k.hbm_alloc(nsl as u64 * 256);

    let mut keep: Vec<Token> = vec![];
    // one tile: SPLIT programs on the slice's weight engines, each after `dep`
    let issue_tile = |k: &mut Ctx, x: &S, t: usize, dep: Option<&Token>| -> Vec<Token> {
        let (r, rows) = x.tiles[t];
        let b = x.bufs[t % BUFFERS];
        let parts = x.engs.len() as u32;
        let mut v = vec![];
        for m in 0..parts {
            let a = rows / 8 * m / parts * 8;
            let z = rows / 8 * (m + 1) / parts * 8;
            if z > a {
                let bytes = (z - a) * kd;
                let src = wo.at(((x.r0 + r + a) * kd) as u64);
                let dst = b.at(a * kd);
                let p = pk(bytes, pkt);
                v.push(match dep {
                    Some(d) => k.after(&[d]).copy(x.engs[m as usize], src, dst, bytes, p),
                    None => k.copy(x.engs[m as usize], src, dst, bytes, p),
                });
            }
        }
        v
    };
    // 1. weight stream: the first BUFFERS tiles of every slice, first; the
    // small inputs on the spare engines (attn first: it is needed first).
    // A slice without a spare engine loads attn before its first tile and the
    // row vectors right behind it, on its own engine.
    let mut loads: Vec<Vec<Vec<Token>>> = sls.iter().map(|x| (0..x.tiles.len()).map(|_| vec![]).collect()).collect();
    let small = |k: &mut Ctx, x: &S| -> Vec<Token> {
        let nb2 = x.n * 2;
        let p = pk(nb2, pkt);
        let srcs = [wsc.addr, post.addr, resid.addr];
        let mut ts = vec![];
        if srcs[1] as i64 - srcs[0] as i64 == srcs[2] as i64 - srcs[1] as i64 {
            ts.push(k.dma(x.spare, Loc::Hbm(srcs[0] + x.r0 as u64 * 2), x.vec.at(0), p, &[lp(3, srcs[1] as i64 - srcs[0] as i64, nb2 as i64), lp(nb2 / p, p as i64, p as i64)]));
        } else {
            for (m, a) in srcs.iter().enumerate() {
                ts.push(k.copy(x.spare, Loc::Hbm(a + x.r0 as u64 * 2), x.vec.at(m as u32 * nb2), nb2, p));
            }
        }
        ts
    };
    let mut xl: Vec<Option<Token>> = (0..nsl).map(|_| None).collect();
    let mut vl: Vec<Vec<Token>> = (0..nsl).map(|_| vec![]).collect();
    for t in 0..BUFFERS {
        for (i, x) in sls.iter().enumerate() {
            let own = x.own;
            if t == 0 && own {
                xl[i] = Some(k.copy(x.spare, attn.at(0), x.xd.at(0), kd * 2, pk(kd * 2, pkt)));
            }
            if t < x.tiles.len() {
                loads[i][t] = issue_tile(k, x, t, None);
            }
            if t == 0 && own {
                vl[i] = small(k, x);
            }
        }
    }
    for (i, x) in sls.iter().enumerate() {
        if xl[i].is_none() {
            xl[i] = Some(k.copy(x.spare, attn.at(0), x.xd.at(0), kd * 2, pk(kd * 2, pkt)));
        }
    }
    for (i, x) in sls.iter().enumerate() {
        if vl[i].is_empty() {
            vl[i] = small(k, x);
        }
    }
    let xl: Vec<Token> = xl.into_iter().map(|t| t.unwrap()).collect();
    // 3. operand attn → TRF; then scale/post/residual rows → VRF
    let mut xready = vec![];
    for (i, x) in sls.iter().enumerate() {
        keep.push(k.vfill(x.ssv, 0.0));
        keep.push(k.vstore(x.ssv, x.slot.at(0), Dt::F32));
        let c = chunk_of(kd, x.big.len.min(1024));
        let st = x.big.sub(0, c);
        let mut lt = None;
        for q in 0..kd / c {
            let t = k.after(&[&xl[i]]).vload(x.xd.at(q * c * 2), Dt::Bf16, st);
            keep.push(t);
            lt = Some(k.vtrf(st, x.x.sub(q * c, c)));
        }
        xready.push(lt.unwrap());
        let deps: Vec<&Token> = vl[i].iter().collect();
        let n = x.n;
        keep.push(k.after(&deps).vload(x.vec.at(0), Dt::Bf16, x.big.sub(2 * n, n)));
        keep.push(k.after(&deps).vload(x.vec.at(n * 2), Dt::Bf16, x.big.sub(0, n)));
        keep.push(k.after(&deps).vload(x.vec.at(n * 4), Dt::Bf16, x.big.sub(n, n)));
    }
    // 4. passes and per-tile vector work, tile by tile across the slices
    let maxt = sls.iter().map(|x| x.tiles.len()).max().unwrap_or(0);
    let mut lastvec: Vec<Option<Token>> = (0..nsl).map(|_| None).collect();
    let mut lastpass: Vec<Option<Token>> = (0..nsl).map(|_| None).collect();
    for t in 0..maxt {
        for i in 0..nsl {
            let x = &sls[i];
            if t >= x.tiles.len() {
                continue;
            }
            let (r, rows) = x.tiles[t];
            let ld = std::mem::take(&mut loads[i][t]);
            let acc = x.a.sub(r, rows);
            let mut deps: Vec<&Token> = ld.iter().collect();
            if t == 0 {
                deps.push(&xready[i]);
            }
            let tp = k.after(&deps).pass(&Pass { slice: x.sl, w: Tile { addr: x.bufs[t % BUFFERS].addr, rows, cols: kd, pitch: kd, dt: Dt::Fp8E4m3 }, scales: None, x: x.x, acc, accumulate: false });
            keep.extend(ld);
            // the buffer's next tile, behind this pass
            if t + BUFFERS < x.tiles.len() {
                loads[i][t + BUFFERS] = issue_tile(k, x, t + BUFFERS, Some(&tp));
            }
            let n = x.n;
            let sc = x.big.sub(2 * n + r, rows);
            let pn = x.big.sub(r, rows);
            keep.push(k.after(&[&tp]).vmul(acc, sc, acc));
            let nt = x.tiles.len();
            let direct = x.tiles[nt - 1].1 <= dlim;
            if direct && t + 1 == nt {
                lastvec[i] = Some(k.after(&[&tp]).vstore(acc, x.slot.at(4), Dt::F32));
                keep.push(k.after(&[&tp]).vmul(acc, pn, acc));
            } else if t + 1 == nt || (direct && t + 2 == nt) {
                keep.push(k.after(&[&tp]).vsumsq(acc, x.ss, t > 0));
                keep.push(k.vrms(x.ss, x.ss, 1, 0.0, x.ss));
                let sv = k.vstore(x.ss, x.slot.at(0), Dt::F32);
                if t + 1 == nt {
                    lastvec[i] = Some(sv);
                } else {
                    keep.push(sv);
                }
                keep.push(k.after(&[&tp]).vmul(acc, pn, acc));
            } else {
                keep.push(k.after(&[&tp]).vsumsq(acc, x.ss, t > 0));
                keep.push(k.after(&[&tp]).vmul(acc, pn, acc));
            }
            if let Some(p) = lastpass[i].replace(tp) {
                keep.push(p);
            }
        }
    }
    // 5. exchange through HBM: every slice writes its slot (spare engine when
    // the cluster has one), every slice reads all slots back on its last
    // weight engine (its startup overlaps the last tile)
    let mut sends = vec![];
    for (i, x) in sls.iter().enumerate() {
        let v = lastvec[i].take().unwrap();
        let we = if spare_ok { x.spare } else { *x.engs.last().unwrap() };
        sends.push(k.after(&[&v]).copy(we, x.slot.at(0), scratch.at(i as u64 * 256), 256, 256));
        keep.push(v);
    }
    let mut arrive = vec![];
    for x in sls.iter() {
        let deps: Vec<&Token> = sends.iter().collect();
        let b = nsl as u32 * 256;
        let e = *x.engs.last().unwrap();
        arrive.push(if gp == 256 {
            k.after(&deps).copy(e, scratch.at(0), x.rb.at(0), b, pk(b, hw.max_packet_bytes))
        } else {
            k.after(&deps).dma(e, scratch.at(0), x.rb.at(0), gp, &[lp(nsl as u32, 256, gp as i64)])
        });
    }
    // 6. finish the rows, write them out
    let mut outs = vec![];
    for (x, ar) in sls.iter().zip(arrive.into_iter()) {
        let n = x.n;
        keep.push(k.after(&[&ar]).vload(x.rb.at(0), Dt::F32, x.allv));
        keep.push(k.after(&[&ar]).vsumsq(x.allv, x.ss, false));
        keep.push(k.after(&[&ar]).vrms(x.a, x.ss, h, 1e-6, x.a));
        keep.push(k.after(&[&ar]).vadd(x.a, x.big.sub(n, n), x.a));
        let st = k.after(&[&ar]).vstore(x.a, x.od.at(0), Dt::Bf16);
        keep.push(ar);
        let e = *x.engs.last().unwrap();
        outs.push(k.after(&[&st]).copy(e, x.od.at(0), out.at(x.r0 as u64 * 2), n * 2, pk(n * 2, pkt)));
        keep.push(st);
    }
    keep.extend(sends);
    for p in lastpass.iter_mut() {
        if let Some(p) = p.take() {
            keep.push(p);
        }
    }
    keep.extend(xready);
    for v in vl {
        keep.extend(v);
    }
    keep.extend(xl);
    keep.extend(outs);
    k.wait_all(keep);
}

npu::kernels! { attention_output => ao }
