use npu::*;
// Rule-sweep probe rp_pitch (tools/bench/rules_probes): A pass over an fp8 tile of COLS columns with a row pitch of PITCH bytes (E0303 when the pitch is below a row).
fn k_(k: &mut Ctx) {
    let d = k.dm_alloc(0, 65536);
    let x = k.trf_alloc(0, ${COLS});
    let a = k.vrf_alloc(0, 8);
    let t = k.pass(&Pass { slice: 0, w: Tile { addr: d.addr, rows: 8, cols: ${COLS}, pitch: ${PITCH}, dt: Dt::Fp8E4m3 }, scales: None, x, acc: a, accumulate: false });
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
