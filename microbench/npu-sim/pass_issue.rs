// Probe: ${passes} tensor-unit passes back to back on slice 0, each an fp8 tile of ${rows} rows
// x ${cols} columns. Measures the per-pass issue cost and the contraction rate:
// cycles = base + passes * (issue + rows * cols / macs_per_cycle).
use npu::*;

fn probe(k: &mut Ctx) {
    let (rows, cols, passes): (u32, u32, u32) = (${rows}, ${cols}, ${passes});
    let w = k.dm_alloc(0, rows * cols);
    let x = k.trf_alloc(0, cols);
    let acc = k.vrf_alloc(0, rows);
    let tile = Tile { addr: w.addr, rows, cols, pitch: cols, dt: Dt::Fp8E4m3 };
    let mut last = None;
    for _ in 0..passes {
        last = Some(k.pass(&Pass { slice: 0, w: tile, scales: None, x, acc, accumulate: true }));
    }
    k.wait(last.unwrap());
}
npu::kernels! { ${kernel} => probe }
