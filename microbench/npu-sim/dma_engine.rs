// Probe: one DMA engine, HBM -> DM. ${commands} commands, each waited on before the next is
// issued (a command queued behind another may have its startup hidden under that transfer),
// each moving ${bytes} bytes in ${packet}-byte packets. Measures the per-command startup, the
// per-packet overhead and the engine's bandwidth:
// cycles / commands = startup + packets * overhead + bytes / bandwidth.
use npu::*;

fn probe(k: &mut Ctx) {
    let (bytes, packet, commands): (u64, u32, u32) = (${bytes}, ${packet}, ${commands});
    let buffer: u32 = bytes.min(65536) as u32; // DM footprint; larger transfers re-read it
    let outer = (bytes / buffer as u64) as u32;
    let src = k.hbm_alloc(buffer as u64);
    let dst = k.dm_alloc(0, buffer);
    let e = engine(0, 0);
    for _ in 0..commands {
        let seq = [lp(outer, 0, 0), lp(buffer / packet, packet as i64, packet as i64)];
        let t = k.dma(e, src.at(0), dst.at(0), packet, &seq);
        k.wait(t);
    }
}
npu::kernels! { ${kernel} => probe }
