use npu::*;
// Rule-sweep probe rp_reach (tools/bench/rules_probes): A copy by an engine of cluster CLUSTER into the DM of slice SLICE (E0107 across clusters).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(${SLICE}, 65536);
    let t = k.copy(engine(${CLUSTER}, 0), w.at(0), d.at(0), 4096, 4096);
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
