use npu::*;
// Rule-sweep probe rp_engine (tools/bench/rules_probes): A copy on engine ENGINE of cluster 0 (E0106 when it does not exist).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(0, 65536);
    let t = k.copy(engine(0, ${ENGINE}), w.at(0), d.at(0), 4096, 4096);
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
