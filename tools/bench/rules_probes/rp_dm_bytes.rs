use npu::*;
// Rule-sweep probe rp_dm_bytes (tools/bench/rules_probes): One DM allocation of BYTES bytes (E0201 above the slice capacity).
fn k_(k: &mut Ctx) {
    let _d = k.dm_alloc(0, ${BYTES});
}
npu::kernels! { attention_output => k_ }
