// Official baseline: attention_output (O projection fp8 → RMSNorm → residual
// add). Correct and straightforward: one slice, one DMA engine, modest
// packets, every command waited on before the next is issued.
use npu::*;

const PKT: u32 = 2048; // DMA packet bytes
const ROWS: u32 = 16; // output rows per pass

fn eng() -> Engine {
    engine(0, 0)
}

fn pk(bytes: u32) -> u32 {
    let mut p = (PKT.min(bytes) / 256) * 256;
    while p >= 256 {
        if bytes % p == 0 {
            return p;
        }
        p -= 256;
    }
    bytes
}

fn load(k: &mut Ctx, src: Loc, dst: Loc, bytes: u32) {
    let t = k.copy(eng(), src, dst, bytes, pk(bytes));
    k.wait(t);
}

fn chunk_of(n: u32, max: u32) -> u32 {
    let mut c = (max / 64) * 64;
    while n % c != 0 {
        c -= 64;
    }
    c
}

fn ao(k: &mut Ctx) {
    let s = k.shape();
    let (h, kd) = (s.hidden, s.q_heads * s.head_dim);
    let sl = 0usize;
    let attn = k.tensor("attn");
    let resid = k.tensor("residual");
    let wo = k.tensor("wo");
    let wsc = k.tensor("wo_scale");
    let post = k.tensor("post_norm");
    let out = k.tensor("out");
    let da = k.dm_alloc(sl, kd * 2);
    let dr = k.dm_alloc(sl, h * 2);
    let dsc = k.dm_alloc(sl, h * 2);
    let dpost = k.dm_alloc(sl, h * 2);
    let dd = k.dm_alloc(sl, h * 4);
    let dout = k.dm_alloc(sl, h * 2);
    let wt = k.dm_alloc(sl, ROWS * kd);
    let big = k.vrf_alloc(sl, 1536);
    let ss = k.vrf_alloc(sl, 1);
    let acc = k.vrf_alloc(sl, ROWS);
    let scv = k.vrf_alloc(sl, ROWS);
    let xt = k.trf_alloc(sl, kd);

    load(k, attn.at(0), da.at(0), kd * 2);
    load(k, resid.at(0), dr.at(0), h * 2);
    load(k, wsc.at(0), dsc.at(0), h * 2);
    load(k, post.at(0), dpost.at(0), h * 2);
    // attn (bf16) → TRF operands
    let c = chunk_of(kd, 1024);
    for i in 0..kd / c {
        let t = k.vload(da.at(i * c * 2), Dt::Bf16, big.sub(0, c));
        k.wait(t);
        let t = k.vtrf(big.sub(0, c), xt.sub(i * c, c));
        k.wait(t);
    }
    // O projection, ROWS rows per pass
    for r0 in (0..h).step_by(ROWS as usize) {
        load(k, wo.at((r0 * kd) as u64), wt.at(0), ROWS * kd);
        let t = k.pass(&Pass { slice: sl, w: Tile { addr: wt.addr, rows: ROWS, cols: kd, pitch: kd, dt: Dt::Fp8E4m3 }, scales: None, x: xt, acc, accumulate: false });
        k.wait(t);
        let t = k.vload(dsc.at(r0 * 2), Dt::Bf16, scv);
        k.wait(t);
        let t = k.vmul(acc, scv, acc);
        k.wait(t);
        let t = k.vstore(acc, dd.at(r0 * 4), Dt::F32);
        k.wait(t);
    }
    // RMSNorm(o) * post_norm + residual
    let c = chunk_of(h, 768);
    let (va, vb) = (big.sub(0, c), big.sub(768, c));
    for i in 0..h / c {
        let t = k.vload(dd.at(i * c * 4), Dt::F32, va);
        k.wait(t);
        let t = k.vsumsq(va, ss, i > 0);
        k.wait(t);
    }
    for i in 0..h / c {
        let t = k.vload(dd.at(i * c * 4), Dt::F32, va);
        k.wait(t);
        let t = k.vrms(va, ss, h, 1e-6, va);
        k.wait(t);
        let t = k.vload(dpost.at(i * c * 2), Dt::Bf16, vb);
        k.wait(t);
        let t = k.vmul(va, vb, va);
        k.wait(t);
        let t = k.vload(dr.at(i * c * 2), Dt::Bf16, vb);
        k.wait(t);
        let t = k.vadd(va, vb, va);
        k.wait(t);
        let t = k.vstore(va, dout.at(i * c * 2), Dt::Bf16);
        k.wait(t);
    }
    let t = k.copy(eng(), dout.at(0), out.at(0), h * 2, pk(h * 2));
    k.wait(t);
}

npu::kernels! { attention_output => ao }
