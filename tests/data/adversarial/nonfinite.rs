// adversarial: non-finite output: normalises with eps = 0 the RMS of a zero vector, so every element of `out` is NaN
// expect: rejected
use npu::*;

fn ao(k: &mut Ctx) {
    let h = k.shape().hidden;
    let out = k.tensor("out");
    let dout = k.dm_alloc(0, h * 2);
    let chunk = 256u32.min(h);
    let v = k.vrf_alloc(0, chunk);
    let ss = k.vrf_alloc(0, 1);
    let t = k.vfill(v, 0.0);
    k.wait(t);
    let t = k.vsumsq(v, ss, false);
    k.wait(t);
    let t = k.vrms(v, ss, h, 0.0, v);
    k.wait(t);
    for i in 0..h / chunk {
        let t = k.vstore(v, dout.at(i * chunk * 2), Dt::Bf16);
        k.wait(t);
    }
    let t = k.copy(engine(0, 0), dout.at(0), out.at(0), h * 2, 256);
    k.wait(t);
}

npu::kernels! { attention_output => ao }
