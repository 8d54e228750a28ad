// adversarial: input ignored: ignores its inputs and writes a constant of plausible magnitude (|out| ~ 1, as the reference) into `out`
// expect: rejected
use npu::*;

fn ao(k: &mut Ctx) {
    let h = k.shape().hidden;
    let out = k.tensor("out");
    let dout = k.dm_alloc(0, h * 2);
    let chunk = 256u32.min(h);
    let v = k.vrf_alloc(0, chunk);
    let t = k.vfill(v, 1.0);
    k.wait(t);
    for i in 0..h / chunk {
        let t = k.vstore(v, dout.at(i * chunk * 2), Dt::Bf16);
        k.wait(t);
    }
    let t = k.copy(engine(0, 0), dout.at(0), out.at(0), h * 2, 256);
    k.wait(t);
}

npu::kernels! { attention_output => ao }
