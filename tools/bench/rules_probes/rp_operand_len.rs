use npu::*;
// Rule-sweep probe rp_operand_len (tools/bench/rules_probes): A pass whose TRF operand holds XLEN elements for a 128-column tile (E0304 unless equal).
fn k_(k: &mut Ctx) {
    let d = k.dm_alloc(0, 65536);
    let x = k.trf_alloc(0, ${XLEN});
    let a = k.vrf_alloc(0, 8);
    let t = k.pass(&Pass { slice: 0, w: Tile { addr: d.addr, rows: 8, cols: 128, pitch: 128, dt: Dt::Fp8E4m3 }, scales: None, x, acc: a, accumulate: false });
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
