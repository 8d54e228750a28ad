use npu::*;
// Rule-sweep probe rp_unused (tools/bench/rules_probes): an unused local variable (a rustc warning, E0002; the design is accepted).
fn k_(k: &mut Ctx) {
    let unused = ${VALUE};
    let _ = k.dm_alloc(0, 4096);
}
npu::kernels! { attention_output => k_ }
