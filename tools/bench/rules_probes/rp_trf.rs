use npu::*;
// Rule-sweep probe rp_trf (tools/bench/rules_probes): One TRF allocation of ELEMS bf16 elements (E0202 above 8 KB per lane).
fn k_(k: &mut Ctx) {
    let _x = k.trf_alloc(0, ${ELEMS});
}
npu::kernels! { attention_output => k_ }
