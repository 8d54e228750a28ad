use npu::*;
// Rule-sweep probe rp_seq_entries (tools/bench/rules_probes): A sequencer program of ENTRIES entries (E0102 above 8).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(0, 65536);
    let t = k.dma(engine(0, 0), w.at(0), d.at(0), 256, &[lp(1, 0, 0); ${ENTRIES}]);
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
