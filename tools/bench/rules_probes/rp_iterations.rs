use npu::*;
// Rule-sweep probe rp_iterations (tools/bench/rules_probes): A sequencer entry of ITERS iterations (E0103 above 65536).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(0, 65536);
    let t = k.dma(engine(0, 0), w.at(0), d.at(0), 256, &[lp(${ITERS}, 0, 0)]);
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
