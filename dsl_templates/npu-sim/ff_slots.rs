// feedforward, design family "rounds_slots" (every command issued up front;
// ordering is device-side with `after`, so DMA startups and pass issues
// overlap the waits):
// - phase 1 (gate/up): the ffn rows are dealt in rounds; in round m slice s
//   owns a block of rows, streamed as tiles of at most R1MAX gate + R1MAX up
//   rows (one sequencer program each for weights and, per two tiles, block
//   scales), one fused pass per tile, GeGLU into a block of h. A finished
//   block is broadcast over the switch network to every slice's copy of h in
//   the background: round m is the K chunk m of phase 2, so phase 2 never
//   waits on a barrier.
// - phase 2 (down): each slice owns hidden/16 rows; their block scales are
//   resident; K outer in chunks, as many row groups per chunk as DM allows,
//   accumulating.
// - RMSNorm of the result: per-slice sqrt(sum of squares) -> 256-byte HBM
//   slots -> every slice reads all slots back and normalises its rows.
// One DMA engine per slice; the first tile of slice s is cut into
// 1 + s % STAGGER commands so that the slices' startups do not line up.
// Packets of at most PACKET bytes. The DM layout is computed from k.hw().
use npu::*;

struct Toks {
    v: Vec<Option<Token>>,
}
impl Toks {
    fn put(&mut self, t: Token) -> usize {
        self.v.push(Some(t));
        self.v.len() - 1
    }
    fn refs(&self, ids: &[usize]) -> Vec<&Token> {
        ids.iter().map(|&i| self.v[i].as_ref().unwrap()).collect()
    }
}

/// DMA-written DM regions of one slice and the commands that read them last.
#[derive(Default)]
struct Regions {
    r: Vec<(u32, u32, Vec<usize>)>,
}
impl Regions {
    /// A DMA is about to write [lo, hi): returns the tokens it must follow
    /// and forgets the regions it overwrites.
    fn claim(&mut self, lo: u32, hi: u32) -> Vec<usize> {
        let mut deps = vec![];
        self.r.retain(|(a, b, rd)| {
            if *a < hi && lo < *b {
                deps.extend(rd.iter().cloned());
                false
            } else {
                true
            }
        });
        deps
    }
    fn add(&mut self, lo: u32, hi: u32, readers: Vec<usize>) {
        self.r.push((lo, hi, readers));
    }
}

const STAGGER: u32 = ${STAGGER};
const R1MAX: u32 = ${R1MAX};
const PACKET: u32 = ${PACKET};

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

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
fn lcm(a: u32, b: u32) -> u32 {
    a / gcd(a, b) * b
}
fn up_to(x: u32, m: u32) -> u32 {
    (x + m - 1) / m * m
}

/// Largest multiple of `m` dividing `n` that is <= max (0 if none).
fn div_of(n: u32, max: u32, m: u32) -> u32 {
    let mut c = (max / m) * m;
    while c >= m && n % c != 0 {
        c -= m;
    }
    c
}

fn ff(k: &mut Ctx) {
    let s = k.shape();
    let hw = k.hw();
    let (h, l) = (s.hidden, s.ffn);
    let ns = hw.slices;
    let spc = hw.slices_per_cluster;
    let epc = hw.dma_engines_per_cluster;
    let maxp = hw.max_packet_bytes.min(PACKET);
    let lanes = hw.lanes;
    let trf_cap = hw.trf_bytes_per_lane / 2;
    let vrf_cap = hw.vrf_bytes / 4;
    let dm_cap = hw.dm_bytes;

    // ---------------------------------------------------------- partition
    // phase-1 row unit: 256-aligned gate/up rows and block-scale rows, lanes
    let u1 = lcm(lcm(lanes, 256 / gcd(256, h / 2)), 256 / gcd(256, h / 16));
    // round = chunk: KC = NS*BH columns, KC/2 bytes a multiple of 256, <= TRF
    let mut best: Option<(u32, u32)> = None; // (bh, kc)
    let mut bh = u1;
    while bh * ns as u32 <= l {
        let kc = bh * ns as u32;
        if l % kc == 0 && (kc / 2) % 256 == 0 && kc <= trf_cap && kc % 64 == 0 {
            best = Some((bh, kc));
        }
        bh += u1;
    }
    let (bh, kc) = best.expect("ff_slots: no chunking for this shape");
    let rounds = l / kc;
    // phase-1 tile rows: largest multiple of u1 dividing bh, <= R1MAX
    let r1 = div_of(bh, R1MAX.max(u1), u1);
    let t1 = bh / r1; // tiles per block
    let sg_t = if t1 % 2 == 0 { 2 } else { 1 }; // tiles per scale command
    let n1 = rounds * t1; // tiles per slice
    let ng = n1 / sg_t;
    // phase-2 rows per slice (multiples of the lanes, even)
    let mut rows2 = vec![0u32; ns];
    {
        let units = h / lanes;
        for i in 0..ns {
            let u = units / ns as u32 + if (i as u32) < units % ns as u32 { 1 } else { 0 };
            rows2[i] = u * lanes;
        }
    }
    let mut row0 = vec![0u32; ns];
    for i in 1..ns {
        row0[i] = row0[i - 1] + rows2[i - 1];
    }
    let maxr2 = *rows2.iter().max().unwrap();

    // ---------------------------------------------------------- DM layout
    let wt1 = 2 * r1 * h / 2; // phase-1 weight tile bytes
    let st1 = sg_t * 2 * r1 * h / 16; // phase-1 scale group bytes
    let p2s = up_to(maxr2 * l / 16, 256); // phase-2 resident scales
    let hb = up_to(l * 2, 256);
    let small = 256 /*red*/ + 256 /*scal*/ + 2 * 1024 /*x,post parts*/ + up_to(maxr2 * 2, 256) /*out*/;
    let rb = hb + small;
    let xg = up_to(2 * h * 2, 256);
    let redall = up_to(ns as u32 * 256, 256);
    // phase 2 row groups: 2 tiles must fit below the resident scales
    let a1 = up_to(wt1, 256) + up_to(st1, 256); // phase-1 buffers A (WA, SA); B (WB, SB) at `top`
    let top = dm_cap - p2s.max(a1);
    assert!(rb + a1 + xg + redall <= top, "ff_slots: DM layout does not fit");
    let ring2 = top - rb - redall;
    let mut g2 = 1u32;
    loop {
        let rg = up_to((maxr2 + g2 - 1) / g2, lanes);
        if 2 * up_to(rg * kc / 2, 256) <= ring2 {
            break;
        }
        g2 += 1;
    }
    let rg2 = up_to((maxr2 + g2 - 1) / g2, lanes);
    let t2b = up_to(rg2 * kc / 2, 256);
    let wa = rb;
    let sa = wa + up_to(wt1, 256);
    let xg_at = sa + up_to(st1, 256);
    let red_at = top - redall;
    let wbuf = [wa, top];
    let sbuf = [sa, top + up_to(wt1, 256)];
    let t2buf = [rb, rb + t2b];
    assert!(xg_at + xg <= red_at && rb + 2 * t2b <= red_at);

    // ---------------------------------------------------------- tensors
    let x = k.tensor("x");
    let gam = k.tensor("ffn_norm");
    let wg = k.tensor("w_gate");
    let wgbs = k.tensor("w_gate_bs");
    let wgs = k.tensor("w_gate_s");
    let wu = k.tensor("w_up");
    let wubs = k.tensor("w_up_bs");
    let wus = k.tensor("w_up_s");
    let wd = k.tensor("w_down");
    let wdbs = k.tensor("w_down_bs");
    let wds = k.tensor("w_down_s");
    let post = k.tensor("post_norm");
    let out = k.tensor("out");
    let scratch = k.hbm_alloc(ns as u64 * 256);

    let mut dm = vec![];
    for sl in 0..ns {
        dm.push(k.dm_alloc(sl, dm_cap)); // whole DM, laid out by hand
    }
    let at = |sl: usize, off: u32| Loc::Dm(sl, dm[sl].addr + off);
    let eng = |sl: usize| engine(sl / spc, (sl % spc) % epc);

    // VRF layout
    let misc = 256u32;
    let mut vacc2 = vec![];
    let mut vmisc = vec![];
    let mut vx = vec![];
    for sl in 0..ns {
        vacc2.push(k.vrf_alloc(sl, maxr2));
        vmisc.push(k.vrf_alloc(sl, misc));
        vx.push(k.vrf_alloc(sl, vrf_cap - maxr2 - misc));
    }
    let xlen = vrf_cap - maxr2 - misc;
    // misc offsets
    let (m_ss, m_tot, m_scal, m_ssv, m_sv) = (1u32, 3u32, 16u32, 64u32, 128u32);
    assert!(m_sv + 2 * r1 <= misc);
    // X region, phase 1
    let (x_acc1, x_hblk) = (0u32, 4 * r1);
    assert!(x_hblk + bh <= xlen);
    let cx = div_of(h, xlen / 2, 64);
    let cs = div_of(h, xlen, 64);
    let stg = div_of(kc, xlen, 64);
    let mut xt = vec![];
    for sl in 0..ns {
        xt.push(k.trf_alloc(sl, trf_cap));
    }

    let mut tk = Toks { v: vec![] };
    let mut reg: Vec<Regions> = (0..ns).map(|_| Regions::default()).collect();

    // ---------------------------------------------------------- x stage loads
    let mut t_xg = vec![0usize; ns];
    for sl in 0..ns {
        let p = pk(h * 2, maxp);
        let d = reg[sl].claim(xg_at, xg_at + 2 * h * 2);
        let t = k.after(&tk.refs(&d)).dma(eng(sl), x.at(0), at(sl, xg_at), p, &[lp(2, (gam.addr - x.addr) as i64, (h * 2) as i64), lp(h * 2 / p, p as i64, p as i64)]);
        t_xg[sl] = tk.put(t);
    }

    // phase-1 tile / scale DMA issue helpers
    let tile_rows = |sl: usize, t: u32| -> u32 {
        let m = t / t1;
        ((m * ns as u32 + sl as u32) * bh) + (t % t1) * r1
    };
    let wbuf_of = |t: u32| wbuf[((n1 - 1 - t) % 2) as usize];
    let sbuf_of = |g: u32| sbuf[((ng - 1 - g) % 2) as usize];
    let mut t_w1 = vec![vec![0usize; n1 as usize]; ns];
    let mut t_s1 = vec![vec![0usize; ng as usize]; ns];
    let mut t_p1 = vec![vec![0usize; n1 as usize]; ns];

    let issue_w1 = |k: &mut Ctx, tk: &mut Toks, reg: &mut Vec<Regions>, sl: usize, t: u32| -> usize {
        let r0 = tile_rows(sl, t);
        let b = wbuf_of(t);
        let bytes = r1 * h / 2;
        let p = pk(bytes, maxp);
        let d = reg[sl].claim(b, b + 2 * bytes);
        // stagger: the first tile of slice s in 1 + s % STAGGER commands, so
        // that the engines' later startups do not line up
        let np = bytes / p;
        let parts = if t == 0 { (1 + (sl as u32 % STAGGER)).min(np) } else { 1 };
        let mut last = 0;
        for j in 0..parts {
            let (a0, a1) = (np * j / parts, np * (j + 1) / parts);
            k.after(&tk.refs(&d));
            let t = k.dma(eng(sl), wg.at((r0 * h / 2 + a0 * p) as u64), at(sl, b + a0 * p), p, &[lp(2, wu.addr as i64 - wg.addr as i64, bytes as i64), lp(a1 - a0, p as i64, p as i64)]);
            last = tk.put(t);
        }
        last
    };
    let issue_s1 = |k: &mut Ctx, tk: &mut Toks, reg: &mut Vec<Regions>, sl: usize, g: u32| -> usize {
        let t0 = g * sg_t;
        let r0 = tile_rows(sl, t0);
        let b = sbuf_of(g);
        let bytes = r1 * h / 16;
        let p = pk(bytes, maxp);
        let d = reg[sl].claim(b, b + sg_t * 2 * bytes);
        k.after(&tk.refs(&d));
        let t = k.dma(eng(sl), wgbs.at((r0 * h / 16) as u64), at(sl, b), p, &[lp(sg_t, bytes as i64, 2 * bytes as i64), lp(2, wubs.addr as i64 - wgbs.addr as i64, bytes as i64), lp(bytes / p, p as i64, p as i64)]);
        tk.put(t)
    };

    // first tile and its scales on every engine, then the scalars
    let mut t_scal = vec![0usize; ns];
    for sl in 0..ns {
        t_w1[sl][0] = issue_w1(k, &mut tk, &mut reg, sl, 0);
        t_s1[sl][0] = issue_s1(k, &mut tk, &mut reg, sl, 0);
        // scalars: gate, up, down scales (f32) 64 bytes apart
        let v = [wgs.addr, wus.addr, wds.addr];
        let t = if v[1] - v[0] == v[2] - v[1] {
            k.dma(eng(sl), wgs.at(0), at(sl, hb + 256), 4, &[lp(3, (v[1] - v[0]) as i64, 64)])
        } else {
            let _a = k.copy(eng(sl), wgs.at(0), at(sl, hb + 256), 4, 4);
            let _b = k.copy(eng(sl), wus.at(0), at(sl, hb + 256 + 64), 4, 4);
            k.copy(eng(sl), wds.at(0), at(sl, hb + 256 + 128), 4, 4)
        };
        t_scal[sl] = tk.put(t);
    }

    // ---------------------------------------------------------- x stage (vector)
    let mut t_xst = vec![0usize; ns];
    for sl in 0..ns {
        let vm = vmisc[sl];
        let va = vx[sl].sub(0, cx);
        let vb = vx[sl].sub(cx, cx);
        let _ = k.vfill(vm.sub(m_ssv, 64), 0.0);
        // sum of squares first (as the reference: x * r * gamma, then bf16)
        let vs = vx[sl].sub(0, cs);
        for i in 0..h / cs {
            let _ = k.after(&tk.refs(&[t_xg[sl]])).vload(at(sl, xg_at + i * cs * 2), Dt::Bf16, vs);
            let _ = k.vsumsq(vs, vm.sub(m_ss, 1), i > 0);
        }
        for i in 0..h / cx {
            let _ = k.after(&tk.refs(&[t_xg[sl]])).vload(at(sl, xg_at + i * cx * 2), Dt::Bf16, va);
            let _ = k.vrms(va, vm.sub(m_ss, 1), h, 1e-6, va);
            let _ = k.after(&tk.refs(&[t_xg[sl]])).vload(at(sl, xg_at + h * 2 + i * cx * 2), Dt::Bf16, vb);
            let _ = k.vmul(va, vb, va);
            let _ = k.vtrf(va, xt[sl].sub(i * cx, cx));
        }
        let sv = vm.sub(m_sv, 2 * r1);
        let _ = k.vfill(sv, 1.0);
        let _ = k.after(&tk.refs(&[t_scal[sl]])).vload(at(sl, hb + 256), Dt::F32, vm.sub(m_scal, 33));
        let _ = k.vmuls(sv.sub(0, r1), vm.sub(m_scal, 1), sv.sub(0, r1));
        let t = k.vmuls(sv.sub(r1, r1), vm.sub(m_scal + 16, 1), sv.sub(r1, r1));
        t_xst[sl] = tk.put(t);
        reg[sl].add(xg_at, xg_at + 2 * h * 2, vec![t_xst[sl]]);
    }

    // ---------------------------------------------------------- phase 1
    // per slice: DMA t+1 (and its scales) issued before pass t
    let mut t_vlast = vec![0usize; ns]; // last vector op of the previous tile on acc1[t%2]
    let mut acc_rd: Vec<[Option<usize>; 2]> = vec![[None, None]; ns];
    let mut t_hst = vec![vec![0usize; rounds as usize]; ns]; // vstore of block m
    let mut t_sw: Vec<Vec<Vec<usize>>> = vec![vec![vec![]; rounds as usize]; ns]; // switch copies INTO slice, per round
    for t in 0..n1 {
        for sl in 0..ns {
            if t + 1 < n1 {
                if (t + 1) % sg_t == 0 {
                    t_s1[sl][((t + 1) / sg_t) as usize] = issue_s1(k, &mut tk, &mut reg, sl, (t + 1) / sg_t);
                }
                t_w1[sl][(t + 1) as usize] = issue_w1(k, &mut tk, &mut reg, sl, t + 1);
            }
        }
        for sl in 0..ns {
            let b = wbuf_of(t);
            let g = t / sg_t;
            let sbb = sbuf_of(g) + (t % sg_t) * 2 * r1 * h / 16;
            let acc = vx[sl].sub(x_acc1 + (t % 2) * 2 * r1, 2 * r1);
            let mut deps = vec![t_w1[sl][t as usize], t_s1[sl][g as usize], t_xst[sl]];
            if let Some(a) = acc_rd[sl][(t % 2) as usize] {
                deps.push(a);
            }
            let p = k.after(&tk.refs(&deps)).pass(&Pass {
                slice: sl,
                w: Tile { addr: dm[sl].addr + b, rows: 2 * r1, cols: h, pitch: h / 2, dt: Dt::Fp4E2m1 },
                scales: Some(Tile { addr: dm[sl].addr + sbb, rows: 2 * r1, cols: h / 16, pitch: h / 16, dt: Dt::Fp8E4m3 }),
                x: xt[sl].sub(0, h),
                acc,
                accumulate: false,
            });
            let pi = tk.put(p);
            t_p1[sl][t as usize] = pi;
            reg[sl].add(b, b + 2 * r1 * h / 2, vec![pi]);
            if t % sg_t == sg_t - 1 {
                let sb0 = sbuf_of(g);
                reg[sl].add(sb0, sb0 + sg_t * 2 * r1 * h / 16, vec![pi]);
            }
            // epilogue
            let vm = vmisc[sl];
            let _ = k.after(&tk.refs(&[pi])).vmul(acc, vm.sub(m_sv, 2 * r1), acc);
            let ti = t % t1;
            let hblk = vx[sl].sub(x_hblk, bh);
            let gg = k.after(&tk.refs(&[pi])).vgeglu(acc.sub(0, r1), acc.sub(r1, r1), hblk.sub(ti * r1, r1));
            let gi = tk.put(gg);
            acc_rd[sl][(t % 2) as usize] = Some(gi);
            t_vlast[sl] = gi;
            if ti == t1 - 1 {
                let m = t / t1;
                let blk = m * ns as u32 + sl as u32;
                let st = k.vstore(hblk, at(sl, blk * bh * 2), Dt::Bf16);
                let si = tk.put(st);
                t_hst[sl][m as usize] = si;
                t_vlast[sl] = si;
                for dd in 1..ns {
                    let d = (sl + dd) % ns;
                    let c = k.after(&tk.refs(&[si])).switch_copy(at(sl, blk * bh * 2), at(d, blk * bh * 2), bh * 2);
                    let ci = tk.put(c);
                    t_sw[d][m as usize].push(ci);
                }
            }
        }
    }

    // ---------------------------------------------------------- phase 2
    // resident block scales, then the x / post parts
    let mut t_p2s = vec![0usize; ns];
    let mut t_xp = vec![0usize; ns];
    let mut t_w2: Vec<Vec<usize>> = vec![vec![]; ns];
    let n2 = rounds * g2;
    let grp = |sl: usize, g: u32| -> (u32, u32) {
        let o = (g * rg2).min(rows2[sl]);
        (o, (rows2[sl] - o).min(rg2))
    };
    let issue_w2 = |k: &mut Ctx, tk: &mut Toks, reg: &mut Vec<Regions>, sl: usize, i: u32| -> Option<usize> {
        let (c, g) = (i / g2, i % g2);
        let (go, gr) = grp(sl, g);
        if gr == 0 {
            return None;
        }
        let b = t2buf[(i % 2) as usize];
        let rowb = kc / 2;
        let p = pk(rowb, maxp);
        let d = reg[sl].claim(b, b + gr * rowb);
        k.after(&tk.refs(&d));
        let src = wd.at(((row0[sl] + go) * l / 2 + c * rowb) as u64);
        let t = k.dma(eng(sl), src, at(sl, b), p, &[lp(gr, (l / 2) as i64, rowb as i64), lp(rowb / p, p as i64, p as i64)]);
        Some(tk.put(t))
    };
    for sl in 0..ns {
        if rows2[sl] == 0 {
            continue;
        }
        let bytes = rows2[sl] * l / 16;
        let p = pk(bytes, maxp);
        let d = reg[sl].claim(top, top + bytes);
        let t = k.after(&tk.refs(&d)).copy(eng(sl), wdbs.at((row0[sl] * l / 16) as u64), at(sl, top), bytes, p);
        t_p2s[sl] = tk.put(t);
        // x and post_norm parts (aligned supersets)
        let lo = (row0[sl] * 2) / 256 * 256;
        let hi = up_to(row0[sl] * 2 + rows2[sl] * 2, 256);
        let xp_at = hb + 512;
        let pp = pk(hi - lo, maxp);
        let t = k.dma(eng(sl), x.at(lo as u64), at(sl, xp_at), pp, &[lp(2, post.addr as i64 - x.addr as i64, 1024), lp((hi - lo) / pp, pp as i64, pp as i64)]);
        t_xp[sl] = tk.put(t);
        for i in 0..2.min(n2) {
            if let Some(t) = issue_w2(k, &mut tk, &mut reg, sl, i) {
                t_w2[sl].push(t);
            } else {
                t_w2[sl].push(usize::MAX);
            }
        }
    }
    let mut t_p2: Vec<Vec<usize>> = vec![vec![]; ns];
    let mut last_trf_user: Vec<usize> = (0..ns).map(|sl| t_p1[sl][(n1 - 1) as usize]).collect();
    let mut t_trf = vec![0usize; ns];
    for i in 0..n2 {
        let (c, g) = (i / g2, i % g2);
        if g == 0 {
            // h chunk c -> TRF
            for sl in 0..ns {
                if rows2[sl] == 0 {
                    continue;
                }
                let mut deps = t_sw[sl][c as usize].clone();
                deps.push(t_hst[sl][c as usize]);
                let vs = vx[sl].sub(0, stg);
                let mut last = 0;
                for j in 0..kc / stg {
                    let _ = k.after(&tk.refs(&deps)).vload(at(sl, (c * kc + j * stg) * 2), Dt::Bf16, vs);
                    let t = k.after(&tk.refs(&[last_trf_user[sl]])).vtrf(vs, xt[sl].sub(j * stg, stg));
                    last = tk.put(t);
                }
                t_trf[sl] = last;
            }
        }
        for sl in 0..ns {
            if rows2[sl] == 0 {
                continue;
            }
            let (go, gr) = grp(sl, g);
            if gr == 0 {
                continue;
            }
            let b = t2buf[(i % 2) as usize];
            let wtok = t_w2[sl][i as usize];
            let p = k.after(&tk.refs(&[wtok, t_trf[sl], t_p2s[sl]])).pass(&Pass {
                slice: sl,
                w: Tile { addr: dm[sl].addr + b, rows: gr, cols: kc, pitch: kc / 2, dt: Dt::Fp4E2m1 },
                scales: Some(Tile { addr: dm[sl].addr + top + go * l / 16 + c * kc / 16, rows: gr, cols: kc / 16, pitch: l / 16, dt: Dt::Fp8E4m3 }),
                x: xt[sl].sub(0, kc),
                acc: vacc2[sl].sub(go, gr),
                accumulate: c > 0,
            });
            let pi = tk.put(p);
            t_p2[sl].push(pi);
            last_trf_user[sl] = pi;
            reg[sl].add(b, b + gr * kc / 2, vec![pi]);
            if i + 2 < n2 {
                if let Some(t) = issue_w2(k, &mut tk, &mut reg, sl, i + 2) {
                    t_w2[sl].push(t);
                } else {
                    t_w2[sl].push(usize::MAX);
                }
            }
        }
    }

    // ---------------------------------------------------------- RMSNorm of d, residual, out
    let mut t_red = vec![];
    for sl in 0..ns {
        let vm = vmisc[sl];
        let n = rows2[sl];
        let last = *t_p2[sl].last().unwrap();
        let acc = vacc2[sl].sub(0, n);
        let ssv = vm.sub(m_ssv, 64);
        let _ = k.after(&tk.refs(&[last])).vmuls(acc, vm.sub(m_scal + 32, 1), acc);
        let _ = k.after(&tk.refs(&[last])).vsumsq(acc, ssv.sub(0, 1), false);
        let _ = k.vrms(ssv.sub(0, 1), ssv.sub(0, 1), 1, 0.0, ssv.sub(0, 1));
        let st = k.vstore(ssv, at(sl, hb), Dt::F32);
        let sti = tk.put(st);
        let w = k.after(&tk.refs(&[sti])).copy(eng(sl), at(sl, hb), scratch.at(sl as u64 * 256), 256, 256);
        t_red.push(tk.put(w));
    }
    let mut t_fin = vec![];
    for sl in 0..ns {
        let d = reg[sl].claim(red_at, red_at + ns as u32 * 256);
        let mut deps = t_red.clone();
        deps.extend(d);
        let bytes = ns as u32 * 256;
        let p = pk(bytes, maxp);
        let r = k.after(&tk.refs(&deps)).copy(eng(sl), scratch.at(0), at(sl, red_at), bytes, p);
        let ri = tk.put(r);
        let vm = vmisc[sl];
        let n = rows2[sl];
        let acc = vacc2[sl].sub(0, n);
        // post and x parts
        let lo = (row0[sl] * 2) / 256 * 256;
        let off = row0[sl] * 2 - lo;
        let xp_at = hb + 512;
        let vpost = vx[sl].sub(ns as u32 * 64, n);
        let vxx = vx[sl].sub(ns as u32 * 64 + n, n);
        let _ = k.after(&tk.refs(&[t_xp[sl]])).vload(at(sl, xp_at + 1024 + off), Dt::Bf16, vpost);
        let _ = k.after(&tk.refs(&[*t_p2[sl].last().unwrap()])).vmul(acc, vpost, acc);
        let _ = k.after(&tk.refs(&[t_xp[sl]])).vload(at(sl, xp_at + off), Dt::Bf16, vxx);
        let vall = vx[sl].sub(0, ns as u32 * 64);
        let _ = k.after(&tk.refs(&[ri])).vload(at(sl, red_at), Dt::F32, vall);
        let lp2 = *t_p2[sl].last().unwrap();
        let _ = k.after(&tk.refs(&[lp2])).vsumsq(vall, vm.sub(m_tot, 1), false);
        let _ = k.after(&tk.refs(&[lp2])).vrms(acc, vm.sub(m_tot, 1), h, 1e-6, acc);
        let _ = k.after(&tk.refs(&[lp2])).vadd(acc, vxx, acc);
        let out_at = hb + 256 + 256 + 2048;
        let st = k.after(&tk.refs(&[lp2])).vstore(acc, at(sl, out_at), Dt::Bf16);
        let sti = tk.put(st);
        let w = k.after(&tk.refs(&[sti])).copy(eng(sl), at(sl, out_at), out.at((row0[sl] * 2) as u64), n * 2, n * 2);
        t_fin.push(tk.put(w));
    }
    let _ = (t_hst, t_p1, t_w1, t_s1, t_vlast);
    // retire everything
    for i in 0..tk.v.len() {
        if let Some(t) = tk.v[i].take() {
            k.wait(t);
        }
    }
}

npu::kernels! { feedforward => ff }
