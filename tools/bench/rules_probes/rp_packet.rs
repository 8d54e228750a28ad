use npu::*;
// Rule-sweep probe rp_packet (tools/bench/rules_probes): One DMA copy of one PACKET-byte packet (E0101 above the packet limit).
fn k_(k: &mut Ctx) {
    let w = k.tensor("wo");
    let d = k.dm_alloc(0, 65536);
    let t = k.copy(engine(0, 0), w.at(0), d.at(0), ${PACKET}, ${PACKET});
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
