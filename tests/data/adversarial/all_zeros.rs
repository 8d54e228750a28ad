// adversarial: zero output: writes zeros into `out`; where the reference is small a loose absolute tolerance would let it through, the magnitude check must not
// expect: rejected
use npu::*;

fn ao(k: &mut Ctx) {
    let h = k.shape().hidden;
    let out = k.tensor("out");
    let dout = k.dm_alloc(0, h * 2);
    let chunk = 256u32.min(h);
    let v = k.vrf_alloc(0, chunk);
    let t = k.vfill(v, 0.0);
    k.wait(t);
    for i in 0..h / chunk {
        let t = k.vstore(v, dout.at(i * chunk * 2), Dt::Bf16);
        k.wait(t);
    }
    let t = k.copy(engine(0, 0), dout.at(0), out.at(0), h * 2, 256);
    k.wait(t);
}

npu::kernels! { attention_output => ao }
