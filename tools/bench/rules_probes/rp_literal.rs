use npu::*;
// Rule-sweep probe rp_literal (tools/bench/rules_probes): A u8 literal of VALUE (a rustc error, E0001, above 255).
fn k_(k: &mut Ctx) {
    let v: u8 = ${VALUE};
    let _ = k.dm_alloc(0, 256 * v as u32);
}
npu::kernels! { attention_output => k_ }
