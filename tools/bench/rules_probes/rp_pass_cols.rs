use npu::*;
// Rule-sweep probe rp_pass_cols (tools/bench/rules_probes): A pass over COLS columns of an fp8 tile (E0302 when not a multiple of 64).
fn k_(k: &mut Ctx) {
    let d = k.dm_alloc(0, 65536);
    let x = k.trf_alloc(0, ${COLS});
    let a = k.vrf_alloc(0, 8);
    let t = k.pass(&Pass { slice: 0, w: Tile { addr: d.addr, rows: 8, cols: ${COLS}, pitch: ${COLS}, dt: Dt::Fp8E4m3 }, scales: None, x, acc: a, accumulate: false });
    k.wait(t);
}
npu::kernels! { attention_output => k_ }
