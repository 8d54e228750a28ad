use npu::*;
// Rule-sweep probe rp_pass_rows (tools/bench/rules_probes): A pass over ROWS rows of an fp8 tile (E0301 when not a multiple of the lanes).
fn k_(k: &mut Ctx) {
    let d = k.dm_alloc(0, 65536);
    let x = k.trf_alloc(0, 128);
    let a = k.vrf_alloc(0, ${ROWS});
    let t = k.pass(&Pass { slice: 0, w: Tile { addr: d.addr, rows: ${ROWS}, cols: 128, pitch: 128, dt: Dt::Fp8E4m3 }, scales: None, x, acc: a, accumulate: false });
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
