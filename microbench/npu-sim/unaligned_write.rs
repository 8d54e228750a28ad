// Probe: one DMA engine, DM -> HBM, ${bytes} bytes in ${packet}-byte packets written at HBM
// offset ${offset} (0: aligned). Measures the cost of unaligned HBM writes against aligned ones.
use npu::*;

fn probe(k: &mut Ctx) {
    let (bytes, packet, offset): (u64, u32, u64) = (${bytes}, ${packet}, ${offset});
    let buffer: u32 = bytes.min(65536) as u32;
    let outer = (bytes / buffer as u64) as u32;
    let src = k.dm_alloc(0, buffer);
    let dst = k.hbm_alloc(buffer as u64 + 4096);
    let seq = [lp(outer, 0, 0), lp(buffer / packet, packet as i64, packet as i64)];
    let t = k.dma(engine(0, 0), src.at(0), dst.at(offset), packet, &seq);
    k.wait(t);
}
npu::kernels! { ${kernel} => probe }
