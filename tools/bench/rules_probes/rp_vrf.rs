use npu::*;
// Rule-sweep probe rp_vrf (tools/bench/rules_probes): One VRF allocation of ELEMS f32 elements (E0203 above 8 KB).
fn k_(k: &mut Ctx) {
    let _a = k.vrf_alloc(0, ${ELEMS});
}
npu::kernels! { attention_output => k_ }
