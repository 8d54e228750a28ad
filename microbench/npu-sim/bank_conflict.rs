// Probe: one DMA command of ${runs} runs x ${run_len} packets of 64 bytes, HBM -> DM. Within a
// run the DM stride is 4096 bytes (every packet in the same bank of a 16-bank DM) when
// conflict = 1, or 4352 bytes (a different bank each packet) when conflict = 0; each run starts
// 256 bytes after the previous one (another bank). Keep run_len short: long runs of same-bank
// accesses hang the device. Measures the bank-conflict penalty.
use npu::*;

fn probe(k: &mut Ctx) {
    let (runs, run_len, conflict): (u32, u32, u32) = (${runs}, ${run_len}, ${conflict});
    let stride: i64 = if conflict == 1 { 4096 } else { 4352 };
    let src = k.hbm_alloc(run_len as u64 * 256);
    let dst = k.dm_alloc(0, runs * 256 + run_len * 4352);
    let seq = [lp(runs, 0, 256), lp(run_len, 256, stride)];
    let t = k.dma(engine(0, 0), src.at(0), dst.at(0), 64, &seq);
    k.wait(t);
}
npu::kernels! { ${kernel} => probe }
