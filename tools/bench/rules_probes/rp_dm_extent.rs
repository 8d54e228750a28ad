use npu::*;
// Rule-sweep probe rp_dm_extent (tools/bench/rules_probes): PACKETS packets of 4096 bytes into a DM allocation of ALLOC bytes (E0105 beyond the allocation).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(0, ${ALLOC});
    let t = k.dma(engine(0, 0), w.at(0), d.at(0), 4096, &[lp(${PACKETS}, 4096, 4096)]);
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
