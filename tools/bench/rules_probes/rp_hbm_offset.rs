use npu::*;
// Rule-sweep probe rp_hbm_offset (tools/bench/rules_probes): HBM reads starting OFFSET bytes into a tensor (E0104 when not 256-byte aligned).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(0, 65536);
    let t = k.dma(engine(0, 0), w.at(${OFFSET}), d.at(0), 256, &[lp(2, 256, 256)]);
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
