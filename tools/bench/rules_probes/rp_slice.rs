use npu::*;
// Rule-sweep probe rp_slice (tools/bench/rules_probes): A DM allocation on slice SLICE (E0204 when it does not exist).
fn k_(k: &mut Ctx) {
    let _d = k.dm_alloc(${SLICE}, 4096);
}
npu::kernels! { attention_output => k_ }
