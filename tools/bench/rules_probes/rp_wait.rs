use npu::*;
// Rule-sweep probe rp_wait (tools/bench/rules_probes): A copy waited on (WAIT = 1) or not (E0109).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(0, 65536);
    let t = k.copy(engine(0, 0), w.at(0), d.at(0), 4096, 4096);
    if ${WAIT} == 1 { k.wait(t); }
}
npu::kernels! { attention_output => k_ }
