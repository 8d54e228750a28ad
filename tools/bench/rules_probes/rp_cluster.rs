use npu::*;
// Rule-sweep probe rp_cluster (tools/bench/rules_probes): A copy on engine 0 of cluster CLUSTER into a slice of that cluster (E0106 when it does not exist).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(if ${CLUSTER} < 2 { ${CLUSTER} * 8 } else { 0 }, 65536);
    let t = k.copy(engine(${CLUSTER}, 0), w.at(0), d.at(0), 4096, 4096);
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
