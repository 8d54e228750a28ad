// Probe: one DMA command of ${run_len} consecutive 64-byte packets into the same DM address
// (so the same bank every time). Long runs hang the device: run with a short timeout; a timeout
// is the finding. Measures the longest safe run of same-bank accesses.
use npu::*;

fn probe(k: &mut Ctx) {
    let run_len: u32 = ${run_len};
    let src = k.hbm_alloc(run_len as u64 * 256);
    let dst = k.dm_alloc(0, 64);
    let t = k.dma(engine(0, 0), src.at(0), dst.at(0), 64, &[lp(run_len, 256, 0)]);
    k.wait(t);
}
npu::kernels! { ${kernel} => probe }
