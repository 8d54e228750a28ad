use npu::*;
// Rule-sweep probe rp_copy_bytes (tools/bench/rules_probes): A copy of BYTES bytes in 4096-byte packets (E0112 unless a multiple of the packet).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(0, 65536);
    let t = k.copy(engine(0, 0), w.at(0), d.at(0), ${BYTES}, 4096);
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
